//! No command starts on a grant that `tenure` cannot vouch for.
//!
//! A grant is good until its stop-by time: the local deadline (TTL from when
//! the acquire request was sent) minus the safety margin (TTL/10). A grant
//! whose answer comes after that is of no use — a contender may take the lease
//! over as soon as it expires — so `tenure lock` releases it and asks again,
//! and with `--timeout` gives up with exit 75 if no timely grant came; its
//! command never runs, and it never exits 76 (lost), which is for a command
//! that ran and was stopped.
//!
//! The store's answers are made late on purpose: on the directory store by
//! strace holding the return of `linkat(2)` (the call that writes every
//! version, grants included); on `tenure serve`, etcd and moto (S3) by a TCP
//! proxy that holds every chunk the server sends ([`chaos::DelayProxy`]; on S3
//! only the answers to writes of the lease's record, since opening the store
//! takes round trips of its own). With
//! a TTL of 2 s, an answer 3 s late is always past the stop-by; 0.5 s late
//! leaves the grant good. Where strace can trace, the runs are traced, so that
//! "never started" means the command was never even executed, not only that it
//! wrote nothing before it was killed.
//!
//! The guard (`tenure __guard`) checks the deadline too, in the forked child
//! right before exec: a `start` line whose deadline has passed runs nothing.

use crate::chaos;
use crate::common;

use std::io::{Read, Write};
use std::process::{Output, Stdio};
use std::time::Duration;

use chaos::*;
use common::*;

/// The TTL of every grant here; its stop-by is 1.8 s after the request.
const TTL: &str = "2s";
/// A delay on every answer that puts any grant past its stop-by.
const LATE: Duration = Duration::from_secs(3);
/// A delay that leaves a grant 1.3 s before its stop-by: good.
const TIMELY: Duration = Duration::from_millis(500);
/// `tenure lock --timeout` with no timely grant before the timeout: "timed out
/// waiting" (README, exit codes).
const TIMED_OUT: i32 = 75;
/// `--no-wait` and a late grant: busy / timed out (75), or the store failing (69).
const NO_WAIT_LATE: [i32; 2] = [75, 69];
/// "The lease was lost while the command ran; the command was stopped": never
/// for a command that did not run.
const LOST: i32 = 76;

/// A `tenure lock` run and what its command did.
struct Ran {
    out: Output,
    /// How many times the command was executed, when the run was traced.
    execs: Option<usize>,
    /// The tokens the command wrote, one per run of it.
    tokens: Vec<String>,
}

/// How a test makes the store's answers come `delay` late: a proxy (kept alive
/// by the caller) for a network store, strace's `inject` for the directory
/// store. `None` (skipped) when the directory store has no strace.
fn slowed(store: &Store, delay: Duration) -> Option<(Target, Option<DelayProxy>, Vec<String>)> {
    if store.kind == Kind::Dir {
        if !strace_available() {
            return None;
        }
        let inject = format!("inject=linkat:delay_exit={}", delay.as_micros());
        let args = ["-e", "trace=execve,linkat", "-e", &inject].map(String::from).to_vec();
        return Some((store.direct(), None, args));
    }
    let proxy = store.proxy();
    proxy.set_delay(delay);
    if store.kind == Kind::Moto {
        // Only the writes of the lease's record (grants, renewals, releases):
        // opening an S3 store probes it with writes and reads of its own, which
        // would use up --timeout before any grant came.
        proxy.only_after(&format!("PUT /{}/job/", store.direct().url.trim_start_matches("s3://")));
    }
    Some((store.via(&proxy), Some(proxy), ["-e", "trace=execve"].map(String::from).to_vec()))
}

/// The `tenure lock` command line, traced with `strace_args` when strace works
/// (it must, when the directory store's answers are delayed by it).
fn command(
    store: &Store,
    target: &Target,
    flags: &[&str],
    marker: &Marker,
    strace_args: &[String],
) -> (std::process::Command, bool) {
    let cmd = target.lock("job", flags, &[&marker.command()]);
    if store.kind == Kind::Dir || strace_works() {
        let extra: Vec<&str> = strace_args.iter().map(String::as_str).collect();
        (traced(&cmd, &store.path("trace"), &extra), true)
    } else {
        eprintln!("note: strace cannot trace here; only the marker file shows whether the command ran");
        (cmd, false)
    }
}

