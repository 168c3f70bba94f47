//! `tenure lock`: run a command while holding a lease — `flock(1)` for a fleet.
//!
//! 1. **Wait.** The lease is acquired with the client's jittered backoff (at most
//!    `--poll` between polls). On a terminal a live line says who holds it, for
//!    how long, and when it could be taken over; elsewhere whole lines say so when
//!    the wait starts, every so often, and when it ends ([`crate::waiting`]). A
//!    `tenure lock` run under the same lease in the same store (`TENURE_LEASE`,
//!    `TENURE_STORE`) is refused (64): it would wait for its own parent. `--no-wait` and `--timeout` give
//!    up with exit 75, naming the store, the lease and its holder. `--timeout`
//!    bounds the whole wait — opening the store and the first attempt included —
//!    and every step before the wait is also bounded by the store's own deadline
//!    for one operation (store option `timeout`, 10 s by default): a store that
//!    does not answer in time ends `tenure` with "the store did not answer within
//!    …", exit 75 when `--timeout` ran out first, 69 when the store's deadline did.
//!    A signal before the command starts (while the store is opened or the lease
//!    awaited, even with a store operation stuck in the kernel) ends `tenure` with
//!    128 + the signal at once, holding nothing.
//! 2. **Run.** The command runs under a guard process ([`crate::supervise`]) in a
//!    process group of its own, with `TENURE_LEASE`, `TENURE_TOKEN` (the fencing
//!    token), `TENURE_DEADLINE` (the grant's deadline at start, unix ms; renewals
//!    extend it) and `TENURE_STORE` in its environment. The lease's keep-alive
//!    renews it every TTL/8.
//!    With `--slots N` the lease is one of N slots of the name ([`slots`]):
//!    `TENURE_LEASE` names the slot's lease and `TENURE_SLOT` says which.
//! 3. **Signals.** SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to `tenure` are
//!    forwarded to the command's group; `tenure` keeps the lease until the command
//!    and its group are gone, then releases it and exits with the command's status
//!    (128 + n if a signal killed it). A *second* SIGINT or SIGTERM stops the
//!    command as a loss would (SIGTERM, then SIGKILL after the grace), so that an
//!    impatient user never waits longer than the grace. A signal while the lease
//!    is released ends `tenure` at once, leaving the lease to expire after its
//!    TTL. A signal that `tenure` was started with
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
//!    "The command" is everything it started: its process group, and processes
//!    that left it (`setsid`, daemons), which the guard finds ([`crate::tree`]).
//!    When the command exits leaving some of them running, they are stopped the
//!    same way before the lease is released, and `tenure` exits with the
//!    command's own status.
//! 5. **`tenure` killed.** If `tenure` dies while the command runs (`kill -9`,
//!    the OOM killer, a job killed by its process group), the guard stops the
//!    command as on a loss and, once nothing of it runs, releases the lease: a
//!    `tenure break` of that grant alone (its token, conditional on the record as
//!    read, so it frees nobody else's grant), with the reason "its `tenure lock`
//!    died", which `status` and the next holder show. The next waiter gets the
//!    lease in milliseconds instead of at its deadline, and knows the work
//!    before it was cut short. The release is an attempt: the lease is left to
//!    expire when the guard dies too (the machine crashes, every process is
//!    killed), when the store cannot be reached or the break fails, or when the
//!    store's URL and options are too long to hand to the guard (4000 bytes).
//! 6. **A silent guard.** The guard says `alive` several times a second. If
//!    `tenure` hears nothing from it for one renewal interval of the lease (TTL/8
//!    by default; at least 1 s), the guard is stopped or hung and enforces nothing:
//!    `tenure` stops the command's processes itself on the same schedule (SIGTERM,
//!    SIGKILL after the grace, never later than `stop_by`), kills the guard,
//!    releases the lease, and says so in one line. It exits 76 if the command
//!    still ran (it was stopped, as on a loss). If the command had already ended
//!    by itself, `tenure` exits with the command's own status, read from its
//!    zombie or from the guard's earlier report: the lease was held and renewed
//!    the whole time the command ran, so its work is as valid as on any normal
//!    exit, and a script must see whether that work succeeded — the guard's
//!    failure came after it. Only when that status cannot be known does `tenure`
//!    exit 70.
//!
//! 7. **Late grants.** A grant is measured from when it was asked for; one
//!    whose stop-by is less than the kill grace away when the command would
//!    start (a slow store, `tenure` paused after the answer) is released unused
//!    and waited for again, under `--timeout` (the client already refuses one
//!    that leaves no time for a renewal). The guard's child checks the same
//!    bound right before exec, on `CLOCK_BOOTTIME`: a command never starts on a
//!    grant that cannot be vouched for. Under `--timeout`, passing store
//!    failures are retried until it runs out, first contact included.
//!
//! 8. **Once per period, held at least.** `--once-per`, `--count-failures`
//!    and `--hold-at-least`: see [`once`].
//!
//! Exit codes: the command's own status (0 when `--once-per` found the
//! period's run done and did not run it); 64 usage (bad name, missing command, a
//! duration out of range: `--ttl` above 30 days, any other above 10 years), 69
//! store unreachable, failing or not answering within its deadline, 70 a bug,
//! 71 the guard could not start or was killed before the command started, 75
//! busy or timed out (or no grant came in time to start the command), 76 the
//! command ran and was stopped (the lease lost, or its guard killed), 126/127
//! the command cannot be executed / was not found (checked before waiting,
//! like a shell).

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use tenure::{LeaseName, LeaseOptions, Mode, Released};
use tenure_core::human_duration;

