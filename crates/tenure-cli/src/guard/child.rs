//! The command's side of the fork, between fork and exec: its own process group,
//! the terminal if it is ours, signal dispositions reset, and the start deadline.

use std::io::{self};
use std::os::fd::{AsFd, RawFd};

use rustix::process::{Pid, Signal};

use crate::supervise::{boot_now_ns, set_disposition};

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
pub(super) fn child_setup(
    parent: Pid,
    take_terminal: bool,
    reset: &[i32],
    report: RawFd,
    start_by: u64,
) -> io::Result<()> {
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
