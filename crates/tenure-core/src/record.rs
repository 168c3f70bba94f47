//! The lease record and the pure decisions over it, written once for every store.
//!
//! # Format
//!
//! One JSON object per lease name. Unknown fields are ignored, missing optional
//! fields take their defaults, and `"tenure"` is the format's major version: a
//! reader refuses (never overwrites) a record of a newer major version.
//!
//! ```json
//! {
//!   "tenure": 1,
//!   "name": "deploy/prod",
//!   "last_token": 42,
//!   "exclusive": {
//!     "token": 42, "ttl_ms": 30000, "deadline_ms": 1767225630000,
//!     "acquired_ms": 1767225600000, "renewals": 0,
//!     "holder": { "nonce": "9f2c4e1ab3d07c55", "pid": 4242, "host": "ci-7",
//!                 "user": "deploy", "version": "0.1.0", "label": "job 1234" }
//!   },
//!   "shared": [],
//!   "watermark_ms": 1767225599000,
//!   "last": { "token": 41, "mode": "exclusive", "how": "released", "at_ms": 1767225599500,
//!             "watermark_ms": 1767225599000, "holder": { "nonce": "…" } }
//! }
//! ```
//!
//! - `last_token` is the highest fencing token ever granted under the name. A new
//!   grant takes `max(last_token, floor) + 1`. The floor is zero for a readable
//!   record; for an absent or unreadable one it is the store's version sequence
//!   (or, for stores without one, a wall-clock value), which is never below any
//!   token granted before — every grant is a write, so tokens never outrun versions.
//! - `exclusive` and `shared` are the grants still in the record. Whether one is
//!   *live* is not stored: it is judged by a [`Judge`] (the server's clock for the
//!   lease server; the clock discipline of [`crate::cas`] for dumb storage).
//! - `renewals` counts renewals of a grant: together with `token` it stamps each
//!   write of the entry, so a contender can tell "unchanged" from "renewed".
//! - `watermark_ms` only grows: the highest watermark any holder published, or the
//!   deadline of a holder that did not end gracefully (a holder's timestamps stay
//!   below its deadline: `docs/design/closable-bags.md#buckets-watermarks-timestamps`).
//!   A new holder writes strictly above it.
//! - `last` is how the most recent grant ended, returned to the next holder as its
//!   [`Predecessor`].
//! - an entry's `meta` is what its holder asked for or left on release; a holder
//!   that gives none inherits its predecessor's (in [`grant`]), so metadata is
//!   carried forward by holders that do not use it, however their grants end
//!   (this is where [`crate::once`] keeps its mark).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::holder::Holder;
use crate::types::{BreakNote, EndedHow, HolderView, Mode, Predecessor};

/// The record format's major version written by this tenure.
pub const FORMAT_VERSION: u32 = 1;

use crate::limits::MAX_TIME_MS;
pub use crate::limits::MAX_TOKEN;

/// One lease name's record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// Format major version.
    pub tenure: u32,
    /// The lease name (for humans reading the raw record).
    pub name: String,
    /// Highest fencing token granted so far.
    pub last_token: u64,
    /// The exclusive grant, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive: Option<Entry>,
    /// Shared grants.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared: Vec<Entry>,
    /// Highest watermark published or implied so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark_ms: Option<u64>,
    /// How the most recent grant ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<Ending>,
}

/// A grant inside the record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Fencing token.
    pub token: u64,
    /// Who (shared, so that decisions never copy identities).
    pub holder: Arc<Holder>,
    /// Lease duration; contenders judge staleness by this, so all agree.
    pub ttl_ms: u64,
    /// Absolute deadline: holder's wall clock at request time + TTL.
    pub deadline_ms: u64,
    /// When it was granted (holder's wall clock).
    pub acquired_ms: u64,
    /// Number of renewals so far.
    #[serde(default)]
    pub renewals: u64,
    /// Free-form metadata, e.g. where the holder stores its updates
    /// (`docs/design/leases-on-dumb-storage.md#one-record-per-name-with-a-version`).
    /// A grant asked for without any starts with its predecessor's: metadata
    /// is carried forward until a holder leaves its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<String>,
}

