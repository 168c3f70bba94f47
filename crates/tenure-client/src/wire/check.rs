//! Range checks on the numbers frames carry, on both sides of the wire.
//!
//! A frame decodes into plain `u64`s: postcard accepts any value, so a decoded
//! frame says nothing about whether a TTL is a few seconds or five hundred
//! million years. Everything is checked here before it is used, against
//! [`tenure_core::limits`] (tokens below `MAX_TOKEN`, times before the year 9999,
//! TTLs up to 30 days) and the server's own `--max-lease`, and refused with a
//! message naming the field: a hostile or buggy peer gets a clear error, never
//! an arithmetic overflow, a wrapped deadline or a panic.

use super::MAX_META;
use super::{
    HolderViewWire, MAX_HOLDER_FIELD, MAX_NAME_LEN, MAX_TIME_MS, MAX_TOKEN, MAX_TTL, MIN_TTL_MS, Request, StateWire,
    millis,
};

/// `Err` naming `what` unless `lo <= v <= hi`.
fn within(what: &dyn std::fmt::Display, v: u64, lo: u64, hi: u64, why: &str) -> Result<(), String> {
    if v < lo || v > hi {
        return Err(format!("{what} {v} is not within {lo} to {hi}{why}"));
    }
    Ok(())
}

fn token(what: &dyn std::fmt::Display, v: u64) -> Result<(), String> {
    within(what, v, 0, MAX_TOKEN - 1, " (the token space)")
}

fn time(what: &dyn std::fmt::Display, v: u64) -> Result<(), String> {
    within(what, v, 0, MAX_TIME_MS, " (unix ms up to the year 9999)")
}

fn len(what: &dyn std::fmt::Display, s: &str, max: usize) -> Result<(), String> {
    if s.len() > max {
        return Err(format!("{what} is {} bytes long (at most {max})", s.len()));
    }
    Ok(())
}

/// A field of item `i` of a batch, for messages: `asks[3].ttl_ms`.
struct Field<'a>(&'a str, usize, &'a str);

impl std::fmt::Display for Field<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}[{}].{}", self.0, self.1, self.2)
    }
}

/// Checks every number and length of a request against what a valid client can
/// send to a server whose `--max-lease` is `max_lease_ms`. The message names the
/// field; the server answers it as `Error { code: Invalid }`.
pub fn check_request(req: &Request<'_>, max_lease_ms: u64) -> Result<(), String> {
    let ttl = |what: &Field<'_>, v: u64| within(what, v, MIN_TTL_MS, max_lease_ms, " ms (the server's --max-lease)");
    let meta = |what: &Field<'_>, m: Option<&str>| m.map_or(Ok(()), |m| len(what, m, MAX_META));
    match req {
        Request::Hello { .. }
        | Request::Ping
        | Request::Inspect(_)
        | Request::Unwait { .. }
        | Request::Waiters(_)
        | Request::Identify => {}
        Request::Servers(ids) => {
            within(&"servers", ids.len() as u64, 1, super::MAX_SERVERS as u64, " (servers in a list)")?;
            for (i, id) in ids.iter().enumerate() {
                super::check_server_id(id).map_err(|m| format!("servers[{i}]: {m}"))?;
                if ids[..i].contains(id) {
                    return Err(format!("servers[{i}]: {id:?} is listed twice"));
                }
            }
        }
        Request::Acquire { asks, .. } => {
            for (i, a) in asks.iter().enumerate() {
                ttl(&Field("asks", i, "ttl_ms"), a.ttl_ms)?;
                meta(&Field("asks", i, "meta"), a.meta)?;
            }
        }
        Request::Wait { ask, wait_ms } => {
            ttl(&Field("ask", 0, "ttl_ms"), ask.ttl_ms)?;
            meta(&Field("ask", 0, "meta"), ask.meta)?;
            within(&"wait_ms", *wait_ms, 0, super::MAX_WAIT_MS, " ms (a day)")?;
        }
        Request::Upgrade(refs) => {
            for (i, r) in refs.iter().enumerate() {
                len(&Field("refs", i, "name"), r.name, MAX_NAME_LEN)?;
                token(&Field("refs", i, "token"), r.token)?;
                len(&Field("refs", i, "nonce"), r.nonce, MAX_HOLDER_FIELD)?;
            }
        }
        Request::Renew(items) => {
            for (i, it) in items.iter().enumerate() {
                // Up to the protocol's limit: a renewal beyond the server's
                // --max-lease is of a grant from before a restart with a lower
                // one, and answered as lost, item by item (a refusal of the
                // whole request would look like a passing failure).
                let what = Field("items", i, "ttl_ms");
                within(&what, it.ttl_ms, MIN_TTL_MS, millis(MAX_TTL), " ms (the protocol's longest lease)")?;
                len(&Field("items", i, "name"), it.grant.name, MAX_NAME_LEN)?;
                token(&Field("items", i, "token"), it.grant.token)?;
                len(&Field("items", i, "nonce"), it.grant.nonce, MAX_HOLDER_FIELD)?;
            }
        }
        Request::Release(items) => {
            for (i, it) in items.iter().enumerate() {
                len(&Field("items", i, "name"), it.grant.name, MAX_NAME_LEN)?;
                token(&Field("items", i, "token"), it.grant.token)?;
                len(&Field("items", i, "nonce"), it.grant.nonce, MAX_HOLDER_FIELD)?;
                if let Some(w) = it.watermark_ms {
                    time(&Field("items", i, "watermark_ms"), w)?;
                }
                meta(&Field("items", i, "meta"), it.meta)?;
            }
        }
        Request::List { prefix, after, .. } => {
            len(&"list prefix", prefix, MAX_NAME_LEN)?;
            len(&"list cursor (after)", after.unwrap_or(""), MAX_NAME_LEN)?;
        }
        Request::Break { name, only_token, note, .. } => {
            len(&"break name", name, MAX_NAME_LEN)?;
            if let Some(t) = only_token {
                token(&"break only_token", *t)?;
            }
            if let Some(n) = note {
                len(&"break reason", n.reason.unwrap_or(""), tenure_core::limits::MAX_REASON_BYTES)?;
                n.by.to_holder()?;
            }
        }
    }
    Ok(())
}

