//! The table's storage: shards of slots, reservations, retirement of idle
//! records (bounded, oldest dropped first), and the status snapshot.

use std::collections::VecDeque;
use std::sync::Arc;

use hashbrown::HashTable;
use tenure::record::{self, ClockJudge, LeaseRecord};
use tenure::{Holder, HolderView, LeaseName, LeaseState, Mode, Predecessor, Version};

use super::{Core, Refusal, Stats, bump, lock};

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
        }
    }

    pub(super) fn is_live(&self, now_ms: u64) -> bool {
        self.record.entries().any(|(e, _)| e.deadline_ms > now_ms)
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
    /// This shard's counters.
    pub(super) stats: Stats,
}

/// The slot named `name` (whose hash is `h`).
pub(super) fn slot_mut<'s>(slots: &'s mut HashTable<Slot>, h: u64, name: &str) -> Option<&'s mut Slot> {
    slots.find_mut(h, |s| &*s.name == name)
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

/// What the status page shows.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// Leases with a record, live ones first.
    pub leases: Vec<LeaseRow>,
    /// Records with a live grant (or not yet retired).
    pub live: usize,
    /// Retired records kept for their watermark.
    pub retired: usize,
    /// Whether `leases` was cut at the limit.
    pub truncated: bool,
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
    /// Last change, server wall ms.
    pub modified_ms: u64,
}

impl Core {
    /// Reads a lease's state.
    pub fn inspect(&self, name: &LeaseName) -> LeaseState {
        let h = self.hash(name.as_str());
        let shard = lock(self.shard(h));
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

    /// Names under `prefix`, sorted (at most `limit`).
    pub fn list(&self, prefix: &str, limit: usize) -> Vec<String> {
        let mut names = Vec::new();
        for shard in self.shards.iter() {
            names
                .extend(lock(&shard.0).slots.iter().filter(|s| s.name.starts_with(prefix)).map(|s| s.name.to_string()));
        }
        names.sort_unstable();
        names.truncate(limit);
        names
    }

    /// Breaks the grants of `name` (all, or only `only_token`) if its version is
    /// still `seen_version`. Reservations go too.
    pub fn break_lease(&self, name: &str, seen_version: u64, only_token: Option<u64>) -> Result<(), Refusal> {
        let h = self.hash(name);
        let mut guard = lock(self.shard(h));
        let shard = &mut *guard;
        let now_ms = self.now_us() / 1000;
        let slot = slot_mut(&mut shard.slots, h, name).ok_or(Refusal::Changed)?;
        if slot.version != seen_version {
            return Err(Refusal::Changed);
        }
        record::break_grants(&mut slot.record, only_token, now_ms).map_err(|g| Refusal::Nothing(g.detail))?;
        slot.version += 1;
        slot.modified_ms = now_ms;
        if only_token.is_none() {
            slot.reservations.clear();
        }
        bump(&shard.stats.breaks);
        retire_if_idle(shard, h, name, now_ms, self.per_shard_retain());
        Ok(())
    }

    /// Retires records whose grants have all expired (crashed holders), so that
    /// memory stays bounded; their records stay until dropped, oldest first.
    pub fn sweep(&self) {
        let now_ms = self.now_us() / 1000;
        let retain = self.per_shard_retain();
        for shard in self.shards.iter() {
            let mut guard = lock(&shard.0);
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

    /// A snapshot for the status page: live leases first, then retired ones.
    pub fn snapshot(&self, limit: usize) -> Snapshot {
        let now_ms = self.now_us() / 1000;
        let judge = ClockJudge { now_ms };
        let mut snap = Snapshot::default();
        for shard in self.shards.iter() {
            let shard = lock(&shard.0);
            snap.retired += shard.retired;
            snap.live += shard.slots.len() - shard.retired;
            for slot in shard.slots.iter() {
                if snap.leases.len() >= limit {
                    snap.truncated = true;
                    break;
                }
                snap.leases.push(LeaseRow {
                    name: slot.name.to_string(),
                    holders: record::views(&slot.record, &judge),
                    tentative: slot.reservations.iter().filter(|r| r.deadline_ms > now_ms).count(),
                    last_token: slot.record.last_token,
                    watermark_ms: slot.record.watermark_ms,
                    last: slot.record.predecessor(),
                    busy: slot.busy,
                    modified_ms: slot.modified_ms,
                });
            }
        }
        snap.leases.sort_by(|a, b| a.holders.is_empty().cmp(&b.holders.is_empty()).then(a.name.cmp(&b.name)));
        snap
    }
}

/// Puts `name` (hash `h`) in the retire queue if nothing holds it, then drops
/// the oldest retired records beyond `retain`.
pub(super) fn retire_if_idle(shard: &mut Shard, h: u64, name: &str, now_ms: u64, retain: usize) {
    let Some(slot) = slot_mut(&mut shard.slots, h, name) else { return };
    if slot.retired != 0 || slot.is_live(now_ms) {
        return;
    }
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
