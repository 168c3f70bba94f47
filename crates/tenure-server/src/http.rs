//! The HTTP side: a status page for humans, Prometheus metrics, the public key.
//!
//! - `GET /` — live leases (holders, modes, tokens, deadlines, time left,
//!   reservations, contention) and the server's counters; plain HTML that refreshes
//!   itself every 2 s, no script needed. Every value from a client (names, hosts,
//!   labels) is HTML-escaped.
//! - `GET /status.json` — the same as JSON.
//! - `GET /metrics` — Prometheus text format.
//! - `GET /pubkey` — the witness public key, 64 hex digits.

use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use tenure::human_duration;
use tokio::net::TcpListener;

use crate::core::Snapshot;
use crate::server::Shared;

/// Most leases listed on the status page.
pub const PAGE_LIMIT: usize = 1000;

/// The HTTP routes over the server's shared state.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/status.json", get(json))
        .route("/metrics", get(metrics))
        .route("/pubkey", get(pubkey))
        .with_state(shared)
}

/// Serves the routes on `listener` until `shutdown` completes.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>, shutdown: impl Future<Output = ()> + Send + 'static) {
    let app = router(shared);
    if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
        tracing::error!(error = %e, "the HTTP server failed");
    }
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

async fn page(State(shared): State<Arc<Shared>>) -> Html<String> {
    let core = &shared.core;
    let snap = core.snapshot(PAGE_LIMIT);
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
    for row in &snap.leases {
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
        for v in &row.holders {
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
    }
    h.push_str("</table>");
    if snap.truncated {
        let _ = write!(h, "<p>Only the first {PAGE_LIMIT} leases are shown.</p>");
    }
    h.push_str("</body></html>");
    Html(h)
}

fn snapshot_json(shared: &Shared, snap: &Snapshot) -> serde_json::Value {
    let core = &shared.core;
    let leases: Vec<serde_json::Value> = snap
        .leases
        .iter()
        .map(|r| {
            serde_json::json!({
                "name": r.name,
                "holders": r.holders,
                "reservations": r.tentative,
                "last_token": r.last_token,
                "watermark_ms": r.watermark_ms,
                "last": r.last,
                "busy": r.busy,
                "modified_ms": r.modified_ms,
            })
        })
        .collect();
    serde_json::json!({
        "server_time_us": core.now_us(),
        "started_us": core.started_us(),
        "quarantine_left_ms": core.quarantine_left().as_millis() as u64,
        "public_key": hex::encode(shared.signer.public_key()),
        "live": snap.live,
        "retired": snap.retired,
        "truncated": snap.truncated,
        "leases": leases,
    })
}

async fn json(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let snap = shared.core.snapshot(PAGE_LIMIT);
    ([(header::CONTENT_TYPE, "application/json")], snapshot_json(&shared, &snap).to_string())
}

async fn pubkey(State(shared): State<Arc<Shared>>) -> String {
    format!("{}\n", hex::encode(shared.signer.public_key()))
}

async fn metrics(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let core = &shared.core;
    let s = core.stats();
    let c = &shared.conns;
    let snap = core.snapshot(0);
    let mut out = String::with_capacity(2048);
    let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
        let _ = writeln!(out, "# HELP tenure_{name} {help}\n# TYPE tenure_{name} {kind}\ntenure_{name} {value}");
    };
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    metric("leases_live", "gauge", "Lease records with a live grant or reservation.", snap.live as u64);
    metric("leases_retired", "gauge", "Released records kept for their watermark and metadata.", snap.retired as u64);
    metric("grants_total", "counter", "Grants, upgrades included.", load(&s.grants));
    metric("busy_total", "counter", "Acquisitions refused because the lease was held.", load(&s.busy));
    metric("expired_takeovers_total", "counter", "Grants that took over an expired grant.", load(&s.expired_takeovers));
    metric("renewals_total", "counter", "Successful renewals.", load(&s.renewals));
    metric("renewals_lost_total", "counter", "Renewals of grants no longer held.", load(&s.renewals_lost));
    metric("releases_total", "counter", "Releases that ended a grant.", load(&s.releases));
    metric("breaks_total", "counter", "Leases broken by an administrator.", load(&s.breaks));
    metric("tentative_total", "counter", "Tentative reservations granted.", load(&s.tentative));
    metric("tentative_broken_total", "counter", "Reservations broken by a full request.", load(&s.tentative_broken));
    metric("upgrades_failed_total", "counter", "Upgrades of broken or expired reservations.", load(&s.upgrades_failed));
    metric("quarantined_total", "counter", "Requests refused during the restart quarantine.", load(&s.quarantined));
    metric("records_dropped_total", "counter", "Retired records dropped, oldest first.", load(&s.dropped));
    metric(
        "quarantine_remaining_ms",
        "gauge",
        "Time left in the restart quarantine.",
        core.quarantine_left().as_millis() as u64,
    );
    metric("connections_open", "gauge", "Open client connections.", load(&c.open));
    metric("connections_accepted_total", "counter", "Accepted client connections.", load(&c.accepted));
    metric("connections_rejected_total", "counter", "Connections refused or closed for an error.", load(&c.rejected));
    metric("requests_total", "counter", "Requests handled.", load(&c.requests));
    metric("signatures_total", "counter", "Witness batch signatures.", load(&c.signatures));
    metric("witnesses_total", "counter", "Witnesses signed.", load(&c.witnesses));
    metric(
        "start_time_seconds",
        "gauge",
        "When this incarnation started (unix seconds).",
        core.started_us() / 1_000_000,
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}
