//! Leases on any [`Backend`]: the lease logic written once, over read and
//! conditional write.
//!
//! # Protocol
//!
//! Each lease name is one record (see [`crate::record`]). Every operation reads the
//! record, decides with the pure functions of [`crate::record`], and writes the
//! result conditionally on the version it read. If the write loses (someone else
//! wrote first) it reads again and decides again. So:
//! - **mutual exclusion** rests on the store's conditional write: of two holders
//!   deciding from the same version, only one write lands;
//! - **tokens** are `last_token + 1`; when the record is absent or unreadable, the
//!   store's floor (its version sequence, or etcd's revision) is used instead, so
//!   tokens grow strictly with every grant, also past a record whose content was
//!   lost or whose key expired. A store without a version sequence (S3, Azure)
//!   floors the token after an unreadable record on the time *the store* last
//!   modified it, in µs (see `CasStore::unreadable_floor`), never on the
//!   replacing client's clock, and never below the highest token this handle has
//!   seen for the name (nor does a record that disappeared restart tokens below
//!   it);
//! - **release and break** are conditional on the version observed: a delayed
//!   release can never free a grant it did not see
//!   (`docs/design/object-store-lock.md#unintended-release`);
//! - a release keeps the record, marked released, so the token counter and the
//!   watermark are never lost. A release that leaves no metadata is written
//!   [volatile](PutOptions::volatile): a crash of the machine may lose it, which
//!   leaves the acquisition's durable record, read as a grant whose holder
//!   crashed (see `release_put`).
//!
//! Requests per operation (uncontended): acquire = 1 read + 1 write, or just the
//! write when this store wrote the record last (it decides from its cached copy and
//! lets the conditional write validate it); renew and release = 1 write; a conflict
//! costs one more read; a waiting contender polls with 1 read.
//!
//! # Clock discipline
//!
//! Safety never rests on synchronised clocks. A holder measures its deadline on its
//! monotonic clock from the moment it *sent* the write (`local_deadline`), and its
//! keep-alive stops it before `local_deadline - safety margin`. A contender ends a
//! grant only when
//! - (a) it has watched the same grant (token, renewal count) stay in the record
//!   for a full TTL on *its* monotonic clock: the holder wrote that renewal no later
//!   than the contender first saw it, so the holder's own deadline has passed; or
//! - (b) the wall-clock deadline in the record is older than `max_skew`.
//!
//! An unreadable record (empty, truncated, garbage) is judged by its age, as seed
//! 002's Corrupt-Recent / Corrupt-Stale: it may be replaced once the same version
//! has been watched for `corrupt_ttl`, or once the store's modification time is
//! older than `corrupt_ttl + max_skew`. A record written by a newer major format is
//! refused, never overwritten.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::backend::{Backend, Key, Line, Put, PutOptions, Stored};
use crate::clock::{Clock, Mono};
use crate::error::{Error, Result};
use crate::limits::millis;
use crate::name::LeaseName;
use crate::record::{self, Decision, LeaseRecord};
use crate::store::{AcquireRequest, AllAttempt, LeaseStore, ReleaseRequest};
use crate::types::{Attempt, BreakNote, Busy, EndedHow, Grant, LeaseState, Predecessor, Released, Version};

/// How many times one operation re-reads after losing a conditional write.
const MAX_CONFLICTS: u32 = 16;
/// Most names whose highest token a store remembers (see `CasStore::unreadable_floor`).
const SEEN_NAMES: usize = 4096;

/// Tuning of the clock discipline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CasOptions {
    /// Largest difference between any two clocks (holders', contenders' and the
    /// store's). Takeover by wall-clock deadline waits this much longer.
    pub max_skew: Duration,
    /// Age after which an unreadable record may be replaced. Must exceed the renew
    /// interval of any holder (a holder whose record turns unreadable learns it at
    /// its next renewal).
    pub corrupt_ttl: Duration,
}

impl Default for CasOptions {
    fn default() -> Self {
        Self { max_skew: Duration::from_secs(2), corrupt_ttl: Duration::from_secs(60) }
    }
}

impl CasOptions {
    /// With `max_skew`.
    pub fn with_max_skew(mut self, d: Duration) -> Self {
        self.max_skew = d;
        self
    }
    /// With `corrupt_ttl`.
    pub fn with_corrupt_ttl(mut self, d: Duration) -> Self {
        self.corrupt_ttl = d;
        self
    }
}

