//! The client: acquire (waiting with capped, jittered backoff), multi-lease
//! acquisition, inspection and breaking, over any [`LeaseStore`].

use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use rand::{RngExt, SeedableRng, rngs::SmallRng};

use crate::clock::{Clock, ClockExt, Mono};
use crate::error::{Error, Result};
use crate::holder::Holder;
use crate::keepalive::{HeldNames, Lease, LeaseSet};
use crate::name::LeaseName;
use crate::options::LeaseOptions;
use crate::store::{AcquireRequest, AllAttempt, LeaseStore};
use crate::turn::{Turn, Turns};
use crate::types::{Attempt, BreakNote, Busy, Grant, LeaseState};

/// A wait in a store's queue without a deadline: it keeps its place for as
/// long as it takes (a wait that ended and asked again would go to the back
/// of the line). The lease server bounds one wait to a day
/// (`tenure_client::wire::MAX_WAIT_MS`). Finite, so that a clock adds it
/// to its time without overflow.
const NO_DEADLINE: Duration = Duration::from_secs(u32::MAX as u64);
/// How much before the overall deadline a queued wait ends, at most.
const QUEUE_MARGIN: Duration = Duration::from_millis(100);
/// How often a queued waiter looks at who holds the lease, for `on_wait`.
const QUEUE_REFRESH: Duration = Duration::from_secs(5);
/// How long an attempt under way when a wait's timeout comes is let finish:
/// it may be writing a grant, which nobody would hold if it were cut short
/// (see `Client::take_grants`).
pub const FINISH_GRACE: Duration = Duration::from_millis(250);
/// How a timeout in which the store never answered names the holder.
const UNANSWERED: &str = "nobody known: the store did not answer";

/// `attempt`'s outcome if it ends within `left`; else, since it may be writing
/// a grant, if it ends within [`FINISH_GRACE`] more (`true`: late, and the
/// caller keeps only a grant of it). `None` if it did not end (a hung store).
async fn within<F>(clock: &dyn Clock, left: Duration, attempt: F) -> Option<(F::Output, bool)>
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    let mut attempt = std::pin::pin!(attempt);
    if let Some(out) = clock.timeout(left, attempt.as_mut()).await {
        return Some((out, false));
    }
    clock.timeout(FINISH_GRACE, attempt).await.map(|out| (out, true))
}

/// What a waiter knows of `name` when the store failed it with `e`.
pub(crate) fn failed_look(name: &LeaseName, e: &Error) -> Busy {
    Busy { name: name.clone(), holders: Vec::new(), corrupt: None, version: None, failure: Some(e.to_string()) }
}

/// A holder's handle on a store: one holder identity, many leases.
///
/// Leases acquired through one `Client` share its [`Holder`] identity. A client
/// never re-takes a lease one of its live handles holds; it does re-take at once
/// a grant of its own identity that it lost or abandoned
/// (`docs/design/object-store-lock.md#re-taking-ones-own-abandoned-lease`). Its tasks
/// (and its clones') ask the store for one lease one at a time, in the order
/// they came: the others wait their turn in the client.
#[derive(Debug, Clone)]
pub struct Client {
    store: Arc<dyn LeaseStore>,
    holder: Arc<Holder>,
    pub(crate) held: HeldNames,
    turns: Turns,
    rng: Arc<Mutex<SmallRng>>,
}

impl Client {
    /// A client of `store` with this process's identity and a fresh nonce.
    pub fn new(store: Arc<dyn LeaseStore>) -> Self {
        Self::with_holder(store, Holder::current())
    }

    /// A client with a chosen identity.
    pub fn with_holder(store: Arc<dyn LeaseStore>, holder: Holder) -> Self {
        Self {
            store,
            holder: Arc::new(holder),
            held: HeldNames::default(),
            turns: Turns::default(),
            rng: Arc::new(Mutex::new(SmallRng::from_rng(&mut rand::rng()))),
        }
    }

    /// Seeds the jitter of backoffs (tests).
    pub fn with_seed(self, seed: u64) -> Self {
        *self.rng.lock() = SmallRng::seed_from_u64(seed);
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn LeaseStore> {
        &self.store
    }

    /// This client's holder identity.
    pub fn holder(&self) -> &Arc<Holder> {
        &self.holder
    }

    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        self.store.clock()
    }

