//! Waiting on the server: one FIFO queue of waiters per lease, served the
//! moment the lease frees.
//!
//! A waiter's acquisition parks in its lease's queue (on the slot, under the
//! shard's lock, like everything else about the lease). Whatever may free the
//! lease — a release, a break, a reservation let go — serves the queue in the
//! same critical section: the head is granted if it can be, then the next one
//! (shared waiters together, up to the first that cannot be granted), and each
//! grant goes down the waiter's channel to be pushed on its connection. An
//! expiry is noticed by the waiters' own timers, set to the first deadline that
//! blocks the lease (and the end of the restart quarantine); they serve the
//! queue the same way.
//!
//! **Order.** Strict FIFO: while a lease has waiters, a newcomer — waiting or
//! not — is refused as busy, even when the lease could be granted to it, so a
//! reader cannot overtake a queued writer and nobody overtakes someone who
//! waited longer; a reservation is broken, not upgraded, while anyone waits.
//! Only a holder re-taking a live grant of its own (a restarted job) is not
//! held back: the waiters wait for that grant anyway. A waiter is only ever
//! one lease: a client's multi-lease acquisition waits for its leases one at
//! a time in canonical order, holding the ones before, so no set of waiters
//! waits on each other in a circle.
//!
//! **Leaving.** A waiter that times out, or whose connection goes, leaves the
//! queue when its [`Parked`] handle is dropped; if it was granted in the
//! meantime and nobody took the grant, the grant is released at once, so a
//! disconnected waiter never holds the lease for its TTL. Nothing was written
//! under that grant: it ends as released, and raises no watermark.

use std::sync::Arc;
use std::time::Duration;

use tenure_core::record::{self, ClockJudge, Judge as _};
use tenure_core::{ClockExt, EndedHow, Mono};
use tokio::sync::oneshot;

use super::table::{Served, Shard, Waiter, slot_mut, unretire};
use super::{Acquired, Ask, Core, Refusal, bump};
use crate::witness::WitnessKind;

/// Most waiters queued on one lease.
pub const MAX_WAITERS: usize = 1024;

/// Longest a waiter's timer sleeps before it looks at its lease again, even
/// when nothing it knows of could free it: a safety net, never the mechanism.
const RECHECK: Duration = Duration::from_secs(1);

/// The outcome of [`Core::acquire_or_park`].
#[derive(Debug)]
pub enum Parking {
    /// Answered at once: granted, or refused.
    Done(Result<Acquired, Refusal>),
    /// Queued: [`Parked::wait`] for the grant.
    Parked(Parked),
}

/// A waiter's place in a queue. Dropping it leaves the queue (and gives back a
/// grant it was handed but did not take).
#[derive(Debug)]
pub struct Parked {
    core: Arc<Core>,
    h: u64,
    name: Arc<str>,
    id: u64,
    nonce: String,
    rx: Option<oneshot::Receiver<Served>>,
    until: Mono,
}

impl Core {
    /// Acquires `ask` (one lease, never tentative), or queues it for up to
    /// `wait`: the queue's order decides, not who asks first once it frees.
    pub fn acquire_or_park(self: &Arc<Self>, ask: &Ask<'_>, wait: Duration) -> Parking {
        if let Err(r) = self.check_ttl(ask.ttl_ms) {
            return Parking::Done(Err(r));
        }
        if ask.meta.is_some_and(|m| m.len() > super::MAX_META) {
            return Parking::Done(Err(Refusal::Invalid(format!("metadata longer than {} bytes", super::MAX_META))));
        }
        let until = self.clock.mono() + wait;
        let h = self.hash(ask.name);
        let mut guard = self.shard(h).lock();
        let shard = &mut *guard;
        let now_us = self.now_us();
        // A look, not a refusal: a wait in the quarantine is queued (and
        // counted as refused only if its answer is the quarantine).
        let quarantined = self.in_quarantine().is_some();
        if !quarantined && !self.queued(shard, h, ask, now_us) {
            let sid = Self::shard_index(h);
            match self.acquire_locked(std::slice::from_ref(ask), &[h], &mut [(sid, &mut *shard)], false) {
                Ok(Acquired::Busy { .. }) => {}
                done => return Parking::Done(done),
            }
        }
        if wait.is_zero() {
            return Parking::Done(self.refuse_queued(shard, h, ask.name, now_us));
        }
        // A waiter takes a place in the table like a lease.
        if self.full(shard) {
            return Parking::Done(Err(self.full_refusal()));
        }
        if slot_mut(&mut shard.slots, h, ask.name).is_none() {
            // No record and yet not granted: the quarantine. Queue on a new one.
            if let Err(e) = tenure_core::LeaseName::new(ask.name) {
                return Parking::Done(Err(Refusal::Invalid(e.to_string())));
            }
            let slot = super::table::Slot::new(Arc::from(ask.name), h, now_us / 1000);
            shard.slots.insert_unique(h, slot, |s| s.hash);
        }
        let Some(slot) = slot_mut(&mut shard.slots, h, ask.name) else {
            return Parking::Done(Err(Refusal::Nothing("the lease's record vanished".into())));
        };
        if slot.waiters.len() >= MAX_WAITERS {
            return Parking::Done(Err(Refusal::Overloaded(format!(
                "lease {:?} has its limit of {MAX_WAITERS} waiters",
                ask.name
            ))));
        }
        // A record with waiters is live: one retired (nothing held it, as in
        // the quarantine) comes back, or dropping the oldest retired records
        // could drop it with its waiters.
        let retired = std::mem::take(&mut slot.retired);
        unretire(&mut shard.retired, &mut shard.retire_queue, retired);
        shard.next_waiter += 1;
        let id = shard.next_waiter;
        let (tx, rx) = oneshot::channel();
        slot.waiters.push_back(Waiter {
            id,
            mode: ask.mode,
            ttl_ms: ask.ttl_ms,
            holder: ask.holder.clone(),
            retake: ask.retake,
            since_ms: now_us / 1000,
            meta: ask.meta.map(str::to_string),
            tx,
        });
        let name = slot.name.clone();
        shard.waiting += 1;
        bump(&shard.stats.parked);
        Parking::Parked(Parked {
            core: self.clone(),
            h,
            name,
            id,
            nonce: ask.holder.nonce.clone(),
            rx: Some(rx),
            until,
        })
    }

