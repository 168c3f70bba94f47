//! `tenure lock`: run a command while holding a lease — `flock(1)` for a fleet.
//!
//! 1. **Wait.** The lease is acquired with the client's jittered backoff (at most
//!    `--poll` between polls). On a terminal a live line says who holds it and when
//!    it could be taken over ([`crate::waiting`]). `--no-wait` and `--timeout` give
//!    up with exit 75, naming the store, the lease and its holder. A signal before
//!    the command starts (while the store is opened or the lease awaited) ends
//!    `tenure` with 128 + the signal, holding nothing.
//! 2. **Run.** The command runs under a guard process ([`crate::supervise`]) in a
//!    process group of its own, with `TENURE_LEASE`, `TENURE_TOKEN` (the fencing
//!    token), `TENURE_DEADLINE` (the grant's deadline at start, unix ms; renewals
//!    extend it) and `TENURE_STORE` in its environment. The lease's keep-alive
//!    renews it every TTL/8.
//! 3. **Signals.** SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to `tenure` are
//!    forwarded to the command's group; `tenure` keeps the lease until the command
//!    and its group are gone, then releases it and exits with the command's status
//!    (128 + n if a signal killed it). A signal that `tenure` was started with
//!    ignored (`nohup`) is not forwarded and stays ignored in the command. If stdin
//!    is the terminal and `tenure` is in its foreground, the command's group gets
//!    the terminal's foreground, so interactive commands work and ^C reaches them
//!    directly; the terminal is handed back afterwards.
//! 4. **Loss.** The command is stopped — SIGTERM to its group, then SIGKILL after
//!    the grace `g` — and `tenure` exits 76 (after releasing what is left) when:
//!    - the lease's health becomes `Lost` (the record was broken or taken over,
//!      renewals failed `max_failures` times in a row, or its local deadline passed):
//!      stopping starts at once;
//!    - the lease is `AtRisk` (renewals failing) and its `stop_by` — the local
//!      deadline minus the safety margin, not moved by any renewal since — is less
//!      than `g` away: stopping starts at `stop_by − g`, the last moment that still
//!      leaves the command its whole grace. A renewal that succeeds before then
//!      pushes `stop_by` back and cancels it;
//!    - `tenure` itself is frozen or dead (the guard stops seeing deadlines, or its
//!      pipe closes): the guard applies the same rule by itself.
//!
//!    SIGKILL lands at `min(start + g, stop_by)`, so the whole group is dead before
//!    `stop_by`, hence before any contender may take the lease over (deadline +
//!    clock-skew margin). `g` is `--kill-grace` capped at half the time a grant
//!    lasts (`(ttl − safety margin) / 2`): a larger grace could not fit before the
//!    deadline, and the cap keeps one slow renewal from stopping the command.
//!
//! Exit codes: the command's own status; 64 usage (bad name, duration, missing
//! command), 69 store unreachable or failing, 70 internal, 75 busy or timed out,
//! 76 lease lost while the command ran (it was stopped), 126/127 the command
//! cannot be executed / was not found (checked before waiting, like a shell).

use std::ffi::{OsStr, OsString};
use std::future::poll_fn;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use tenure::{
    Client, Clock, Health, Holder, Lease, LeaseName, LeaseOptions, LeaseStore, LossReason, Mode, Mono, Released,
};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::args::duration;
use crate::exit::{self, Fail};
use crate::stores::StoreArgs;
use crate::supervise::{Event, Spec, Status, Supervisor, is_ignored, mono_now_ns};
use crate::waiting::WaitLine;

