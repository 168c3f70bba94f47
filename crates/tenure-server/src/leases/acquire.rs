//! Granting: one ask or a batch of them decided and committed together, and
//! the upgrade of a tentative reservation into a full grant.
//!
//! A batch locks the shards it touches in index order, decides every ask
//! against its record ([`tenure_core::record`]'s rules), and commits only if
//! every one was granted; a busy lease answers with its holders instead.

use std::sync::Arc;

use parking_lot::MutexGuard;
use smallvec::SmallVec;
use tenure_core::record::{self, Admitted, ClockJudge};
use tenure_core::{EndedHow, HolderView, Mode};

use super::table::{Reservation, Shard, Slot, reweigh, slot_mut, unretire};
use super::{Acquired, Ask, Core, Granted, MAX_META, Refusal, add, bump};
use crate::witness::WitnessKind;

impl Core {
    /// Acquires every lease of `asks` or none (`tentative`: reservations only).
    pub fn acquire(&self, asks: &[Ask<'_>], tentative: bool) -> Result<Acquired, Refusal> {
        self.check_open()?;
        for (i, a) in asks.iter().enumerate() {
            self.check_ttl(a.ttl_ms)?;
            if a.meta.is_some_and(|m| m.len() > MAX_META) {
                return Err(Refusal::Invalid(format!("metadata longer than {MAX_META} bytes")));
            }
            if asks[..i].iter().any(|b| b.name == a.name) {
                return Err(Refusal::Invalid(format!("lease {:?} asked twice in one batch", a.name)));
            }
        }
        // One lease (the common case): its one shard, locked without a list.
        if let [ask] = asks {
            let h = self.hash(ask.name);
            let mut guard = self.shard(h).lock();
            return self.acquire_locked(asks, &[h], &mut [(Self::shard_index(h), &mut *guard)], tentative);
        }
        // Several: their shards, locked in index order (no deadlock).
        let hashes: Vec<u64> = asks.iter().map(|a| self.hash(a.name)).collect();
        let mut order: Vec<usize> = hashes.iter().map(|&h| Self::shard_index(h)).collect();
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<(usize, MutexGuard<'_, Shard>)> =
            order.iter().map(|&i| (i, self.shards[i].0.lock())).collect();
        let mut shards: Vec<(usize, &mut Shard)> = guards.iter_mut().map(|(i, g)| (*i, &mut **g)).collect();
        self.acquire_locked(asks, &hashes, &mut shards, tentative)
    }

    /// Acquires every lease of `asks` (whose names hash to `hashes`) or none,
    /// their shards locked in `shards` (sorted by shard index): decides every
    /// ask, then commits them all if none is busy or refused.
    pub(super) fn acquire_locked(
        &self,
        asks: &[Ask<'_>],
        hashes: &[u64],
        shards: &mut [(usize, &mut Shard)],
        tentative: bool,
    ) -> Result<Acquired, Refusal> {
        let now_us = self.now_us();
        // On the stack for the usual single ask.
        let mut decided: SmallVec<[Admitted; 1]> = SmallVec::with_capacity(asks.len());
        // Room the batch's earlier asks will take, by shard: nothing is
        // committed before every ask is decided, so `full` alone would let a
        // batch of k go k - 1 places past the limit.
        let mut pending: Vec<(usize, usize)> = Vec::new();
        for (index, (ask, &h)) in asks.iter().zip(hashes).enumerate() {
            let sid = Self::shard_index(h);
            let shard = shard_of(shards, sid);
            // First come, first served: nobody overtakes a queued waiter.
            if self.queued(shard, h, ask, now_us) {
                return Ok(match self.refuse_queued(shard, h, ask.name, now_us)? {
                    Acquired::Busy { holders, version, .. } => Acquired::Busy { index, holders, version },
                    granted => granted,
                });
            }
            let earlier = pending.iter().find(|(id, _)| *id == sid).map_or(0, |(_, n)| *n);
            // Only asks still to come care what this one will take.
            let last = index + 1 == asks.len();
            let exists = !last && shard.slots.find(h, |s| &*s.name == ask.name).is_some();
            let decision = self.decide(shard, h, ask, now_us, tentative, earlier).map_err(|r| match r {
                Refusal::Exhausted { last_token, .. } => Refusal::Exhausted { index, last_token },
                other => other,
            })?;
            match decision {
                Err(holders) => return Ok(self.busy(shard, h, ask.name, index, holders)),
                Ok(admitted) => decided.push(admitted),
            }
            if !last && Self::takes_room(exists, ask, tentative) {
                match pending.iter_mut().find(|(id, _)| *id == sid) {
                    Some((_, n)) => *n += 1,
                    None => pending.push((sid, 1)),
                }
            }
        }
        let kind = if tentative { WitnessKind::Tentative } else { WitnessKind::Grant };
        let mut out = Vec::with_capacity(asks.len());
        for ((ask, &h), admitted) in asks.iter().zip(hashes).zip(decided) {
            out.push(self.commit(shard_of(shards, Self::shard_index(h)), h, ask, admitted, now_us, kind));
        }
        // Past waiters only a re-take is granted (see `queued`); one from
        // exclusive to shared lets the shared waiters at the head in with it.
        for (ask, &h) in asks.iter().zip(hashes).filter(|(a, _)| a.retake && a.mode == Mode::Shared && !tentative) {
            self.serve(shard_of(shards, Self::shard_index(h)), h, ask.name, now_us);
        }
        Ok(Acquired::Granted(out))
    }

    /// The one decision of the table, for every way a lease is taken (an ask
    /// alone or in a batch, a reservation, an upgrade, a waiter served):
    /// decides `ask` against its shard without changing anything.
    /// `Ok(Err(holders))` if busy. `pending` is the room earlier asks of the
    /// same batch will take in this shard.
    pub(super) fn decide(
        &self,
        shard: &Shard,
        h: u64,
        ask: &Ask<'_>,
        now_us: u64,
        tentative: bool,
        pending: usize,
    ) -> Result<Result<Admitted, Vec<HolderView>>, Refusal> {
        let now_ms = now_us / 1000;
        let slot = shard.slots.find(h, |s| &*s.name == ask.name);
        self.check_room(self.full_with(shard, pending), slot.is_some(), ask, tentative)?;
        if let Some(s) = slot {
            s.check_crowd(ask, now_ms, tentative)?;
        }
        let blocked_by_reservation = || {
            slot.is_some_and(|s| {
                s.reservations.iter().any(|r| {
                    r.deadline_ms > now_ms
                        && r.holder.nonce != ask.holder.nonce
                        && (ask.mode == Mode::Exclusive || r.mode == Mode::Exclusive)
                })
            })
        };
        let rask = ask.record_ask(now_ms, now_us.max(shard.dropped_floor));
        match record::check_acquire(slot.map(|s| &s.record), &rask, &ClockJudge { now_ms }) {
            Err(record::Refused::Busy(holders)) => Ok(Err(holders)),
            Err(record::Refused::Exhausted { last_token }) => Err(Refusal::Exhausted { index: 0, last_token }),
            Ok(_) if tentative && blocked_by_reservation() => Ok(Err(Vec::new())),
            Ok(admitted) if admitted.token() > self.token_limit(now_us) => Err(Refusal::Overloaded(format!(
                "grants of {:?} outran the server clock (token {}); slow down",
                ask.name,
                admitted.token()
            ))),
            Ok(admitted) => Ok(Ok(admitted)),
        }
    }

    /// Applies a decision [`Core::decide`] made under the same lock and at
    /// the same `now_us`: a `kind` of grant (a reservation if tentative).
    pub(super) fn commit(
        &self,
        shard: &mut Shard,
        h: u64,
        ask: &Ask<'_>,
        admitted: Admitted,
        now_us: u64,
        kind: WitnessKind,
    ) -> Granted {
        let now_ms = now_us / 1000;
        let deadline_ms = now_ms.saturating_add(ask.ttl_ms);
        let floor = now_us.max(shard.dropped_floor);
        let res_id = shard.next_reservation + 1;
        let stats = &shard.stats;
        let slot = match slot_mut(&mut shard.slots, h, ask.name) {
            Some(slot) => slot,
            None => shard.slots.insert_unique(h, Slot::new(Arc::from(ask.name), h, now_ms), |s| s.hash).into_mut(),
        };
        let retired_seq = std::mem::take(&mut slot.retired);
        let rask = ask.record_ask(now_ms, floor);
        let judge = ClockJudge { now_ms };
        let (token, version, predecessor) = if kind == WitnessKind::Tentative {
            // A reservation tells what its full grant would follow, and leaves the record as it is.
            let predecessor = record::grant(&mut slot.record.clone(), &rask, &judge, admitted).predecessor;
            slot.reservations.retain(|r| r.deadline_ms > now_ms && r.holder.nonce != ask.holder.nonce);
            slot.reservations.push(Reservation {
                id: res_id,
                mode: ask.mode,
                holder: ask.holder.clone(),
                ttl_ms: ask.ttl_ms,
                deadline_ms,
                meta: ask.meta.map(str::to_string),
            });
            shard.next_reservation = res_id;
            bump(&stats.tentative);
            (0, res_id, predecessor)
        } else {
            // A full grant breaks every live reservation it conflicts with.
            if !slot.reservations.is_empty() {
                let conflicts = |r: &Reservation| ask.mode == Mode::Exclusive || r.mode == Mode::Exclusive;
                let broken = slot.reservations.iter().filter(|r| r.deadline_ms > now_ms && conflicts(r)).count();
                slot.reservations.retain(|r| r.deadline_ms > now_ms && !conflicts(r));
                add(&stats.tentative_broken, broken as u64);
            }
            let record::Acquired { token, predecessor } = record::grant(&mut slot.record, &rask, &judge, admitted);
            slot.version += 1;
            bump(&stats.grants);
            if predecessor.as_ref().is_some_and(|p| p.how == EndedHow::Expired && p.at_ms == now_ms) {
                bump(&stats.expired_takeovers);
            }
            (token, slot.version, predecessor)
        };
        slot.modified_ms = now_ms;
        reweigh(&mut shard.weight, slot);
        unretire(&mut shard.retired, &mut shard.retire_queue, retired_seq);
        let witness = ask.witness(kind, token, deadline_ms, now_us, predecessor.as_ref());
        Granted { token, deadline_ms, version, predecessor, witness }
    }

    pub(super) fn busy(
        &self,
        shard: &mut Shard,
        h: u64,
        name: &str,
        index: usize,
        holders: Vec<HolderView>,
    ) -> Acquired {
        bump(&shard.stats.busy);
        let version = match slot_mut(&mut shard.slots, h, name) {
            Some(slot) => {
                slot.busy += 1;
                slot.version
            }
            None => 0,
        };
        Acquired::Busy { index, holders, version }
    }

    /// Turns reservation `id` of `nonce` on `name` into a full grant, if it
    /// survived: the reservation is taken out and asked again in full (it may
    /// re-take its own grant), by the same decision as every other ask.
    pub fn upgrade(&self, name: &str, id: u64, nonce: &str) -> Result<Result<Granted, String>, Refusal> {
        self.check_open()?;
        let h = self.hash(name);
        let mut guard = self.shard(h).lock();
        let shard = &mut *guard;
        let now_us = self.now_us();
        let now_ms = now_us / 1000;
        let failed = |shard: &Shard, why: &str| {
            bump(&shard.stats.upgrades_failed);
            Ok(Err(why.to_string()))
        };
        let Some(slot) = slot_mut(&mut shard.slots, h, name) else {
            return failed(shard, "the reservation is gone");
        };
        let Some(pos) = slot.reservations.iter().position(|r| r.id == id && r.holder.nonce == nonce) else {
            return failed(shard, "the reservation was broken by a full request");
        };
        let r = slot.reservations.swap_remove(pos);
        reweigh(&mut shard.weight, slot);
        if r.deadline_ms <= now_ms {
            return failed(shard, "the reservation expired");
        }
        let ask =
            Ask { name, mode: r.mode, ttl_ms: r.ttl_ms, holder: &r.holder, retake: true, meta: r.meta.as_deref() };
        // A full request waiting for the lease breaks the reservation, as one
        // granted would: nobody overtakes a waiter, a reader no more than
        // anyone (the queue is served without the reservation first).
        if self.queued(shard, h, &ask, now_us) {
            return failed(shard, "a full request is waiting for the lease");
        }
        match self.decide(shard, h, &ask, now_us, false, 0) {
            Ok(Ok(admitted)) => {
                let granted = self.commit(shard, h, &ask, admitted, now_us, WitnessKind::Upgrade);
                // A holder's exclusive grant that became shared lets the
                // shared waiters at the head in (as in `acquire_locked`).
                if ask.mode == Mode::Shared {
                    self.serve(shard, h, name, now_us);
                }
                Ok(Ok(granted))
            }
            Ok(Err(_busy)) => failed(shard, "a full grant took the lease"),
            Err(Refusal::Exhausted { .. }) => failed(shard, "the lease has used up its fencing tokens"),
            Err(refusal) => {
                bump(&shard.stats.upgrades_failed);
                Err(refusal)
            }
        }
    }
}

/// The locked shard `sid` of a batch (`shards` is sorted by shard index and
/// holds every shard of the batch, so the search always lands on it).
fn shard_of<'g>(shards: &'g mut [(usize, &mut Shard)], sid: usize) -> &'g mut Shard {
    let i = shards.partition_point(|(id, _)| *id < sid);
    &mut *shards[i].1
}
