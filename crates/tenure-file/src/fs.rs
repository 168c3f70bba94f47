//! Directory I/O for stores shared with careless and hostile tenants.
//!
//! The directory store and the bags keep their data in a directory anybody with
//! access may also write to. Whatever another tenant, a crash or an editor left
//! there, tenure must not be tricked into reading or writing elsewhere, hang, or
//! read without bound. So every operation here:
//!
//! - works **relative to an open directory** ([`Dir`], `openat(2)` family), and
//!   opens every path component below the store's root with `O_NOFOLLOW |
//!   O_DIRECTORY`: a symlinked lease or bag directory is reported
//!   ([`Opened::Foreign`]), never followed. (The root itself is the user's
//!   choice and may be a symlink.)
//! - looks at an entry with `fstatat(AT_SYMLINK_NOFOLLOW)` before opening it, and
//!   opens only regular files, with `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`: a FIFO,
//!   a device, a socket, a symlink or a directory where a file belongs is
//!   reported as [`Read::Foreign`] — never opened, so a FIFO cannot block and a
//!   tty cannot become the controlling terminal. The open file is checked again
//!   with `fstat` (the entry may have been swapped in between).
//! - reads at most a cap ([`Read::TooLarge`] past it), so `/dev/zero`-like or
//!   huge files cost nothing.
//! - checks the result of `close(2)` on files it wrote: NFS reports deferred
//!   write errors there when nothing was fsynced.
//!
//! Only the NFS-safe operations
//! (`docs/design/closable-bags.md#nfs-safe-file-operations`) are offered: readdir, open
//! and read, `O_CREAT | O_EXCL`, write and close of single-writer files, `link(2)`
//! of a prepared file, `unlink(2)`, `mkdir(2)`, `fsync(2)`; **no rename**. The
//! one exception, `flock(2)`, marks a file as standing for a live process
//! ([`Dir::publish_locked`]); only a directory's wait line uses it, and only
//! on a local file system.
//!
//! Everything here blocks: callers run it through [`crate::offload::Offload`], so
//! a hung mount costs a thread, not the caller.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::{self, ErrorKind};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// What kind of entry a directory holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed).
    Symlink,
    /// A named pipe.
    Fifo,
    /// A socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// Something the file system does not name.
    Other,
}

impl Kind {
    fn of(t: FileType) -> Self {
        match t {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Dir,
            FileType::Symlink => Kind::Symlink,
            FileType::Fifo => Kind::Fifo,
            FileType::Socket => Kind::Socket,
            FileType::CharacterDevice => Kind::CharDevice,
            FileType::BlockDevice => Kind::BlockDevice,
            FileType::Unknown => Kind::Other,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::File => "a regular file",
            Kind::Dir => "a directory",
            Kind::Symlink => "a symbolic link",
            Kind::Fifo => "a FIFO (named pipe)",
            Kind::Socket => "a socket",
            Kind::CharDevice => "a character device",
            Kind::BlockDevice => "a block device",
            Kind::Other => "an entry of unknown type",
        })
    }
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its name.
    pub name: OsString,
    /// What it is (never following a symlink).
    pub kind: Kind,
}

/// The outcome of opening a directory below another.
#[derive(Debug)]
pub enum Opened {
    /// It is a directory: here it is.
    Dir(Dir),
    /// It (or a component on the way) does not exist.
    Absent,
    /// A component on the way is not a directory: tenure does not go through it.
    Foreign {
        /// The component.
        path: PathBuf,
        /// What it is.
        kind: Kind,
    },
}

/// The outcome of reading a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Read {
    /// A regular file's content and its modification time (unix ms, if known).
    File {
        /// The bytes.
        bytes: Vec<u8>,
        /// `st_mtime` in unix ms.
        modified_ms: Option<u64>,
    },
    /// There is no such entry (or its NFS handle went stale: it was replaced).
    Absent,
    /// The entry is not a regular file; it was not opened.
    Foreign {
        /// What it is.
        kind: Kind,
        /// Its own modification time (unix ms), for judging it by age.
        modified_ms: Option<u64>,
    },
    /// A regular file larger than the cap; it was not read.
    TooLarge {
        /// Its size.
        size: u64,
        /// Its modification time (unix ms).
        modified_ms: Option<u64>,
    },
}