    /// Serves the queue of `ask`'s lease, then says whether waiters remain
    /// ahead of it. None are ahead of a holder re-taking a live grant of its
    /// own (a restarted job): the waiters wait for that grant anyway, so it
    /// overtakes nobody.
    pub(super) fn queued(&self, shard: &mut Shard, h: u64, ask: &Ask<'_>, now_us: u64) -> bool {
        if shard.waiting == 0 {
            return false;
        }
        self.serve(shard, h, ask.name, now_us);
        let Some(slot) = slot_mut(&mut shard.slots, h, ask.name).filter(|s| !s.waiters.is_empty()) else {
            return false;
        };
        let judge = ClockJudge { now_ms: now_us / 1000 };
        let own = |e: &record::Entry| e.holder.nonce == ask.holder.nonce && !judge.expired(e);
        !(ask.retake && slot.record.entries().any(|(e, _)| own(e)))
    }

    /// A newcomer refused because others wait (or the lease is held): busy,
    /// with the lease's live holders.
    pub(super) fn refuse_queued(
        &self,
        shard: &mut Shard,
        h: u64,
        name: &str,
        now_us: u64,
    ) -> Result<Acquired, Refusal> {
        self.check_open()?;
        let judge = ClockJudge { now_ms: now_us / 1000 };
        let holders =
            shard.slots.find(h, |s| &*s.name == name).map(|s| record::views(&s.record, &judge)).unwrap_or_default();
        Ok(self.busy(shard, h, name, 0, holders))
    }

    /// Grants `name` to the waiters at the head of its queue, as many as can
    /// have it together, in order. Waiters that left are skipped.
    pub(super) fn serve(&self, shard: &mut Shard, h: u64, name: &str, now_us: u64) {
        // During the quarantine nothing is granted (and a look at it is no
        // refused request to count).
        if shard.waiting == 0 || !self.quarantine_left().is_zero() {
            return;
        }
        loop {
            let Some(slot) = slot_mut(&mut shard.slots, h, name) else { return };
            let Some(w) = slot.waiters.front() else { return };
            if w.tx.is_closed() {
                slot.waiters.pop_front();
                shard.waiting -= 1;
                continue;
            }
            let (holder, meta) = (w.holder.clone(), w.meta.clone());
            // A grant made since the waiter queued (handed along this queue,
            // in this pass or an earlier one) is nobody's abandoned grant: a
            // waiter of the same identity (two tasks or processes sharing
            // one) does not re-take it, and waits its turn.
            let fresh = |e: &record::Entry| e.holder.nonce == holder.nonce && e.acquired_ms >= w.since_ms;
            let retake = w.retake && !slot.record.entries().any(|(e, _)| fresh(e));
            let ask = Ask { name, mode: w.mode, ttl_ms: w.ttl_ms, holder: &holder, retake, meta: meta.as_deref() };
            // The head's place in the table passes to its grant: decided
            // without it, or a full table would count the waiter twice and
            // refuse it (a shared grant takes a place of its own).
            shard.waiting -= 1;
            let served = match self.decide(shard, h, &ask, now_us, false, 0) {
                Ok(Err(_busy)) => {
                    shard.waiting += 1;
                    return;
                }
                Ok(Ok(admitted)) => Ok(self.commit(shard, h, &ask, admitted, now_us, WitnessKind::Grant)),
                Err(refusal) => Err(refusal),
            };
            let Some(slot) = slot_mut(&mut shard.slots, h, name) else { return };
            let Some(w) = slot.waiters.pop_front() else { return };
            if served.is_ok() {
                bump(&shard.stats.handovers);
            }
            if let Err(Ok(g)) = w.tx.send(served) {
                // It left between the check and now: nobody will use the grant.
                give_back(shard, h, name, g.token, &holder.nonce, now_us);
            }
        }
    }