/// `tenure lock`.
#[derive(Debug, Args)]
pub(crate) struct LockArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// The lease name, e.g. `deploy/prod`.
    pub(crate) name: String,
    /// Lease duration: how long the lease outlives a `tenure` that died.
    #[arg(long, value_parser = duration, default_value = "30s", value_name = "DURATION")]
    pub(crate) ttl: Duration,
    /// Give up waiting after this long (exit 75); by default, wait as long as it takes.
    #[arg(long, value_parser = duration, conflicts_with = "no_wait", value_name = "DURATION")]
    pub(crate) timeout: Option<Duration>,
    /// Do not wait: exit 75 at once if the lease is held.
    #[arg(long)]
    pub(crate) no_wait: bool,
    /// Longest wait between two polls of a busy lease (more polls, quicker hand-over).
    #[arg(long, value_parser = duration, default_value = "1s", value_name = "DURATION")]
    pub(crate) poll: Duration,
    /// Take a shared lease (many shared holders at once, no exclusive one).
    #[arg(long)]
    pub(crate) shared: bool,
    /// A label stored with the grant, shown to others (e.g. a CI job URL).
    #[arg(long)]
    pub(crate) label: Option<String>,
    /// A stable holder id: a restarted run with the same id re-takes its own
    /// abandoned lease at once instead of waiting for it to expire.
    #[arg(long, value_name = "ID")]
    pub(crate) holder_id: Option<String>,
    /// Time between SIGTERM and SIGKILL when the command must stop (capped at half
    /// the TTL minus its safety margin, so that SIGKILL lands before the deadline).
    #[arg(long, value_parser = duration, default_value = "5s", value_name = "DURATION")]
    pub(crate) kill_grace: Duration,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

/// Signals forwarded to the command.
const FORWARDED: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

pub(crate) async fn run(args: LockArgs) -> Result<ExitCode> {
    let name = LeaseName::new(&args.name)?;
    let Some(program) = args.command.first() else {
        anyhow::bail!("no command given: tenure lock <store> <name> -- <command> [args…]");
    };
    if let Err((code, why)) = check_program(program) {
        say(&format!(
            "cannot run {:?}: {why} (lease {name:?} in {} was not taken)",
            program.to_string_lossy(),
            args.store.url
        ));
        return Ok(exit::code(code));
    }
    if args.poll.is_zero() {
        anyhow::bail!(Fail::usage("--poll must be longer than zero"));
    }
    let mode = if args.shared { Mode::Shared } else { Mode::Exclusive };
    let mut opts = LeaseOptions::default().with_mode(mode).with_ttl(args.ttl).with_backoff_max(args.poll);
    // A poll shorter than the first backoff step polls at that pace from the start.
    opts.backoff_initial = opts.backoff_initial.min(args.poll);
    opts.timeout = if args.no_wait { Some(Duration::ZERO) } else { args.timeout };
    opts.validate()?;
    let grace = args.kill_grace.min(args.ttl.saturating_sub(opts.safety()) / 2);

    // Before any handler is installed: what was ignored stays ignored (nohup).
    let keep_ignored: Vec<i32> = FORWARDED.into_iter().filter(|&s| is_ignored(s)).collect();
    let mut signals = Signals::install(&keep_ignored)?;
    let foreground = owns_terminal();
    if foreground {
        // While the command owns the terminal, tenure is a background process: its
        // own messages must not stop it with SIGTTOU (`stty tostop`).
        crate::supervise::set_disposition(libc::SIGTTOU, true);
    }

    // A signal while the store is opened or the lease awaited ends tenure holding
    // nothing (a grant whose request was in flight expires after its TTL).
    let (store, lease) = tokio::select! {
        taken = take(&args, &name, &opts) => taken?,
        sig = signals.recv() => return Ok(exit::code(Status::Signal(sig).exit_code())),
    };
    let grant = lease.grant();
    tracing::info!(token = grant.token, "acquired lease {name} in {}", store.url());

    let clock = store.clock().clone();
    let spec = Spec {
        command: &args.command,
        env: vec![
            ("TENURE_LEASE", grant.name.to_string()),
            ("TENURE_TOKEN", grant.token.to_string()),
            ("TENURE_DEADLINE", grant.deadline_ms.to_string()),
            ("TENURE_STORE", args.store.url.clone()),
        ],
        grace,
        deadline_ns: to_mono_ns(&*clock, stop_by(&lease.health()).unwrap_or_else(|| clock.mono())),
        foreground,
        keep_ignored,
    };
    let outcome = match Supervisor::spawn(&spec) {
        Ok(mut sup) => {
            let outcome = supervise(&lease, &mut sup, &mut signals, &*clock).await;
            sup.finish().await;
            outcome
        }
        Err(e) => Outcome::Internal(format!("{e:#}")),
    };

    let released = lease.release().await;
    let what = format!("{}: lease {:?} (token {})", store.url(), name.as_str(), grant.token);
    let code = match outcome {
        Outcome::Exited { status, cause: None } => status.exit_code(),
        Outcome::Exited { status, cause: Some(cause) } => {
            let how = match status {
                Status::Signal(libc::SIGTERM) => "the command was stopped with SIGTERM".to_string(),
                Status::Signal(libc::SIGKILL) => "the command was killed (SIGKILL)".to_string(),
                Status::Signal(s) => format!("the command ended by signal {s}"),
                Status::Code(c) => format!("the command exited with status {c}"),
            };
            say(&format!("{what} {cause}; {how}"));
            exit::LOST
        }
        Outcome::Failed { code, message } => {
            say(&format!("cannot run {:?}: {message} ({what} was released)", program.to_string_lossy()));
            code
        }
        Outcome::Internal(message) => {
            say(&format!("{what}: {message}"));
            exit::INTERNAL
        }
    };
    match released {
        Ok(Released::Released) => {}
        Ok(Released::NotHeld) if code == exit::LOST => {}
        Ok(Released::NotHeld) => say(&format!("{what} had already ended when the command finished")),
        Err(e) => say(&format!("releasing {what} failed; it ends by itself after its TTL: {e}")),
    }
    Ok(exit::code(code))
}