/// How a grant ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ending {
    /// Its token.
    pub token: u64,
    /// Its mode.
    #[serde(default)]
    pub mode: Mode,
    /// Its holder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<Arc<Holder>>,
    /// How.
    pub how: EndedHow,
    /// When (wall ms of whoever ended it).
    pub at_ms: u64,
    /// When it was granted (its holder's wall clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquired_ms: Option<u64>,
    /// Its watermark: published on release, its deadline otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark_ms: Option<u64>,
    /// Metadata it left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<String>,
    /// Who broke it and why, if it was broken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broken: Option<BreakNote>,
}

/// Why bytes are not a usable record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unreadable {
    /// Empty, truncated or garbage: judged by its age.
    Corrupt(String),
    /// Written by a newer tenure: refuse rather than overwrite.
    Newer(u32),
}

impl LeaseRecord {
    /// A record for `name` that has never been granted.
    pub fn empty(name: &str) -> Self {
        Self {
            tenure: FORMAT_VERSION,
            name: name.to_string(),
            last_token: 0,
            exclusive: None,
            shared: Vec::new(),
            watermark_ms: None,
            last: None,
        }
    }

    /// Parses stored bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self, Unreadable> {
        if bytes.is_empty() {
            return Err(Unreadable::Corrupt("empty record".into()));
        }
        #[derive(Deserialize)]
        struct Probe {
            tenure: u32,
        }
        match serde_json::from_slice::<Probe>(bytes) {
            Ok(p) if p.tenure > FORMAT_VERSION => return Err(Unreadable::Newer(p.tenure)),
            Ok(_) => {}
            Err(e) => return Err(Unreadable::Corrupt(describe_json_error(bytes, &e))),
        }
        let record: Self =
            serde_json::from_slice(bytes).map_err(|e| Unreadable::Corrupt(describe_json_error(bytes, &e)))?;
        record.check().map_err(Unreadable::Corrupt)?;
        Ok(record)
    }

    /// Rejects well-formed JSON that breaks the record's own rules or tenure's
    /// limits ([`crate::limits`]): grants with tokens above the counter (a token
    /// could repeat), lease durations no holder can have asked for, times past the
    /// year 9999. A counter at the top of the token space is *not* corrupt: the
    /// record stays readable, and [`acquire`] refuses to grant from it.
    fn check(&self) -> Result<(), String> {
        use crate::limits::{MAX_TIME_MS, MAX_TTL, millis};
        if let Some((e, _)) = self.entries().find(|(e, _)| e.token > self.last_token) {
            return Err(format!("a grant has token {} above last_token {}", e.token, self.last_token));
        }
        for (e, _) in self.entries() {
            if e.ttl_ms == 0 || e.ttl_ms > millis(MAX_TTL) {
                return Err(format!("grant {} has a ttl of {} ms (1..={} ms)", e.token, e.ttl_ms, millis(MAX_TTL)));
            }
            if e.deadline_ms.max(e.acquired_ms) > MAX_TIME_MS {
                return Err(format!("grant {} has a time past the year 9999", e.token));
            }
        }
        let times =
            [self.watermark_ms, self.last.as_ref().map(|l| l.at_ms), self.last.as_ref().and_then(|l| l.watermark_ms)];
        if times.into_iter().flatten().any(|t| t > MAX_TIME_MS) {
            return Err("a watermark or end time is past the year 9999".into());
        }
        let reason = self.last.as_ref().and_then(|l| l.broken.as_ref()).and_then(|b| b.reason.as_ref());
        if reason.is_some_and(|r| r.len() > crate::limits::MAX_REASON_BYTES) {
            return Err(format!("a break reason is longer than {} bytes", crate::limits::MAX_REASON_BYTES));
        }
        Ok(())
    }

    /// Serialises the record.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serialising plain data with string keys cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// All grants in the record.
    pub fn entries(&self) -> impl Iterator<Item = (&Entry, Mode)> {
        self.exclusive.iter().map(|e| (e, Mode::Exclusive)).chain(self.shared.iter().map(|e| (e, Mode::Shared)))
    }

    /// The grant with `token` held by `nonce`, if still in the record.
    pub fn find(&self, token: u64, nonce: &str) -> Option<(&Entry, Mode)> {
        self.entries().find(|(e, _)| e.token == token && e.holder.nonce == nonce)
    }

    /// `last` as the next holder's [`Predecessor`], with the record's watermark.
    pub fn predecessor(&self) -> Option<Predecessor> {
        self.last.as_ref().map(|l| Predecessor {
            token: l.token,
            holder: l.holder.clone(),
            how: l.how,
            at_ms: l.at_ms,
            acquired_ms: l.acquired_ms,
            watermark_ms: self.watermark_ms,
            meta: l.meta.clone(),
            broken: l.broken.clone(),
        })
    }

    /// Removes the grant with `token` (if present) and records how it ended.
    fn end(&mut self, token: u64, how: EndedHow, at_ms: u64, watermark_ms: Option<u64>) -> Option<Entry> {
        let (entry, mode) = if self.exclusive.as_ref().is_some_and(|e| e.token == token) {
            (self.exclusive.take()?, Mode::Exclusive)
        } else {
            let i = self.shared.iter().position(|e| e.token == token)?;
            (self.shared.remove(i), Mode::Shared)
        };
        self.note_ending(&entry, mode, how, at_ms, watermark_ms);
        Some(entry)
    }

    fn note_ending(&mut self, entry: &Entry, mode: Mode, how: EndedHow, at_ms: u64, watermark_ms: Option<u64>) {
        // A holder that did not end gracefully may have written up to its deadline.
        let watermark =
            if how.graceful() { watermark_ms } else { Some(watermark_ms.unwrap_or(0).max(entry.deadline_ms)) };
        // Never write a time this code would refuse to read back (a clock, or a
        // caller's watermark, past the year 9999).
        let (at_ms, watermark) = (at_ms.min(MAX_TIME_MS), watermark.map(|w| w.min(MAX_TIME_MS)));
        self.watermark_ms = self.watermark_ms.max(watermark);
        let newer = self.last.as_ref().is_none_or(|l| l.token <= entry.token);
        if newer {
            self.last = Some(Ending {
                token: entry.token,
                mode,
                holder: Some(entry.holder.clone()),
                how,
                at_ms,
                acquired_ms: Some(entry.acquired_ms),
                watermark_ms: watermark,
                meta: entry.meta.clone(),
                broken: None,
            });
        }
    }
}

