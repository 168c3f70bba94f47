//! The lease table: every lease in RAM, sharded, judged by the server's clock.
//!
//! Leases are spread over [`SHARDS`] shards by a hash of the name; each shard is a
//! map behind its own mutex, held only for one decision, so connections on
//! different cores work on different shards at once. A batch acquisition locks the
//! shards it touches in index order (no deadlock) and commits only if every lease
//! was granted: nobody ever observes half of it.
//!
//! The decisions are [`tenure_core::record`]'s, written once for every store, with a
//! [`ClockJudge`](record::ClockJudge) on the server's clock. What the table adds:
//! - **server time**: wall time read once at start, then advanced by the
//!   monotonic clock, so a wall-clock jump while running moves nothing;
//! - **tokens**: `max(previous token + 1, server time in µs)` (the floor passed to
//!   [`record::check_acquire`]), so tokens also grow across restarts, see the
//!   crate docs for the rule and its assumptions; a grant that would put a token
//!   more than `max_lease / 2` ahead of the clock is refused;
//! - **quarantine**: nothing is granted until `quarantine` has passed since start;
//! - **tentative reservations** (`docs/design/all-or-nothing.md#two-phase-acquisition`), kept beside the
//!   record: a full ask removes every reservation it conflicts with; an upgrade
//!   turns a surviving reservation into a real grant. They are not record entries
//!   because ending an entry other than by release raises the watermark to its
//!   deadline, and a reservation wrote nothing: breaking one must cost nothing;
//! - **a bounded memory**: live leases, and the shared holders and reservations
//!   beyond them, count together against `max_live` (each lease also has at most
//!   [`MAX_HOLDERS`] and [`MAX_RESERVATIONS`]). Records with no live grant are
//!   *retired*: their expired grants are ended as a takeover would end them, and
//!   they are kept for their watermark, metadata and token (returned to the next
//!   holder) until `retain` of them exist; then the oldest are dropped first, and
//!   the shard remembers the highest token it dropped as a floor for new records.

use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use std::time::Duration;

use tenure_core::limits::{micros, millis};
use tenure_core::record;
use tenure_core::{Clock, EndedHow, Holder, HolderView, LeaseName, Mode, Mono, Predecessor};

use crate::wire::MIN_TTL_MS;

use crate::witness::{BodyRef, PredRef, WitnessKind, witness_buf};

mod acquire;
mod queue;
mod table;

pub use queue::{MAX_WAITERS, Parked, Parking};

pub use table::{Cursor, LeaseRow, Snapshot};
use table::{Shard, retire_if_idle, reweigh, slot_mut, unretire};

/// Number of shards of the table.
pub const SHARDS: usize = 64;
/// Most live shared holders of one lease (protocol).
pub use tenure_client::wire::MAX_HOLDERS;
/// Longest metadata a holder may leave with a lease, in bytes (protocol).
pub use tenure_client::wire::MAX_META;
/// Most live tentative reservations of one lease.
pub const MAX_RESERVATIONS: usize = 1024;

/// Limits and timing of a [`Core`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreOptions {
    /// Longest lease duration granted.
    pub max_lease: Duration,
    /// Time after start during which nothing is granted (normally `max_lease` plus a
    /// margin: every grant of a previous incarnation has ended by then).
    pub quarantine: Duration,
    /// Most leases with a live grant or reservation at once; each shared holder,
    /// each reservation and each queued waiter counts as one more.
    pub max_live: usize,
    /// Most retired records (no live grant) kept for their watermark and metadata.
    pub retain: usize,
}

impl CoreOptions {
    /// Defaults for `max_lease`: quarantine `max_lease + 1s`, 1,000,000 live leases,
    /// 100,000 retired records.
    pub fn new(max_lease: Duration) -> Self {
        Self { max_lease, quarantine: max_lease + Duration::from_secs(1), max_live: 1_000_000, retain: 100_000 }
    }

    /// Defaults for `max_lease` on a server whose earlier incarnations may have
    /// granted leases as long as `longest` (their `--max-lease`, kept in its
    /// [`crate::state::StateFile`]): the quarantine is `max(longest, max_lease) + 1s`,
    /// so that it outlasts every one of their grants, however this run's
    /// `max_lease` compares, and their tokens (at most `longest / 2` ahead of
    /// their clock) stay below this run's first.
    pub fn after(max_lease: Duration, longest: Duration) -> Self {
        Self { quarantine: max_lease.max(longest) + Duration::from_secs(1), ..Self::new(max_lease) }
    }
}

