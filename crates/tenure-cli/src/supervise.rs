//! The guard: a small process that runs the command and stops its process group
//! when `tenure` can no longer vouch for the lease.
//!
//! ```text
//! shell ── tenure (its own job's process group: receives ^C, kill %1)
//!            │   control pipe ──▶  deadline <ns> | stop | signal <n>
//!            │   report pipe  ◀──  started <pid> (from the command, just before exec) |
//!            │                      stopping <why> | failed <code> <msg> | exited <n> | killed <n>
//!            └─ tenure __guard (a process group of its own: no terminal or job signals)
//!                 └─ command (a new process group C, the terminal's foreground if tenure had it)
//!                      └─ its children (group C)
//! ```
//!
//! `PR_SET_PDEATHSIG` alone is not enough: it reaches the direct child only (not
//! `sh -c 'a & b'`'s children) and fires when the *thread* that forked exits. The
//! guard instead holds the read end of a pipe whose only write end is in `tenure`
//! (close-on-exec, so nothing else inherits it). The guard stops the whole group C —
//! SIGTERM (and SIGCONT, for stopped members), then SIGKILL — when:
//! - the pipe reports EOF: `tenure` died, even by SIGKILL;
//! - `tenure` says `stop`: the lease was lost;
//! - the deadline `tenure` last sent (the lease's `stop_by`, absolute
//!   `CLOCK_MONOTONIC` nanoseconds, pushed back at every renewal) is less than the
//!   grace away: renewals are failing, or `tenure` is frozen (SIGSTOP, a hung
//!   runtime). The guard does not need `tenure` to be alive to enforce it.
//!
//! The SIGKILL lands at `min(start of stopping + grace, deadline)`: always before
//! the lease's `stop_by`, which is its deadline minus the safety margin, so the
//! group is dead before any contender can take the lease over. The guard is the
//! command's parent and reaps it only after its group is empty, so the group id it
//! signals cannot be reused by an unrelated process meanwhile. When the command
//! exits, members it left in its group are stopped the same way before the final
//! status is reported: the lease is released only when nothing of the command runs.
//!
//! The guard ignores SIGINT, SIGQUIT, SIGTERM, SIGHUP and the job-control signals:
//! those are for `tenure`, which forwards them (the command gets its signals from
//! exactly one place). The command gets default dispositions back, except for
//! signals `tenure` itself was started with ignored (`nohup`). As a last resort the
//! command's leader has `PR_SET_PDEATHSIG = SIGKILL` against the guard.
//!
//! Terminal: if `tenure` owns the terminal's foreground, the command's group takes
//! it in the child just before `exec` (so the command never runs in the background
//! and cannot get SIGTTIN), and the guard gives it back to `tenure`'s group after
//! the group is gone, with SIGTTOU ignored so that a background process may do so.
//! Job control (^Z) is not supported under a lease: a command stopped by SIGTSTP is
//! continued at once, with a note.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::{Errno, FdFlags};
use rustix::process::{Pid, PidfdFlags, Signal, WaitOptions};

use crate::exit;

/// Signals the guard ignores: they are `tenure`'s to forward.
const GUARD_IGNORES: [i32; 7] =
    [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP, libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU];

/// Longest sleep of the guard's loop: it also notices a stopped command this often.
const TICK: Duration = Duration::from_millis(100);
/// How soon the guard first checks whether a group whose leader exited has emptied.
const DRAIN_TICK: Duration = Duration::from_millis(10);

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
    #[arg(long, value_parser = crate::args::duration)]
    pub(crate) grace: Duration,
    /// The first deadline (CLOCK_MONOTONIC, ns) by which the group must be dead.
    #[arg(long)]
    pub(crate) deadline_ns: u64,
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

/// `CLOCK_MONOTONIC` now, in nanoseconds: the clock `tenure` and the guard share
/// (it is also what `std::time::Instant`, hence tenure's monotonic clock, reads).
pub(crate) fn mono_now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(t.tv_nsec).unwrap_or(0))
}

