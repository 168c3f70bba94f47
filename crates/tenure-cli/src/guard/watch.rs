//! The guard's supervision: runs the command in its process group, follows
//! `tenure`'s heartbeat and commands, reaps the command and what it left, and
//! stops them all (TERM, then KILL after the grace) when the lease is at risk.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags, Signal, WaitOptions};

use crate::exit;
use crate::supervise::{
    DRAIN_TICK, MAX_LINE, MAX_ORPHAN_LINE, Start, Status, TICK, boot_now_ns, group_alive, kill_group,
};
use crate::tree;

use super::child::child_setup;
use super::{GUARD_IGNORES, GuardArgs};

pub(super) struct Stopping {
    pub(super) kill_at: u64,
    pub(super) killed: bool,
}

pub(super) struct Guard {
    /// `None` once `tenure` closed its end.
    pub(super) report: Option<File>,
    /// Report lines not yet written (the pipe was full).
    pub(super) outbox: VecDeque<String>,
    /// When the loop last made a pass (`CLOCK_BOOTTIME` ns), for the heartbeat.
    pub(super) progress: Arc<AtomicU64>,
    pub(super) control: Option<File>,
    pub(super) pgid: Option<Pid>,
    pub(super) grace: u64,
    pub(super) deadline: u64,
    pub(super) stopping: Option<Stopping>,
    pub(super) buf: Vec<u8>,
    /// The arguments of `tenure break` that release the lease if `tenure`
    /// dies (see [`release_orphaned`](super::orphan::release_orphaned)).
    pub(super) orphan: Option<Vec<String>>,
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

    pub(super) fn run(&mut self, args: &GuardArgs, start: &Start) -> u8 {
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

pub(super) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