/// Why the table refused a request (besides a lease being busy).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The server is in its start-up quarantine for this much longer.
    Quarantine(Duration),
    /// The request cannot be valid (name, TTL, metadata, watermark).
    Invalid(String),
    /// A limit was reached (live leases, token rate).
    Overloaded(String),
    /// `break` found the record changed since it was inspected.
    Changed,
    /// Nothing to do (e.g. no grant to break).
    Nothing(String),
    /// Ask `index` of an acquisition names a lease whose fencing tokens are used
    /// up: granting it again would make tokens go backwards, so it never is.
    Exhausted {
        /// Index of the ask in the request.
        index: usize,
        /// The lease's highest token (or the floor that reached the top).
        last_token: u64,
    },
}

/// One lease asked for.
#[derive(Clone, Debug)]
pub struct Ask<'a> {
    /// Lease name (validated when its record is created).
    pub name: &'a str,
    /// Mode.
    pub mode: Mode,
    /// Lease duration.
    pub ttl_ms: u64,
    /// Who asks.
    pub holder: &'a Arc<Holder>,
    /// Whether the same nonce's grants may be re-taken at once.
    pub retake: bool,
    /// Metadata stored with the grant.
    pub meta: Option<&'a str>,
}

impl<'a> Ask<'a> {
    /// The record's view of this ask, at `now_ms`, its token above `floor`.
    fn record_ask(&self, now_ms: u64, floor: u64) -> record::Ask<'a> {
        record::Ask {
            mode: self.mode,
            ttl_ms: self.ttl_ms,
            holder: self.holder,
            retake: self.retake,
            now_ms,
            token_floor: floor,
            meta: self.meta,
        }
    }

    /// The witness body of a `kind` of grant of this ask.
    fn witness(
        &self,
        kind: WitnessKind,
        token: u64,
        deadline_ms: u64,
        now_us: u64,
        pred: Option<&Predecessor>,
    ) -> Vec<u8> {
        encoded(BodyRef {
            kind,
            name: self.name,
            mode: self.mode,
            token,
            deadline_ms,
            server_time_us: now_us,
            holder_nonce: &self.holder.nonce,
            predecessor: pred.map(PredRef::of),
        })
    }
}

pub use tenure_client::wire::Granted;

/// The outcome of an all-or-nothing acquisition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// Every lease, in request order.
    Granted(Vec<Granted>),
    /// Lease number `index` of the request was busy; nothing was taken.
    Busy {
        /// Index in the request.
        index: usize,
        /// Live holders that block it.
        holders: Vec<HolderView>,
        /// The record's version.
        version: u64,
    },
}

/// Counters for `/metrics` and the status page ([`Core::stats`] adds them up).
///
/// Each shard keeps its own, changed only under the shard's lock: a counter
/// shared by every shard would be one cache line that both cores fight over on
/// every grant.
#[derive(Debug, Default)]
pub struct Stats {
    /// Grants (full, including upgrades).
    pub grants: AtomicU64,
    /// Acquisitions refused because the lease was held (contention).
    pub busy: AtomicU64,
    /// Grants that took over an expired grant.
    pub expired_takeovers: AtomicU64,
    /// Successful renewals.
    pub renewals: AtomicU64,
    /// Renewals of grants no longer held.
    pub renewals_lost: AtomicU64,
    /// Releases that ended a grant.
    pub releases: AtomicU64,
    /// Breaks by an administrator.
    pub breaks: AtomicU64,
    /// Tentative reservations granted.
    pub tentative: AtomicU64,
    /// Reservations removed by a full request.
    pub tentative_broken: AtomicU64,
    /// Upgrades that failed (the reservation was broken or expired).
    pub upgrades_failed: AtomicU64,
    /// Requests refused during the quarantine.
    pub quarantined: AtomicU64,
    /// Retired records dropped to keep memory bounded.
    pub dropped: AtomicU64,
    /// Acquisitions that queued to wait for their lease.
    pub parked: AtomicU64,
    /// Grants handed to a queued waiter when its lease freed.
    pub handovers: AtomicU64,
}

