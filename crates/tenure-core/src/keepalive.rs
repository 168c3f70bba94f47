//! Held leases and their keep-alive.
//!
//! A held lease owns one background task. The task renews every grant of the
//! lease every `renew_interval`, publishes the lease's [`Health`] on a `watch`
//! channel (Held → AtRisk → Lost), and ends the lease: on [`Lease::release`] with
//! the holder's watermark, or — when the handle is dropped without a release — as
//! *dropped*, whose watermark is its deadline. The task never outlives that
//! release attempt, and each attempt is bounded by the request timeout.
//!
//! Loss rules, all measured on the holder's monotonic clock:
//! - a renewal the store refuses because the grant is gone → `Lost(Stolen)` at once;
//! - `max_failures` consecutive failed renewals → `Lost(Outage)`;
//! - reaching `local_deadline - safety_margin` without a successful renewal (e.g.
//!   the process was paused) → `Lost(Expired)`, even if a renewal is in flight.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::clock::{Clock, ClockExt, Mono};
use crate::error::{Error, Result};
use crate::meter::Labels;
use crate::options::LeaseOptions;
use crate::store::{LeaseStore, ReleaseRequest};
use crate::types::{Grant, Health, LossReason, Released};

/// Names held by live handles of one client, with counts (shared leases may be
/// held several times).
pub(crate) type HeldNames = Arc<Mutex<HashMap<String, usize>>>;

/// Counts `grants` among the names `held` by a client's live handles.
pub(crate) fn register(held: &HeldNames, grants: &[Grant]) {
    let mut names = held.lock();
    for g in grants {
        *names.entry(g.name.to_string()).or_default() += 1;
    }
}

/// Takes `grants` back out of `held` (see [`register`]).
pub(crate) fn unregister(held: &HeldNames, grants: &[Grant]) {
    let mut names = held.lock();
    for g in grants {
        if let Some(n) = names.get_mut(g.name.as_str()) {
            *n -= 1;
            if *n == 0 {
                names.remove(g.name.as_str());
            }
        }
    }
}

/// A handle's names, counted in its client's [`HeldNames`] until the handle is
/// dropped or its lease ends, whichever comes first (once).
#[derive(Debug)]
struct Registration {
    held: HeldNames,
    grants: Vec<Grant>,
    live: std::sync::atomic::AtomicBool,
}

impl Registration {
    fn new(held: HeldNames, grants: &[Grant]) -> Arc<Self> {
        register(&held, grants);
        Arc::new(Self { held, grants: grants.to_vec(), live: true.into() })
    }

    /// Forgets the names, so that the same client may re-take them at once.
    fn end(&self) {
        if self.live.swap(false, Ordering::AcqRel) {
            unregister(&self.held, &self.grants);
        }
    }
}

enum Cmd {
    Release(ReleaseRequest, oneshot::Sender<Result<Released>>),
}

/// Timing the keep-alive follows, fixed at acquisition.
#[derive(Clone, Copy, Debug)]
struct Timing {
    interval: Duration,
    safety: Duration,
    max_failures: u32,
}

/// What a handle tells of its lease's life so far (see `Lease::renewals`).
#[derive(Debug)]
struct Stats {
    /// When the handle was made, on the store's clock.
    since: Mono,
    /// How long the acquisition that made it waited.
    waited: Duration,
    /// Grants renewed, counted one by one.
    renewals: AtomicU64,
}

/// The machinery shared by [`Lease`] and [`LeaseSet`].
#[derive(Debug)]
struct Held {
    store: Arc<dyn LeaseStore>,
    health: watch::Receiver<Health>,
    grants: watch::Receiver<Arc<Vec<Grant>>>,
    ctl: Option<mpsc::Sender<Cmd>>,
    task: Option<JoinHandle<()>>,
    stats: Arc<Stats>,
    registration: Arc<Registration>,
}

