//! `tenure lock --once-per` and `--hold-at-least`: the command at most once per
//! period across every machine that uses the lease (the logic is
//! [`tenure::once`]'s), and a lease kept a while after the command ended.
//!
//! - **Stamp.** A run's period is the one the wall clock of this machine is in
//!   when `tenure` starts (for cron: when cron fired it), not when the lease
//!   comes: a machine that waited while another ran the job is judged by the
//!   period it was started in. The command sees the period's start as
//!   `TENURE_PERIOD_START` (unix ms).
//! - **Already ran.** Once the lease is held, its record says whether a run
//!   of this period (or a later one) already counted. If so, the lease is
//!   released at once (the mark kept) and `tenure` exits 0, saying so in one
//!   line on stderr; the command does not run. No `--hold-at-least` then.
//! - **Counted.** The release that ends the run writes the mark if the command
//!   ended by itself with status 0 (any exit status with `--count-failures`;
//!   never a death by signal, a command that could not start, or a run stopped
//!   because the lease was lost). A run not counted says so on stderr; the next
//!   machine in the period runs the command.
//! - **Hold.** With `--hold-at-least D`, a command that ended by itself leaves
//!   the lease held (the keep-alive renewing it) until `D` after it was taken.
//!   A signal to `tenure` during the hold ends it at once: the lease is released
//!   (the mark written if the run counts) and `tenure` exits with the command's
//!   status. A lease lost during the hold ends it too, and the run does not
//!   count; nor does it if `tenure` is killed during the hold (the guard has
//!   ended with the command: the lease expires after its TTL, unmarked).

use std::time::{Duration, SystemTime};

use anyhow::Result;
use tenure::once::Due;
use tenure::{Grant, Lease, LeaseName, OncePer, ReleaseRequest};
use tenure_core::human_duration;

use crate::exit::Fail;
use crate::supervise::{Leader, Status};

use super::hold::{Outcome, Signals, describe};
use super::{LockArgs, say};

/// `--once-per` as asked, with this run's stamp.
pub(super) struct Plan {
    per: OncePer,
    stamp_ms: u64,
    count_failures: bool,
}

impl Plan {
    /// The plan of `args`, stamped now; `None` without `--once-per`.
    pub(super) fn new(args: &LockArgs) -> Result<Option<Self>> {
        let Some(every) = args.once_per else { return Ok(None) };
        let per = OncePer::new(every).map_err(|e| Fail::usage(format!("--once-per: {e}")))?;
        let stamp_ms = tenure::clock::unix_ms(SystemTime::now());
        Ok(Some(Self { per, stamp_ms, count_failures: args.count_failures }))
    }

    /// `TENURE_PERIOD_START` for the command.
    pub(super) fn env(&self) -> (&'static str, String) {
        ("TENURE_PERIOD_START", self.per.period_start_ms(self.stamp_ms).to_string())
    }

    /// Whether `grant`'s record says this period already ran; says so if it
    /// did, and if the lease's metadata is not a mark.
    pub(super) fn already_ran(&self, grant: &Grant, what: &str) -> bool {
        let period = tenure::report::rfc3339_ms(self.per.period_start_ms(self.stamp_ms)).unwrap_or_default();
        match self.per.check(grant.predecessor.as_ref(), self.stamp_ms) {
            Due::AlreadyRan(mark) => {
                say(&format!(
                    "{what}: already ran for the period from {period} (every {}): {}; not running the command",
                    human_duration(self.per.every()),
                    mark.describe()
                ));
                true
            }
            Due::Run { unreadable: Some(why), .. } => {
                say(&format!("{what}: the lease's metadata is {why}; running the command, whose run replaces it"));
                false
            }
            Due::Run { .. } => false,
        }
    }

    /// The release that ends the run: with the mark if it counts.
    fn release(&self, outcome: &Outcome, grant: &Grant, what: &str) -> ReleaseRequest {
        let status = match outcome {
            Outcome::Exited { status, cause: None } => Some(*status),
            Outcome::Silent { leader: Leader::Ended(status), .. } => Some(*status),
            _ => None,
        };
        match status {
            Some(Status::Code(0)) => self.per.ran(grant, self.stamp_ms),
            Some(Status::Code(_)) if self.count_failures => self.per.ran(grant, self.stamp_ms),
            Some(status) => {
                say(&format!(
                    "{what}: the command {}: this period's run does not count, the next machine runs it \
                     (--count-failures counts any exit status)",
                    describe(status)
                ));
                OncePer::keep(grant)
            }
            None => OncePer::keep(grant),
        }
    }
}

/// The release that ends `grant` after `outcome`.
pub(super) fn release_request(plan: Option<&Plan>, outcome: &Outcome, grant: &Grant, what: &str) -> ReleaseRequest {
    plan.map_or_else(ReleaseRequest::default, |p| p.release(outcome, grant, what))
}

/// Releases a lease taken only to learn that its period already ran, within
/// `limit`: a lease not released in time expires, keeping the mark.
pub(super) async fn let_go(lease: Lease, grant: &Grant, limit: Duration) {
    match tokio::time::timeout(limit, lease.release_with(OncePer::keep(grant))).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::info!(error = %e, "releasing the lease failed; it expires by itself"),
        Err(_) => tracing::info!("releasing the lease took too long; it expires by itself"),
    }
}

/// Keeps `lease` until `at_least` after `since` (`--hold-at-least`), unless
/// it is lost or a signal comes first.
pub(super) async fn hold(
    lease: &Lease,
    signals: &mut Signals,
    since: tokio::time::Instant,
    at_least: Duration,
    name: &LeaseName,
) {
    let left = at_least.saturating_sub(since.elapsed());
    if left.is_zero() {
        return;
    }
    say(&format!(
        "the command ended; holding lease {:?} {} more (--hold-at-least {})",
        name.as_str(),
        human_duration(left),
        human_duration(at_least)
    ));
    tokio::select! {
        () = tokio::time::sleep(left) => {}
        reason = lease.lost() => say(&format!("lease {:?} was lost during --hold-at-least: {reason}", name.as_str())),
        sig = signals.recv() => {
            say(&format!("signal {sig}: ending --hold-at-least early, releasing lease {:?}", name.as_str()));
        }
    }
}
