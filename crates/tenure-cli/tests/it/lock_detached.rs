//! Processes that leave the command's process group — `setsid cmd &`, daemons
//! that fork, `setsid` and fork again — are still the command's: they are
//! stopped before the lease is released, when the command exits, when the lease
//! is lost, and when the guard is killed.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use rustix::process::Signal;

/// Writes `daemon.sh` next to the store: `daemon.sh PIDS [TENURE SEEN]` records
/// its pid and loops until stopped; given the tenure binary, it records the
/// lease's status (JSON) in SEEN when SIGTERM comes, then exits.
fn daemon_script(store: &FileStore) -> PathBuf {
    let path = store.path("daemon.sh");
    let body = r#"#!/bin/sh
echo $$ >> "$1"
if [ -n "$2" ]; then trap '"$2" status "$TENURE_STORE" "$TENURE_LEASE" --json > "$3" 2> "$3.err"; exit 0' TERM; fi
while :; do sleep 0.05; done
"#;
    std::fs::write(&path, body).expect("write daemon.sh");
    let mut perms = std::fs::metadata(&path).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&path, perms).expect("chmod");
    path
}

/// A command that starts two processes outside its group — one `setsid`, one
/// daemonized (its parent exits, so it is an orphan in a session of its own) —
/// waits until both recorded their pids in `pids`, then runs `then`. The
/// `setsid` one records the lease's status in `seen` when stopped.
fn detaching(daemon: &Path, pids: &Path, seen: &Path, then: &str) -> String {
    format!(
        "setsid '{d}' '{p}' \"$0\" '{s}' & \
         setsid sh -c '\"$0\" \"$1\" &' '{d}' '{p}' & \
         while [ \"$(wc -l < '{p}' 2>/dev/null || echo 0)\" -lt 2 ]; do sleep 0.02; done; {then}",
        d = daemon.display(),
        p = pids.display(),
        s = seen.display()
    )
}

/// Starts `tenure lock` on `script`, with the tenure binary as `$0`.
fn start_detaching(store: &FileStore, name: &str, flags: &[&str], script: &str) -> std::process::Child {
    lock(&store.url(), name, flags, &["sh", "-c", script, TENURE])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn tenure lock")
}

/// The session of `pid`, as `/proc` reports it: 0 when its leader lies outside
/// our PID namespace (CI runners may start tests so), which `getsid` wrappers
/// that promise a non-zero pid cannot return.
fn session(pid: u32) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp session …`; comm may hold spaces and parentheses.
    stat.rsplit_once(") ")?.1.split(' ').nth(3)?.parse().ok()
}

/// Both detached processes left the command's group and session.
fn assert_detached(pids: &[u32], tenure: u32) {
    let theirs = session(tenure);
    assert!(theirs.is_some(), "no session for tenure ({tenure})");
    for &p in pids {
        let mine = session(p);
        assert!(mine.is_some(), "no session for process {p}");
        assert_ne!(mine, theirs, "process {p} did not leave tenure's session");
    }
}

#[test]
fn detached_and_daemonized_processes_are_stopped_before_the_lease_is_released_when_the_command_exits() {
    let store = FileStore::new();
    let (daemon, pids_file, seen) = (daemon_script(&store), store.path("pids"), store.path("seen"));
    let mut holder =
        start_detaching(&store, "detached", &["--ttl", "60s"], &detaching(&daemon, &pids_file, &seen, "exit 3"));
    let pids = pids_of(&pids_file, 2);
    assert_detached(&pids, holder.id());
    let (code, err) = finish(&mut holder);
    let status_err = std::fs::read_to_string(seen.with_extension("err")).unwrap_or_default();
    let err = format!("{err}\n(the detached process's tenure status said: {status_err:?})");
    assert_eq!(code, Some(3), "the command's own status: {err}");
    assert!(pids.iter().all(|&p| !running(p)), "a detached process outlived the lease: {}\n{err}", survivors(&pids));
    assert!(err.contains("left processes"), "{err}");
    let raw =
        std::fs::read_to_string(&seen).unwrap_or_else(|e| panic!("the setsid'd process saw no SIGTERM ({e}): {err}"));
    let seen: serde_json::Value =
        serde_json::from_str(&raw).unwrap_or_else(|e| panic!("its status is not JSON ({e}): {raw:?}\n{err}"));
    assert_eq!(seen["schema_version"], 1, "{seen}");
    assert_eq!(
        seen["leases"][0]["state"], "held",
        "the lease was released before the detached process was stopped: {seen}\n{err}"
    );
    assert!(lease_is_free(&store, "detached"), "released after");
}

#[test]
fn detached_and_daemonized_processes_are_stopped_when_the_lease_is_lost() {
    let store = FileStore::new();
    let (daemon, pids_file, seen) = (daemon_script(&store), store.path("pids"), store.path("seen"));
    let script = detaching(&daemon, &pids_file, &seen, "exec sleep 300");
    let mut holder = start_detaching(&store, "lost", &["--ttl", "16s", "--kill-grace", "2s"], &script);
    let pids = pids_of(&pids_file, 2);

    let out = run(tenure().args(["break", &store.url(), "lost"]), LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let (code, err) = finish(&mut holder);
    assert_eq!(code, Some(76), "{err}");
    assert!(pids.iter().all(|&p| !running(p)), "a detached process outlived the loss: {}", survivors(&pids));
}

#[test]
fn detached_processes_die_when_the_guard_is_killed() {
    let store = FileStore::new();
    let (daemon, pids_file, seen) = (daemon_script(&store), store.path("pids"), store.path("seen"));
    let script = detaching(&daemon, &pids_file, &seen, "exec sleep 300");
    let mut holder = start_detaching(&store, "guardless", &[], &script);
    let pids = pids_of(&pids_file, 2);

    // Orphaned by the guard, they are re-parented to tenure (a subreaper), which kills them.
    signal(guard_of(&holder), Signal::KILL);
    let (code, err) = finish(&mut holder);
    assert_eq!(code, Some(76), "{err}");
    assert!(pids.iter().all(|&p| !running(p)), "a detached process outlived its guard: {}", survivors(&pids));
}