    /// Serves `name`'s queue (an expiry may have freed it) and says when
    /// something that blocks it next ends on its own: the first deadline of a
    /// live grant or reservation, or the end of the quarantine.
    fn poke(&self, h: u64, name: &str) -> Duration {
        let mut guard = self.shard(h).lock();
        let shard = &mut *guard;
        let now_us = self.now_us();
        let quarantine = self.quarantine_left();
        self.serve(shard, h, name, now_us);
        let now_ms = now_us / 1000;
        let first = slot_mut(&mut shard.slots, h, name).and_then(|s| {
            let grants = s.record.entries().map(|(e, _)| e.deadline_ms);
            let reservations = s.reservations.iter().map(|r| r.deadline_ms);
            grants.chain(reservations).filter(|&d| d > now_ms).min()
        });
        let next = first.map_or(RECHECK, |d| Duration::from_millis(d - now_ms + 1));
        if quarantine.is_zero() { next } else { next.min(quarantine) }.min(RECHECK)
    }
}

impl Parked {
    /// Waits for the grant, or until the wait's end: then it leaves the queue
    /// and answers busy (or the grant, if it came at the last moment).
    pub async fn wait(mut self) -> Result<Acquired, Refusal> {
        let clock = self.core.clock.clone();
        loop {
            let next = self.core.poke(self.h, &self.name);
            let now = clock.mono();
            if now >= self.until {
                break;
            }
            let nap = next.min(self.until.saturating_since(now));
            let Some(rx) = self.rx.as_mut() else { break };
            tokio::select! {
                served = rx => {
                    self.rx = None;
                    return take(served.ok());
                }
                () = clock.sleep(nap) => {}
            }
        }
        // Out of time: leave, unless served meanwhile (the channel says so).
        let mut rx = self.rx.take();
        let mut guard = self.core.shard(self.h).lock();
        let shard = &mut *guard;
        if self.remove(shard) {
            let now_us = self.core.now_us();
            return self.core.refuse_queued(shard, self.h, &self.name, now_us);
        }
        drop(guard);
        take(rx.as_mut().and_then(|rx| rx.try_recv().ok()))
    }

    /// Takes this waiter out of its queue; `false` if it was no longer there.
    fn remove(&self, shard: &mut Shard) -> bool {
        let Some(slot) = slot_mut(&mut shard.slots, self.h, &self.name) else { return false };
        let Some(pos) = slot.waiters.iter().position(|w| w.id == self.id) else { return false };
        slot.waiters.remove(pos);
        shard.waiting -= 1;
        // Those behind it may be grantable now (a shared waiter behind an exclusive one).
        let now_us = self.core.now_us();
        self.core.serve(shard, self.h, &self.name, now_us);
        true
    }
}

fn take(served: Option<Served>) -> Result<Acquired, Refusal> {
    match served {
        Some(Ok(g)) => Ok(Acquired::Granted(vec![g])),
        Some(Err(r)) => Err(r),
        None => Err(Refusal::Nothing("the wait was ended".into())),
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        // `wait` took the channel and finished: nothing is left to do.
        let Some(mut rx) = self.rx.take() else { return };
        let mut guard = self.core.shard(self.h).lock();
        let shard = &mut *guard;
        if self.remove(shard) {
            return;
        }
        // Served while nobody listened: give the grant back at once.
        if let Ok(Ok(g)) = rx.try_recv() {
            let now_us = self.core.now_us();
            if give_back(shard, self.h, &self.name, g.token, &self.nonce, now_us) {
                self.core.freed(shard, self.h, &self.name, now_us);
            }
        }
    }
}

/// Ends a grant made to a waiter that was gone before it got it. Nothing
/// was written under it, so it ends as released, not dropped: no watermark
/// is raised to its deadline (as for a grant never written to its
/// connection). `false` if it was not held.
fn give_back(shard: &mut Shard, h: u64, name: &str, token: u64, nonce: &str, now_us: u64) -> bool {
    super::end_grant(shard, h, name, token, nonce, EndedHow::Released, now_us / 1000, None, None)
}
