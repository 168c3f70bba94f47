//! The guard process (`tenure __guard`): runs the command and stops it, and every
//! process it started, when `tenure` can no longer vouch for the lease; and if
//! `tenure` died, tries to release the lease once nothing of the command runs
//! ([`release_orphaned`]: a break of that grant alone, which may fail and leave
//! the lease to expire). The design is explained in [`crate::supervise`];
//! this is the guard's side.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clap::Args;
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::{Errno, FdFlags};
use rustix::process::{Pid, PidfdFlags, Signal, WaitOptions};

use crate::exit;
use crate::supervise::{
    DRAIN_TICK, HEARTBEAT, MAX_LINE, MAX_ORPHAN_LINE, STALL, Start, Status, TICK, boot_now_ns, group_alive, kill_group,
    set_disposition,
};
use crate::tree;

/// Signals the guard ignores: they are `tenure`'s to forward.
pub(crate) const GUARD_IGNORES: [i32; 7] =
    [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP, libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU];

/// Arguments of the hidden guard process (`tenure __guard`), started by `tenure lock`.
#[derive(Debug, Args)]
pub(crate) struct GuardArgs {
    /// Read end of the control pipe from `tenure`.
    #[arg(long, value_name = "FD")]
    pub(crate) control_fd: RawFd,
    /// Write end of the report pipe to `tenure`.
    #[arg(long, value_name = "FD")]
    pub(crate) report_fd: RawFd,
    /// Time between SIGTERM and SIGKILL.
    #[arg(long, value_parser = crate::durations::duration)]
    pub(crate) grace: Duration,
    /// Hand the terminal's foreground to the command and back.
    #[arg(long)]
    pub(crate) foreground: bool,
    /// Signals that stay ignored in the command (they were ignored for `tenure`).
    #[arg(long, value_delimiter = ',')]
    pub(crate) keep_ignored: Vec<i32>,
    /// The command.
    #[arg(last = true, required = true)]
    pub(crate) command: Vec<OsString>,
}

/// Runs the command; returns its status as the exit code. Synchronous: no runtime.
pub(crate) fn guard_main(args: &GuardArgs) -> ExitCode {
    for sig in GUARD_IGNORES {
        set_disposition(sig, true);
    }
    // `tenure`: should the control pipe close, whether it died or closed the
    // pipe itself (it stops the command on its own when the guard is silent).
    let tenure = rustix::process::getppid();
    let fds = inherited(args.control_fd).and_then(|c| Ok((c, inherited(args.report_fd)?)));
    let (control, report) = match fds {
        Ok(fds) => fds,
        Err(e) => {
            let _ = writeln!(io::stderr(), "tenure: `tenure __guard` is started by `tenure lock` only ({e})");
            return exit::code(exit::USAGE);
        }
    };
    // Reports never block the guard: were `tenure` frozen with its pipe full, a
    // blocking write would keep the guard from enforcing the deadline. Lines that
    // matter wait in `outbox`; heartbeats that do not fit are dropped.
    if let Err(e) = rustix::fs::fcntl_setfl(&report, rustix::fs::OFlags::NONBLOCK) {
        let _ = writeln!(io::stderr(), "tenure: the guard cannot set up its report pipe: {e}");
        return exit::code(exit::INTERNAL);
    }
    // Nothing runs until the lease is granted; `tenure` gone first means there
    // is nothing to do.
    let mut control = File::from(control);
    let (start, buf) = match await_start(&mut control) {
        Ok(Some(started)) => started,
        Ok(None) => return ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(io::stderr(), "tenure: the guard did not get its start from tenure: {e}");
            return exit::code(exit::INTERNAL);
        }
    };
    let now = boot_now_ns();
    let mut guard = Guard {
        report: Some(File::from(report)),
        outbox: VecDeque::new(),
        progress: Arc::new(AtomicU64::new(now)),
        control: Some(control),
        pgid: None,
        grace: u64::try_from(args.grace.as_nanos()).unwrap_or(u64::MAX),
        deadline: start.deadline_ns,
        stopping: None,
        buf,
        orphan: None,
    };
    if let Some(report) = &guard.report {
        match report.try_clone() {
            Ok(pipe) => heartbeat(pipe, guard.progress.clone()),
            Err(e) => {
                let _ = writeln!(io::stderr(), "tenure: the guard cannot set up its heartbeat: {e}");
                return exit::code(exit::INTERNAL);
            }
        }
    }
    let code = guard.run(args, &start);
    // `tenure` died while the command ran, and nothing of the command runs any
    // more: the lease is released now rather than left to expire. A `tenure`
    // that is alive releases it itself.
    if guard.control.is_none()
        && let Some(plan) = guard.orphan.take()
        && died(tenure)
    {
        release_orphaned(&plan, start.token);
    }
    ExitCode::from(code)
}

