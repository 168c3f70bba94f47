//! Slots: at most N holders of one name at once (a counting semaphore), each
//! holding an ordinary lease of its own.
//!
//! [`LeaseOptions::with_slots`]`(n)` makes [`Client::acquire`] (and `try_acquire`)
//! take one of `n` slots of a name instead of the name itself. Slot `i` of
//! `NAME` is the lease `NAME/+slots/i`; the segment `+slots` is reserved (no
//! other segment may start with `+`, see [`crate::LeaseName`]), so a user's
//! name never collides with a slot by accident, and a name that spells one out
//! *is* that slot (`tenure break STORE jobs/+slots/1`). Each slot is a lease in
//! its own right: its own fencing tokens, keep-alive, takeover after a crash,
//! `break` and `status`, on every store, through the one lease core.
//!
//! **The line.** Waiters queue on one more exclusive lease, the *gate*
//! `NAME/+slots/gate`, in the store's own line for it (the directory's wait
//! line, the lease server's queue, …). Only the gate's holder looks for a free
//! slot: it tries the slots in order `0, 1, …` and takes the first free one
//! (or one whose holder's time is up, taken over as any lease is); if all are
//! held it waits for one to change, polling them (with the client's backoff,
//! never later than a holder could first be taken over) and watching them
//! where the store can. It lets the gate go once it holds a slot. So waiters
//! are served in the order of the gate's line, and only one of them at a time
//! races for a freed slot. A `try_acquire` waits for the gate for at most
//! [`TRY_GATE_WAIT`] (someone is passing it, or waits for a slot: then all
//! slots are held) and does not wait for a slot.
//!
//! **The count.** The gate's grants carry `slots=N` as their metadata, which
//! every store keeps for the next holder of the gate. A client that asks with
//! another count than the last one through the gate is refused
//! ([`Error::InvalidOptions`], `tenure lock` exits 64) while any slot below
//! that count is held; when none is, the new count takes effect (a slot this
//! holder dropped, whose release is still on its way, is not in the way). The remaining
//! race: the check relies on the gate's exclusion, and a gate holder paused
//! past its TTL may meet the next one at the slots. Slots are numbered from 0
//! whatever the count, so even then no more holders than the larger of the two
//! counts ever hold slots at once, and each slot stays a lease: fencing is not
//! affected.
//!
//! **One slot per holder.** A client (one holder identity) that holds a slot of
//! a name is refused another slot of it. A slot held by its own identity that
//! it abandoned (a restart with the same nonce) is re-taken at once, like any
//! lease, if it is the first one tried that is not free.
//!
//! **Cost.** An uncontended acquire is three lease operations: take the gate,
//! take slot 0, release the gate. On an object store that is 5 requests (a GET
//! and a conditional PUT for each lease taken, a PUT for the gate's release;
//! 3 PUTs when this process wrote both records last), against 2 for a plain
//! lease; releasing a slot is one PUT, as for any lease (counted by
//! `tenure-object`'s request tests). A gate holder that finds slots held reads
//! each held one once per poll.

use std::time::Duration;

use crate::client::{Client, failed_look};
use crate::error::{Error, Result};
use crate::keepalive::Lease;
use crate::name::{LeaseName, SLOTS_SEGMENT};
use crate::options::LeaseOptions;
use crate::store::ReleaseRequest;
use crate::types::{Attempt, Busy, LeaseState};

/// Most slots a name may have.
pub const MAX_SLOTS: u32 = 1024;
/// The last segment of a name's gate: `NAME/+slots/gate`.
pub const GATE: &str = "gate";
/// How long a `try_acquire` of a slot waits for the gate: a holder passing it
/// takes a few store operations; a gate held longer is held by a waiter, and
/// then every slot is held.
pub const TRY_GATE_WAIT: Duration = Duration::from_secs(1);
/// Most slots watched at once while all are held (the others are polled).
const WATCHED: usize = 16;

/// Refuses a slot count out of range.
pub fn check_count(n: u32) -> Result<()> {
    if n == 0 || n > MAX_SLOTS {
        return Err(Error::InvalidOptions { reason: format!("{n} slots: a name has 1 to {MAX_SLOTS} slots") });
    }
    Ok(())
}

/// What a name of the slots of `base` is: slot `i`, or the gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotPart {
    /// Slot `i`.
    Slot(u32),
    /// The gate, where waiters queue.
    Gate,
}