/// Whether `sig` is ignored (`SIG_IGN`) in this process.
pub(crate) fn is_ignored(sig: i32) -> bool {
    // SAFETY: an all-zero `sigaction` is a valid value, and with a null `act` the
    // call only reads the current disposition into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Sets `sig` to `SIG_IGN` or `SIG_DFL`. Async-signal-safe.
pub(crate) fn set_disposition(sig: i32, ignore: bool) {
    let handler = if ignore { libc::SIG_IGN } else { libc::SIG_DFL };
    // SAFETY: installs no handler code, only one of the two kernel dispositions;
    // signal(2) is async-signal-safe, so this may also run between fork and exec.
    unsafe {
        libc::signal(sig, handler);
    }
}

fn kill_group(pgid: Pid, sig: Signal) {
    // ESRCH: the group is already gone, which is what we want.
    let _ = rustix::process::kill_process_group(pgid, sig);
}

/// Whether any process is left in group `pgid` (a zombie leader counts until reaped).
fn group_alive(pgid: Pid) -> bool {
    // EPERM would mean a member we may not signal (a setuid program): we cannot
    // stop it either, so do not wait for it.
    rustix::process::test_kill_process_group(pgid).is_ok()
}

/// How the command ended, as the guard reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
}

impl Status {
    /// The exit code a shell would report: the code, or 128 + the signal.
    pub(crate) fn exit_code(self) -> u8 {
        match self {
            Status::Code(c) => (c & 0xff) as u8,
            Status::Signal(s) => u8::try_from(128 + s).unwrap_or(255),
        }
    }
}

/// Runs the command; returns its status as the exit code. Synchronous: no runtime.
pub(crate) fn guard_main(args: &GuardArgs) -> ExitCode {
    for sig in GUARD_IGNORES {
        set_disposition(sig, true);
    }
    let fds = inherited(args.control_fd).and_then(|c| Ok((c, inherited(args.report_fd)?)));
    let (control, report) = match fds {
        Ok(fds) => fds,
        Err(e) => {
            let _ = writeln!(io::stderr(), "tenure: `tenure __guard` is started by `tenure lock` only ({e})");
            return exit::code(exit::USAGE);
        }
    };
    let mut guard = Guard {
        report: File::from(report),
        control: Some(File::from(control)),
        pgid: None,
        grace: u64::try_from(args.grace.as_nanos()).unwrap_or(u64::MAX),
        deadline: args.deadline_ns,
        stopping: None,
        buf: Vec::new(),
    };
    ExitCode::from(guard.run(args))
}

/// Takes ownership of a descriptor `tenure` passed down, and keeps it from the command.
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
    report: File,
    control: Option<File>,
    pgid: Option<Pid>,
    grace: u64,
    deadline: u64,
    stopping: Option<Stopping>,
    buf: Vec<u8>,
}

impl Guard {
    fn send(&mut self, line: &str) {
        let line = format!("{}\n", line.replace('\n', " "));
        // EPIPE: tenure is gone; there is nobody left to tell.
        let _ = self.report.write_all(line.as_bytes());
    }

