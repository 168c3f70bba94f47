//! The wait line on an object store: an object per waiter, created if absent,
//! read in order by a listing, and polled (object stores notify nobody).
//!
//! Waiter `N` of lease `deploy/prod` is the object
//! `<prefix>/deploy/prod/~line/{N:020}-{x|s}-{nonce in hex}`: its place, its
//! kind (exclusive or shared) and its holder's nonce are in its name, so one
//! listing shows the whole line without reading any entry. `N` is one past the
//! last entry listed; two waiters that list the line at once take the same
//! `N` and are ordered by the rest of their names (they came at once). The
//! body is random bytes, new at every write, so every write changes the ETag.
//!
//! | line | requests |
//! |---|---|
//! | enter | LIST of the line + PUT `If-None-Match: *` of the new entry (a lost race lists again) |
//! | stay (every [`REFRESH`](tenure_core::cas::REFRESH)) | PUT `If-Match` of its own entry (a conflict: it was taken for crashed, and enters again) |
//! | whose turn (every poll, 25 ms doubling to 1 s, until its turn) | LIST of the line |
//! | leave | DELETE of its entry |
//!
//! A newcomer asking for a free lease reads no line (0 requests more); a
//! reader that would join readers holding the lease lists it once, to stay
//! behind a waiting writer (see [`tenure_core::cas`]).
//!
//! **Liveness, under the clock discipline.** An entry is alive while its
//! waiter rewrites it. A looker takes it for crashed once it has seen the same
//! write (ETag and modification time) for [`ENTRY_TTL`] plus [`MARGIN`] on its
//! own monotonic clock, or once the store's modification time is older than
//! that plus `max_skew` on its wall clock; never by one client's wall clock
//! alone. A waiter's look at its turn, or its entry, removes the entries it
//! takes for crashed. A waiter that crashes thus holds up those behind it for
//! at most [`ENTRY_TTL`] plus [`MARGIN`] of their watching. Only the order is at
//! stake, never a lease: the lease record's own conditional write still keeps
//! holders apart.
//!
//! **Hostile content.** Objects under `~line/` whose names are not in the entry
//! format are not waiters, and are left alone. A line of more than
//! [`MAX_OBJECTS`] objects, or with no sequence number left, cannot be used
//! ([`Error::Corrupt`]): its waiters poll the lease instead.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use object_store::path::{Path, PathPart};
use object_store::{ObjectMeta, PutMode as OsPutMode};
use parking_lot::Mutex;
use tenure_core::backend::{Line, Waiter, may_try};
use tenure_core::cas::{ENTRY_TTL, MAX_WAITERS, line_full};
use tenure_core::limits::millis;
use tenure_core::{Clock, ClockExt, Error, LeaseName, Mono, Result, Version};

use crate::ops::{Objects, modified_ms};

/// The "directory" of a lease's waiters, next to its record.
pub const LINE_DIR: &str = "~line";
/// How far past [`ENTRY_TTL`] an entry may go unwritten before it is taken
/// for a crashed waiter's.
const MARGIN: Duration = Duration::from_secs(2);
/// Most objects a line's listing reads, entries and leftovers together.
const MAX_OBJECTS: usize = 4 * MAX_WAITERS;
/// Digits of an entry's sequence number.
const SEQ_DIGITS: usize = 20;
/// Sequence numbers stay below this.
const MAX_SEQ: u64 = 10u64.pow(19);
/// Longest nonce a waiter in an object store's line may have (a random one
/// has 16 bytes); longer ones poll.
const MAX_NONCE_BYTES: usize = 128;
/// Places lost to other waiters in a row before entering gives up.
const MAX_RACES: usize = 64;
/// Lines whose entries a handle watches at once; past it, it starts over.
const WATCHED_LINES: usize = 1024;

/// What a listing shows of an entry's last write.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    e_tag: Option<String>,
    modified: i64,
}