/// `name` as a part of some name's slots: the base name and which part, or
/// `None` for an ordinary name.
pub fn parse(name: &LeaseName) -> Option<(&str, SlotPart)> {
    let (rest, last) = name.as_str().rsplit_once('/')?;
    let base = rest.strip_suffix(SLOTS_SEGMENT)?.strip_suffix('/')?;
    if last == GATE {
        return Some((base, SlotPart::Gate));
    }
    // Canonical decimal only: `01` is not slot 1.
    let canonical = last == "0" || (!last.starts_with('0') && last.bytes().all(|b| b.is_ascii_digit()));
    let i = last.parse::<u32>().ok().filter(|&i| canonical && i < MAX_SLOTS)?;
    Some((base, SlotPart::Slot(i)))
}

/// The lease name of `part` of `base`'s slots.
///
/// # Errors
/// [`Error::InvalidName`] if `base` is itself part of some slots, or too long
/// (or deep) for the derived name to be a lease name.
pub fn part_name(base: &LeaseName, part: SlotPart) -> Result<LeaseName> {
    if base.segments().any(|s| s == SLOTS_SEGMENT) {
        return Err(Error::InvalidName {
            name: base.to_string(),
            reason: format!(
                "holds the segment {SLOTS_SEGMENT:?}, which names the slots of a lease: slots have no slots"
            ),
        });
    }
    let last = match part {
        SlotPart::Slot(i) => i.to_string(),
        SlotPart::Gate => GATE.to_string(),
    };
    LeaseName::new(format!("{base}/{SLOTS_SEGMENT}/{last}")).map_err(|e| match e {
        Error::InvalidName { reason, .. } => Error::InvalidName {
            name: base.to_string(),
            reason: format!(
                "is too long to have slots: its slots are named {base}/{SLOTS_SEGMENT}/<i>, which {reason}"
            ),
        },
        other => other,
    })
}

/// The metadata of a gate grant: the count it was taken with.
fn meta(n: u32) -> String {
    format!("slots={n}")
}

/// The count a gate grant's metadata records.
pub fn count_of(meta: Option<&str>) -> Option<u32> {
    meta?.strip_prefix("slots=")?.parse().ok().filter(|n| check_count(*n).is_ok())
}

/// The count in force for a gate as `state` shows it: the one its last holder
/// took it with (`None` if it was never taken, or its record does not say).
pub fn count_in_force(gate: &LeaseState) -> Option<u32> {
    count_of(gate.last.as_ref().and_then(|p| p.meta.as_deref()))
}

impl Lease {
    /// Which slot this lease is, if it is one (see [`crate::slots`]).
    pub fn slot(&self) -> Option<u32> {
        match parse(&self.grant().name) {
            Some((_, SlotPart::Slot(i))) => Some(i),
            _ => None,
        }
    }
}

