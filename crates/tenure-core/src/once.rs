//! At most once per period across a fleet: of all the machines whose cron
//! fires in one period, one runs the job; the others learn that it ran.
//!
//! `tenure lock --once-per` is built on this module; [`Client::acquire_once`]
//! is the same for a Rust program.
//!
//! # The period
//!
//! Periods are aligned to the Unix epoch: period `k` of a length `P` is
//! `[k·P, (k+1)·P)` in wall milliseconds. A holder's period is the one its
//! **stamp** falls in: the wall clock of the machine when it starts asking for
//! the lease (the store's [`Clock`](crate::Clock), the system's for
//! `tenure lock`) — for cron, the moment cron fired it, read from the clock
//! cron reads. Not the grant's time: a machine that waited in line for the
//! lease while a long job ran is judged by the period in which it was started,
//! and on the lease server the grant's time is the server's clock, which a
//! cron line at a period boundary may see on the other side of it.
//!
//! # The mark
//!
//! A run that counts leaves a [`Mark`] in the lease record: the lease's
//! metadata ([`crate::Predecessor::meta`]), written by the conditional release
//! that ends its grant, so only a holder whose grant was still in the record
//! writes it. A mark holds the runner's stamp (`ran_ms`); a holder whose stamp
//! falls in the same period as the mark's, or an earlier one, does not run. So
//! marks only grow, and:
//!
//! - **At most one counted run per period** (by the runners' stamps): a second
//!   runner in a period would have seen the first's mark.
//! - **Every machine that asks in a period either runs or sees a counted run of
//!   that period or a later one**, when it gets the lease.
//! - A run counts only if the command ended by itself with success (or any exit
//!   status, under `--count-failures` / [`OnceLease::ran`] regardless) and its
//!   grant was still in the record at the release. A run that crashed, was
//!   killed, lost its lease or was broken does not count: its grant ends without
//!   the mark (released as failed, dropped, expired or broken, its entry keeps
//!   the mark it inherited), and the next machine in the period runs.
//!
//! Clocks: two machines firing at the same moment near a boundary, with clocks
//! apart, may stamp different periods; one then runs for each (the earlier
//! period's run first) or the later one's run covers the earlier one. With
//! cron lines that fire at least the clock skew after a boundary (`5 * * * *`
//! for `--once-per 1h`), every machine of one firing stamps the same period.
//!
//! # Why the metadata, not the watermark
//!
//! The record's watermark only grows, and a grant that did not end gracefully
//! raises it to its deadline: a run that crashed would have pushed the
//! watermark into the current period and looked done. Metadata is the
//! holder's own word, and a holder that brings none carries its predecessor's
//! forward ([`crate::record::grant`]), however its grant ends: released,
//! dropped, expired, broken (a machine that only looks at the mark never
//! erases it, even when it dies before it releases).
//!
//! What loses a mark, so that the job runs once more in that period: a holder
//! that leaves metadata of its own on the same lease name (the lease belongs to
//! the job); a record replaced after it went corrupt, or deleted by hand; on
//! the lease server, a restart or a record retired past `--retain`; on etcd, a
//! record that etcd deleted after its holder died without a release and before
//! anyone took it over (`tenure_etcd`'s crate docs: records with an etcd
//! lease). And a run that succeeded but whose release never reached the store
//! (the store unreachable, the lease lost during `--hold-at-least`) is not
//! counted: jobs should survive a rare second run.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keepalive::Lease;
use crate::limits::{MAX_DURATION, MAX_TIME_MS, millis};
use crate::options::LeaseOptions;
use crate::store::ReleaseRequest;
use crate::types::{Grant, Mode, Predecessor, Released};

/// Shortest period: one second.
pub const MIN_PERIOD: Duration = Duration::from_secs(1);
/// Longest description of the runner kept in a mark, in bytes.
const MAX_BY: usize = 256;
/// The mark's format version.
const MARK_VERSION: u32 = 1;

/// A period length: runs are counted at most once per period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OncePer {
    every_ms: u64,
}

impl OncePer {
    /// Periods of `every` (at least [`MIN_PERIOD`], at most 10 years).
    ///
    /// # Errors
    /// `InvalidOptions` for a period out of that range.
    pub fn new(every: Duration) -> Result<Self> {
        crate::limits::check_duration("a once-per period", every, MAX_DURATION)?;
        if every < MIN_PERIOD {
            return Err(Error::InvalidOptions {
                reason: format!("a once-per period of {every:?} is shorter than {MIN_PERIOD:?}"),
            });
        }
        Ok(Self { every_ms: millis(every) })
    }