    pub(crate) fn request(&self, name: &LeaseName, opts: &LeaseOptions) -> AcquireRequest {
        AcquireRequest {
            name: name.clone(),
            mode: opts.mode,
            ttl: opts.ttl,
            holder: self.holder.clone(),
            retake: !self.held.lock().contains_key(name.as_str()),
            meta: opts.meta.clone(),
        }
    }

    /// Acquires `name` once, without waiting: [`Error::Busy`] if someone holds it.
    pub async fn try_acquire(&self, name: &str, opts: &LeaseOptions) -> Result<Lease> {
        self.acquire(name, &opts.clone().no_wait()).await
    }

    /// Acquires `name`, waiting up to `opts.timeout`: [`Error::Timeout`] if it
    /// was still busy then. Transient store errors while waiting are waited out
    /// like a busy lease; a wait whose last attempt failed ends with that error.
    /// With [`LeaseOptions::with_slots`], it takes one of the name's slots
    /// instead (see [`crate::slots`]): the lease returned is that slot's.
    pub async fn acquire(&self, name: &str, opts: &LeaseOptions) -> Result<Lease> {
        self.acquire_watching(name, opts, |_| {}).await
    }

    /// Like [`Client::acquire`], calling `on_wait` each time the lease is found busy
    /// (e.g. to show who holds it).
    pub async fn acquire_watching(
        &self,
        name: &str,
        opts: &LeaseOptions,
        on_wait: impl FnMut(&Busy) + Send,
    ) -> Result<Lease> {
        let name = LeaseName::new(name)?;
        if let Some(n) = opts.slots {
            return self.acquire_slot(name, n, opts, on_wait).await;
        }
        let asked = self.clock().mono();
        let (_turn, left) = self.take_turns(std::slice::from_ref(&name), opts).await?;
        let mut grants = self.acquire_grants(std::slice::from_ref(&name), &left, on_wait).await?;
        let grant =
            grants.pop().ok_or_else(|| Error::store(self.store.url(), "acquiring", "the store granted nothing"))?;
        // The turn passes on once the handle holds the name.
        let waited = self.clock().mono().saturating_since(asked);
        Ok(Lease::start(self.store.clone(), grant, opts, self.held.clone(), waited))
    }

    /// Acquires every one of `names`, all or nothing, under one overall
    /// timeout: all at once if they are free (in canonical, sorted, order;
    /// releasing what it took if one is busy, see `docs/design/all-or-nothing.md`).
    /// If one is busy and the store keeps queues, it then waits in them in canonical
    /// order, holding (and renewing) the leases before the one it waits for:
    /// so it waits its turn like anyone else, and is never starved by a queue
    /// that is never empty. Every set takes leases in the same order, so no
    /// sets can wait on each other in a circle; code that takes several leases
    /// one after another itself (nested `tenure lock`s) must take them in the
    /// same canonical order, as with any locks, or it and a set may wait on
    /// each other until a timeout. On a timeout or an error, or when the
    /// caller drops the future, it releases what it held. On a store without
    /// queues it polls for them all at once, holding nothing while it waits.
    pub async fn acquire_all<S: AsRef<str>>(&self, names: &[S], opts: &LeaseOptions) -> Result<LeaseSet> {
        self.acquire_all_watching(names, opts, |_| {}).await
    }

    /// Like [`Client::acquire_all`], calling `on_wait` when busy.
    pub async fn acquire_all_watching<S: AsRef<str>>(
        &self,
        names: &[S],
        opts: &LeaseOptions,
        on_wait: impl FnMut(&Busy) + Send,
    ) -> Result<LeaseSet> {
        if opts.slots.is_some() {
            return Err(Error::InvalidOptions {
                reason: "slots are taken one name at a time, not by acquire_all".into(),
            });
        }
        let mut names = names.iter().map(|n| LeaseName::new(n.as_ref())).collect::<Result<Vec<_>>>()?;
        names.sort();
        names.dedup();
        if names.is_empty() {
            return Err(Error::InvalidOptions { reason: "acquire_all needs at least one lease name".into() });
        }
        let asked = self.clock().mono();
        let (_turns, left) = self.take_turns(&names, opts).await?;
        let grants = self.acquire_grants(&names, &left, on_wait).await?;
        let waited = self.clock().mono().saturating_since(asked);
        Ok(LeaseSet::start(self.store.clone(), grants, opts, self.held.clone(), waited))
    }

