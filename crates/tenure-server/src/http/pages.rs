//! The HTTP routes: a status page for humans, Prometheus metrics, the public key.
//!
//! - `GET /` — leases (holders, modes, tokens, deadlines, time left,
//!   reservations, contention), those with a live grant first, and the server's
//!   counters; relative times ("held for 3m12s", "expires in 41s", "released
//!   2h ago") with the UTC time in a `title`, tokens shortened to their last
//!   six digits (the full value in a `title`). Complete as served; a small
//!   inline script refreshes the table in place from `/status.json` every 3 s,
//!   keeping the scroll position. Every value from a client (names, hosts,
//!   labels) is HTML-escaped, and the script only sets text, never markup.
//! - `GET /status.json` — the same as JSON, with the server's `counters`.
//! - `GET /metrics` — Prometheus text format.
//! - `GET /pubkey` — the witness public key, 64 hex digits.
//! - `GET /healthz` — 200 `ok` while the process serves.
//! - `GET /readyz` — 503 with the reason during the restart quarantine (the
//!   server grants nothing then), 200 `ok` once it grants.
//!
//! However many leases the server holds, an answer is bounded: a page shows at
//! most [`PAGE_LIMIT`] leases (`/status.json`: `limit`, at most [`JSON_LIMIT`]),
//! at most [`HOLDERS_SHOWN`] holders of each, and stops at [`MAX_PAGE_BYTES`];
//! it says how many leases follow and where the next page starts (`?after=`,
//! the cursor in `next`).

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use tenure_core::limits::millis;
use tenure_core::{human_duration, report};

use crate::leases::{Cursor, LeaseRow, Snapshot};
use crate::server::Shared;

pub use super::html::HOLDERS_SHOWN;
use super::html::{LEASES_HEAD, SCRIPT, STYLE, html_rows, ms, utc};
use super::metrics::metrics;

/// Most leases on one status page.
pub const PAGE_LIMIT: usize = 500;
/// Most leases in one `/status.json` page (its `limit`; default [`PAGE_LIMIT`]).
pub const JSON_LIMIT: usize = 1000;
/// A page stops adding leases once it is this large.
pub const MAX_PAGE_BYTES: usize = 1024 * 1024;

/// The HTTP routes over the server's shared state.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/status.json", get(json))
        .route("/metrics", get(metrics))
        .route("/pubkey", get(pubkey))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(shared)
}