    /// The period length.
    pub fn every(&self) -> Duration {
        Duration::from_millis(self.every_ms)
    }

    /// The index of the period `at_ms` (wall ms) falls in.
    pub fn period_of(&self, at_ms: u64) -> u64 {
        at_ms / self.every_ms
    }

    /// When the period `at_ms` falls in starts (wall ms).
    pub fn period_start_ms(&self, at_ms: u64) -> u64 {
        self.period_of(at_ms).saturating_mul(self.every_ms)
    }

    /// Whether a holder stamped `stamp_ms` is due to run, from what its grant's
    /// predecessor left.
    pub fn check(&self, predecessor: Option<&Predecessor>, stamp_ms: u64) -> Due {
        let Some(meta) = predecessor.and_then(|p| p.meta.as_deref()) else {
            return Due::Run { last: None, unreadable: None };
        };
        match Mark::parse(meta) {
            Ok(mark) if self.period_of(mark.ran_ms) >= self.period_of(stamp_ms) => Due::AlreadyRan(mark),
            Ok(mark) => Due::Run { last: Some(mark), unreadable: None },
            Err(why) => Due::Run { last: None, unreadable: Some(why) },
        }
    }

    /// The release of `grant` that counts its run (stamped `stamp_ms`).
    pub fn ran(&self, grant: &Grant, stamp_ms: u64) -> ReleaseRequest {
        let mark = Mark {
            ran_ms: stamp_ms.min(MAX_TIME_MS),
            every_ms: self.every_ms,
            token: grant.token,
            by: Some(truncate(&grant.holder.to_string(), MAX_BY)),
        };
        ReleaseRequest { meta: Some(mark.to_meta()), ..ReleaseRequest::default() }
    }

    /// The release of `grant` that counts nothing: it leaves what the record
    /// held before it (its predecessor's metadata, carried forward).
    pub fn keep(grant: &Grant) -> ReleaseRequest {
        ReleaseRequest { meta: grant.predecessor.as_ref().and_then(|p| p.meta.clone()), ..ReleaseRequest::default() }
    }

    /// Refuses options a once-per lease cannot use: a shared lease (several
    /// would run), or metadata of the caller's own (it would erase the mark).
    pub fn check_options(&self, opts: &LeaseOptions) -> Result<()> {
        if opts.mode == Mode::Shared {
            return Err(Error::InvalidOptions { reason: "a once-per lease must be exclusive, not shared".into() });
        }
        if opts.meta.is_some() {
            return Err(Error::InvalidOptions {
                reason: "a once-per lease keeps its mark in the lease's metadata: give it none of your own".into(),
            });
        }
        Ok(())
    }
}

/// What the record says of a holder's period.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Due {
    /// No counted run in this period (or a later one) yet: run.
    Run {
        /// The last counted run, in an earlier period.
        last: Option<Mark>,
        /// The lease's metadata is not a mark (someone else's, or damaged): why.
        unreadable: Option<String>,
    },
    /// A run in this period (or a later one) already counted.
    AlreadyRan(Mark),
}

/// The last counted run, as kept in the lease's metadata (JSON:
/// `{"tenure_once":1,"ran_ms":…,"every_ms":…,"token":…,"by":"…"}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// The runner's stamp (wall ms): the run counts for the period it falls in.
    pub ran_ms: u64,
    /// The period length the runner used (for humans).
    pub every_ms: u64,
    /// The runner's fencing token.
    pub token: u64,
    /// The runner, for humans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct MarkJson {
    tenure_once: u32,
    #[serde(flatten)]
    mark: Mark,
}

impl Mark {
    /// Reads a mark from a lease's metadata, range-checked.
    ///
    /// # Errors
    /// What is wrong, for metadata that is not a mark this tenure writes.
    pub fn parse(meta: &str) -> std::result::Result<Self, String> {
        let json: MarkJson = serde_json::from_str(meta).map_err(|e| format!("not a once-per mark ({e})"))?;
        let mark = json.mark;
        if json.tenure_once != MARK_VERSION {
            return Err(format!("a once-per mark of version {}, not {MARK_VERSION}", json.tenure_once));
        }
        if mark.ran_ms > MAX_TIME_MS || mark.every_ms == 0 || mark.every_ms > millis(MAX_DURATION) {
            return Err("a once-per mark with a time or period out of range".into());
        }
        if mark.by.as_ref().is_some_and(|b| b.len() > MAX_BY) {
            return Err(format!("a once-per mark whose runner is longer than {MAX_BY} bytes"));
        }
        Ok(mark)
    }

