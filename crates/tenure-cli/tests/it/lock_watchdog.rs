//! `tenure` watches its guard: a guard that stops answering (SIGSTOP here, as a
//! hung one would) is noticed within one renewal interval, and `tenure` stops
//! the command itself, kills the guard and releases the lease — instead of
//! renewing it forever for a command nobody supervises.

use crate::common;

use std::io::BufRead;
use std::time::{Duration, Instant};

use common::*;
use rustix::process::{Pid, PidfdFlags, Signal};

/// A 4s TTL is renewed every 500ms: tenure takes over after 2s of silence (the
/// floor) and 1s more of listening once it runs itself, so that a loaded
/// machine's scheduling delays do not look like a hang.
const TTL: &str = "4s";

/// Kills a process we stopped when the test ends, whatever happened: through a
/// pidfd, so that a pid reused after the process was reaped is never hit.
struct KillOnDrop(Option<rustix::fd::OwnedFd>);

impl KillOnDrop {
    fn new(pid: u32) -> Self {
        let pid = Pid::from_raw(i32::try_from(pid).expect("pid")).expect("pid");
        Self(rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok())
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(fd) = &self.0 {
            let _ = rustix::process::pidfd_send_signal(fd, Signal::KILL);
        }
    }
}

#[test]
fn a_stopped_guard_is_noticed_and_tenure_stops_the_running_command_itself_and_exits_76() {
    let store = FileStore::new();
    let pids_file = store.path("pids");
    let mut holder = start(&store, "watched", &["--ttl", TTL, "--kill-grace", "1s"], &sleepers(&pids_file));
    let pids = pids_of(&pids_file, 3);
    let guard = guard_of(&holder);
    let _cleanup = KillOnDrop::new(guard);

    signal(guard, Signal::STOP);
    let stopped_at = Instant::now();
    let (code, err) = finish(&mut holder);
    assert_eq!(code, Some(76), "the command was stopped: {err}");
    // 2s+1s of silence, then at most the 1s grace: well under the limit even when loaded.
    assert!(stopped_at.elapsed() < Duration::from_secs(15), "took {:?}", stopped_at.elapsed());
    assert!(pids.iter().all(|&p| !running(p)), "tenure exited before the command was gone: {}", survivors(&pids));
    assert!(!running(guard), "the silent guard was not killed");
    assert!(err.contains("stopped answering") && err.contains("released the lease"), "{err}");
    assert_eq!(err.lines().filter(|l| l.starts_with("tenure:")).count(), 1, "one line: {err}");
    assert!(lease_is_free(&store, "watched"), "the lease was not released");
}

#[test]
fn a_guard_stopped_when_its_command_ends_does_not_keep_the_lease_and_tenure_exits_with_the_commands_status() {
    let store = FileStore::new();
    let (pids_file, go) = (store.path("pids"), store.path("go"));
    // The command leaves a detached sleeper behind and exits 7 once told to.
    let script = format!(
        "echo $$ >> '{p}'; setsid sh -c 'echo $$ >> \"$0\"; exec sleep 300' '{p}' & \
         while [ ! -e '{go}' ]; do sleep 0.02; done; exit 7",
        p = pids_file.display(),
        go = go.display()
    );
    let mut holder = start(&store, "ended", &["--ttl", TTL], &script);
    let pids = pids_of(&pids_file, 2);
    let guard = guard_of(&holder);
    let _cleanup = KillOnDrop::new(guard);

    // The guard is stopped first, so it can neither reap the command nor report.
    signal(guard, Signal::STOP);
    std::fs::write(&go, "").expect("go");
    let (code, err) = finish(&mut holder);
    assert_eq!(code, Some(7), "the command's own status, read from its zombie: {err}");
    assert!(pids.iter().all(|&p| !running(p)), "something of the command outlived tenure: {}", survivors(&pids));
    assert!(err.contains("stopped answering") && err.contains("exited with status 7"), "{err}");
    assert!(lease_is_free(&store, "ended"), "the lease was not released");
}

#[test]
fn a_guard_stopped_while_it_drains_what_the_command_left_is_taken_over_with_the_commands_status() {
    let store = FileStore::new();
    let pids_file = store.path("pids");
    // The command exits 5 at once, leaving a detached loop that ignores SIGTERM
    // (and so do its sleeps): only SIGKILL, after the grace, ends it.
    let script = format!(
        "setsid sh -c 'trap \"\" TERM; echo $$ >> \"$0\"; while :; do sleep 0.05; done' '{p}' & \
         while [ ! -s '{p}' ]; do sleep 0.02; done; exit 5",
        p = pids_file.display()
    );
    // A 16s TTL: 2s of silence; the grace is 3s.
    let mut holder = start(&store, "draining", &["--ttl", "16s", "--kill-grace", "3s"], &script);
    let pids = pids_of(&pids_file, 1);
    let guard = guard_of(&holder);
    let _cleanup = KillOnDrop::new(guard);
    // tenure says when the guard begins to stop what the command left.
    let mut err = std::io::BufReader::new(holder.stderr.take().expect("stderr"));
    let mut seen = String::new();
    while !seen.contains("left processes") {
        assert_ne!(err.read_line(&mut seen).expect("read"), 0, "tenure ended early: {seen}");
    }
    signal(guard, Signal::STOP);
    let status = wait_status(&mut holder, LIMIT);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).expect("read");
    assert_eq!(status.code(), Some(5), "the command's own status, as the guard reported it: {seen}{rest}");
    assert!(pids.iter().all(|&p| !running(p)), "the detached loop outlived tenure: {}", survivors(&pids));
    assert!(rest.contains("stopped answering"), "{rest}");
    assert!(lease_is_free(&store, "draining"), "the lease was not released");
}

