//! The guard: a small process that runs the command and stops it — its process
//! group and every process it started — when `tenure` can no longer vouch for
//! the lease; and `tenure`'s side of it, which watches the guard in turn.
//!
//! ```text
//! shell ── tenure (its own job's process group: receives ^C, kill %1; a child subreaper)
//!            │   control pipe ──▶  start <ns> <token> <ms> (first, once granted) |
//!            │                      orphan <json> | orphan - | deadline <ns> | stop [signal] | signal <n>
//!            │   report pipe  ◀──  started <pid> (from the command, just before exec) | alive |
//!            │                      leader exited <n> | leader killed <n> | stopping <why> |
//!            │                      failed <code> <msg> | exited <n> | killed <n>
//!            └─ tenure __guard (a process group of its own: no terminal or job signals; a child subreaper)
//!                 ├─ command (a new process group C, the terminal's foreground if tenure had it)
//!                 │    └─ its children (group C)
//!                 └─ what the command detached (`setsid`, daemons): re-parented to the guard
//! ```
//!
//! **Started early.** `tenure` starts the guard before it asks for the lease,
//! and the guard waits, running nothing, until `start` comes with the first
//! deadline and the grant (or until the control pipe closes: `tenure` gave up
//! or died, and the guard exits). The guard's own start, a second start of the
//! tenure executable, then overlaps the wait instead of coming between the
//! grant and the command: a waiter that is handed the lease starts its command
//! at once.
//!
//! `PR_SET_PDEATHSIG` alone is not enough: it reaches the direct child only (not
//! `sh -c 'a & b'`'s children) and fires when the *thread* that forked exits. The
//! guard instead holds the read end of a pipe whose only write end is in `tenure`
//! (close-on-exec, so nothing else inherits it). The guard stops the command —
//! SIGTERM (and SIGCONT, for stopped members), then SIGKILL — when:
//! - the pipe reports EOF: `tenure` died, even by SIGKILL (or, alive, closed it
//!   to stop the command itself, see `take_over`). Once nothing of the command
//!   runs, and if `tenure` is gone (the guard's parent changed), the guard then
//!   releases the lease itself: `orphan` (sent right after `start`) gave it the
//!   arguments of a `tenure break` of that grant alone, which it runs with them
//!   on standard input (never in a process listing: a store's URL may hold a
//!   password); `orphan -`, sent before `tenure` closes the pipe on purpose,
//!   takes them back;
//! - `tenure` says `stop`: the lease was lost, or a second SIGINT/SIGTERM came;
//! - the deadline `tenure` last sent (the lease's `stop_by`, pushed back at every
//!   renewal) is less than the grace away: renewals are failing, or `tenure` is
//!   frozen (SIGSTOP, a hung runtime). The guard does not need `tenure` to be
//!   alive to enforce it;
//! - the command exited and left processes behind: they are stopped before the
//!   final status is reported, so the lease is released only when nothing of the
//!   command runs.
//!
//! **Everything the command started.** Stopping signals group C, and every
//! descendant of the guard outside it ([`crate::tree`]: the guard is a child
//! subreaper, so detached processes and daemons are re-parented to it and found
//! by a walk of `/proc`; no cgroup is needed). What runs when stopping begins
//! gets SIGTERM, once, like the group: what the command forks while it stops (a
//! cleanup handler's `rm`) is part of stopping gracefully. When the grace is over,
//! every descendant gets SIGKILL, at every pass until none is left, since they
//! may have forked meanwhile.
//! The guard reports the final status only when it has no child left at all.
//!
//! The SIGKILL lands at `min(start of stopping + grace, deadline)`: always before
//! the lease's `stop_by`, which is its deadline minus the safety margin, so the
//! command is dead before any contender can take the lease over. The guard is the
//! command's parent and reaps the leader, so its pid cannot be reused while the
//! guard may still signal group C.
//!
//! **Clock.** Deadlines are absolute `CLOCK_BOOTTIME` nanoseconds
//! ([`boot_now_ns`]), which keep counting while the machine is suspended: a
//! suspended holder's `CLOCK_MONOTONIC` stops, so a deadline on it would slip past
//! the moment other machines take the lease over. After a resume the guard sees
//! at once (within one [`TICK`]) that the deadline passed. `tenure` converts its
//! lease clock's `stop_by` to this clock (`lock::to_boot_ns`).
//!
//! **The guard is watched too.** A thread of the guard writes `alive` on its
//! report pipe every [`HEARTBEAT`], as long as the guard's loop made a pass within
//! [`STALL`] (so slow passes — a loaded machine, a slow `/proc` — do not silence
//! it). If nothing comes for one renewal interval of the lease (at least
//! [`MIN_SILENCE`]), and still nothing in the [`CONFIRM`] after `tenure` itself
//! woke up (so that a loaded machine's scheduling delay is not taken for a
//! hang), the guard is stopped or hung and enforces nothing: `tenure`
//! takes over ([`Supervisor::take_over`]). Before the guard said the command
//! started, silence is allowed until the last moment it may start it (the
//! first deadline less the grace, which the child checks before `exec`): a
//! guard slow to start holds up nothing, and a late one cannot start it.
//! `tenure` stops the command's processes itself on the same schedule
//! (SIGTERM, SIGKILL within the grace and never later than `stop_by`), kills
//! the guard, and only then lets the lease go. Silence is
//! measured on `CLOCK_MONOTONIC` (tokio's timers): a suspend stops both
//! processes, and must not look like a silent guard. The guard never blocks on
//! its report pipe: lines that matter wait until `tenure` reads, heartbeats that
//! do not fit are dropped, so a frozen `tenure` cannot freeze the guard.
//!
//! The guard ignores SIGINT, SIGQUIT, SIGTERM, SIGHUP and the job-control signals:
//! those are for `tenure`, which forwards them (the command gets its signals from
//! exactly one place). The command gets default dispositions back, except for
//! signals `tenure` itself was started with ignored (`nohup`). As a last resort the
//! command's leader has `PR_SET_PDEATHSIG = SIGKILL` against the guard, and
//! `tenure` is a child subreaper too: if the guard is killed, what the command
//! detached is re-parented to `tenure`, which kills it.
//!
//! Terminal: if `tenure` owns the terminal's foreground, the command's group takes
//! it in the child just before `exec` (so the command never runs in the background
//! and cannot get SIGTTIN), and the guard gives it back to `tenure`'s group after
//! the group is gone, with SIGTTOU ignored so that a background process may do so.
//! Job control (^Z) is not supported under a lease: a command stopped by SIGTSTP is
//! continued at once, with a note.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use anyhow::{Context, Result};
use rustix::io::{Errno, FdFlags};
use rustix::process::{Pid, Signal};
use tokio::time::Instant;

