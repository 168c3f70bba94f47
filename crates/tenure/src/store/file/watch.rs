//! [`Backend::watch`](crate::backend::Backend::watch) for the directory store:
//! a waiter sleeps until the lease's directory changes, woken by inotify.
//!
//! A contended lease changes hands in a new version file `~N` linked into the
//! lease's directory. A waiter that polls finds it one backoff later (tens to
//! hundreds of ms); a waiter parked on an inotify watch of the directory is woken
//! by the `link(2)` itself.
//!
//! # How one wait goes
//!
//! 1. **Set up**, on a blocking thread with the store's deadline (like every
//!    file-system call, see [`super::super::offload`]): open the lease directory
//!    the way every operation opens it — relative to the root, each segment with
//!    `O_NOFOLLOW | O_DIRECTORY`, so a lease directory that is a symlink is
//!    refused ([`Error::Corrupt`]), never watched through; create an inotify
//!    instance (`IN_NONBLOCK | IN_CLOEXEC`) and watch *that open directory*
//!    through `/proc/self/fd/N`, so no path is resolved a second time
//!    (`IN_DONT_FOLLOW` would only cover the last component of a path).
//! 2. **Only then look again**: list the directory; if its newest version is no
//!    longer the one the caller saw, return at once. A change between the
//!    caller's read and the watch is never missed.
//! 3. **Wait** on the inotify descriptor through tokio (no thread, no file-system
//!    call) until an event names a version file (`~N` created, linked, moved in
//!    or out, removed), the directory itself goes away, or the queue overflowed;
//!    temp files (`~tmp-…`) do not wake the waiter. The whole call never outlasts
//!    its `timeout`: the setup is awaited only until then (a setup stuck in a
//!    hung mount is left to the store's deadline, and counted as stuck like any
//!    other operation).
//!
//! One inotify descriptor per waiting call, closed when the call returns.
//!
//! # Where it does not work
//!
//! inotify only reports changes made through this kernel. On NFS, SMB, FUSE,
//! Ceph, 9p and other network or cluster file systems, writes by other machines
//! raise no event, so [`Error::Unsupported`] is returned (callers then poll as
//! before): the store's mount is checked by its type (`/proc/self/mountinfo`,
//! without touching the mount) and the lease directory by `fstatfs(2)`. An
//! inotify instance that cannot be created (the per-user limit of instances or
//! watches is reached), or a `/proc` that is not mounted, is `Unsupported` too.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Duration;

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use super::{FileBackend, parse_version};
use crate::error::{Error, Result};
use crate::store::fs::is_gone;
use crate::types::Version;

/// `f_type` of file systems on which another machine may change a directory
/// without this kernel knowing (linux/magic.h and the file systems' own headers).
const NETWORK_MAGICS: &[(u32, &str)] = &[
    (0x0000_6969, "NFS"),
    (0x0000_517B, "SMB"),
    (0xFF53_4D42, "CIFS"),
    (0xFE53_4D42, "SMB2"),
    (0x6573_5546, "FUSE"),
    (0x00C3_6400, "Ceph"),
    (0x0102_1997, "9p"),
    (0x5346_414F, "AFS"),
    (0x6B41_4653, "AFS"),
    (0x7375_7245, "Coda"),
    (0x7461_636F, "OCFS2"),
    (0x0116_1970, "GFS2"),
    (0x0BD0_0BD0, "Lustre"),
    (0x4750_4653, "GPFS"),
    (0x2003_0528, "OrangeFS"),
    (0x0000_564C, "NCP"),
];

/// Mount types (`/proc/self/mountinfo`) on which inotify misses remote changes.
fn network_fstype(fstype: &str) -> bool {
    matches!(
        fstype,
        "nfs"
            | "nfs4"
            | "cifs"
            | "smb3"
            | "smbfs"
            | "ceph"
            | "9p"
            | "afs"
            | "coda"
            | "ocfs2"
            | "gfs2"
            | "lustre"
            | "gpfs"
            | "glusterfs"
            | "beegfs"
            | "virtiofs"
    ) || fstype == "fuse"
        || fstype.starts_with("fuse.")
}