impl Held {
    fn start(
        store: Arc<dyn LeaseStore>,
        grants: Vec<Grant>,
        opts: &LeaseOptions,
        held: HeldNames,
        waited: Duration,
    ) -> Self {
        let labels = Labels::new(store.url(), opts.mode);
        labels.acquired(waited);
        let stats = Arc::new(Stats { since: store.clock().mono(), waited, renewals: AtomicU64::new(0) });
        let timing = Timing { interval: opts.renew_interval(), safety: opts.safety(), max_failures: opts.max_failures };
        let stop_by = stop_by(&grants, timing.safety);
        let (health_tx, health) = watch::channel(Health::Held { stop_by });
        let (grants_tx, grants_rx) = watch::channel(Arc::new(grants.clone()));
        let (ctl, ctl_rx) = mpsc::channel(1);
        let registration = Registration::new(held, &grants);
        let task = KeepAlive {
            store: store.clone(),
            clock: store.clock().clone(),
            grants,
            timing,
            health: health_tx,
            grants_tx,
            registration: registration.clone(),
            labels,
            stats: stats.clone(),
            lost_at: None,
        };
        let task = tokio::spawn(task.run(ctl_rx));
        Self { store, health, grants: grants_rx, ctl: Some(ctl), task: Some(task), stats, registration }
    }

    async fn release(mut self, req: ReleaseRequest) -> Result<Released> {
        let (tx, rx) = oneshot::channel();
        let ctl = self.ctl.take();
        let sent = match ctl {
            Some(ctl) => ctl.send(Cmd::Release(req, tx)).await.is_ok(),
            None => false,
        };
        let out = if sent {
            rx.await.unwrap_or_else(|_| {
                Err(Error::store(self.store.url(), "releasing", "the keep-alive task stopped unexpectedly"))
            })
        } else {
            Err(Error::store(self.store.url(), "releasing", "the keep-alive task is gone"))
        };
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        out
    }

    async fn lost(&self) -> LossReason {
        let mut rx = self.health.clone();
        loop {
            if let Health::Lost(reason) = &*rx.borrow_and_update() {
                return reason.clone();
            }
            if rx.changed().await.is_err() {
                // The task ended without a verdict: it can only have been released.
                return match &*rx.borrow() {
                    Health::Lost(reason) => reason.clone(),
                    _ => LossReason::Released,
                };
            }
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Dropping the command sender tells the task to release as "dropped" and
        // end; the task is bounded by the request timeout, so it is not aborted
        // here (aborting could cut a release in half). The client forgets the
        // names now, not when the task gets to it: a dropped lease is let go,
        // and the same client may take it again at once.
        self.ctl.take();
        self.registration.end();
    }
}

/// The least time a release is given: one slow answer is worth waiting for.
const MIN_RELEASE_BUDGET: Duration = Duration::from_secs(1);

/// How long a release of `grants` may take: while they are live (a release
/// then frees the lease for the next holder at once, instead of at its
/// deadline), and at least a renewal interval or [`MIN_RELEASE_BUDGET`], so
/// that one slow answer does not abandon it. The store's own deadline for one
/// operation bounds it too.
pub(crate) fn release_budget(grants: &[Grant], clock: &dyn Clock, interval: Duration) -> Duration {
    let live = grants.iter().map(|g| g.local_deadline).min().map(|d| d.saturating_since(clock.mono()));
    live.unwrap_or_default().max(interval).max(MIN_RELEASE_BUDGET)
}

fn stop_by(grants: &[Grant], safety: Duration) -> Mono {
    grants.iter().map(|g| g.local_deadline).min().unwrap_or_default() - safety
}

struct KeepAlive {
    store: Arc<dyn LeaseStore>,
    clock: Arc<dyn Clock>,
    grants: Vec<Grant>,
    timing: Timing,
    health: watch::Sender<Health>,
    grants_tx: watch::Sender<Arc<Vec<Grant>>>,
    registration: Arc<Registration>,
    labels: Labels,
    stats: Arc<Stats>,
    /// When the lease was lost, which ends its hold time.
    lost_at: Option<Mono>,
}

/// Why the renewal loop stopped.
enum Stop {
    Command(Cmd),
    Dropped,
    Lost,
}

impl KeepAlive {
    async fn run(mut self, mut ctl: mpsc::Receiver<Cmd>) {
        let stop = match self.renew(&mut ctl).await {
            // Nothing more to renew: wait for the holder to release or drop it.
            Stop::Lost => ctl.recv().await.map_or(Stop::Dropped, Stop::Command),
            other => other,
        };
        let ended = self.lost_at.unwrap_or_else(|| self.clock.mono());
        self.labels.held(ended.saturating_since(self.stats.since));
        self.registration.end();
        let (req, reply) = match stop {
            Stop::Command(Cmd::Release(req, reply)) => (req, Some(reply)),
            Stop::Dropped | Stop::Lost => (ReleaseRequest { dropped: true, ..ReleaseRequest::default() }, None),
        };
        let budget = release_budget(&self.grants, &*self.clock, self.timing.interval);
        let store = self.store.clone();
        let grants = self.grants.clone();
        let out = match self.clock.timeout(budget, async move { store.release_all(&grants, &req).await }).await {
            Some(results) => combine(results),
            None => Err(Error::store(self.store.url(), "releasing", format!("no answer within {budget:?}"))),
        };
        if !self.health.borrow().is_lost() {
            self.health.send_replace(Health::Lost(LossReason::Released));
        }
        match reply {
            Some(reply) => {
                let _ = reply.send(out);
            }
            None => {
                if let Err(e) = out {
                    tracing::info!(error = %e, "releasing a dropped lease failed; it will expire by itself");
                }
            }
        }
    }