/// Whether `tenure`, this guard's parent, has died: the guard then has
/// another parent. A `tenure` that is exiting has closed its pipes before its
/// children are handed on, so this waits a moment for that.
fn died(tenure: Option<Pid>) -> bool {
    let until = std::time::Instant::now() + ORPHAN_PARENT_WAIT;
    loop {
        if rustix::process::getppid() != tenure {
            return true;
        }
        if std::time::Instant::now() >= until {
            return false;
        }
        std::thread::sleep(DRAIN_TICK);
    }
}

/// The hidden command the guard runs to release the lease of a `tenure` that
/// died: `tenure break` with its arguments on standard input (JSON), so that
/// the store's URL and options never show in a process listing.
pub(crate) const BREAK_ORPHANED: &str = "__break-orphaned";
/// Longest the guard waits for that release (a break is a few store
/// operations, each under the store's own deadline, 10 s by default); then it
/// stops it and leaves the lease to expire.
const ORPHAN_WAIT: Duration = Duration::from_secs(60);
/// Longest the guard waits, after the control pipe closed, to see `tenure`
/// gone (see [`died`]).
const ORPHAN_PARENT_WAIT: Duration = Duration::from_secs(2);
/// Longest the guard waits for a release it stopped to end (a process stuck
/// in the kernel on a hung mount does not die at once); then it leaves it.
const ORPHAN_KILL_WAIT: Duration = Duration::from_secs(5);

/// The arguments of [`BREAK_ORPHANED`], read from standard input: a JSON
/// array of strings that starts with `break`, program name first.
pub(crate) fn orphaned_break_args() -> io::Result<Vec<String>> {
    break_args_from(io::stdin())
}

fn break_args_from(input: impl Read) -> io::Result<Vec<String>> {
    let mut json = Vec::new();
    input.take(MAX_ORPHAN_LINE as u64 + 1).read_to_end(&mut json)?;
    if json.len() > MAX_ORPHAN_LINE {
        return Err(io::Error::other(format!("more than {MAX_ORPHAN_LINE} bytes of arguments")));
    }
    let args: Vec<String> = serde_json::from_slice(&json).map_err(io::Error::other)?;
    if args.first().map(String::as_str) != Some("break") {
        return Err(io::Error::other("expected the arguments of `tenure break`"));
    }
    Ok(std::iter::once("tenure".to_string()).chain(args).collect())
}

/// Runs `tenure break` with `plan` (the grant with `token` alone, conditional
/// on the record as it reads it) and says what came of it. Bounded by
/// [`ORPHAN_WAIT`].
fn release_orphaned(plan: &[String], token: u64) {
    let Ok(json) = serde_json::to_vec(plan) else { return };
    let name = plan.get(2).map_or("?", String::as_str);
    let exe = if std::path::Path::new("/proc/self/exe").exists() {
        std::path::PathBuf::from("/proc/self/exe")
    } else {
        match std::env::current_exe() {
            Ok(exe) => exe,
            Err(_) => return,
        }
    };
    let spawned = std::process::Command::new(exe)
        .arg0("tenure")
        .arg(BREAK_ORPHANED)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let _ =
                writeln!(io::stderr(), "tenure: cannot release lease {name} (token {token}) after tenure died: {e}");
            return;
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(&json);
    }
    let until = std::time::Instant::now() + ORPHAN_WAIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if std::time::Instant::now() < until => std::thread::sleep(DRAIN_TICK),
            _ => {
                let _ = child.kill();
                // Reaped if it dies soon; never waited for without a bound.
                let gone = std::time::Instant::now() + ORPHAN_KILL_WAIT;
                while matches!(child.try_wait(), Ok(None)) && std::time::Instant::now() < gone {
                    std::thread::sleep(DRAIN_TICK);
                }
                break None;
            }
        }
    };
    let said = match status.and_then(|s| s.code()) {
        Some(0) => format!("released lease {name} (token {token}) once its command was stopped"),
        Some(c) if c == i32::from(exit::TIMEOUT) => return,
        _ => format!("could not release lease {name} (token {token}); it expires at its deadline"),
    };
    let _ = writeln!(io::stderr(), "tenure: {said}");
}

