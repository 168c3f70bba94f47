//! A directory behind a FUSE mount whose daemon a test can freeze: the stand-in
//! for a hard-mounted NFS whose server went away (every call into it blocks in
//! the kernel). Shared by the hung-storage tests.
#![allow(dead_code, unreachable_pub)]

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rustix::process::Signal;

use super::common::{eventually, signal};

/// A `bindfs` mount of a temporary directory, whose daemon the test can freeze.
/// Dropping it thaws the daemon, unmounts and kills it, whatever happened.
pub struct Fuse {
    daemon: Child,
    mnt: tempfile::TempDir,
    _src: tempfile::TempDir,
}

impl Fuse {
    /// Mounts a fresh directory, or `None` (with the reason printed) where FUSE
    /// cannot be had; with `TENURE_REQUIRE_SERVERS=1` that is a failure.
    pub fn mount() -> Option<Self> {
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
        std::fs::create_dir(fuse.mnt.path().join("locks")).map_err(|e| format!("making the store's directory: {e}"))?;
        Ok(fuse)
    }

    /// Whether the mount point is in this process's mount table (read from
    /// /proc, so it never touches the mount itself).
    pub fn is_mounted(&self) -> bool {
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mnt = self.mnt.path().to_string_lossy();
        table.lines().any(|l| l.split(' ').nth(4) == Some(&*mnt))
    }

    /// The store: a directory inside the mount (made at mount time: a
    /// store's root must exist, and the mount may be frozen by now).
    pub fn store(&self) -> String {
        self.mnt.path().join("locks").display().to_string()
    }

    /// The FUSE daemon's pid (to stop it from inside a command).
    pub fn daemon_pid(&self) -> u32 {
        self.daemon.id()
    }

    /// From now on every operation on the mount blocks.
    pub fn freeze(&self) {
        signal(self.daemon.id(), Signal::STOP);
    }

    pub fn thaw(&self) {
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
