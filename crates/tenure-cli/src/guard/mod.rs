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
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clap::Args;
use rustix::io::{Errno, FdFlags};
use rustix::process::Pid;

use crate::exit;
use crate::supervise::{DRAIN_TICK, HEARTBEAT, MAX_LINE, STALL, Start, boot_now_ns, set_disposition};

mod child;
mod orphan;
mod watch;

pub(crate) use orphan::{BREAK_ORPHANED, orphaned_break_args};
use orphan::{ORPHAN_PARENT_WAIT, release_orphaned};
use watch::{Guard, nanos};

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

#[cfg(test)]
mod tests {
    use super::orphan::break_args_from;
    use super::*;
    use crate::supervise::MAX_ORPHAN_LINE;

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
