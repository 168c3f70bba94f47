//! The JSON tenure prints about leases — `tenure status --json` and the lease
//! server's `/status.json` — in one shape, versioned by [`SCHEMA_VERSION`].
//!
//! - Every document is an object with `"schema_version": 1` and a `leases`
//!   array; fields are only ever added within a schema version.
//! - A time is given twice: `<name>_ms` (unix milliseconds) and `<name>_at`
//!   (RFC 3339, UTC, with milliseconds). A duration is `<name>_ms`.
//! - A lease's `state` is one word: `held`, `expired` (its holder's time is up
//!   and nobody took it yet), `free`, `corrupt` (an unreadable record) or
//!   `error` (it could not be read; `error` says why).
//! - A holder is `holder` (who: nonce, pid, host, user, version, label), `mode`,
//!   `token`, `ttl_ms`, `acquired_ms`/`_at` and `held_for_ms` (on the holder's
//!   clock, when the store records it), `deadline_ms`/`_at` (as written, on the
//!   holder's clock) and `expires_in_ms` (the longest this observer may wait
//!   for it to be taken over, clock discipline included).
//! - `last` is how the previous grant ended: `token`, `holder`, `how`
//!   (`released`, `dropped`, `expired`, `broken`, `retaken`, `corrupt`),
//!   `at_ms`/`_at`, `acquired_ms`/`_at`, `watermark_ms`, `meta`, and for a
//!   broken grant `broken`: who broke it (`by`, a holder) and why (`reason`).

use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;

use crate::holder::Holder;
use crate::limits::MAX_TIME_MS;
use crate::types::{BreakNote, EndedHow, HolderView, LeaseState, Mode, Predecessor};

/// The version of the JSON shape described above.
pub const SCHEMA_VERSION: u32 = 1;

/// `ms` (unix milliseconds) as RFC 3339 with milliseconds, UTC; `None` past
/// the year 9999, which no valid record holds.
pub fn rfc3339_ms(ms: u64) -> Option<String> {
    (ms <= MAX_TIME_MS).then(|| humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string())
}

/// One grant, as seen at `now_ms`.
#[derive(Debug, Serialize)]
pub struct HolderJson<'a> {
    holder: &'a Holder,
    mode: Mode,
    token: u64,
    ttl_ms: u64,
    acquired_ms: Option<u64>,
    acquired_at: Option<String>,
    held_for_ms: Option<u64>,
    deadline_ms: u64,
    deadline_at: Option<String>,
    expires_in_ms: u64,
}

impl<'a> HolderJson<'a> {
    /// `v` as seen at `now_ms` (this observer's wall clock).
    pub fn new(v: &'a HolderView, now_ms: u64) -> Self {
        Self {
            holder: &v.holder,
            mode: v.mode,
            token: v.token,
            ttl_ms: v.ttl_ms,
            acquired_ms: v.acquired_ms,
            acquired_at: v.acquired_ms.and_then(rfc3339_ms),
            held_for_ms: v.acquired_ms.map(|a| now_ms.saturating_sub(a)),
            deadline_ms: v.deadline_ms,
            deadline_at: rfc3339_ms(v.deadline_ms),
            expires_in_ms: v.expires_in_ms,
        }
    }
}

/// How the previous grant ended.
#[derive(Debug, Serialize)]
pub struct EndingJson<'a> {
    token: u64,
    holder: Option<&'a Holder>,
    how: EndedHow,
    at_ms: u64,
    at: Option<String>,
    acquired_ms: Option<u64>,
    acquired_at: Option<String>,
    watermark_ms: Option<u64>,
    meta: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    broken: Option<&'a BreakNote>,
}

impl<'a> EndingJson<'a> {
    /// `p` in the shared shape.
    pub fn new(p: &'a Predecessor) -> Self {
        Self {
            token: p.token,
            holder: p.holder.as_deref(),
            how: p.how,
            at_ms: p.at_ms,
            at: rfc3339_ms(p.at_ms),
            acquired_ms: p.acquired_ms,
            acquired_at: p.acquired_ms.and_then(rfc3339_ms),
            watermark_ms: p.watermark_ms,
            meta: p.meta.as_deref(),
            broken: p.broken.as_ref(),
        }
    }
}

/// One lease.
#[derive(Debug, Serialize)]
pub struct LeaseJson<'a> {
    name: &'a str,
    state: &'static str,
    holders: Vec<HolderJson<'a>>,
    expired: Vec<HolderJson<'a>>,
    last_token: u64,
    watermark_ms: Option<u64>,
    last: Option<EndingJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    corrupt: Option<&'a str>,
    modified_ms: Option<u64>,
    modified_at: Option<String>,
    /// How many wait in line for it, where the store keeps a line (the lease
    /// server's `/status.json` has the same field).
    #[serde(skip_serializing_if = "Option::is_none")]
    waiters: Option<usize>,
}

