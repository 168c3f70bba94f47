//! The table's storage: shards of slots, reservations, retirement of idle
//! records (bounded, oldest dropped first), and the status snapshot.

use std::collections::VecDeque;
use std::sync::Arc;

use hashbrown::HashTable;
use tenure_core::record::{self, ClockJudge, LeaseRecord};
use tenure_core::{BreakNote, EndedHow, Holder, HolderView, LeaseName, LeaseState, Mode, Predecessor, Version};

use tokio::sync::oneshot;

use super::{Core, Granted, Refusal, Stats, bump};

#[derive(Clone, Debug)]
pub(super) struct Reservation {
    pub(super) id: u64,
    pub(super) mode: Mode,
    pub(super) holder: Arc<Holder>,
    pub(super) ttl_ms: u64,
    pub(super) deadline_ms: u64,
    pub(super) meta: Option<String>,
}

#[derive(Debug)]
pub(super) struct Slot {
    /// The lease name.
    pub(super) name: Arc<str>,
    /// Its hash (the core's keyed hash): the table's index, computed once.
    pub(super) hash: u64,
    pub(super) record: LeaseRecord,
    pub(super) version: u64,
    pub(super) modified_ms: u64,
    pub(super) reservations: Vec<Reservation>,
    /// Contention: asks refused because the lease was held.
    pub(super) busy: u64,
    /// Position in the shard's retire queue, 0 while live.
    pub(super) retired: u64,
    /// Its shared holders and reservations, as last counted into the shard's
    /// [`Shard::weight`].
    pub(super) weight: usize,
    /// Acquisitions waiting for it, first come first served (see [`super::queue`]).
    pub(super) waiters: VecDeque<Waiter>,
}

impl Slot {
    pub(super) fn new(name: Arc<str>, hash: u64, now_ms: u64) -> Self {
        Self {
            record: LeaseRecord::empty(&name),
            name,
            hash,
            version: 0,
            modified_ms: now_ms,
            reservations: Vec::new(),
            busy: 0,
            retired: 0,
            weight: 0,
            waiters: VecDeque::new(),
        }
    }

    /// Refuses an ask that would pass [`super::MAX_HOLDERS`] live shared
    /// holders or [`super::MAX_RESERVATIONS`] live reservations on this lease.
    pub(super) fn check_crowd(&self, ask: &super::Ask<'_>, now_ms: u64, tentative: bool) -> Result<(), Refusal> {
        let (live, limit, what) = if tentative {
            let live =
                self.reservations.iter().filter(|r| r.deadline_ms > now_ms && r.holder.nonce != ask.holder.nonce);
            (live.count(), super::MAX_RESERVATIONS, "reservations")
        } else if ask.mode == Mode::Shared && self.record.shared.len() >= super::MAX_HOLDERS {
            let live = self.record.shared.iter().filter(|e| e.deadline_ms > now_ms);
            (live.count(), super::MAX_HOLDERS, "shared holders")
        } else {
            return Ok(());
        };
        if live >= limit {
            return Err(Refusal::Overloaded(format!("lease {:?} has its limit of {limit} live {what}", ask.name)));
        }
        Ok(())
    }

    /// Whether it must stay in the table: a live grant or reservation, or waiters.
    pub(super) fn is_live(&self, now_ms: u64) -> bool {
        !self.waiters.is_empty()
            || self.record.entries().any(|(e, _)| e.deadline_ms > now_ms)
            || self.reservations.iter().any(|r| r.deadline_ms > now_ms)
    }
}

/// A retired record's place in its shard's retire queue.
#[derive(Debug, Clone, Copy)]
pub(super) struct Retiree {
    /// Retire sequence: the slot's `retired` while it stays retired.
    pub(super) seq: u64,
    /// The slot's hash (with `seq`, it finds the slot without its name).
    pub(super) hash: u64,
}

