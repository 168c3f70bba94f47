//! How the bag commands print: a line to standard output (a closed pipe ends
//! the command quietly), times readable and as RFC 3339, the JSON objects of
//! `--json` with their schema version, counts and shell words.

use std::io::Write;

use anyhow::Result;
use serde::Serialize;
use tenure_bag::Message;

/// Prints a line; a closed pipe ends the command quietly.
pub(super) fn out(line: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{line}").and_then(|()| stdout.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => Ok(other?),
    }
}

/// The version of every JSON object `tenure bag … --json` prints.
pub(super) const SCHEMA_VERSION: u64 = 1;

/// A time for people and for JSON `_at` fields: UTC, RFC 3339 with milliseconds
/// (`2026-11-24T10:32:05.123Z`). A time past the year 9999 (only a damaged or
/// hostile record holds one) is shown as its number.
pub(super) fn at(ms: u64) -> String {
    match at_json(ms) {
        serde_json::Value::String(s) => s,
        _ => format!("{ms} ms (past the year 9999)"),
    }
}

/// [`at`] for JSON: `null` past the year 9999.
pub(super) fn at_json(ms: u64) -> serde_json::Value {
    tenure::report::rfc3339_ms(ms).map_or(serde_json::Value::Null, Into::into)
}

/// One JSON line as tenure prints it: `"schema_version": 1` at the top, and
/// beside every time `<name>_ms` (unix ms) its `<name>_at` (RFC 3339, UTC, ms),
/// at any depth (a `null` time gets a `null` string).
pub(super) fn json_line(value: serde_json::Value) -> String {
    let mut value = value;
    add_times(&mut value);
    if let Some(obj) = value.as_object_mut() {
        obj.insert("schema_version".into(), SCHEMA_VERSION.into());
    }
    value.to_string()
}

fn add_times(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(obj) => {
            let stamps: Vec<(String, serde_json::Value)> = obj
                .iter()
                .filter_map(|(k, t)| {
                    let name = k.strip_suffix("_ms")?;
                    let when = match t {
                        serde_json::Value::Null => serde_json::Value::Null,
                        t => at_json(t.as_u64()?),
                    };
                    Some((format!("{name}_at"), when))
                })
                .collect();
            for (k, t) in stamps {
                obj.entry(k).or_insert(t);
            }
            obj.values_mut().for_each(add_times);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(add_times),
        _ => {}
    }
}

#[derive(Serialize)]
struct JsonMessage<'a> {
    ts_ms: u64,
    writer: &'a str,
    seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_hex: Option<String>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    leases: &'a [tenure_bag::LeaseStamp],
}

fn message_json(m: &Message) -> Result<String> {
    let text = std::str::from_utf8(&m.payload).ok();
    let hex = text.is_none().then(|| m.payload.iter().map(|b| format!("{b:02x}")).collect());
    Ok(json_line(serde_json::to_value(JsonMessage {
        ts_ms: m.ts_ms,
        writer: &m.writer,
        seq: m.seq,
        payload: text,
        payload_hex: hex,
        leases: &m.leases,
    })?))
}

/// Prints one message: a JSON line, or `<time> <writer>#<seq> <body>` (the body
/// as written, last on the line, so `cut -d' ' -f3-` gives it back).
pub(super) fn print_message(m: &Message, json: bool) -> Result<()> {
    if json {
        out(&message_json(m)?)
    } else {
        out(&format!("{} {}#{} {}", at(m.ts_ms), m.writer, m.seq, String::from_utf8_lossy(&m.payload)))
    }
}

/// `n thing` or `n things`.
pub(super) fn count(n: u64, thing: &str) -> String {
    if n == 1 { format!("1 {thing}") } else { format!("{n} {thing}s") }
}

/// A word of a command line, quoted for a POSIX shell where it needs it.
pub(super) fn shell_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-:=@%+,".contains(c);
    if !s.is_empty() && s.chars().all(plain) { s.to_string() } else { format!("'{}'", s.replace('\'', r"'\''")) }
}