fn describe_json_error(bytes: &[u8], e: &serde_json::Error) -> String {
    let kind = if e.is_eof() { "truncated record" } else { "not a tenure lease record" };
    let preview: String =
        String::from_utf8_lossy(&bytes[..bytes.len().min(40)]).chars().filter(|c| !c.is_control()).collect();
    format!("{kind} ({} bytes, {e}; starts {preview:?})", bytes.len())
}

/// Decides whether a grant is over.
///
/// The lease server judges by its own clock; clients of dumb storage use the clock
/// discipline in [`crate::cas`]. The decisions below never look at a clock directly.
pub trait Judge {
    /// Whether `entry` may be taken over now.
    fn expired(&self, entry: &Entry) -> bool;
    /// How long until `entry` may be taken over if it is never renewed.
    fn remaining_ms(&self, entry: &Entry) -> u64;
}

/// The server's judgement: its clock is the single source of truth.
#[derive(Debug, Clone, Copy)]
pub struct ClockJudge {
    /// The judge's now, in wall ms.
    pub now_ms: u64,
}

impl Judge for ClockJudge {
    fn expired(&self, entry: &Entry) -> bool {
        self.now_ms >= entry.deadline_ms
    }
    fn remaining_ms(&self, entry: &Entry) -> u64 {
        entry.deadline_ms.saturating_sub(self.now_ms)
    }
}

/// What someone asks for.
#[derive(Clone, Debug)]
pub struct Ask<'a> {
    /// Mode.
    pub mode: Mode,
    /// Lease duration in ms.
    pub ttl_ms: u64,
    /// Who asks.
    pub holder: &'a Arc<Holder>,
    /// Whether a grant in the record held by the same nonce may be re-taken at once.
    pub retake: bool,
    /// The asker's wall clock now (the new deadline is `now_ms + ttl_ms`).
    pub now_ms: u64,
    /// Floor for the new token: the store's version sequence, if it has one.
    pub token_floor: u64,
    /// Metadata to store with the grant.
    pub meta: Option<&'a str>,
}

