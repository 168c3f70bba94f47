//! Hung storage: a directory store on a FUSE mount (`bindfs`) whose daemon is
//! frozen with SIGSTOP. Every file operation on the mount then blocks in the
//! kernel, as on a hard-mounted NFS whose server went away. `--timeout`,
//! `--no-wait`, the store's operation deadline and SIGINT/SIGTERM must still end
//! `tenure`, and a holder whose store hangs must stop its command before the
//! lease's deadline and exit 76.
//!
//! Needs `bindfs` (scripts/install-deps.sh) and `/dev/fuse`; skipped with the
//! reason printed when either is missing, unless `TENURE_REQUIRE_SERVERS=1`.

mod common;
mod hostile;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use hostile::*;
use rustix::process::Signal;

/// Words of which a "the store did not answer" message must contain one.
const NO_ANSWER: &[&str] = &["did not answer", "not answer", "no answer", "not respond", "unresponsive", "hung"];

/// A `bindfs` mount of a temporary directory, whose daemon the test can freeze.
/// Dropping it thaws the daemon, unmounts and kills it, whatever happened.
struct Fuse {
    daemon: Child,
    mnt: tempfile::TempDir,
    _src: tempfile::TempDir,
}

impl Fuse {
    /// Mounts a fresh directory, or `None` (with the reason printed) where FUSE
    /// cannot be had; with `TENURE_REQUIRE_SERVERS=1` that is a failure.
    fn mount() -> Option<Self> {
        match Self::try_mount() {
            Ok(fuse) => Some(fuse),
            Err(why) if std::env::var("TENURE_REQUIRE_SERVERS").is_ok_and(|v| v == "1") => {
                panic!("{why}, but TENURE_REQUIRE_SERVERS=1: run scripts/install-deps.sh")
            }
            Err(why) => {
                eprintln!("skipping: {why} (scripts/install-deps.sh installs bindfs)");
                None
            }
        }
    }

    fn try_mount() -> Result<Self, String> {
        if !Path::new("/dev/fuse").exists() {
            return Err("/dev/fuse does not exist".into());
        }
        let src = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let mnt = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        // -f: stay in the foreground, so that this pid is the daemon to freeze.
        let mut cmd = Command::new("bindfs");
        cmd.arg("-f").args([src.path(), mnt.path()]);
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        // If the test is killed (a runner's timeout) its drop guard never runs:
        // the daemon then dies with it, and the mount fails (ENOTCONN) instead of
        // hanging everything that touches it until someone sends SIGCONT.
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                rustix::process::set_parent_process_death_signal(Some(Signal::KILL)).map_err(std::io::Error::from)
            });
        }
        let daemon = cmd.spawn().map_err(|e| format!("bindfs cannot be run: {e}"))?;
        let mut fuse = Self { daemon, mnt, _src: src };
        let mounted = eventually(Duration::from_secs(10), || {
            fuse.is_mounted() || fuse.daemon.try_wait().ok().flatten().is_some()
        });
        if !mounted || !fuse.is_mounted() {
            let _ = fuse.daemon.kill();
            let mut err = String::new();
            if let Some(mut e) = fuse.daemon.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            return Err(format!("bindfs did not mount {}: {}", fuse.mnt.path().display(), err.trim()));
        }
        Ok(fuse)
    }

    /// Whether the mount point is in this process's mount table (read from
    /// /proc, so it never touches the mount itself).
    fn is_mounted(&self) -> bool {
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mnt = self.mnt.path().to_string_lossy();
        table.lines().any(|l| l.split(' ').nth(4) == Some(&*mnt))
    }

    /// The store: a directory inside the mount.
    fn store(&self) -> String {
        self.mnt.path().join("locks").display().to_string()
    }

    /// From now on every operation on the mount blocks.
    fn freeze(&self) {
        signal(self.daemon.id(), Signal::STOP);
    }

    fn thaw(&self) {
        signal(self.daemon.id(), Signal::CONT);
    }
}

impl Drop for Fuse {
    fn drop(&mut self) {
        self.thaw();
        let mnt = self.mnt.path().as_os_str();
        let unmounted = ["fusermount3", "fusermount"]
            .iter()
            .any(|cmd| Command::new(cmd).arg("-u").arg(mnt).stderr(Stdio::null()).status().is_ok_and(|s| s.success()));
        if !unmounted {
            let _ = Command::new("umount").arg("-l").arg(mnt).status();
        }
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

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
