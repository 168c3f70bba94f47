//! Waiting in line on a store that can watch keys (a local directory, etcd),
//! or whose line is polled (object stores): first come, first served. The
//! waiting is written once, over a [`Line`]: the store's own (etcd keeps a key
//! per waiter, like its Lock API; a directory a file per waiter, see
//! `tenure-file`'s wait line; an object store an object per waiter, polled, see
//! [`Line::polls`]), or else one record per lease written with [`Backend`]'s
//! read, conditional write and watch ([`RecordLine`]: the memory store). In a
//! polled line a waiter looks again after pauses from 25 ms doubling to 1 s,
//! where a watched one would be woken; once its turn came it polls the lease
//! alone (those ahead of it only leave) until it next shows it is alive.
//!
//! A waiter
//! 1. **enters** the line: in the record, by appending itself (a conditional
//!    write; a lost race reads and appends again), so the order is the order of
//!    the store's own writes, not of anybody's clock;
//! 2. **waits for its turn**: it may try the lease only when every waiter ahead
//!    of it is shared and so is it, or nobody is ahead ([`may_try`]). Until then
//!    it watches the line (the record; on etcd only the key of the waiter just
//!    ahead, so a hand-over wakes one waiter, not all); at its turn it tries the
//!    lease and, while it is held, watches the lease's key, so only the head of
//!    the line wakes when the lease frees;
//! 3. **stays alive** by entering again every [`REFRESH`]. In the record (at
//!    key `name~queue`) each entry has the wall-clock time until which it is
//!    known alive: an entry more than the store's `max_skew` past it is a
//!    waiter that crashed, and whoever writes the queue next drops it (it held
//!    nothing: only the order is at stake, never the lease, which the record's
//!    own conditional write still guards); an entry that claims to live longer
//!    than any waiter writes is not a waiter's, and is dropped too. On etcd a
//!    waiter's key lapses with its etcd lease;
//! 4. **leaves** once granted, when its wait runs out, or when the caller gives
//!    up (the future is dropped). A granted waiter and one that gave up leave
//!    in a task of their own, so the grant does not wait for that write; the
//!    store's next look at that line, or release of that lease, waits for it
//!    ([`Departures`]).
//!
//! A waiter that crashes thus holds up those behind it for at most
//! [`ENTRY_TTL`] plus `max_skew` (on etcd, its etcd lease's TTL). A newcomer's first attempt does not read the
//! queue (that would cost every uncontended acquisition a read): it takes a
//! lease that is free at that instant, which between a release and the head's
//! grab is a window of one watch wake-up (in a polled line, one poll). A store
//! that cannot watch the queue and keeps no polled line (a directory on NFS:
//! no change notifications) keeps no queue: its waiters poll.
//! So do the waiters of a line that cannot be used (a directory's line cluttered
//! with what others left there, see `tenure-file`'s wait line): such a line is taken
//! for empty, never an error that keeps anyone from a free lease. Only the
//! store's own failures (no answer in time) are the caller's to see.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use serde::{Deserialize, Serialize};

use super::CasStore;
use crate::backend::{Backend, Key, Line, Put, PutOptions, Waiter, may_try};
use crate::clock::{Clock, ClockExt};
use crate::error::{Error, Result};
use crate::record::{Judge, LeaseRecord};
use crate::store::{AcquireRequest, LeaseStore};
use crate::types::{Attempt, Busy, Mode};

/// How long an entry is known alive after its waiter last wrote it.
pub const ENTRY_TTL: Duration = Duration::from_secs(6);
/// How often a waiter enters again, to show it is alive.
pub const REFRESH: Duration = Duration::from_secs(2);
/// Most waiters in one line.
pub const MAX_WAITERS: usize = 1024;
/// Conditional writes lost in a row before entering or leaving gives up.
const MAX_RACES: usize = 64;
/// The first pause of a waiter in a polled line (see [`Line::polls`]),
/// doubling up to [`POLL_MAX`]: the client's default backoff when it polls.
const POLL_FIRST: Duration = Duration::from_millis(25);
/// The longest pause of a waiter in a polled line: a hand-over costs at most
/// about this much, and a waiter of a held lease one look this often.
const POLL_MAX: Duration = Duration::from_secs(1);
/// The first pause of a waiter in line after a passing store error (a watch
/// stream reset, a read that timed out), doubling up to [`REFRESH`]: it keeps
/// its place and looks again, as etcd's Lock API keeps its key across retries.
const ERROR_PAUSE: Duration = Duration::from_millis(100);

