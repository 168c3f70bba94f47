//! The command under the lease: supervising it until it ends or the lease is at
//! risk, the signals forwarded to it, and the outcome reported in one line.

use std::future::poll_fn;
use std::task::Poll;
use std::time::Duration;

use anyhow::{Context, Result};
use tenure::{Clock, Health, Lease, LossReason, Mono};
use tenure_core::human_duration;
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::supervise::{Event, Leader, Spec, Status, Supervisor, boot_now_ns};

use super::say;

/// Why the command was stopped, for the one-line report.
#[derive(Debug)]
pub(super) enum Cause {
    Lost(LossReason),
    AtRisk { failures: u32, error: String },
    Unresponsive,
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cause::Lost(reason) => write!(f, "was lost ({reason})"),
            Cause::AtRisk { failures, error } => write!(
                f,
                "was at risk ({failures} renewal(s) failed, last: {error}) with too little time left to stop gracefully"
            ),
            Cause::Unresponsive => f.write_str("could not be renewed in time"),
        }
    }
}

#[derive(Debug)]
pub(super) enum Outcome {
    Exited {
        status: Status,
        cause: Option<Cause>,
    },
    Failed {
        code: u8,
        message: String,
    },
    /// The guard could not be started, or died: the command's group was
    /// killed. `ran`: whether the command had started.
    GuardLost {
        message: String,
        ran: bool,
    },
    /// The guard fell silent; `tenure` stopped the command itself.
    Silent {
        leader: Leader,
        silence: Duration,
    },
}

/// How a command ended, in words.
pub(super) fn describe(status: Status) -> String {
    match status {
        Status::Code(c) => format!("exited with status {c}"),
        Status::Signal(s) => format!("ended by signal {s}"),
    }
}

/// Relays health to the guard and signals to the command until the command is
/// gone, taking over from the guard if it falls silent.
pub(super) async fn supervise(
    lease: &Lease,
    sup: &mut Supervisor,
    signals: &mut Signals,
    clock: &dyn Clock,
    spec: &Spec<'_>,
    first_deadline_ns: u64,
) -> Outcome {
    let mut health = lease.health_watch();
    let mut watching = true;
    let mut cause: Option<Cause> = None;
    let mut at_risk: Option<(u32, String)> = None;
    // The deadline the guard was last given (CLOCK_BOOTTIME ns).
    let mut deadline = first_deadline_ns;
    let mut asked_to_stop = 0u32;
    let mut started = false;
    loop {
        tokio::select! {
            // Health first: a loss seen together with the command's exit is reported.
            biased;
            changed = health.changed(), if watching => {
                let now = if changed.is_ok() {
                    health.borrow_and_update().clone()
                } else {
                    Health::Lost(LossReason::Outage { error: "the keep-alive task ended".into() })
                };
                match now {
                    Health::Held { stop_by } => {
                        at_risk = None;
                        deadline = to_boot_ns(clock, stop_by);
                        sup.set_deadline(deadline);
                    }
                    Health::AtRisk { stop_by, failures, error } => {
                        at_risk = Some((failures, error));
                        deadline = to_boot_ns(clock, stop_by);
                        sup.set_deadline(deadline);
                    }
                    Health::Lost(reason) => {
                        watching = false;
                        sup.stop();
                        cause.get_or_insert(Cause::Lost(reason));
                    }
                }
            }
            sig = signals.recv() => {
                if sig == libc::SIGINT || sig == libc::SIGTERM {
                    asked_to_stop += 1;
                }
                if asked_to_stop == 2 {
                    say(&format!(
                        "asked twice: stopping the command (SIGTERM, SIGKILL after {})",
                        human_duration(spec.grace)
                    ));
                    sup.stop_for_signal();
                } else {
                    sup.forward(sig);
                }
            }
            event = sup.next() => match event {
                Event::Started(pid) => {
                    started = true;
                    tracing::debug!(pid, "the command started");
                }
                Event::Stopping(why) if why == "deadline" => {
                    cause.get_or_insert(match at_risk.take() {
                        Some((failures, error)) => Cause::AtRisk { failures, error },
                        None => Cause::Unresponsive,
                    });
                }
                Event::Stopping(why) if why == "leftovers" => {
                    say("the command exited but left processes running; stopping them before releasing the lease");
                }
                Event::Stopping(_) => {}
                Event::Failed { code, message } => return Outcome::Failed { code, message },
                Event::Exited(status) => return Outcome::Exited { status, cause },
                Event::GuardLost(message) => return Outcome::GuardLost { message, ran: started },
                Event::Silent(silence) => {
                    let kill_at = boot_now_ns().saturating_add(nanos(spec.grace)).min(deadline);
                    let leader = sup.take_over(kill_at).await;
                    return Outcome::Silent { leader, silence };
                }
            },
        }
    }
}

/// The moment to stop acting by, while the lease is held.
pub(super) fn stop_by(health: &Health) -> Option<Mono> {
    match health {
        Health::Held { stop_by } | Health::AtRisk { stop_by, .. } => Some(*stop_by),
        Health::Lost(_) => None,
    }
}

/// `at` on the store's monotonic clock (which counts suspended time too), as
/// `CLOCK_BOOTTIME` nanoseconds for the guard: the same distance from now on both.
pub(super) fn to_boot_ns(clock: &dyn Clock, at: Mono) -> u64 {
    let (now, base) = (clock.mono(), boot_now_ns());
    if at >= now {
        base.saturating_add(nanos(at.saturating_since(now)))
    } else {
        base.saturating_sub(nanos(now.saturating_since(at)))
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Signals forwarded to the command.
pub(super) const FORWARDED: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// The signals `tenure lock` forwards, as one stream.
pub(super) struct Signals {
    streams: Vec<(i32, Signal)>,
}

impl Signals {
    pub(super) fn install(keep_ignored: &[i32]) -> Result<Self> {
        let mut streams = Vec::new();
        for sig in FORWARDED.into_iter().filter(|s| !keep_ignored.contains(s)) {
            streams.push((sig, signal(SignalKind::from_raw(sig)).context("installing a signal handler")?));
        }
        Ok(Self { streams })
    }

    /// The next signal received. Cancel-safe.
    pub(super) async fn recv(&mut self) -> i32 {
        poll_fn(|cx| {
            for (sig, stream) in &mut self.streams {
                if let Poll::Ready(Some(())) = stream.poll_recv(cx) {
                    return Poll::Ready(*sig);
                }
            }
            Poll::Pending
        })
        .await
    }
}