#[derive(Debug, Default)]
pub(super) struct Shard {
    /// Slots by name, indexed by the name's precomputed hash.
    pub(super) slots: HashTable<Slot>,
    /// Retired slots, oldest first; entries whose slot moved on are stale.
    pub(super) retire_queue: VecDeque<Retiree>,
    pub(super) retired: usize,
    pub(super) next_retire: u64,
    pub(super) next_reservation: u64,
    /// Highest token of a dropped record: new records start above it.
    pub(super) dropped_floor: u64,
    /// Shared holders and reservations of all its slots: with the live slots,
    /// what counts against `max_live` (see [`reweigh`]).
    pub(super) weight: usize,
    /// This shard's counters.
    pub(super) stats: Stats,
    /// Waiters queued on its slots.
    pub(super) waiting: usize,
    /// The last waiter's id.
    pub(super) next_waiter: u64,
}

/// The slot named `name` (whose hash is `h`).
pub(super) fn slot_mut<'s>(slots: &'s mut HashTable<Slot>, h: u64, name: &str) -> Option<&'s mut Slot> {
    slots.find_mut(h, |s| &*s.name == name)
}

/// Brings a shard's [`Shard::weight`] up to date with `slot` after a change to
/// its shared holders or reservations. Each slot remembers what it added, so a
/// change counted late is corrected by the next one, never counted twice.
pub(super) fn reweigh(total: &mut usize, slot: &mut Slot) {
    let now = slot.record.shared.len() + slot.reservations.len();
    *total = total.saturating_sub(slot.weight).saturating_add(now);
    slot.weight = now;
}

/// Takes a slot that was retired as `seq` (0: it was not) out of the retired count.
/// Usually it was the last one retired (a lease cycled by one holder): its queue
/// entry goes at once instead of lingering stale until a compaction.
pub(super) fn unretire(retired: &mut usize, queue: &mut VecDeque<Retiree>, seq: u64) {
    if seq == 0 {
        return;
    }
    *retired -= 1;
    if queue.back().is_some_and(|r| r.seq == seq) {
        queue.pop_back();
    }
}

/// What a page of the status view shows.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// Leases with a record, live ones first.
    pub leases: Vec<LeaseRow>,
    /// Records with a live grant (or not yet retired).
    pub live: usize,
    /// Retired records kept for their watermark.
    pub retired: usize,
    /// Whether more leases follow this page.
    pub truncated: bool,
    /// How many leases follow this page.
    pub remaining: usize,
}

/// Where a row stands in the status view's order: leases with a live grant
/// first, then idle ones, each part by name. A page starts after one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    /// No live grant.
    pub idle: bool,
    /// The lease name.
    pub name: Arc<str>,
}

/// One lease on the status page.
#[derive(Debug, Clone)]
pub struct LeaseRow {
    /// Name.
    pub name: String,
    /// Live grants.
    pub holders: Vec<HolderView>,
    /// Live tentative reservations.
    pub tentative: usize,
    /// Highest token granted.
    pub last_token: u64,
    /// Highest watermark.
    pub watermark_ms: Option<u64>,
    /// How the last grant ended.
    pub last: Option<Predecessor>,
    /// Contention: asks refused while it was held.
    pub busy: u64,
    /// Acquisitions queued for it now, in the server's wait queue.
    pub waiters: usize,
    /// Last change, server wall ms.
    pub modified_ms: u64,
    /// Its place in the view's order (the next page starts after the last row's).
    pub key: Cursor,
}