use crate::durations::{duration, ttl};
use crate::exit::{self, Fail};
use crate::stores::StoreArgs;
use crate::supervise::{Leader, MIN_SILENCE, Spec, Start, Status, Supervisor, is_ignored};

pub(crate) mod flock;
mod hold;
mod once;
mod slots;
mod summary;
mod take;

use hold::{FORWARDED, Outcome, Signals, describe, stop_by, supervise, to_boot_ns};
use take::take;

/// `tenure lock`.
#[derive(Debug, Args)]
pub(crate) struct LockArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// The lease name, e.g. `deploy/prod`.
    pub(crate) name: String,
    /// Lease duration: how long the lease outlives a `tenure` that died (at most 30 days).
    #[arg(long, value_parser = ttl, default_value = "30s", value_name = "DURATION")]
    pub(crate) ttl: Duration,
    /// Give up waiting after this long (exit 75); by default, wait as long as it takes.
    /// A bare number is seconds (`-w 5`, `-w 0.5`), as flock(1) takes it.
    #[arg(short = 'w', long, visible_alias = "wait", value_parser = duration, conflicts_with = "no_wait",
          value_name = "DURATION")]
    pub(crate) timeout: Option<Duration>,
    /// Do not wait: exit 75 at once if the lease is held.
    #[arg(short = 'n', long, visible_aliases = ["nonblock", "nb"])]
    pub(crate) no_wait: bool,
    /// Longest wait between two polls of a busy lease (more polls, quicker hand-over).
    #[arg(long, value_parser = duration, default_value = "1s", value_name = "DURATION")]
    pub(crate) poll: Duration,
    /// Take a shared lease (many shared holders at once, no exclusive one).
    #[arg(short = 's', long)]
    pub(crate) shared: bool,
    /// Take one of N slots of the name: at most N holders at once, each with a
    /// slot lease of its own (`TENURE_SLOT`, 0…N−1, and its `TENURE_TOKEN`).
    #[arg(long, value_name = "N", value_parser = slots::count, conflicts_with = "shared")]
    pub(crate) slots: Option<u32>,
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
    /// Run the command at most once per period of this length (aligned to the
    /// Unix epoch, by this machine's clock when tenure starts) across every
    /// machine that uses the lease: the others exit 0 without running it.
    #[arg(long, value_parser = duration, conflicts_with = "shared", value_name = "DURATION")]
    pub(crate) once_per: Option<Duration>,
    /// With --once-per: a run that exits non-zero counts too (by default only
    /// a zero exit does, and the next machine runs the command).
    #[arg(long, requires = "once_per")]
    pub(crate) count_failures: bool,
    /// Keep the lease at least this long after it was taken, even when the
    /// command ends sooner (a signal to tenure ends the hold).
    #[arg(long, value_parser = duration, value_name = "DURATION")]
    pub(crate) hold_at_least: Option<Duration>,
    /// The command and its arguments.
    #[arg(last = true, required_unless_present = "shell_command", value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
    #[command(flatten)]
    pub(crate) flock: flock::FlockArgs,
}