/// [`LeaseStore`] over a [`Backend`].
#[derive(Debug)]
pub struct CasStore {
    backend: Arc<dyn Backend>,
    clock: Arc<dyn Clock>,
    opts: CasOptions,
    /// Per name: the stamps seen in the latest read and when each was first seen.
    watched: Mutex<HashMap<String, Vec<(Stamp, Mono)>>>,
    /// Per name: the record this store last wrote, and its version.
    written: Mutex<HashMap<String, (Version, LeaseRecord)>>,
    /// Per name: the highest token this store has read or written (at most
    /// [`SEEN_NAMES`] names), under the floor of a token after an unreadable record.
    seen: Mutex<HashMap<String, u64>>,
    /// Whether the backend said it cannot watch.
    cannot_watch: std::sync::atomic::AtomicBool,
    /// Whether a wait queue has asked the backend if it can watch.
    watch_checked: std::sync::atomic::AtomicBool,
    /// Names this store has queued for: its next attempts on them look at the
    /// queue first (see [`queue`]), until they find it empty.
    lined: Mutex<std::collections::HashSet<String>>,
    /// The wait line: the backend's own, or one record per lease.
    line: Arc<dyn Line>,
    /// Leaves from lines still being written.
    departures: Arc<queue::Departures>,
}

mod queue;
mod seen;
use queue::{Arrival, joins_readers};
pub use queue::{ENTRY_TTL, MAX_WAITERS, REFRESH, RecordLine, line_full};
use seen::{Read, Stamp};

impl CasStore {
    /// Leases over `backend`, measured on `clock`.
    pub fn new(backend: Arc<dyn Backend>, clock: Arc<dyn Clock>, opts: CasOptions) -> Self {
        let line = backend.clone().line(&clock, opts.max_skew).unwrap_or_else(|| {
            Arc::new(RecordLine::new(backend.clone(), clock.clone(), opts.max_skew)) as Arc<dyn Line>
        });
        Self {
            line,
            backend,
            clock,
            opts,
            watched: Mutex::default(),
            written: Mutex::default(),
            seen: Mutex::default(),
            cannot_watch: Default::default(),
            watch_checked: Default::default(),
            lined: Mutex::default(),
            departures: Arc::default(),
        }
    }

    /// The backend underneath.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The options.
    pub fn options(&self) -> &CasOptions {
        &self.opts
    }
}

/// The write of a release: volatile unless it leaves metadata of its own.
///
/// A crash of the machine that loses a release leaves the record as it was
/// before, the acquisition's, which was durable: the token counter is there
/// (and the version sequence past it floors the next token should the release
/// be torn instead), the predecessor's metadata too, and the grant then reads
/// as one whose holder crashed — it ends by its deadline (or, torn, by its
/// age), its watermark raised to its deadline. That is the record a holder
/// killed by the same crash leaves anyway: a lost release costs a wait, never
/// a second holder. Metadata the holder leaves (an `--once-per` mark, slot
/// assignments) would be lost with it, so those releases stay durable.
fn release_put(version: Version, req: &ReleaseRequest) -> PutOptions {
    let put = PutOptions::update(version);
    if req.meta.is_none() { put.volatile() } else { put }
}

impl CasStore {
    /// Writes the release of `grant` into its record.
    async fn release_record(&self, grant: &Grant, req: &ReleaseRequest) -> Result<Released> {
        let name = grant.name.as_str();
        let key = Key::lease(&grant.name);
        let how = if req.dropped { EndedHow::Dropped } else { EndedHow::Released };
        let mut use_cache = true;
        for _ in 0..MAX_CONFLICTS {
            let from_cache = use_cache && self.cached(name, &grant.version).is_some();
            let (version, current) = match self.current_for(grant, from_cache).await {
                Ok(v) => v,
                Err(Error::Lost { .. }) => {
                    self.forget(name);
                    return Ok(Released::NotHeld);
                }
                Err(e) => return Err(e),
            };
            let rec = match record::decide_release(
                &current,
                grant.token,
                &grant.holder.nonce,
                how,
                self.clock.wall_ms(),
                req.watermark_ms,
                req.meta.as_deref(),
            ) {
                Ok(rec) => rec,
                Err(_) => {
                    self.forget(name);
                    return Ok(Released::NotHeld);
                }
            };
            let put = match self.put(&key, &rec, release_put(version, req)).await {
                // As in `acquire_now`: a write from a stale copy failed (the
                // copy is forgotten); release from a real read.
                Err(e) if from_cache => {
                    tracing::debug!(lease = name, error = %e, "a release from the cached record failed; reading it");
                    use_cache = false;
                    continue;
                }
                put => put?,
            };
            match put {
                Put::Done(version) => {
                    self.remember(name, version, rec);
                    return Ok(Released::Released);
                }
                Put::Conflict => use_cache = false,
            }
        }
        Err(Error::store(
            self.url(),
            format!("releasing lease {name:?}"),
            "lost the conditional write to other writers 16 times in a row",
        ))
    }