impl Client {
    /// Takes one of `n` slots of `base`: see the [module](crate::slots).
    pub(crate) async fn acquire_slot(
        &self,
        base: LeaseName,
        n: u32,
        opts: &LeaseOptions,
        mut on_wait: impl FnMut(&Busy) + Send,
    ) -> Result<Lease> {
        opts.validate()?;
        let gate = part_name(&base, SlotPart::Gate)?;
        part_name(&base, SlotPart::Slot(n - 1))?;
        let clock = self.clock().clone();
        let started = clock.mono();
        let trying = opts.timeout == Some(Duration::ZERO);
        // The client's tasks pass the gate one at a time (and a task never
        // sees a sibling's slot grant half done).
        let (_turn, left) = self.take_turns(std::slice::from_ref(&gate), opts).await?;
        if let Some(i) = self.held_slot(&base) {
            return Err(Error::InvalidOptions {
                reason: format!(
                    "this holder already holds slot {i} of {base:?}: a holder takes at most one slot of a name"
                ),
            });
        }
        let gate_opts = LeaseOptions {
            slots: None,
            meta: Some(meta(n)),
            timeout: if trying { Some(TRY_GATE_WAIT) } else { left.timeout },
            ..opts.clone()
        };
        let grant = match self.acquire_grants(std::slice::from_ref(&gate), &gate_opts, &mut on_wait).await {
            Ok(mut grants) => grants.pop().ok_or_else(|| Error::store(self.store().url(), "acquiring", "no grant"))?,
            Err(Error::Timeout { holder, .. }) if trying => {
                let holder = format!("every slot, it seems: {holder} passes the gate or waits for a slot");
                return Err(self.gave_up_on(&base, holder, opts, clock.mono().saturating_since(started)));
            }
            Err(Error::Timeout { store, holder, .. }) => {
                let holder = format!("every one of its {n} slots ({holder} is ahead in the line)");
                let waited = clock.mono().saturating_since(started);
                return Err(Error::Timeout { store, name: base.to_string(), holder, waited });
            }
            Err(e) => return Err(e),
        };
        let in_force = grant.predecessor.as_ref().and_then(|p| count_of(p.meta.as_deref()));
        let gate_lease = Lease::start(
            self.store().clone(),
            grant,
            &gate_opts,
            self.held.clone(),
            clock.mono().saturating_since(started),
        );
        let deadline = opts.timeout.map(|t| started + t);
        let picked = match in_force.filter(|&m| m != n) {
            Some(m) => match self.slot_held_below(&base, m).await {
                Ok(Some(busy)) => Err(Refused::Count(m, busy)),
                Ok(None) => Ok(()),
                Err(e) => Err(Refused::Error(e)),
            },
            None => Ok(()),
        };
        let picked = match picked {
            Ok(()) => self.pick_slot(&base, n, opts, started, deadline, &mut on_wait).await.map_err(Refused::Error),
            Err(refused) => Err(refused),
        };
        // The gate keeps the count in force: a refused count changes nothing.
        let kept = match &picked {
            Err(Refused::Count(m, _)) => *m,
            _ => n,
        };
        let release = ReleaseRequest { meta: Some(meta(kept)), ..ReleaseRequest::default() };
        if let Err(e) = gate_lease.release_with(release).await {
            tracing::debug!(error = %e, "releasing the gate of {base} failed; it expires by itself");
        }
        picked.map_err(|r| match r {
            Refused::Count(m, busy) => Error::InvalidOptions {
                reason: format!(
                    "{}: {base:?} is in use with {m} slots ({} holds {}), and {n} were asked for: \
                     every holder asks for the same number of slots while any is held",
                    self.store().url(),
                    busy.describe(),
                    busy.name,
                ),
            },
            Refused::Error(e) => e,
        })
    }

    /// Which slot of `base` a live handle of this client holds.
    fn held_slot(&self, base: &LeaseName) -> Option<u32> {
        let held = self.held.lock();
        held.keys().find_map(|k| {
            let name = LeaseName::new(k.as_str()).ok()?;
            match parse(&name) {
                Some((b, SlotPart::Slot(i))) if b == base.as_str() => Some(i),
                _ => None,
            }
        })
    }

    /// A held slot below `m`, if any (read only). A slot this holder holds
    /// with no live handle of this client (one dropped, its release still on
    /// the way, or one abandoned by a restart with the same nonce) does not
    /// count: it is being let go, and [`Self::pick_slot`] would re-take it.
    async fn slot_held_below(&self, base: &LeaseName, m: u32) -> Result<Option<Busy>> {
        for i in 0..m {
            let name = part_name(base, SlotPart::Slot(i))?;
            let state = self.store().inspect(&name).await?;
            let ours_let_go = !self.held.lock().contains_key(name.as_str())
                && state.holders.iter().all(|h| h.holder.nonce == self.holder().nonce);
            if !state.holders.is_empty() && !ours_let_go {
                return Ok(Some(Busy::of(state)));
            }
        }
        Ok(None)
    }