/// One entry, as listed.
#[derive(Debug)]
struct Entry {
    seq: u64,
    waiter: Waiter,
    meta: ObjectMeta,
    /// Not taken for a crashed waiter's.
    alive: bool,
}

/// The wait lines of an object store, through its requests `O`.
#[derive(Debug)]
pub(crate) struct ObjectLine<O> {
    backend: Arc<O>,
    clock: Arc<dyn Clock>,
    skew: Duration,
    /// The entries of this handle's waiters, by lease and nonce: where, and the
    /// version last written.
    mine: Mutex<HashMap<(String, String), (Path, Version)>>,
    /// Per line, the entries of the last look: their last write, and when it
    /// was first seen.
    watched: Mutex<HashMap<String, Looked>>,
}

/// A line as last looked at: per entry, its last write and when it was first seen.
type Looked = HashMap<String, (Stamp, Mono)>;

/// The object name of entry `seq` of `waiter`.
fn entry_name(seq: u64, waiter: &Waiter) -> String {
    let kind = if waiter.shared { 's' } else { 'x' };
    let mut name = format!("{seq:0SEQ_DIGITS$}-{kind}-");
    for b in waiter.nonce.bytes() {
        let _ = write!(name, "{b:02x}");
    }
    name
}

/// The place and the waiter an entry's object name stands for.
fn parse_entry(name: &str) -> Option<(u64, Waiter)> {
    let mut parts = name.splitn(3, '-');
    let (seq, kind, hex) = (parts.next()?, parts.next()?, parts.next()?);
    if seq.len() != SEQ_DIGITS || !seq.bytes().all(|b| b.is_ascii_digit()) || hex.len() % 2 != 0 {
        return None;
    }
    let shared = match kind {
        "s" => true,
        "x" => false,
        _ => return None,
    };
    let bytes: Option<Vec<u8>> =
        (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok()).collect();
    let nonce = String::from_utf8(bytes?).ok()?;
    Some((seq.parse().ok()?, Waiter { nonce, shared }))
}

/// Whether a failed write says the entry is not there as last written.
fn gone(e: &object_store::Error) -> bool {
    matches!(
        e,
        object_store::Error::Precondition { .. }
            | object_store::Error::AlreadyExists { .. }
            | object_store::Error::NotFound { .. }
    )
}

impl<O: Objects> ObjectLine<O> {
    pub(crate) fn new(backend: Arc<O>, clock: Arc<dyn Clock>, skew: Duration) -> Self {
        Self { backend, clock, skew, mine: Mutex::default(), watched: Mutex::default() }
    }

    fn url(&self) -> &str {
        self.backend.url()
    }

    /// The "directory" of `name`'s waiters.
    fn dir(&self, name: &str) -> Result<Path> {
        LeaseName::new(name)?;
        self.backend.child(name.split('/').chain([LINE_DIR]))
    }