impl Core {
    /// Reads a lease's state.
    pub fn inspect(&self, name: &LeaseName) -> LeaseState {
        let h = self.hash(name.as_str());
        let shard = self.shard(h).lock();
        let judge = ClockJudge { now_ms: self.now_us() / 1000 };
        let mut state = LeaseState {
            name: name.clone(),
            version: None,
            modified_ms: None,
            holders: Vec::new(),
            expired: Vec::new(),
            last_token: shard.dropped_floor,
            watermark_ms: None,
            last: None,
            corrupt: None,
        };
        if let Some(slot) = shard.slots.find(h, |s| *s.name == *name.as_str()) {
            state.version = Some(Version::seq(slot.version));
            state.modified_ms = Some(slot.modified_ms);
            state.holders = record::views(&slot.record, &judge);
            state.expired = record::expired_views(&slot.record, &judge);
            state.last_token = slot.record.last_token;
            state.watermark_ms = slot.record.watermark_ms;
            state.last = slot.record.predecessor();
        }
        state
    }

    /// One page of the names under `prefix`, in order: those after `after`, at
    /// most `limit` of them (at least one) and, past the first, no more than
    /// `max_bytes` of names. `true` with it if more names follow the page.
    ///
    /// Each page costs a scan of the table, one shard lock at a time, and keeps
    /// at most twice `limit` names aside: any number of leases can be listed, a
    /// page at a time, in bounded memory.
    pub fn list(&self, prefix: &str, after: Option<&str>, limit: usize, max_bytes: usize) -> (Vec<String>, bool) {
        let keep = limit.max(1).saturating_add(1);
        let mut names: Vec<Arc<str>> = Vec::new();
        // Once `keep` names are kept, only names below the largest of them can
        // still be on the page: the others are skipped without a copy.
        let mut bound: Option<Arc<str>> = None;
        for shard in self.shards.iter() {
            let shard = shard.0.lock();
            let wanted = |s: &&Slot| {
                s.name.starts_with(prefix)
                    && after.is_none_or(|a| &*s.name > a)
                    && bound.as_ref().is_none_or(|b| s.name < *b)
            };
            names.extend(shard.slots.iter().filter(wanted).map(|s| s.name.clone()));
            if names.len() > keep.saturating_mul(2) {
                keep_smallest(&mut names, keep);
                bound = names.iter().max().cloned();
            }
        }
        keep_smallest(&mut names, keep);
        names.sort_unstable();
        let mut more = names.len() > limit.max(1);
        names.truncate(limit.max(1));
        let mut out = Vec::with_capacity(names.len());
        let mut bytes = 0usize;
        for n in names {
            // Postcard adds a length prefix of at most two bytes to a short name.
            bytes = bytes.saturating_add(n.len() + 2);
            if bytes > max_bytes && !out.is_empty() {
                more = true;
                break;
            }
            out.push(n.to_string());
        }
        (out, more)
    }

    /// Breaks the grants of `name` (all, or only `only_token`) if its version is
    /// still `seen_version`. Reservations go too.
    pub fn break_lease(
        &self,
        name: &str,
        seen_version: u64,
        only_token: Option<u64>,
        note: Option<&BreakNote>,
    ) -> Result<(), Refusal> {
        let h = self.hash(name);
        let mut guard = self.shard(h).lock();
        let shard = &mut *guard;
        let now_us = self.now_us();
        let now_ms = now_us / 1000;
        let slot = slot_mut(&mut shard.slots, h, name).ok_or(Refusal::Changed)?;
        if slot.version != seen_version {
            return Err(Refusal::Changed);
        }
        record::break_grants(&mut slot.record, only_token, note, now_ms).map_err(|g| Refusal::Nothing(g.detail))?;
        slot.version += 1;
        slot.modified_ms = now_ms;
        if only_token.is_none() {
            slot.reservations.clear();
        }
        reweigh(&mut shard.weight, slot);
        bump(&shard.stats.breaks);
        self.serve(shard, h, name, now_us);
        retire_if_idle(shard, h, name, now_ms, self.per_shard_retain());
        Ok(())
    }

