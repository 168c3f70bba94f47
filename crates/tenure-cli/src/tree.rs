//! The processes a command started, wherever they went: found through `/proc`.
//!
//! A command's process group does not hold everything it started: `setsid cmd &`
//! and daemons (fork, `setsid`, fork again) leave it. The guard is a *child
//! subreaper* (`PR_SET_CHILD_SUBREAPER`), and so is `tenure lock` itself: an
//! orphan is re-parented to the nearest subreaper above it instead of to init, so
//! every process the command started, however it detached, stays a descendant of
//! the guard (and of `tenure`) until it is reaped. Walking `/proc` for the
//! processes whose parent chain leads to the root therefore finds all of them.
//!
//! A cgroup would find them too, without the walk, but only where cgroup v2 is
//! mounted and delegated writable to the user; machines with v1 or a read-only
//! hierarchy (containers, most CI runners) have none. The walk works everywhere
//! `/proc` is mounted, which `tenure lock` already needs.
//!
//! Signals go through a pidfd opened *before* the process's membership is checked
//! once more, so a pid that was reaped and reused by an unrelated process between
//! the walk and the signal is never signalled.

use std::collections::{HashMap, HashSet};
use std::io::Read;

use rustix::process::{Pid, PidfdFlags, Signal};

/// What `/proc/<pid>/stat` says about one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub(crate) ppid: i32,
    /// Its process group.
    pub(crate) pgrp: i32,
    pub(crate) zombie: bool,
    /// A zombie's wait status (`exit_code`, Linux 3.5+), as `waitpid` gives it.
    pub(crate) wait_status: Option<i32>,
}

/// Reads `/proc/<pid>/stat`: `None` if the process is gone or the line is not
/// what Linux writes.
pub(crate) fn stat(pid: i32) -> Option<Stat> {
    let mut text = String::new();
    // A stat line is a few hundred bytes; the cap only guards against a surprise.
    std::fs::File::open(format!("/proc/{pid}/stat")).ok()?.take(4096).read_to_string(&mut text).ok()?;
    parse_stat(&text)
}

/// `pid (comm) state ppid pgrp …`: the command name may hold spaces and
/// parentheses, so the fields are those after the *last* `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let zombie = fields.first()?.starts_with('Z');
    let ppid = fields.get(1)?.parse().ok()?;
    let pgrp = fields.get(2)?.parse().ok()?;
    // Field 52 of the line is the 50th after the command name.
    let wait_status = if zombie { fields.get(49).and_then(|f| f.parse().ok()) } else { None };
    Some(Stat { ppid, pgrp, zombie, wait_status })
}

/// Every live (not zombie) process descending from `root`, `root` excluded.
pub(crate) fn descendants(root: Pid) -> Vec<i32> {
    let root = root.as_raw_nonzero().get();
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    let mut zombies = HashSet::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()).filter(|&p| p > 0) else {
            continue;
        };
        if let Some(st) = stat(pid) {
            children.entry(st.ppid).or_default().push(pid);
            if st.zombie {
                zombies.insert(pid);
            }
        }
    }
    let mut found = Vec::new();
    let mut stack = vec![root];
    let mut seen = HashSet::from([root]);
    while let Some(parent) = stack.pop() {
        for &child in children.get(&parent).map_or(&[][..], Vec::as_slice) {
            // `seen` also guards against a cycle, which a racy walk could assemble.
            if seen.insert(child) {
                stack.push(child);
                if !zombies.contains(&child) {
                    found.push(child);
                }
            }
        }
    }
    found
}

/// Sends `sigs` (in order) to every live descendant of `root` except `except`.
/// Returns how many there were.
pub(crate) fn signal_descendants(root: Pid, except: Option<Pid>, sigs: &[Signal]) -> usize {
    let except = except.map(|p| p.as_raw_nonzero().get());
    signal_where(root, sigs, |pid, _| Some(pid) != except)
}

/// Sends `sigs` (in order) to every live descendant of `root` outside process
/// group `group`: what left the command's group, after the group itself was
/// signalled (a process must not get the same SIGTERM twice: a second one
/// means "stop now" to many programs, cutting their cleanup short). Returns how
/// many there were.
pub(crate) fn signal_leavers(root: Pid, group: Pid, sigs: &[Signal]) -> usize {
    let group = group.as_raw_nonzero().get();
    signal_where(root, sigs, |_, st| st.pgrp != group)
}