impl<'a> LeaseJson<'a> {
    /// With the number of waiters in its line, if the store told.
    #[must_use]
    pub fn with_waiting(mut self, waiting: Option<usize>) -> Self {
        self.waiters = waiting;
        self
    }

    /// The parts of a lease, seen at `now_ms`; `state` as [`state_word`] says.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: &'a str,
        holders: &'a [HolderView],
        expired: &'a [HolderView],
        last_token: u64,
        watermark_ms: Option<u64>,
        last: Option<&'a Predecessor>,
        corrupt: Option<&'a str>,
        modified_ms: Option<u64>,
        now_ms: u64,
    ) -> Self {
        let state = state_word(corrupt.is_some(), !holders.is_empty(), !expired.is_empty());
        Self {
            name,
            state,
            holders: holders.iter().map(|v| HolderJson::new(v, now_ms)).collect(),
            expired: expired.iter().map(|v| HolderJson::new(v, now_ms)).collect(),
            last_token,
            watermark_ms,
            last: last.map(EndingJson::new),
            corrupt,
            modified_ms,
            modified_at: modified_ms.and_then(rfc3339_ms),
            waiters: None,
        }
    }

    /// A lease state, seen at `now_ms`.
    pub fn of(s: &'a LeaseState, now_ms: u64) -> Self {
        Self::new(
            s.name.as_str(),
            &s.holders,
            &s.expired,
            s.last_token,
            s.watermark_ms,
            s.last.as_ref(),
            s.corrupt.as_deref(),
            s.modified_ms,
            now_ms,
        )
    }
}

/// A lease that could not be read.
#[derive(Debug, Serialize)]
pub struct LeaseErrorJson<'a> {
    name: &'a str,
    state: &'static str,
    error: &'a str,
}

impl<'a> LeaseErrorJson<'a> {
    /// Lease `name`, which could not be read because of `error`.
    pub fn new(name: &'a str, error: &'a str) -> Self {
        Self { name, state: "error", error }
    }
}

/// A lease's state in one word: `corrupt`, `held`, `expired` or `free`.
pub fn state_word(corrupt: bool, held: bool, expired: bool) -> &'static str {
    match (corrupt, held, expired) {
        (true, ..) => "corrupt",
        (false, true, _) => "held",
        (false, false, true) => "expired",
        (false, false, false) => "free",
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn times_come_as_unix_ms_and_rfc3339_and_holders_say_how_long_they_held() {
        assert_eq!(rfc3339_ms(0).as_deref(), Some("1970-01-01T00:00:00.000Z"));
        assert_eq!(rfc3339_ms(1_795_000_000_123).as_deref(), Some("2026-11-18T11:06:40.123Z"));
        assert_eq!(rfc3339_ms(MAX_TIME_MS + 1), None);
        let view = HolderView {
            holder: Arc::new(Holder::current().with_nonce("n1")),
            mode: Mode::Exclusive,
            token: 7,
            deadline_ms: 1_795_000_060_000,
            ttl_ms: 60_000,
            acquired_ms: Some(1_795_000_000_000),
            expires_in_ms: 30_000,
        };
        let json = serde_json::to_value(HolderJson::new(&view, 1_795_000_030_000)).expect("json");
        assert_eq!(json["held_for_ms"], 30_000);
        assert_eq!(json["acquired_at"], "2026-11-18T11:06:40.000Z");
        assert_eq!(json["deadline_at"], "2026-11-18T11:07:40.000Z");
        assert_eq!(json["holder"]["nonce"], "n1");
        assert_eq!(json["mode"], "exclusive");
        let holders = [view];
        let lease = LeaseJson::new("a/b", &holders, &[], 7, None, None, None, Some(1_795_000_000_000), 0);
        let json = serde_json::to_value(lease).expect("json");
        assert_eq!(json["state"], "held");
        assert_eq!(json["modified_at"], "2026-11-18T11:06:40.000Z");
        assert!(json.get("corrupt").is_none());
    }

    #[test]
    fn states_are_one_word_and_corrupt_wins() {
        assert_eq!(state_word(true, true, true), "corrupt");
        assert_eq!(state_word(false, true, true), "held");
        assert_eq!(state_word(false, false, true), "expired");
        assert_eq!(state_word(false, false, false), "free");
    }
}