    /// Takes this task's turn at each of `names` (canonical order), after the
    /// client's other tasks that came for them first (see `turn`), under the
    /// timeout; a try (a timeout of zero) does not wait for one. Returns the
    /// turns, to keep until the handle holds the names, and `opts` with what is
    /// left of the timeout.
    pub(crate) async fn take_turns(
        &self,
        names: &[LeaseName],
        opts: &LeaseOptions,
    ) -> Result<(Vec<Turn>, LeaseOptions)> {
        // Bad options are said at once, not after a sibling's turn.
        opts.validate()?;
        let clock = self.clock().clone();
        let started = clock.mono();
        let deadline = opts.timeout.map(|t| started + t);
        let mut turns = Vec::with_capacity(names.len());
        for name in names {
            let mut turn = Turn::at(&self.turns, name);
            let taken = turn.try_take()
                || match deadline {
                    _ if opts.timeout == Some(Duration::ZERO) => false,
                    Some(d) => clock.timeout(d.saturating_since(clock.mono()), turn.take()).await.is_some(),
                    None => {
                        turn.take().await;
                        true
                    }
                };
            if !taken {
                let holder = "another task of this client, which is acquiring it".to_string();
                return Err(self.gave_up_on(name, holder, opts, clock.mono().saturating_since(started)));
            }
            turns.push(turn);
        }
        let left = if opts.timeout == Some(Duration::ZERO) { opts.clone() } else { self.until(opts, deadline) };
        Ok((turns, left))
    }

    /// Acquires `names` (canonical order, no duplicates): see [`Client::acquire_all`].
    pub(crate) async fn acquire_grants(
        &self,
        names: &[LeaseName],
        opts: &LeaseOptions,
        mut on_wait: impl FnMut(&Busy) + Send,
    ) -> Result<Vec<Grant>> {
        if names.len() == 1 || opts.timeout == Some(Duration::ZERO) {
            return self.take_grants(names, opts, on_wait).await;
        }
        opts.validate()?;
        let clock = self.clock().clone();
        let started = clock.mono();
        let deadline = opts.timeout.map(|t| started + t);
        // All at once, if they are free; if not, whether the store keeps queues.
        // Under the overall timeout: a store that hangs ends the wait on time.
        let first = async {
            let taken = self.take_grants(names, &opts.clone().no_wait(), &mut on_wait).await;
            let busy = matches!(taken, Err(Error::Busy { .. }));
            let queues = busy && matches!(self.store.waiting(&names[0]).await, Ok(Some(_)));
            (taken, queues)
        };
        let (taken, queues) = match deadline {
            Some(d) => match within(&*clock, d.saturating_since(clock.mono()), first).await {
                Some((first, false)) => first,
                // Under way at the deadline, and granted in its grace: the caller's.
                Some(((Ok(grants), _), true)) => return Ok(grants),
                _ => return Err(self.unanswered(&names[0], opts, clock.mono().saturating_since(started))),
            },
            None => first.await,
        };
        let taken = match taken {
            Err(Error::Busy { .. }) if queues => self.take_in_order(names, opts, deadline, on_wait).await,
            // Busy on a store without queues, or a store error (waited out
            // like a busy lease): polled for all at once, as always.
            Err(e) if matches!(e, Error::Busy { .. }) || e.is_transient() => {
                self.take_grants(names, &self.until(opts, deadline), on_wait).await
            }
            done => done,
        };
        // A timeout counts the whole wait, not only its last part.
        taken.map_err(|e| match e {
            // The store did not answer the last part: say so of the whole timeout.
            Error::Timeout { name, holder, .. } if holder.starts_with(UNANSWERED) => {
                let name = LeaseName::new(&name).unwrap_or_else(|_| names[0].clone());
                self.unanswered(&name, opts, clock.mono().saturating_since(started))
            }
            Error::Timeout { store, name, holder, .. } => {
                Error::Timeout { store, name, holder, waited: clock.mono().saturating_since(started) }
            }
            other => other,
        })
    }

