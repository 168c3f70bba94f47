//! The wait line of a directory store: a file per waiter, in the order of
//! their sequence numbers, each waiter woken only when the waiter just ahead
//! of it leaves — ZooKeeper's sequential nodes, etcd's Lock API.
//!
//! Waiters of lease `deploy/prod` are files in the directory `deploy/prod~line/`:
//!
//! | line | directory | cost |
//! |---|---|---|
//! | enter (once per wait) | list and read the entries, removing those of crashed waiters; link a new file `{seq:020}` (one past the last waiter's) holding `X` or `S` (exclusive or shared), a newline and the waiter's nonce, locked and kept open; a lost race (the name exists) lists again | a listing, a small read per entry, a small write, a `link(2)` and two `flock(2)` |
//! | stay (every 2 s) | `futimens(2)` of its own open file, still linked (`fstat`): the kernel's clock, the line not read, nobody woken | an `fstat` and a `futimens`, no lookup |
//! | whose turn (when the entry ahead goes, and every 2 s) | check that its own name is still its file; list the names; read the entries ahead of it, nearest first, trying their locks, until one that keeps it waiting | a `stat`, a listing of names, and a small read, an `open` and a `flock` per entry looked at: one, unless those just ahead ended (or, for a shared waiter, are shared) |
//! | wait for the turn | inotify on the line's directory, woken only when the entry just ahead is removed, or closed by its waiter's end; every 200 ms, a look at that entry | a `stat`, an `open` and a `flock` per look |
//! | leave | `unlink(2)` of its own file (checked to be its own), then close it | a `stat` and an `unlink` |
//!
//! So a hand-over wakes one waiter, not the whole line (a single record per
//! lease woke every waiter at every entry and departure), and a line of N
//! waiters reads about N entries every 2 s, not every entry for every waiter
//! twice (2 N²: 80 000 reads for 200 waiters). Line files are not `fsync`ed:
//! only the order is at stake, never a lease.
//!
//! **Liveness.** A waiter keeps its file open and locked (`flock(2)`) while it
//! waits. When its process ends, however it ends (`SIGKILL` too), the kernel
//! closes the file: the lock is free, and the waiter just behind is woken by
//! the close (`IN_CLOSE_WRITE`), finds the lock free and skips the entry, so
//! a killed waiter holds up nobody (`flock(1)` users expect no less). Waiters
//! keep a line only where they can watch it, on a local file system (on NFS
//! they poll: the store finds out before anyone enters), and entries are locked
//! only there: on a shared mount a lock is the server's or this machine's
//! alone, no sign of a process; such entries are written unlocked and no lock
//! is tried (`FileBackend::lockable`). A file's modification time is when its waiter
//! last showed it was alive: a file untouched for more than [`ENTRY_TTL`](tenure_core::cas::ENTRY_TTL) plus
//! [`MARGIN`] is a waiter that crashed or is stopped, and one dated in the
//! future was not set by a waiter: both are skipped, and the next waiter to
//! enter removes them. Files in the older format (`x` or `s`, not locked:
//! where a lock says nothing of a process) are judged by their age alone.
//!
//! **Open files.** A waiter keeps its entry open while it waits, so a store
//! keeps at most a quarter of the process's limit of open files
//! (`RLIMIT_NOFILE`) as entries; past it, waiters poll instead.
//!
//! **Hostile content.** The directory is opened like a key's, without following
//! links; names that are not a sequence number, entries that are not regular
//! files, files larger than [`MAX_ENTRY_BYTES`] or not in the entry format are
//! not waiters (only their age lets them be removed), and an entry that cannot
//! be read is skipped (and left alone: its age is unknown). A line that cannot
//! be used at all — more than [`MAX_FILES`] names, a directory that cannot be
//! listed, no sequence number left — is reported as [`Error::Corrupt`], never
//! a long listing: its waiters poll instead (see `cas::queue`), and nobody is
//! kept from a free lease by what others left in its line.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::FileBackend;
use super::watch::{Registration, line_mask};
use crate::fs::{Dir, Kind, Read};
use tenure_core::backend::{Line, Waiter};
use tenure_core::cas::{MAX_WAITERS, line_full};
use tenure_core::{Error, Result};