/// The hello's `max_lease_ms`, checked: a server grants 1 ms to 30 days.
pub(crate) fn check_max_lease(v: u64) -> Result<(), String> {
    within(&"the server's max_lease_ms", v, 1, millis(MAX_TTL), " (1 ms to 30 days)")
}

/// A grant's token and deadline from an answer. A full grant has a token of at
/// least 1; a reservation has token 0.
pub(crate) fn check_grant(tok: u64, deadline_ms: u64, tentative: bool, predecessor: Option<u64>) -> Result<(), String> {
    if tentative {
        within(&"a reservation's token", tok, 0, 0, " (reservations carry token 0)")?;
    } else {
        within(&"the granted token", tok, 1, MAX_TOKEN - 1, " (the token space)")?;
        // Tokens only grow: a grant below the one it follows would let a
        // fenced store take the older holder's writes after the newer one's.
        if let Some(p) = predecessor.filter(|&p| p >= tok) {
            return Err(format!("the granted token {tok} is not above its predecessor's {p}"));
        }
    }
    time(&"the grant's deadline_ms", deadline_ms)
}

/// A predecessor's numbers from an answer.
pub(crate) fn check_predecessor(
    tok: u64,
    at_ms: u64,
    acquired_ms: Option<u64>,
    watermark_ms: Option<u64>,
) -> Result<(), String> {
    token(&"the predecessor's token", tok)?;
    time(&"the predecessor's at_ms", at_ms)?;
    if let Some(a) = acquired_ms {
        time(&"the predecessor's acquired_ms", a)?;
    }
    if let Some(w) = watermark_ms {
        time(&"the predecessor's watermark_ms", w)?;
    }
    Ok(())
}

/// A holder's view from an answer (busy holders, inspected state).
pub(crate) fn check_view(v: &HolderViewWire) -> Result<(), String> {
    token(&"a holder's token", v.token)?;
    time(&"a holder's deadline_ms", v.deadline_ms)?;
    if let Some(a) = v.acquired_ms {
        time(&"a holder's acquired_ms", a)?;
    }
    within(&"a holder's ttl_ms", v.ttl_ms, 0, millis(MAX_TTL), " (up to 30 days)")?;
    within(&"a holder's expires_in_ms", v.expires_in_ms, 0, millis(MAX_TTL), " (up to 30 days)")
}

/// An inspected state from an answer.
pub(crate) fn check_state(s: &StateWire) -> Result<(), String> {
    token(&"the state's last_token", s.last_token)?;
    for t in [s.modified_ms, s.watermark_ms].into_iter().flatten() {
        time(&"the state's modified_ms or watermark_ms", t)?;
    }
    for v in s.holders.iter().chain(&s.expired) {
        check_view(v)?;
    }
    if let Some(p) = &s.last {
        check_predecessor(p.token, p.at_ms, p.acquired_ms, p.watermark_ms)?;
    }
    Ok(())
}

/// A quarantine's remaining time from an answer: at most the longest
/// `--max-lease` plus its second.
pub(crate) fn check_quarantine(left_ms: u64) -> Result<(), String> {
    within(&"the quarantine's left_ms", left_ms, 0, millis(MAX_TTL) + 2_000, " (at most 30 days)")
}