    /// Retires records whose grants have all expired (crashed holders), so that
    /// memory stays bounded; their records stay until dropped, oldest first.
    pub fn sweep(&self) {
        let now_ms = self.now_us() / 1000;
        let retain = self.per_shard_retain();
        for shard in self.shards.iter() {
            let mut guard = shard.0.lock();
            let shard = &mut *guard;
            let idle: Vec<(u64, Arc<str>)> = shard
                .slots
                .iter()
                .filter(|s| s.retired == 0 && !s.is_live(now_ms))
                .map(|s| (s.hash, s.name.clone()))
                .collect();
            for (h, name) in idle {
                retire_if_idle(shard, h, &name, now_ms, retain);
            }
        }
    }

    /// How many acquisitions wait in `name`'s queue now.
    pub fn waiters(&self, name: &LeaseName) -> usize {
        let h = self.hash(name.as_str());
        let shard = self.shard(h).lock();
        shard
            .slots
            .find(h, |s| *s.name == *name.as_str())
            .map_or(0, |s| s.waiters.iter().filter(|w| w.is_waiting()).count())
    }

    /// How many acquisitions wait in the lease queues now.
    pub fn waiting(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().waiting).sum()
    }

    /// How many records are live and how many retired, without listing them.
    pub fn counts(&self) -> (usize, usize) {
        let (mut live, mut retired) = (0, 0);
        for shard in self.shards.iter() {
            let shard = shard.0.lock();
            retired += shard.retired;
            live += shard.slots.len() - shard.retired;
        }
        (live, retired)
    }

    /// A page of the status view: leases with a live grant first, then the
    /// others, each part by name; those after `after`, at most `limit`.
    pub fn snapshot(&self, after: Option<&Cursor>, limit: usize) -> Snapshot {
        let now_ms = self.now_us() / 1000;
        let judge = ClockJudge { now_ms };
        let keep = limit.saturating_add(1);
        let mut snap = Snapshot::default();
        // First pass: the keys of the page, one shard lock at a time.
        let mut keys: Vec<(Cursor, u64)> = Vec::new();
        let mut matched = 0usize;
        // As in `list`: past the largest of `keep` kept keys, nothing is copied.
        let key_of = |c: &Cursor| (c.idle, c.name.clone());
        let after = after.map(key_of);
        let mut bound: Option<(bool, Arc<str>)> = None;
        for shard in self.shards.iter() {
            let shard = shard.0.lock();
            snap.retired += shard.retired;
            snap.live += shard.slots.len() - shard.retired;
            for slot in shard.slots.iter() {
                let idle = !slot.record.entries().any(|(e, _)| e.deadline_ms > now_ms);
                let key = (idle, &*slot.name);
                if after.as_ref().is_some_and(|(i, n)| key <= (*i, &**n)) {
                    continue;
                }
                matched += 1;
                if bound.as_ref().is_none_or(|(i, n)| key < (*i, &**n)) {
                    keys.push((Cursor { idle, name: slot.name.clone() }, slot.hash));
                }
            }
            if keys.len() > keep.saturating_mul(2) {
                keep_smallest(&mut keys, keep);
                bound = keys.iter().map(|(k, _)| k).max().map(key_of);
            }
        }
        keep_smallest(&mut keys, keep);
        keys.sort_unstable();
        keys.truncate(limit);
        // Second pass: the rows, each read under its shard's lock (a lease that
        // went away meanwhile is left out).
        for (key, h) in keys {
            let shard = self.shard(h).lock();
            let Some(slot) = shard.slots.find(h, |s| s.name == key.name) else { continue };
            snap.leases.push(LeaseRow {
                name: slot.name.to_string(),
                holders: record::views(&slot.record, &judge),
                tentative: slot.reservations.iter().filter(|r| r.deadline_ms > now_ms).count(),
                last_token: slot.record.last_token,
                watermark_ms: slot.record.watermark_ms,
                last: slot.record.predecessor(),
                busy: slot.busy,
                waiters: slot.waiters.iter().filter(|w| w.is_waiting()).count(),
                modified_ms: slot.modified_ms,
                key,
            });
        }
        snap.remaining = matched.saturating_sub(snap.leases.len());
        snap.truncated = snap.remaining > 0;
        snap
    }
}