/// Opens the store and acquires the lease, waiting (with the live line on a
/// terminal) unless `--no-wait`.
async fn take(args: &LockArgs, name: &LeaseName, opts: &LeaseOptions) -> Result<(Arc<dyn LeaseStore>, Lease)> {
    let store = args.store.open().await.with_context(|| format!("cannot take lease {:?}", name.as_str()))?;
    let mut holder = Holder::current();
    if let Some(label) = &args.label {
        holder = holder.with_label(label);
    }
    if let Some(id) = &args.holder_id {
        holder = holder.with_nonce(id);
    }
    let client = Client::with_holder(store.clone(), holder);

    // The first attempt does not wait: a store that fails on first contact is
    // misconfigured (exit 69), whereas one that fails while we wait is waited out.
    let lease = match client.try_acquire(name.as_str(), opts).await {
        Ok(lease) => lease,
        Err(tenure::Error::Busy { .. }) if !args.no_wait => {
            // Erased when dropped, also when a signal ends the wait.
            let mut line = WaitLine::new(store.url(), name.as_str());
            client.acquire_watching(name.as_str(), opts, |busy| line.update(busy)).await?
        }
        Err(e @ tenure::Error::Store { .. }) => {
            return Err(anyhow::Error::new(e).context(format!("cannot take lease {:?}", name.as_str())));
        }
        Err(e) => return Err(e.into()),
    };
    Ok((store, lease))
}

/// Why the command was stopped, for the one-line report.
#[derive(Debug)]
enum Cause {
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
enum Outcome {
    Exited {
        status: Status,
        cause: Option<Cause>,
    },
    Failed {
        code: u8,
        message: String,
    },
    /// The guard could not be started, or died: the command's group was killed.
    Internal(String),
}

/// Relays health to the guard and signals to the command until the command's group is gone.
async fn supervise(lease: &Lease, sup: &mut Supervisor, signals: &mut Signals, clock: &dyn Clock) -> Outcome {
    let mut health = lease.health_watch();
    let mut watching = true;
    let mut cause: Option<Cause> = None;
    let mut at_risk: Option<(u32, String)> = None;
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
                        sup.set_deadline(to_mono_ns(clock, stop_by));
                    }
                    Health::AtRisk { stop_by, failures, error } => {
                        at_risk = Some((failures, error));
                        sup.set_deadline(to_mono_ns(clock, stop_by));
                    }
                    Health::Lost(reason) => {
                        watching = false;
                        sup.stop();
                        cause.get_or_insert(Cause::Lost(reason));
                    }
                }
            }
            sig = signals.recv() => sup.forward(sig),
            event = sup.next() => match event {
                Event::Started(pid) => tracing::debug!(pid, "the command started"),
                Event::Stopping(why) if why == "deadline" => {
                    cause.get_or_insert(match at_risk.take() {
                        Some((failures, error)) => Cause::AtRisk { failures, error },
                        None => Cause::Unresponsive,
                    });
                }
                Event::Stopping(why) if why == "leftovers" => {
                    say("the command exited but left processes in its process group; stopping them before releasing the lease");
                }
                Event::Stopping(_) => {}
                Event::Failed { code, message } => return Outcome::Failed { code, message },
                Event::Exited(status) => return Outcome::Exited { status, cause },
                Event::GuardLost(message) => return Outcome::Internal(message),
            },
        }
    }
}

