//! The status page's HTML: its style and refresh script, and each lease as
//! table rows (holders, tokens, relative times, contention). Every value from a
//! client is escaped here.

use std::fmt::Write as _;

use tenure_core::{human_duration, report};

use crate::leases::LeaseRow;

/// Most holders shown for one lease (the rest are counted).
pub const HOLDERS_SHOWN: usize = 16;

pub(super) fn escape(s: &str) -> String {
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

pub(super) fn ms(v: u64) -> String {
    human_duration(std::time::Duration::from_millis(v))
}

/// The page's style: the lease table has fixed column widths, so long names
/// wrap anywhere and long holders and labels end in an ellipsis (the whole
/// text is in their `title`) instead of widening the page; below 800 px the
/// cells wrap instead.
pub(super) const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1em;color:#222}\
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
pub(super) const LEASES_HEAD: &str = "<h2>Leases</h2><table id=\"leases\"><colgroup>\
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
pub(super) const SCRIPT: &str = r#"(function () {
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
pub(super) fn utc(ms: u64) -> String {
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
pub(super) fn html_rows(row: &LeaseRow, now_ms: u64) -> String {
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