fn lock_once(store: &Store, target: &Target, flags: &[&str], marker: &Marker, strace_args: &[String]) -> Ran {
    let (mut cmd, traced) = command(store, target, flags, marker, strace_args);
    let out = run(&mut cmd, Duration::from_secs(60));
    eprintln!("{:?} store, tenure lock {}: {}", store.kind, flags.join(" "), outcome(&out));
    let execs = traced.then(|| execs(&store.path("trace"), &marker.script));
    Ran { out, execs, tokens: marker.runs() }
}

fn assert_never_ran(ran: &Ran, what: &str) {
    assert!(ran.tokens.is_empty(), "{what}: the command ran, with token(s) {:?}; {}", ran.tokens, outcome(&ran.out));
    assert!(
        ran.execs.unwrap_or(0) == 0,
        "{what}: the command was executed {} time(s) (killed before it wrote); {}",
        ran.execs.unwrap_or(0),
        outcome(&ran.out)
    );
    assert_ne!(
        ran.out.status.code(),
        Some(LOST),
        "{what}: exit 76 for a command that never ran; {}",
        outcome(&ran.out)
    );
    assert!(!stderr(&ran.out).contains("panicked"), "{what}: a panic; {}", outcome(&ran.out));
}

/// Every answer 3 s late, `--timeout 8s`: exit 75, the command never started.
fn late_grants_time_out_without_running(kind: Kind) {
    let Some(store) = Store::open(kind, "late") else { return };
    let Some((target, _proxy, strace_args)) = slowed(&store, LATE) else { return };
    let marker = Marker::new(store.scratch.path());
    // etcd takes several round trips to grant (an etcd lease, then the write):
    // a longer --timeout lets a late grant come before it runs out.
    let timeout = if kind == Kind::Etcd { "16s" } else { "8s" };
    let ran = lock_once(&store, &target, &["--ttl", TTL, "--timeout", timeout], &marker, &strace_args);
    assert_never_ran(&ran, "every grant came 3 s late at a 2 s TTL");
    assert_eq!(ran.out.status.code(), Some(TIMED_OUT), "no timely grant within --timeout; {}", outcome(&ran.out));
}

/// Every answer 3 s late, `--no-wait`: a non-zero exit (not 76), nothing started.
fn a_late_grant_with_no_wait_fails_without_running(kind: Kind) {
    let Some(store) = Store::open(kind, "late-no-wait") else { return };
    let Some((target, _proxy, strace_args)) = slowed(&store, LATE) else { return };
    let marker = Marker::new(store.scratch.path());
    let ran = lock_once(&store, &target, &["--ttl", TTL, "--no-wait"], &marker, &strace_args);
    assert_never_ran(&ran, "--no-wait, the grant came 3 s late at a 2 s TTL");
    let code = ran.out.status.code();
    assert!(code.is_some_and(|c| NO_WAIT_LATE.contains(&c)), "expected one of {NO_WAIT_LATE:?}; {}", outcome(&ran.out));
}

/// Every answer 0.5 s late: the grant is good, the command runs once, exit 0.
/// (A store that takes two round trips to grant, S3's read then write, still
/// leaves the grant 0.8 s before its stop-by.)
fn a_slow_but_timely_grant_runs_the_command(kind: Kind) {
    let Some(store) = Store::open(kind, "timely") else { return };
    let Some((target, _proxy, strace_args)) = slowed(&store, TIMELY) else { return };
    let marker = Marker::new(store.scratch.path());
    // A short kill grace: the guard begins stopping a command when less than the
    // grace is left before the stop-by, and the default grace (half of what a
    // grant lasts) would take the slow round trips for a want of time.
    let flags = ["--ttl", TTL, "--timeout", "20s", "--kill-grace", "100ms"];
    let ran = lock_once(&store, &target, &flags, &marker, &strace_args);
    assert_eq!(ran.out.status.code(), Some(0), "a grant 0.5 s late at a 2 s TTL is good; {}", outcome(&ran.out));
    assert_eq!(ran.tokens.len(), 1, "the command ran once: {:?}", ran.tokens);
    assert!(ran.execs.is_none_or(|n| n == 1), "executed {:?} times", ran.execs);
}