impl Stats {
    fn add(&self, other: &Stats) {
        let pairs = [
            (&self.grants, &other.grants),
            (&self.busy, &other.busy),
            (&self.expired_takeovers, &other.expired_takeovers),
            (&self.renewals, &other.renewals),
            (&self.renewals_lost, &other.renewals_lost),
            (&self.releases, &other.releases),
            (&self.breaks, &other.breaks),
            (&self.tentative, &other.tentative),
            (&self.tentative_broken, &other.tentative_broken),
            (&self.upgrades_failed, &other.upgrades_failed),
            (&self.quarantined, &other.quarantined),
            (&self.dropped, &other.dropped),
            (&self.parked, &other.parked),
            (&self.handovers, &other.handovers),
        ];
        for (mine, theirs) in pairs {
            mine.fetch_add(theirs.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

/// Adds `n` to a shard's counter. Every writer holds the shard's lock, so a plain
/// load and store suffice (no locked read-modify-write); readers may read at any time.
fn add(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

fn bump(c: &AtomicU64) {
    add(c, 1);
}

/// A shard on cache lines of its own, so that two cores locking neighbouring
/// shards do not invalidate each other's line.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded(Mutex<Shard>);

/// The lease table. Cheap to share (`Arc<Core>`).
#[derive(Debug)]
pub struct Core {
    shards: Box<[Padded]>,
    /// Keyed (per process) hash of lease names: clients choose names, so an
    /// unkeyed hash would let one pile them into one shard and one bucket chain.
    /// Computed once per request; it picks the shard and indexes the shard's table.
    hasher: foldhash::quality::RandomState,
    clock: Arc<dyn Clock>,
    start: Mono,
    start_wall_us: u64,
    opts: CoreOptions,
    /// The quarantine is over.
    open: std::sync::atomic::AtomicBool,
    /// Requests refused during the quarantine (no shard is involved).
    quarantined: AtomicU64,
}

impl Core {
    /// A fresh table on `clock`: it starts its quarantine now.
    pub fn new(clock: Arc<dyn Clock>, opts: CoreOptions) -> Self {
        let start = clock.mono();
        let start_wall_us = clock.wall_ms().saturating_mul(1000);
        Self {
            shards: (0..SHARDS).map(|_| Padded::default()).collect(),
            hasher: foldhash::quality::RandomState::default(),
            clock,
            start,
            start_wall_us,
            opts,
            open: std::sync::atomic::AtomicBool::new(false),
            quarantined: AtomicU64::new(0),
        }
    }

    /// The options.
    pub fn options(&self) -> &CoreOptions {
        &self.opts
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The counters, added up over the shards.
    pub fn stats(&self) -> Stats {
        let total = Stats::default();
        total.quarantined.store(self.quarantined.load(Ordering::Relaxed), Ordering::Relaxed);
        for shard in self.shards.iter() {
            total.add(&shard.0.lock().stats);
        }
        total
    }

    /// Server time, µs since the unix epoch: the wall clock at start plus monotonic
    /// time since.
    pub fn now_us(&self) -> u64 {
        let since = self.clock.mono().saturating_since(self.start);
        self.start_wall_us.saturating_add(micros(since))
    }

    /// Server time when this incarnation started (µs since the unix epoch).
    pub fn started_us(&self) -> u64 {
        self.start_wall_us
    }

    /// How much longer the quarantine lasts (zero once over).
    pub fn quarantine_left(&self) -> Duration {
        (self.start + self.opts.quarantine).saturating_since(self.clock.mono())
    }

    fn hash(&self, name: &str) -> u64 {
        self.hasher.hash_one(name)
    }

    /// The shard of a name's hash. The shard tables index by the low bits and tag
    /// by the top seven, so the shard takes bits from neither.
    fn shard_index(h: u64) -> usize {
        ((h >> 32) as usize) % SHARDS
    }

    fn shard(&self, h: u64) -> &Mutex<Shard> {
        &self.shards[Self::shard_index(h)].0
    }

    /// A refusal for the quarantine, if it is still on: counted, as the
    /// answer a request gets (see [`Core::in_quarantine`] for a look).
    fn check_open(&self) -> Result<(), Refusal> {
        match self.in_quarantine() {
            None => Ok(()),
            Some(left) => {
                self.quarantined.fetch_add(1, Ordering::Relaxed);
                Err(Refusal::Quarantine(left))
            }
        }
    }

    /// How much of the quarantine is left, if it is still on; not counted.
    fn in_quarantine(&self) -> Option<Duration> {
        // Once over, the quarantine never comes back: skip the clock read.
        if self.open.load(Ordering::Relaxed) {
            return None;
        }
        let left = self.quarantine_left();
        if left.is_zero() {
            self.open.store(true, Ordering::Relaxed);
            return None;
        }
        Some(left)
    }

    fn check_ttl(&self, ttl_ms: u64) -> Result<(), Refusal> {
        let max = millis(self.opts.max_lease);
        if !(MIN_TTL_MS..=max).contains(&ttl_ms) {
            return Err(Refusal::Invalid(format!(
                "lease duration {ttl_ms} ms is not within {MIN_TTL_MS} to {max} ms (the server's --max-lease)"
            )));
        }
        Ok(())
    }

    /// Highest token a grant may take at `now_us`: more than `max_lease / 2` ahead
    /// of the clock would break the restart rule.
    fn token_limit(&self, now_us: u64) -> u64 {
        now_us.saturating_add(micros(self.opts.max_lease) / 2)
    }

    /// Renews grant `token` of `nonce` (or, with `reservation`, that reservation).
    /// `Ok(Err(detail))` if it is no longer held.
    pub fn renew(
        &self,
        name: &str,
        token: u64,
        reservation: Option<u64>,
        nonce: &str,
        ttl_ms: u64,
    ) -> Result<Result<Granted, String>, Refusal> {
        // A duration this server does not grant is a grant it did not make:
        // one from before a restart with a lower `max_lease`. Its holder must
        // learn at once that it is lost, not retry a request that cannot pass.
        let max = millis(self.opts.max_lease);
        if ttl_ms > max && ttl_ms >= MIN_TTL_MS {
            bump(&self.shard(self.hash(name)).lock().stats.renewals_lost);
            return Ok(Err(format!(
                "the grant's duration of {ttl_ms} ms is above the server's --max-lease of {max} ms (it restarted \
                 with a lower one): the server did not grant it in this run and cannot renew it"
            )));
        }
        self.check_ttl(ttl_ms)?;
        let h = self.hash(name);
        let mut guard = self.shard(h).lock();
        let shard = &mut *guard;
        let now_us = self.now_us();
        let now_ms = now_us / 1000;
        let stats = &shard.stats;
        let Some(slot) = slot_mut(&mut shard.slots, h, name) else {
            bump(&stats.renewals_lost);
            return Ok(Err("the server has no record of this lease (it restarted, or the grant ended)".into()));
        };
        if let Some(id) = reservation {
            let Some(r) = slot.reservations.iter_mut().find(|r| r.id == id && r.holder.nonce == nonce) else {
                bump(&stats.renewals_lost);
                return Ok(Err("the reservation was broken by a full request".into()));
            };
            r.deadline_ms = r.deadline_ms.max(now_ms.saturating_add(ttl_ms));
            r.ttl_ms = ttl_ms;
            let (mode, deadline_ms) = (r.mode, r.deadline_ms);
            let witness = body(WitnessKind::Tentative, name, mode, 0, deadline_ms, now_us, nonce);
            return Ok(Ok(Granted { token: 0, deadline_ms, version: id, predecessor: None, witness }));
        }
        match record::renew(&mut slot.record, token, nonce, ttl_ms, now_ms, None) {
            Err(gone) => {
                bump(&stats.renewals_lost);
                Ok(Err(gone.detail))
            }
            Ok(()) => {
                let (deadline_ms, mode) = slot
                    .record
                    .find(token, nonce)
                    .map_or((now_ms.saturating_add(ttl_ms), Mode::Exclusive), |(e, m)| (e.deadline_ms, m));
                slot.version += 1;
                slot.modified_ms = now_ms;
                let version = slot.version;
                let seq = std::mem::take(&mut slot.retired);
                unretire(&mut shard.retired, &mut shard.retire_queue, seq);
                bump(&stats.renewals);
                let witness = body(WitnessKind::Renewal, name, mode, token, deadline_ms, now_us, nonce);
                Ok(Ok(Granted { token, deadline_ms, version, predecessor: None, witness }))
            }
        }
    }

    /// Ends grant `token` of `nonce` (or a reservation). `Ok(false)`: it was not held.
    #[allow(clippy::too_many_arguments)]
    pub fn release(
        &self,
        name: &str,
        token: u64,
        reservation: Option<u64>,
        nonce: &str,
        dropped: bool,
        watermark_ms: Option<u64>,
        meta: Option<&str>,
    ) -> Result<bool, Refusal> {
        if meta.is_some_and(|m| m.len() > MAX_META) {
            return Err(Refusal::Invalid(format!("metadata longer than {MAX_META} bytes")));
        }
        let h = self.hash(name);
        let mut guard = self.shard(h).lock();
        let shard = &mut *guard;
        // One reading of the clock for the release and the hand-over it makes.
        let now_us = self.now_us();
        let now_ms = now_us / 1000;
        let Some(slot) = slot_mut(&mut shard.slots, h, name) else { return Ok(false) };
        if let Some(id) = reservation {
            let before = slot.reservations.len();
            slot.reservations.retain(|r| !(r.id == id && r.holder.nonce == nonce));
            let released = slot.reservations.len() < before;
            reweigh(&mut shard.weight, slot);
            self.serve(shard, h, name, now_us);
            retire_if_idle(shard, h, name, now_ms, self.per_shard_retain());
            return Ok(released);
        }
        if let (Some(w), Some((e, _))) = (watermark_ms, slot.record.find(token, nonce))
            && w > e.deadline_ms
        {
            return Err(Refusal::Invalid(format!(
                "watermark {w} is after the grant's deadline {}: a holder writes only before its deadline",
                e.deadline_ms
            )));
        }
        let how = if dropped { EndedHow::Dropped } else { EndedHow::Released };
        if !end_grant(shard, h, name, token, nonce, how, now_ms, watermark_ms, meta) {
            return Ok(false);
        }
        bump(&shard.stats.releases);
        self.freed(shard, h, name, now_us);
        Ok(true)
    }

    /// After a grant of `name` ended: its queue is served, and the record
    /// retired if nothing holds it any more.
    fn freed(&self, shard: &mut Shard, h: u64, name: &str, now_us: u64) {
        self.serve(shard, h, name, now_us);
        let now_ms = now_us / 1000;
        if slot_mut(&mut shard.slots, h, name).is_some_and(|slot| !slot.is_live(now_ms)) {
            retire_if_idle(shard, h, name, now_ms, self.per_shard_retain());
        }
    }

    /// Whether `shard` holds its share of `max_live`: live leases, and the
    /// shared holders and reservations beyond them, each count as one (memory
    /// grows with each of them alike).
    fn full(&self, shard: &Shard) -> bool {
        self.full_with(shard, 0)
    }

    /// [`Core::full`] once `pending` more places are taken. Live leases,
    /// their shared holders and reservations, and waiters each take a place.
    fn full_with(&self, shard: &Shard, pending: usize) -> bool {
        let used = (shard.slots.len() - shard.retired)
            .saturating_add(shard.weight)
            .saturating_add(shard.waiting)
            .saturating_add(pending);
        used >= (self.opts.max_live / SHARDS).max(1)
    }

    /// Whether `ask` may take room in a shard that is `full` or not: a new
    /// lease (whose name is checked first), a new shared holder and a
    /// reservation each take a place; a lease already there taken in full
    /// does not.
    fn check_room(&self, full: bool, exists: bool, ask: &Ask<'_>, tentative: bool) -> Result<(), Refusal> {
        if !exists {
            LeaseName::new(ask.name).map_err(|e| Refusal::Invalid(e.to_string()))?;
        }
        if full && Self::takes_room(exists, ask, tentative) {
            return Err(self.full_refusal());
        }
        Ok(())
    }

    fn takes_room(exists: bool, ask: &Ask<'_>, tentative: bool) -> bool {
        !exists || tentative || ask.mode == Mode::Shared
    }

    fn full_refusal(&self) -> Refusal {
        Refusal::Overloaded(format!(
            "the server holds its limit of {} live leases (each shared holder, reservation and waiter counts as one)",
            self.opts.max_live
        ))
    }

    fn per_shard_retain(&self) -> usize {
        (self.opts.retain / SHARDS).max(1)
    }
}

fn body(kind: WitnessKind, name: &str, mode: Mode, token: u64, deadline_ms: u64, now_us: u64, nonce: &str) -> Vec<u8> {
    encoded(BodyRef {
        kind,
        name,
        mode,
        token,
        deadline_ms,
        server_time_us: now_us,
        holder_nonce: nonce,
        predecessor: None,
    })
}

/// A witness body, encoded into a buffer sized for it.
fn encoded(body: BodyRef<'_>) -> Vec<u8> {
    let mut witness = witness_buf(body.name.len());
    body.encode(&mut witness);
    witness
}

/// Ends grant `token` of `nonce` in `name`'s record, `how`, and brings the
/// slot's bookkeeping up to date; `false` if that grant was not held.
#[allow(clippy::too_many_arguments)]
fn end_grant(
    shard: &mut Shard,
    h: u64,
    name: &str,
    token: u64,
    nonce: &str,
    how: EndedHow,
    now_ms: u64,
    watermark_ms: Option<u64>,
    meta: Option<&str>,
) -> bool {
    let Some(slot) = slot_mut(&mut shard.slots, h, name) else { return false };
    if record::release(&mut slot.record, token, nonce, how, now_ms, watermark_ms, meta).is_err() {
        return false;
    }
    slot.version += 1;
    slot.modified_ms = now_ms;
    reweigh(&mut shard.weight, slot);
    true
}