    /// The mark as lease metadata.
    pub fn to_meta(&self) -> String {
        // Plain data with string keys: serialising cannot fail.
        serde_json::to_string(&MarkJson { tenure_once: MARK_VERSION, mark: self.clone() }).unwrap_or_default()
    }

    /// One line for humans: when, by whom, with which token.
    pub fn describe(&self) -> String {
        let at = crate::report::rfc3339_ms(self.ran_ms).unwrap_or_else(|| format!("{} ms", self.ran_ms));
        // Anyone with access to the store may have written it: no escape codes.
        match self.by.as_deref().map(|b| b.chars().filter(|c| !c.is_control()).collect::<String>()) {
            Some(by) => format!("started {at} by {by}, token {}", self.token),
            None => format!("started {at}, token {}", self.token),
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// The outcome of [`Client::acquire_once`].
#[derive(Debug)]
pub enum Once {
    /// This period's run is yours: run it, then [`OnceLease::ran`] (it counts)
    /// or [`OnceLease::failed`] (it does not; the next holder runs).
    Run(OnceLease),
    /// A run already counted for this period (or a later one): the lease was
    /// released, keeping the mark.
    AlreadyRan(Mark),
}

/// The lease of a run that is due. Dropping it counts nothing (the lease is
/// released as dropped, keeping the previous mark).
#[derive(Debug)]
#[must_use = "release it with `ran` or `failed`; dropping it counts nothing"]
pub struct OnceLease {
    lease: Lease,
    once: OncePer,
    stamp_ms: u64,
    last: Option<Mark>,
}

impl OnceLease {
    /// The lease: its token fences the job's writes, its health says whether
    /// it still holds.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// When the period this run is for starts (wall ms).
    pub fn period_start_ms(&self) -> u64 {
        self.once.period_start_ms(self.stamp_ms)
    }

    /// The last counted run, in an earlier period.
    pub fn last(&self) -> Option<&Mark> {
        self.last.as_ref()
    }

    /// Releases the lease, counting this run for its period: `NotHeld` (the
    /// grant had ended: lost, broken) counts nothing.
    pub async fn ran(self) -> Result<Released> {
        let req = self.once.ran(&self.lease.grant(), self.stamp_ms);
        self.lease.release_with(req).await
    }

    /// Releases the lease, counting nothing: the next holder in this period runs.
    pub async fn failed(self) -> Result<Released> {
        let req = OncePer::keep(&self.lease.grant());
        self.lease.release_with(req).await
    }
}

impl Client {
    /// Acquires `name` (waiting as [`Client::acquire`] does) for a run at most
    /// once per period of `once`, this holder stamped by the store's clock now:
    /// see the [module docs](crate::once).
    ///
    /// # Errors
    /// As [`Client::acquire`]; `InvalidOptions` for shared `opts` or `opts` with
    /// metadata ([`OncePer::check_options`]).
    pub async fn acquire_once(&self, name: &str, once: &OncePer, opts: &LeaseOptions) -> Result<Once> {
        let stamp_ms = self.store().clock().wall_ms();
        self.acquire_once_at(name, once, stamp_ms, opts).await
    }

    /// [`Client::acquire_once`] for a holder stamped `stamp_ms` (wall ms), e.g.
    /// when the job was scheduled rather than when it asks.
    ///
    /// # Errors
    /// As [`Client::acquire_once`].
    pub async fn acquire_once_at(
        &self,
        name: &str,
        once: &OncePer,
        stamp_ms: u64,
        opts: &LeaseOptions,
    ) -> Result<Once> {
        once.check_options(opts)?;
        let lease = self.acquire(name, opts).await?;
        let grant = lease.grant();
        match once.check(grant.predecessor.as_ref(), stamp_ms) {
            Due::AlreadyRan(mark) => {
                // Not releasing in time only leaves the lease to expire: the
                // grant inherited the mark, and keeps it however it ends.
                if let Err(e) = lease.release_with(OncePer::keep(&grant)).await {
                    tracing::info!(error = %e, "releasing a once-per lease whose period already ran failed");
                }
                Ok(Once::AlreadyRan(mark))
            }
            Due::Run { last, unreadable } => {
                if let Some(why) = unreadable {
                    tracing::warn!(lease = name, %why, "the lease's metadata is not a once-per mark; running");
                }
                Ok(Once::Run(OnceLease { lease, once: *once, stamp_ms, last }))
            }
        }
    }
}

#[cfg(test)]
mod tests;