    /// One acquisition, whoever waits in line (see [`queue`]).
    async fn acquire_now(&self, req: &AcquireRequest, arrival: Arrival) -> Result<Attempt> {
        let name = req.name.as_str();
        let key = Key::lease(&req.name);
        if req.ttl.is_zero() {
            return Err(Error::InvalidOptions { reason: "a ttl of zero".into() });
        }
        crate::limits::check_duration("ttl", req.ttl, crate::limits::MAX_TTL)?;
        let ttl_ms = millis(req.ttl);
        let mut last_busy = None;
        let mut use_cache = true;
        for _ in 0..MAX_CONFLICTS {
            // First decide from the record this store last wrote, if any: the
            // conditional write validates it, and a conflict, a busy answer or a
            // failed write falls back to a real read. A process that re-acquires
            // saves a request.
            let cached = if use_cache { self.last_written(name) } else { None };
            let from_cache = cached.is_some();
            use_cache = false;
            let (read, watched) = match cached {
                Some((version, rec)) => {
                    (Read::Valid(Stored::new(Bytes::new(), version, None), rec), self.watched(name))
                }
                None => {
                    let read = self.read(&key).await?;
                    let watched = self.observe(name, &read);
                    (read, watched)
                }
            };
            let (stored, current, floor, replaced) = match read {
                // A record deleted by hand (or a lifecycle rule) restarts no
                // token below what this handle has seen.
                Read::Absent => (None, None, self.backend.absent_floor(&key).await?.max(self.seen_token(name)), None),
                // The record's own counter is exact: tokens stay consecutive.
                Read::Valid(s, rec) => (Some(s), Some(rec), 0, None),
                Read::Unreadable(s, detail) => {
                    if !self.unreadable_remaining(&s, &watched).is_zero() {
                        return Ok(Attempt::Busy(Busy {
                            name: req.name.clone(),
                            holders: Vec::new(),
                            corrupt: Some(detail),
                            version: Some(s.version),
                            failure: None,
                        }));
                    }
                    tracing::warn!(store = self.url(), lease = name, %detail, "replacing a stale unreadable lease record");
                    let floor = self.unreadable_floor(name, &s);
                    (Some(s), None, floor, Some(floor))
                }
            };
            let version = stored.as_ref().map(|s| s.version.clone());
            let now_ms = self.clock.wall_ms();
            let sent = self.clock.mono();
            let ask = record::Ask {
                mode: req.mode,
                ttl_ms,
                holder: &req.holder,
                retake: req.retake,
                now_ms,
                token_floor: floor,
                meta: req.meta.as_deref(),
            };
            let judge = self.judge(&watched);
            let (rec, token, predecessor) = match record::decide_acquire(name, current.as_ref(), &ask, &judge) {
                Decision::Busy(_) if from_cache => {
                    // Someone else holds it: poll the store from now on.
                    self.forget(name);
                    continue;
                }
                Decision::Busy(holders) => {
                    return Ok(Attempt::Busy(Busy {
                        name: req.name.clone(),
                        holders,
                        corrupt: None,
                        version,
                        failure: None,
                    }));
                }
                Decision::Grant { record, token, predecessor } => (record, token, predecessor),
                Decision::Exhausted { last_token } => {
                    return Err(Error::TokensExhausted {
                        store: self.url().to_string(),
                        name: name.to_string(),
                        last_token,
                    });
                }
            };
            if arrival == Arrival::Newcomer
                && joins_readers(current.as_ref(), req, &judge)
                && self.a_writer_waits(name, &req.holder.nonce).await?
            {
                return self.inspect(&req.name).await.map(|s| Attempt::Busy(Busy::of(s)));
            }
            let predecessor = match replaced {
                Some(floor) => Some(Predecessor {
                    token: floor,
                    holder: None,
                    how: EndedHow::Corrupt,
                    at_ms: now_ms,
                    acquired_ms: None,
                    watermark_ms: None,
                    meta: None,
                    broken: None,
                }),
                None => predecessor,
            };
            let opts =
                PutOptions::after(stored.as_ref()).with_expires_after(req.ttl.saturating_add(self.opts.max_skew));
            let put = match self.put(&key, &rec, opts).await {
                // A write decided from a stale copy can fail where one from a
                // read would not (a directory store's version slot collected
                // long since: "outcome unknown"). The copy is forgotten (see
                // `put`): decide again from a real read, as after a conflict.
                // Were the write to have landed after all, the read shows the
                // asker's own grant, which keeps it waiting: never two grants.
                Err(e) if from_cache => {
                    tracing::debug!(lease = name, error = %e, "a write from the cached record failed; reading it");
                    continue;
                }
                put => put?,
            };
            match put {
                Put::Done(version) => {
                    self.remember(name, version.clone(), rec);
                    return Ok(Attempt::Granted(Grant {
                        name: req.name.clone(),
                        mode: req.mode,
                        token,
                        ttl: req.ttl,
                        deadline_ms: now_ms.saturating_add(ttl_ms),
                        local_deadline: sent + req.ttl,
                        holder: req.holder.clone(),
                        predecessor,
                        version,
                        witness: None,
                    }));
                }
                Put::Conflict => {
                    if from_cache {
                        // Someone else wrote since: the cached copy is stale.
                        self.forget(name);
                    }
                    last_busy = Some(Busy {
                        name: req.name.clone(),
                        holders: Vec::new(),
                        corrupt: None,
                        version,
                        failure: None,
                    });
                }
            }
        }
        // Lost the race every time: report busy and let the caller back off.
        Ok(Attempt::Busy(last_busy.unwrap_or(Busy {
            name: req.name.clone(),
            holders: Vec::new(),
            corrupt: None,
            version: None,
            failure: None,
        })))
    }
}