    /// Renews until a command arrives, the handle is dropped, or the lease is lost.
    async fn renew(&mut self, ctl: &mut mpsc::Receiver<Cmd>) -> Stop {
        let mut failures = 0u32;
        let mut next = self.clock.mono() + self.timing.interval;
        loop {
            let stop_at = stop_by(&self.grants, self.timing.safety);
            tokio::select! {
                biased;
                cmd = ctl.recv() => return cmd.map_or(Stop::Dropped, Stop::Command),
                () = self.clock.sleep_until(next.min(stop_at)) => {}
            }
            let now = self.clock.mono();
            if now >= stop_at {
                self.lose(LossReason::Expired);
                return Stop::Lost;
            }
            // Bound the renewal so that a hung store cannot carry us past stop_by.
            let budget = self.timing.interval.min(stop_at.saturating_since(now));
            let store = self.store.clone();
            let grants = self.grants.clone();
            let renewal = self.clock.timeout(budget, async move { store.renew_all(&grants).await });
            let outcome = tokio::select! {
                biased;
                cmd = ctl.recv() => return cmd.map_or(Stop::Dropped, Stop::Command),
                out = renewal => out,
            };
            let took = self.clock.mono().saturating_since(now);
            let error = match outcome {
                None => {
                    self.labels.renewal(took, 0);
                    Some(format!("no answer within {}", crate::duration::human_duration(budget)))
                }
                Some(results) => {
                    let (mut error, mut lost, mut renewed) = (None, None, 0u64);
                    for (slot, result) in self.grants.iter_mut().zip(results) {
                        match result {
                            Ok(g) => {
                                *slot = g;
                                renewed += 1;
                            }
                            Err(Error::Lost { reason, .. }) => lost = lost.or(Some(reason)),
                            Err(e) => error = Some(e.to_string()),
                        }
                    }
                    self.labels.renewal(took, renewed);
                    self.stats.renewals.fetch_add(renewed, Ordering::Relaxed);
                    if let Some(reason) = lost {
                        self.lose(reason);
                        return Stop::Lost;
                    }
                    error
                }
            };
            self.grants_tx.send_replace(Arc::new(self.grants.clone()));
            let stop_at = stop_by(&self.grants, self.timing.safety);
            match error {
                None => {
                    failures = 0;
                    self.health.send_replace(Health::Held { stop_by: stop_at });
                    next = now + self.timing.interval;
                }
                Some(error) => {
                    failures += 1;
                    if failures >= self.timing.max_failures {
                        self.lose(LossReason::Outage { error });
                        return Stop::Lost;
                    }
                    // Reported through Health; the holder decides how loud to be.
                    tracing::info!(failures, %error, "renewing a lease failed");
                    self.health.send_replace(Health::AtRisk { stop_by: stop_at, failures, error });
                    // Retry sooner than usual: time is running out.
                    next = self.clock.mono() + self.timing.interval / 2;
                }
            }
        }
    }