/// A queue record.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Queue {
    waiters: Vec<Entry>,
}

/// One waiter.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    /// The holder's nonce.
    nonce: String,
    /// It waits for a shared grant.
    shared: bool,
    /// Alive until at least this wall time (unix ms, its own clock).
    until_ms: u64,
}

impl Queue {
    fn line(&self) -> Vec<Waiter> {
        self.waiters.iter().map(|e| Waiter { nonce: e.nonce.clone(), shared: e.shared }).collect()
    }
}

fn queue_key(name: &str) -> Result<Key> {
    Key::new(&format!("{name}~queue"))
}

/// The error of a waiter refused because the line of `name` is full.
pub fn line_full(url: &str, name: &str) -> Error {
    Error::store(url, format!("waiting for {name:?}"), format!("its line has its limit of {MAX_WAITERS} waiters"))
}

/// Whether `e`, from a [`Line`], says that there is no line to wait in: none
/// here for this waiter ([`Error::Unsupported`]), or one that cannot be used
/// ([`Error::Corrupt`]). Its waiters poll.
pub(super) fn no_line(e: &Error) -> bool {
    matches!(e, Error::Unsupported { .. } | Error::Corrupt { .. })
}

/// How an acquisition comes to the lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Arrival {
    /// Asking once ([`LeaseStore::try_acquire`]): a lease that is free is
    /// its at once, but a reader does not join the readers holding the
    /// lease while a writer waits in line (see [`joins_readers`]).
    Newcomer,
    /// In line, at its turn ([`crate::backend::may_try`] said so).
    InLine,
}

/// Whether `req`, a reader, would join readers that hold the lease now, its
/// own process's included (tasks that overlap): one that does so while a
/// writer waits in line overtakes that writer, and overlapping readers could
/// keep it waiting for ever. Only a re-take of a live grant of its own
/// replaces that grant and overtakes nobody; any other ask adds one.
pub(super) fn joins_readers(current: Option<&LeaseRecord>, req: &AcquireRequest, judge: &dyn Judge) -> bool {
    let Some(record) = current.filter(|_| req.mode == Mode::Shared) else { return false };
    let mut live = record.shared.iter().filter(|e| !judge.expired(e));
    let retakes_own = req.retake && live.clone().any(|e| e.holder.nonce == req.holder.nonce);
    live.next().is_some() && !retakes_own
}

/// The line of a store that keeps none of its own: one record per lease, at
/// key `name~queue`, read, written on its version and watched through the
/// [`Backend`].
#[derive(Debug)]
pub struct RecordLine {
    backend: Arc<dyn Backend>,
    clock: Arc<dyn Clock>,
    /// Entries more than this past their time are waiters that crashed.
    skew: Duration,
}

impl RecordLine {
    /// The line kept in `backend`'s records; entries are judged on `clock`,
    /// with `skew` of tolerance.
    pub fn new(backend: Arc<dyn Backend>, clock: Arc<dyn Clock>, skew: Duration) -> Self {
        Self { backend, clock, skew }
    }

    /// The queue at `key` and its version, as written, without the entries of
    /// waiters that crashed (more than `skew` past their time) and of entries
    /// no waiter wrote (claiming to live longer than any waiter writes: they
    /// would hold the line up for good). A record that does not parse (a
    /// careless tenant's bytes) is an empty queue, replaced by the next write.
    async fn read(&self, key: &Key) -> Result<(Queue, Option<crate::types::Version>)> {
        let Some(stored) = self.backend.get(key).await? else { return Ok((Queue::default(), None)) };
        let mut queue: Queue = serde_json::from_slice(&stored.value).unwrap_or_else(|e| {
            tracing::debug!(key = key.as_str(), error = %e, "unreadable queue record; taken as empty");
            Queue::default()
        });
        let now_ms = self.clock.wall_ms();
        let skew_ms = crate::limits::millis(self.skew);
        let latest = now_ms.saturating_add(crate::limits::millis(ENTRY_TTL)).saturating_add(skew_ms);
        queue.waiters.retain(|e| e.until_ms.saturating_add(skew_ms) >= now_ms && e.until_ms <= latest);
        queue.waiters.truncate(MAX_WAITERS);
        Ok((queue, Some(stored.version)))
    }