mod entry;
use entry::{
    Found, alive, ended, entry_bytes, entry_file, first_free, hold, line_key, list, parse_entry, publish_unlocked,
    removed, same_file, touch,
};

/// How far past [`ENTRY_TTL`](tenure_core::cas::ENTRY_TTL) a waiter's file may go unrefreshed (a waiter
/// paused that long is taken for crashed, and enters again when it wakes).
const MARGIN: Duration = Duration::from_secs(2);
/// Entries one line's directory may hold, waiters and leftovers together.
const MAX_FILES: usize = 4 * MAX_WAITERS;
/// Largest entry file read: a kind, a newline and a nonce.
const MAX_ENTRY_BYTES: usize = 1024;
/// How often a waiter checks (one `stat`, and the lock) that the entry ahead
/// of it is still there and alive: a line of N waiters costs 5 N such looks a
/// second. The removal of that entry, or its close by a waiter that ended,
/// wakes the waiter at once; this is the net under that, for a departure the
/// watch cannot see. (It once caught a removal lost to the kernel, one
/// hand-over in a few thousand: see `Shared::add`.)
const RECHECK: Duration = Duration::from_millis(200);
/// Digits of an entry's sequence number.
const SEQ_DIGITS: usize = 20;
/// Sequence numbers a waiter takes stay below this (19 digits).
const MAX_SEQ: u64 = 10u64.pow(19);
/// Entries that lost the race for a sequence number in a row before entering
/// gives up.
const MAX_RACES: usize = 64;
/// The entries of this store's waiters.
pub(super) type Held = Arc<Entries>;

/// The entries of one store's waiters, by line key and nonce, each kept open
/// (and locked where locks say whether a process lives) while its waiter
/// waits: its waiter stays in line, and finds its place, through it alone.
#[derive(Debug)]
pub(super) struct Entries {
    book: parking_lot::Mutex<Book>,
    /// Most entries kept open at once ([`max_held`]); past it, waiters poll.
    cap: usize,
    /// Entries read by this store, and entries whose read fails (tests).
    #[cfg(test)]
    hooks: hooks::Hooks,
}

/// The entries held, and when their waiters last left their lines.
#[derive(Debug, Default)]
struct Book {
    mine: HashMap<(String, String), Mine>,
    /// When each waiter last left a line here. An entry whose writing was
    /// asked for before that is not kept: its wait was dropped while the
    /// entry was being written, on a thread that went on after it.
    left: HashMap<(String, String), std::time::Instant>,
    /// `left` is swept of old departures once it has this many: each sweep
    /// at least halves the sweeps to come, so a leave costs O(1) on average
    /// however many lines a busy process leaves.
    sweep_at: usize,
}

/// How long a departure is remembered: far longer than writing an entry
/// takes, even on a slow disk (a store's operations have their own deadline).
const LEFT_MEMORY: Duration = Duration::from_secs(120);
/// Departures remembered before the first sweep.
const LEFT_SWEEP_MIN: usize = 1024;

/// A waiter's own entry.
#[derive(Debug)]
struct Mine {
    seq: u64,
    /// Its file, open; closed once the file is removed (see `leave`).
    fd: Arc<OwnedFd>,
}

impl Default for Entries {
    fn default() -> Self {
        Self::with_cap(max_held())
    }
}

/// Most entries one store keeps open: a quarter of the process's soft limit
/// of open files (`RLIMIT_NOFILE`, read once; commonly 1 024, so 256), which
/// leaves the rest to everything else the process opens. (It was 4 096: past
/// a limit of 1 024, a process with many waiters failed to open anything.)
fn max_held() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        soft.map_or(usize::MAX, |n| usize::try_from(n / 4).unwrap_or(usize::MAX))
    })
}

impl Entries {
    fn with_cap(cap: usize) -> Self {
        Self {
            book: parking_lot::Mutex::default(),
            cap,
            #[cfg(test)]
            hooks: hooks::Hooks::default(),
        }
    }

    /// The number and the open file of the entry of `id`, if held.
    fn get(&self, id: &(String, String)) -> Option<(u64, Arc<OwnedFd>)> {
        self.book.lock().mine.get(id).map(|m| (m.seq, m.fd.clone()))
    }