/// Waits for `tenure`'s first control line, `start <deadline ns> <token>
/// <deadline ms>`: the grant. `None` if `tenure` closed the pipe first (it gave
/// up or died). Returns, with the start, what came after that line.
fn await_start(control: &mut File) -> io::Result<Option<(Start, Vec<u8>)>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    let end = loop {
        if let Some(end) = buf.iter().position(|&b| b == b'\n') {
            break end;
        }
        if buf.len() > MAX_LINE {
            return Err(io::Error::other("a first line longer than any tenure writes"));
        }
        match control.read(&mut chunk) {
            Ok(0) => return Ok(None),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    };
    let line: Vec<u8> = buf.drain(..=end).collect();
    let line = String::from_utf8_lossy(&line);
    let numbers: Option<Vec<u64>> = match line.trim().split(' ').collect::<Vec<_>>().as_slice() {
        ["start", rest @ ..] => rest.iter().map(|n| n.parse().ok()).collect(),
        _ => None,
    };
    match numbers.as_deref() {
        Some(&[deadline_ns, token, deadline_ms]) => Ok(Some((Start { deadline_ns, token, deadline_ms }, buf))),
        _ => Err(io::Error::other(format!("expected `start <ns> <token> <ms>`, got {:?}", line.trim()))),
    }
}

/// Writes `alive` to `pipe` every [`HEARTBEAT`] while the guard's loop keeps
/// making passes (see [`crate::supervise`]). A thread of its own, so that a slow
/// pass of the loop does not look like a hung guard; never blocking (a full pipe
/// means `tenure` is not reading anyway). Ends when `tenure` closes the pipe.
fn heartbeat(pipe: File, progress: Arc<AtomicU64>) {
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(HEARTBEAT);
            let idle = boot_now_ns().saturating_sub(progress.load(Ordering::Relaxed));
            if idle > nanos(STALL) {
                continue;
            }
            match rustix::io::write(&pipe, b"alive\n") {
                Ok(_) | Err(Errno::AGAIN | Errno::INTR) => {}
                Err(_) => return,
            }
        }
    });
}

/// Takes ownership of a descriptor `tenure` passed down, and keeps it from the command.
#[allow(unsafe_code)]
fn inherited(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD only inspects the descriptor table entry, open or not.
    if fd < 3 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(io::Error::other(format!("descriptor {fd} is not an open pipe")));
    }
    // SAFETY: `fd` is open (checked above) and was passed to this process for the
    // guard alone; nothing else in this process owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    rustix::io::fcntl_setfd(&owned, FdFlags::CLOEXEC)?;
    Ok(owned)
}

struct Stopping {
    kill_at: u64,
    killed: bool,
}

struct Guard {
    /// `None` once `tenure` closed its end.
    report: Option<File>,
    /// Report lines not yet written (the pipe was full).
    outbox: VecDeque<String>,
    /// When the loop last made a pass (`CLOCK_BOOTTIME` ns), for the heartbeat.
    progress: Arc<AtomicU64>,
    control: Option<File>,
    pgid: Option<Pid>,
    grace: u64,
    deadline: u64,
    stopping: Option<Stopping>,
    buf: Vec<u8>,
    /// The arguments of `tenure break` that release the lease if `tenure`
    /// dies (see [`release_orphaned`]).
    orphan: Option<Vec<String>>,
}

