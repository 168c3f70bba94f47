//! The command's whole process group is stopped before its lease can be taken
//! over: when `tenure` is killed with SIGKILL, when it is frozen, when the lease is
//! broken, and when the command leaves processes behind. Each check is an
//! ordering: the next holder's own command verifies that nothing of the previous
//! command still runs when it gets the lease.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use rustix::process::Signal;

const SKEW: &str = "200ms";

/// Takes the lease as the next holder, whose command exits 99 if any of `pids`
/// still runs. Returns how long after `since` the next holder got in, and its status.
fn next_holder_sees_none_running(store: &FileStore, name: &str, pids: &[u32], since: Instant) -> (Duration, i32) {
    let stamp = store.path("next-holder-started");
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    let check = format!(
        "echo >> '{}'; for p in {}; do if [ -d /proc/$p ] && ! grep -q '^[0-9]* ([^)]*) Z' /proc/$p/stat; then exit 99; fi; done",
        stamp.display(),
        pids.join(" ")
    );
    let mut contender = lock(&store.url(), name, &["--max-skew", SKEW, "--poll", "50ms"], &["sh", "-c", &check])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn contender");
    assert!(eventually(LIMIT, || stamp.exists()), "the next holder never got the lease");
    let got_in = since.elapsed();
    let status = wait_status(&mut contender, LIMIT);
    (got_in, status.code().unwrap_or(-1))
}

