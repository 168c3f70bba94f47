//! Breaking a lease whose holder renews between the look and the break
//! (`tenure::store::break_as_seen`): a renewal of the grants looked at is
//! looked past, and the break lands; a new grant in between is not broken.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tenure_core::store::break_as_seen;
use tenure_core::{
    AcquireRequest, AllAttempt, Attempt, BreakNote, CasOptions, CasStore, Client, Clock, Error, Grant, LeaseName,
    LeaseOptions, LeaseState, LeaseStore, ReleaseRequest, Released, Result, SystemClock,
};

/// A store that runs `before_first_break` once, just before the first break
/// reaches the store: a holder's write landing between the look and the break.
struct Meddling {
    inner: Arc<dyn LeaseStore>,
    meddled: AtomicBool,
    before_first_break: Box<dyn Fn() -> futures::future::BoxFuture<'static, ()> + Send + Sync>,
}

impl std::fmt::Debug for Meddling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meddling").finish_non_exhaustive()
    }
}

#[async_trait]
impl LeaseStore for Meddling {
    fn url(&self) -> &str {
        self.inner.url()
    }
    fn clock(&self) -> &Arc<dyn Clock> {
        self.inner.clock()
    }
    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Attempt> {
        self.inner.try_acquire(req).await
    }
    async fn renew(&self, grant: &Grant) -> Result<Grant> {
        self.inner.renew(grant).await
    }
    async fn release(&self, grant: &Grant, req: &ReleaseRequest) -> Result<Released> {
        self.inner.release(grant, req).await
    }
    async fn inspect(&self, name: &LeaseName) -> Result<LeaseState> {
        self.inner.inspect(name).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<LeaseName>> {
        self.inner.list(prefix).await
    }
    async fn break_lease(&self, seen: &LeaseState, only_token: Option<u64>, note: Option<&BreakNote>) -> Result<()> {
        if !self.meddled.swap(true, Ordering::SeqCst) {
            (self.before_first_break)().await;
        }
        self.inner.break_lease(seen, only_token, note).await
    }
    async fn try_acquire_all(&self, reqs: &[AcquireRequest]) -> Result<AllAttempt> {
        self.inner.try_acquire_all(reqs).await
    }
}

fn store(url: &str) -> Arc<dyn LeaseStore> {
    let memory = tenure_core::store::memory::open(url).expect("open");
    Arc::new(CasStore::new(memory, SystemClock::shared(), CasOptions::default()))
}

fn opts() -> LeaseOptions {
    LeaseOptions::exclusive().with_ttl(Duration::from_secs(30)).no_wait()
}

#[tokio::test]
async fn a_renewal_between_the_look_and_the_break_is_looked_past_and_the_grant_is_broken() {
    let url = format!("memory://break-renewed-{}", std::process::id());
    let inner = store(&url);
    let holder = Client::new(inner.clone());
    let lease = holder.try_acquire("b", &opts()).await.expect("free");
    let grant = lease.grant();
    let renewing = inner.clone();
    let meddling = Meddling {
        inner: inner.clone(),
        meddled: AtomicBool::new(false),
        before_first_break: Box::new(move || {
            let (store, grant) = (renewing.clone(), grant.clone());
            Box::pin(async move {
                store.renew(&grant).await.expect("the holder renews");
            })
        }),
    };
    let seen = meddling.inspect(&LeaseName::new("b").expect("name")).await.expect("inspect");
    // The store alone refuses the break the renewal overtook.
    let stale = seen.clone();
    match break_as_seen(&meddling, seen, None, None).await {
        Ok(broken) => assert_ne!(broken.version, stale.version, "the break was made on a fresh look"),
        Err(e) => panic!("a renewal in between must not stop the break: {e}"),
    }
    let after = inner.inspect(&LeaseName::new("b").expect("name")).await.expect("inspect");
    assert!(after.holders.is_empty(), "the grant was broken: {after:?}");
    drop(lease);
}

#[tokio::test]
async fn a_new_grant_between_the_look_and_the_break_is_not_broken() {
    let url = format!("memory://break-new-grant-{}", std::process::id());
    let inner = store(&url);
    let first = Client::new(inner.clone()).try_acquire("b", &opts()).await.expect("free");
    let taking = inner.clone();
    let token = first.token();
    let first = Arc::new(tokio::sync::Mutex::new(Some(first)));
    let releasing = first.clone();
    let meddling = Meddling {
        inner: inner.clone(),
        meddled: AtomicBool::new(false),
        before_first_break: Box::new(move || {
            let (store, first) = (taking.clone(), releasing.clone());
            Box::pin(async move {
                let lease = first.lock().await.take().expect("the first holder");
                lease.release().await.expect("release");
                let next = Client::new(store).try_acquire("b", &opts()).await.expect("the next holder");
                *first.lock().await = Some(next);
            })
        }),
    };
    let seen = meddling.inspect(&LeaseName::new("b").expect("name")).await.expect("inspect");
    match break_as_seen(&meddling, seen, None, None).await {
        Err(Error::Changed { .. }) => {}
        other => panic!("a lease that changed hands must not be broken, got {other:?}"),
    }
    let after = inner.inspect(&LeaseName::new("b").expect("name")).await.expect("inspect");
    assert_eq!(after.holders.len(), 1, "the new holder keeps its grant");
    assert!(after.holders[0].token > token, "held by the next holder");
}
