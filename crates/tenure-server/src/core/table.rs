//! The table's storage: shards of slots, reservations, retirement of idle
//! records (bounded, oldest dropped first), and the status snapshot.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

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
    /// The lease name (shared with the map key and the retire queue).
    pub(super) name: Arc<str>,
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
    pub(super) fn new(name: Arc<str>, now_ms: u64) -> Self {
        Self {
            record: LeaseRecord::empty(&name),
            name,
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

#[derive(Debug, Default)]
pub(super) struct Shard {
    pub(super) slots: HashMap<Arc<str>, Slot>,
    /// (retire sequence, name), oldest first; entries whose slot moved on are stale.
    pub(super) retire_queue: VecDeque<(u64, Arc<str>)>,
    pub(super) retired: usize,
    pub(super) next_retire: u64,
    pub(super) next_reservation: u64,
    /// Highest token of a dropped record: new records start above it.
    pub(super) dropped_floor: u64,
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
        let shard = lock(&self.shards[self.shard_of(name.as_str())]);
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
        if let Some(slot) = shard.slots.get(name.as_str()) {
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
            names.extend(lock(shard).slots.keys().filter(|k| k.starts_with(prefix)).map(|k| k.to_string()));
        }
        names.sort_unstable();
        names.truncate(limit);
        names
    }

    /// Breaks the grants of `name` (all, or only `only_token`) if its version is
    /// still `seen_version`. Reservations go too.
    pub fn break_lease(&self, name: &str, seen_version: u64, only_token: Option<u64>) -> Result<(), Refusal> {
        let sid = self.shard_of(name);
        let mut guard = lock(&self.shards[sid]);
        let shard = &mut *guard;
        let now_ms = self.now_us() / 1000;
        let slot = shard.slots.get_mut(name).ok_or(Refusal::Changed)?;
        if slot.version != seen_version {
            return Err(Refusal::Changed);
        }
        let rec = record::decide_break(&slot.record, only_token, now_ms).map_err(|g| Refusal::Nothing(g.detail))?;
        slot.record = rec;
        slot.version += 1;
        slot.modified_ms = now_ms;
        if only_token.is_none() {
            slot.reservations.clear();
        }
        bump(&self.stats.breaks);
        retire_if_idle(shard, name, now_ms, self.per_shard_retain(), &self.stats);
        Ok(())
    }

    /// Retires records whose grants have all expired (crashed holders), so that
    /// memory stays bounded; their records stay until dropped, oldest first.
    pub fn sweep(&self) {
        let now_ms = self.now_us() / 1000;
        let retain = self.per_shard_retain();
        for shard in self.shards.iter() {
            let mut guard = lock(shard);
            let shard = &mut *guard;
            let idle: Vec<Arc<str>> = shard
                .slots
                .iter()
                .filter(|(_, s)| s.retired == 0 && !s.is_live(now_ms))
                .map(|(k, _)| k.clone())
                .collect();
            for name in idle {
                retire_if_idle(shard, &name, now_ms, retain, &self.stats);
            }
        }
    }

    /// A snapshot for the status page: live leases first, then retired ones.
    pub fn snapshot(&self, limit: usize) -> Snapshot {
        let now_ms = self.now_us() / 1000;
        let judge = ClockJudge { now_ms };
        let mut snap = Snapshot::default();
        for shard in self.shards.iter() {
            let shard = lock(shard);
            snap.retired += shard.retired;
            snap.live += shard.slots.len() - shard.retired;
            for (name, slot) in &shard.slots {
                if snap.leases.len() >= limit {
                    snap.truncated = true;
                    break;
                }
                snap.leases.push(LeaseRow {
                    name: name.to_string(),
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

/// Puts `name` in the retire queue if nothing holds it, then drops the oldest
/// retired records beyond `retain`.
pub(super) fn retire_if_idle(shard: &mut Shard, name: &str, now_ms: u64, retain: usize, stats: &Stats) {
    let Some(slot) = shard.slots.get_mut(name) else { return };
    if slot.retired != 0 || slot.is_live(now_ms) {
        return;
    }
    let key = slot.name.clone();
    shard.next_retire += 1;
    slot.retired = shard.next_retire;
    shard.retired += 1;
    shard.retire_queue.push_back((shard.next_retire, key));
    while shard.retired > retain {
        let Some((seq, old)) = shard.retire_queue.pop_front() else { break };
        if shard.slots.get(&old).is_some_and(|s| s.retired == seq)
            && let Some(s) = shard.slots.remove(&old)
        {
            shard.retired -= 1;
            shard.dropped_floor = shard.dropped_floor.max(s.record.last_token);
            bump(&stats.dropped);
        }
    }
    // Stale queue entries (records re-acquired since) are skipped above; compact
    // when they pile up so the queue stays proportional to the retired records.
    if shard.retire_queue.len() > 2 * retain + 64 {
        let slots = &shard.slots;
        shard.retire_queue.retain(|(seq, n)| slots.get(n).is_some_and(|s| s.retired == *seq));
    }
}