/// A waiter queued while answers are quick; then every answer turns 3 s late
/// and the holder lets go: whatever grant the waiter gets while answers are
/// late, its command does not run. When answers are quick again, it gets a
/// timely grant and runs once.
fn a_waiter_runs_nothing_on_late_grants_then_runs_on_a_timely_one(kind: Kind) {
    let Some(store) = Store::open(kind, "late-waiter") else { return };
    let proxy = store.proxy();
    let marker = Marker::new(store.scratch.path());
    let (held, go) = (store.path("held"), store.path("go"));
    let script = format!("touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done", held.display(), go.display());
    let mut holder = store
        .direct()
        .lock("job", &["--ttl", TTL], &["sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the holder");
    assert!(eventually(LIMIT, || held.exists()), "the holder never ran");

    let strace_args = ["-e", "trace=execve"].map(String::from);
    let (mut cmd, traced) =
        command(&store, &store.via(&proxy), &["--ttl", TTL, "--timeout", "50s"], &marker, &strace_args);
    let waiter = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn the waiter");
    // Let it ask (and queue, on a store that keeps queues) while answers are quick.
    std::thread::sleep(Duration::from_secs(1));
    proxy.set_delay(LATE);
    std::fs::write(&go, "").expect("let the holder go");
    let (code, err) = finish(&mut holder);
    assert_eq!(code, Some(0), "the holder: {err}");
    // Every answer from now until the delay is lifted is past its stop-by.
    // Three delays: a store that grants in two round trips (S3) answers within it.
    std::thread::sleep(LATE * 3);
    let early = marker.runs();
    let early_execs = if traced { execs(&store.path("trace"), &marker.script) } else { 0 };
    proxy.set_delay(Duration::ZERO);
    let out = wait_output(waiter, Duration::from_secs(60));
    assert!(
        early.is_empty() && early_execs == 0,
        "the waiter's command ran ({early:?}, executed {early_execs} time(s)) while every answer came 3 s late; {}",
        outcome(&out)
    );
    assert_eq!(out.status.code(), Some(0), "a timely grant once answers are quick; {}", outcome(&out));
    assert_eq!(marker.runs().len(), 1, "the command ran once: {:?}", marker.runs());
}

// The directory store: strace holds `linkat(2)`.

#[test]
fn late_grants_time_out_without_running_the_command_on_the_directory_store() {
    late_grants_time_out_without_running(Kind::Dir);
}

#[test]
fn a_late_grant_with_no_wait_runs_nothing_on_the_directory_store() {
    a_late_grant_with_no_wait_fails_without_running(Kind::Dir);
}

#[test]
fn a_slow_but_timely_grant_runs_the_command_on_the_directory_store() {
    a_slow_but_timely_grant_runs_the_command(Kind::Dir);
}

// `tenure serve`, etcd and moto: the proxy holds the answers.

#[test]
fn late_grants_time_out_without_running_the_command_on_tenure_serve() {
    late_grants_time_out_without_running(Kind::Serve);
}

#[test]
fn a_late_grant_with_no_wait_runs_nothing_on_tenure_serve() {
    a_late_grant_with_no_wait_fails_without_running(Kind::Serve);
}

#[test]
fn a_slow_but_timely_grant_runs_the_command_on_tenure_serve() {
    a_slow_but_timely_grant_runs_the_command(Kind::Serve);
}

#[test]
fn a_waiter_runs_nothing_on_late_grants_from_tenure_serve() {
    a_waiter_runs_nothing_on_late_grants_then_runs_on_a_timely_one(Kind::Serve);
}

#[test]
fn late_grants_time_out_without_running_the_command_on_etcd() {
    late_grants_time_out_without_running(Kind::Etcd);
}

#[test]
fn a_late_grant_with_no_wait_runs_nothing_on_etcd() {
    a_late_grant_with_no_wait_fails_without_running(Kind::Etcd);
}

#[test]
fn a_slow_but_timely_grant_runs_the_command_on_etcd() {
    a_slow_but_timely_grant_runs_the_command(Kind::Etcd);
}

#[test]
fn a_waiter_runs_nothing_on_late_grants_from_etcd() {
    a_waiter_runs_nothing_on_late_grants_then_runs_on_a_timely_one(Kind::Etcd);
}

#[test]
fn late_grants_time_out_without_running_the_command_on_s3_moto() {
    late_grants_time_out_without_running(Kind::Moto);
}

#[test]
fn a_late_grant_with_no_wait_runs_nothing_on_s3_moto() {
    a_late_grant_with_no_wait_fails_without_running(Kind::Moto);
}

#[test]
fn a_slow_but_timely_grant_runs_the_command_on_s3_moto() {
    a_slow_but_timely_grant_runs_the_command(Kind::Moto);
}

#[test]
fn a_waiter_runs_nothing_on_late_grants_from_s3_moto() {
    a_waiter_runs_nothing_on_late_grants_then_runs_on_a_timely_one(Kind::Moto);
}

// The guard, driven directly as `tenure lock` drives it (see
// `crates/tenure-cli/src/supervise.rs`): a control pipe on which the first line
// is `start <deadline_ns CLOCK_BOOTTIME> <token> <deadline_ms>`, and a report
// pipe on which it says `started <pid>`, `failed <code> <message>`, `exited
// <n>` or `killed <n>`.

/// Starts `tenure __guard` on the marker command, sends it `start` with
/// `deadline_ns`, and returns its exit code and every report line.
fn drive_guard(marker: &Marker, deadline_ns: u64) -> (Option<i32>, Vec<String>) {
    use rustix::io::{FdFlags, fcntl_setfd};
    let (control_r, mut control_w) = std::io::pipe().expect("control pipe");
    let (mut report_r, report_w) = std::io::pipe().expect("report pipe");
    // The guard's ends must survive exec (std makes pipes close-on-exec).
    fcntl_setfd(&control_r, FdFlags::empty()).expect("fcntl");
    fcntl_setfd(&report_w, FdFlags::empty()).expect("fcntl");
    use std::os::fd::AsRawFd;
    let mut guard = tenure()
        .args(["__guard", "--control-fd", &control_r.as_raw_fd().to_string()])
        .args(["--report-fd", &report_w.as_raw_fd().to_string(), "--grace", "1s", "--"])
        .arg(&marker.script)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tenure __guard");
    drop((control_r, report_w));
    // Read the report as it comes: the guard waits for us to take its last lines.
    let reader = std::thread::spawn(move || {
        let mut report = String::new();
        let _ = report_r.read_to_string(&mut report);
        report
    });
    let deadline_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    writeln!(control_w, "start {deadline_ns} 7 {deadline_ms}").expect("send start");
    // The control pipe stays open until the guard is done: `tenure` is alive.
    let (code, err) = finish(&mut guard);
    drop(control_w);
    let report = reader.join().expect("report reader");
    assert!(!err.contains("panicked"), "the guard panicked: {err}");
    let lines = report.lines().filter(|l| *l != "alive").map(str::to_string).collect();
    (code, lines)
}

fn boot_now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

#[test]
fn the_guard_refuses_to_start_the_command_when_its_deadline_has_passed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let marker = Marker::new(dir.path());
    let (code, report) = drive_guard(&marker, boot_now_ns() - 1_000_000_000);
    assert!(marker.runs().is_empty(), "the command ran on a start whose deadline had passed; report: {report:?}");
    assert!(report.iter().any(|l| l.starts_with("failed ")), "the guard reports a failure: {report:?}");
    assert!(
        !report.iter().any(|l| l.starts_with("exited ") || l.starts_with("killed ")),
        "no command ran, so none exited or was killed: {report:?}"
    );
    assert_ne!(code, Some(0), "the guard's exit says the command did not run: {report:?}");
}

#[test]
fn the_guard_starts_the_command_when_its_deadline_is_ahead() {
    let dir = tempfile::tempdir().expect("temp dir");
    let marker = Marker::new(dir.path());
    let (code, report) = drive_guard(&marker, boot_now_ns() + 60_000_000_000);
    assert_eq!(marker.runs(), ["7"], "the command ran once with the token it was given; report: {report:?}");
    assert!(report.iter().any(|l| l.starts_with("started ")), "{report:?}");
    assert_eq!(report.last().map(String::as_str), Some("exited 0"), "{report:?}");
    assert_eq!(code, Some(0), "{report:?}");
}