/// The value of `key` in a query string, percent-decoded (`None`: absent or
/// not UTF-8). Query strings are bounded by the request size.
fn query_param(uri: &Uri, key: &str) -> Option<String> {
    let query = uri.query()?;
    let raw = query.split('&').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))?;
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// Percent-encodes everything but unreserved characters, for a link.
fn encode_param(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A cursor as text: `L` (live) or `I` (idle), then the lease name.
fn cursor_text(c: &Cursor) -> String {
    format!("{}{}", if c.idle { 'I' } else { 'L' }, c.name)
}

fn parse_cursor(s: &str) -> Option<Cursor> {
    let idle = match s.as_bytes().first()? {
        b'I' => true,
        b'L' => false,
        _ => return None,
    };
    let name = s.get(1..)?;
    (name.len() <= tenure_core::MAX_NAME_LEN).then(|| Cursor { idle, name: Arc::from(name) })
}

/// The rows of a snapshot that fit in `budget` bytes as rendered by `render`
/// (at least one), with the cursor after the last one if any are left out.
fn fitting(
    snap: &Snapshot,
    budget: usize,
    mut render: impl FnMut(&LeaseRow) -> String,
) -> (Vec<String>, Option<&Cursor>, usize) {
    let mut rows = Vec::new();
    let mut bytes = 0usize;
    for row in &snap.leases {
        let text = render(row);
        bytes = bytes.saturating_add(text.len());
        if bytes > budget && !rows.is_empty() {
            break;
        }
        rows.push(text);
    }
    let left_out = snap.leases.len() - rows.len();
    let remaining = snap.remaining.saturating_add(left_out);
    let next = (remaining > 0).then(|| snap.leases.get(rows.len().saturating_sub(1)).map(|r| &r.key)).flatten();
    (rows, next, remaining)
}

async fn page(State(shared): State<Arc<Shared>>, uri: Uri) -> Html<String> {
    let core = &shared.core;
    let after = query_param(&uri, "after").and_then(|a| parse_cursor(&a));
    let snap = snapshot(&shared, after, PAGE_LIMIT).await;
    let now_ms = core.now_us() / 1000;
    let mut h = String::with_capacity(16 * 1024 + 512 * snap.leases.len());
    h.push_str(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>tenure lease server</title><style>",
    );
    h.push_str(STYLE);
    h.push_str("</style></head><body><h1>tenure lease server</h1>");
    let left = core.quarantine_left();
    if !left.is_zero() {
        let _ = write!(
            h,
            "<p id=\"quarantine\"><strong>Restart quarantine:</strong> no grants for {}.</p>",
            human_duration(left)
        );
    }
    let _ = write!(
        h,
        "<p id=\"about\">Server time <span id=\"server-time\" title=\"{now_ms} ms\">{}</span> · up {} · max lease {} \
         · <span id=\"refresh\">as of this load (reload to refresh)</span> · witness key <code id=\"pubkey\">{}</code></p>",
        utc(now_ms),
        ms(now_ms.saturating_sub(core.started_us() / 1000)),
        human_duration(core.options().max_lease),
        hex::encode(shared.signer.public_key())
    );
    h.push_str("<dl id=\"counters\">");
    for (key, label, value) in counters(&shared, &snap) {
        let _ = write!(h, "<div><dt>{label}</dt><dd class=\"num\" id=\"counter-{key}\">{value}</dd></div>");
    }
    h.push_str("</dl>");
    h.push_str(LEASES_HEAD);
    let (rows, next, remaining) = fitting(&snap, MAX_PAGE_BYTES, |r| html_rows(r, now_ms));
    rows.iter().for_each(|r| h.push_str(r));
    h.push_str("</tbody></table><div id=\"paging\">");
    if let Some(next) = next {
        let _ = write!(
            h,
            "<p id=\"more\">{remaining} more leases not shown: <a href=\"/?after={}\">next page</a>.</p>",
            encode_param(&cursor_text(next))
        );
    }
    h.push_str("</div><script id=\"live\">");
    h.push_str(SCRIPT);
    h.push_str("</script></body></html>");
    Html(h)
}

/// The server's counters: key (in `/status.json`'s `counters`), heading, value.
fn counters(shared: &Shared, snap: &Snapshot) -> [(&'static str, &'static str, u64); 10] {
    let s = shared.core.stats();
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let n = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
    [
        ("live", "live leases", n(snap.live)),
        ("retired", "retired records", n(snap.retired)),
        ("grants", "grants", load(&s.grants)),
        ("busy", "busy (contention)", load(&s.busy)),
        ("waiting", "waiting in queues", n(shared.core.waiting())),
        ("expired_takeovers", "expired takeovers", load(&s.expired_takeovers)),
        ("renewals", "renewals", load(&s.renewals)),
        ("releases", "releases", load(&s.releases)),
        ("breaks", "breaks", load(&s.breaks)),
        ("connections", "connections", load(&shared.conns.open)),
    ]
}

/// A page of the table, taken on a blocking thread: it scans every lease (one
/// shard lock at a time), which takes a while with a million of them, and the
/// runtime's workers have connections to serve meanwhile.
async fn snapshot(shared: &Arc<Shared>, after: Option<Cursor>, limit: usize) -> Snapshot {
    let core = shared.core.clone();
    let scan = tokio::task::spawn_blocking(move || core.snapshot(after.as_ref(), limit));
    scan.await.unwrap_or_else(|e| {
        tracing::error!(error = %e, "the status scan failed");
        Snapshot::default()
    })
}

/// One lease in the shared JSON shape ([`tenure_core::report`]), with what only
/// the server knows: all its holders counted, reservations, contention.
fn lease_json(r: &LeaseRow, now_ms: u64) -> String {
    let shown = &r.holders[..r.holders.len().min(HOLDERS_SHOWN)];
    let lease = report::LeaseJson::new(
        &r.name,
        shown,
        &[],
        r.last_token,
        r.watermark_ms,
        r.last.as_ref(),
        None,
        Some(r.modified_ms),
        now_ms,
    );
    let mut json = serde_json::to_value(lease).unwrap_or_default();
    if let Some(obj) = json.as_object_mut() {
        obj.insert("holders_total".into(), r.holders.len().into());
        obj.insert("reservations".into(), r.tentative.into());
        obj.insert("busy".into(), r.busy.into());
        obj.insert("waiters".into(), r.waiters.into());
    }
    json.to_string()
}

async fn json(State(shared): State<Arc<Shared>>, uri: Uri) -> impl IntoResponse {
    let core = &shared.core;
    let after = query_param(&uri, "after").and_then(|a| parse_cursor(&a));
    let limit = query_param(&uri, "limit").and_then(|l| l.parse::<usize>().ok()).unwrap_or(PAGE_LIMIT);
    let snap = snapshot(&shared, after, limit.clamp(1, JSON_LIMIT)).await;
    let now_ms = core.now_us() / 1000;
    let (rows, next, remaining) = fitting(&snap, MAX_PAGE_BYTES, |r| lease_json(r, now_ms));
    let head = serde_json::json!({
        "schema_version": report::SCHEMA_VERSION,
        "now_ms": now_ms,
        "now_at": report::rfc3339_ms(now_ms),
        "server_time_us": core.now_us(),
        "started_us": core.started_us(),
        "quarantine_left_ms": millis(core.quarantine_left()),
        "public_key": hex::encode(shared.signer.public_key()),
        "live": snap.live,
        "retired": snap.retired,
        "truncated": next.is_some(),
        "remaining": remaining,
        "next": next.map(cursor_text),
        "counters": counters(&shared, &snap).iter().map(|(k, _, v)| (k.to_string(), (*v).into())).collect::<serde_json::Map<_, _>>(),
    })
    .to_string();
    // The head object, with the leases (already JSON) spliced in as its last member.
    let mut body = String::with_capacity(head.len() + rows.iter().map(|r| r.len() + 1).sum::<usize>() + 16);
    body.push_str(head.strip_suffix('}').unwrap_or(&head));
    body.push_str(",\"leases\":[");
    body.push_str(&rows.join(","));
    body.push_str("]}");
    ([(header::CONTENT_TYPE, "application/json")], body)
}

async fn pubkey(State(shared): State<Arc<Shared>>) -> String {
    format!("{}\n", hex::encode(shared.signer.public_key()))
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready once the restart quarantine is over: before that every acquisition is
/// refused, so a load balancer should not send clients here yet.
async fn readyz(State(shared): State<Arc<Shared>>) -> (StatusCode, String) {
    let left = shared.core.quarantine_left();
    if left.is_zero() {
        (StatusCode::OK, "ok\n".to_string())
    } else {
        let left = human_duration(left);
        (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: restart quarantine, no grants for another {left}\n"))
    }
}
