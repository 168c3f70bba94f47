//! A grant that comes too late to be used is released, never handed over.
//!
//! A holder measures its deadline from the moment it *sent* the request, so an
//! answer that takes most of the TTL (a slow store, a process paused between
//! request and answer) leaves a grant that is about to end, or already has: a
//! caller handed it would act inside the next holder's lease. The client keeps
//! a grant only if it leaves time for one renewal before its stop-by; a late
//! one is released and the wait goes on (a try says why it failed).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tenure_core::{
    AcquireRequest, AllAttempt, Attempt, BreakNote, CasOptions, CasStore, Client, Clock, Error, Grant, Health,
    LeaseName, LeaseOptions, LeaseState, LeaseStore, ReleaseRequest, Released, Result, SystemClock,
};

const TTL: Duration = Duration::from_secs(1);
/// Longer than the TTL: a grant answered this late is void on arrival.
const LATE: Duration = Duration::from_millis(1_200);

/// A store whose first `late` answers to an acquisition come [`LATE`] after
/// the grant was made (the store granted; its answer was slow).
#[derive(Debug)]
struct Slow {
    inner: Arc<dyn LeaseStore>,
    late: AtomicU32,
    granted: parking_lot::Mutex<Vec<u64>>,
    /// How long every answer to a release takes.
    slow_release: Duration,
}

impl Slow {
    fn new(name: &str, late: u32) -> Arc<Self> {
        let url = format!("memory://late-grant-{name}-{}", std::process::id());
        let memory = tenure_core::store::memory::open(&url).expect("open");
        let inner = Arc::new(CasStore::new(memory, SystemClock::shared(), CasOptions::default()));
        Arc::new(Self {
            inner,
            late: AtomicU32::new(late),
            granted: parking_lot::Mutex::default(),
            slow_release: Duration::ZERO,
        })
    }

    fn with_slow_release(name: &str, slow: Duration) -> Arc<Self> {
        let mut store = Arc::into_inner(Self::new(name, 0)).expect("one handle");
        store.slow_release = slow;
        Arc::new(store)
    }
}

#[async_trait]
impl LeaseStore for Slow {
    fn url(&self) -> &str {
        self.inner.url()
    }
    fn clock(&self) -> &Arc<dyn Clock> {
        self.inner.clock()
    }
    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Attempt> {
        let out = self.inner.try_acquire(req).await;
        if let Ok(Attempt::Granted(g)) = &out {
            self.granted.lock().push(g.token);
            if self.late.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
                tokio::time::sleep(LATE).await;
            }
        }
        out
    }
    async fn renew(&self, grant: &Grant) -> Result<Grant> {
        self.inner.renew(grant).await
    }
    async fn try_acquire_all(&self, reqs: &[AcquireRequest]) -> Result<AllAttempt> {
        tenure_core::store::try_acquire_one_by_one(self, reqs).await
    }
    async fn release(&self, grant: &Grant, req: &ReleaseRequest) -> Result<Released> {
        let out = self.inner.release(grant, req).await;
        tokio::time::sleep(self.slow_release).await;
        out
    }
    async fn inspect(&self, name: &LeaseName) -> Result<LeaseState> {
        self.inner.inspect(name).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<LeaseName>> {
        self.inner.list(prefix).await
    }
    async fn break_lease(&self, seen: &LeaseState, only_token: Option<u64>, note: Option<&BreakNote>) -> Result<()> {
        self.inner.break_lease(seen, only_token, note).await
    }
}

fn opts(timeout: Duration) -> LeaseOptions {
    LeaseOptions::exclusive().with_ttl(TTL).with_timeout(timeout)
}

async fn holders(store: &Slow, name: &str) -> usize {
    store.inspect(&LeaseName::new(name).expect("name")).await.expect("inspect").holders.len()
}

#[tokio::test]
async fn a_try_answered_late_fails_saying_so_and_leaves_the_lease_free() {
    let store = Slow::new("try", 1);
    let client = Client::new(store.clone());
    match client.try_acquire("job", &opts(Duration::ZERO)).await {
        Err(e @ Error::Store { .. }) => {
            assert!(e.is_transient(), "a late answer is a passing failure: {e}");
            assert!(e.to_string().contains("too late"), "{e}");
        }
        other => panic!("a grant answered after its deadline was handed over: {other:?}"),
    }
    assert_eq!(store.granted.lock().len(), 1, "the store granted once");
    assert_eq!(holders(&store, "job").await, 0, "the late grant was not released");
}

#[tokio::test]
async fn a_wait_answered_late_once_releases_that_grant_and_takes_a_timely_one() {
    let store = Slow::new("wait", 1);
    let client = Client::new(store.clone());
    let lease = client.acquire("job", &opts(Duration::from_secs(10))).await.expect("a timely grant after a late one");
    let granted = store.granted.lock().clone();
    assert_eq!(granted.len(), 2, "granted {granted:?}");
    assert_eq!(lease.token(), granted[1], "the caller holds the timely grant");
    assert!(granted[1] > granted[0]);
    let Health::Held { stop_by } = lease.health() else { panic!("not held: {:?}", lease.health()) };
    assert!(stop_by > store.clock().mono(), "handed a grant already past its stop-by");
    lease.release().await.expect("release");
}

#[tokio::test]
async fn a_wait_answered_late_every_time_ends_at_its_timeout_holding_nothing() {
    let store = Slow::new("always", u32::MAX);
    let client = Client::new(store.clone());
    match client.acquire("job", &opts(Duration::from_secs(3))).await {
        Err(e @ Error::Store { .. }) => assert!(e.to_string().contains("too late"), "{e}"),
        other => panic!("expected the last failure, a late grant: {other:?}"),
    }
    let granted = store.granted.lock().clone();
    assert!(granted.len() >= 2, "the wait went on after a late grant: {granted:?}");
    // Every late grant the client heard of was released; only the one whose
    // answer was still on its way at the timeout (never heard of, so never
    // used) may remain, to expire at its TTL.
    let state = store.inspect(&LeaseName::new("job").expect("name")).await.expect("inspect");
    let left: Vec<u64> = state.holders.iter().map(|h| h.token).collect();
    assert!(left.iter().all(|t| Some(t) == granted.last()), "late grants left held: {left:?} of {granted:?}");
}

/// One slow answer does not abandon a release: it is given while the grant is
/// live (at TTL 1 s, a renewal interval is 125 ms; this answer takes 500 ms).
#[tokio::test]
async fn a_release_answered_slowly_still_frees_the_lease() {
    let store = Slow::with_slow_release("release", Duration::from_millis(500));
    let client = Client::new(store.clone());
    let lease = client.acquire("job", &opts(Duration::from_secs(5))).await.expect("free");
    assert_eq!(lease.release().await.expect("a slow release still answers"), Released::Released);
    assert_eq!(holders(&store, "job").await, 0);
}