    /// Holds the entry `seq` of `id`, written at the waiter's request made at
    /// `asked`; gives `fd` back if the waiter has left since (the entry is
    /// then the caller's to remove).
    fn put(&self, id: (String, String), seq: u64, fd: OwnedFd, asked: std::time::Instant) -> Option<OwnedFd> {
        let mut book = self.book.lock();
        if book.left.get(&id).is_some_and(|&left| left >= asked) {
            return Some(fd);
        }
        book.mine.insert(id, Mine { seq, fd: Arc::new(fd) });
        None
    }

    /// The entry of `id`, taken as its waiter leaves (see [`Book::left`]).
    fn take(&self, id: &(String, String)) -> Option<Mine> {
        let mut book = self.book.lock();
        let now = std::time::Instant::now();
        if book.left.len() >= book.sweep_at {
            book.left.retain(|_, &mut left| now.saturating_duration_since(left) < LEFT_MEMORY);
            book.sweep_at = book.left.len().saturating_mul(2).max(LEFT_SWEEP_MIN);
        }
        book.left.insert(id.clone(), now);
        book.mine.remove(id)
    }

    /// Lets the entry of `id` go, if it still is the file `fd`: its file was
    /// removed or replaced, so it is no place in line.
    fn forget(&self, id: &(String, String), fd: &Arc<OwnedFd>) {
        let mut book = self.book.lock();
        if book.mine.get(id).is_some_and(|m| Arc::ptr_eq(&m.fd, fd)) {
            book.mine.remove(id);
        }
    }

    fn len(&self) -> usize {
        self.book.lock().mine.len()
    }

    /// Whether a new entry would be one too many.
    fn full(&self) -> bool {
        self.len() >= self.cap
    }
}

impl FileBackend {
    /// The files of the line in `dir`, lowest sequence first (entries that
    /// cannot be read left out), and the temp files of entries whose writer
    /// crashed (`{seq}.tmp-…`, as old as a crashed waiter's entry).
    fn read_line(&self, dir: &Dir) -> std::io::Result<(Vec<Found>, Vec<String>)> {
        let now_ms = tenure_core::clock::unix_ms(std::time::SystemTime::now());
        let listing = list(dir)?;
        let found = listing.seqs.iter().filter_map(|&seq| self.look(dir, seq, now_ms)).collect();
        let leftovers = listing
            .tmps
            .into_iter()
            .filter(|tmp| matches!(dir.file_size(tmp), Ok(Some((_, touched))) if !alive(touched, now_ms).0))
            .collect();
        Ok((found, leftovers))
    }

    /// The entry `seq` of the line in `dir`, as read at `now_ms`; `None` if it
    /// is gone, or cannot be read: then it is no waiter, and is not removed
    /// either (its age is unknown).
    fn look(&self, dir: &Dir, seq: u64, now_ms: u64) -> Option<Found> {
        let file = entry_file(seq);
        let (entry, touched) = match self.read_entry(dir, &file) {
            Ok(Read::Absent) => return None,
            Ok(Read::File { bytes, modified_ms }) => (parse_entry(&bytes), modified_ms),
            Ok(Read::Foreign { modified_ms, .. } | Read::TooLarge { modified_ms, .. }) => (None, modified_ms),
            Err(e) => {
                tracing::debug!(line = %dir.path().display(), file, error = %e, "a wait-line entry cannot be read; skipped");
                return None;
            }
        };
        let (alive, alive_until_ms) = alive(touched, now_ms);
        let (waiter, locked) = entry.map_or((None, false), |(w, locked)| (Some(w), locked));
        Some(Found { file, seq, waiter, locked, alive, alive_until_ms })
    }

    /// Reads the entry `file` of the line in `dir` (at most
    /// [`MAX_ENTRY_BYTES`]).
    fn read_entry(&self, dir: &Dir, file: &str) -> std::io::Result<Read> {
        #[cfg(test)]
        self.held.hooks.reading(file)?;
        dir.read(file, MAX_ENTRY_BYTES)
    }

    /// The waiters alive in the line of `found` by their files' age, first
    /// first.
    fn waiters_of(found: &[Found]) -> Vec<&Found> {
        found.iter().filter(|f| f.alive && f.waiter.is_some()).collect()
    }