    fn lose(&mut self, reason: LossReason) {
        tracing::info!(%reason, "lease lost");
        self.labels.lost(&reason);
        self.lost_at = Some(self.clock.mono());
        self.health.send_replace(Health::Lost(reason));
        self.registration.end();
    }
}

fn combine(results: Vec<Result<Released>>) -> Result<Released> {
    let mut out = Ok(Released::Released);
    for r in results {
        match (r, &out) {
            (Err(e), Ok(_)) => out = Err(e),
            (Ok(Released::NotHeld), Ok(_)) => out = Ok(Released::NotHeld),
            _ => {}
        }
    }
    out
}

/// A held lease on one name.
///
/// Keep it alive by keeping it: its keep-alive task renews it and publishes its
/// [`Health`]. Do the protected work inside `tokio::select!` next to
/// [`Lease::lost`], and pass [`Lease::token`] to the protected storage as a fence.
/// Release it with [`Lease::release`]; dropping it releases it too, as *dropped*
/// (the next holder then treats its deadline as its watermark).
#[derive(Debug)]
#[must_use = "a lease is released as soon as it is dropped: keep it while the work it protects runs"]
pub struct Lease {
    held: Held,
}

/// The methods [`Lease`] and [`LeaseSet`] share, written once.
macro_rules! held_handle {
    ($what:literal) => {
        /// The current health (for a set: losing one lease loses the set).
        pub fn health(&self) -> Health {
            self.held.health.borrow().clone()
        }

        /// A receiver of health changes, for `select!`.
        pub fn health_watch(&self) -> watch::Receiver<Health> {
            self.held.health.clone()
        }

        #[doc = concat!("Completes when ", $what, " is lost, with the reason.")]
        pub async fn lost(&self) -> LossReason {
            self.held.lost().await
        }

        #[doc = concat!("Releases ", $what, "; a release that fails for one lease of a set does")]
        /// not stop the others, and the first error is returned.
        pub async fn release(self) -> Result<Released> {
            self.held.release(ReleaseRequest::default()).await
        }

        #[doc = concat!("Successful renewals of ", $what, " since it was acquired (for a set, each")]
        /// grant's renewals counted).
        pub fn renewals(&self) -> u64 {
            self.held.stats.renewals.load(Ordering::Relaxed)
        }

        /// How long the acquisition that returned this handle waited, from the
        /// call to the grant (the client's turn and the backoff included).
        pub fn waited(&self) -> Duration {
            self.held.stats.waited
        }

        /// How long this handle has held its lease so far, on the store's clock.
        pub fn held_for(&self) -> Duration {
            self.held.store.clock().mono().saturating_since(self.held.stats.since)
        }

        /// Releases with a watermark (an upper bound of the timestamps of everything
        /// written under the lease) and metadata for the next holder.
        pub async fn release_with(self, req: ReleaseRequest) -> Result<Released> {
            self.held.release(req).await
        }
    };
}

impl Lease {
    pub(crate) fn start(
        store: Arc<dyn LeaseStore>,
        grant: Grant,
        opts: &LeaseOptions,
        held: HeldNames,
        waited: Duration,
    ) -> Self {
        Self { held: Held::start(store, vec![grant], opts, held, waited) }
    }

    /// The grant, as of the latest renewal.
    pub fn grant(&self) -> Grant {
        self.held.grants.borrow()[0].clone()
    }

    /// The fencing token.
    pub fn token(&self) -> u64 {
        self.held.grants.borrow()[0].token
    }

    held_handle!("the lease");
}

/// Several leases held together, acquired all-or-nothing in canonical order and
/// kept alive by one task.
#[derive(Debug)]
#[must_use = "the leases are released as soon as the set is dropped: keep it while the work runs"]
pub struct LeaseSet {
    held: Held,
}

impl LeaseSet {
    pub(crate) fn start(
        store: Arc<dyn LeaseStore>,
        grants: Vec<Grant>,
        opts: &LeaseOptions,
        held: HeldNames,
        waited: Duration,
    ) -> Self {
        Self { held: Held::start(store, grants, opts, held, waited) }
    }

    /// The grants, in canonical (name) order, as of the latest renewal.
    pub fn grants(&self) -> Arc<Vec<Grant>> {
        self.held.grants.borrow().clone()
    }

    held_handle!("any lease of the set");
}
