//! The keep-alive's loss rules, on a store that can be made to fail or hang.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tenure_core::{
    Backend, CasOptions, CasStore, Client, EndedHow, Error, Health, LeaseOptions, LossReason, ManualClock,
    MemoryBackend, Mono, Put, PutOptions, Released, Result, Stored,
};

const OK: u8 = 0;
const FAIL: u8 = 1;
const HANG: u8 = 2;

/// A memory store whose writes can be made to fail or hang.
#[derive(Debug)]
struct Flaky {
    inner: MemoryBackend,
    writes: AtomicU8,
}

#[async_trait]
impl Backend for Flaky {
    fn url(&self) -> &str {
        "flaky://"
    }
    async fn get(&self, key: &tenure_core::Key) -> Result<Option<Stored>> {
        self.inner.get(key).await
    }
    async fn put(&self, key: &tenure_core::Key, value: Bytes, opts: PutOptions) -> Result<Put> {
        match self.writes.load(Ordering::SeqCst) {
            FAIL => Err(Error::store("flaky://", "writing", "injected failure")),
            HANG => std::future::pending().await,
            _ => self.inner.put(key, value, opts).await,
        }
    }
    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        self.inner.list(prefix).await
    }
    async fn watch(
        &self,
        key: &tenure_core::Key,
        seen: Option<&tenure_core::Version>,
        timeout: Duration,
    ) -> Result<bool> {
        self.inner.watch(key, seen, timeout).await
    }
}

struct Setup {
    clock: ManualClock,
    flaky: Arc<Flaky>,
    client: Client,
}

fn setup() -> Setup {
    let clock = ManualClock::new();
    let flaky = Arc::new(Flaky { inner: MemoryBackend::new(clock.shared()), writes: AtomicU8::new(OK) });
    let store = Arc::new(CasStore::new(flaky.clone(), clock.shared(), CasOptions::default()));
    Setup { client: Client::new(store), flaky, clock }
}

fn opts() -> LeaseOptions {
    // TTL 8 s: renew every 1 s, stop 0.8 s before the deadline, lost after 3 failures.
    LeaseOptions::exclusive().with_ttl(Duration::from_secs(8)).no_wait()
}

/// Advances in 10 ms steps until `done` says so or `limit` has passed; returns
/// the monotonic time reached.
async fn advance_until(s: &Setup, limit: Duration, mut done: impl FnMut() -> bool) -> Mono {
    let mut left = limit;
    while !done() && !left.is_zero() {
        let step = left.min(Duration::from_millis(10));
        s.clock.advance(step);
        left -= step;
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
    }
    tenure_core::Clock::mono(&s.clock)
}

#[tokio::test(start_paused = true)]
async fn failing_renewals_put_the_lease_at_risk_then_lose_it_to_the_outage_before_its_deadline() {
    let s = setup();
    let lease = s.client.try_acquire("l", &opts()).await.expect("acquire");
    let Health::Held { stop_by } = lease.health() else { panic!("fresh lease not held") };
    s.flaky.writes.store(FAIL, Ordering::SeqCst);
    advance_until(&s, Duration::from_secs(2), || matches!(lease.health(), Health::AtRisk { .. })).await;
    match lease.health() {
        Health::AtRisk { failures: 1, error, .. } => assert!(error.contains("injected failure"), "{error}"),
        other => panic!("one failed renewal must make the lease at risk, got {other:?}"),
    }
    let lost_at = advance_until(&s, Duration::from_secs(20), || lease.health().is_lost()).await;
    assert!(matches!(lease.health(), Health::Lost(LossReason::Outage { .. })), "{:?}", lease.health());
    assert!(lost_at < stop_by, "lost at {lost_at:?}, after stop_by {stop_by:?}");
}

#[tokio::test(start_paused = true)]
async fn one_failed_renewal_recovers_to_held() {
    let s = setup();
    let lease = s.client.try_acquire("l", &opts()).await.expect("acquire");
    s.flaky.writes.store(FAIL, Ordering::SeqCst);
    advance_until(&s, Duration::from_secs(2), || matches!(lease.health(), Health::AtRisk { .. })).await;
    s.flaky.writes.store(OK, Ordering::SeqCst);
    advance_until(&s, Duration::from_secs(2), || matches!(lease.health(), Health::Held { .. })).await;
    assert!(matches!(lease.health(), Health::Held { .. }), "{:?}", lease.health());
}

#[tokio::test(start_paused = true)]
async fn a_hung_store_cannot_carry_the_holder_past_its_stop_time() {
    let s = setup();
    let lease = s.client.try_acquire("l", &opts()).await.expect("acquire");
    let Health::Held { stop_by } = lease.health() else { panic!("fresh lease not held") };
    s.flaky.writes.store(HANG, Ordering::SeqCst);
    let lost_at = advance_until(&s, Duration::from_secs(20), || lease.health().is_lost()).await;
    assert!(lease.health().is_lost(), "a hung store must end the lease, health {:?}", lease.health());
    assert!(lost_at <= stop_by, "lost at {lost_at:?}, after stop_by {stop_by:?}");
}