impl Guard {
    fn send(&mut self, line: &str) {
        let mut line: String = line.replace('\n', " ").chars().take(MAX_LINE - 1).collect();
        line.push('\n');
        self.outbox.push_back(line);
        self.flush();
    }

    /// Writes what the pipe takes now, in order.
    fn flush(&mut self) {
        while let (Some(report), Some(line)) = (&self.report, self.outbox.front()) {
            match rustix::io::write(report, line.as_bytes()) {
                Ok(_) => {
                    self.outbox.pop_front();
                }
                Err(Errno::AGAIN | Errno::INTR) => return,
                // EPIPE: tenure is gone; there is nobody left to tell.
                Err(_) => {
                    self.report = None;
                    self.outbox.clear();
                }
            }
        }
    }

    /// Before exiting: waits until `tenure` took every line, or is gone.
    fn flush_all(&mut self) {
        loop {
            self.flush();
            let Some(report) = &self.report else { return };
            if self.outbox.is_empty() {
                return;
            }
            let mut fds = [PollFd::new(report, PollFlags::OUT)];
            let _ = rustix::event::poll(&mut fds, None);
        }
    }

    fn run(&mut self, args: &GuardArgs, start: &Start) -> u8 {
        let code = self.run_command(args, start);
        self.flush_all();
        code
    }

    #[allow(unsafe_code)]
    fn run_command(&mut self, args: &GuardArgs, start: &Start) -> u8 {
        let stdin = rustix::stdio::stdin();
        let foreground = if args.foreground { crate::tree::foreground_group(stdin) } else { None };
        let Some((program, rest)) = args.command.split_first() else {
            self.send("failed 64 no command given");
            return exit::USAGE;
        };
        let mut cmd = std::process::Command::new(program);
        cmd.args(rest)
            .env("TENURE_TOKEN", start.token.to_string())
            .env("TENURE_DEADLINE", start.deadline_ms.to_string())
            .process_group(0);
        let mut reset = [0i32; GUARD_IGNORES.len()];
        let mut n = 0;
        for sig in GUARD_IGNORES.into_iter().filter(|s| !args.keep_ignored.contains(s)) {
            reset[n] = sig;
            n += 1;
        }
        let parent = rustix::process::getpid();
        // Orphans of the command — in its group or not (`setsid`, daemons) — become
        // the guard's children: the guard finds them to stop them, and reaps them
        // (a zombie still counts as a member of its group, and the init of a
        // container may never reap it).
        if let Err(e) = rustix::process::set_child_subreaper(Some(parent)) {
            tracing::debug!(error = %e, "cannot become a child subreaper");
        }
        let take_terminal = foreground.is_some();
        let report = self.report.as_ref().map_or(-1, AsRawFd::as_raw_fd);
        // The last moment the command may start: past it, the guard would
        // begin stopping it at once (see `timers`).
        let start_by = self.deadline.saturating_sub(self.grace);
        // SAFETY: the closure runs in the forked child before exec. It only makes
        // async-signal-safe system calls (prctl, getppid, getpid, tcsetpgrp,
        // signal, write) on data copied into it, and does not allocate. `report`
        // is open: the guard owns it, and the child's copy lives until exec.
        unsafe {
            cmd.pre_exec(move || child_setup(parent, take_terminal, &reset[..n], report, start_by));
        }
        let spawned = cmd.spawn();
        let status = match &spawned {
            Ok(child) => {
                let pgid = Pid::from_child(child);
                self.pgid = Some(pgid);
                Some(self.supervise(pgid))
            }
            Err(_) => None,
        };
        if let Some(original) = foreground
            && crate::tree::foreground_group(stdin).is_some_and(|now| now != original)
        {
            // SIGTTOU is ignored, so the guard may take the terminal back from the
            // background; fails harmlessly if tenure's group is gone.
            let _ = rustix::termios::tcsetpgrp(stdin, original);
        }
        let status = match (status, spawned) {
            (Some(status), _) => status,
            (None, Err(e)) if e.raw_os_error() == Some(libc::ETIME) => {
                let late = "the lease's time ran out before the command could start (tenure or its guard was \
                            held up after the grant); the command did not run";
                self.send(&format!("failed {} {late}", exit::TIMEOUT));
                return exit::TIMEOUT;
            }
            (None, Err(e)) => {
                // As shells do: 127 when there is no such program, 126 when it cannot run.
                let code = if e.kind() == io::ErrorKind::NotFound { 127 } else { 126 };
                self.send(&format!("failed {code} {e}"));
                return code;
            }
            (None, Ok(_)) => Status::Code(i32::from(exit::INTERNAL)),
        };
        self.send(&status.report("exited", "killed"));
        status.exit_code()
    }