    /// The line of `name`, in order, each entry judged alive or not (an entry
    /// of `me` always is); with `sweep`, the entries taken for crashed are
    /// removed (best effort: the next look tries again).
    async fn look(&self, name: &str, me: Option<&str>, sweep: bool) -> Result<Vec<Entry>> {
        let dir = self.dir(name)?;
        let metas = match self.backend.list_capped(&dir, MAX_OBJECTS).await {
            Ok(Some(metas)) => metas,
            Ok(None) => {
                return Err(Error::corrupt(
                    self.url(),
                    format!("the wait line {dir}"),
                    format!("more than {MAX_OBJECTS} objects (left by someone other than its waiters?)"),
                ));
            }
            Err(e) => return Err(self.backend.error(format!("reading the wait line {dir}"), e)),
        };
        let mut line: Vec<(u64, Waiter, ObjectMeta)> = metas
            .into_iter()
            .filter_map(|m| {
                let (seq, waiter) = parse_entry(m.location.filename()?)?;
                Some((seq, waiter, m))
            })
            .collect();
        line.sort_by(|a, b| (a.0, a.2.location.as_ref()).cmp(&(b.0, b.2.location.as_ref())));
        let line = self.judge(dir.as_ref(), line, me);
        if sweep {
            for dead in line.iter().filter(|e| !e.alive) {
                tracing::debug!(lease = name, entry = %dead.meta.location, "removing the entry of a crashed waiter");
                match self.backend.delete_object(&dead.meta.location).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => tracing::debug!(lease = name, error = %e, "removing a crashed waiter's entry failed"),
                }
            }
        }
        Ok(line)
    }

    /// Which entries of the line at `dir` are alive (see the module docs),
    /// noting what this look saw.
    fn judge(&self, dir: &str, line: Vec<(u64, Waiter, ObjectMeta)>, me: Option<&str>) -> Vec<Entry> {
        let (now, wall_ms) = (self.clock.mono(), self.clock.wall_ms());
        let quiet = ENTRY_TTL.saturating_add(MARGIN);
        let stale_ms = millis(quiet.saturating_add(self.skew));
        let mut watched = self.watched.lock();
        if watched.len() >= WATCHED_LINES && !watched.contains_key(dir) {
            watched.clear();
        }
        let before = watched.remove(dir).unwrap_or_default();
        let mut seen = HashMap::with_capacity(line.len());
        let line: Vec<Entry> = line
            .into_iter()
            .map(|(seq, waiter, meta)| {
                let stamp = Stamp { e_tag: meta.e_tag.clone(), modified: meta.last_modified.timestamp_millis() };
                let key = meta.location.to_string();
                let first = before.get(&key).filter(|(s, _)| *s == stamp).map_or(now, |(_, first)| *first);
                let by_watch = now.saturating_since(first) >= quiet;
                let by_age = modified_ms(&meta).is_some_and(|m| m.saturating_add(stale_ms) < wall_ms);
                let alive = me == Some(waiter.nonce.as_str()) || !(by_watch || by_age);
                seen.insert(key, (stamp, first));
                Entry { seq, waiter, meta, alive }
            })
            .collect();
        if !seen.is_empty() {
            watched.insert(dir.to_string(), seen);
        }
        line
    }

    /// Rewrites the entry of `id` this handle wrote last, if it is still as
    /// written: whether it was.
    async fn stay(&self, id: &(String, String)) -> Result<bool> {
        let Some((path, version)) = self.mine.lock().get(id).cloned() else { return Ok(false) };
        let mode = OsPutMode::Update(self.backend.update_version(&version));
        match self.backend.put_object(&path, fresh_body(), mode).await {
            Ok(r) => {
                let version = self.backend.version_of_put(&path, &r)?;
                self.mine.lock().insert(id.clone(), (path, version));
                Ok(true)
            }
            // Taken for crashed (or replaced): it enters again, at the back.
            Err(e) if gone(&e) => {
                self.mine.lock().remove(id);
                Ok(false)
            }
            Err(e) => Err(self.backend.error(format!("keeping our place in the wait line at {path}"), e)),
        }
    }
}

/// An entry's body: new bytes at every write, so that its ETag changes.
fn fresh_body() -> Bytes {
    Bytes::from(tenure_core::random_nonce())
}

