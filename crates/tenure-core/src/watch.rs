//! Watching a lease: who holds it now, and each change after (leader
//! election's "who leads, and tell me when it changes").
//!
//! [`Client::watch`](crate::Client::watch) reads the lease's state, yields it
//! as [`Change::Current`], then waits for the record to change and yields one
//! [`Holding`] per change it sees, by comparing each state with the one
//! before:
//!
//! - a grant that appears: [`Change::Acquired`], or [`Change::TakenOver`] when
//!   it replaced a grant whose time was up;
//! - a grant that is gone: [`Change::Released`], [`Change::Broken`] or
//!   [`Change::Expired`] as the record says it ended (its last ending), else
//!   [`Change::Ended`] (it ended, and another ending came after it before the
//!   watcher looked);
//! - a grant whose deadline passed (by this observer's clock, with the store's
//!   clock-skew margin): [`Change::Expired`] at once, before anyone takes it
//!   over — a timer wakes the watcher for it, not only a write; and
//!   [`Change::RenewedLate`] if its holder renews it after all;
//! - an unreadable record: [`Change::Corrupt`].
//!
//! Renewals in time are not changes: the leader is the same.
//!
//! The wait is the store's own [`LeaseStore::wait_for_change`]: pushed by the
//! store where it can watch a key (a directory's inotify, etcd's watch),
//! otherwise a sleep of at most `poll` between two reads (object stores, the
//! lease server). Changes between two reads that undo each other (a grant
//! taken and released within one poll) are seen only as the record's last
//! ending says. A failed read yields the error and the watch goes on at the
//! next poll: the caller decides whether to stop.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;

use crate::clock::{Clock, ClockExt};
use crate::error::Result;
use crate::name::LeaseName;
use crate::store::LeaseStore;
use crate::types::{Busy, EndedHow, HolderView, LeaseState, Predecessor};

/// What changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// The state when the watch began.
    Current,
    /// A new grant, of a free lease (or beside other shared holders).
    Acquired,
    /// A new grant that replaced one whose time was up.
    TakenOver,
    /// A grant ended by its holder.
    Released,
    /// A grant ended by `tenure break` (or its `tenure lock` died and its
    /// guard ended it).
    Broken,
    /// A grant whose deadline passed without a renewal: no longer held, though
    /// nobody may have taken it over yet.
    Expired,
    /// A grant whose deadline had passed, renewed by its holder after all.
    RenewedLate,
    /// A grant that is gone, how unknown (other changes came before the next read).
    Ended,
    /// The record cannot be read.
    Corrupt,
}

impl Change {
    /// The word `tenure watch` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Current => "current",
            Change::Acquired => "acquired",
            Change::TakenOver => "taken_over",
            Change::Released => "released",
            Change::Broken => "broken",
            Change::Expired => "expired",
            Change::RenewedLate => "renewed_late",
            Change::Ended => "ended",
            Change::Corrupt => "corrupt",
        }
    }
}

/// One change of a watched lease, and the state it left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    /// What changed.
    pub change: Change,
    /// The fencing token of the grant it is about (none for
    /// [`Change::Current`] and [`Change::Corrupt`]).
    pub token: Option<u64>,
    /// That grant as the record showed it, if the watcher saw it in the record
    /// (a grant taken and ended between two reads is known only by its ending).
    pub grant: Option<HolderView>,
    /// For an ending: how the record says it ended (who broke it and why, its
    /// watermark), if it is the record's last ending.
    pub ended: Option<Predecessor>,
    /// The lease's state as read.
    pub state: LeaseState,
    /// When it was seen (this observer's wall clock, ms).
    pub seen_ms: u64,
}

/// What [`watch`] keeps between two reads.
struct Watcher {
    store: Arc<dyn LeaseStore>,
    name: LeaseName,
    poll: Duration,
    /// The state last read, and the events not yet yielded.
    last: Option<LeaseState>,
    pending: std::collections::VecDeque<Result<Holding>>,
}

/// Margin past a holder's expiry before the watcher reads again, so that the
/// read sees it expired (the store rounds to ms).
const EXPIRY_MARGIN: Duration = Duration::from_millis(20);

/// The watch behind [`crate::Client::watch`]: every `poll` at most (sooner
/// where the store pushes changes, and at each holder's expiry).
pub(crate) fn watch(
    store: Arc<dyn LeaseStore>,
    name: LeaseName,
    poll: Duration,
) -> impl Stream<Item = Result<Holding>> + Send {
    let w = Watcher { store, name, poll: poll.max(Duration::from_millis(1)), last: None, pending: Default::default() };
    futures::stream::unfold(w, |mut w| async move {
        loop {
            if let Some(item) = w.pending.pop_front() {
                return Some((item, w));
            }
            w.step().await;
        }
    })
}