    /// Waits for the leader, then for every process the command started to be
    /// gone, enforcing the deadline.
    fn supervise(&mut self, pgid: Pid) -> Status {
        let pidfd = rustix::process::pidfd_open(pgid, PidfdFlags::empty()).ok();
        let mut leader: Option<Status> = None;
        // While the rest drains, poll often at first, then back off to TICK: a
        // process stuck in the kernel (a hung NFS mount) may take minutes to die.
        let mut drain = DRAIN_TICK;
        loop {
            let (reaped, children_left) = self.reap(pgid);
            if leader.is_none()
                && let Some(status) = reaped
            {
                leader = Some(status);
                self.send(&status.report("leader exited", "leader killed"));
                if (children_left || group_alive(pgid)) && self.stopping.is_none() {
                    self.begin("leftovers");
                }
            }
            // As a subreaper, the guard is an ancestor of everything the command
            // started until it is reaped: no children left means nothing left.
            if let Some(status) = leader
                && !children_left
                && !group_alive(pgid)
            {
                return status;
            }
            let now = boot_now_ns();
            self.timers(now);
            self.sweep();
            self.flush();
            self.progress.store(now, Ordering::Relaxed);
            let mut wake = TICK;
            if leader.is_some() {
                wake = drain;
                drain = (drain * 2).min(TICK);
            }
            let next = match &self.stopping {
                None => Some(self.deadline.saturating_sub(self.grace)),
                Some(s) if !s.killed => Some(s.kill_at),
                Some(_) => None,
            };
            if let Some(at) = next {
                wake = wake.min(Duration::from_nanos(at.saturating_sub(now)));
            }
            self.wait_events(pidfd.as_ref().filter(|_| leader.is_none()), wake);
        }
    }

    /// Reaps every child that ended — the leader, and the orphans re-parented to
    /// the guard — and returns the leader's status if it ended now, and whether
    /// any child is left. Continues the group if ^Z stopped one of its members.
    fn reap(&mut self, leader: Pid) -> (Option<Status>, bool) {
        let mut status = None;
        loop {
            // wait(2) for any child: rustix's `waitpid(None, …)` means our own group only.
            match rustix::process::wait(WaitOptions::NOHANG | WaitOptions::UNTRACED) {
                Ok(Some((pid, st))) if st.stopped() => {
                    if st.stopping_signal() == Some(libc::SIGTSTP) {
                        if pid == leader {
                            let _ = writeln!(io::stderr(), "tenure: a command holding a lease cannot be suspended");
                        }
                        kill_group(leader, Signal::CONT);
                        let _ = rustix::process::kill_process(pid, Signal::CONT);
                    }
                }
                Ok(Some((pid, st))) if pid == leader => {
                    status = Some(match (st.exit_status(), st.terminating_signal()) {
                        (Some(code), _) => Status::Code(code),
                        (None, Some(sig)) => Status::Signal(sig),
                        (None, None) => Status::Code(i32::from(exit::INTERNAL)),
                    });
                }
                Ok(Some(_)) | Err(Errno::INTR) => {}
                Ok(None) => return (status, true),
                // No children at all. Before the leader was reaped this cannot
                // happen, and then it must not spin the loop.
                Err(_) => return (status.or(Some(Status::Code(i32::from(exit::INTERNAL)))), false),
            }
        }
    }

