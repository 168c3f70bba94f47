//! A store that never answers (a hard-mounted NFS whose server went away) must
//! not hold a caller past its own deadlines.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tenure_core::{
    Backend, CasOptions, CasStore, Client, Error, LeaseOptions, Put, PutOptions, Result, Stored, SystemClock,
};

/// Every operation waits forever.
#[derive(Debug)]
struct Hung;

#[async_trait]
impl Backend for Hung {
    fn url(&self) -> &str {
        "hung://"
    }
    async fn get(&self, _key: &tenure_core::Key) -> Result<Option<Stored>> {
        std::future::pending().await
    }
    async fn put(&self, _key: &tenure_core::Key, _value: Bytes, _opts: PutOptions) -> Result<Put> {
        std::future::pending().await
    }
    async fn list(&self, _prefix: &str) -> Result<Vec<String>> {
        std::future::pending().await
    }
}

fn client() -> Client {
    Client::new(Arc::new(CasStore::new(Arc::new(Hung), SystemClock::shared(), CasOptions::default())))
}

/// The attempt under way at the timeout is let finish for
/// [`tenure_core::FINISH_GRACE`] (it may be writing a grant), and no longer.
#[tokio::test(start_paused = true)]
async fn a_wait_on_a_store_that_never_answers_ends_at_the_timeout_and_its_attempts_grace() {
    let started = tokio::time::Instant::now();
    let opts = LeaseOptions::default().with_timeout(Duration::from_secs(3));
    let end = Duration::from_secs(3) + tenure_core::FINISH_GRACE;
    match client().acquire("x", &opts).await {
        Err(Error::Timeout { holder, waited, .. }) => {
            assert!(holder.contains("did not answer"), "{holder}");
            assert_eq!(waited, end);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert_eq!(started.elapsed(), end, "the wait ends at the timeout and the grace, not later");
}

#[tokio::test(start_paused = true)]
async fn acquire_all_is_bounded_the_same_way() {
    let opts = LeaseOptions::default().with_timeout(Duration::from_millis(500));
    let out = client().acquire_all(&["a", "b"], &opts).await;
    assert!(matches!(out, Err(Error::Timeout { .. })), "{out:?}");
}

/// Every write takes 100 ms (reads are quick).
#[derive(Debug)]
struct Slow(Arc<dyn Backend>);

#[async_trait]
impl Backend for Slow {
    fn url(&self) -> &str {
        "slow://"
    }
    async fn get(&self, key: &tenure_core::Key) -> Result<Option<Stored>> {
        self.0.get(key).await
    }
    async fn put(&self, key: &tenure_core::Key, value: Bytes, opts: PutOptions) -> Result<Put> {
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.0.put(key, value, opts).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        self.0.list(prefix).await
    }
}

/// A grant being written when the timeout runs out is the caller's (the
/// attempt is let finish for `FINISH_GRACE`), not a grant nobody holds: for
/// one lease and for a set alike.
#[tokio::test(start_paused = true)]
async fn a_grant_written_as_the_timeout_runs_out_is_the_callers() {
    let memory: Arc<dyn Backend> = tenure_core::store::memory::open("memory://").expect("memory");
    let store = CasStore::new(Arc::new(Slow(memory)), SystemClock::shared(), CasOptions::default());
    let client = Client::new(Arc::new(store));
    let opts = LeaseOptions::default().with_timeout(Duration::from_millis(10));
    let one = client.acquire("one", &opts).await.expect("granted within the grace");
    let set = client.acquire_all(&["a", "b"], &opts).await.expect("granted within the grace");
    one.release().await.expect("release");
    set.release().await.expect("release");
}