    /// [`Self::waiters_of`], less waiters at the front whose process has
    /// ended (their file's lock is free), one `open` and `flock` each, until
    /// the first alive. Ended waiters further on are left to whoever reaches
    /// them. A lock that cannot be tried (a file swapped for a FIFO, no
    /// permission) leaves the waiter in. Without `probe` (a directory other
    /// machines share, where a lock is no sign of a process here), locked
    /// entries are judged by age alone.
    fn live<'a>(dir: &Dir, found: &'a [Found], probe: bool) -> Vec<&'a Found> {
        let mut line = Self::waiters_of(found);
        while line.first().is_some_and(|f| probe && f.locked && ended(dir, &f.file)) {
            line.remove(0);
        }
        line
    }

    /// The store error for `e`, met by `op` in the line's directory.
    fn line_err(&self, op: &str, dir: &Dir, e: std::io::Error) -> Error {
        self.err(op.to_string(), dir.path(), e)
    }

    /// `e`, met in the wait line of `name`, as what it means to its waiters:
    /// a line that cannot be used ([`Error::Corrupt`]), so they poll — unless
    /// there can be no line here at all ([`Error::Unsupported`]: no watch).
    /// Every error of a line's own file-system calls is one of these: only
    /// the store's deadline (a hung mount), met outside them, stays an error
    /// of the store.
    fn unusable(&self, name: &str, e: Error) -> Error {
        let detail = match e {
            Error::Unsupported { .. } | Error::InvalidName { .. } | Error::Corrupt { .. } => return e,
            Error::Store { op, source, .. } => format!("{op}: {source}"),
            e => e.to_string(),
        };
        Error::corrupt(&*self.url, format!("the wait line of {name:?}"), detail)
    }

    /// Whether locks on the entries of the line in `dir` say whether their
    /// waiters live: on a local file system only. On NFS a lock is the
    /// server's, may need the file open for reading, or (`nolock`) is seen by
    /// this machine alone.
    fn lockable(&self, dir: &Dir) -> bool {
        matches!(self.on_network(dir), Ok(None))
    }

    /// Enters `waiter` in the line of `name`, or keeps it where it is: then
    /// only its own entry is touched, through the file it keeps open. Asked
    /// for at `asked`: if the waiter left its line since (its wait was dropped
    /// while this ran), the entry is removed again as soon as it is written.
    fn enter_blocking(&self, name: &str, waiter: &Waiter, asked: std::time::Instant) -> Result<()> {
        let key = line_key(name)?;
        let id = (key.clone(), waiter.nonce.clone());
        let op = format!("entering the wait line of {name:?}");
        if self.stay(&id).map_err(|e| self.err(&op, &self.root.join(&key), e))? {
            return Ok(());
        }
        let bytes = entry_bytes(waiter, false);
        if bytes.len() > MAX_ENTRY_BYTES {
            return Err(
                self.unsupported(format!("a holder nonce of {} bytes is too long to wait in line", bytes.len()))
            );
        }
        // Every entry is kept open: past so many, a waiter polls instead.
        if self.held.full() {
            let why = format!("this store keeps {} wait-line entries open already, its most", self.held.len());
            return Err(self.unsupported(why));
        }
        let Some(dir) = self.key_dir(&key, true)? else {
            return Err(Error::store(&*self.url, op, "the line's directory vanished as it was made"));
        };
        let lock = self.lockable(&dir);
        // Past the numbers lost to others (or taken by files no waiter wrote).
        let mut floor = 1;
        for _ in 0..MAX_RACES {
            let (found, leftovers) = self.read_line(&dir).map_err(|e| self.line_err(&op, &dir, e))?;
            // Waiters that crashed, files dated in the future, and old
            // leftovers; the numbers of those removed are free again.
            for file in &leftovers {
                let _ = dir.remove(file);
            }
            let found: Vec<Found> = found.into_iter().filter(|f| f.alive || !removed(dir.remove(&f.file))).collect();
            let line = Self::waiters_of(&found);
            if let Some(me) = line.iter().find(|f| f.waiter.as_ref().is_some_and(|w| w.nonce == waiter.nonce)) {
                // Still here, in an entry this store does not hold (a
                // departure that could not remove it; a locked one is taken
                // for ended by others): held again, and touched. One that
                // cannot be held is removed, and the waiter enters anew.
                match hold(&dir, &me.file, me.locked && lock) {
                    Ok(fd) => {
                        touch(&fd).map_err(|e| self.line_err(&op, &dir, e))?;
                        if self.held.put(id, me.seq, fd, asked).is_some() {
                            let _ = dir.remove(&me.file);
                        }
                        return Ok(());
                    }
                    Err(_) => {
                        let _ = dir.remove(&me.file);
                        continue;
                    }
                }
            }
            if line.len() >= MAX_WAITERS {
                return Err(line_full(&self.url, name));
            }
            // One past the last waiter's entry still there (crashed or not),
            // and past the names taken right after it: files no waiter wrote
            // (a directory, a FIFO, garbage) are no place in the line, and
            // one numbered at the top of the range must not shut it. A waiter
            // there (one that crashed was just removed) leaves no number: this
            // waiter polls (see `unusable`) until that entry lapses.
            let last = found.iter().rev().find(|f| f.waiter.is_some()).map_or(0, |f| f.seq);
            let next = last.checked_add(1).map(|s| s.max(floor)).and_then(|s| first_free(s, &found));
            let Some(seq) = next.filter(|&s| s < MAX_SEQ) else {
                return Err(Error::store(
                    &*self.url,
                    op,
                    format!("no sequence number is left past the entry {} (a file no waiter wrote?)", entry_file(last)),
                ));
            };
            let file = entry_file(seq);
            let published = match lock.then(|| dir.publish_locked(&file, &entry_bytes(waiter, true))) {
                Some(Ok(locked)) => Ok(locked),
                // Not locked, or a lock this file system refuses (`flock(2)`
                // on a FUSE or odd mount): an entry judged by its age.
                None | Some(Err(_)) => publish_unlocked(&dir, &file, &bytes),
            };
            if let Some(fd) = published.map_err(|e| self.line_err(&op, &dir, e))? {
                if self.held.put(id, seq, fd, asked).is_some() {
                    // Removed before its file is closed (and its lock freed):
                    // a close seen first would be taken for the waiter's end.
                    let _ = dir.remove(&file);
                }
                return Ok(());
            }
            floor = seq.saturating_add(1);
        }
        Err(Error::store(&*self.url, op, format!("lost the race for a place {MAX_RACES} times in a row")))
    }

    /// Touches the entry this store holds for `id` through its open file: no
    /// look at the line, nor even a lookup of its name. `false` if it holds
    /// none, or its file was removed (its waiter taken for crashed): the
    /// waiter enters again.
    fn stay(&self, id: &(String, String)) -> std::io::Result<bool> {
        let Some((_, fd)) = self.held.get(id) else { return Ok(false) };
        if !rustix::fs::fstat(&*fd).is_ok_and(|st| st.st_nlink > 0) {
            self.held.forget(id, &fd);
            return Ok(false);
        }
        touch(&fd)?;
        Ok(true)
    }

    fn waiters_blocking(&self, name: &str) -> Result<Vec<Waiter>> {
        let Some(dir) = self.key_dir(&line_key(name)?, false)? else { return Ok(Vec::new()) };
        let (found, _) =
            self.read_line(&dir).map_err(|e| self.line_err(&format!("reading the wait line of {name:?}"), &dir, e))?;
        Ok(Self::live(&dir, &found, self.lockable(&dir)).into_iter().filter_map(|f| f.waiter.clone()).collect())
    }

    /// Whose turn it is; when not `waiter`'s, a watch for the removal of the
    /// entry just ahead of it, set before that entry was last seen, and until
    /// when that entry is alive at most. Reads what it needs only: its own
    /// place is the entry this store holds (checked to be still there), and
    /// the entries ahead of it are read from the nearest on, until one that
    /// keeps it waiting ([`tenure_core::backend::may_try`]: an exclusive waiter,
    /// or any if it is exclusive itself) — one entry, unless those just
    /// ahead ended.
    fn turn_blocking(&self, name: &str, waiter: &Waiter, shared: &Arc<super::watch::Shared>) -> Result<Turn> {
        let key = line_key(name)?;
        let op = format!("reading the wait line of {name:?}");
        let id = (key, waiter.nonce.clone());
        let Some(dir) = self.key_dir(&id.0, false)? else {
            // The line's directory is gone (removed, or moved away with the
            // entry in it, which is still linked there): the entry is no
            // place in this line any more, and the waiter enters anew.
            if let Some((_, fd)) = self.held.get(&id) {
                self.held.forget(&id, &fd);
            }
            return Ok(Turn::NotInLine);
        };
        // Watch first, then read: a departure after the read is an event.
        let registration = self.register(&format!("the wait line of {name:?}"), &dir, line_mask(), shared)?;
        let Some((seq, fd)) = self.held.get(&id) else { return Ok(Turn::NotInLine) };
        if !same_file(&dir, &entry_file(seq), &fd).map_err(|e| self.line_err(&op, &dir, e))? {
            // Removed (taken for crashed) or replaced: it enters again.
            self.held.forget(&id, &fd);
            return Ok(Turn::NotInLine);
        }
        let listing = list(&dir).map_err(|e| self.line_err(&op, &dir, e))?;
        let now_ms = tenure_core::clock::unix_ms(std::time::SystemTime::now());
        let mut nearest: Option<Found> = None;
        for &s in listing.seqs.iter().rev().filter(|&&s| s < seq) {
            // Watched, so on a local file system: locks say who is alive.
            let Some(f) = self.look(&dir, s, now_ms).filter(|f| f.alive && !(f.locked && ended(&dir, &f.file))) else {
                continue;
            };
            let Some(theirs) = &f.waiter else { continue };
            let keeps_waiting = !(waiter.shared && theirs.shared);
            let nearest = nearest.get_or_insert(f);
            if keeps_waiting {
                return self.wait_for(&dir, &op, registration, nearest);
            }
        }
        Ok(Turn::Mine)
    }

    /// [`Turn::Wait`] for the removal of the entry `ahead`, watched by
    /// `registration`; [`Turn::Moved`] if it went while the watch was set.
    fn wait_for(&self, dir: &Dir, op: &str, mut registration: Registration, ahead: &Found) -> Result<Turn> {
        registration.on_removal_of(ahead.file.as_bytes());
        // Removed or ended between the read and the interest: look again at once.
        if Self::gone(dir, &ahead.file, ahead.locked).map_err(|e| self.line_err(op, dir, e))? {
            return Ok(Turn::Moved);
        }
        Ok(Turn::Wait {
            registration,
            ahead: ahead.file.clone(),
            locked: ahead.locked,
            alive_until_ms: ahead.alive_until_ms,
        })
    }

    /// Takes the waiter `nonce` out of the line of `name`: its own entry, if
    /// this store holds it (and it is still there), else any entry of its.
    fn leave_blocking(&self, name: &str, nonce: &str) -> Result<()> {
        let op = format!("leaving the wait line of {name:?}");
        let key = line_key(name)?;
        // Closed (and its lock freed) only once its file is gone: a close
        // seen while it is still there would be taken for the waiter's end.
        let mine = self.held.take(&(key.clone(), nonce.to_string()));
        let Some(dir) = self.key_dir(&key, false)? else { return Ok(()) };
        let files = match &mine {
            Some(m) => {
                let file = entry_file(m.seq);
                let here = same_file(&dir, &file, &m.fd).map_err(|e| self.line_err(&op, &dir, e))?;
                if here { vec![file] } else { Vec::new() }
            }
            None => {
                let (found, _) = self.read_line(&dir).map_err(|e| self.line_err(&op, &dir, e))?;
                let theirs = |f: &Found| f.waiter.as_ref().is_some_and(|w| w.nonce == nonce);
                found.into_iter().filter(theirs).map(|f| f.file).collect()
            }
        };
        for file in files {
            match dir.remove(&file) {
                Ok(()) => {}
                Err(e) if crate::fs::is_gone(&e) => {}
                Err(e) => return Err(self.line_err(&op, &dir, e)),
            }
        }
        Ok(())
    }

    /// Whether the line's entry `file` is gone: removed, or (if `locked`) its
    /// waiter's process has ended.
    fn gone(dir: &Dir, file: &str, locked: bool) -> std::io::Result<bool> {
        Ok(dir.kind(OsStr::new(file))? != Some(Kind::File) || (locked && ended(dir, file)))
    }

    /// [`Self::gone`], in the line of `key`.
    fn gone_blocking(&self, key: &str, file: &str, locked: bool) -> Result<bool> {
        let Some(dir) = self.key_dir(key, false)? else { return Ok(true) };
        Self::gone(&dir, file, locked).map_err(|e| self.line_err("reading a wait line", &dir, e))
    }
}