/// The events that can mean a new newest version: a version file appearing or
/// disappearing, and the directory itself going away.
fn mask() -> WatchFlags {
    WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::MOVED_TO
        | WatchFlags::MOVED_FROM
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::ONLYDIR
        | WatchFlags::EXCL_UNLINK
}

/// What the setup found.
pub(super) enum Setup {
    /// The key is no longer at the version the caller saw.
    Moved,
    /// The key's directory does not exist, and the caller saw nothing either.
    Absent,
    /// Watching: the inotify descriptor.
    Watching(OwnedFd),
}

impl FileBackend {
    fn unsupported(&self, why: impl std::fmt::Display) -> Error {
        Error::unsupported(&*self.url, format!("watching lease directories: {why}; waiters poll instead"))
    }

    /// Whether the store's root is on a network mount, by the mount table's text
    /// (looked up once per store).
    fn root_on_network(&self) -> Option<String> {
        self.network
            .get_or_init(|| {
                super::super::mounts::mount_of(&self.root)
                    .filter(|m| network_fstype(&m.fstype))
                    .map(|m| format!("{} is a {} mount", m.point.display(), m.fstype))
            })
            .clone()
    }

    /// Step 1 and 2 of a wait (see the module docs); blocking.
    pub(super) fn watch_setup_blocking(&self, key: &str, seen: Option<u64>) -> Result<Setup> {
        if let Some(why) = self.root_on_network() {
            return Err(self.unsupported(why));
        }
        let Some(dir) = self.key_dir(key, false)? else {
            return Ok(if seen.is_none() { Setup::Absent } else { Setup::Moved });
        };
        match rustix::fs::fstatfs(&dir) {
            Ok(st) => {
                // The field's type differs between architectures; the magic is 32 bits.
                #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
                let magic = i64::from(st.f_type) as u32;
                if let Some((_, name)) = NETWORK_MAGICS.iter().find(|(m, _)| *m == magic) {
                    return Err(self.unsupported(format!("{} is on {name}", dir.path().display())));
                }
            }
            Err(e) => return Err(self.err(format!("looking at the file system of key {key:?}"), dir.path(), e.into())),
        }
        let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)
            .map_err(|e| self.unsupported(format!("inotify_init1 failed ({e})")))?;
        let through = format!("/proc/self/fd/{}", dir.as_fd().as_raw_fd());
        match inotify::add_watch(&fd, &through, mask()) {
            Ok(_) => {}
            // The per-user limit of watches, or no /proc.
            Err(e) if e == Errno::NOSPC || e == Errno::NOENT => {
                return Err(self.unsupported(format!("inotify_add_watch failed ({e})")));
            }
            Err(e) => {
                return Err(self.err(format!("watching the directory of key {key:?}"), dir.path(), e.into()));
            }
        }
        // Watching: now look again, so nothing that happened since the caller's
        // read is missed.
        let now = match self.scan(&dir) {
            Ok(scan) => scan.max(),
            Err(e) if is_gone(&e) => None,
            Err(e) => return Err(self.err(format!("listing key {key:?}"), dir.path(), e)),
        };
        Ok(if now == seen { Setup::Watching(fd) } else { Setup::Moved })
    }

    /// [`crate::backend::Backend::watch`].
    pub(super) async fn watch_dir(&self, key: &str, seen: Option<&Version>, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        let seen = match seen {
            None => None,
            Some(Version { seq: Some(seq), .. }) => Some(*seq),
            // Not a version of this store: whatever is there now differs.
            Some(_) => return Ok(true),
        };
        let setup = if self.inline {
            self.watch_setup_blocking(key, seen)?
        } else {
            // Awaited only until the wait's own deadline; the task itself ends at
            // the store's deadline at the latest (a stuck call is counted there).
            let (this, k) = (self.clone(), key.to_string());
            let task = tokio::spawn(async move {
                let what = format!("watching key {k:?}");
                this.run(what, move |b| b.watch_setup_blocking(&k, seen)).await
            });
            match tokio::time::timeout_at(deadline, task).await {
                Ok(Ok(setup)) => setup?,
                Ok(Err(join)) => {
                    return Err(Error::store(&*self.url, format!("watching key {key:?}"), join.to_string()));
                }
                Err(_) => return Ok(false),
            }
        };
        let fd = match setup {
            Setup::Moved => return Ok(true),
            Setup::Absent => {
                // Nothing to watch yet: wait as a poller would.
                tokio::time::sleep_until(deadline).await;
                return Ok(false);
            }
            Setup::Watching(fd) => fd,
        };
        // SAFETY: `register_with_interest` needs the descriptor to stay open, and
        // to stay the same, while the `AsyncFd` has it: an `OwnedFd` owns its
        // descriptor and closes it only when dropped, after the deregistration.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(|e| self.unsupported(format!("the runtime cannot wait on descriptors ({e})")))?;
        loop {
            let mut ready = match tokio::time::timeout_at(deadline, fd.readable()).await {
                Ok(ready) => ready.map_err(|e| self.err(format!("watching key {key:?}"), &self.root, e))?,
                Err(_) => return Ok(false),
            };
            match drain(fd.get_ref()) {
                Ok(true) => return Ok(true),
                Ok(false) => ready.clear_ready(),
                Err(e) => return Err(self.err(format!("watching key {key:?}"), &self.root, e)),
            }
        }
    }
}

