//! The times `--from` and `--to` take: a date-time, a date, a time ago or unix
//! milliseconds, read into unix ms and refused with what is accepted.

use std::time::UNIX_EPOCH;

use anyhow::Result;
use tenure::limits::{MAX_TIME_MS, millis};

/// How `--from` and `--to` are given (shown after `tenure bag read --help`).
pub(super) const WHEN_HELP: &str = "WHEN (--from, --to) is one of:
  2026-11-24T10:00:00Z       a date-time; UTC unless it ends in an offset (+01:00);
                             a space may replace the T, seconds and fractions are optional
  2026-11-24                 a date: midnight UTC
  -10m, 10m, -2h, -1d30m     a time ago (with or without the minus sign)
  1764000000000              unix milliseconds
Times before 1970 or after the year 9999 are refused (exit 64).";

/// What `--from` and `--to` accept, for error messages.
const WHEN_FORMS: &str = "a date-time (2026-11-24T10:00:00Z), a date (2026-11-24), a time ago (-10m, -2h, -1d) \
     or unix milliseconds, from 1970 to the year 9999";

/// `--from`/`--to` as clap parses them: [`parse_when`] against the wall clock.
pub(super) fn when(s: &str) -> Result<u64, String> {
    parse_when(s, now_ms())
}

/// Parses a point in time (unix ms) given as an RFC 3339 date-time (UTC unless it
/// has an offset), a date (midnight UTC), a time ago (`-10m` or `10m`: both mean
/// ten minutes before `now_ms`) or unix milliseconds. Anything before 1970 or past
/// the year 9999 ([`MAX_TIME_MS`]) is an error saying what was given and what is
/// accepted; no input panics.
pub(crate) fn parse_when(s: &str, now_ms: u64) -> Result<u64, String> {
    let refuse = |why: &str| Err(format!("{s:?} {why}; give {WHEN_FORMS}"));
    let t = s.trim();
    if t.is_empty() {
        return refuse("is empty");
    }
    if t.bytes().all(|b| b.is_ascii_digit()) {
        return match t.parse::<u64>() {
            Ok(ms) if ms <= MAX_TIME_MS => Ok(ms),
            _ => refuse("is past the year 9999 as unix milliseconds"),
        };
    }
    if looks_like_date(t) {
        return match parse_date(t) {
            Ok(ms) => Ok(ms),
            Err(why) => refuse(why),
        };
    }
    let ago = t.strip_prefix('-').unwrap_or(t);
    if looks_like_date(ago) {
        return refuse("is before 1970");
    }
    if t.starts_with('+') {
        return refuse("is in the future; a time ago is written -10m or 10m");
    }
    if ago.parse::<f64>().is_ok() {
        return refuse(
            "is a negative or fractional number: unix milliseconds are whole and not negative, and a time ago needs a unit (-30s, -10m)",
        );
    }
    let d = match humantime::parse_duration(ago) {
        Ok(d) => d,
        Err(e) => return refuse(&format!("is not a time ({e})")),
    };
    match u64::try_from(d.as_millis()).ok().and_then(|ms| now_ms.checked_sub(ms)) {
        Some(ms) if ms <= MAX_TIME_MS => Ok(ms),
        Some(_) => refuse("is past the year 9999"),
        None => refuse("is before 1970"),
    }
}

/// `YYYY-…`: four digits and a dash.
fn looks_like_date(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() >= 5 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-'
}

/// A date or date-time (see [`parse_when`]) as unix ms.
fn parse_date(t: &str) -> Result<u64, &'static str> {
    let b = t.as_bytes();
    if &b[..4] < b"1970".as_slice() {
        return Err("is before 1970");
    }
    // The zone: `Z`, an offset `±HH:MM` (its sign and colon are ASCII, so the
    // slices below fall on character boundaries), or none (UTC).
    let (body, offset_ms): (&str, i64) = if let Some(body) = t.strip_suffix(['Z', 'z']) {
        (body, 0)
    } else if b.len() > 16
        && matches!(b[b.len() - 6], b'+' | b'-')
        && b[b.len() - 3] == b':'
        && [1, 2, 4, 5].iter().all(|&i| b[b.len() - 6 + i].is_ascii_digit())
    {
        let z = &b[b.len() - 6..];
        let (h, m) = (
            i64::from(z[1] - b'0') * 10 + i64::from(z[2] - b'0'),
            i64::from(z[4] - b'0') * 10 + i64::from(z[5] - b'0'),
        );
        if h > 23 || m > 59 {
            return Err("has an offset out of range (at most ±23:59)");
        }
        let sign = if z[0] == b'-' { -1 } else { 1 };
        (&t[..t.len() - 6], sign * (h * 60 + m) * 60_000)
    } else {
        (t, 0)
    };
    let full = match body.len() {
        10 => format!("{body}T00:00:00"),
        16 => format!("{body}:00"),
        _ => body.to_string(),
    };
    let time = humantime::parse_rfc3339_weak(&full).map_err(|e| match e {
        humantime::TimestampError::OutOfRange => "is not a valid date or is past the year 9999",
        _ => "is not a date-time",
    })?;
    let ms = time.duration_since(UNIX_EPOCH).map_or(0, millis);
    // An offset moves the time to UTC: local time minus the offset.
    let utc = i128::from(ms) - i128::from(offset_ms);
    match u64::try_from(utc) {
        Ok(ms) if ms <= MAX_TIME_MS => Ok(ms),
        Ok(_) => Err("is past the year 9999"),
        Err(_) => Err("is before 1970"),
    }
}
pub(super) fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, millis)
}
