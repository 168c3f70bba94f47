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

/// The page's style: the lease table has fixed column widths, so long names
/// wrap anywhere and long holders and labels end in an ellipsis (the whole
/// text is in their `title`) instead of widening the page; below 800 px the
/// cells wrap instead.
const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1em;color:#222}\
h1{font-size:1.4em;margin:.3em 0}h2{font-size:1.15em}p{overflow-wrap:anywhere}\
#counters{display:flex;flex-wrap:wrap;gap:.4em;margin:0 0 1em;padding:0}\
#counters div{border:1px solid #ccc;padding:.2em .6em;min-width:5em}\
#counters dt{font-size:80%;color:#555}#counters dd{margin:0;font-weight:600;text-align:left}\
table{border-collapse:collapse;width:100%;margin-bottom:1em;font-size:90%}\
td,th{border:1px solid #ccc;padding:.25em .4em;text-align:left;vertical-align:top}\
th{background:#eee;font-weight:600}\
.num{text-align:right;font-variant-numeric:tabular-nums}code{font-size:90%}\
#leases{table-layout:fixed}#leases td{overflow:hidden;text-overflow:ellipsis;white-space:nowrap}\
#leases td.name{white-space:normal;overflow-wrap:anywhere}\
#leases .who,#leases .label,#leases .contention span{display:block;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}\
#leases .label{color:#555;font-size:90%}tr.free td{color:#666}\
#refresh.stale{color:#a00}\
@media (max-width:700px){body{margin:.5em}\
#leases,#leases tbody,#leases tr{display:block}#leases colgroup,#leases thead{display:none}\
#leases tr{border:1px solid #ccc;margin-bottom:.4em;padding:.2em}\
#leases td{display:inline-block;border:0;padding:.1em .4em;white-space:normal;overflow-wrap:anywhere;max-width:100%;box-sizing:border-box}\
#leases td.name{display:block;font-weight:600}#leases td.holder{display:block}#leases td:empty{display:none}\
#leases td.token::before{content:\"token \"}#leases .contention span{display:inline;margin-right:.4em}}";

/// The lease table's head: column widths (they add up to 100%) and headings.
/// "contention" is what the server knows of the askers: the waiters in the
/// lease's queue, the asks it refused and the reservations it holds.
const LEASES_HEAD: &str = "<h2>Leases</h2><table id=\"leases\"><colgroup>\
<col style=\"width:17%\"><col style=\"width:7%\"><col style=\"width:20%\"><col style=\"width:8%\">\
<col style=\"width:11%\"><col style=\"width:11%\"><col style=\"width:12%\"><col style=\"width:14%\"></colgroup>\
<thead><tr><th>name</th><th>mode</th><th>holder</th><th>token</th><th>hold time</th><th>expiry</th>\
<th title=\"Acquisitions waiting in the lease's queue (served first come, first served), \
asks refused while the lease was held (busy), and live tentative reservations.\">contention</th><th>last ending</th></tr></thead><tbody id=\"lease-rows\">";

/// Refreshes the lease table in place every few seconds from `/status.json`
/// (the same page: same `after` cursor), so the scroll position stays. Data
/// only ever goes into `textContent` and `title`, never into markup. Without
/// script the page as served is complete; it just does not refresh. `rel`,
/// `tok` and the cells say the same as the server's first render.
const SCRIPT: &str = r#"(function () {
  "use strict";
  var EVERY = 3000;
  var body = document.getElementById("lease-rows");
  var state = document.getElementById("refresh");
  if (!body || !state || !window.fetch) return;
  var after = new URLSearchParams(location.search).get("after");
  var url = "/status.json" + (after === null ? "" : "?after=" + encodeURIComponent(after));
  function rel(ms) {
    var s = Math.floor(Math.max(ms, 0) / 1000), big, small, n;
    if (s < 60) return s + "s";
    if (s < 3600) { big = Math.floor(s / 60); small = s % 60; n = ["m", "s"]; }
    else if (s < 86400) { big = Math.floor(s / 3600); small = Math.floor(s / 60) % 60; n = ["h", "m"]; }
    else { big = Math.floor(s / 86400); small = Math.floor(s / 3600) % 24; n = ["d", "h"]; }
    return big + n[0] + (small ? small + n[1] : "");
  }
  function utc(ms) { return ms == null ? "" : new Date(ms).toISOString(); }
  function el(tag, text, title, cls) {
    var e = document.createElement(tag);
    if (text != null) e.textContent = text;
    if (title) e.title = title;
    if (cls) e.className = cls;
    return e;
  }
  function tok(t) {
    var s = String(t), c = el("td", null, null, "num token");
    c.appendChild(s.length > 6 ? el("span", "\u2026" + s.slice(-6), s, "tok") : el("span", s, null, "tok"));
    return c;
  }
  function holder(h) {
    var c = el("td", null, null, "holder"), who = h.user + "@" + h.host + " pid " + h.pid;
    var full = who + (h.label ? " (" + h.label + ")" : "") + " [" + String(h.nonce).slice(0, 8) + "]";
    c.appendChild(el("span", who, full, "who"));
    if (h.label) c.appendChild(el("span", h.label, h.label, "label"));
    return c;
  }
  function contention(l) {
    var c = el("td", null, null, "contention");
    if (l.waiters) c.appendChild(el("span", l.waiters + " waiting"));
    if (l.busy) c.appendChild(el("span", l.busy + " refused asks"));
    if (l.reservations) c.appendChild(el("span", l.reservations + " reserved"));
    if (!l.waiters && !l.busy && !l.reservations) c.textContent = "no contention";
    return c;
  }
  function last(l, now) {
    var p = l.last;
    if (!p) return el("td", null, null, "last");
    var title = "token " + p.token + " " + p.how + " at " + utc(p.at_ms);
    if (l.watermark_ms != null) title += ", watermark " + utc(l.watermark_ms);
    return el("td", p.how + " " + rel(now - p.at_ms) + " ago", title, "last");
  }
  function row(cls, cells) {
    var r = el("tr", null, null, cls);
    cells.forEach(function (c) { r.appendChild(c); });
    return r;
  }
  function rows(l, now, out) {
    var name = function () {
      var c = el("td", null, l.name, "name");
      String(l.name).split("/").forEach(function (part, i) {
        if (i) { c.appendChild(document.createTextNode("/")); c.appendChild(document.createElement("wbr")); }
        c.appendChild(document.createTextNode(part));
      });
      return c;
    };
    if (!l.holders.length) {
      var free = el("td", "free");
      free.colSpan = 2;
      out.push(row("free", [name(), free, tok(l.last_token), el("td"), el("td"), contention(l), last(l, now)]));
    }
    l.holders.forEach(function (v) {
      var held = el("td");
      if (v.held_for_ms != null) held.appendChild(el("span", "held for " + rel(v.held_for_ms), "since " + v.acquired_at));
      out.push(row("held", [name(), el("td", v.mode), holder(v.holder), tok(v.token), held,
        el("td", "expires in " + rel(v.expires_in_ms), "deadline " + v.deadline_at), contention(l), last(l, now)]));
    });
    if (l.holders_total > l.holders.length) {
      var more = el("td", "and " + (l.holders_total - l.holders.length) + " more holders");
      more.colSpan = 7;
      out.push(row("held", [name(), more]));
    }
  }
  function apply(doc) {
    var out = [];
    doc.leases.forEach(function (l) { rows(l, doc.now_ms, out); });
    body.replaceChildren.apply(body, out);
    Object.keys(doc.counters || {}).forEach(function (k) {
      var c = document.getElementById("counter-" + k);
      if (c) c.textContent = String(doc.counters[k]);
    });
    var t = document.getElementById("server-time");
    if (t) { t.textContent = doc.now_at; t.title = doc.now_ms + " ms"; }
    var q = document.getElementById("quarantine");
    if (q && !doc.quarantine_left_ms) q.remove();
    var paging = document.getElementById("paging");
    if (paging) {
      var ps = [];
      if (doc.next != null) {
        var p = el("p", doc.remaining + " more leases not shown: ");
        p.id = "more";
        var a = el("a", "next page");
        a.href = "/?after=" + encodeURIComponent(doc.next);
        p.appendChild(a);
        p.appendChild(document.createTextNode("."));
        ps.push(p);
      }
      paging.replaceChildren.apply(paging, ps);
    }
    state.removeAttribute("class");
    state.textContent = "refreshed " + String(doc.now_at).slice(11, 19) + " UTC, every " + EVERY / 1000 + " s";
  }
  function tick() {
    if (document.hidden) { setTimeout(tick, EVERY); return; }
    fetch(url, { cache: "no-store" })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(apply)
      .catch(function (e) {
        state.className = "stale";
        state.textContent = "refresh failed (" + e.message + "), retrying";
      })
      .then(function () { setTimeout(tick, EVERY); });
  }
  state.textContent = "refreshing every " + EVERY / 1000 + " s";
  setTimeout(tick, EVERY);
})();"#;
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

/// A span of time, for a relative time: `41s`, `3m12s`, `2h5m`, `3d4h`
/// (whole units, like the page's script).
fn rel(ms: u64) -> String {
    let s = ms / 1000;
    let (big, small, names) = match s {
        0..60 => return format!("{s}s"),
        60..3600 => (s / 60, s % 60, ("m", "s")),
        3600..86400 => (s / 3600, s / 60 % 60, ("h", "m")),
        _ => (s / 86400, s / 3600 % 24, ("d", "h")),
    };
    if small == 0 { format!("{big}{}", names.0) } else { format!("{big}{}{small}{}", names.0, names.1) }
}

/// Unix ms as RFC 3339 UTC, for a `title`.
fn utc(ms: u64) -> String {
    report::rfc3339_ms(ms).unwrap_or_else(|| format!("{ms} ms"))
}

/// A token readably: tokens are server time in µs, 16 digits, of which the
/// last six tell grants apart; the full value goes in the `title`.
fn token_html(t: u64) -> String {
    if t < 1_000_000 {
        format!("<span class=\"tok\">{t}</span>")
    } else {
        format!("<span class=\"tok\" title=\"{t}\">…{:06}</span>", t % 1_000_000)
    }
}

/// Client text for a page: control characters written out (`\u{1b}`), then
/// HTML-escaped.
fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() {
            let _ = write!(out, "{}", c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    escape(&out)
}

/// `user@host pid N`, then the label if any on a line of its own; the title
/// has everything, nonce included.
fn holder_html(h: &tenure_core::Holder) -> String {
    let mut out = format!(
        "<span class=\"who\" title=\"{}\">{}@{} pid {}</span>",
        text(&h.to_string()),
        text(&h.user),
        text(&h.host),
        h.pid
    );
    if let Some(label) = &h.label {
        let label = text(label);
        let _ = write!(out, "<span class=\"label\" title=\"{label}\">{label}</span>");
    }
    out
}

/// What the server knows of contention: refused asks and live reservations.
fn contention_html(row: &LeaseRow) -> String {
    let mut h = String::from("<td class=\"contention\">");
    if row.waiters > 0 {
        let _ = write!(h, "<span>{} waiting</span>", row.waiters);
    }
    if row.busy > 0 {
        let _ = write!(h, "<span>{} refused asks</span>", row.busy);
    }
    if row.tentative > 0 {
        let _ = write!(h, "<span>{} reserved</span>", row.tentative);
    }
    if row.waiters == 0 && row.busy == 0 && row.tentative == 0 {
        h.push_str("no contention");
    }
    h.push_str("</td>");
    h
}

/// How the previous grant ended, how long ago, with the details in the title.
fn last_html(row: &LeaseRow, now_ms: u64) -> String {
    let Some(p) = &row.last else { return "<td class=\"last\"></td>".into() };
    let how = match p.how {
        tenure_core::EndedHow::Released => "released",
        tenure_core::EndedHow::Dropped => "dropped",
        tenure_core::EndedHow::Expired => "expired",
        tenure_core::EndedHow::Broken => "broken",
        tenure_core::EndedHow::Retaken => "retaken",
        tenure_core::EndedHow::Corrupt => "corrupt",
    };
    let mut title = format!("token {} {} at {}", p.token, p.how, utc(p.at_ms));
    if let Some(w) = row.watermark_ms {
        let _ = write!(title, ", watermark {}", utc(w));
    }
    format!("<td class=\"last\" title=\"{}\">{how} {} ago</td>", escape(&title), rel(now_ms.saturating_sub(p.at_ms)))
}

/// One lease's rows: one per holder shown, or one saying it is free.
fn html_rows(row: &LeaseRow, now_ms: u64) -> String {
    let mut h = String::new();
    let full = text(&row.name);
    let name = format!("<td class=\"name\" title=\"{full}\">{}</td>", full.replace('/', "/<wbr>"));
    let contention = contention_html(row);
    let last = last_html(row, now_ms);
    if row.holders.is_empty() {
        let _ = write!(
            h,
            "<tr class=\"free\">{name}<td colspan=\"2\">free</td><td class=\"num token\">{}</td>\
             <td></td><td></td>{contention}{last}</tr>",
            token_html(row.last_token),
        );
    }
    for v in row.holders.iter().take(HOLDERS_SHOWN) {
        let held = v.acquired_ms.map_or_else(String::new, |a| {
            format!("<span title=\"since {}\">held for {}</span>", utc(a), rel(now_ms.saturating_sub(a)))
        });
        let _ = write!(
            h,
            "<tr class=\"held\">{name}<td>{}</td><td class=\"holder\">{}</td>\
             <td class=\"num token\">{}</td><td>{held}</td><td title=\"deadline {}\">expires in {}</td>{contention}{last}</tr>",
            v.mode,
            holder_html(&v.holder),
            token_html(v.token),
            utc(v.deadline_ms),
            rel(v.expires_in_ms),
        );
    }
    if let Some(more) = row.holders.len().checked_sub(HOLDERS_SHOWN).filter(|n| *n > 0) {
        let _ = write!(h, "<tr class=\"held\">{name}<td colspan=\"7\">and {more} more holders</td></tr>");
    }
    h
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
    m.add("waiters", "gauge", "Acquisitions waiting in the lease queues now.", n(core.waiting()));
    m.add("waits_total", "counter", "Acquisitions that queued to wait for their lease.", load(&s.parked));
    m.add("handovers_total", "counter", "Grants handed to a queued waiter when the lease freed.", load(&s.handovers));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_times_are_whole_units_and_tokens_keep_six_digits() {
        let cases = [(0, "0s"), (41_900, "41s"), (192_000, "3m12s"), (180_000, "3m"), (7_200_000, "2h")];
        for (ms, want) in cases {
            assert_eq!(rel(ms), want, "{ms} ms");
        }
        assert_eq!(rel(7_500_000), "2h5m");
        assert_eq!(rel(3 * 86_400_000 + 4 * 3_600_000 + 59_000), "3d4h");
        assert_eq!(token_html(42), "<span class=\"tok\">42</span>");
        assert_eq!(token_html(1_795_486_094_000_123), "<span class=\"tok\" title=\"1795486094000123\">…000123</span>");
        assert_eq!(text("a<b>\u{1b}[31m"), "a&lt;b&gt;\\u{1b}[31m");
    }
}