    /// Holding the gate: takes the first free slot of `n`, waiting for one
    /// until `deadline` (not at all for a try).
    async fn pick_slot(
        &self,
        base: &LeaseName,
        n: u32,
        opts: &LeaseOptions,
        started: crate::clock::Mono,
        deadline: Option<crate::clock::Mono>,
        on_wait: &mut (impl FnMut(&Busy) + Send),
    ) -> Result<Lease> {
        let clock = self.clock().clone();
        let trying = opts.timeout == Some(Duration::ZERO);
        let mut backoff = opts.backoff_initial;
        loop {
            let mut busy = Vec::new();
            let mut failed = None;
            for i in 0..n {
                let name = part_name(base, SlotPart::Slot(i))?;
                let asked = clock.mono();
                let attempt = match self.store().try_acquire(&self.request(&name, opts)).await {
                    Ok(Attempt::Granted(g)) => match self.vouch(vec![g], opts, asked).await {
                        Ok(mut grants) => match grants.pop() {
                            Some(g) => Ok(Attempt::Granted(g)),
                            None => Err(Error::store(self.store().url(), "acquiring", "the store granted nothing")),
                        },
                        Err(e) => Err(e),
                    },
                    other => other,
                };
                match attempt {
                    Ok(Attempt::Granted(g)) => {
                        let waited = clock.mono().saturating_since(started);
                        return Ok(Lease::start(self.store().clone(), g, opts, self.held.clone(), waited));
                    }
                    Ok(Attempt::Busy(b)) => busy.push(b),
                    // A store error on one slot is waited out like a held slot.
                    Err(e) if e.is_transient() && !trying => {
                        busy.push(failed_look(&name, &e));
                        failed = Some(e);
                    }
                    Err(e) => return Err(e),
                }
            }
            let all = Busy {
                name: base.clone(),
                holders: busy.iter().flat_map(|b| b.holders.iter().cloned()).collect(),
                corrupt: busy.iter().find_map(|b| b.corrupt.clone()),
                version: None,
                failure: None,
            };
            let holder = format!("holders of all {n} slots: {}", all.describe());
            if trying {
                return Err(self.gave_up_on(base, holder, opts, clock.mono().saturating_since(started)));
            }
            on_wait(&all);
            let now = clock.mono();
            if deadline.is_some_and(|d| now >= d) {
                return Err(
                    failed.unwrap_or_else(|| self.gave_up_on(base, holder, opts, now.saturating_since(started)))
                );
            }
            let sleep = self.next_sleep(&all, backoff, deadline, now);
            // Watch the slots soonest free; the others are polled.
            busy.sort_by_key(|b| b.holders.iter().map(|h| h.expires_in_ms).min().unwrap_or(0));
            let store = self.store().clone();
            let watches = busy.iter().take(WATCHED).map(|b| Box::pin(store.wait_for_change(b, sleep)));
            futures::future::select_all(watches).await;
            backoff = (backoff * 2).min(opts.backoff_max);
        }
    }
}

/// Why a gate holder took no slot.
enum Refused {
    /// The count in force differs, and this slot below it is held.
    Count(u32, Busy),
    Error(Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> LeaseName {
        LeaseName::new(s).expect("name")
    }

    #[test]
    fn slot_names_are_derived_and_parsed_back() {
        let base = name("jobs/build");
        assert_eq!(part_name(&base, SlotPart::Slot(3)).expect("slot").as_str(), "jobs/build/+slots/3");
        assert_eq!(part_name(&base, SlotPart::Gate).expect("gate").as_str(), "jobs/build/+slots/gate");
        assert_eq!(parse(&name("jobs/build/+slots/3")), Some(("jobs/build", SlotPart::Slot(3))));
        assert_eq!(parse(&name("jobs/build/+slots/gate")), Some(("jobs/build", SlotPart::Gate)));
        for ordinary in ["jobs/build", "jobs/+slots/03", "jobs/+slots/x", "+slots/1", "jobs/+slots/1024", "a/+slots"] {
            assert_eq!(parse(&name(ordinary)), None, "{ordinary}");
        }
    }

    #[test]
    fn slots_have_no_slots_and_names_too_long_are_refused() {
        let err = part_name(&name("a/+slots/1"), SlotPart::Gate).expect_err("nested");
        assert!(err.to_string().contains("slots have no slots"), "{err}");
        let long = name(&vec!["a".repeat(62); 4].join("/"));
        let err = part_name(&long, SlotPart::Slot(0)).expect_err("too long");
        assert!(err.to_string().contains("too long to have slots"), "{err}");
        let deep = name(&vec!["a"; 15].join("/"));
        assert!(part_name(&deep, SlotPart::Slot(0)).is_err());
    }

    #[test]
    fn counts_are_range_checked() {
        assert!(check_count(0).is_err());
        assert!(check_count(MAX_SLOTS + 1).is_err());
        assert!(check_count(1).is_ok() && check_count(MAX_SLOTS).is_ok());
        assert_eq!(count_of(Some("slots=4")), Some(4));
        for bad in [None, Some("slots=0"), Some("slots=-1"), Some("slots=99999"), Some("x=4"), Some("slots=4 ")] {
            assert_eq!(count_of(bad), None, "{bad:?}");
        }
    }
}