use crate::tree;

mod report;

pub(crate) use report::{Event, Leader, MAX_LINE, MAX_ORPHAN_LINE, Status};
use report::{Report, parse};

/// Longest sleep of the guard's loop: it also notices a stopped command this often.
pub(crate) const TICK: Duration = Duration::from_millis(100);
/// How soon the guard first checks whether what the leader left has gone.
pub(crate) const DRAIN_TICK: Duration = Duration::from_millis(10);
/// How often the guard says it is alive.
pub(crate) const HEARTBEAT: Duration = Duration::from_millis(250);
/// The shortest silence after which `tenure` takes over from its guard.
pub(crate) const MIN_SILENCE: Duration = Duration::from_secs(2);
/// After a silence, how long `tenure` listens again, once it runs itself, before
/// it calls the guard silent: four heartbeats.
const CONFIRM: Duration = Duration::from_secs(1);
/// How long the guard's loop may go without a pass before its heartbeats stop:
/// a pass that is only slow (a loaded machine, a slow `/proc`) keeps them going,
/// a loop stuck for good does not.
pub(crate) const STALL: Duration = Duration::from_secs(10);

/// `CLOCK_BOOTTIME` now, in nanoseconds: the clock of the guard's deadlines, which
/// keeps counting while the machine is suspended.
pub(crate) fn boot_now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    u64::try_from(t.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(t.tv_nsec).unwrap_or(0))
}