/// What [`FileBackend::turn_blocking`] found.
enum Turn {
    NotInLine,
    Mine,
    Moved,
    /// Waiting for the removal of the entry `ahead` (or the end of its
    /// waiter, if it keeps it `locked`), alive until `alive_until_ms` at most.
    Wait {
        registration: Registration,
        ahead: String,
        locked: bool,
        alive_until_ms: u64,
    },
}

#[async_trait]
impl Line for FileBackend {
    async fn enter(&self, name: &str, waiter: &Waiter) -> Result<()> {
        let (name, waiter, asked) = (name.to_string(), waiter.clone(), std::time::Instant::now());
        self.run(format!("entering the wait line of {name:?}"), move |b| {
            b.enter_blocking(&name, &waiter, asked).map_err(|e| b.unusable(&name, e))
        })
        .await
    }

    async fn waiters(&self, name: &str) -> Result<Vec<Waiter>> {
        let name = name.to_string();
        self.run(format!("reading the wait line of {name:?}"), move |b| {
            b.waiters_blocking(&name).map_err(|e| b.unusable(&name, e))
        })
        .await
    }

    async fn turn(&self, name: &str, waiter: &Waiter, timeout: Duration) -> Result<Option<bool>> {
        let deadline = Instant::now() + timeout;
        let shared = self.shared()?;
        let what = format!("the wait line of {name:?}");
        let (n, w) = (name.to_string(), waiter.clone());
        let turn = self.set_up(format!("reading {what}"), deadline, move |b| {
            b.turn_blocking(&n, &w, &shared).map_err(|e| b.unusable(&n, e))
        });
        let Some(turn) = turn.await? else { return Ok(Some(false)) };
        match turn {
            Turn::NotInLine => Ok(None),
            Turn::Mine => Ok(Some(true)),
            Turn::Moved => Ok(Some(false)),
            Turn::Wait { mut registration, ahead, locked, alive_until_ms } => {
                // Until the waiter ahead leaves or is taken for crashed; every
                // RECHECK, one `stat` of its entry, in case its departure went
                // unnoticed.
                let now_ms = tenure_core::clock::unix_ms(std::time::SystemTime::now());
                let lapses =
                    Instant::now() + Duration::from_millis(alive_until_ms.saturating_sub(now_ms).saturating_add(1));
                let end = deadline.min(lapses);
                let key = line_key(name)?;
                loop {
                    let until = end.min(Instant::now() + RECHECK);
                    if self.wait_on(&what, &mut registration, until).await? || until >= end {
                        break;
                    }
                    let (n, k, f) = (name.to_string(), key.clone(), ahead.clone());
                    let gone = move |b: &FileBackend| b.gone_blocking(&k, &f, locked).map_err(|e| b.unusable(&n, e));
                    if self.run(format!("reading {what}"), gone).await? {
                        break;
                    }
                }
                Ok(Some(false))
            }
        }
    }

    async fn leave(&self, name: &str, nonce: &str) -> Result<()> {
        let (name, nonce) = (name.to_string(), nonce.to_string());
        self.run(format!("leaving the wait line of {name:?}"), move |b| {
            b.leave_blocking(&name, &nonce).map_err(|e| b.unusable(&name, e))
        })
        .await
    }
}

/// What tests do to a store's line.
#[cfg(test)]
mod hooks {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Debug, Default)]
    pub(super) struct Hooks {
        /// Entries read so far.
        pub(super) reads: AtomicUsize,
        /// Entries whose read fails with `EIO` (tests run as root, whom no
        /// permission keeps from reading a file).
        pub(super) broken: parking_lot::Mutex<HashSet<String>>,
    }

    impl Hooks {
        /// Before the entry `file` is read.
        pub(super) fn reading(&self, file: &str) -> std::io::Result<()> {
            self.reads.fetch_add(1, Ordering::Relaxed);
            if self.broken.lock().contains(file) {
                return Err(rustix::io::Errno::IO.into());
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests;
