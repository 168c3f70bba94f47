//! A line's files: their names (a sequence number each), what an entry
//! holds, how old it may be, and the listing of a line's directory.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;

use tenure_core::Result;
use tenure_core::backend::{Waiter, check_key};
use tenure_core::cas::ENTRY_TTL;

use super::{MARGIN, MAX_FILES, SEQ_DIGITS};
use crate::fs::Dir;

/// `name~line`: the key whose directory holds `name`'s waiters.
pub(super) fn line_key(name: &str) -> Result<String> {
    check_key(name)?;
    Ok(format!("{name}~line"))
}

/// The file name of entry `seq`.
pub(super) fn entry_file(seq: u64) -> String {
    format!("{seq:0SEQ_DIGITS$}")
}

/// The sequence number an entry's file name stands for.
pub(super) fn parse_seq(name: &OsStr) -> Option<u64> {
    let digits = name.to_str()?;
    (digits.len() == SEQ_DIGITS && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.parse().ok())?
}

/// What an entry's file holds: its kind, a newline, the nonce. The kind is `x`
/// or `s` (exclusive or shared), upper case if the file is kept locked by its
/// waiter.
pub(super) fn entry_bytes(waiter: &Waiter, locked: bool) -> Vec<u8> {
    let kind = if waiter.shared { 's' } else { 'x' };
    let kind = if locked { kind.to_ascii_uppercase() } else { kind };
    format!("{kind}\n{}", waiter.nonce).into_bytes()
}

/// The waiter of an entry, and whether its file is kept locked.
pub(super) fn parse_entry(bytes: &[u8]) -> Option<(Waiter, bool)> {
    let text = std::str::from_utf8(bytes).ok()?;
    let (kind, nonce) = text.split_once('\n')?;
    let (shared, locked) = match kind {
        "s" => (true, false),
        "x" => (false, false),
        "S" => (true, true),
        "X" => (false, true),
        _ => return None,
    };
    // Any nonce a waiter can have, the empty one too: an entry it wrote and
    // could not read back would make it enter again and again.
    Some((Waiter { nonce: nonce.to_string(), shared }, locked))
}

/// One file of a line's directory, as read.
pub(super) struct Found {
    pub(super) file: String,
    pub(super) seq: u64,
    /// The waiter, if the file is one's.
    pub(super) waiter: Option<Waiter>,
    /// Whether its waiter keeps it locked while alive.
    pub(super) locked: bool,
    /// Whether it is alive: touched within [`ENTRY_TTL`] + [`MARGIN`], and not
    /// in the future.
    pub(super) alive: bool,
    /// Until when it is alive, unix ms.
    pub(super) alive_until_ms: u64,
}

/// Whether a file touched at `touched_ms` is alive at `now_ms`, and until when.
pub(super) fn alive(touched_ms: Option<u64>, now_ms: u64) -> (bool, u64) {
    let Some(touched_ms) = touched_ms else { return (false, 0) };
    let margin = tenure_core::limits::millis(MARGIN);
    let until = touched_ms.saturating_add(tenure_core::limits::millis(ENTRY_TTL)).saturating_add(margin);
    (until >= now_ms && touched_ms <= now_ms.saturating_add(margin), until)
}

/// The lowest number from `start` on that no entry of `found` (lowest
/// first) has; `None` past `u64::MAX`.
pub(super) fn first_free(start: u64, found: &[Found]) -> Option<u64> {
    let mut seq = start;
    for f in found.iter().skip_while(|f| f.seq < start) {
        if f.seq != seq {
            break;
        }
        seq = seq.checked_add(1)?;
    }
    Some(seq)
}

/// Whether a removal left the entry gone.
pub(super) fn removed(removal: std::io::Result<()>) -> bool {
    match removal {
        Ok(()) => true,
        Err(e) => crate::fs::is_gone(&e),
    }
}

/// Opens the entry `file` to keep while its waiter waits: locked (for
/// writing, as [`Dir::publish_locked`] keeps it) if `locked`, else for reading.
pub(super) fn hold(dir: &Dir, file: &str, locked: bool) -> std::io::Result<OwnedFd> {
    if locked { dir.hold(file) } else { dir.open_file(file, rustix::fs::OFlags::RDONLY) }
}

/// [`Dir::publish`] of an entry judged by its age, kept open for reading;
/// `None` if `file` exists.
pub(super) fn publish_unlocked(dir: &Dir, file: &str, bytes: &[u8]) -> std::io::Result<Option<OwnedFd>> {
    if !dir.publish(file, bytes, false)? {
        return Ok(None);
    }
    hold(dir, file, false).map(Some).inspect_err(|_| {
        let _ = dir.remove(file);
    })
}

/// Sets the modification time of the open entry `fd` to now, on the kernel's
/// clock (`futimens(2)`: an attribute, which raises no event a waiter watches).
pub(super) fn touch(fd: &OwnedFd) -> std::io::Result<()> {
    use rustix::fs::{Timespec, Timestamps, UTIME_NOW, UTIME_OMIT};
    let (omit, now) = (Timespec { tv_sec: 0, tv_nsec: UTIME_OMIT }, Timespec { tv_sec: 0, tv_nsec: UTIME_NOW });
    Ok(rustix::fs::futimens(fd, &Timestamps { last_access: omit, last_modification: now })?)
}

/// Whether `file` in `dir` is the open file `fd`: not removed, nor replaced.
pub(super) fn same_file(dir: &Dir, file: &str, fd: &OwnedFd) -> std::io::Result<bool> {
    let there = match rustix::fs::statat(dir, file, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(e) if e == rustix::io::Errno::NOENT || e == rustix::io::Errno::STALE => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let open = rustix::fs::fstat(fd)?;
    Ok((there.st_dev, there.st_ino) == (open.st_dev, open.st_ino))
}

/// Whether the waiter of the locked entry `file` has ended: its lock is free,
/// or the file is gone. A lock that cannot be tried is taken as held.
pub(super) fn ended(dir: &Dir, file: &str) -> bool {
    !matches!(dir.unlocked(file), Ok(Some(false)) | Err(_))
}

/// The names of a line's directory, as listed.
#[derive(Default)]
pub(super) struct Listing {
    /// The sequence numbers of its entries, lowest first.
    pub(super) seqs: Vec<u64>,
    /// Temp files (`{seq}.tmp-…`): entries being written, or whose writer
    /// crashed.
    pub(super) tmps: Vec<String>,
}

/// The names in the line's directory `dir`. Names that are neither an entry
/// nor a temp file are skipped; past [`MAX_FILES`] names in all the listing
/// stops, an error: a line so cluttered is no line (its waiters poll), and a
/// directory of a million names costs no more than one of [`MAX_FILES`].
pub(super) fn list(dir: &Dir) -> std::io::Result<Listing> {
    use std::os::unix::ffi::OsStrExt;
    let mut listing = Listing::default();
    let mut names = 0usize;
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        names += 1;
        if names > MAX_FILES {
            return Err(std::io::Error::other(format!("{} holds more than {MAX_FILES} names", dir.path().display())));
        }
        if let Some(seq) = parse_seq(name) {
            listing.seqs.push(seq);
        } else if let Some(tmp) = name.to_str().filter(|n| n.contains(".tmp-")) {
            listing.tmps.push(tmp.to_string());
        }
    }
    listing.seqs.sort_unstable();
    Ok(listing)
}