    /// Reads the queue, lets `change` edit it, and writes it back on the
    /// version read, again until a write lands.
    async fn update(&self, key: &Key, change: impl Fn(&mut Queue, u64) -> Result<()>) -> Result<()> {
        let url = self.backend.url();
        for _ in 0..MAX_RACES {
            let (mut queue, version) = self.read(key).await?;
            change(&mut queue, self.clock.wall_ms())?;
            let bytes = Bytes::from(serde_json::to_vec(&queue).map_err(|e| Error::store(url, key.as_str(), e))?);
            let opts = version.map_or_else(PutOptions::create, PutOptions::update);
            // On etcd the record goes with its last waiter.
            let opts = opts.with_expires_after(ENTRY_TTL.saturating_mul(2).saturating_add(self.skew));
            // Only the order is at stake: a line a crash loses or tears reads as
            // empty, and its waiters (if any survived) enter again.
            let opts = opts.volatile();
            if let Put::Done(_) = self.backend.put(key, bytes, opts).await? {
                return Ok(());
            }
        }
        Err(Error::store(url, key.as_str(), format!("lost {MAX_RACES} writes of the wait queue in a row")))
    }
}

#[async_trait]
impl Line for RecordLine {
    async fn enter(&self, name: &str, waiter: &Waiter) -> Result<()> {
        let url = self.backend.url();
        self.update(&queue_key(name)?, |q, now_ms| {
            let until_ms = now_ms.saturating_add(crate::limits::millis(ENTRY_TTL));
            let full_now = q.waiters.len() >= MAX_WAITERS;
            match q.waiters.iter_mut().find(|e| e.nonce == waiter.nonce) {
                Some(e) => e.until_ms = until_ms,
                None if full_now => return Err(line_full(url, name)),
                None => q.waiters.push(Entry { nonce: waiter.nonce.clone(), shared: waiter.shared, until_ms }),
            }
            Ok(())
        })
        .await
    }

    async fn waiters(&self, name: &str) -> Result<Vec<Waiter>> {
        Ok(self.read(&queue_key(name)?).await?.0.line())
    }

    async fn turn(&self, name: &str, waiter: &Waiter, timeout: Duration) -> Result<Option<bool>> {
        let key = queue_key(name)?;
        let (queue, version) = self.read(&key).await?;
        match may_try(&queue.line(), waiter) {
            Some(false) => {}
            decided => return Ok(decided),
        }
        // Not yet: until the queue changes. The wait ends on this line's clock
        // (tests inject one).
        tokio::select! {
            w = self.backend.watch(&key, version.as_ref(), timeout) => w.map(|_| Some(false)),
            () = self.clock.sleep(timeout) => Ok(Some(false)),
        }
    }

    async fn leave(&self, name: &str, nonce: &str) -> Result<()> {
        self.update(&queue_key(name)?, |q, _| {
            q.waiters.retain(|e| e.nonce != nonce);
            Ok(())
        })
        .await
    }
}

/// Departures from lines still being written, per lease name. A waiter that
/// is granted the lease leaves its line in the background, so the grant does
/// not wait for that write (on a durable directory, a write and two `fsync`s);
/// this store's next entry into that line, look at it, or release of that
/// lease waits for the departure first, so a holder that releases and queues
/// again is never taken out of the line by its own earlier leave, never finds
/// itself still at the head, and a process that releases and exits has left
/// the line. Only departures in flight are kept: finished ones are swept at
/// every start.
#[derive(Debug, Default)]
pub(super) struct Departures(parking_lot::Mutex<HashMap<String, Vec<Departure>>>);

/// One departure in flight, awaited by whoever needs it landed.
type Departure = Shared<BoxFuture<'static, ()>>;

impl Departures {
    /// Takes `nonce` out of `name`'s line in the background, if a runtime is
    /// there to run it (else the entry lapses, as a crashed waiter's does).
    fn start(&self, line: Arc<dyn Line>, name: String, nonce: String) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let task = rt.spawn({
            let name = name.clone();
            async move { leave_line(&*line, &name, &nonce).await }
        });
        let mut all = self.0.lock();
        all.retain(|_, departures| {
            departures.retain(|d| d.peek().is_none());
            !departures.is_empty()
        });
        all.entry(name).or_default().push(task.map(drop).boxed().shared());
    }

    /// Until every departure from `name`'s line started here has landed (or
    /// failed: the entry then lapses).
    pub(super) async fn settle(&self, name: &str) {
        let Some(departures) = self.0.lock().get(name).cloned() else { return };
        futures::future::join_all(departures).await;
    }
}

