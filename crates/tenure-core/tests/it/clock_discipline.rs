//! The clock discipline of CasStore: takeover only after watching a grant
//! unchanged for a full TTL, or once its wall deadline is older than max_skew;
//! never on a skewed wall clock alone.

use std::sync::Arc;
use std::time::Duration;

use tenure_core::{
    AcquireRequest, Attempt, CasOptions, CasStore, Clock, EndedHow, Grant, Holder, LeaseName, LeaseStore, ManualClock,
    MemoryBackend, Mode,
};

const TTL: Duration = Duration::from_secs(10);
const SKEW: Duration = Duration::from_secs(2);

fn store(backend: &Arc<MemoryBackend>, clock: &ManualClock) -> CasStore {
    CasStore::new(backend.clone(), clock.shared(), CasOptions::default().with_max_skew(SKEW))
}

fn request(holder: &str) -> AcquireRequest {
    AcquireRequest {
        name: LeaseName::new("l").expect("name"),
        mode: Mode::Exclusive,
        ttl: TTL,
        holder: Arc::new(Holder::current().with_nonce(holder)),
        retake: false,
        meta: None,
    }
}

async fn try_acquire(s: &CasStore, holder: &str) -> Option<Grant> {
    match s.try_acquire(&request(holder)).await.expect("try_acquire") {
        Attempt::Granted(g) => Some(g),
        Attempt::Busy(_) => None,
    }
}

fn setup() -> (Arc<MemoryBackend>, ManualClock) {
    let clock = ManualClock::starting_at(1_000_000_000);
    (Arc::new(MemoryBackend::new(clock.shared())), clock)
}

#[tokio::test]
async fn a_fresh_contender_waits_for_deadline_plus_skew_by_the_wall_clock() {
    let (backend, clock) = setup();
    let holder = try_acquire(&store(&backend, &clock), "holder").await.expect("free");
    clock.advance(TTL + SKEW);
    assert!(try_acquire(&store(&backend, &clock), "fresh").await.is_none(), "taken over at deadline + skew exactly");
    clock.advance(Duration::from_millis(1));
    let next = try_acquire(&store(&backend, &clock), "fresh").await.expect("taken over after deadline + skew");
    assert!(next.token > holder.token);
    assert_eq!(next.predecessor.map(|p| p.how), Some(EndedHow::Expired));
}

#[tokio::test]
async fn a_contender_whose_clock_runs_ahead_within_the_skew_bound_cannot_steal_a_live_lease() {
    let (backend, clock) = setup();
    try_acquire(&store(&backend, &clock), "holder").await.expect("free");
    let fast = clock.skewed(SKEW.as_millis() as i64 - 1);
    // Just before the holder's own deadline, the fast contender reads the record
    // for the first time: its wall clock says the deadline passed, but not by more
    // than the skew bound.
    clock.advance(TTL - Duration::from_millis(1));
    assert!(try_acquire(&store(&backend, &fast), "fast").await.is_none());
}

#[tokio::test]
async fn a_contender_with_a_wildly_wrong_clock_still_takes_over_by_watching() {
    let (backend, clock) = setup();
    try_acquire(&store(&backend, &clock), "holder").await.expect("free");
    // Ten minutes slow: the wall-clock rule will never fire in this test.
    let slow = clock.skewed(-600_000);
    let contender = store(&backend, &slow);
    assert!(try_acquire(&contender, "slow").await.is_none(), "first sight");
    clock.advance(TTL - Duration::from_millis(1));
    assert!(try_acquire(&contender, "slow").await.is_none(), "watched for less than a TTL");
    clock.advance(Duration::from_millis(1));
    assert!(try_acquire(&contender, "slow").await.is_some(), "watched unchanged for a full TTL");
}

#[tokio::test]
async fn a_contender_whose_clock_runs_far_ahead_takes_over_early_showing_why_the_bound_matters() {
    // The negative control for the test above: a clock beyond the configured skew
    // bound breaks the wall-clock rule. This is the assumption tenure documents.
    let (backend, clock) = setup();
    try_acquire(&store(&backend, &clock), "holder").await.expect("free");
    let broken = clock.skewed((TTL + SKEW).as_millis() as i64 + 1);
    assert!(try_acquire(&store(&backend, &broken), "broken").await.is_some());
}

#[tokio::test]
async fn a_renewal_restarts_the_contenders_watch() {
    let (backend, clock) = setup();
    let holder_store = store(&backend, &clock);
    let grant = try_acquire(&holder_store, "holder").await.expect("free");
    let slow = clock.skewed(-600_000);
    let contender = store(&backend, &slow);
    assert!(try_acquire(&contender, "c").await.is_none());
    clock.advance(TTL / 2);
    holder_store.renew(&grant).await.expect("renew");
    clock.advance(Duration::from_millis(1));
    assert!(try_acquire(&contender, "c").await.is_none(), "first sight of the renewed grant");
    clock.advance(TTL / 2);
    assert!(
        try_acquire(&contender, "c").await.is_none(),
        "a full TTL since first sight of the old grant is not enough"
    );
    clock.advance(TTL / 2 - Duration::from_millis(1));
    assert!(try_acquire(&contender, "c").await.is_none(), "the renewed grant was watched for less than a TTL");
    clock.advance(Duration::from_millis(1));
    assert!(try_acquire(&contender, "c").await.is_some(), "watched unchanged for a full TTL since the renewal");
}