/// Reads every queued event; whether one may mean a new version. Returns once
/// the queue is empty (`EAGAIN`).
fn drain(fd: &OwnedFd) -> std::io::Result<bool> {
    let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
    let mut reader = inotify::Reader::new(fd, &mut buf);
    let mut changed = false;
    loop {
        match reader.next() {
            Ok(event) => changed |= matters(event.events(), event.file_name().map(|n| n.to_bytes())),
            Err(Errno::AGAIN) => return Ok(changed),
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Whether an event may mean that the newest version changed.
fn matters(events: ReadFlags, name: Option<&[u8]>) -> bool {
    let lost = ReadFlags::QUEUE_OVERFLOW
        | ReadFlags::IGNORED
        | ReadFlags::DELETE_SELF
        | ReadFlags::MOVE_SELF
        | ReadFlags::UNMOUNT;
    if events.intersects(lost) {
        return true;
    }
    let name = name.map(std::os::unix::ffi::OsStrExt::from_bytes);
    name.is_some_and(|n: &std::ffi::OsStr| parse_version(n).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_version_files_and_the_directory_itself_matter() {
        assert!(matters(ReadFlags::CREATE, Some(b"~00000000000000000042")));
        assert!(matters(ReadFlags::DELETE, Some(b"~00000000000000000001")));
        assert!(!matters(ReadFlags::CREATE, Some(b"~tmp-0123456789abcdef")));
        assert!(!matters(ReadFlags::DELETE, Some(b"~tmp-0123456789abcdef")));
        assert!(!matters(ReadFlags::CREATE | ReadFlags::ISDIR, Some(b"child")));
        assert!(matters(ReadFlags::DELETE_SELF, None));
        assert!(matters(ReadFlags::QUEUE_OVERFLOW, None));
        assert!(matters(ReadFlags::IGNORED, None));
    }

    #[test]
    fn network_mounts_are_known_by_type() {
        for t in ["nfs", "nfs4", "cifs", "fuse.sshfs", "fuse", "ceph", "9p"] {
            assert!(network_fstype(t), "{t}");
        }
        for t in ["ext4", "xfs", "btrfs", "tmpfs", "overlay", "fuseblk"] {
            assert!(!network_fstype(t), "{t}");
        }
    }
}