/// Takes a waiter out of its line when dropped, unless it already left.
struct Leave {
    departures: Arc<Departures>,
    line: Arc<dyn Line>,
    name: String,
    nonce: String,
    done: bool,
}

impl Leave {
    /// Leaves now (the wait ended without the lease). Cut short (its caller's
    /// timeout), it leaves in the background instead.
    async fn now(mut self) {
        leave_line(&*self.line, &self.name, &self.nonce).await;
        self.done = true;
    }
}

/// Pauses between attempts to leave a line, after one failed: an entry
/// left behind may live as long as this process's other entries do (on etcd
/// they share an etcd lease), holding up everyone behind it.
const LEAVE_RETRIES: [Duration; 2] = [Duration::from_millis(250), Duration::from_secs(1)];

/// Takes `nonce` out of `name`'s line, trying again after a failure.
async fn leave_line(line: &dyn Line, name: &str, nonce: &str) {
    for pause in LEAVE_RETRIES {
        match line.leave(name, nonce).await {
            Ok(()) => return,
            Err(e) => tracing::debug!(lease = name, error = %e, "leaving a wait line failed; trying again"),
        }
        tokio::time::sleep(pause).await;
    }
    if let Err(e) = line.leave(name, nonce).await {
        tracing::warn!(lease = name, error = %e, "leaving a wait line failed; the entry lapses");
    }
}

impl Drop for Leave {
    /// Granted, or the caller gave up on the wait (the future was dropped):
    /// leave in the background.
    fn drop(&mut self) {
        if !self.done {
            let (name, nonce) = (std::mem::take(&mut self.name), std::mem::take(&mut self.nonce));
            self.departures.start(self.line.clone(), name, nonce);
        }
    }
}

/// The pauses of a waiter in a polled line ([`Line::polls`]): from
/// [`POLL_FIRST`], doubling up to [`POLL_MAX`], each drawn from its upper half
/// so that waiters do not look in step. A watched line has none.
struct Polls {
    on: bool,
    next: Duration,
}

impl Polls {
    fn new(on: bool) -> Self {
        Self { on, next: POLL_FIRST }
    }

    /// `nap`, cut to the next pause if the line is polled.
    fn next(&mut self, nap: Duration) -> Duration {
        if !self.on {
            return nap;
        }
        let half = self.next / 2;
        let pause = half + Duration::from_nanos(rand::random_range(0..=half.as_nanos() as u64));
        self.next = self.next.saturating_mul(2).min(POLL_MAX);
        nap.min(pause)
    }
}

/// Whether `e`, met by a waiter in line, is one to wait out in its place:
/// the store failed for now (a watch stream reset, a read timed out), and the
/// line is still there to wait in.
fn passing(e: &Error) -> bool {
    matches!(e, Error::Store { .. }) && e.is_transient() && !no_line(e)
}

impl CasStore {
    /// The waiters in `name`'s line, first first (waiters that crashed left
    /// out): what `tenure status` and tests show.
    pub async fn waiters(&self, name: &str) -> Result<Vec<Waiter>> {
        self.line.waiters(name).await
    }

    /// Whether this store keeps wait lines: its line is polled, or it can
    /// watch keys (learnt once, before anything is written). Without, its
    /// waiters poll the lease alone.
    pub(super) async fn can_queue(&self, name: &str) -> bool {
        use std::sync::atomic::Ordering;
        if self.line.polls() {
            return true;
        }
        if !self.watch_checked.swap(true, Ordering::Relaxed)
            && let Ok(key) = queue_key(name)
            && let Err(Error::Unsupported { .. }) = self.backend.watch(&key, None, Duration::ZERO).await
        {
            self.cannot_watch.store(true, Ordering::Relaxed);
        }
        !self.cannot_watch.load(Ordering::Relaxed)
    }

