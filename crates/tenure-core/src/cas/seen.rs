//! What a [`CasStore`] has seen of each lease: its reads, the grants a
//! contender has watched and for how long (the clock discipline's judge), the
//! records it wrote last, and the highest token per name.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;

use crate::backend::{Key, Put, PutOptions, Stored};
use crate::clock::Mono;
use crate::error::{Error, Result};
use crate::limits::{MAX_RECORD_BYTES, millis};
use crate::record::{self, Entry, Judge, LeaseRecord, Unreadable};
use crate::store::LeaseStore;
use crate::types::{Grant, LossReason, Version};

use super::{CasStore, SEEN_NAMES};

/// What a contender has watched: a grant's write, or an unreadable version.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Stamp {
    Entry { token: u64, renewals: u64 },
    Unreadable(String),
}

/// A read record, interpreted.
pub(super) enum Read {
    Absent,
    Valid(Stored, LeaseRecord),
    Unreadable(Stored, String),
}

impl CasStore {
    pub(super) async fn read(&self, key: &Key) -> Result<Read> {
        let name = key.as_str();
        let Some(stored) = self.backend.get(key).await? else {
            return Ok(Read::Absent);
        };
        if let Some(what) = stored.foreign.clone() {
            return Ok(Read::Unreadable(stored, what));
        }
        if stored.value.len() > MAX_RECORD_BYTES {
            let detail = format!("a record of {} bytes (at most {MAX_RECORD_BYTES})", stored.value.len());
            return Ok(Read::Unreadable(stored, detail));
        }
        match LeaseRecord::parse(&stored.value) {
            Ok(rec) => {
                self.saw_token(name, rec.last_token);
                Ok(Read::Valid(stored, rec))
            }
            Err(Unreadable::Corrupt(detail)) => Ok(Read::Unreadable(stored, detail)),
            Err(Unreadable::Newer(v)) => Err(Error::unsupported(
                self.url(),
                format!(
                    "lease {name:?} was written in record format {v}, newer than this tenure understands ({}); upgrade tenure",
                    record::FORMAT_VERSION
                ),
            )),
        }
    }

    /// Notes what a read showed and returns, per stamp, how long it has been watched.
    pub(super) fn observe(&self, name: &str, read: &Read) -> HashMap<Stamp, Duration> {
        let stamps: Vec<Stamp> = match read {
            Read::Absent => Vec::new(),
            Read::Valid(_, rec) => {
                rec.entries().map(|(e, _)| Stamp::Entry { token: e.token, renewals: e.renewals }).collect()
            }
            Read::Unreadable(s, _) => vec![Stamp::Unreadable(s.version.tag.clone())],
        };
        let now = self.clock.mono();
        let mut watched = self.watched.lock();
        let before = watched.remove(name).unwrap_or_default();
        let seen: Vec<(Stamp, Mono)> = stamps
            .into_iter()
            .map(|s| {
                let first = before.iter().find(|(p, _)| *p == s).map_or(now, |(_, m)| *m);
                (s, first)
            })
            .collect();
        let out = seen.iter().map(|(s, first)| (s.clone(), now.saturating_since(*first))).collect();
        if !seen.is_empty() {
            watched.insert(name.to_string(), seen);
        }
        out
    }