    fn run(&mut self, args: &GuardArgs) -> u8 {
        let stdin = rustix::stdio::stdin();
        let foreground = if args.foreground { rustix::termios::tcgetpgrp(stdin).ok() } else { None };
        let Some((program, rest)) = args.command.split_first() else {
            self.send("failed 64 no command given");
            return exit::USAGE;
        };
        let mut cmd = std::process::Command::new(program);
        cmd.args(rest).process_group(0);
        let mut reset = [0i32; GUARD_IGNORES.len()];
        let mut n = 0;
        for sig in GUARD_IGNORES.into_iter().filter(|s| !args.keep_ignored.contains(s)) {
            reset[n] = sig;
            n += 1;
        }
        let parent = rustix::process::getpid();
        // Orphans of the command's group become the guard's children, and the guard
        // reaps them: a zombie still counts as a member of its group, and the init
        // of a container may never reap it.
        if let Err(e) = rustix::process::set_child_subreaper(Some(parent)) {
            tracing::debug!(error = %e, "cannot become a child subreaper");
        }
        let take_terminal = foreground.is_some();
        let report = self.report.as_raw_fd();
        // SAFETY: the closure runs in the forked child before exec. It only makes
        // async-signal-safe system calls (prctl, getppid, getpid, tcsetpgrp,
        // signal, write) on data copied into it, and does not allocate. `report`
        // is open: the guard owns it, and the child's copy lives until exec.
        unsafe {
            cmd.pre_exec(move || child_setup(parent, take_terminal, &reset[..n], report));
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
            && rustix::termios::tcgetpgrp(stdin).is_ok_and(|now| now != original)
        {
            // SIGTTOU is ignored, so the guard may take the terminal back from the
            // background; fails harmlessly if tenure's group is gone.
            let _ = rustix::termios::tcsetpgrp(stdin, original);
        }
        let status = match (status, spawned) {
            (Some(status), _) => status,
            (None, Err(e)) => {
                // As shells do: 127 when there is no such program, 126 when it cannot run.
                let code = if e.kind() == io::ErrorKind::NotFound { 127 } else { 126 };
                self.send(&format!("failed {code} {e}"));
                return code;
            }
            (None, Ok(_)) => Status::Code(i32::from(exit::INTERNAL)),
        };
        match status {
            Status::Code(c) => self.send(&format!("exited {c}")),
            Status::Signal(s) => self.send(&format!("killed {s}")),
        }
        status.exit_code()
    }

    /// Waits for the leader and then for its group to empty, enforcing the deadline.
    fn supervise(&mut self, pgid: Pid) -> Status {
        let pidfd = rustix::process::pidfd_open(pgid, PidfdFlags::empty()).ok();
        let mut leader: Option<Status> = None;
        // While the group drains, poll it often at first, then back off to TICK: a
        // member stuck in the kernel (a hung NFS mount) may take minutes to die.
        let mut drain = DRAIN_TICK;
        loop {
            let reaped = self.reap(pgid);
            if leader.is_none() && reaped.is_some() {
                leader = reaped;
                if group_alive(pgid) && self.stopping.is_none() {
                    self.begin("leftovers");
                }
            }
            if let Some(status) = leader
                && !group_alive(pgid)
            {
                return status;
            }
            let now = mono_now_ns();
            self.timers(now);
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

    /// Reaps every child that ended — the leader, and the orphans of its group that
    /// were re-parented to the guard — and returns the leader's status once it
    /// ended. Continues the group if ^Z stopped one of its members.
    fn reap(&mut self, leader: Pid) -> Option<Status> {
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
                Ok(None) => return status,
                // No children at all: the leader cannot be waited for any more. Only
                // meaningful before it was reaped, and then it must not spin the loop.
                Err(_) => return status.or(Some(Status::Code(i32::from(exit::INTERNAL)))),
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
            }
            _ => {}
        }
    }

    /// Starts stopping the group: SIGTERM now, SIGKILL after the grace, never
    /// later than the deadline.
    fn begin(&mut self, why: &str) {
        if self.stopping.is_some() {
            return;
        }
        let Some(pgid) = self.pgid else { return };
        kill_group(pgid, Signal::TERM);
        kill_group(pgid, Signal::CONT);
        let now = mono_now_ns();
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
    }

    fn command(&mut self, line: &str) {
        let (verb, arg) = line.split_once(' ').unwrap_or((line, ""));
        match (verb, arg.parse::<u64>()) {
            ("deadline", Ok(ns)) => {
                self.deadline = ns;
                if let Some(s) = &mut self.stopping {
                    s.kill_at = s.kill_at.min(ns);
                }
            }
            ("stop", _) => self.begin("lost"),
            ("signal", Ok(n)) => {
                let sig = i32::try_from(n).ok().and_then(Signal::from_named_raw);
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

/// In the child, between fork and exec: async-signal-safe calls only.
///
/// The child itself reports `started <pid>` as its last step: the report is in
/// tenure's pipe before the command can run, so tenure knows the group to kill
/// even if the guard dies right after the spawn (were the guard to report it
/// after `spawn` returned, a guard killed in between would leave tenure blind).
fn child_setup(parent: Pid, take_terminal: bool, reset: &[i32], report: RawFd) -> io::Result<()> {
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
    let mut line = *b"started 0000000000\n";
    let mut pid = rustix::process::getpid().as_raw_nonzero().get().unsigned_abs();
    for digit in line[8..18].iter_mut().rev() {
        *digit = b'0' + (pid % 10) as u8;
        pid /= 10;
    }
    // SAFETY: `report` is open in this process until exec (see the caller).
    let report = unsafe { std::os::fd::BorrowedFd::borrow_raw(report) };
    // Far below PIPE_BUF: all or nothing. EPIPE: tenure is gone, the guard acts.
    let _ = rustix::io::write(report, &line);
    Ok(())
}

/// What the guard reports.
#[derive(Debug)]
pub(crate) enum Event {
    /// The command runs, as the leader of process group `pid`.
    Started(i32),
    /// The guard began stopping the group: `deadline` (no renewal in time),
    /// `lost` (tenure said so) or `leftovers` (the leader exited, members remain).
    Stopping(String),
    /// The command could not be started.
    Failed {
        /// 127 (not found) or 126 (cannot execute).
        code: u8,
        /// Why, for humans.
        message: String,
    },
    /// The command and every process of its group are gone.
    Exited(Status),
    /// The guard ended without a final report (it was killed).
    GuardLost(String),
}

/// What the command needs to start.
#[derive(Debug)]
pub(crate) struct Spec<'a> {
    pub(crate) command: &'a [OsString],
    pub(crate) env: Vec<(&'static str, String)>,
    pub(crate) grace: Duration,
    pub(crate) deadline_ns: u64,
    pub(crate) foreground: bool,
    pub(crate) keep_ignored: Vec<i32>,
}

/// `tenure`'s side of the guard.
#[derive(Debug)]
pub(crate) struct Supervisor {
    control: Option<OwnedFd>,
    report: tokio::net::unix::pipe::Receiver,
    guard: tokio::process::Child,
    buf: Vec<u8>,
    eof: bool,
    pgid: Option<Pid>,
}

impl Supervisor {
    /// Starts the guard, which starts the command.
    pub(crate) fn spawn(spec: &Spec<'_>) -> Result<Self> {
        let (control_r, control_w) = io::pipe().context("creating the guard's control pipe")?;
        let (report_r, report_w) = io::pipe().context("creating the guard's report pipe")?;
        let (control_r, report_w) = (OwnedFd::from(control_r), OwnedFd::from(report_w));
        // Everything that can fail on our side is done before the guard starts: once
        // it runs the command, only its report may end the supervision.
        let control_w = OwnedFd::from(control_w);
        rustix::fs::fcntl_setfl(&control_w, rustix::fs::OFlags::NONBLOCK)?;
        let report = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(report_r))
            .context("watching the guard's report pipe")?;
        // The guard's two ends must survive exec. This thread is the only one that
        // starts processes, and our copies are closed right after the spawn; the
        // control pipe's write end stays close-on-exec, so only tenure holds it.
        rustix::io::fcntl_setfd(&control_r, FdFlags::empty())?;
        rustix::io::fcntl_setfd(&report_w, FdFlags::empty())?;
        let exe = if std::path::Path::new("/proc/self/exe").exists() {
            std::path::PathBuf::from("/proc/self/exe")
        } else {
            std::env::current_exe().context("finding the tenure executable")?
        };
        let mut cmd = tokio::process::Command::new(exe);
        cmd.arg0("tenure")
            .arg("__guard")
            .arg("--control-fd")
            .arg(control_r.as_raw_fd().to_string())
            .arg("--report-fd")
            .arg(report_w.as_raw_fd().to_string())
            .arg("--grace")
            .arg(format!("{}ms", spec.grace.as_millis()))
            .arg("--deadline-ns")
            .arg(spec.deadline_ns.to_string());
        if spec.foreground {
            cmd.arg("--foreground");
        }
        if !spec.keep_ignored.is_empty() {
            let list: Vec<String> = spec.keep_ignored.iter().map(i32::to_string).collect();
            cmd.arg("--keep-ignored").arg(list.join(","));
        }
        cmd.arg("--").args(spec.command).envs(spec.env.iter().map(|(k, v)| (*k, v.as_str()))).process_group(0);
        let guard = cmd.spawn().context("starting the guard process")?;
        drop((control_r, report_w));
        Ok(Self { control: Some(control_w), report, guard, buf: Vec::new(), eof: false, pgid: None })
    }

    fn send(&mut self, line: &str) {
        let Some(fd) = &self.control else { return };
        // Lines are far below PIPE_BUF, so a write is all or nothing.
        match rustix::io::write(fd, line.as_bytes()) {
            Ok(_) => {}
            Err(Errno::AGAIN) => tracing::warn!(line, "the guard is not reading its control pipe"),
            Err(_) => self.control = None,
        }
    }

    /// The group must be dead by `ns` (CLOCK_MONOTONIC) unless a later deadline comes.
    pub(crate) fn set_deadline(&mut self, ns: u64) {
        self.send(&format!("deadline {ns}\n"));
    }

    /// Stop the group now (SIGTERM, then SIGKILL after the grace or at the deadline).
    pub(crate) fn stop(&mut self) {
        self.send("stop\n");
    }

    /// Forward `sig` to the command's process group.
    pub(crate) fn forward(&mut self, sig: i32) {
        self.send(&format!("signal {sig}\n"));
    }

    /// The next report from the guard. Cancel-safe.
    pub(crate) async fn next(&mut self) -> Event {
        loop {
            if let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=end).collect();
                if let Some(event) = parse(String::from_utf8_lossy(&line).trim()) {
                    if let Event::Started(pid) = event {
                        self.pgid = Pid::from_raw(pid);
                    }
                    return event;
                }
                continue;
            }
            if self.eof {
                return self.guard_lost().await;
            }
            if self.report.readable().await.is_err() {
                self.eof = true;
                continue;
            }
            let mut chunk = [0u8; 512];
            match self.report.try_read(&mut chunk) {
                Ok(0) => self.eof = true,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => self.eof = true,
            }
        }
    }

    /// The guard closed its report pipe without a final status: it was killed. Its
    /// command's leader died with it (parent-death signal); kill what is left.
    async fn guard_lost(&mut self) -> Event {
        if let Some(pgid) = self.pgid {
            kill_group(pgid, Signal::KILL);
        }
        let how = match self.guard.wait().await {
            Ok(st) => st.to_string(),
            Err(e) => e.to_string(),
        };
        Event::GuardLost(format!(
            "the guard process ended unexpectedly ({how}); the command's process group was killed"
        ))
    }

    /// Reaps the guard after its final report.
    pub(crate) async fn finish(mut self) {
        self.control = None;
        let _ = self.guard.wait().await;
    }
}

fn parse(line: &str) -> Option<Event> {
    let (verb, rest) = line.split_once(' ').unwrap_or((line, ""));
    match verb {
        "started" => rest.parse().ok().map(Event::Started),
        "stopping" => Some(Event::Stopping(rest.to_string())),
        "failed" => {
            let (code, message) = rest.split_once(' ').unwrap_or((rest, ""));
            Some(Event::Failed { code: code.parse().unwrap_or(126), message: message.to_string() })
        }
        "exited" => rest.parse().ok().map(|c| Event::Exited(Status::Code(c))),
        "killed" => rest.parse().ok().map(|s| Event::Exited(Status::Signal(s))),
        _ => None,
    }
}