/// The result of [`decide_acquire`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Write `record`; on success the caller holds `token`.
    Grant {
        /// The record to write.
        record: LeaseRecord,
        /// The new fencing token.
        token: u64,
        /// What came before, for the new holder.
        predecessor: Option<Predecessor>,
    },
    /// Blocked by these live grants.
    Busy(Vec<HolderView>),
    /// The next token would reach [`MAX_TOKEN`]: nothing may be granted.
    Exhausted {
        /// The highest token granted so far (or the floor that reached the top).
        last_token: u64,
    },
}

/// Why [`acquire`] did not grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Blocked by these live grants.
    Busy(Vec<HolderView>),
    /// The next token would reach [`MAX_TOKEN`]: granting would wrap the counter
    /// or start it again, so tenure refuses for good.
    Exhausted {
        /// The highest token granted so far (or the floor that reached the top).
        last_token: u64,
    },
}

/// What a granted acquisition gives the new holder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acquired {
    /// The new fencing token.
    pub token: u64,
    /// What came before, for the new holder.
    pub predecessor: Option<Predecessor>,
}

/// An ask [`check_acquire`] found grantable, with the token it takes.
///
/// Only [`check_acquire`] makes one, and only [`grant`] spends it: a caller
/// that decides before it writes (all or nothing over several leases) checks
/// every record first and grants each one after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "an admitted ask is granted only by `grant`"]
pub struct Admitted {
    token: u64,
}

impl Admitted {
    /// The fencing token the grant will take.
    pub fn token(&self) -> u64 {
        self.token
    }
}

/// How `ask` ends `e`, if it does: expired by the judge, or the asker's own
/// abandoned grant re-taken.
fn ended_by(e: &Entry, ask: &Ask<'_>, judge: &dyn Judge) -> Option<EndedHow> {
    if judge.expired(e) {
        Some(EndedHow::Expired)
    } else if ask.retake && e.holder.nonce == ask.holder.nonce {
        Some(EndedHow::Retaken)
    } else {
        None
    }
}

/// Decides an acquisition against `record` (`None`: there is none yet) without
/// changing it: admitted with its token, or refused.
///
/// Grants the judge calls expired, and the asker's own abandoned grants when
/// `retake` is set, do not block; the asker is blocked by any other live
/// exclusive grant, and for an exclusive ask by any live shared grant too.
/// Busy names the blocking grants; exhausted means the next token would reach
/// [`MAX_TOKEN`].
pub fn check_acquire(record: Option<&LeaseRecord>, ask: &Ask<'_>, judge: &dyn Judge) -> Result<Admitted, Refused> {
    let Some(record) = record else {
        return next_token(0, ask);
    };
    let stays = |e: &Entry| ended_by(e, ask, judge).is_none();
    let exclusive_stays = record.exclusive.as_ref().is_some_and(stays);
    let blocked = match ask.mode {
        Mode::Exclusive => exclusive_stays || record.shared.iter().any(stays),
        Mode::Shared => exclusive_stays,
    };
    if blocked {
        return Err(Refused::Busy(
            record.entries().filter(|(e, _)| stays(e)).map(|(e, mode)| view(e, mode, judge)).collect(),
        ));
    }
    next_token(record.last_token, ask)
}

/// The token after `last_token` and the ask's floor, unless it would reach [`MAX_TOKEN`].
fn next_token(last_token: u64, ask: &Ask<'_>) -> Result<Admitted, Refused> {
    let last_token = last_token.max(ask.token_floor);
    match last_token.checked_add(1) {
        Some(token) if token < MAX_TOKEN => Ok(Admitted { token }),
        _ => Err(Refused::Exhausted { last_token }),
    }
}