/// Ends the grants of a slot that has no live grant or reservation left: each
/// has expired, and is ended as a takeover would end it (its deadline joins the
/// watermark, the newest becomes the record's last ending). A retired record
/// then keeps its last ending and counters, not a crowd of expired holders, so
/// that `--retain` bounds its memory as one record's.
fn settle_expired(slot: &mut Slot, now_ms: u64) {
    // The usual case, a lease its last holder released: nothing to settle.
    if slot.record.exclusive.is_none() && slot.record.shared.is_empty() && slot.reservations.is_empty() {
        return;
    }
    slot.reservations.clear();
    let mut ended = false;
    // Each round ends one grant (a release by its own token and nonce cannot
    // fail on a grant that is there; should it, the loop stops).
    loop {
        let first = slot.record.entries().next().map(|(e, _)| (e.token, e.holder.clone()));
        let Some((token, holder)) = first else { break };
        if record::release(&mut slot.record, token, &holder.nonce, EndedHow::Expired, now_ms, None, None).is_err() {
            break;
        }
        ended = true;
    }
    if ended {
        slot.version += 1;
        slot.modified_ms = now_ms;
    }
}

/// Keeps the `k` smallest items of `v` (in no order).
fn keep_smallest<T: Ord>(v: &mut Vec<T>, k: usize) {
    if v.len() > k {
        v.select_nth_unstable(k);
        v.truncate(k);
    }
}

/// Puts `name` (hash `h`) in the retire queue if nothing holds it, then drops
/// the oldest retired records beyond `retain`.
pub(super) fn retire_if_idle(shard: &mut Shard, h: u64, name: &str, now_ms: u64, retain: usize) {
    let Some(slot) = slot_mut(&mut shard.slots, h, name) else { return };
    if slot.retired != 0 || slot.is_live(now_ms) {
        return;
    }
    settle_expired(slot, now_ms);
    reweigh(&mut shard.weight, slot);
    shard.next_retire += 1;
    slot.retired = shard.next_retire;
    shard.retired += 1;
    shard.retire_queue.push_back(Retiree { seq: shard.next_retire, hash: h });
    while shard.retired > retain {
        let Some(old) = shard.retire_queue.pop_front() else { break };
        // A stale entry (the record was re-acquired since) matches no slot.
        if let Ok(entry) = shard.slots.find_entry(old.hash, |s| s.retired == old.seq) {
            let (s, _) = entry.remove();
            shard.retired -= 1;
            shard.weight = shard.weight.saturating_sub(s.weight);
            shard.dropped_floor = shard.dropped_floor.max(s.record.last_token);
            bump(&shard.stats.dropped);
        }
    }
    // Stale queue entries (records re-acquired since) are skipped above; compact
    // when they pile up so the queue stays proportional to the retired records.
    if shard.retire_queue.len() > 2 * retain + 64 {
        let slots = &shard.slots;
        shard.retire_queue.retain(|r| slots.find(r.hash, |s| s.retired == r.seq).is_some());
    }
}

/// What a waiter is told when it is served: its grant, or why it never will be.
pub(super) type Served = Result<Granted, Refusal>;

/// One waiter in a lease's queue.
#[derive(Debug)]
pub(super) struct Waiter {
    pub(super) id: u64,
    pub(super) mode: Mode,
    pub(super) ttl_ms: u64,
    pub(super) holder: Arc<Holder>,
    pub(super) retake: bool,
    /// When it queued (server time, ms): a grant made since is nobody's
    /// abandoned grant to re-take (see the queue's `serve`).
    pub(super) since_ms: u64,
    pub(super) meta: Option<String>,
    pub(super) tx: oneshot::Sender<Served>,
}

impl Waiter {
    /// Still waiting: its connection has not gone (a waiter that left is
    /// skipped when the queue is next served).
    pub(super) fn is_waiting(&self) -> bool {
        !self.tx.is_closed()
    }
}