/// How much longer than a bound the CLI's own backstop waits: the client and the
/// stores enforce their bounds themselves; this catches what does not.
const SLACK: Duration = Duration::from_millis(500);

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
    refuse_nested(&args.store.url, &name)?;
    slots::refuse_nested(&args.store.url, &name, args.slots)?;
    if args.poll.is_zero() {
        anyhow::bail!(Fail::usage("--poll must be longer than zero"));
    }
    let mode = if args.shared { Mode::Shared } else { Mode::Exclusive };
    let mut opts = LeaseOptions::default().with_mode(mode).with_ttl(args.ttl).with_backoff_max(args.poll);
    // A poll shorter than the first backoff step polls at that pace from the start.
    opts.backoff_initial = opts.backoff_initial.min(args.poll);
    opts.timeout = if args.no_wait { Some(Duration::ZERO) } else { args.timeout };
    opts.slots = args.slots;
    opts.validate()?;
    let grace = args.kill_grace.min(args.ttl.saturating_sub(opts.safety()) / 2);
    let op_timeout = args.store.op_timeout();
    let once = once::Plan::new(&args)?;

    // Before any handler is installed: what was ignored stays ignored (nohup).
    let keep_ignored: Vec<i32> = FORWARDED.into_iter().filter(|&s| is_ignored(s)).collect();
    let mut signals = Signals::install(&keep_ignored)?;
    let foreground = owns_terminal();
    if foreground {
        // While the command owns the terminal, tenure is a background process: its
        // own messages must not stop it with SIGTTOU (`stty tostop`).
        crate::supervise::set_disposition(libc::SIGTTOU, true);
    }

    // The guard starts now and waits for the grant (see `crate::supervise`),
    // unless tenure is not to wait: a busy lease then costs no second process.
    let mut env = vec![("TENURE_LEASE", name.to_string()), ("TENURE_STORE", args.store.url.clone())];
    env.extend(once.as_ref().map(once::Plan::env));
    let mut spec = Spec {
        command: &args.command,
        env,
        grace,
        foreground,
        keep_ignored,
        silence: opts.renew_interval().max(MIN_SILENCE),
    };
    let spawn = |spec: &Spec<'_>| Supervisor::spawn(spec).context("starting the guard process");
    // A slot's environment is known once it is granted: its guard starts then.
    let mut early = if args.no_wait || args.slots.is_some() { None } else { Some(spawn(&spec)?) };

    // A signal while the store is opened or the lease awaited ends tenure holding
    // nothing (a grant whose request was in flight expires after its TTL); the
    // guard, never told to start, exits.
    let taken = tokio::select! {
        taken = take(&args, &name, &opts, op_timeout, grace) => Ok(taken),
        sig = signals.recv() => Err(sig),
    };
    if !matches!(taken, Ok(Ok(_)))
        && let Some(sup) = early.take()
    {
        sup.finish().await;
    }
    let (store, lease) = match taken {
        // 76 says that a command ran and was stopped: a grant lost before
        // the command started (taken over while waiting for the rest of a
        // queue, say) is a wait that failed, worth trying again.
        Ok(Err(e)) if exit::code_for(&e) == exit::LOST => {
            return Err(anyhow::Error::new(Fail::new(exit::TIMEOUT, format!("{e:#} (the command did not run)"))));
        }
        Ok(taken) => taken?,
        Err(sig) => return Ok(exit::code(Status::Signal(sig).exit_code())),
    };
    let taken_at = tokio::time::Instant::now();
    let grant = lease.grant();
    slots::set_env(&mut spec.env, &lease);
    tracing::info!(token = grant.token, "acquired lease {name} in {}", store.url());
    if let Some(p) = grant.predecessor.as_ref().filter(|p| p.how == tenure::EndedHow::Broken) {
        // The one handing-over people must hear of: someone ended the last
        // holder's grant by hand, and the work it did may be half done.
        let by = p.broken.as_ref().map(crate::status::broken_by).unwrap_or_default();
        say(format!("acquired {name}; its previous grant (token {}) was broken {by}", p.token).trim_end());
    }

    // The lease as granted: under --slots, the slot's own name.
    let what = format!("{}: lease {:?} (token {})", store.url(), grant.name.as_str(), grant.token);
    if once.as_ref().is_some_and(|o| o.already_ran(&grant, &what)) {
        if let Some(sup) = early {
            sup.finish().await;
        }
        once::let_go(lease, &grant, op_timeout + SLACK).await;
        return Ok(ExitCode::SUCCESS);
    }

    let clock = store.clock().clone();
    let start = Start {
        deadline_ns: to_boot_ns(&*clock, stop_by(&lease.health()).unwrap_or_else(|| clock.mono())),
        token: grant.token,
        deadline_ms: grant.deadline_ms,
    };
    // A guard killed while it waited for the grant ran nothing: a new one
    // takes its place, rather than the command not running.
    let early = match early {
        Some(mut sup) => {
            if sup.alive() {
                Some(sup)
            } else {
                tracing::info!("the guard ended while the lease was awaited; starting another");
                sup.finish().await;
                None
            }
        }
        None => None,
    };
    let outcome = match early.map_or_else(|| spawn(&spec), Ok) {
        Ok(mut sup) => {
            sup.start(start);
            sup.orphan(&orphan_break(&args, &grant.name, grant.token));
            let outcome = supervise(&lease, &mut sup, &mut signals, &*clock, &spec, start.deadline_ns).await;
            if !matches!(outcome, Outcome::Silent { .. }) {
                sup.finish().await;
            }
            outcome
        }
        Err(e) => Outcome::GuardLost { message: format!("{e:#}"), ran: false },
    };

    if let Some(at_least) = args.hold_at_least
        && matches!(outcome, Outcome::Exited { cause: None, .. })
    {
        once::hold(&lease, &mut signals, taken_at, at_least, &name).await;
    }
    let release = once::release_request(once.as_ref(), &outcome, &grant, &what);
    let summary = summary::Summary::of(&lease);
    let released = tokio::select! {
        released = tokio::time::timeout(op_timeout + SLACK, lease.release_with(release)) => match released {
            Ok(released) => released.map_err(|e| e.to_string()),
            Err(_) => Err(format!("the store did not answer within {}", human_duration(op_timeout))),
        },
        sig = signals.recv() => Err(format!("a signal ({sig}) ended the release")),
    };
    let code = match outcome {
        Outcome::Exited { status, cause: None } => status.exit_code(),
        Outcome::Exited { status, cause: Some(cause) } => {
            let how = match status {
                Status::Signal(libc::SIGTERM) => "the command was stopped with SIGTERM".to_string(),
                Status::Signal(libc::SIGKILL) => "the command was killed (SIGKILL)".to_string(),
                status => format!("the command {}", describe(status)),
            };
            say(&format!("{what} {cause}; {how}"));
            exit::LOST
        }
        Outcome::Failed { code, message } => {
            say(&format!("cannot run {:?}: {message} ({what} was released)", program.to_string_lossy()));
            code
        }
        // Someone killed the guard (or it could not start): the command was
        // stopped if it ran, and never started otherwise.
        Outcome::GuardLost { message, ran } => {
            say(&format!("{what}: {message}"));
            if ran { exit::LOST } else { exit::OS_ERROR }
        }
        Outcome::Silent { leader, silence } => {
            let silent =
                format!("{what}: the guard process stopped answering (nothing for {})", human_duration(silence));
            let (code, how) = match leader {
                Leader::Running => (exit::LOST, "tenure stopped the command itself".to_string()),
                Leader::Ended(status) => (
                    status.exit_code(),
                    format!("the command had ended ({}); tenure stopped what it left running", describe(status)),
                ),
                Leader::Unknown => (exit::OS_ERROR, "the command had ended, how is unknown".to_string()),
                Leader::NotStarted => {
                    (exit::TIMEOUT, "the command did not run (it had not started, and now cannot)".to_string())
                }
            };
            say(&format!("{silent}; {how}, killed the guard and released the lease"));
            code
        }
    };
    match released {
        Ok(Released::Released) => {}
        Ok(Released::NotHeld) if code == exit::LOST => {}
        Ok(Released::NotHeld) => say(&format!("{what} had already ended when the command finished")),
        Err(e) => say(&format!("releasing {what} failed, it ends by itself after its TTL: {e}")),
    }
    if args.flock.verbose > 0 {
        say(&summary.line(store.url(), &name));
    }
    Ok(exit::code(code))
}

