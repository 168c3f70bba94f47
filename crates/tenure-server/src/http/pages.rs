//! The HTTP routes: a status page for humans, Prometheus metrics, the public key.
//!
//! - `GET /` — leases (holders, modes, tokens, deadlines, time left,
//!   reservations, contention), those with a live grant first, and the server's
//!   counters; plain HTML that refreshes itself every 2 s, no script needed.
//!   Every value from a client (names, hosts, labels) is HTML-escaped.
//! - `GET /status.json` — the same as JSON.
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
use tenure::limits::millis;
use tenure::{human_duration, report};

use crate::core::{Cursor, LeaseRow, Snapshot};
use crate::server::Shared;

/// Most leases on one status page.
pub const PAGE_LIMIT: usize = 500;
/// Most leases in one `/status.json` page (its `limit`; default [`PAGE_LIMIT`]).
pub const JSON_LIMIT: usize = 1000;
/// Most holders shown for one lease (the rest are counted).
pub const HOLDERS_SHOWN: usize = 16;
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
    (name.len() <= tenure::MAX_NAME_LEN).then(|| Cursor { idle, name: Arc::from(name) })
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

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn ms(v: u64) -> String {
    human_duration(std::time::Duration::from_millis(v))
}

async fn page(State(shared): State<Arc<Shared>>, uri: Uri) -> Html<String> {
    let core = &shared.core;
    let after = query_param(&uri, "after").and_then(|a| parse_cursor(&a));
    let snap = snapshot(&shared, after, PAGE_LIMIT).await;
    let now_ms = core.now_us() / 1000;
    let s = core.stats();
    let mut h = String::with_capacity(4096 + 256 * snap.leases.len());
    let _ = write!(
        h,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"2\">\
         <title>tenure lease server</title><style>body{{font-family:system-ui,sans-serif;margin:1.5em}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.25em .6em;text-align:left}}\
         th{{background:#eee}}.num{{text-align:right;font-variant-numeric:tabular-nums}}code{{font-size:90%}}</style>\
         </head><body><h1>tenure lease server</h1>"
    );
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
        "<p>Server time <span id=\"server-time\">{now_ms}</span> ms · up {} · max lease {} · \
         witness key <code id=\"pubkey\">{}</code></p>",
        ms(now_ms.saturating_sub(core.started_us() / 1000)),
        human_duration(core.options().max_lease),
        hex::encode(shared.signer.public_key())
    );
    let _ = write!(
        h,
        "<table id=\"counters\"><tr><th>live leases</th><th>retired records</th><th>grants</th><th>busy (contention)</th>\
         <th>expired takeovers</th><th>renewals</th><th>releases</th><th>breaks</th><th>connections</th></tr>\
         <tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
         <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
         <td class=\"num\">{}</td></tr></table>",
        snap.live,
        snap.retired,
        s.grants.load(Ordering::Relaxed),
        s.busy.load(Ordering::Relaxed),
        s.expired_takeovers.load(Ordering::Relaxed),
        s.renewals.load(Ordering::Relaxed),
        s.releases.load(Ordering::Relaxed),
        s.breaks.load(Ordering::Relaxed),
        shared.conns.open.load(Ordering::Relaxed),
    );
    h.push_str(
        "<h2>Leases</h2><table id=\"leases\"><tr><th>name</th><th>mode</th><th>holder</th><th>token</th>\
         <th>deadline (ms)</th><th>time left</th><th>reservations</th><th>busy</th><th>watermark (ms)</th>\
         <th>last ending</th></tr>",
    );
    let (rows, next, remaining) = fitting(&snap, MAX_PAGE_BYTES, html_rows);
    rows.iter().for_each(|r| h.push_str(r));
    h.push_str("</table>");
    if let Some(next) = next {
        let _ = write!(
            h,
            "<p id=\"more\">{remaining} more leases not shown: <a href=\"/?after={}\">next page</a>.</p>",
            encode_param(&cursor_text(next))
        );
    }
    h.push_str("</body></html>");
    Html(h)
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

