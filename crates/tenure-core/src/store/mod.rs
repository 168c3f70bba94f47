//! Lease stores: what the client talks to.
//!
//! [`LeaseStore`] is the lease API every store offers. Dumb storage gets it from
//! [`crate::cas::CasStore`], which implements it once over any
//! [`crate::Backend`]; the lease server implements it natively (its clock is the
//! judge) and overrides the batch operations to save round trips.

mod breaking;
pub mod memory;

pub use breaking::{MAX_RENEWALS_DURING_BREAK, break_as_seen};

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::clock::{Clock, ClockExt};
use crate::error::{Error, Result};
use crate::holder::Holder;
use crate::name::LeaseName;
use crate::types::{Attempt, BreakNote, Busy, Grant, LeaseState, Mode, Released};

/// A request to acquire one lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquireRequest {
    /// Lease name.
    pub name: LeaseName,
    /// Mode.
    pub mode: Mode,
    /// Lease duration.
    pub ttl: Duration,
    /// Who asks.
    pub holder: Arc<Holder>,
    /// Whether a grant in the record held by the same holder nonce may be re-taken
    /// at once (it was abandoned by this holder).
    pub retake: bool,
    /// Metadata to store with the grant.
    pub meta: Option<String>,
}

/// How to end a grant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReleaseRequest {
    /// Upper bound of the timestamps of everything written under the lease.
    pub watermark_ms: Option<u64>,
    /// Metadata to leave for the next holder (e.g. where the updates are).
    pub meta: Option<String>,
    /// The holder dropped the lease without releasing it: its deadline, not a
    /// watermark, bounds what it wrote.
    pub dropped: bool,
}

/// The outcome of an all-or-nothing acquisition of several leases.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllAttempt {
    /// Every lease, in request order.
    Granted(Vec<Grant>),
    /// This one was busy; nothing is held.
    Busy(Busy),
}

/// [`LeaseStore::try_acquire_all`] for a store without a batch operation,
/// **not atomic**: tries the leases one by one and, if one is busy (or fails),
/// releases those already taken, every one of them even if some releases fail
/// (`docs/design/all-or-nothing.md#take-them-all-or-none`). Between its first
/// grant and its last or its releases, others
/// see part of the batch held; callers that ask in canonical order never
/// deadlock on it.
///
/// # Errors
/// `InvalidOptions` for a name asked twice; the first failed attempt's error.
pub async fn try_acquire_one_by_one<S: LeaseStore + ?Sized>(store: &S, reqs: &[AcquireRequest]) -> Result<AllAttempt> {
    let mut names: Vec<&LeaseName> = reqs.iter().map(|r| &r.name).collect();
    names.sort();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(Error::InvalidOptions { reason: format!("lease {:?} asked twice in one batch", w[0].as_str()) });
    }
    let mut held: Vec<Grant> = Vec::with_capacity(reqs.len());
    for req in reqs {
        let outcome = store.try_acquire(req).await;
        match outcome {
            Ok(Attempt::Granted(g)) => held.push(g),
            Ok(Attempt::Busy(busy)) => {
                store.release_all(&held, &ReleaseRequest::default()).await;
                return Ok(AllAttempt::Busy(busy));
            }
            Err(e) => {
                store.release_all(&held, &ReleaseRequest::default()).await;
                return Err(e);
            }
        }
    }
    Ok(AllAttempt::Granted(held))
}

/// The lease API.
#[async_trait]
pub trait LeaseStore: Send + Sync + Debug + 'static {
    /// The store's URL, for messages.
    fn url(&self) -> &str;

    /// The clock this store's grants are measured on.
    fn clock(&self) -> &Arc<dyn Clock>;

    /// One attempt to acquire: never waits for the lease.
    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Attempt>;

    /// Extends `grant` by its TTL from now. Fails with [`crate::Error::Lost`] if the
    /// grant is no longer in the record.
    async fn renew(&self, grant: &Grant) -> Result<Grant>;

    /// Ends `grant`, conditionally on it still being ours: a late release never
    /// frees anyone else's lease.
    async fn release(&self, grant: &Grant, req: &ReleaseRequest) -> Result<Released>;

    /// Reads a lease's state. Never writes.
    async fn inspect(&self, name: &LeaseName) -> Result<LeaseState>;

    /// Names of the leases under `prefix` (all for `""`). Never writes.
    async fn list(&self, prefix: &str) -> Result<Vec<LeaseName>>;

    /// Breaks the grants of `seen` (all, or only `only_token`), conditionally on the
    /// record not having changed since it was inspected; `note` (who, why) is
    /// kept as the last ending's, for `status` and the next holder.
    async fn break_lease(&self, seen: &LeaseState, only_token: Option<u64>, note: Option<&BreakNote>) -> Result<()>;

    /// All-or-nothing acquisition of several leases, in the order given (callers
    /// pass them in canonical order): every grant, or none held when it returns.
    /// Each store says how: in one atomic step (the lease server), or one by
    /// one with [`try_acquire_one_by_one`], which is not atomic (others may see
    /// some of the leases held for a moment). A name asked twice is refused
    /// (`InvalidOptions`), as the lease server does.
    async fn try_acquire_all(&self, reqs: &[AcquireRequest]) -> Result<AllAttempt>;

    /// Renews several grants; one result per grant.
    async fn renew_all(&self, grants: &[Grant]) -> Vec<Result<Grant>> {
        let mut out = Vec::with_capacity(grants.len());
        for g in grants {
            out.push(self.renew(g).await);
        }
        out
    }

    /// Releases several grants, attempting every one; one result per grant.
    async fn release_all(&self, grants: &[Grant], req: &ReleaseRequest) -> Vec<Result<Released>> {
        let mut out = Vec::with_capacity(grants.len());
        for g in grants.iter().rev() {
            out.push(self.release(g, req).await);
        }
        out.reverse();
        out
    }

    /// Acquires `req`, waiting for it up to `wait` in a queue the store keeps
    /// (the lease server does: waiters are served in order, the grant pushed
    /// the moment the lease frees); busy if the wait ends first. `None` if the
    /// store keeps no queue: the caller polls ([`LeaseStore::try_acquire`] and
    /// [`LeaseStore::wait_for_change`]). A caller that gives up on the future
    /// withdraws from the queue.
    async fn acquire_queued(&self, req: &AcquireRequest, wait: Duration) -> Option<Result<Attempt>> {
        let _ = (req, wait);
        None
    }

    /// How many wait in line for `name` ([`LeaseStore::acquire_queued`]), if
    /// this store keeps a line it can read; `None` if it keeps none (its
    /// waiters poll) or cannot tell.
    async fn waiting(&self, name: &LeaseName) -> Result<Option<usize>> {
        let _ = name;
        Ok(None)
    }

    /// Waits up to `max` for a busy lease to change. The default sleeps; stores
    /// that can watch a key wake early.
    async fn wait_for_change(&self, busy: &Busy, max: Duration) {
        let _ = busy;
        self.clock().sleep(max).await;
    }
}