/// The guard of a waiting `tenure` (`name` must be held by another), stopped
/// while the lease is awaited: once granted, the command cannot start until
/// the guard runs again.
fn waiter_with_a_stopped_guard(store: &FileStore, name: &str, marks: &std::path::Path) -> (std::process::Child, u32) {
    assert!(!holders(&store.url(), name).is_empty(), "the waiter must wait: {name} is not held");
    let waiter =
        lock(&store.url(), name, &["--ttl", "16s"], &["sh", "-c", &format!("echo ran > '{}'", marks.display())])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn tenure lock");
    // The guard is started while the lease is awaited. It is stopped once it
    // runs as the guard: stopped between its fork and its exec, it would hold
    // up `tenure`'s spawn (which waits for the exec) instead.
    let mut guard = None;
    let seen = eventually(LIMIT, || {
        let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", waiter.id()));
        guard = children.ok().and_then(|c| c.split_whitespace().next()?.parse::<u32>().ok());
        let cmdline = guard.and_then(|g| std::fs::read(format!("/proc/{g}/cmdline")).ok()).unwrap_or_default();
        cmdline.split(|&b| b == 0).any(|arg| arg == b"__guard")
    });
    let guard = guard.filter(|_| seen).expect("the waiter's guard");
    signal(guard, Signal::STOP);
    (waiter, guard)
}

#[test]
fn a_guard_slow_to_start_the_command_after_the_grant_is_waited_for_and_the_command_runs() {
    let store = FileStore::new();
    let marks = store.path("ran");
    let go = store.path("go");
    let mut first =
        start(&store, "slow-start", &[], &format!("while [ ! -e '{}' ]; do sleep 0.02; done", go.display()));
    assert!(eventually(LIMIT, || !holders(&store.url(), "slow-start").is_empty()), "the first holder never held");
    let (mut waiter, guard) = waiter_with_a_stopped_guard(&store, "slow-start", &marks);
    let _cleanup = KillOnDrop::new(guard);
    std::fs::write(&go, "").expect("go");
    let waiter_pid = u64::from(waiter.id());
    assert!(
        eventually(LIMIT, || holders(&store.url(), "slow-start").iter().any(|h| h.0 == waiter_pid)),
        "the waiter was never granted"
    );
    assert_eq!(wait_status(&mut first, LIMIT).code(), Some(0));
    // Silent past the 2s + 1s that a running command's guard gets, and well
    // before the grant's start-by (the 16s TTL's grant less its grace, ~7s).
    std::thread::sleep(Duration::from_millis(4500));
    signal(guard, Signal::CONT);
    let (code, err) = finish(&mut waiter);
    assert_eq!(code, Some(0), "the command ran once its guard did: {err}");
    assert_eq!(std::fs::read_to_string(&marks).ok().as_deref(), Some("ran\n"), "{err}");
    assert!(lease_is_free(&store, "slow-start"), "the lease was not released");
}

#[test]
fn a_guard_that_never_starts_the_command_is_taken_over_at_the_grants_start_by_and_nothing_runs() {
    let store = FileStore::new();
    let marks = store.path("ran");
    let go = store.path("go");
    let mut first =
        start(&store, "never-started", &[], &format!("while [ ! -e '{}' ]; do sleep 0.02; done", go.display()));
    assert!(eventually(LIMIT, || !holders(&store.url(), "never-started").is_empty()), "the first holder never held");
    let (mut waiter, guard) = waiter_with_a_stopped_guard(&store, "never-started", &marks);
    let _cleanup = KillOnDrop::new(guard);
    std::fs::write(&go, "").expect("go");
    assert_eq!(wait_status(&mut first, LIMIT).code(), Some(0));
    let (code, err) = finish(&mut waiter);
    assert_eq!(code, Some(75), "the command did not run: {err}");
    assert!(err.contains("stopped answering") && err.contains("the command did not run"), "{err}");
    assert!(!marks.exists(), "the command ran: {err}");
    assert!(!running(guard), "the silent guard was not killed");
    assert!(lease_is_free(&store, "never-started"), "the lease was not released");
}