/// Grants an admitted ask: ends the grants it takes over and adds its own.
/// `record` is the one [`check_acquire`] admitted it on (a new, empty record
/// where there was none), unchanged since, and `ask` and `judge` the same.
pub fn grant(record: &mut LeaseRecord, ask: &Ask<'_>, judge: &dyn Judge, admitted: Admitted) -> Acquired {
    let Admitted { token } = admitted;
    if let Some(how) = record.exclusive.as_ref().and_then(|e| ended_by(e, ask, judge))
        && let Some(e) = record.exclusive.take()
    {
        record.note_ending(&e, Mode::Exclusive, how, ask.now_ms, None);
    }
    if record.shared.iter().any(|e| ended_by(e, ask, judge).is_some()) {
        for e in std::mem::take(&mut record.shared) {
            match ended_by(&e, ask, judge) {
                Some(how) => record.note_ending(&e, Mode::Shared, how, ask.now_ms, None),
                None => record.shared.push(e),
            }
        }
    }
    let predecessor = record.predecessor();
    // An ask without metadata carries its predecessor's forward, so that it
    // survives however this grant ends (released, dropped, expired, broken).
    let meta = ask.meta.map(str::to_string).or_else(|| predecessor.as_ref().and_then(|p| p.meta.clone()));
    let entry = Entry {
        token,
        holder: ask.holder.clone(),
        ttl_ms: ask.ttl_ms,
        deadline_ms: ask.now_ms.saturating_add(ask.ttl_ms).min(MAX_TIME_MS),
        acquired_ms: ask.now_ms.min(MAX_TIME_MS),
        renewals: 0,
        meta,
    };
    match ask.mode {
        Mode::Exclusive => record.exclusive = Some(entry),
        Mode::Shared => record.shared.push(entry),
    }
    record.last_token = token;
    record.tenure = FORMAT_VERSION;
    Acquired { token, predecessor }
}

/// Decides an acquisition against `record`, changing it only if granted:
/// [`check_acquire`], then [`grant`].
pub fn acquire(record: &mut LeaseRecord, ask: &Ask<'_>, judge: &dyn Judge) -> Result<Acquired, Refused> {
    let admitted = check_acquire(Some(record), ask, judge)?;
    Ok(grant(record, ask, judge, admitted))
}

/// [`acquire`] on a copy of the current record (`None` if absent).
pub fn decide_acquire(name: &str, current: Option<&LeaseRecord>, ask: &Ask<'_>, judge: &dyn Judge) -> Decision {
    let mut record = current.cloned().unwrap_or_else(|| LeaseRecord::empty(name));
    match acquire(&mut record, ask, judge) {
        Ok(Acquired { token, predecessor }) => Decision::Grant { record, token, predecessor },
        Err(Refused::Busy(holders)) => Decision::Busy(holders),
        Err(Refused::Exhausted { last_token }) => Decision::Exhausted { last_token },
    }
}

/// Why a holder's grant is no longer in the record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gone {
    /// For humans: what the record says happened.
    pub detail: String,
}

fn gone(record: &LeaseRecord, token: u64) -> Gone {
    let detail = match &record.last {
        Some(l) if l.token == token => format!("our grant was {}", l.how),
        _ => match record.entries().next() {
            Some((e, mode)) => format!("now held {mode} by {} with token {}", e.holder, e.token),
            None if record.last_token > token => {
                format!("a newer grant (token {}) has come and gone", record.last_token)
            }
            None => "the record no longer lists our grant".to_string(),
        },
    };
    Gone { detail }
}

/// Renews grant `token` of `nonce` in place: new deadline `now_ms + ttl_ms`.
pub fn renew(
    record: &mut LeaseRecord,
    token: u64,
    nonce: &str,
    ttl_ms: u64,
    now_ms: u64,
    meta: Option<&str>,
) -> Result<(), Gone> {
    let Some(entry) = record
        .exclusive
        .iter_mut()
        .chain(record.shared.iter_mut())
        .find(|e| e.token == token && e.holder.nonce == nonce)
    else {
        return Err(gone(record, token));
    };
    entry.deadline_ms = now_ms.saturating_add(ttl_ms).max(entry.deadline_ms).min(MAX_TIME_MS);
    entry.ttl_ms = ttl_ms;
    entry.renewals = entry.renewals.saturating_add(1);
    if let Some(meta) = meta {
        entry.meta = Some(meta.to_string());
    }
    Ok(())
}