/// `tenure` killed with SIGKILL while its command runs: the guard stops the
/// command's whole group at once, and once nothing of it runs, releases the
/// lease (a break of that grant alone, with the reason): the next holder gets
/// it long before the TTL, is told why, and finds nothing of the command
/// running.
#[test]
fn sigkill_of_tenure_kills_the_commands_whole_group_then_its_guard_releases_the_lease() {
    let store = FileStore::new();
    let pids_file = store.path("pids");
    let mut holder = start(&store, "crash", &["--ttl", "60s", "--max-skew", SKEW], &sleepers(&pids_file));
    let pids = pids_of(&pids_file, 3);
    assert!(pids.iter().all(|&p| running(p)));
    let guard = guard_of(&holder);

    signal(holder.id(), Signal::KILL);
    let killed_at = Instant::now();
    let _ = holder.wait();
    // The guard stops the group at once (it does not wait for the TTL)…
    assert!(
        eventually(LIMIT, || pids.iter().all(|&p| !running(p))),
        "the command's group outlived tenure: {}",
        survivors(&pids)
    );
    // …and then releases the lease.
    assert!(eventually(LIMIT, || !running(guard)), "the guard never ended");
    assert!(holders(&store.url(), "crash").is_empty(), "the dead holder's grant is still in the record");
    let status = status_json_with(&store.url(), "crash", &[]);
    let reason = status[0]["last"]["broken"]["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("died") && reason.contains("stopped"), "the record says why: {status}");

    let (got_in, code) = next_holder_sees_none_running(&store, "crash", &pids, killed_at);
    assert_eq!(code, 0, "a process of the killed holder's command still ran when the next holder got the lease");
    assert!(got_in < Duration::from_secs(30), "taken over {got_in:?} after the kill: by the 60s TTL, not released");
}

/// `tenure` killed while its command ignores SIGTERM: the guard releases the
/// lease only once the command is dead (after the grace, by SIGKILL), never
/// while it still runs — a waiter that asks from the moment of the kill gets
/// in after that, and long before the TTL.
#[test]
fn the_guard_of_a_killed_tenure_releases_only_once_a_stubborn_command_is_dead() {
    let store = FileStore::new();
    let marks = store.path("marks");
    let flags = ["--ttl", "60s", "--max-skew", SKEW, "--kill-grace", "2s"];
    let mut holder = start(&store, "stubborn-orphan", &flags, &stubborn(&marks));
    let shell: u32 = wait_lines(&marks, 1, LIMIT)[0].parse().expect("pid");

    signal(holder.id(), Signal::KILL);
    let killed_at = Instant::now();
    let _ = holder.wait();
    let (got_in, code) = next_holder_sees_none_running(&store, "stubborn-orphan", &[shell], killed_at);
    assert_eq!(code, 0, "the lease was released while the stubborn command still ran");
    assert!(lines(&marks).iter().any(|l| l == "term"), "the command was asked to stop first");
    assert!(got_in >= Duration::from_millis(1500), "released {got_in:?} after the kill, before the 2s grace");
    assert!(got_in < Duration::from_secs(30), "taken over {got_in:?} after the kill: by the 60s TTL, not released");
}

/// `tenure` and its guard killed together, as a crashed machine: nobody is
/// left to release the lease, which is taken over only once it expired.
#[test]
fn sigkill_of_tenure_and_its_guard_leaves_the_lease_to_expire() {
    let store = FileStore::new();
    let pids_file = store.path("pids");
    let mut holder = start(&store, "crash", &["--ttl", "3s", "--max-skew", SKEW], &sleepers(&pids_file));
    let pids = pids_of(&pids_file, 3);
    let guard = guard_of(&holder);

    // The guard frozen first, so that `tenure` cannot see it die and release
    // the lease itself before it is killed too.
    signal(guard, Signal::STOP);
    signal(holder.id(), Signal::KILL);
    let _ = holder.wait();
    signal(guard, Signal::KILL);
    let killed_at = Instant::now();
    assert!(eventually(LIMIT, || !running(guard)), "the guard never ended");
    assert_eq!(holders(&store.url(), "crash").len(), 1, "the dead holder's grant is still in the record");

    let stamp = store.path("next");
    let next = run(
        &mut lock(
            &store.url(),
            "crash",
            &["--max-skew", SKEW, "--poll", "50ms"],
            &["touch", stamp.to_str().expect("utf-8")],
        ),
        LIMIT,
    );
    assert!(next.status.success(), "{}", stderr(&next));
    let got_in = killed_at.elapsed();
    assert!(got_in >= Duration::from_millis(1500), "taken over {got_in:?} after the kill, before the 3s TTL");
    // Nobody was left to stop the command's sleeps (as after a crash): the
    // test does.
    for p in pids {
        if running(p) {
            signal(p, Signal::KILL);
        }
    }
}

#[test]
fn a_frozen_tenure_cannot_keep_its_command_running_past_the_lease() {
    let store = FileStore::new();
    let pids_file = store.path("pids");
    // A grace longer than the TTL is capped so that SIGKILL still lands in time.
    // The guard's margin over the next holder is the safety margin (TTL/10) plus
    // the skew margin: a 4s TTL leaves 600ms for the guard to be scheduled.
    let flags = ["--ttl", "4s", "--max-skew", SKEW, "--kill-grace", "30s"];
    let mut holder = start(&store, "frozen", &flags, &sleepers(&pids_file));
    let pids = pids_of(&pids_file, 3);

    signal(holder.id(), Signal::STOP);
    let frozen_at = Instant::now();
    // Nobody renews the lease now, and nobody tells the guard: it acts on the deadline.
    let (got_in, code) = next_holder_sees_none_running(&store, "frozen", &pids, frozen_at);
    assert_eq!(code, 0, "the frozen holder's command still ran when the next holder got the lease");
    assert!(got_in >= Duration::from_millis(2000), "taken over {got_in:?} after the freeze, before the 4s TTL");

    signal(holder.id(), Signal::CONT);
    let status = wait_status(&mut holder, LIMIT);
    assert_eq!(status.code(), Some(76), "the lease was lost while the command ran");
}

/// Waits for `holder` to exit 76 and checks that its command's group (`pids`)
/// was gone by then; returns what it printed on stderr.
fn exits_76_after_its_group(holder: &mut std::process::Child, pids: &[u32]) -> String {
    let status = wait_status(holder, LIMIT);
    assert_eq!(status.code(), Some(76));
    assert!(
        pids.iter().all(|&p| !running(p)),
        "tenure exited before its command's group was gone: {}",
        survivors(pids)
    );
    let mut err = String::new();
    std::io::Read::read_to_string(&mut holder.stderr.take().expect("stderr"), &mut err).expect("read");
    err
}

#[test]
fn breaking_the_lease_stops_the_command_and_exits_76() {
    let store = FileStore::new();
    let pids_file = store.path("pids");
    let mut holder = start(&store, "broken", &["--ttl", "4s"], &sleepers(&pids_file));
    let pids = pids_of(&pids_file, 3);

    let out = run(tenure().args(["break", &store.url(), "broken"]), LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = exits_76_after_its_group(&mut holder, &pids);
    assert!(err.contains("broken") && err.contains("lost") && err.contains(&store.url()), "{err}");
    // One report line (the keep-alive's own timestamped WARN log may precede it).
    assert_eq!(err.lines().filter(|l| l.starts_with("tenure:")).count(), 1, "one line: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_the_grace() {
    let store = FileStore::new();
    let marks = store.path("marks");
    // A grace long enough for a loaded machine to run the trap before SIGKILL.
    let mut holder = start(&store, "stubborn", &["--ttl", "10s", "--kill-grace", "3s"], &stubborn(&marks));
    let shell: u32 = wait_lines(&marks, 1, LIMIT)[0].parse().expect("pid");

    let broke_at = Instant::now();
    let out = run(tenure().args(["break", &store.url(), "stubborn"]), LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let status = wait_status(&mut holder, LIMIT);
    assert_eq!(status.code(), Some(76));
    let terms = lines(&marks).iter().filter(|l| *l == "term").count();
    assert_eq!(terms, 1, "SIGTERM came first, and once (the group's and the walk's must not both reach it)");
    assert!(broke_at.elapsed() >= Duration::from_secs(3), "SIGKILL came only after the grace");
    assert!(!running(shell));
}

#[test]
fn processes_the_command_leaves_in_its_group_are_stopped_before_release() {
    let store = FileStore::new();
    let (bg, trapped, seen) = (store.path("bg"), store.path("trapped"), store.path("seen-at-sigterm"));
    // The command exits as soon as the subshell it leaves in its group has set its
    // trap and started its sleep (a process forked after the SIGTERM would only die
    // at the SIGKILL). Stopped with SIGTERM, the subshell records the lease's state.
    let script = format!(
        "(trap '\"$0\" status \"$TENURE_STORE\" \"$TENURE_LEASE\" --json > \"{seen}\"; exit 0' TERM; \
         sleep 300 & : > '{trapped}'; wait) & \
         echo $! > '{bg}'; while [ ! -e '{trapped}' ]; do sleep 0.01; done",
        seen = seen.display(),
        trapped = trapped.display(),
        bg = bg.display()
    );
    let flags = ["--ttl", "60s", "--kill-grace", "20s"];
    let out = run(&mut lock(&store.url(), "leftovers", &flags, &["sh", "-c", &script, TENURE]), LIMIT);
    assert_eq!(out.status.code(), Some(0), "the command's own status: {}", stderr(&out));
    let pid: u32 = lines(&bg)[0].parse().expect("pid");
    assert!(!running(pid), "a process of the command outlived the lease");
    assert!(stderr(&out).contains("left processes"), "{}", stderr(&out));
    let seen = leases(&std::fs::read(&seen).expect("the leftover saw SIGTERM"));
    assert_eq!(seen[0]["state"], "held", "the lease was released before the leftover was stopped: {seen}");
    assert!(holders(&store.url(), "leftovers").is_empty(), "released after");
}

#[test]
fn the_guard_ignores_signals_meant_for_the_command() {
    let store = FileStore::new();
    let (ready, go) = (store.path("ready"), store.path("go"));
    let script =
        format!("echo up > '{}'; while [ ! -e '{}' ]; do sleep 0.05; done; exit 4", ready.display(), go.display());
    let mut holder = start(&store, "calm", &[], &script);
    wait_lines(&ready, 1, LIMIT);
    let guard = guard_of(&holder);
    for sig in [Signal::INT, Signal::TERM, Signal::HUP, Signal::QUIT, Signal::TSTP] {
        signal(guard, sig);
    }
    std::fs::write(&go, "").expect("go");
    // Had the guard died, tenure would have killed the group and exited 76.
    assert_eq!(wait_status(&mut holder, LIMIT).code(), Some(4));
}

/// Makes a directory immutable (`chattr +i`, which binds root too) until dropped.
struct Immutable(std::path::PathBuf);

impl Immutable {
    fn new(dir: &std::path::Path) -> Option<Self> {
        let ok = std::process::Command::new("chattr")
            .arg("+i")
            .arg(dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Self(dir.to_path_buf()))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr").arg("-i").arg(&self.0).status();
    }
}

#[test]
fn failing_renewals_stop_the_command_and_exit_76() {
    // Under the target directory, not /tmp: tmpfs may not support `chattr +i`.
    let store = FileStore::new_in(env!("CARGO_TARGET_TMPDIR"));
    let pids_file = store.path("pids");
    let mut holder = start(&store, "outage", &["--ttl", "3s"], &sleepers(&pids_file));
    let pids = pids_of(&pids_file, 3);
    // Every renewal now fails to write the record: an outage of the store.
    let Some(frozen) = Immutable::new(&std::path::Path::new(&store.url()).join("outage")) else {
        eprintln!("skipped: `chattr +i` failed here (is e2fsprogs installed, and the file system ext4/xfs/btrfs?)");
        let _ = holder.kill();
        let _ = holder.wait();
        return;
    };
    let err = exits_76_after_its_group(&mut holder, &pids);
    drop(frozen);
    // Lost after `max_failures` renewals, or — on a machine too loaded to try them
    // all in time — stopped at the deadline while at risk: both name the failures.
    assert!(err.contains("renewals kept failing") || err.contains("renewal(s) failed"), "{err}");
    assert!(err.contains("lease \"outage\"") && err.contains(&store.url()), "{err}");
}

#[test]
fn if_the_guard_is_killed_the_command_dies_too_and_tenure_exits_76() {
    let store = FileStore::new();
    let pids_file = store.path("pids");
    let mut holder = start(&store, "guardless", &[], &sleepers(&pids_file));
    let pids = pids_of(&pids_file, 3);
    let guard = guard_of(&holder);
    signal(guard, Signal::KILL);
    assert_eq!(wait_status(&mut holder, LIMIT).code(), Some(76));
    assert!(
        eventually(LIMIT, || pids.iter().all(|&p| !running(p))),
        "the command outlived its guard: {}",
        survivors(&pids)
    );
}

#[test]
fn a_guard_killed_as_the_command_starts_still_leaves_tenure_the_group_to_stop() {
    let store = FileStore::new();
    let pids_file = store.path("pids");
    // The command's first act is to start a sleep in its group and kill its guard
    // (its parent): tenure must know the group without the guard's word.
    let script = format!("sleep 300 & echo $! > '{}'; kill -9 $PPID; wait", pids_file.display());
    let mut holder = start(&store, "guard-killed-early", &[], &script);
    assert_eq!(wait_status(&mut holder, LIMIT).code(), Some(76));
    let pids = pids_of(&pids_file, 1);
    assert!(
        eventually(LIMIT, || pids.iter().all(|&p| !running(p))),
        "the command outlived its guard: {}",
        survivors(&pids)
    );
}

/// The guard starts while `tenure` waits, so that a waiter handed the lease
/// starts its command at once; it runs nothing until the grant, and goes with
/// a `tenure` that gives up or is killed.
#[test]
fn the_guard_waits_beside_a_waiter_and_leaves_with_it_having_run_nothing() {
    let store = FileStore::new();
    let ran = store.path("ran");
    let mut holder = start(&store, "q", &[], "sleep 60");
    assert!(eventually(LIMIT, || !holders(&store.url(), "q").is_empty()), "the holder never got the lease");
    let guard_beside = |waiter: &std::process::Child| {
        let children = format!("/proc/{0}/task/{0}/children", waiter.id());
        assert!(
            eventually(LIMIT, || std::fs::read_to_string(&children).is_ok_and(|c| !c.trim().is_empty())),
            "no guard started beside the waiter"
        );
        let guard = guard_of(waiter);
        // Between its fork and its exec, the child still shows the waiter's command line.
        let is_guard = || {
            let cmdline = std::fs::read(format!("/proc/{guard}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains("__guard")
        };
        assert!(eventually(LIMIT, is_guard), "{}", survivors(&[guard]));
        guard
    };
    let note_run = format!("echo ran >> '{}'", ran.display());

    // A waiter that gives up: its guard ends with it.
    let mut waiter = start(&store, "q", &["--timeout", "1s"], &note_run);
    let guard = guard_beside(&waiter);
    let (code, err) = finish(&mut waiter);
    assert_eq!(code, Some(75), "{err}");
    assert!(!running(guard), "the guard outlived the waiter that gave up: {}", survivors(&[guard]));

    // A waiter killed with SIGKILL: its guard sees the control pipe close and exits.
    let mut waiter = start(&store, "q", &[], &note_run);
    let guard = guard_beside(&waiter);
    signal(waiter.id(), Signal::KILL);
    wait_status(&mut waiter, LIMIT);
    assert!(eventually(LIMIT, || !running(guard)), "the guard outlived a killed waiter: {}", survivors(&[guard]));

    assert!(!ran.exists(), "a waiter's command ran without the lease");
    signal(holder.id(), Signal::TERM);
    let (code, err) = finish(&mut holder);
    assert!(code.is_some(), "{err}");
}