/// One lease's rows: one per holder shown, or one saying it is free.
fn html_rows(row: &LeaseRow) -> String {
    let mut h = String::new();
    let last = row.last.as_ref().map_or_else(String::new, |p| format!("token {} {}", p.token, p.how));
    let wm = row.watermark_ms.map_or_else(String::new, |w| w.to_string());
    if row.holders.is_empty() {
        let _ = write!(
            h,
            "<tr class=\"free\"><td>{}</td><td colspan=\"2\">free</td><td class=\"num\">{}</td><td></td><td></td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{wm}</td><td>{}</td></tr>",
            escape(&row.name),
            row.last_token,
            row.tentative,
            row.busy,
            escape(&last)
        );
    }
    for v in row.holders.iter().take(HOLDERS_SHOWN) {
        let _ = write!(
            h,
            "<tr class=\"held\"><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{wm}</td>\
             <td>{}</td></tr>",
            escape(&row.name),
            v.mode,
            escape(&v.holder.to_string()),
            v.token,
            v.deadline_ms,
            ms(v.expires_in_ms),
            row.tentative,
            row.busy,
            escape(&last)
        );
    }
    if let Some(more) = row.holders.len().checked_sub(HOLDERS_SHOWN).filter(|n| *n > 0) {
        let _ = write!(
            h,
            "<tr class=\"held\"><td>{}</td><td colspan=\"9\">and {more} more holders</td></tr>",
            escape(&row.name)
        );
    }
    h
}

/// One lease in the shared JSON shape ([`tenure::report`]), with what only
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

/// Prometheus text format being written.
struct Metrics(String);

impl Metrics {
    /// One metric: HELP, TYPE and the sample.
    fn add(&mut self, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
        let _ = writeln!(self.0, "# HELP tenure_{name} {help}\n# TYPE tenure_{name} {kind}\ntenure_{name} {value}");
    }
}

async fn metrics(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let core = &shared.core;
    let s = core.stats();
    let c = &shared.conns;
    let (live, retired) = core.counts();
    let mut out = String::with_capacity(4096);
    let _ = writeln!(
        out,
        "# HELP tenure_build_info The running tenure version.\n# TYPE tenure_build_info gauge\n\
         tenure_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    let mut m = Metrics(out);
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let n = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
    m.add("leases_live", "gauge", "Lease records with a live grant or reservation.", n(live));
    m.add("leases_retired", "gauge", "Released records kept for their watermark and metadata.", n(retired));
    m.add("grants_total", "counter", "Grants, upgrades included.", load(&s.grants));
    m.add("busy_total", "counter", "Acquisitions refused because the lease was held.", load(&s.busy));
    m.add("expired_takeovers_total", "counter", "Grants that took over an expired grant.", load(&s.expired_takeovers));
    m.add("renewals_total", "counter", "Successful renewals.", load(&s.renewals));
    m.add("renewals_lost_total", "counter", "Renewals of grants no longer held.", load(&s.renewals_lost));
    m.add("releases_total", "counter", "Releases that ended a grant.", load(&s.releases));
    m.add("breaks_total", "counter", "Leases broken by an administrator.", load(&s.breaks));
    m.add("tentative_total", "counter", "Tentative reservations granted.", load(&s.tentative));
    m.add("tentative_broken_total", "counter", "Reservations broken by a full request.", load(&s.tentative_broken));
    m.add("upgrades_failed_total", "counter", "Upgrades of broken or expired reservations.", load(&s.upgrades_failed));
    m.add("quarantined_total", "counter", "Requests refused during the restart quarantine.", load(&s.quarantined));
    m.add("records_dropped_total", "counter", "Retired records dropped, oldest first.", load(&s.dropped));
    m.add(
        "quarantine_remaining_seconds",
        "gauge",
        "Time left in the restart quarantine.",
        core.quarantine_left().as_secs_f64(),
    );
    m.add("connections_open", "gauge", "Open client connections, before and after their hello.", load(&c.open));
    m.add("connections_clients", "gauge", "Connections past their hello.", n(shared.clients_open()));
    m.add("connections_pre_hello", "gauge", "Connections that have not said hello yet.", n(shared.pre_hello_open()));
    m.add(
        "connections_evicted_total",
        "counter",
        "Connections closed before their hello to make room for newer ones.",
        shared.pre_hello_evicted(),
    );
    m.add("connections_timed_out_total", "counter", "Connections closed for a deadline.", load(&c.timed_out));
    m.add("connections_accepted_total", "counter", "Accepted client connections.", load(&c.accepted));
    m.add("connections_rejected_total", "counter", "Connections refused or closed for an error.", load(&c.rejected));
    m.add("requests_total", "counter", "Requests handled.", load(&c.requests));
    m.add("signatures_total", "counter", "Witness batch signatures.", load(&c.signatures));
    m.add("witnesses_total", "counter", "Witnesses signed.", load(&c.witnesses));
    m.add(
        "start_time_seconds",
        "gauge",
        "When this incarnation started (unix seconds).",
        core.started_us() / 1_000_000,
    );
    c.latency.render(&mut m.0);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], m.0)
}