#[tokio::test(start_paused = true)]
async fn a_holder_paused_past_its_deadline_is_lost_on_waking_even_if_renewal_would_succeed() {
    let s = setup();
    let lease = s.client.try_acquire("l", &opts()).await.expect("acquire");
    // The whole process was stopped (SIGSTOP, a VM pause): time jumps at once.
    s.clock.advance(Duration::from_secs(9));
    advance_until(&s, Duration::from_millis(50), || lease.health().is_lost()).await;
    assert_eq!(lease.health(), Health::Lost(LossReason::Expired));
}

#[tokio::test(start_paused = true)]
async fn dropping_a_lease_releases_it_as_dropped() {
    let s = setup();
    let lease = s.client.try_acquire("l", &opts()).await.expect("acquire");
    drop(lease);
    let other = Client::new(s.client.store().clone());
    let next = loop {
        tokio::task::yield_now().await;
        if let Ok(l) = other.try_acquire("l", &opts()).await {
            break l;
        }
    };
    assert_eq!(next.grant().predecessor.map(|p| p.how), Some(EndedHow::Dropped));
    assert_eq!(next.release().await.expect("release"), Released::Released);
}

#[tokio::test(start_paused = true)]
async fn waiting_gives_up_at_the_timeout_naming_the_holder() {
    let s = setup();
    let _held = s.client.try_acquire("l", &opts()).await.expect("acquire");
    let other = Client::new(s.client.store().clone());
    let wait = opts().with_timeout(Duration::from_secs(3));
    let task = tokio::spawn(async move { other.acquire("l", &wait).await.map(|_| ()) });
    advance_until(&s, Duration::from_secs(5), || task.is_finished()).await;
    match task.await.expect("join") {
        Err(Error::Timeout { holder, waited, .. }) => {
            assert!(holder.contains(&s.client.holder().nonce[..8]), "{holder}");
            assert!(waited >= Duration::from_secs(3));
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn waiting_rides_out_a_store_outage() {
    let s = setup();
    s.flaky.writes.store(FAIL, Ordering::SeqCst);
    let client = s.client.clone();
    let wait = opts().with_timeout(Duration::from_secs(30));
    let task = tokio::spawn(async move { client.acquire("l", &wait).await.map(|l| l.token()) });
    advance_until(&s, Duration::from_secs(2), || false).await;
    assert!(!task.is_finished(), "a store error while waiting is retried, not returned");
    s.flaky.writes.store(OK, Ordering::SeqCst);
    advance_until(&s, Duration::from_secs(5), || task.is_finished()).await;
    assert!(task.await.expect("join").is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_waiter_wakes_on_release_through_the_store_watch_without_waiting_out_its_backoff() {
    let s = setup();
    let held = s.client.try_acquire("l", &opts()).await.expect("acquire");
    let other = Client::new(s.client.store().clone());
    let wait = opts().with_timeout(Duration::from_secs(600)).with_backoff_max(Duration::from_secs(60));
    let task = tokio::spawn(async move { other.acquire("l", &wait).await.map(|l| l.token()) });
    // Let the waiter back off well past its first polls.
    advance_until(&s, Duration::from_secs(3), || false).await;
    held.release().await.expect("release");
    // No more time passes: only the watch can wake the waiter.
    for _ in 0..100 {
        if task.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(task.is_finished(), "the release must wake the waiter through the watch");
    assert!(task.await.expect("join").is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_wait_through_a_store_outage_says_the_store_failed_and_ends_with_its_error() {
    let s = setup();
    s.flaky.writes.store(FAIL, Ordering::SeqCst);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (client, log) = (s.client.clone(), seen.clone());
    let waiting = tokio::spawn(async move {
        let opts = LeaseOptions::exclusive().with_ttl(Duration::from_secs(8)).with_timeout(Duration::from_secs(1));
        client.acquire_watching("l", &opts, |busy| log.lock().expect("log").push(busy.describe())).await
    });
    advance_until(&s, Duration::from_secs(5), || waiting.is_finished()).await;
    let err = waiting.await.expect("task").expect_err("no lease can be taken while every write fails");
    assert!(matches!(err, Error::Store { .. }), "the wait must end with the store's error, got {err:?}");
    assert!(err.to_string().contains("injected failure"), "{err}");
    let seen = seen.lock().expect("log");
    assert!(!seen.is_empty(), "the waiter was never told why it waits");
    for line in seen.iter() {
        assert!(line.contains("the store failed") && line.contains("injected failure"), "{line}");
    }
}

/// A store that fails for a while (its writes refused) is waited out by
/// `acquire_all` like a busy lease, from its very first attempt: it gets
/// its leases once the store works again, within its timeout.
#[tokio::test(start_paused = true)]
async fn acquire_all_waits_out_a_store_that_fails_at_first() {
    let s = setup();
    s.flaky.writes.store(FAIL, Ordering::SeqCst);
    let opts = opts().with_timeout(Duration::from_secs(30));
    let client = s.client.clone();
    let set = tokio::spawn(async move { client.acquire_all(&["x", "y"], &opts).await });
    advance_until(&s, Duration::from_secs(2), || false).await;
    assert!(!set.is_finished(), "a store error must be waited out, not returned");
    s.flaky.writes.store(OK, Ordering::SeqCst);
    advance_until(&s, Duration::from_secs(5), || set.is_finished()).await;
    let set = set.await.expect("join").expect("granted once the store works");
    assert_eq!(set.grants().len(), 2);
}