/// [`renew`] on a copy.
pub fn decide_renew(
    current: &LeaseRecord,
    token: u64,
    nonce: &str,
    ttl_ms: u64,
    now_ms: u64,
    meta: Option<&str>,
) -> Result<LeaseRecord, Gone> {
    let mut record = current.clone();
    renew(&mut record, token, nonce, ttl_ms, now_ms, meta)?;
    Ok(record)
}

/// Ends grant `token` of `nonce` in place (`how` is `Released` or `Dropped`),
/// publishing `watermark_ms`.
pub fn release(
    record: &mut LeaseRecord,
    token: u64,
    nonce: &str,
    how: EndedHow,
    now_ms: u64,
    watermark_ms: Option<u64>,
    meta: Option<&str>,
) -> Result<(), Gone> {
    if record.find(token, nonce).is_none() {
        return Err(gone(record, token));
    }
    if let Some(meta) = meta {
        for e in record.exclusive.iter_mut().chain(record.shared.iter_mut()).filter(|e| e.token == token) {
            e.meta = Some(meta.to_string());
        }
    }
    record.end(token, how, now_ms, watermark_ms);
    Ok(())
}

/// [`release`] on a copy.
pub fn decide_release(
    current: &LeaseRecord,
    token: u64,
    nonce: &str,
    how: EndedHow,
    now_ms: u64,
    watermark_ms: Option<u64>,
    meta: Option<&str>,
) -> Result<LeaseRecord, Gone> {
    let mut record = current.clone();
    release(&mut record, token, nonce, how, now_ms, watermark_ms, meta)?;
    Ok(record)
}

/// Breaks grants in place (all, or only `token`): the administrator's hammer.
/// Each broken grant's deadline becomes part of the watermark.
pub fn break_grants(
    record: &mut LeaseRecord,
    only_token: Option<u64>,
    note: Option<&BreakNote>,
    now_ms: u64,
) -> Result<(), Gone> {
    let tokens: Vec<u64> =
        record.entries().map(|(e, _)| e.token).filter(|t| only_token.is_none_or(|o| o == *t)).collect();
    if tokens.is_empty() {
        return Err(Gone { detail: "no grant to break".into() });
    }
    for &t in &tokens {
        record.end(t, EndedHow::Broken, now_ms, None);
    }
    // The last ending is the newest grant broken now, unless a newer one had
    // ended before: the note goes with the former only.
    if let Some(last) = record.last.as_mut().filter(|l| l.how == EndedHow::Broken && tokens.contains(&l.token)) {
        last.broken = note.cloned();
    }
    Ok(())
}

/// [`break_grants`] on a copy.
pub fn decide_break(
    current: &LeaseRecord,
    only_token: Option<u64>,
    note: Option<&BreakNote>,
    now_ms: u64,
) -> Result<LeaseRecord, Gone> {
    let mut record = current.clone();
    break_grants(&mut record, only_token, note, now_ms)?;
    Ok(record)
}

/// The grants in `record` that `judge` considers live.
pub fn views(record: &LeaseRecord, judge: &dyn Judge) -> Vec<HolderView> {
    record.entries().filter(|(e, _)| !judge.expired(e)).map(|(e, mode)| view(e, mode, judge)).collect()
}

/// The grants in `record` whose time is up.
pub fn expired_views(record: &LeaseRecord, judge: &dyn Judge) -> Vec<HolderView> {
    record.entries().filter(|(e, _)| judge.expired(e)).map(|(e, mode)| view(e, mode, judge)).collect()
}

fn view(e: &Entry, mode: Mode, judge: &dyn Judge) -> HolderView {
    HolderView {
        holder: e.holder.clone(),
        mode,
        token: e.token,
        deadline_ms: e.deadline_ms,
        ttl_ms: e.ttl_ms,
        acquired_ms: Some(e.acquired_ms),
        expires_in_ms: judge.remaining_ms(e),
    }
}

#[cfg(test)]
mod tests;