    fn timers(&mut self, now: u64) {
        match &mut self.stopping {
            None if now.saturating_add(self.grace) >= self.deadline => self.begin("deadline"),
            Some(s) if !s.killed && now >= s.kill_at => {
                s.killed = true;
                if let Some(pgid) = self.pgid {
                    kill_group(pgid, Signal::KILL);
                }
                self.sweep();
            }
            _ => {}
        }
    }

    /// Once the grace is over: SIGKILL to every descendant, at every pass, since
    /// they may have forked meanwhile.
    fn sweep(&mut self) {
        if self.stopping.as_ref().is_some_and(|s| s.killed) {
            tree::signal_descendants(rustix::process::getpid(), None, &[Signal::KILL]);
        }
    }

    /// Starts stopping the command: SIGTERM now, SIGKILL after the grace, never
    /// later than the deadline.
    fn begin(&mut self, why: &str) {
        if self.stopping.is_some() {
            return;
        }
        let Some(pgid) = self.pgid else { return };
        kill_group(pgid, Signal::TERM);
        kill_group(pgid, Signal::CONT);
        // The same to what left the group. Once only, as for the group: what the
        // command forks while it stops (a cleanup handler's `rm`) is part of
        // stopping gracefully, and meets SIGKILL only when the grace is over.
        let me = rustix::process::getpid();
        tree::signal_leavers(me, pgid, &[Signal::TERM, Signal::CONT]);
        let now = boot_now_ns();
        self.stopping = Some(Stopping { kill_at: now.saturating_add(self.grace).min(self.deadline), killed: false });
        self.send(&format!("stopping {why}"));
        self.timers(now);
    }

    fn wait_events(&mut self, pidfd: Option<&OwnedFd>, timeout: Duration) {
        let timeout = Timespec {
            tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let readable = {
            let mut fds = Vec::with_capacity(2);
            if let Some(c) = &self.control {
                fds.push(PollFd::new(c, PollFlags::IN));
            }
            if let Some(p) = pidfd {
                fds.push(PollFd::new(p, PollFlags::IN));
            }
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(_) => self.control.is_some() && !fds[0].revents().is_empty(),
                Err(_) => false,
            }
        };
        if readable {
            self.read_control();
        }
    }