    /// `opts` with what is left until `deadline` as its timeout (at least a
    /// moment, so that a wait past its deadline ends as a timeout, not as busy).
    fn until(&self, opts: &LeaseOptions, deadline: Option<Mono>) -> LeaseOptions {
        let left = deadline.map(|d| d.saturating_since(self.clock().mono()).max(Duration::from_millis(1)));
        LeaseOptions { timeout: left, ..opts.clone() }
    }

    /// Takes `names` one by one in canonical order, each waited for in its
    /// store's queue while the ones before it are held and renewed (see
    /// [`Client::acquire_all`]). A lease held meanwhile that is lost (broken,
    /// or its renewals failed until its time ran out) starts it over.
    async fn take_in_order(
        &self,
        names: &[LeaseName],
        opts: &LeaseOptions,
        deadline: Option<Mono>,
        mut on_wait: impl FnMut(&Busy) + Send,
    ) -> Result<Vec<Grant>> {
        let clock = self.clock().clone();
        let interval = opts.renew_interval();
        'over: loop {
            let mut holding = Holding::new(self, opts);
            // One renewal schedule for everything held, whichever lease it waits for.
            let mut renew_at = clock.mono() + interval;
            for name in names {
                let opts_one = self.until(opts, deadline);
                let mut take = Box::pin(self.take_grants(std::slice::from_ref(name), &opts_one, &mut on_wait));
                let taken = loop {
                    // The wait goes on (in its queue) while the held leases are renewed.
                    tokio::select! {
                        taken = &mut take => break taken,
                        () = clock.sleep_until(renew_at), if !holding.grants.is_empty() => {
                            if !self.keep(&mut holding.grants, opts, deadline).await {
                                drop(take); // its wait withdrawn first
                                holding.let_go().await;
                                continue 'over;
                            }
                            renew_at = clock.mono() + interval;
                        }
                    }
                };
                match taken {
                    Ok(grants) => holding.add(grants),
                    Err(e) => {
                        holding.let_go().await;
                        return Err(e);
                    }
                }
            }
            // What was taken first may have waited long for the last: it is
            // returned only with time to spare.
            let now = clock.mono();
            if holding.grants.iter().any(|g| now + opts.safety() + interval >= g.local_deadline)
                && !self.keep(&mut holding.grants, opts, deadline).await
            {
                holding.let_go().await;
                continue 'over;
            }
            return Ok(holding.into_grants());
        }
    }

    /// Renews `held` while [`Client::take_in_order`] waits: whether they are
    /// all still held with time to spare (a renewal that fails is tried again
    /// at the next turn, until a lease's time is up).
    async fn keep(&self, held: &mut [Grant], opts: &LeaseOptions, deadline: Option<Mono>) -> bool {
        // Bounded like the keep-alive's renewals (a hung store is a failed
        // renewal), and by the wait's own deadline.
        let clock = self.clock();
        let budget =
            deadline.map_or(opts.renew_interval(), |d| opts.renew_interval().min(d.saturating_since(clock.mono())));
        let renewals = clock.timeout(budget, self.store.renew_all(held)).await;
        for (grant, result) in held.iter_mut().zip(renewals.unwrap_or_default()) {
            match result {
                Ok(renewed) => *grant = renewed,
                Err(Error::Lost { .. }) => return false,
                Err(e) => tracing::debug!(error = %e, "renewing a lease held while waiting for the next failed"),
            }
        }
        let now = clock.mono();
        held.iter().all(|g| now + opts.safety() < g.local_deadline)
    }

    /// One attempt loop for `names`: polls, or (one lease, on a store that
    /// keeps queues) waits in the store's queue.
    async fn take_grants(
        &self,
        names: &[LeaseName],
        opts: &LeaseOptions,
        mut on_wait: impl FnMut(&Busy) + Send,
    ) -> Result<Vec<Grant>> {
        opts.validate()?;
        let clock = self.clock().clone();
        let started = clock.mono();
        let deadline = opts.timeout.map(|t| started + t);
        let mut backoff = opts.backoff_initial;
        // The last answer: what a wait cut short by the timeout reports.
        let mut last: Option<(Busy, Option<Error>)> = None;
        // Whether the next attempt waits in the store's queue (one lease, after
        // a busy answer, while the store keeps queues), and whether it does.
        let (mut park, mut queues) = (false, true);
        loop {
            let reqs: Vec<AcquireRequest> = names.iter().map(|n| self.request(n, opts)).collect();
            let store = &self.store;
            let asked = clock.mono();
            // A queued wait ends a little before the overall deadline, so that
            // the store's own answer (with who holds the lease) comes in time.
            let wait = deadline.map_or(NO_DEADLINE, |d| {
                let left = d.saturating_since(asked);
                left.saturating_sub((left / 10).min(QUEUE_MARGIN))
            });
            let attempt = async move {
                let one = |a: Attempt| match a {
                    Attempt::Granted(g) => AllAttempt::Granted(vec![g]),
                    Attempt::Busy(b) => AllAttempt::Busy(b),
                };
                match reqs.as_slice() {
                    [req] if park => store.acquire_queued(req, wait).await.map(|a| a.map(one)),
                    [req] => Some(store.try_acquire(req).await.map(one)),
                    many => Some(store.try_acquire_all(many).await),
                }
            };
            // While it waits in a queue, the caller still hears who holds the
            // lease now and then (a terminal's line stays current).
            let attempt = async {
                let mut attempt = std::pin::pin!(attempt);
                if !park {
                    return attempt.await;
                }
                loop {
                    tokio::select! {
                        done = &mut attempt => return done,
                        () = clock.sleep(QUEUE_REFRESH) => {
                            // The wait keeps its place through passing store
                            // errors: the caller hears of them here.
                            match self.store.inspect(&names[0]).await {
                                Ok(state) => on_wait(&Busy::of(state)),
                                Err(e) => on_wait(&failed_look(&names[0], &e)),
                            }
                        }
                    }
                }
            };
            // The timeout bounds the whole wait, attempts included: a store that
            // hangs (a dead NFS server) ends the wait on time. (A `no_wait` attempt
            // is bounded by the store's own deadlines instead.) An attempt under
            // way at the deadline may be writing a grant, which nobody would hold
            // (and which would keep the lease for its TTL): it is let finish for
            // [`FINISH_GRACE`] more, and a grant it makes is the caller's. Only
            // one that takes longer (a hung store) is cut short. (A queued wait
            // cut short is withdrawn.)
            let attempt = match deadline {
                Some(deadline) if opts.timeout != Some(Duration::ZERO) => {
                    let left = deadline.saturating_since(clock.mono());
                    match within(&*clock, left, attempt).await {
                        Some((attempt, false)) => attempt,
                        Some((Some(Ok(AllAttempt::Granted(grants))), true))
                            if self.vouch(grants.clone(), opts, asked).await.is_ok() =>
                        {
                            return Ok(grants);
                        }
                        _ => {
                            let waited = clock.mono().saturating_since(started);
                            return Err(match last.take() {
                                // What the last answer said is still the best news.
                                Some((busy, failed)) => failed.unwrap_or_else(|| self.gave_up(&busy, opts, waited)),
                                None => self.unanswered(&names[0], opts, waited),
                            });
                        }
                    }
                }
                _ => attempt.await,
            };
            let Some(attempt) = attempt else {
                // The store keeps no queue: poll it from now on.
                (park, queues) = (false, false);
                continue;
            };
            // `failed`: the store error of this attempt, if it failed; a wait that
            // ends on one reports the store's failure, not a busy lease.
            // A grant that came too late to be used is released, and counts
            // as a passing store failure: waited out, and retried.
            let attempt = match attempt {
                Ok(AllAttempt::Granted(grants)) => self.vouch(grants, opts, asked).await.map(AllAttempt::Granted),
                // A grant lost before it was handed over (a queued grant
                // whose answer came after it expired, renewed too late) was
                // never the caller's: nobody holds it for them, and the wait
                // goes on like after any passing failure.
                Err(Error::Lost { reason, .. }) => Err(Error::store(
                    self.store.url(),
                    "acquiring",
                    format!("a grant was lost before it could be handed over ({reason}); asking again"),
                )),
                other => other,
            };
            let (busy, failed) = match attempt {
                Ok(AllAttempt::Granted(grants)) => return Ok(grants),
                Ok(AllAttempt::Busy(busy)) => {
                    crate::meter::Labels::new(self.store.url(), opts.mode).busy();
                    (busy, None)
                }
                // While waiting, a store outage is waited out like a busy lease.
                Err(e) if e.is_transient() && opts.timeout != Some(Duration::ZERO) => {
                    // on_wait shows it to the caller; a log line would only duplicate it.
                    tracing::debug!(error = %e, "store error while waiting for a lease; retrying");
                    (failed_look(&names[0], &e), Some(e))
                }
                Err(e) => return Err(e),
            };
            on_wait(&busy);
            let now = clock.mono();
            if let Some(deadline) = deadline
                && now >= deadline
            {
                return Err(failed.unwrap_or_else(|| self.gave_up(&busy, opts, now.saturating_since(started))));
            }
            let sleep = self.next_sleep(&busy, backoff, deadline, now);
            // A queued wait that ran its course was the sleep (one answered at
            // once was not); the first busy answer goes straight to the queue.
            let was_parked = std::mem::replace(&mut park, queues && names.len() == 1 && failed.is_none());
            let sleep = match (was_parked, park) {
                (true, _) => sleep.saturating_sub(now.saturating_since(asked)),
                (false, true) => Duration::ZERO,
                (false, false) => sleep,
            };
            if !sleep.is_zero() {
                self.store.wait_for_change(&busy, sleep).await;
            }
            last = Some((busy, failed));
            backoff = (backoff * 2).min(opts.backoff_max);
        }
    }

    /// `grants`, if they leave time to renew them once before their stop-by
    /// (local deadline − safety margin; the rule a held lease is kept by, see
    /// `take_in_order`). A grant whose answer came later than that — a slow
    /// store, a process paused between request and answer — cannot be vouched
    /// for: its holder would act on it only to stop at once, or after it
    /// expired. It is released (within a renewal interval; else it expires) and
    /// the caller is told, as a transient store error, how late it came.
    pub(crate) async fn vouch(&self, grants: Vec<Grant>, opts: &LeaseOptions, asked: Mono) -> Result<Vec<Grant>> {
        let now = self.clock().mono();
        let usable = |g: &Grant| now + opts.safety() + opts.renew_interval() < g.local_deadline;
        if grants.iter().all(usable) {
            return Ok(grants);
        }
        let name = grants.first().map(|g| g.name.to_string()).unwrap_or_default();
        let took = now.saturating_since(asked);
        let budget = crate::keepalive::release_budget(&grants, &**self.clock(), opts.renew_interval());
        release_within(self.store.clone(), budget, grants).await;
        let why = format!(
            "the grant of {name:?} came {} after it was asked for, too late to be used with a TTL of {} \
             (it must leave time for one renewal before the safety margin); it was released unused. \
             A longer TTL allows slower answers",
            crate::duration::human_duration(took),
            crate::duration::human_duration(opts.ttl),
        );
        Err(Error::store(self.store.url(), "acquiring", why))
    }

    /// Full jitter over `[backoff/2, backoff]`, never past the overall deadline,
    /// and no later than the moment the blocking grant could first be taken over.
    pub(crate) fn next_sleep(&self, busy: &Busy, backoff: Duration, deadline: Option<Mono>, now: Mono) -> Duration {
        let half = backoff / 2;
        let jitter = Duration::from_nanos(self.rng.lock().random_range(0..=half.as_nanos() as u64));
        let mut sleep = half + jitter;
        if let Some(first) = busy.holders.iter().map(|h| h.expires_in_ms).min() {
            sleep = sleep.min(Duration::from_millis(first + 1));
        }
        if let Some(deadline) = deadline {
            sleep = sleep.min(deadline.saturating_since(now));
        }
        sleep
    }

    /// The wait ran out while the store had not answered an attempt.
    fn unanswered(&self, name: &LeaseName, opts: &LeaseOptions, waited: Duration) -> Error {
        let attempt = opts.timeout.unwrap_or_default();
        Error::Timeout {
            store: self.store.url().to_string(),
            name: name.to_string(),
            waited,
            holder: format!("{UNANSWERED} within the {} timeout", crate::duration::human_duration(attempt)),
        }
    }

    fn gave_up(&self, busy: &Busy, opts: &LeaseOptions, waited: Duration) -> Error {
        self.gave_up_on(&busy.name, busy.describe(), opts, waited)
    }

    /// Busy (a try) or timed out, `holder` holding `name` as far as known.
    pub(crate) fn gave_up_on(&self, name: &LeaseName, holder: String, opts: &LeaseOptions, waited: Duration) -> Error {
        let (store, name) = (self.store.url().to_string(), name.to_string());
        if opts.timeout == Some(Duration::ZERO) {
            Error::Busy { store, name, holder }
        } else {
            Error::Timeout { store, name, waited, holder }
        }
    }

    /// Reads a lease's state without writing.
    pub async fn inspect(&self, name: &str) -> Result<LeaseState> {
        self.store.inspect(&LeaseName::new(name)?).await
    }

    /// Watches a lease: its state now ([`crate::Change::Current`]), then one
    /// [`crate::Holding`] per change — acquired, taken over, released, broken,
    /// expired — until the stream is dropped. Pushed where the store watches
    /// keys (a directory, etcd), else read every `poll` at most; a holder's
    /// expiry is seen when it happens, writes or not. A failed read is an
    /// `Err` item, and the watch goes on after `poll`. See [`crate::watch`].
    ///
    /// # Errors
    /// `InvalidName` for a name that is not a lease name.
    pub fn watch(
        &self,
        name: &str,
        poll: std::time::Duration,
    ) -> Result<impl futures::Stream<Item = Result<crate::Holding>> + Send + use<>> {
        Ok(crate::watch::watch(self.store.clone(), LeaseName::new(name)?, poll))
    }

    /// Names of the leases under `prefix`.
    pub async fn list(&self, prefix: &str) -> Result<Vec<LeaseName>> {
        self.store.list(prefix).await
    }

    /// Breaks the lease as `seen` showed it (all grants, or only `only_token`),
    /// failing with [`Error::Changed`] if it changed since. `note` says who broke
    /// it and why; `status` and the next holder's predecessor show it.
    pub async fn break_lease(
        &self,
        seen: &LeaseState,
        only_token: Option<u64>,
        note: Option<&BreakNote>,
    ) -> Result<()> {
        self.store.break_lease(seen, only_token, note).await
    }
}