/// Whether `sig` is ignored (`SIG_IGN`) in this process.
#[allow(unsafe_code)]
pub(crate) fn is_ignored(sig: i32) -> bool {
    // SAFETY: an all-zero `sigaction` is a valid value, and with a null `act` the
    // call only reads the current disposition into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Sets `sig` to `SIG_IGN` or `SIG_DFL`. Async-signal-safe.
#[allow(unsafe_code)]
pub(crate) fn set_disposition(sig: i32, ignore: bool) {
    let handler = if ignore { libc::SIG_IGN } else { libc::SIG_DFL };
    // SAFETY: installs no handler code, only one of the two kernel dispositions;
    // signal(2) is async-signal-safe, so this may also run between fork and exec.
    unsafe {
        libc::signal(sig, handler);
    }
}

pub(crate) fn kill_group(pgid: Pid, sig: Signal) {
    // ESRCH: the group is already gone, which is what we want.
    let _ = rustix::process::kill_process_group(pgid, sig);
}

/// Whether any process is left in group `pgid` (a zombie leader counts until reaped).
pub(crate) fn group_alive(pgid: Pid) -> bool {
    // EPERM would mean a member we may not signal (a setuid program): we cannot
    // stop it either, so do not wait for it.
    rustix::process::test_kill_process_group(pgid).is_ok()
}

/// What the guard needs before the lease is granted.
#[derive(Debug)]
pub(crate) struct Spec<'a> {
    pub(crate) command: &'a [OsString],
    /// The command's environment that is known before the grant.
    pub(crate) env: Vec<(&'static str, String)>,
    pub(crate) grace: Duration,
    pub(crate) foreground: bool,
    pub(crate) keep_ignored: Vec<i32>,
    /// How long the guard may stay silent before `tenure` takes over.
    pub(crate) silence: Duration,
}

/// `tenure`'s side of the guard.
#[derive(Debug)]
pub(crate) struct Supervisor {
    control: Option<OwnedFd>,
    report: tokio::net::unix::pipe::Receiver,
    guard: tokio::process::Child,
    guard_pid: Option<Pid>,
    buf: Vec<u8>,
    eof: bool,
    pgid: Option<Pid>,
    /// The leader's status, once the guard reported it (before its leftovers are gone).
    leader: Option<Status>,
    silence: Duration,
    last_heard: Instant,
    grace: Duration,
    /// Once the lease is granted: the last moment the guard may start the
    /// command (the first deadline less the grace; see `guard::child`).
    start_by: Option<Instant>,
    /// Set when the silence limit passed: until when we listen again before
    /// calling the guard silent (kept here: [`Supervisor::next`] is cancel-safe).
    confirm_until: Option<Instant>,
}

/// What the guard is told when the lease is granted: the first deadline
/// (`CLOCK_BOOTTIME` ns) and the grant the command learns of from its
/// environment (`TENURE_TOKEN`, `TENURE_DEADLINE`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Start {
    pub(crate) deadline_ns: u64,
    pub(crate) token: u64,
    pub(crate) deadline_ms: u64,
}

