//! Keeping a manual clock from outrunning the store.
//!
//! On a manual clock the suite moves time about ten times faster than real time,
//! so a renewal that a loaded machine takes 30 ms to write would look like 300 ms
//! to the keep-alive, run out its budget, and lose a lease that nothing was
//! threatening. [`Paced`] wraps every harness the suite runs: its stores count the
//! renewals in flight, and [`crate::advance`] moves the clock only when none is.
//! On the test's timeline a store then answers at once, however slow the machine;
//! a renewal that never answers still runs out its budget once the wait for it
//! ([`RENEWAL_WAIT`]) is over.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;
use tenure_core::{
    AcquireRequest, AllAttempt, Attempt, Backend, BreakNote, Busy, Clock, Grant, LeaseName, LeaseState, LeaseStore,
    ReleaseRequest, Released, Result,
};

use crate::{Harness, Time};

/// How long, in real time, the clock waits for a renewal in flight before it
/// takes it as hung and moves on.
pub const RENEWAL_WAIT: Duration = Duration::from_secs(10);

/// A harness whose stores note their renewals in flight.
pub struct Paced<H> {
    inner: H,
    renewing: Arc<Renewals>,
}

impl<H> std::fmt::Debug for Paced<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Paced").finish_non_exhaustive()
    }
}

impl<H: Harness> Paced<H> {
    /// Wraps `inner`.
    pub fn new(inner: H) -> Self {
        Self { inner, renewing: Arc::default() }
    }
}

#[async_trait]
impl<H: Harness> Harness for Paced<H> {
    async fn store(&self) -> Arc<dyn LeaseStore> {
        Arc::new(Noting { inner: self.inner.store().await, renewing: self.renewing.clone() })
    }
    fn time(&self) -> Time {
        self.inner.time()
    }
    fn backend(&self) -> Option<Arc<dyn Backend>> {
        self.inner.backend()
    }
    async fn corrupt(&self, name: &str, bytes: &[u8]) -> bool {
        self.inner.corrupt(name, bytes).await
    }
    fn settle(&self) -> Duration {
        self.inner.settle()
    }
    fn latest_renewal_in_flight(&self) -> Option<Instant> {
        self.renewing.latest()
    }
}

/// Waits, in real time, until `h` has no renewal in flight that began less than
/// [`RENEWAL_WAIT`] ago.
pub(crate) async fn until_no_renewal(h: &dyn Harness) {
    while h.latest_renewal_in_flight().is_some_and(|began| began.elapsed() < RENEWAL_WAIT) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The renewals in flight, by the order they began in.
#[derive(Debug, Default)]
struct Renewals(Mutex<Began>);

#[derive(Debug, Default)]
struct Began {
    next_id: u64,
    at: BTreeMap<u64, Instant>,
}

impl Renewals {
    fn latest(&self) -> Option<Instant> {
        self.0.lock().at.last_key_value().map(|(_, began)| *began)
    }

    fn begin(self: &Arc<Self>) -> InFlight {
        let mut began = self.0.lock();
        let id = began.next_id;
        began.next_id += 1;
        began.at.insert(id, Instant::now());
        InFlight { renewals: self.clone(), id }
    }
}

/// One renewal in flight, until dropped: a renewal abandoned at its budget
/// stops counting too.
struct InFlight {
    renewals: Arc<Renewals>,
    id: u64,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.renewals.0.lock().at.remove(&self.id);
    }
}

/// A store that notes its renewals in flight; everything else passes through.
#[derive(Debug)]
struct Noting {
    inner: Arc<dyn LeaseStore>,
    renewing: Arc<Renewals>,
}

#[async_trait]
impl LeaseStore for Noting {
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
        let _in_flight = self.renewing.begin();
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
        self.inner.break_lease(seen, only_token, note).await
    }
    async fn try_acquire_all(&self, reqs: &[AcquireRequest]) -> Result<AllAttempt> {
        self.inner.try_acquire_all(reqs).await
    }
    async fn renew_all(&self, grants: &[Grant]) -> Vec<Result<Grant>> {
        let _in_flight = self.renewing.begin();
        self.inner.renew_all(grants).await
    }
    async fn release_all(&self, grants: &[Grant], req: &ReleaseRequest) -> Vec<Result<Released>> {
        self.inner.release_all(grants, req).await
    }
    async fn wait_for_change(&self, busy: &Busy, max: Duration) {
        self.inner.wait_for_change(busy, max).await
    }
    async fn acquire_queued(&self, req: &AcquireRequest, wait: Duration) -> Option<Result<Attempt>> {
        self.inner.acquire_queued(req, wait).await
    }
    async fn waiting(&self, name: &LeaseName) -> Result<Option<usize>> {
        self.inner.waiting(name).await
    }
}