impl Watcher {
    /// Waits for a change (not before the first read), reads, and queues what changed.
    async fn step(&mut self) {
        if let Some(last) = &self.last {
            let wait = next_wake(last, self.poll);
            self.store.wait_for_change(&Busy::of(last.clone()), wait).await;
        }
        let clock: Arc<dyn Clock> = self.store.clock().clone();
        match self.store.inspect(&self.name).await {
            Ok(now) => {
                let seen_ms = clock.wall_ms();
                let events = match &self.last {
                    None => vec![(Change::Current, None, None, None)],
                    Some(before) => diff(before, &now),
                };
                for (change, token, grant, ended) in events {
                    self.pending.push_back(Ok(Holding { change, token, grant, ended, state: now.clone(), seen_ms }));
                }
                self.last = Some(now);
            }
            Err(e) => {
                self.pending.push_back(Err(e));
                // The next read comes after a poll, not at once.
                clock.sleep(self.poll).await;
            }
        }
    }
}

/// How long to wait before reading again: `poll`, or until just past the
/// first live holder's expiry if that is sooner.
fn next_wake(state: &LeaseState, poll: Duration) -> Duration {
    state
        .holders
        .iter()
        .map(|h| Duration::from_millis(h.expires_in_ms).saturating_add(EXPIRY_MARGIN))
        .min()
        .map_or(poll, |d| d.min(poll))
}

/// A change, the token it is about, the grant as seen, and its ending.
type Event = (Change, Option<u64>, Option<HolderView>, Option<Predecessor>);

/// The changes from `before` to `now`: endings first, then new grants.
/// A grant taken and ended between the two reads (the record's last ending,
/// newer than every grant `before` knew) is told as acquired, then ended as
/// the record says; grants before it that also came and went are not known.
fn diff(before: &LeaseState, now: &LeaseState) -> Vec<Event> {
    let mut out = Vec::new();
    if now.corrupt.is_some() && before.corrupt.is_none() {
        out.push((Change::Corrupt, None, None, None));
    }
    let tokens = |hs: &[HolderView]| hs.iter().map(|h| h.token).collect::<BTreeSet<u64>>();
    let (was_live, was_expired) = (tokens(&before.holders), tokens(&before.expired));
    let (live, expired) = (tokens(&now.holders), tokens(&now.expired));
    let last = now.last.as_ref();
    let ended_as = |token: u64| last.filter(|p| p.token == token).cloned();
    let mut replaced_expired = false;

    for h in before.holders.iter().chain(&before.expired) {
        let t = h.token;
        if live.contains(&t) {
            if was_expired.contains(&t) {
                out.push((Change::RenewedLate, Some(t), find(&now.holders, t), None));
            }
            continue;
        }
        if expired.contains(&t) {
            if was_live.contains(&t) {
                out.push((Change::Expired, Some(t), find(&now.expired, t), None));
            }
            continue;
        }
        // Gone from the record.
        let ended = ended_as(t);
        let change = match ended.as_ref().map(|p| p.how) {
            Some(EndedHow::Released | EndedHow::Dropped | EndedHow::Retaken) => Change::Released,
            Some(EndedHow::Broken) => Change::Broken,
            Some(EndedHow::Expired) => {
                replaced_expired = true;
                if was_expired.contains(&t) {
                    // Its expiry was already told; only the takeover is new.
                    continue;
                }
                Change::Expired
            }
            Some(EndedHow::Corrupt) | None => Change::Ended,
        };
        if was_expired.contains(&t) && change == Change::Ended {
            replaced_expired = true;
            continue;
        }
        out.push((change, Some(t), Some(h.clone()), ended));
    }
    if let Some(p) =
        last.filter(|p| p.token > before.last_token && !live.contains(&p.token) && !expired.contains(&p.token))
    {
        out.push((Change::Acquired, Some(p.token), None, None));
        let change = match p.how {
            EndedHow::Released | EndedHow::Dropped | EndedHow::Retaken => Change::Released,
            EndedHow::Broken => Change::Broken,
            EndedHow::Expired => Change::Expired,
            EndedHow::Corrupt => Change::Ended,
        };
        replaced_expired |= p.how == EndedHow::Expired;
        out.push((change, Some(p.token), None, Some(p.clone())));
    }
    for h in &now.holders {
        if was_live.contains(&h.token) || was_expired.contains(&h.token) {
            continue;
        }
        let change = if replaced_expired { Change::TakenOver } else { Change::Acquired };
        out.push((change, Some(h.token), Some(h.clone()), None));
    }
    out
}

fn find(holders: &[HolderView], token: u64) -> Option<HolderView> {
    holders.iter().find(|h| h.token == token).cloned()
}

#[cfg(test)]
mod tests;