    /// Busy if others wait in line for the lease ahead of `req`, on a name this
    /// store has queued for before: a holder that releases and asks again at
    /// once (a loop of jobs) goes to the back of the line instead of taking the
    /// lease from the waiter it was just handed to. Other newcomers do not read
    /// the line (that would cost every acquisition a read).
    pub(super) async fn behind_the_line(&self, req: &AcquireRequest) -> Result<Option<Busy>> {
        let name = req.name.as_str();
        if !self.lined.lock().contains(name) {
            return Ok(None);
        }
        self.departures.settle(name).await;
        let line = match self.line.waiters(name).await {
            Ok(line) => line,
            // Nobody waits in a line that cannot be used: its waiters poll.
            Err(e) if no_line(&e) => {
                tracing::debug!(lease = name, error = %e, "the wait line cannot be read; nobody is ahead");
                self.lined.lock().remove(name);
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        if line.is_empty() {
            self.lined.lock().remove(name);
            return Ok(None);
        }
        let me = Waiter { nonce: req.holder.nonce.clone(), shared: req.mode == Mode::Shared };
        if may_try(&line, &me) == Some(true) {
            return Ok(None);
        }
        self.inspect(&req.name).await.map(|s| Some(Busy::of(s)))
    }

    /// Whether a writer other than `nonce` waits in `name`'s line (readers
    /// alone in line are about to be granted, and keep no reader out; a line
    /// that cannot be used holds nobody: its waiters poll).
    pub(super) async fn a_writer_waits(&self, name: &str, nonce: &str) -> Result<bool> {
        if !self.can_queue(name).await {
            return Ok(false);
        }
        match self.line.waiters(name).await {
            Ok(line) => Ok(line.iter().any(|w| w.nonce != nonce && !w.shared)),
            Err(e) if no_line(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// [`LeaseStore::acquire_queued`] for stores that can watch: `None` when
    /// this one cannot (its waiters poll).
    pub(super) async fn wait_in_line(&self, req: &AcquireRequest, wait: Duration) -> Option<Result<Attempt>> {
        use std::sync::atomic::Ordering;
        let name = req.name.as_str();
        let key = Key::lease(&req.name);
        if !self.can_queue(name).await {
            return None;
        }
        let until = self.clock.mono() + wait;
        let me = Waiter { nonce: req.holder.nonce.clone(), shared: req.mode == Mode::Shared };
        self.lined.lock().insert(name.to_string());
        self.departures.settle(name).await;
        // Made before entering: a wait dropped while its entry is being
        // written leaves no entry behind (which, kept alive with the
        // process's other entries, would hold up everyone behind it).
        let leave = Leave {
            departures: self.departures.clone(),
            line: self.line.clone(),
            name: name.to_string(),
            nonce: me.nonce.clone(),
            done: false,
        };
        if let Err(e) = self.line.enter(name, &me).await {
            return self.off_the_line(name, e, Some(leave)).await;
        }
        let mut entered = self.clock.mono();
        // It entered again because the line had lost it, and has not seen
        // the line since.
        let mut reentered = false;
        let mut busy: Option<Busy> = None;
        let mut pause = ERROR_PAUSE;
        let mut polls = Polls::new(self.line.polls());
        // In a polled line, whether its turn came at its last look: those ahead
        // of it only leave, so it stays its turn, and the line is looked at
        // again (`relook`) only when it next shows it is alive.
        let (mut my_turn, mut relook) = (false, true);
        loop {
            let now = self.clock.mono();
            if now >= until {
                break;
            }
            if now.saturating_since(entered) >= REFRESH {
                // Still here.
                relook = true;
                match self.line.enter(name, &me).await {
                    Ok(()) => entered = self.clock.mono(),
                    Err(e) if passing(&e) => {
                        self.pause_for(name, &e, &mut pause, until).await;
                        continue;
                    }
                    Err(e) => return self.off_the_line(name, e, Some(leave)).await,
                }
            }
            let nap = REFRESH.saturating_sub(self.clock.mono().saturating_since(entered));
            let nap = nap.min(until.saturating_since(self.clock.mono()));
            let turn = if my_turn && !relook {
                Ok(Some(true))
            } else {
                relook = false;
                let nap = polls.next(nap);
                let wake = self.clock.mono() + nap;
                tokio::select! {
                    t = self.line.turn(name, &me, nap) => t,
                    () = self.clock.sleep_until(wake) => Ok(Some(false)),
                }
            };
            let lost = matches!(turn, Ok(None));
            let was_my_turn = std::mem::replace(&mut my_turn, polls.on && matches!(turn, Ok(Some(true))));
            if my_turn && !was_my_turn {
                // Its turn came: it looks at the lease soon, then less often.
                polls.next = POLL_FIRST;
            }
            let watched = match turn {
                // Its turn, just read: no second look at the line.
                Ok(Some(true)) => match self.acquire_now(req, Arrival::InLine).await {
                    // Leaves the line in the background (see [`Departures`]).
                    Ok(Attempt::Granted(g)) => return Some(Ok(Attempt::Granted(g))),
                    Ok(Attempt::Busy(b)) => {
                        // Until the first holder could be taken over, at the latest.
                        let first = b.holders.iter().map(|h| h.expires_in_ms).min();
                        let nap = first.map_or(nap, |ms| nap.min(Duration::from_millis(ms.saturating_add(1))));
                        let seen = b.version.clone();
                        busy = Some(b);
                        let nap = polls.next(nap);
                        let wake = self.clock.mono() + nap;
                        if polls.on {
                            // Nothing to watch: it looks again after the pause.
                            self.clock.sleep_until(wake).await;
                            Ok(false)
                        } else {
                            tokio::select! {
                                w = self.backend.watch(&key, seen.as_ref(), nap) => w,
                                () = self.clock.sleep_until(wake) => Ok(false),
                            }
                        }
                    }
                    // Waited out below, in its place.
                    Err(e) if passing(&e) => Err(e),
                    Err(e) => return Some(Err(e)),
                },
                Ok(Some(false)) => Ok(false),
                // Not in line just after entering it: a line that cannot keep
                // this waiter (whatever the cause, never a loop without
                // sleep). It waits by polling, as without a line.
                Ok(None) if reentered => {
                    tracing::warn!(lease = name, "the wait line does not keep this waiter; waiting by polling");
                    // Polling, it does not stay behind a line it is not in.
                    self.lined.lock().remove(name);
                    leave.now().await;
                    return None;
                }
                // Taken for crashed after a long pause (or its line went):
                // back in line.
                Ok(None) => {
                    if let Err(e) = self.line.enter(name, &me).await {
                        return self.off_the_line(name, e, Some(leave)).await;
                    }
                    entered = self.clock.mono();
                    Ok(false)
                }
                Err(e) => Err(e),
            };
            reentered = lost;
            match watched {
                Ok(_) => pause = ERROR_PAUSE,
                Err(e) if passing(&e) => self.pause_for(name, &e, &mut pause, until).await,
                Err(Error::Unsupported { .. }) => {
                    // No change notifications here (NFS): poll, as without a line.
                    self.cannot_watch.store(true, Ordering::Relaxed);
                    self.lined.lock().remove(name);
                    leave.now().await;
                    return None;
                }
                Err(e) => return self.off_the_line(name, e, Some(leave)).await,
            }
        }
        leave.now().await;
        Some(match busy {
            Some(b) => Ok(Attempt::Busy(b)),
            None => self.inspect(&req.name).await.map(|s| Attempt::Busy(Busy::of(s))),
        })
    }

    /// A waiter's pause in line after the passing error `e`: `pause`, doubled
    /// for the next (up to [`REFRESH`]), and never past `until`.
    async fn pause_for(&self, name: &str, e: &Error, pause: &mut Duration, until: crate::clock::Mono) {
        tracing::debug!(lease = name, error = %e, "a store error while waiting in line; keeping the place");
        let wake = (self.clock.mono() + *pause).min(until);
        *pause = pause.saturating_mul(2).min(REFRESH);
        self.clock.sleep_until(wake).await;
    }

    /// What a waiter does when its line failed it with `e`: if there is no
    /// line to wait in ([`no_line`]) it leaves (if it entered) and polls
    /// (`None`); a line that cannot be used is also no reason to stay behind
    /// it ([`Self::behind_the_line`]). Any other error is the caller's (and
    /// the waiter leaves in the background).
    async fn off_the_line(&self, name: &str, e: Error, leave: Option<Leave>) -> Option<Result<Attempt>> {
        if !no_line(&e) {
            return Some(Err(e));
        }
        if let Error::Corrupt { .. } = e {
            tracing::warn!(lease = name, error = %e, "the wait line cannot be used; waiting by polling");
            self.lined.lock().remove(name);
        } else {
            tracing::debug!(lease = name, error = %e, "no place in the wait line; waiting by polling");
        }
        if let Some(leave) = leave {
            leave.now().await;
        }
        None
    }
}