/// The arguments of `tenure break` that end this grant (token `token`) alone,
/// with the store's settings, for the guard to run if `tenure` dies while the
/// command runs.
fn orphan_break(args: &LockArgs, name: &LeaseName, token: u64) -> Vec<String> {
    let store = &args.store;
    let reason = format!("its `tenure lock` (pid {}) died; the command it ran was stopped first", std::process::id());
    let mut out: Vec<String> = vec![
        "break".into(),
        store.url.clone(),
        name.to_string(),
        "--token".into(),
        token.to_string(),
        "--reason".into(),
        reason,
        "--max-skew".into(),
        format!("{}ms", store.max_skew.as_millis()),
        "--corrupt-ttl".into(),
        format!("{}ms", store.corrupt_ttl.as_millis()),
    ];
    for (k, v) in &store.store_opts {
        out.push("--store-opt".into());
        out.push(format!("{k}={v}"));
    }
    if store.trust_store {
        out.push("--trust-store".into());
    }
    out
}

/// Refuses to wait for the lease this process already runs under: a command run
/// by `tenure lock` (which sets `TENURE_LEASE` and `TENURE_STORE`) that runs
/// `tenure lock` on the same lease would wait for its own parent forever.
fn refuse_nested(url: &str, name: &LeaseName) -> Result<()> {
    let (Some(lease), Some(store)) = (std::env::var_os("TENURE_LEASE"), std::env::var_os("TENURE_STORE")) else {
        return Ok(());
    };
    if lease.as_bytes() != name.as_str().as_bytes() || !same_store(&store, url) {
        return Ok(());
    }
    anyhow::bail!(Fail::usage(format!(
        "lease {:?} in {url} is already held by the `tenure lock` that runs this command \
         (TENURE_LEASE and TENURE_STORE say so): waiting for it would wait forever; \
         run the command directly, or use another lease name",
        name.as_str()
    )))
}

/// Whether `parent` (the parent's `TENURE_STORE`) and `url` name the same store:
/// the same text, or the same directory as a plain path or a `file://` URL. By
/// text only: the store may be a hung mount, and nothing here has a deadline.
fn same_store(parent: &OsStr, url: &str) -> bool {
    if parent.as_bytes() == url.as_bytes() {
        return true;
    }
    let dir = |u: &str| {
        tenure::file::DirUrl::parse(u, &Default::default()).ok().and_then(|d| std::path::absolute(d.path).ok())
    };
    match (parent.to_str().and_then(dir), dir(url)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
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
        && crate::tree::own_group().is_some_and(|mine| crate::tree::foreground_group(stdin) == Some(mine))
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
