//! Storage that never answers — a lease server that accepts and says nothing, a
//! FUSE mount whose daemon is stopped (a stand-in for a hard-mounted NFS whose
//! server went away: every call into it blocks in the kernel) — cannot hold
//! `tenure lock`: `--timeout`, `--no-wait` and signals still end it on time.

use crate::common;
use crate::fuse;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use fuse::Fuse;
use rustix::process::Signal;

/// Generous bound for "ends on time" (the expected times are about 1s).
const PROMPTLY: Duration = Duration::from_secs(5);

/// A lease server that accepts connections and never says a word.
fn silent_server() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("tenure://{}", listener.local_addr().expect("addr"));
    (listener, url)
}

fn spawn(cmd: &mut Command) -> Child {
    cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn tenure")
}

/// Sends SIGTERM to `tenure` once it has been stuck for a second, and checks that
/// it ends promptly with 128 + 15.
fn sigterm_ends_it_promptly(mut tenure: Child) {
    std::thread::sleep(Duration::from_secs(1));
    assert!(tenure.try_wait().expect("try_wait").is_none(), "tenure was not stuck: {:?}", finish(&mut tenure));
    let sent = Instant::now();
    signal(tenure.id(), Signal::TERM);
    let (code, err) = finish(&mut tenure);
    assert_eq!(code, Some(128 + 15), "{err}");
    assert!(sent.elapsed() < PROMPTLY, "SIGTERM took {:?} to end tenure", sent.elapsed());
}

/// A silent server is named as no lease server once the hello has gone
/// unanswered for 1 s, so `tenure` is stuck there for a second only: the signal
/// is sent as soon as the server has the connection (the hello then waits). If
/// `tenure` was starved of the CPU past that second, it ended on the hello's
/// deadline first (exit 69, which is right too): the run is made again.
#[test]
fn a_signal_ends_tenure_while_a_silent_lease_server_is_asked() {
    let (server, url) = silent_server();
    server.set_nonblocking(true).expect("nonblocking");
    for attempt in 1.. {
        let mut tenure = spawn(&mut lock(&url, "x", &[], &["true"]));
        // The accepted connection is kept open and silent: dropped, it would
        // close, and tenure would hear EOF instead of silence.
        let mut accepted = None;
        let connected = eventually(LIMIT, || {
            accepted = server.accept().ok();
            accepted.is_some()
        });
        assert!(connected, "tenure never connected: {:?}", finish(&mut tenure));
        let sent = Instant::now();
        signal(tenure.id(), Signal::TERM);
        let (code, err) = finish(&mut tenure);
        drop(accepted);
        if code == Some(69) && err.contains("no answer to the hello") && attempt < 5 {
            eprintln!("attempt {attempt}: the hello's deadline came before the signal; again");
            continue;
        }
        assert_eq!(code, Some(128 + 15), "{err}");
        assert!(sent.elapsed() < PROMPTLY, "SIGTERM took {:?} to end tenure", sent.elapsed());
        break;
    }
}

/// `tenure lock <url> x <flags…> -- true` ends promptly with `code`, in one
/// line that says `says`.
fn ends_promptly(url: &str, flags: &[&str], code: i32, says: &str) {
    let started = Instant::now();
    let out = run(&mut lock(url, "x", flags, &["true"]), LIMIT);
    assert_eq!(out.status.code(), Some(code), "{}", stderr(&out));
    assert!(started.elapsed() < PROMPTLY, "took {:?}", started.elapsed());
    assert!(stderr(&out).contains(says), "{}", stderr(&out));
    assert_one_line_error(&out);
}

/// (Shorter than the 1 s a client waits for the answer to its hello, after
/// which it names the peer as no lease server: the `--timeout` ends it first.)
#[test]
fn timeout_bounds_the_first_attempt_on_a_silent_lease_server() {
    let (_server, url) = silent_server();
    ends_promptly(&url, &["--timeout", "500ms"], 75, "did not answer within the 500ms --timeout");
}

#[test]
fn a_signal_ends_tenure_while_its_first_attempt_hangs_on_a_stopped_mount() {
    let Some(mount) = Fuse::mount() else { return };
    mount.freeze();
    sigterm_ends_it_promptly(spawn(&mut lock(&mount.store(), "x", &[], &["true"])));
}

#[test]
fn timeout_bounds_a_first_attempt_that_hangs_on_a_stopped_mount() {
    let Some(mount) = Fuse::mount() else { return };
    mount.freeze();
    ends_promptly(&mount.store(), &["--timeout", "1s"], 75, "did not answer");
}

#[test]
fn no_wait_on_a_stopped_mount_ends_at_the_stores_own_deadline_with_69() {
    let Some(mount) = Fuse::mount() else { return };
    mount.freeze();
    ends_promptly(&mount.store(), &["--no-wait", "--store-opt", "timeout=1s"], 69, "within 1s");
}

#[test]
fn a_signal_ends_tenure_while_its_release_hangs_and_the_commands_status_is_kept() {
    let Some(mount) = Fuse::mount() else { return };
    let scratch = tempfile::tempdir().expect("temp dir");
    let done = scratch.path().join("done");
    // The command hangs the mount itself, so that the release is what hangs.
    let script = format!("kill -STOP {}; : > '{}'; exit 4", mount.daemon_pid(), done.display());
    let mut tenure = spawn(&mut lock(&mount.store(), "x", &[], &["sh", "-c", &script]));
    assert!(eventually(LIMIT, || done.exists()), "the command never ran: {:?}", finish(&mut tenure));
    std::thread::sleep(Duration::from_millis(500));
    let sent = Instant::now();
    signal(tenure.id(), Signal::TERM);
    let (code, err) = finish(&mut tenure);
    assert_eq!(code, Some(4), "the command's own status: {err}");
    assert!(sent.elapsed() < PROMPTLY, "SIGTERM took {:?} to end tenure", sent.elapsed());
    assert!(err.contains("ends by itself after its TTL"), "{err}");
}