    pub(super) fn judge<'a>(&self, watched: &'a HashMap<Stamp, Duration>) -> Observer<'a> {
        Observer { now_ms: self.clock.wall_ms(), max_skew_ms: millis(self.opts.max_skew), watched }
    }

    /// Whether an unreadable record may be replaced, and if not, how long until it may.
    pub(super) fn unreadable_remaining(&self, stored: &Stored, watched: &HashMap<Stamp, Duration>) -> Duration {
        let by_watch = watched
            .get(&Stamp::Unreadable(stored.version.tag.clone()))
            .map_or(self.opts.corrupt_ttl, |w| self.opts.corrupt_ttl.saturating_sub(*w));
        let by_age = stored.modified_ms.map_or(by_watch, |m| {
            let stale_at = m.saturating_add(millis(self.opts.corrupt_ttl.saturating_add(self.opts.max_skew)));
            Duration::from_millis(stale_at.saturating_sub(self.clock.wall_ms()))
        });
        by_watch.min(by_age)
    }

    /// The token floor after the unreadable record `stored` of `name`, from what
    /// the store says: its version sequence (a directory's, GCS's generation),
    /// else the time the store last modified the record, in microseconds. No
    /// token can have reached that time: tokens floored on an earlier such time
    /// grow by one per grant, and an unreadable record is replaced only once it
    /// is older than `corrupt_ttl`, so the store wrote the next one later. One
    /// client's wall clock never decides it (a client an hour behind would move
    /// tokens back an hour); only a store that gives neither falls back to it.
    /// In every case the floor is at least the highest token this handle has
    /// seen for the name.
    pub(super) fn unreadable_floor(&self, name: &str, stored: &Stored) -> u64 {
        let by_store = match (stored.version.seq, stored.modified_ms) {
            (Some(seq), _) => seq,
            (None, Some(ms)) => ms.saturating_mul(1_000),
            (None, None) => self.clock.wall_ms().saturating_mul(1_000),
        };
        by_store.max(self.seen_token(name))
    }

    /// The highest token this handle has seen granted on `name`, if it remembers.
    pub(super) fn seen_token(&self, name: &str) -> u64 {
        self.seen.lock().get(name).copied().unwrap_or(0)
    }

    /// Notes that `token` was granted on `name`, as read or written here.
    pub(super) fn saw_token(&self, name: &str, token: u64) {
        let mut seen = self.seen.lock();
        if let Some(highest) = seen.get_mut(name) {
            *highest = (*highest).max(token);
            return;
        }
        // Bounded: a store that serves many names forgets one of the others.
        if seen.len() >= SEEN_NAMES
            && let Some(other) = seen.keys().next().cloned()
        {
            seen.remove(&other);
        }
        seen.insert(name.to_string(), token);
    }

    pub(super) fn remember(&self, name: &str, version: Version, rec: LeaseRecord) {
        self.saw_token(name, rec.last_token);
        self.written.lock().insert(name.to_string(), (version, rec));
    }

    pub(super) fn forget(&self, name: &str) {
        self.written.lock().remove(name);
    }

    /// The record we last wrote, and its version.
    pub(super) fn last_written(&self, name: &str) -> Option<(Version, LeaseRecord)> {
        self.written.lock().get(name).cloned()
    }

    /// How long each stamp of `name` has been watched, without a new observation.
    pub(super) fn watched(&self, name: &str) -> HashMap<Stamp, Duration> {
        let now = self.clock.mono();
        self.watched
            .lock()
            .get(name)
            .map(|seen| seen.iter().map(|(s, first)| (s.clone(), now.saturating_since(*first))).collect())
            .unwrap_or_default()
    }

    /// The record we last wrote, if it is still at `version` as far as we know.
    pub(super) fn cached(&self, name: &str, version: &Version) -> Option<LeaseRecord> {
        self.written.lock().get(name).filter(|(v, _)| v == version).map(|(_, r)| r.clone())
    }

    /// Writes `rec`; a record that would be too large to read back (thousands
    /// of shared holders) is refused instead of written. After a failed write
    /// the record this store wrote last is no longer taken for the current
    /// one: what the store holds is unknown until it is read again.
    pub(super) async fn put(&self, key: &Key, rec: &LeaseRecord, opts: PutOptions) -> Result<Put> {
        let name = key.as_str();
        let bytes = rec.to_bytes();
        if bytes.len() > MAX_RECORD_BYTES {
            return Err(Error::unsupported(
                self.url(),
                format!(
                    "lease {name:?}: the record would grow to {} bytes, over the {MAX_RECORD_BYTES}-byte limit (too many shared holders)",
                    bytes.len()
                ),
            ));
        }
        let put = self.backend.put(key, Bytes::from(bytes), opts).await;
        if put.is_err() {
            self.forget(name);
        }
        put
    }

    pub(super) fn lost(&self, grant: &Grant, detail: String) -> Error {
        Error::Lost {
            store: self.url().to_string(),
            name: grant.name.to_string(),
            token: grant.token,
            reason: LossReason::Stolen { detail },
        }
    }

    /// The current record of a grant's lease: the cached one first, else a read.
    /// `Err(Lost)` if the record is gone or unreadable.
    pub(super) async fn current_for(&self, grant: &Grant, use_cache: bool) -> Result<(Version, LeaseRecord)> {
        let name = grant.name.as_str();
        if use_cache && let Some(rec) = self.cached(name, &grant.version) {
            return Ok((grant.version.clone(), rec));
        }
        match self.read(&Key::lease(&grant.name)).await? {
            Read::Valid(stored, rec) => Ok((stored.version, rec)),
            Read::Absent => Err(self.lost(grant, "the lease record has disappeared".into())),
            Read::Unreadable(_, detail) => {
                Err(self.lost(grant, format!("the lease record became unreadable: {detail}")))
            }
        }
    }
}

/// The contender's judgement under the clock discipline.
pub(super) struct Observer<'a> {
    now_ms: u64,
    max_skew_ms: u64,
    watched: &'a HashMap<Stamp, Duration>,
}

impl Observer<'_> {
    pub(super) fn watched_ms(&self, e: &Entry) -> u64 {
        self.watched.get(&Stamp::Entry { token: e.token, renewals: e.renewals }).map_or(0, |d| millis(*d))
    }
}

impl Judge for Observer<'_> {
    fn expired(&self, e: &Entry) -> bool {
        self.remaining_ms(e) == 0
    }
    fn remaining_ms(&self, e: &Entry) -> u64 {
        let by_wall = e.deadline_ms.saturating_add(self.max_skew_ms).saturating_add(1).saturating_sub(self.now_ms);
        let by_watch = e.ttl_ms.saturating_sub(self.watched_ms(e));
        by_wall.min(by_watch)
    }
}