impl Supervisor {
    /// Starts the guard, which waits for [`Supervisor::start`] to start the
    /// command (or for `tenure` to go, to exit with nothing started). It is
    /// started while the lease is awaited, so that its own start-up, a second
    /// start of the tenure executable, is not paid between the grant and the
    /// command.
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
        // Should the guard die, what the command detached comes to us, to be killed.
        if let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
            tracing::debug!(error = %e, "cannot become a child subreaper");
        }
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
            .arg(format!("{}ms", spec.grace.as_millis()));
        if spec.foreground {
            cmd.arg("--foreground");
        }
        if !spec.keep_ignored.is_empty() {
            let list: Vec<String> = spec.keep_ignored.iter().map(i32::to_string).collect();
            cmd.arg("--keep-ignored").arg(list.join(","));
        }
        cmd.arg("--").args(spec.command).envs(spec.env.iter().map(|(k, v)| (*k, v.as_str()))).process_group(0);
        let guard = cmd.spawn().context("starting the guard process")?;
        let guard_pid = guard.id().and_then(|id| Pid::from_raw(i32::try_from(id).ok()?));
        drop((control_r, report_w));
        Ok(Self {
            control: Some(control_w),
            report,
            guard,
            guard_pid,
            buf: Vec::new(),
            eof: false,
            pgid: None,
            leader: None,
            silence: spec.silence,
            last_heard: Instant::now(),
            grace: spec.grace,
            start_by: None,
            confirm_until: None,
        })
    }

    fn send(&mut self, line: &str) {
        let Some(fd) = &self.control else { return };
        // Lines are below PIPE_BUF, so a write is all or nothing.
        match rustix::io::write(fd, line.as_bytes()) {
            Ok(_) => {}
            // The verb only: an `orphan` line holds the store's URL and options.
            Err(Errno::AGAIN) => {
                let verb = line.split(' ').next().unwrap_or_default().trim_end();
                tracing::warn!(verb, "the guard is not reading its control pipe");
            }
            Err(_) => self.control = None,
        }
    }

    /// Whether the guard process has not ended (it may have been killed while
    /// it waited for the grant).
    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.guard.try_wait(), Ok(None))
    }

    /// The lease is granted: the guard starts the command. Silence is counted
    /// from now (the guard says nothing while it waits).
    pub(crate) fn start(&mut self, start: Start) {
        let Start { deadline_ns, token, deadline_ms } = start;
        self.send(&format!("start {deadline_ns} {token} {deadline_ms}\n"));
        let now = Instant::now();
        self.last_heard = now;
        let start_by_ns = deadline_ns.saturating_sub(u64::try_from(self.grace.as_nanos()).unwrap_or(u64::MAX));
        self.start_by = now.checked_add(Duration::from_nanos(start_by_ns.saturating_sub(boot_now_ns())));
    }

    /// When a guard that said nothing since `last_heard` is called silent.
    /// Before it said the command started, not before the last moment it may
    /// start it: until then a slow guard (a loaded machine, its first page
    /// faults on a slow disk) holds up nothing, since nothing runs, and after
    /// it the command cannot start at all.
    fn silent_at(&self) -> Instant {
        let heard = self.last_heard + self.silence;
        match self.start_by {
            Some(by) if self.pgid.is_none() => heard.max(by),
            _ => heard,
        }
    }

    /// How the guard releases the lease should `tenure` die while the command
    /// runs: the arguments of a `tenure break` of this grant alone, as JSON, run
    /// by the guard once the command and everything it started are gone (see
    /// [`crate::guard`]). Not sent if it would not fit one line.
    pub(crate) fn orphan(&mut self, break_args: &[String]) {
        let Ok(json) = serde_json::to_string(break_args) else { return };
        let line = format!("orphan {json}\n");
        if line.len() > MAX_ORPHAN_LINE {
            tracing::debug!(bytes = line.len(), "the store's settings are too long to pass to the guard");
            return;
        }
        self.send(&line);
    }

    /// The command must be dead by `ns` (CLOCK_BOOTTIME) unless a later deadline comes.
    pub(crate) fn set_deadline(&mut self, ns: u64) {
        self.send(&format!("deadline {ns}\n"));
    }

    /// Stop the command now (SIGTERM, then SIGKILL after the grace or at the deadline).
    pub(crate) fn stop(&mut self) {
        self.send("stop\n");
    }

    /// Stop the command now because `tenure` was asked to, twice.
    pub(crate) fn stop_for_signal(&mut self) {
        self.send("stop signal\n");
    }

    /// Forward `sig` to the command's process group.
    pub(crate) fn forward(&mut self, sig: i32) {
        self.send(&format!("signal {sig}\n"));
    }

    /// The next report from the guard, or [`Event::Silent`] once it said nothing
    /// (not even `alive`) for the silence limit. Cancel-safe.
    pub(crate) async fn next(&mut self) -> Event {
        loop {
            if let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=end).collect();
                match parse(String::from_utf8_lossy(&line).trim()) {
                    Some(Report::Event(event)) => {
                        if let Event::Started(pid) = event {
                            self.pgid = Pid::from_raw(pid);
                        }
                        return event;
                    }
                    Some(Report::Leader(status)) => self.leader = Some(status),
                    Some(Report::Alive) | None => {}
                }
                continue;
            }
            if self.buf.len() > MAX_LINE {
                // Not a line the guard writes: drop it rather than grow without bound.
                self.buf.clear();
            }
            if self.eof {
                return self.guard_lost().await;
            }
            match tokio::time::timeout_at(self.silent_at(), self.report.readable()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => self.eof = true,
                // The timer may fire before the reactor saw a line that did come
                // (after `tenure` itself was frozen): look at the pipe first.
                Err(_) => {
                    if self.read_raw() || self.eof {
                        continue;
                    }
                    // Silent by our clock. On a loaded machine (or a whole guest
                    // descheduled) `tenure` and the guard were both off the CPU:
                    // give the guard a few heartbeats now that we run again.
                    let until = *self.confirm_until.get_or_insert_with(|| Instant::now() + CONFIRM);
                    tokio::time::sleep_until(until).await;
                    if !self.read_raw() && !self.eof {
                        return Event::Silent(self.silence);
                    }
                    continue;
                }
            }
            let mut chunk = [0u8; 512];
            match self.report.try_read(&mut chunk) {
                Ok(0) => self.eof = true,
                Ok(n) => self.heard(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => self.eof = true,
            }
        }
    }

    fn heard(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        self.last_heard = Instant::now();
        self.confirm_until = None;
    }

    /// Reads the report pipe directly, past tokio's readiness cache; whether
    /// anything (or EOF) came.
    fn read_raw(&mut self) -> bool {
        let mut chunk = [0u8; 512];
        match rustix::io::read(&self.report, &mut chunk) {
            Ok(0) => {
                self.eof = true;
                true
            }
            Ok(n) => {
                self.heard(&chunk[..n]);
                true
            }
            Err(_) => false,
        }
    }

    /// Takes in what the guard wrote since it was last read (it may have woken
    /// after it was called silent): where the command stands, for
    /// [`Supervisor::take_over`]. Other reports no longer matter then.
    fn catch_up(&mut self) {
        // What a guard that just woke wrote is a few lines; the bound (32 KiB)
        // keeps anything more from holding `tenure` here.
        for _ in 0..64 {
            if !self.read_raw() || self.eof {
                break;
            }
        }
        while let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=end).collect();
            match parse(String::from_utf8_lossy(&line).trim()) {
                Some(Report::Event(Event::Started(pid))) => self.pgid = Pid::from_raw(pid),
                Some(Report::Leader(status)) => self.leader = Some(status),
                _ => {}
            }
        }
    }

    /// The guard closed its report pipe without a final status: it was killed. Its
    /// command's leader died with it (parent-death signal); kill what is left,
    /// in the group and outside it (re-parented to us, a subreaper).
    async fn guard_lost(&mut self) -> Event {
        if let Some(pgid) = self.pgid {
            kill_group(pgid, Signal::KILL);
        }
        let how = self.reap_guard().await;
        kill_all_descendants(None).await;
        Event::GuardLost(format!("the guard process ended unexpectedly ({how}); the command's processes were killed"))
    }

    /// Stops the command without its silent guard: SIGTERM to every process the
    /// command started (all descendants of the guard), SIGKILL at `kill_at`
    /// (CLOCK_BOOTTIME ns) to what is left, until nothing is; then kills the guard.
    /// Says where the command stood when the guard fell silent.
    pub(crate) async fn take_over(&mut self, kill_at: u64) -> Leader {
        // A guard that wakes up now sees EOF and stops too: the same thing. It
        // leaves the release to `tenure`, which is alive.
        self.send("orphan -\n");
        self.control = None;
        self.catch_up();
        let leader = match (self.leader, self.pgid) {
            (Some(status), _) => Leader::Ended(status),
            // Not said to have started: whatever the guard started is a process
            // below it (stopped below as the command's).
            (None, None) => {
                let me = rustix::process::getpid();
                let guard = self.guard_pid.map(raw);
                if tree::descendants(me).into_iter().any(|p| Some(p) != guard) {
                    Leader::Running
                } else {
                    Leader::NotStarted
                }
            }
            (None, Some(pgid)) => match tree::stat(pgid.as_raw_nonzero().get()) {
                Some(st) if !st.zombie => Leader::Running,
                // A zombie: it ended, and its silent parent never reaped it.
                Some(st) => st.wait_status.map_or(Leader::Unknown, |raw| Leader::Ended(Status::from_wait(raw))),
                None => Leader::Unknown,
            },
        };
        let me = rustix::process::getpid();
        // The guard (stopped or hung) is spared until the end: killing it first
        // would SIGKILL the leader at once (parent-death signal). SIGTERM goes
        // once to what runs now, as the guard does; then SIGKILL at every pass.
        tree::signal_descendants(me, self.guard_pid, &[Signal::TERM, Signal::CONT]);
        let mut pause = DRAIN_TICK;
        loop {
            let now = boot_now_ns();
            let left = if now >= kill_at {
                tree::signal_descendants(me, self.guard_pid, &[Signal::KILL])
            } else {
                tree::descendants(me).into_iter().filter(|&p| Some(p) != self.guard_pid.map(raw)).count()
            };
            if left == 0 {
                break;
            }
            let until_kill = Duration::from_nanos(kill_at.saturating_sub(now));
            let wait = if until_kill.is_zero() { pause } else { pause.min(until_kill) };
            tokio::time::sleep(wait).await;
            pause = (pause * 2).min(TICK);
        }
        self.kill_guard();
        self.reap_guard().await;
        kill_all_descendants(self.guard_pid).await;
        leader
    }

    fn kill_guard(&self) {
        if let Some(guard) = self.guard_pid {
            let _ = rustix::process::kill_process(guard, Signal::KILL);
        }
    }

    /// Waits for the guard to end, killing it if it lingers (stopped or hung
    /// after its last word); says how it ended. A guard stuck in the kernel is
    /// not waited for.
    async fn reap_guard(&mut self) -> String {
        let lingering = Duration::from_secs(1);
        let ended = match tokio::time::timeout(lingering, self.guard.wait()).await {
            Ok(ended) => ended,
            Err(_) => {
                self.kill_guard();
                match tokio::time::timeout(lingering, self.guard.wait()).await {
                    Ok(ended) => ended,
                    Err(_) => return "it does not end, even killed".into(),
                }
            }
        };
        match ended {
            Ok(st) => st.to_string(),
            Err(e) => e.to_string(),
        }
    }

    /// Reaps the guard after its final report (the command and everything it
    /// started are gone), or before any start (it sees the control pipe close
    /// and exits); a guard that lingers is killed.
    pub(crate) async fn finish(mut self) {
        self.control = None;
        self.reap_guard().await;
    }
}

fn raw(pid: Pid) -> i32 {
    pid.as_raw_nonzero().get()
}

/// SIGKILL to every live descendant of `tenure` (but `except`), until none is left.
async fn kill_all_descendants(except: Option<Pid>) {
    let me = rustix::process::getpid();
    while tree::signal_descendants(me, except, &[Signal::KILL]) > 0 {
        tokio::time::sleep(DRAIN_TICK).await;
    }
}