#[async_trait]
impl LeaseStore for CasStore {
    fn url(&self) -> &str {
        self.backend.url()
    }

    fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Attempt> {
        if let Some(busy) = self.behind_the_line(req).await? {
            return Ok(Attempt::Busy(busy));
        }
        self.acquire_now(req, Arrival::Newcomer).await
    }

    /// One by one, and so not atomic: a backend writes one key at a time.
    async fn try_acquire_all(&self, reqs: &[AcquireRequest]) -> Result<AllAttempt> {
        crate::store::try_acquire_one_by_one(self, reqs).await
    }

    async fn renew(&self, grant: &Grant) -> Result<Grant> {
        let name = grant.name.as_str();
        let key = Key::lease(&grant.name);
        let ttl_ms = millis(grant.ttl);
        let mut use_cache = true;
        for _ in 0..MAX_CONFLICTS {
            let from_cache = use_cache && self.cached(name, &grant.version).is_some();
            let (version, current) = self.current_for(grant, from_cache).await?;
            let now_ms = self.clock.wall_ms();
            let sent = self.clock.mono();
            let rec = record::decide_renew(&current, grant.token, &grant.holder.nonce, ttl_ms, now_ms, None)
                .map_err(|g| self.lost(grant, g.detail))?;
            let opts = PutOptions::update(version).with_expires_after(grant.ttl.saturating_add(self.opts.max_skew));
            let put = match self.put(&key, &rec, opts).await {
                // As in `acquire_now`: a write from a stale copy failed (the
                // copy is forgotten); renew from a real read. Had the write
                // landed, the read shows the grant renewed: renewed again.
                Err(e) if from_cache => {
                    tracing::debug!(lease = name, error = %e, "a renewal from the cached record failed; reading it");
                    use_cache = false;
                    continue;
                }
                put => put?,
            };
            match put {
                Put::Done(version) => {
                    self.remember(name, version.clone(), rec);
                    return Ok(Grant {
                        deadline_ms: now_ms.saturating_add(ttl_ms),
                        local_deadline: sent + grant.ttl,
                        version,
                        ..grant.clone()
                    });
                }
                Put::Conflict => use_cache = false,
            }
        }
        Err(Error::store(
            self.url(),
            format!("renewing lease {name:?}"),
            "lost the conditional write to other writers 16 times in a row",
        ))
    }

    async fn release(&self, grant: &Grant, req: &ReleaseRequest) -> Result<Released> {
        let released = self.release_record(grant, req).await;
        // A holder that got the lease in line has left the line by now.
        self.departures.settle(grant.name.as_str()).await;
        released
    }

