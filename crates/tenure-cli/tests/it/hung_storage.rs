//! Hung storage: a directory store on a FUSE mount (`bindfs`) whose daemon is
//! frozen with SIGSTOP. Every file operation on the mount then blocks in the
//! kernel, as on a hard-mounted NFS whose server went away. `--timeout`,
//! `--no-wait`, the store's operation deadline and SIGINT/SIGTERM must still end
//! `tenure`, and a holder whose store hangs must stop its command before the
//! lease's deadline and exit 76.
//!
//! Needs `bindfs` (scripts/install-deps.sh) and `/dev/fuse`; skipped with the
//! reason printed when either is missing, unless `TENURE_REQUIRE_SERVERS=1`.

use crate::common;
use crate::fuse;
use crate::hostile;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use fuse::Fuse;
use hostile::*;
use rustix::process::Signal;

/// Words of which a "the store did not answer" message must contain one.
const NO_ANSWER: &[&str] = &["did not answer", "not answer", "no answer", "not respond", "unresponsive", "hung"];

/// Asserts `out` is a failure saying the store did not answer, within `bound`.
fn assert_no_answer(out: &Output, took: Duration, bound: Duration, what: &str) {
    assert_no_panic(out);
    let err = stderr(out);
    assert!(took < bound, "{what} took {took:?} on a hung store (bound {bound:?}): {err}");
    assert!(matches!(out.status.code(), Some(69 | 75)), "{what}: exit {:?}: {err}", out.status);
    assert!(mentions(&err, NO_ANSWER), "{what} must say the store did not answer: {err}");
}

/// A mounted store with lease `x` taken and released once while it answered.
fn hung_store() -> Option<(Fuse, String)> {
    let fuse = Fuse::mount()?;
    let url = fuse.store();
    assert_eq!(token(&lock_token(&url, "x", &["--no-wait"])), 1, "the mount works while it answers");
    fuse.freeze();
    Some((fuse, url))
}

#[test]
fn lock_with_a_timeout_gives_up_in_time_on_a_hung_store() {
    let Some((_fuse, url)) = hung_store() else { return };
    let (out, took) = timed(&mut lock(&url, "x", &["--timeout", "2s"], &["true"]));
    assert_no_answer(&out, took, Duration::from_secs(8), "lock --timeout 2s");
}

#[test]
fn lock_no_wait_ends_within_the_store_deadline_on_a_hung_store() {
    let Some((_fuse, url)) = hung_store() else { return };
    let flags = ["--no-wait", "--store-opt", "timeout=1s"];
    let (out, took) = timed(&mut lock(&url, "x", &flags, &["true"]));
    assert_no_answer(&out, took, Duration::from_secs(6), "lock --no-wait --store-opt timeout=1s");
}

#[test]
fn status_of_a_hung_store_fails_naming_it() {
    let Some((_fuse, url)) = hung_store() else { return };
    let (out, took) = timed(tenure().args(["status", &url, "--store-opt", "timeout=1s"]));
    assert_no_answer(&out, took, Duration::from_secs(8), "status");
    assert!(stderr(&out).contains(&url), "the error must name the store: {}", stderr(&out));
}

#[test]
fn sigint_and_sigterm_end_a_lock_blocked_on_a_hung_store() {
    let Some((_fuse, url)) = hung_store() else { return };
    for sig in [Signal::INT, Signal::TERM] {
        let mut child =
            lock(&url, "x", &[], &["true"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn");
        // Give it time to block in its first read of the store.
        std::thread::sleep(Duration::from_secs(1));
        assert!(child.try_wait().expect("try_wait").is_none(), "{sig:?}: tenure ended before the signal");
        signal(child.id(), sig);
        let start = Instant::now();
        let ended = eventually(Duration::from_secs(10), || child.try_wait().ok().flatten().is_some());
        let took = start.elapsed();
        if !ended {
            let _ = child.kill();
        }
        let out = child.wait_with_output().expect("output");
        assert!(
            ended && took < Duration::from_secs(3),
            "{sig:?} ended tenure after {took:?} (ended by itself: {ended}): {}",
            stderr(&out)
        );
        assert_no_panic(&out);
        let expected = 128 + sig.as_raw();
        assert_eq!(out.status.code(), Some(expected), "{sig:?}: {}", stderr(&out));
    }
}

#[test]
fn a_holder_whose_store_hangs_stops_its_command_before_the_deadline_and_exits_76() {
    let Some(fuse) = Fuse::mount() else { return };
    let url = fuse.store();
    let dir = tempfile::tempdir().expect("a scratch directory off the mount");
    let (ready, alive) = (dir.path().join("ready"), dir.path().join("alive"));
    rustix::fs::mkfifoat(rustix::fs::CWD, &alive, rustix::fs::Mode::from_raw_mode(0o600)).expect("mkfifo");
    // The command holds the FIFO's write end until it dies: the reader's EOF
    // marks the moment of its death, to the millisecond.
    let script = format!("exec 3>'{}'; echo $TENURE_TOKEN > '{}'; exec sleep 60", alive.display(), ready.display());
    let death = watch_eof(alive);
    // stderr to a file: the command and the guard inherit it, so a pipe would
    // not see EOF while they live.
    let err_path = dir.path().join("stderr");
    let err_file = std::fs::File::create(&err_path).expect("stderr file");
    let mut holder = lock(&url, "x", &["--ttl", "3s"], &["sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(err_file)
        .spawn()
        .expect("spawn holder");
    let held: u64 = wait_lines(&ready, 1, LIMIT)[0].parse().expect("token");
    std::thread::sleep(Duration::from_secs(1)); // a few renewals (every TTL/8)
    let frozen_at = wall_ms();
    fuse.freeze();

    let ended = eventually(Duration::from_secs(25), || holder.try_wait().ok().flatten().is_some());
    let died_at = death.recv_timeout(Duration::from_secs(5)).ok();
    if !ended {
        let _ = holder.kill();
    }
    let status = holder.wait().expect("wait");
    fuse.thaw();
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    let command = if died_at.is_some() { "was stopped" } else { "still ran" };
    assert!(ended, "tenure did not end within 25 s of its store hanging (its command {command}): {err}");
    assert_eq!(status.code(), Some(76), "the holder must report the loss: {err}");
    let died_at = died_at.expect("tenure exited, but its command was never stopped");

    // The grant's deadline as stored (a renewal may have landed at the freeze);
    // no deadline can be later than the freeze plus the TTL.
    let json = status_json(&url, "x");
    let grants = json[0]["holders"].as_array().into_iter().chain(json[0]["expired"].as_array()).flatten();
    let deadline = grants
        .filter(|g| g["token"].as_u64() == Some(held))
        .filter_map(|g| g["deadline_ms"].as_u64())
        .max()
        .unwrap_or(frozen_at + 3000);
    assert!(died_at < deadline, "the command died at {died_at}, after the deadline {deadline} (frozen at {frozen_at})");

    // Once the store answers again, the next holder gets the lease.
    let next = token(&lock_token(&url, "x", &["--timeout", "20s"]));
    assert!(next > held, "token {next} after {held}");
}

/// Opens `fifo` for reading on a thread and sends the wall time (unix ms) of
/// EOF, that is when the last writer closed it.
fn watch_eof(fifo: PathBuf) -> std::sync::mpsc::Receiver<u64> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok(mut f) = std::fs::File::open(&fifo) else { return };
        let mut sink = Vec::new();
        let _ = f.read_to_end(&mut sink);
        let _ = tx.send(wall_ms());
    });
    rx
}

fn wall_ms() -> u64 {
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_millis();
    u64::try_from(ms).expect("ms fit")
}