/// Signals the descendants of `root` that `keep` accepts; how many it accepted.
fn signal_where(root: Pid, sigs: &[Signal], keep: impl Fn(i32, &Stat) -> bool) -> usize {
    let all = descendants(root);
    let members: HashSet<i32> = all.iter().copied().chain([root.as_raw_nonzero().get()]).collect();
    let mut signalled = 0;
    for pid in all {
        let Some(target) = Pid::from_raw(pid) else { continue };
        let Ok(pidfd) = rustix::process::pidfd_open(target, PidfdFlags::empty()) else { continue };
        // The pidfd names one process for good; check that it is still the one
        // the walk found (its parent in the tree), then signal through it.
        if stat(pid).is_some_and(|st| members.contains(&st.ppid) && keep(pid, &st)) {
            signalled += 1;
            for &sig in sigs {
                let _ = rustix::process::pidfd_send_signal(&pidfd, sig);
            }
        }
    }
    signalled
}

/// This process's group, or `None` when its leader lies outside our PID
/// namespace (a container entered without a session of its own): the kernel
/// then reports 0, which rustix's non-zero `Pid` cannot hold.
#[allow(unsafe_code)]
pub(crate) fn own_group() -> Option<Pid> {
    // SAFETY: getpgrp(2) takes no arguments and cannot fail.
    let raw = unsafe { libc::getpgrp() };
    (raw > 0).then(|| Pid::from_raw(raw)).flatten()
}

/// The foreground process group of the terminal on `fd`: `None` when `fd` is
/// not our controlling terminal or the terminal hung up (-1), or when that
/// group lies outside our PID namespace (reported as 0, as for [`own_group`]).
#[allow(unsafe_code)]
pub(crate) fn foreground_group(fd: std::os::fd::BorrowedFd<'_>) -> Option<Pid> {
    // SAFETY: tcgetpgrp(3) reads no memory of ours; a bad descriptor is an error (-1).
    let raw = unsafe { libc::tcgetpgrp(std::os::fd::AsRawFd::as_raw_fd(&fd)) };
    (raw > 0).then(|| Pid::from_raw(raw)).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_whatever_the_command_name() {
        // Fields 3 (state) to 52 (exit_code), as Linux writes them.
        let line = |state: &str, code: i32| format!("42 (a) b (c)) {state} 7 {}{code}\n", "0 ".repeat(47));
        assert_eq!(parse_stat(&line("S", 0)), Some(Stat { ppid: 7, pgrp: 0, zombie: false, wait_status: None }));
        assert_eq!(parse_stat(&line("Z", 256)), Some(Stat { ppid: 7, pgrp: 0, zombie: true, wait_status: Some(256) }));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S notanumber"), None);
        assert_eq!(parse_stat("1 (x) Z 5 9"), Some(Stat { ppid: 5, pgrp: 9, zombie: true, wait_status: None }));
    }

    fn tree_has_live(pid: i32) -> bool {
        stat(pid).is_some_and(|st| !st.zombie)
    }

    #[test]
    fn a_live_child_is_a_descendant_until_it_is_reaped() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("spawn sleep");
        let me = rustix::process::getpid();
        let pid = i32::try_from(child.id()).expect("pid");
        assert!(descendants(me).contains(&pid));
        // SIGCONT goes through the pidfd check and does nothing to a running
        // sleep (other tests of this process may have children of their own).
        assert!(signal_descendants(me, None, &[Signal::CONT]) >= 1);
        assert!(tree_has_live(pid));
        // In our own group, so not a leaver of it; a leaver of any other group.
        let mine = own_group().expect("the test's group is in our namespace");
        assert_eq!(stat(pid).map(|st| st.pgrp), Some(mine.as_raw_nonzero().get()));
        let before = signal_leavers(me, mine, &[Signal::CONT]);
        assert!(signal_leavers(me, Pid::from_raw(i32::MAX).expect("pid"), &[Signal::CONT]) > before);
        let _ = child.kill();
        let _ = child.wait();
        assert!(!descendants(me).contains(&pid));
    }
}