#[async_trait]
impl<O: Objects> Line for ObjectLine<O> {
    async fn enter(&self, name: &str, waiter: &Waiter) -> Result<()> {
        let id = (name.to_string(), waiter.nonce.clone());
        if self.stay(&id).await? {
            return Ok(());
        }
        if waiter.nonce.len() > MAX_NONCE_BYTES {
            return Err(Error::unsupported(
                self.url(),
                format!("a place in the wait line of {name:?} for a nonce over {MAX_NONCE_BYTES} bytes"),
            ));
        }
        let dir = self.dir(name)?;
        for _ in 0..MAX_RACES {
            let line = self.look(name, Some(&waiter.nonce), true).await?;
            // Already in line (an earlier wait of this holder whose leave was lost).
            if let Some(e) = line.iter().find(|e| e.waiter == *waiter)
                && let Ok(version) = self.backend.version_of_get(&e.meta)
            {
                self.mine.lock().insert(id.clone(), (e.meta.location.clone(), version));
                if self.stay(&id).await? {
                    return Ok(());
                }
                continue;
            }
            if line.iter().filter(|e| e.alive).count() >= MAX_WAITERS {
                return Err(line_full(self.url(), name));
            }
            let seq = line.last().map_or(Some(0), |e| e.seq.checked_add(1)).filter(|s| *s < MAX_SEQ);
            let Some(seq) = seq else {
                return Err(Error::corrupt(
                    self.url(),
                    format!("the wait line {dir}"),
                    "no place number left after its last entry (one no waiter wrote?)",
                ));
            };
            let path = dir.clone().join(PathPart::from(entry_name(seq, waiter)));
            match self.backend.put_object(&path, fresh_body(), OsPutMode::Create).await {
                Ok(r) => {
                    let version = self.backend.version_of_put(&path, &r)?;
                    self.mine.lock().insert(id, (path, version));
                    return Ok(());
                }
                // Another waiter took the place: list again.
                Err(e) if gone(&e) => {}
                Err(e) => return Err(self.backend.error(format!("entering the wait line at {path}"), e)),
            }
        }
        Err(Error::store(
            self.url(),
            format!("entering the wait line {dir}"),
            format!("lost the place to other waiters {MAX_RACES} times in a row"),
        ))
    }

    async fn waiters(&self, name: &str) -> Result<Vec<Waiter>> {
        let line = self.look(name, None, false).await?;
        Ok(line.into_iter().filter(|e| e.alive).map(|e| e.waiter).collect())
    }

    async fn turn(&self, name: &str, waiter: &Waiter, timeout: Duration) -> Result<Option<bool>> {
        let line = self.look(name, Some(&waiter.nonce), true).await?;
        let line: Vec<Waiter> = line.into_iter().filter(|e| e.alive).map(|e| e.waiter).collect();
        match may_try(&line, waiter) {
            Some(false) => {}
            decided => return Ok(decided),
        }
        // Nothing to watch: the waiter looks again after `timeout`.
        self.clock.sleep(timeout).await;
        Ok(Some(false))
    }

    async fn leave(&self, name: &str, nonce: &str) -> Result<()> {
        let known = self.mine.lock().remove(&(name.to_string(), nonce.to_string()));
        let paths = match known {
            Some((path, _)) => vec![path],
            // Its entry may have been written by a wait cut short: look for it.
            None => {
                let line = self.look(name, None, false).await?;
                line.into_iter().filter(|e| e.waiter.nonce == nonce).map(|e| e.meta.location).collect()
            }
        };
        for path in paths {
            match self.backend.delete_object(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.backend.error(format!("leaving the wait line at {path}"), e)),
            }
        }
        Ok(())
    }

    fn polls(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_name_holds_its_place_kind_and_nonce() {
        let w = Waiter { nonce: "9f2c/é\n".into(), shared: true };
        let name = entry_name(7, &w);
        assert!(name.starts_with("00000000000000000007-s-"), "{name}");
        assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'), "{name}");
        assert_eq!(parse_entry(&name), Some((7, w)));
        let x = Waiter { nonce: "n".into(), shared: false };
        assert_eq!(parse_entry(&entry_name(0, &x)), Some((0, x)));
    }

    #[test]
    fn names_not_in_the_entry_format_are_no_waiters() {
        for name in ["", "7-x-6e", "00000000000000000007-y-6e", "00000000000000000007-x-6", "0000000000000000000a-x-6e"]
        {
            assert_eq!(parse_entry(name), None, "{name}");
        }
        assert_eq!(parse_entry("00000000000000000007-x-zz"), None);
        assert_eq!(parse_entry("00000000000000000007-x-ff"), None, "not UTF-8");
    }
}