/// An open directory: every operation is relative to it.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Whether an I/O error means "not there": absent, or an NFS handle that went
/// stale because the entry was removed or replaced on the server (read again).
pub fn is_gone(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::NotFound | ErrorKind::StaleNetworkFileHandle)
}

fn gone(e: Errno) -> bool {
    e == Errno::NOENT || e == Errno::STALE
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY
}

// The field types of `struct stat` differ between architectures.
#[allow(clippy::useless_conversion)]
fn mtime_ms(st: &rustix::fs::Stat) -> Option<u64> {
    let secs = u64::try_from(st.st_mtime).ok()?;
    let nanos = u64::try_from(st.st_mtime_nsec).unwrap_or(0);
    secs.checked_mul(1000).map(|ms| ms.saturating_add(nanos / 1_000_000))
}

fn kind_of(st: &rustix::fs::Stat) -> Kind {
    Kind::of(FileType::from_raw_mode(st.st_mode))
}

impl Dir {
    /// Opens the store's root, `path` (which may be a symlink: the user named
    /// it), creating it and its parents if `create` is set. `Ok(None)` if it does
    /// not exist and `create` is not set.
    pub fn open_root(path: &Path, create: bool) -> io::Result<Option<Dir>> {
        if create && let Err(e) = std::fs::create_dir_all(path) {
            // A symlink to nothing says "exists" to mkdir: say what it is.
            return Err(match std::fs::read_link(path) {
                Ok(to) if e.kind() == ErrorKind::AlreadyExists && !path.exists() => io::Error::new(
                    ErrorKind::NotFound,
                    format!("it is a symbolic link to {}, which does not exist", to.display()),
                ),
                _ => e,
            });
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOCTTY;
        match rustix::fs::open(path, flags, Mode::empty()) {
            Ok(fd) => Ok(Some(Dir { fd, path: path.to_path_buf() })),
            Err(e) if gone(e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The directory's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens `rel` (`/`-separated components, each a plain name) below this
    /// directory, never following a symlink; with `create`, makes the missing
    /// components (`mkdir`, fsyncing each parent that gained one if `sync`).
    pub fn open_dir(&self, rel: &str, create: bool, sync: bool) -> io::Result<Opened> {
        let mut cur: Option<Dir> = None;
        for part in rel.split('/').filter(|p| !p.is_empty()) {
            if part == "." || part == ".." {
                return Err(io::Error::new(ErrorKind::InvalidInput, format!("path component {part:?}")));
            }
            let parent = cur.as_ref().unwrap_or(self);
            let path = parent.path.join(part);
            // Two rounds: a component made by this call (or by someone racing us)
            // is opened on the second.
            let mut made = false;
            let fd = loop {
                match rustix::fs::openat(parent, part, dir_flags(), Mode::empty()) {
                    Ok(fd) => break fd,
                    Err(e) if gone(e) && create && !made => {
                        made = true;
                        match rustix::fs::mkdirat(parent, part, Mode::from(0o755)) {
                            Ok(()) if sync => parent.sync()?,
                            Ok(()) => {}
                            Err(e) if e == Errno::EXIST => {}
                            // "Not there" from mkdir in a directory still
                            // linked: a file system that makes no
                            // directories here (`/proc`), not a race with a
                            // remover. Gone would send the caller round again,
                            // for ever.
                            Err(e) if gone(e) && parent.linked() => {
                                return Err(io::Error::other(format!(
                                    "{} exists, but making a directory in it fails with \"{e}\": \
                                     a file system that cannot hold a store",
                                    parent.path.display()
                                )));
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                    Err(e) if gone(e) => return Ok(Opened::Absent),
                    // ELOOP (a symlink, with O_NOFOLLOW) or ENOTDIR (a file, FIFO…).
                    Err(e) if e == Errno::LOOP || e == Errno::NOTDIR => {
                        let kind = parent.kind(OsStr::new(part))?.unwrap_or(Kind::Other);
                        return Ok(Opened::Foreign { path, kind });
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            cur = Some(Dir { fd, path });
        }
        Ok(Opened::Dir(cur.map_or_else(|| self.try_clone(), Ok)?))
    }

    /// Whether the directory is still linked into the tree (not removed while
    /// open); `false` if that cannot be told.
    fn linked(&self) -> bool {
        rustix::fs::fstat(&self.fd).is_ok_and(|st| st.st_nlink > 0)
    }

    fn try_clone(&self) -> io::Result<Dir> {
        Ok(Dir { fd: self.fd.try_clone()?, path: self.path.clone() })
    }

    /// What `name` is, without following a symlink; `None` if absent.
    pub fn kind(&self, name: &OsStr) -> io::Result<Option<Kind>> {
        match rustix::fs::statat(self, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(kind_of(&st))),
            Err(e) if gone(e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Calls `f` with the name and kind of every entry except `.` and `..`,
    /// without collecting them (a directory may be large). The kind is
    /// [`Kind::Other`] where the file system does not say it in the listing (NFS,
    /// XFS): ask [`Dir::kind`] when it matters.
    pub fn each(&self, mut f: impl FnMut(&OsStr, Kind)) -> io::Result<()> {
        for entry in rustix::fs::Dir::read_from(self)? {
            let entry = entry?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if name != "." && name != ".." {
                f(name, Kind::of(entry.file_type()));
            }
        }
        Ok(())
    }

    /// The entries of this directory, except `.` and `..`, with their kinds, at
    /// most `max` of them (an error past that: no directory tenure writes holds
    /// so many).
    pub fn entries(&self, max: usize) -> io::Result<Vec<Entry>> {
        let mut out = Vec::new();
        let mut over = false;
        self.each(|name, kind| {
            if out.len() >= max {
                over = true;
            } else {
                out.push(Entry { name: name.to_os_string(), kind });
            }
        })?;
        if over {
            return Err(io::Error::other(format!("{} holds more than {max} entries", self.path.display())));
        }
        for e in &mut out {
            if e.kind == Kind::Other {
                e.kind = self.kind(&e.name)?.unwrap_or(Kind::Other);
            }
        }
        Ok(out)
    }

    /// Reads the regular file `name`, at most `cap` bytes (see [`Read`]).
    pub fn read(&self, name: &str, cap: usize) -> io::Result<Read> {
        self.read_prefix(name, cap, None)
    }

    /// Like [`Dir::read`], but reads only the first `len` bytes when given (the
    /// part a manifest covers); a shorter file is an error.
    pub fn read_prefix(&self, name: &str, cap: usize, len: Option<u64>) -> io::Result<Read> {
        let st = match rustix::fs::statat(self, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(e) if gone(e) => return Ok(Read::Absent),
            Err(e) => return Err(e.into()),
        };
        let (kind, modified_ms) = (kind_of(&st), mtime_ms(&st));
        if kind != Kind::File {
            return Ok(Read::Foreign { kind, modified_ms });
        }
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(self, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(e) if gone(e) => return Ok(Read::Absent),
            Err(e) if e == Errno::LOOP => return Ok(Read::Foreign { kind: Kind::Symlink, modified_ms }),
            Err(e) => return Err(e.into()),
        };
        // The entry may have been replaced between the stat and the open.
        let st = rustix::fs::fstat(&fd)?;
        let (kind, modified_ms) = (kind_of(&st), mtime_ms(&st));
        if kind != Kind::File {
            return Ok(Read::Foreign { kind, modified_ms });
        }
        let size = u64::try_from(st.st_size).unwrap_or(0);
        let want = len.unwrap_or(size);
        if want > cap as u64 {
            return Ok(Read::TooLarge { size: want, modified_ms });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(want).unwrap_or(0));
        let limit = if len.is_some() { want } else { cap as u64 + 1 };
        let mut chunk = [0u8; 64 << 10];
        while (bytes.len() as u64) < limit {
            let room = usize::try_from(limit - bytes.len() as u64).unwrap_or(usize::MAX).min(chunk.len());
            match rustix::io::read(&fd, &mut chunk[..room]) {
                Ok(0) => break,
                Ok(n) => bytes.extend_from_slice(&chunk[..n]),
                Err(Errno::INTR) => continue,
                Err(e) if gone(e) => return Ok(Read::Absent),
                Err(e) => return Err(e.into()),
            }
        }
        if len.is_none() && bytes.len() > cap {
            return Ok(Read::TooLarge { size: bytes.len() as u64, modified_ms });
        }
        if (bytes.len() as u64) < want && len.is_some() {
            return Err(io::Error::new(
                ErrorKind::UnexpectedEof,
                format!("{} has {} bytes, fewer than the {want} expected", self.path.join(name).display(), bytes.len()),
            ));
        }
        Ok(Read::File { bytes, modified_ms })
    }

    /// Creates `name` (`O_CREAT | O_EXCL`, never through a symlink), writes
    /// `bytes`, fsyncs it if `sync`, and closes it, checking the close. A file
    /// left half-written by an error is the caller's to remove.
    pub fn create_new(&self, name: &str, bytes: &[u8], sync: bool) -> io::Result<()> {
        let fd = self.create_excl(name, OFlags::WRONLY)?;
        write_all(&fd, bytes)?;
        if sync {
            rustix::fs::fdatasync(&fd)?;
        }
        close_checked(fd)
    }

    /// Opens a new file `name` with `O_CREAT | O_EXCL | O_NOFOLLOW` and `access`
    /// (e.g. `O_WRONLY | O_APPEND`), mode 0644.
    pub fn create_excl(&self, name: &str, access: OFlags) -> io::Result<OwnedFd> {
        let flags = access | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
        Ok(rustix::fs::openat(self, name, flags, Mode::from(0o644))?)
    }

    /// Opens the existing regular file `name` with `access` (e.g. `O_WRONLY |
    /// O_APPEND`), never through a symlink and never blocking on a FIFO; anything
    /// but a regular file is an error.
    pub fn open_file(&self, name: &str, access: OFlags) -> io::Result<OwnedFd> {
        let flags = access | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(self, name, flags, Mode::empty())?;
        let kind = kind_of(&rustix::fs::fstat(&fd)?);
        if kind != Kind::File {
            return Err(io::Error::other(format!("{} is {kind}, not a regular file", self.path.join(name).display())));
        }
        Ok(fd)
    }

    /// Writes `bytes` to a fresh temporary file and links it to `name`, which
    /// only one writer can ever win: `Ok(false)` if `name` already existed. The
    /// temporary file is removed either way; with `sync`, the file is fsynced
    /// before the link and the directory after.
    pub fn publish(&self, name: &str, bytes: &[u8], sync: bool) -> io::Result<bool> {
        let tmp = format!("{name}.tmp-{:016x}", rand::random::<u64>());
        if let Err(e) = self.create_new(&tmp, bytes, sync) {
            let _ = self.remove(&tmp);
            return Err(e);
        }
        let linked = self.link(&tmp, name);
        let _ = self.remove(&tmp);
        match linked {
            Ok(()) => {
                if sync {
                    self.sync()?;
                }
                Ok(true)
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// [`Dir::publish`] of a file that stands for this process while the
    /// returned descriptor is open: the file is locked (`flock(2)`, shared)
    /// from before it is linked, and the descriptor, opened for writing by
    /// `name`, keeps it locked. When the process ends, however it ends, the
    /// kernel closes the descriptor: the lock is free ([`Dir::unlocked`]) and
    /// a watch of the directory sees `name` closed after writing
    /// (`IN_CLOSE_WRITE`). `None` if `name` already existed. Not fsynced.
    pub fn publish_locked(&self, name: &str, bytes: &[u8]) -> io::Result<Option<OwnedFd>> {
        use rustix::fs::{FlockOperation, flock};
        let tmp = format!("{name}.tmp-{:016x}", rand::random::<u64>());
        let fd = self.create_excl(&tmp, OFlags::WRONLY)?;
        let published = (|| -> io::Result<OwnedFd> {
            flock(&fd, FlockOperation::NonBlockingLockShared)?;
            write_all(&fd, bytes)?;
            self.link(&tmp, name)?;
            // The lock passes to a descriptor of `name` with no moment free:
            // both hold it until the first is closed. A file left unlocked
            // would stand for a process that ended: none is left.
            self.hold(name).inspect_err(|_| {
                let _ = self.remove(name);
            })
        })();
        let _ = self.remove(&tmp);
        match published {
            Ok(held) => Ok(Some(held)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Opens the regular file `name` for writing and locks it (`flock(2)`,
    /// shared): what [`Dir::publish_locked`] keeps, for a file already there.
    pub fn hold(&self, name: &str) -> io::Result<OwnedFd> {
        use rustix::fs::{FlockOperation, flock};
        let held = self.open_file(name, OFlags::WRONLY)?;
        flock(&held, FlockOperation::NonBlockingLockShared)?;
        Ok(held)
    }

    /// Whether nobody holds a lock on the regular file `name`: a file of
    /// [`Dir::publish_locked`] whose process has ended. `None` if it is
    /// absent. Takes the lock for a moment and never waits; a file that is not
    /// a regular file is an error.
    pub fn unlocked(&self, name: &str) -> io::Result<Option<bool>> {
        use rustix::fs::{FlockOperation, flock};
        let fd = match self.open_file(name, OFlags::RDONLY) {
            Ok(fd) => fd,
            Err(e) if is_gone(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        match flock(&fd, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(true)),
            Err(e) if e == Errno::WOULDBLOCK => Ok(Some(false)),
            Err(e) => Err(e.into()),
        }
    }

    /// `link(2)` of `from` to `to`, both in this directory (a symlink `from` is
    /// linked as the symlink itself, never its target).
    pub fn link(&self, from: &str, to: &str) -> io::Result<()> {
        Ok(rustix::fs::linkat(self, from, self, to, AtFlags::empty())?)
    }

    /// `unlink(2)` of `name` (never a directory).
    pub fn remove(&self, name: &str) -> io::Result<()> {
        Ok(rustix::fs::unlinkat(self, name, AtFlags::empty())?)
    }

    /// `mkdir(2)` of `name`: `Ok(true)` if this call created it, `Ok(false)` if
    /// something by that name existed (use [`Dir::open_dir`] to check what).
    pub fn mkdir(&self, name: &str) -> io::Result<bool> {
        match rustix::fs::mkdirat(self, name, Mode::from(0o755)) {
            Ok(()) => Ok(true),
            Err(e) if e == Errno::EXIST => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Size and modification time (unix ms) of the regular file `name`, without
    /// opening it; `None` if absent; an error naming what it is otherwise.
    pub fn file_size(&self, name: &str) -> io::Result<Option<(u64, Option<u64>)>> {
        match rustix::fs::statat(self, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if kind_of(&st) == Kind::File => Ok(Some((u64::try_from(st.st_size).unwrap_or(0), mtime_ms(&st)))),
            Ok(st) => Err(io::Error::other(format!("{} is {}", self.path.join(name).display(), kind_of(&st)))),
            Err(e) if gone(e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Sets the modification time of `name` to now, on the kernel's clock
    /// (`utimensat(2)`, never through a symlink).
    pub fn touch(&self, name: &str) -> io::Result<()> {
        let at = |nsec| rustix::fs::Timespec { tv_sec: 0, tv_nsec: nsec };
        let times = rustix::fs::Timestamps {
            last_access: at(rustix::fs::UTIME_OMIT),
            last_modification: at(rustix::fs::UTIME_NOW),
        };
        Ok(rustix::fs::utimensat(self, name, &times, AtFlags::SYMLINK_NOFOLLOW)?)
    }

    /// `fsync(2)` of the directory itself: its new and removed names are durable.
    pub fn sync(&self) -> io::Result<()> {
        Ok(rustix::fs::fsync(self)?)
    }
}

/// Writes all of `bytes` to `fd`.
pub fn write_all(fd: &OwnedFd, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match rustix::io::write(fd, bytes) {
            Ok(0) => return Err(io::Error::new(ErrorKind::WriteZero, "the file system accepted no bytes")),
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Closes `fd` and reports what `close(2)` says: on NFS, a write that was not
/// fsynced may only fail here (the server ran out of space, the export went
/// away), and dropping the descriptor would lose that error.
pub fn close_checked(fd: OwnedFd) -> io::Result<()> {
    nix::unistd::close(fd).map_err(io::Error::from)
}

#[cfg(test)]
mod tests;