/// The moment to stop acting by, while the lease is held.
fn stop_by(health: &Health) -> Option<Mono> {
    match health {
        Health::Held { stop_by } | Health::AtRisk { stop_by, .. } => Some(*stop_by),
        Health::Lost(_) => None,
    }
}

/// `at` on the store's monotonic clock, as `CLOCK_MONOTONIC` nanoseconds for the guard.
fn to_mono_ns(clock: &dyn Clock, at: Mono) -> u64 {
    let (now, base) = (clock.mono(), mono_now_ns());
    let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    if at >= now {
        base.saturating_add(nanos(at.saturating_since(now)))
    } else {
        base.saturating_sub(nanos(now.saturating_since(at)))
    }
}

/// Whether to hand the terminal to the command: stdin and stdout are the
/// terminal and our process group is in its foreground. With stdout piped (`|
/// less`, `| head`), the pipeline's other members share our job and may read the
/// terminal themselves (a pager does), so the terminal stays with the job; the
/// command then runs in the background process group, and signals typed at the
/// terminal still reach it through tenure.
fn owns_terminal() -> bool {
    let (stdin, stdout) = (rustix::stdio::stdin(), rustix::stdio::stdout());
    rustix::termios::isatty(stdin)
        && rustix::termios::isatty(stdout)
        && rustix::termios::tcgetpgrp(stdin).is_ok_and(|fg| fg == rustix::process::getpgrp())
}

/// Whether `program` can be started, as a shell decides: `Err((127, …))` if not
/// found, `Err((126, …))` if not executable.
fn check_program(program: &OsStr) -> Result<(), (u8, String)> {
    let executable = |p: &Path| p.is_file() && rustix::fs::access(p, rustix::fs::Access::EXEC_OK).is_ok();
    if program.as_bytes().contains(&b'/') {
        let path = Path::new(program);
        return match path.metadata() {
            Err(e) => Err((127, e.to_string())),
            Ok(m) if m.is_dir() => Err((126, "is a directory".into())),
            Ok(_) if executable(path) => Ok(()),
            Ok(_) => Err((126, "permission denied (not executable)".into())),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut found_unexecutable = false;
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(program);
        if executable(&candidate) {
            return Ok(());
        }
        found_unexecutable |= candidate.is_file();
    }
    if found_unexecutable {
        Err((126, "permission denied (not executable)".into()))
    } else {
        Err((127, "command not found".into()))
    }
}

/// One line on stderr, never failing.
fn say(message: &str) {
    let _ = writeln!(std::io::stderr(), "tenure: {message}");
}

/// The signals `tenure lock` forwards, as one stream.
struct Signals {
    streams: Vec<(i32, Signal)>,
}

impl Signals {
    fn install(keep_ignored: &[i32]) -> Result<Self> {
        let mut streams = Vec::new();
        for sig in FORWARDED.into_iter().filter(|s| !keep_ignored.contains(s)) {
            streams.push((sig, signal(SignalKind::from_raw(sig)).context("installing a signal handler")?));
        }
        Ok(Self { streams })
    }

    /// The next signal received. Cancel-safe.
    async fn recv(&mut self) -> i32 {
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