    fn read_control(&mut self) {
        let Some(control) = &mut self.control else { return };
        let mut chunk = [0u8; 512];
        match control.read(&mut chunk) {
            Ok(0) => self.parent_gone(),
            Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted || e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => self.parent_gone(),
        }
        while let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=end).collect();
            self.command(String::from_utf8_lossy(&line).trim());
        }
        if self.buf.len() > MAX_ORPHAN_LINE {
            // Not a line tenure writes: drop it rather than grow without bound.
            self.buf.clear();
        }
    }

    fn command(&mut self, line: &str) {
        let (verb, arg) = line.split_once(' ').unwrap_or((line, ""));
        match (verb, arg) {
            ("deadline", ns) => {
                let Ok(ns) = ns.parse::<u64>() else { return };
                self.deadline = ns;
                if let Some(s) = &mut self.stopping {
                    s.kill_at = s.kill_at.min(ns);
                }
            }
            // `tenure` takes the release back: it closes the pipe itself.
            ("orphan", "-") => self.orphan = None,
            ("orphan", json) => self.orphan = serde_json::from_str(json).ok(),
            ("stop", "signal") => self.begin("signal"),
            ("stop", _) => self.begin("lost"),
            ("signal", n) => {
                let sig = n.parse::<i32>().ok().and_then(Signal::from_named_raw);
                if let (Some(sig), Some(pgid)) = (sig, self.pgid) {
                    kill_group(pgid, sig);
                }
            }
            _ => {}
        }
    }

    fn parent_gone(&mut self) {
        self.control = None;
        if self.stopping.is_none() {
            let _ = writeln!(
                io::stderr(),
                "tenure: tenure died while its command ran; stopping the command's process group"
            );
        }
        self.begin("parent");
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// In the child, between fork and exec: async-signal-safe calls only.
///
/// The child itself reports `started <pid>` as its last step: the report is in
/// tenure's pipe before the command can run, so tenure knows the group to kill
/// even if the guard dies right after the spawn (were the guard to report it
/// after `spawn` returned, a guard killed in between would leave tenure blind).
///
/// Its very last check, right before the exec: that the lease still has time
/// for the command (`start_by`, CLOCK_BOOTTIME ns, which counts suspension). A
/// child that gets here later — the guard or `tenure` paused after the grant
/// — fails with ETIME and the command never runs.
#[allow(unsafe_code)]
fn child_setup(parent: Pid, take_terminal: bool, reset: &[i32], report: RawFd, start_by: u64) -> io::Result<()> {
    // Last resort if the guard itself is killed: its direct child dies with it.
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
    if rustix::process::getppid() != Some(parent) {
        // (No allocation here: ESRCH says the parent is gone.)
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    // std makes the child a group leader too, but possibly only after this
    // closure: tcsetpgrp and the report below need the group to exist.
    rustix::process::setpgid(None, None)?;
    if take_terminal {
        // SIGTTOU is still ignored (inherited from the guard), so this process,
        // already the leader of a new background group, may take the terminal.
        let _ = rustix::termios::tcsetpgrp(rustix::stdio::stdin(), rustix::process::getpid());
    }
    for &sig in reset {
        set_disposition(sig, false);
    }
    if boot_now_ns() >= start_by {
        return Err(io::Error::from_raw_os_error(libc::ETIME));
    }
    if report < 0 {
        return Ok(());
    }
    let mut line = *b"started 0000000000\n";
    let mut pid = rustix::process::getpid().as_raw_nonzero().get().unsigned_abs();
    for digit in line[8..18].iter_mut().rev() {
        *digit = b'0' + (pid % 10) as u8;
        pid /= 10;
    }
    // SAFETY: `report` is open in this process until exec (see the caller).
    let report = unsafe { std::os::fd::BorrowedFd::borrow_raw(report) };
    // Far below PIPE_BUF: all or nothing. EPIPE: tenure is gone, the guard acts.
    // EAGAIN (a full pipe) cannot happen: the guard sends nothing before this.
    let _ = rustix::io::write(report.as_fd(), &line);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the guard makes of `bytes` from `tenure`, the pipe closed after them.
    fn first_line(bytes: &[u8]) -> io::Result<Option<(Start, Vec<u8>)>> {
        let (r, mut w) = io::pipe()?;
        w.write_all(bytes)?;
        drop(w);
        await_start(&mut File::from(OwnedFd::from(r)))
    }

    #[test]
    fn an_orphaned_release_runs_tenure_break_and_nothing_else() {
        let args = break_args_from(&br#"["break","/d","job","--token","7"]"#[..]).expect("a break");
        assert_eq!(args, ["tenure", "break", "/d", "job", "--token", "7"]);
        let long = serde_json::to_vec(&["break".to_string(), "x".repeat(MAX_ORPHAN_LINE)]).expect("json");
        for bad in
            [&br#"["lock","/d","job","--","rm","-rf","/"]"#[..], b"[]", b"", b"break /d job", b"[\"break\", 7]", &long]
        {
            assert!(break_args_from(bad).is_err(), "{:?} accepted", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn the_guard_starts_on_a_start_line_only_and_keeps_what_follows_it() {
        let (start, rest) = first_line(b"start 5 7 9\ndeadline 11\n").expect("read").expect("a start");
        assert_eq!((start.deadline_ns, start.token, start.deadline_ms), (5, 7, 9));
        assert_eq!(rest, b"deadline 11\n");
        assert!(first_line(b"").expect("read").is_none(), "tenure gone before the grant: nothing to run");
        assert!(first_line(b"start 5 7").expect("read").is_none(), "a line cut short by tenure's end");
        for garbage in [&b"stop\n"[..], b"start 5 7\n", b"start 5 7 9 1\n", b"start a b c\n", b"start -1 2 3\n"] {
            assert!(first_line(garbage).is_err(), "{:?} taken for a start", String::from_utf8_lossy(garbage));
        }
        let endless = vec![b'7'; 4 * MAX_LINE];
        assert!(first_line(&endless).is_err(), "a first line longer than any tenure writes is refused");
    }
}