#[tokio::test]
async fn inspecting_never_writes() {
    let (backend, clock) = setup();
    try_acquire(&store(&backend, &clock), "holder").await.expect("free");
    clock.advance(TTL * 10);
    let before = tenure_core::Backend::get(&*backend, &tenure_core::Key::new("l").expect("key"))
        .await
        .expect("get")
        .expect("present")
        .version;
    let state = store(&backend, &clock).inspect(&LeaseName::new("l").expect("name")).await.expect("inspect");
    assert!(state.holders.is_empty() && state.expired.len() == 1, "{state:?}");
    let after = tenure_core::Backend::get(&*backend, &tenure_core::Key::new("l").expect("key"))
        .await
        .expect("get")
        .expect("present")
        .version;
    assert_eq!(before, after, "inspect must not touch the record, even when it could clean it up");
    let _ = clock.wall_ms();
}

/// A store like S3 or Azure: versions without a sequence, and the store's own
/// modification time, if `times` (over the memory store, on its clock).
#[derive(Debug)]
struct NoSequence {
    inner: Arc<MemoryBackend>,
    times: bool,
}

#[async_trait::async_trait]
impl tenure_core::Backend for NoSequence {
    fn url(&self) -> &str {
        self.inner.url()
    }
    async fn get(&self, key: &tenure_core::Key) -> tenure_core::Result<Option<tenure_core::Stored>> {
        Ok(self.inner.get(key).await?.map(|mut s| {
            s.version.seq = None;
            s.modified_ms = s.modified_ms.filter(|_| self.times);
            s
        }))
    }
    async fn put(
        &self,
        key: &tenure_core::Key,
        value: bytes::Bytes,
        mut opts: tenure_core::PutOptions,
    ) -> tenure_core::Result<tenure_core::Put> {
        if let tenure_core::PutMode::Update(v) = &mut opts.mode {
            v.seq = v.tag.parse().ok();
        }
        Ok(match self.inner.put(key, value, opts).await? {
            tenure_core::Put::Done(mut v) => {
                v.seq = None;
                tenure_core::Put::Done(v)
            }
            conflict => conflict,
        })
    }
    async fn list(&self, prefix: &str) -> tenure_core::Result<Vec<String>> {
        self.inner.list(prefix).await
    }
}

const CORRUPT_TTL: Duration = Duration::from_secs(60);

/// A handle on `backend` measuring time on `clock`.
fn handle(backend: &Arc<NoSequence>, clock: &ManualClock) -> CasStore {
    let opts = CasOptions::default().with_max_skew(SKEW).with_corrupt_ttl(CORRUPT_TTL);
    CasStore::new(backend.clone(), clock.shared(), opts)
}

/// Replaces the record of "l", unreadable since `clock`'s now, as `store` watching
/// it for the corrupt ttl (its wall clock may be anything): the new grant.
async fn replace_corrupt(backend: &NoSequence, clock: &ManualClock, store: &CasStore, holder: &str) -> Grant {
    backend.inner.overwrite("l", bytes::Bytes::from_static(b"{\"tenure\":1,\"tru"));
    assert!(try_acquire(store, holder).await.is_none(), "a fresh unreadable record blocks");
    clock.advance(CORRUPT_TTL);
    let grant = try_acquire(store, holder).await.expect("watched unreadable for the corrupt ttl");
    assert_eq!(grant.predecessor.as_ref().map(|p| p.how), Some(EndedHow::Corrupt));
    grant
}

#[tokio::test]
async fn a_token_after_a_corrupt_record_comes_from_the_stores_time_not_a_slow_clients() {
    // The store's clock (the memory store's) is right; one client agrees, the
    // other is an hour behind.
    let clock = ManualClock::new();
    let backend = Arc::new(NoSequence { inner: Arc::new(MemoryBackend::new(clock.shared())), times: true });
    let first = replace_corrupt(&backend, &clock, &handle(&backend, &clock), "right").await;
    let slow = clock.skewed(-3_600_000);
    let second = replace_corrupt(&backend, &clock, &handle(&backend, &slow), "slow").await;
    assert!(second.token > first.token, "token {} after token {}: moved back", second.token, first.token);
}

#[tokio::test]
async fn a_token_after_a_corrupt_record_is_above_every_token_the_handle_saw() {
    // A store that says neither a sequence nor a time: only the client's clock
    // is left, and this one is an hour behind, but it saw a higher token.
    let clock = ManualClock::new();
    let backend = Arc::new(NoSequence { inner: Arc::new(MemoryBackend::new(clock.shared())), times: false });
    let first = replace_corrupt(&backend, &clock, &handle(&backend, &clock), "right").await;
    let slow = clock.skewed(-3_600_000);
    let slow_store = handle(&backend, &slow);
    assert!(try_acquire(&slow_store, "slow").await.is_none(), "it reads the record: held by token {}", first.token);
    let second = replace_corrupt(&backend, &clock, &slow_store, "slow").await;
    assert!(second.token > first.token, "token {} after token {} it saw: moved back", second.token, first.token);
}

#[tokio::test]
async fn a_record_deleted_by_hand_restarts_no_token_below_what_the_handle_saw() {
    let (backend, clock) = setup();
    let backend = Arc::new(NoSequence { inner: backend, times: true });
    let s = handle(&backend, &clock);
    let first = replace_corrupt(&backend, &clock, &s, "first").await;
    s.release(&first, &Default::default()).await.expect("release");
    // Gone, as a lifecycle rule would delete it: this handle still remembers.
    backend.inner.remove("l");
    let other = handle(&backend, &clock);
    assert_eq!(try_acquire(&other, "other").await.expect("free").token, 1, "a handle that saw nothing starts over");
    backend.inner.remove("l");
    let next = try_acquire(&s, "next").await.expect("free");
    assert!(next.token > first.token, "token {} after token {}: moved back", next.token, first.token);
}
