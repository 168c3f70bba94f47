//! Storage that never answers — a lease server that accepts and says nothing, a
//! FUSE mount whose daemon is stopped (a stand-in for a hard-mounted NFS whose
//! server went away: every call into it blocks in the kernel) — cannot hold
//! `tenure lock`: `--timeout`, `--no-wait` and signals still end it on time.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use rustix::process::Signal;

/// Generous bound for "ends on time" (the expected times are about 1s).
const PROMPTLY: Duration = Duration::from_secs(5);

/// A directory behind a FUSE mount (`bindfs -f`, run by the test) whose daemon
/// the test can stop. Unmounted when dropped.
struct StoppableMount {
    daemon: Child,
    mnt: PathBuf,
    _dir: tempfile::TempDir,
}

impl StoppableMount {
    /// `None` (the test is skipped, and says so) where bindfs or FUSE is missing.
    fn new() -> Option<Self> {
        let dir = tempfile::tempdir().expect("temp dir");
        let (src, mnt) = (dir.path().join("src"), dir.path().join("mnt"));
        std::fs::create_dir_all(src.join("leases")).expect("mkdir");
        std::fs::create_dir(&mnt).expect("mkdir");
        let spawned = Command::new("bindfs").arg("-f").arg(&src).arg(&mnt).stderr(Stdio::null()).spawn();
        let Ok(daemon) = spawned else {
            eprintln!("skipped: bindfs is not installed (apt-get install bindfs)");
            return None;
        };
        let mount = Self { daemon, mnt, _dir: dir };
        let mounted =
            || std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| m.contains(&*mount.mnt.to_string_lossy()));
        if !eventually(Duration::from_secs(10), mounted) {
            eprintln!("skipped: bindfs could not mount (no /dev/fuse, or not allowed here)");
            return None;
        }
        Some(mount)
    }

    fn url(&self) -> String {
        self.mnt.join("leases").display().to_string()
    }

    fn daemon_pid(&self) -> u32 {
        self.daemon.id()
    }

    /// From now on, every call into the mount blocks.
    fn hang(&self) {
        signal(self.daemon.id(), Signal::STOP);
    }
}

impl Drop for StoppableMount {
    fn drop(&mut self) {
        signal(self.daemon.id(), Signal::CONT);
        let _ = Command::new("fusermount").arg("-u").arg(&self.mnt).stderr(Stdio::null()).status();
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

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

#[test]
fn a_signal_ends_tenure_while_a_silent_lease_server_is_asked() {
    let (_server, url) = silent_server();
    sigterm_ends_it_promptly(spawn(&mut lock(&url, "x", &[], &["true"])));
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

#[test]
fn timeout_bounds_the_first_attempt_on_a_silent_lease_server() {
    let (_server, url) = silent_server();
    ends_promptly(&url, &["--timeout", "1s"], 75, "did not answer within the 1s --timeout");
}

#[test]
fn a_signal_ends_tenure_while_its_first_attempt_hangs_on_a_stopped_mount() {
    let Some(mount) = StoppableMount::new() else { return };
    mount.hang();
    sigterm_ends_it_promptly(spawn(&mut lock(&mount.url(), "x", &[], &["true"])));
}

#[test]
fn timeout_bounds_a_first_attempt_that_hangs_on_a_stopped_mount() {
    let Some(mount) = StoppableMount::new() else { return };
    mount.hang();
    ends_promptly(&mount.url(), &["--timeout", "1s"], 75, "did not answer");
}

#[test]
fn no_wait_on_a_stopped_mount_ends_at_the_stores_own_deadline_with_69() {
    let Some(mount) = StoppableMount::new() else { return };
    mount.hang();
    ends_promptly(&mount.url(), &["--no-wait", "--store-opt", "timeout=1s"], 69, "within 1s");
}

#[test]
fn a_signal_ends_tenure_while_its_release_hangs_and_the_commands_status_is_kept() {
    let Some(mount) = StoppableMount::new() else { return };
    let done = mount._dir.path().join("done");
    // The command hangs the mount itself, so that the release is what hangs.
    let script = format!("kill -STOP {}; : > '{}'; exit 4", mount.daemon_pid(), done.display());
    let mut tenure = spawn(&mut lock(&mount.url(), "x", &[], &["sh", "-c", &script]));
    assert!(eventually(LIMIT, || done.exists()), "the command never ran: {:?}", finish(&mut tenure));
    std::thread::sleep(Duration::from_millis(500));
    let sent = Instant::now();
    signal(tenure.id(), Signal::TERM);
    let (code, err) = finish(&mut tenure);
    assert_eq!(code, Some(4), "the command's own status: {err}");
    assert!(sent.elapsed() < PROMPTLY, "SIGTERM took {:?} to end tenure", sent.elapsed());
    assert!(err.contains("ends by itself after its TTL"), "{err}");
}