/// The leases [`Client::take_in_order`] holds while it waits for the next:
/// counted among the client's held names (no other handle of the client
/// re-takes them meanwhile), and given back if the wait is given up — also
/// when the caller drops its future, by a release that is not waited for.
struct Holding<'c> {
    client: &'c Client,
    grants: Vec<Grant>,
    /// The renewal interval, which a release is given at least.
    interval: Duration,
}

impl<'c> Holding<'c> {
    fn new(client: &'c Client, opts: &LeaseOptions) -> Self {
        Self { client, grants: Vec::new(), interval: opts.renew_interval() }
    }

    /// How long releasing what is held may take.
    fn budget(&self) -> Duration {
        crate::keepalive::release_budget(&self.grants, &**self.client.clock(), self.interval)
    }

    fn add(&mut self, grants: Vec<Grant>) {
        crate::keepalive::register(&self.client.held, &grants);
        self.grants.extend(grants);
    }

    /// Takes the grants out, no longer counted among the client's held names.
    fn take(&mut self) -> Vec<Grant> {
        let grants = std::mem::take(&mut self.grants);
        crate::keepalive::unregister(&self.client.held, &grants);
        grants
    }

    /// The grants, for a [`LeaseSet`], which counts them itself.
    fn into_grants(mut self) -> Vec<Grant> {
        self.take()
    }

    /// Releases what is held.
    async fn let_go(mut self) {
        let budget = self.budget();
        let grants = self.take();
        release_within(self.client.store.clone(), budget, grants).await;
    }
}

/// Releases `grants`, waiting at most `budget`: what is not released in time
/// expires by itself.
async fn release_within(store: Arc<dyn LeaseStore>, budget: Duration, grants: Vec<Grant>) {
    if grants.is_empty() {
        return;
    }
    let plain = crate::store::ReleaseRequest::default();
    for r in store.clock().timeout(budget, store.release_all(&grants, &plain)).await.unwrap_or_default() {
        if let Err(e) = r {
            tracing::info!(error = %e, "releasing a lease held while waiting failed; it expires by itself");
        }
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        let budget = self.budget();
        let grants = self.take();
        // The caller gave up mid-wait: release without waiting for it (and
        // only where a runtime can run the release; else they expire).
        if let (false, Ok(runtime)) = (grants.is_empty(), tokio::runtime::Handle::try_current()) {
            runtime.spawn(release_within(self.client.store.clone(), budget, grants));
        }
    }
}