    async fn inspect(&self, name: &LeaseName) -> Result<LeaseState> {
        let read = self.read(&Key::lease(name)).await?;
        let watched = self.observe(name.as_str(), &read);
        let judge = self.judge(&watched);
        let mut state = LeaseState {
            name: name.clone(),
            version: None,
            modified_ms: None,
            holders: Vec::new(),
            expired: Vec::new(),
            last_token: 0,
            watermark_ms: None,
            last: None,
            corrupt: None,
        };
        match read {
            Read::Absent => {}
            Read::Valid(stored, rec) => {
                state.version = Some(stored.version);
                state.modified_ms = stored.modified_ms;
                state.holders = record::views(&rec, &judge);
                state.expired = record::expired_views(&rec, &judge);
                state.last_token = rec.last_token;
                state.watermark_ms = rec.watermark_ms;
                state.last = rec.predecessor();
            }
            Read::Unreadable(stored, detail) => {
                state.last_token = stored.version.seq.unwrap_or(0);
                state.version = Some(stored.version);
                state.modified_ms = stored.modified_ms;
                state.corrupt = Some(detail);
            }
        }
        Ok(state)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LeaseName>> {
        let mut names: Vec<LeaseName> = self
            .backend
            .list(prefix)
            .await?
            .into_iter()
            .filter(|k| !k.contains('~'))
            .filter_map(|k| LeaseName::new(k).ok())
            .collect();
        names.sort();
        Ok(names)
    }

    async fn break_lease(&self, seen: &LeaseState, only_token: Option<u64>, note: Option<&BreakNote>) -> Result<()> {
        let name = seen.name.as_str();
        let key = Key::lease(&seen.name);
        let changed = || Error::Changed { store: self.url().to_string(), name: name.to_string() };
        let Some(seen_version) = &seen.version else {
            return Err(Error::unsupported(
                self.url(),
                format!("lease {name:?} does not exist; there is nothing to break"),
            ));
        };
        let (stored, rec) = match self.read(&key).await? {
            Read::Valid(s, _) | Read::Unreadable(s, _) if s.version != *seen_version => return Err(changed()),
            Read::Absent => return Err(changed()),
            Read::Valid(s, rec) => {
                let broken = record::decide_break(&rec, only_token, note, self.clock.wall_ms())
                    .map_err(|g| Error::unsupported(self.url(), format!("lease {name:?}: {}", g.detail)))?;
                (s, broken)
            }
            // A break of one grant cannot tell whose an unreadable record is:
            // it may hold that grant, or a successor's. Only a break of
            // whatever the record holds replaces it.
            Read::Unreadable(_, detail) if only_token.is_some() => {
                let token = only_token.unwrap_or_default();
                return Err(Error::unsupported(
                    self.url(),
                    format!(
                        "lease {name:?}: the record is unreadable ({detail}), so it cannot show whether \
                         token {token} still holds it; nothing was broken"
                    ),
                ));
            }
            Read::Unreadable(s, _) => {
                // Replace the unreadable record with an empty one that keeps the token floor.
                let mut rec = LeaseRecord::empty(name);
                rec.last_token = self.unreadable_floor(name, &s);
                (s, rec)
            }
        };
        match self.put(&key, &rec, PutOptions::update(stored.version)).await? {
            Put::Done(_) => {
                self.forget(name);
                Ok(())
            }
            Put::Conflict => Err(changed()),
        }
    }

    async fn acquire_queued(&self, req: &AcquireRequest, wait: Duration) -> Option<Result<Attempt>> {
        self.wait_in_line(req, wait).await
    }

    async fn waiting(&self, name: &LeaseName) -> Result<Option<usize>> {
        if !self.can_queue(name.as_str()).await {
            return Ok(None);
        }
        match self.line.waiters(name.as_str()).await {
            Ok(line) => Ok(Some(line.len())),
            // A line that cannot be used (cluttered by others) has no waiters:
            // they poll. `status` shows the lease, not an error.
            Err(e) if queue::no_line(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn wait_for_change(&self, busy: &Busy, max: Duration) {
        use std::sync::atomic::Ordering;
        // The wait ends on this store's clock (which tests inject), whatever
        // clock the backend's own timeout runs on.
        let until = self.clock.mono() + max;
        // After a failed attempt the version seen is unknown (`None`), and a
        // watch would return at once: sleep instead, or a store that keeps
        // failing is retried in a tight loop.
        if busy.failure.is_none() && !self.cannot_watch.load(Ordering::Relaxed) {
            let key = Key::lease(&busy.name);
            let watch = self.backend.watch(&key, busy.version.as_ref(), max);
            tokio::select! {
                out = watch => match out {
                    Ok(true) => return,
                    Ok(false) => {}
                    Err(Error::Unsupported { .. }) => self.cannot_watch.store(true, Ordering::Relaxed),
                    Err(e) => tracing::debug!(error = %e, "watch failed; polling instead"),
                },
                () = self.clock.sleep_until(until) => return,
            }
        }
        self.clock.sleep_until(until).await;
    }
}
