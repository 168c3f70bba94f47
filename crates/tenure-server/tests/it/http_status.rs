//! The HTTP side on loopback: the status page (also in a headless Chromium),
//! Prometheus metrics, the public key and the health endpoints.

use crate::common;

use common::abuse::http_get;

use std::sync::Arc;
use std::time::Duration;

use tenure_core::{AcquireRequest, Attempt, Holder, LeaseName, LeaseStore, ManualClock, Mode};

struct Site {
    _clock: ManualClock,
    _server: tenure_server::server::RunningServer,
    http: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
    token: u64,
}

impl Drop for Site {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves the HTTP side of `server` on a loopback port.
async fn serve_http(
    server: &tenure_server::server::RunningServer,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let http = listener.local_addr().expect("addr");
    let opts = tenure_server::http::HttpOptions::default();
    let task =
        tokio::spawn(tenure_server::http::serve(listener, server.shared().clone(), opts, std::future::pending()));
    (http, task)
}

/// A server holding `status/demo` for a holder whose label tries to inject markup.
async fn site() -> Site {
    site_with("status/demo", "<script>alert(1)</script> & co").await
}

/// A server holding `name` for a holder labelled `label`, and one ask refused.
async fn site_with(name: &str, label: &str) -> Site {
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let (http, task) = serve_http(&server).await;
    let store = common::store(&[&server], &clock);
    let holder = Arc::new(Holder::current().with_label(label));
    let req = AcquireRequest {
        name: LeaseName::new(name).expect("name"),
        mode: Mode::Exclusive,
        ttl: common::MAX_LEASE,
        holder,
        retake: false,
        meta: None,
    };
    let token = match store.try_acquire(&req).await.expect("acquire") {
        Attempt::Granted(g) => g.token,
        Attempt::Busy(_) => panic!("busy"),
    };
    let mut other = req.clone();
    other.holder = Arc::new(Holder::current());
    assert!(matches!(store.try_acquire(&other).await.expect("ask"), Attempt::Busy(_)));
    Site { _clock: clock, _server: server, http, task, token }
}

#[tokio::test]
async fn status_page_lists_live_leases_with_holders_tokens_and_contention_escaped() {
    let site = site().await;
    let (head, body) = http_get(site.http, "/").await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: text/html"), "{head}");
    assert!(body.contains("status/demo") && body.contains(&site.token.to_string()), "{body}");
    assert!(body.contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp; co"), "the label is shown, escaped");
    assert!(!body.contains("<script>"), "client-supplied text must never become markup");
    assert!(body.contains("busy (contention)"));
    // The page's own script is the only one, and it sets text, never markup.
    assert_eq!(body.matches("<script").count(), 1, "{body}");
    assert!(body.contains("<script id=\"live\">") && !body.contains("innerHTML"), "{body}");
    assert!(!body.contains("http-equiv=\"refresh\""), "no full reload: the script refreshes the rows");
    // Tokens: the last six digits, the full value in the title.
    let short = format!("<span class=\"tok\" title=\"{}\">…{:06}</span>", site.token, site.token % 1_000_000);
    assert!(body.contains(&short), "{short} in {body}");
    // The holder as user@host pid N, its label on a line of its own.
    let me = Holder::current();
    assert!(body.contains(&format!(">{}@{} pid {}</span>", me.user, me.host, me.pid)), "{body}");
    assert!(body.contains("class=\"label\" title=\"&lt;script&gt;"), "{body}");
    // Relative times, the UTC time in the title; contention named as such.
    assert!(body.contains("\">held for 0s</span>") && body.contains("title=\"since 20"), "{body}");
    assert!(body.contains(">expires in ") && body.contains("title=\"deadline 20"), "{body}");
    assert!(body.contains(">contention</th>") && body.contains("<span>1 refused asks</span>"), "{body}");
    assert!(!body.to_lowercase().contains("waiters</th>"), "the server keeps no waiter queue: {body}");
}

#[tokio::test]
async fn held_and_released_leases_read_as_relative_times_with_utc_titles() {
    let site = site().await;
    let store = common::store(&[&site._server], &site._clock);
    let me = Arc::new(Holder::current());
    let Attempt::Granted(g) = store.try_acquire(&common::req("status/done", &me)).await.expect("ask") else {
        panic!("busy")
    };
    site._clock.advance(Duration::from_millis(3_200));
    let (_, body) = http_get(site.http, "/").await;
    assert!(body.contains(">held for 3s</span>"), "{body}");
    store.release(&g, &tenure_core::ReleaseRequest::default()).await.expect("release");
    site._clock.advance(Duration::from_secs(2 * 3600 + 5 * 60));
    let (_, body) = http_get(site.http, "/").await;
    let row = body.split("<tr").find(|r| r.contains("status/<wbr>done")).expect("the released lease");
    assert!(row.contains(">released 2h5m ago</td>"), "{row}");
    assert!(row.contains(&format!("title=\"token {} released at 20", g.token)) && row.contains("Z\""), "{row}");
    // The JSON the script refreshes from carries the counters it updates.
    let (_, json) = http_get(site.http, "/status.json").await;
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(v["counters"]["releases"], 1, "{v}");
    assert_eq!(v["counters"]["busy"], 1, "{v}");
}

#[tokio::test]
async fn metrics_are_prometheus_text_with_grant_and_contention_counters() {
    let site = site().await;
    let (head, body) = http_get(site.http, "/metrics").await;
    assert!(head.contains("text/plain"), "{head}");
    let build_info = format!("tenure_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"));
    for line in [
        "tenure_grants_total 1",
        "tenure_busy_total 1",
        "tenure_leases_live 1",
        "# TYPE tenure_grants_total counter",
        "tenure_quarantine_remaining_seconds 0",
        "# TYPE tenure_build_info gauge",
        &build_info,
    ] {
        assert!(body.lines().any(|l| l == line), "missing {line:?} in\n{body}");
    }
    // Prometheus naming: counters end in `_total`, nothing is in milliseconds.
    for line in body.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let (name, kind) = line.split_once(' ').expect("# TYPE name kind");
        // The one standard process gauge, as etcd and client libraries name it.
        assert!(name.starts_with("tenure_") || name == "process_cpu_seconds_total", "{line}");
        assert_eq!(kind == "counter", name.ends_with("_total"), "counters, and only they, end in _total: {line}");
        assert!(!name.ends_with("_ms") && !name.contains("_millis"), "base units (seconds): {line}");
    }
    // The server's own CPU time: a number of seconds, more than none by now.
    let cpu = body.lines().find_map(|l| l.strip_prefix("process_cpu_seconds_total ")).expect("process CPU");
    assert!(cpu.parse::<f64>().is_ok_and(|s| s > 0.0 && s.is_finite()), "{cpu}");
    // Request latency, per kind of request: the two acquisitions above were timed.
    assert!(body.lines().any(|l| l == "# TYPE tenure_request_duration_seconds histogram"), "{body}");
    let sample = |series: &str| -> u64 {
        let line = body.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("no {series} in\n{body}"));
        line.rsplit_once(' ').and_then(|(_, v)| v.parse().ok()).expect("a count")
    };
    let acquires = sample("tenure_request_duration_seconds_count{op=\"acquire\"}");
    assert!(acquires >= 2, "{acquires}");
    assert_eq!(sample("tenure_request_duration_seconds_bucket{op=\"acquire\",le=\"+Inf\"}"), acquires);
    assert_eq!(sample("tenure_request_duration_seconds_count{op=\"break\"}"), 0);
    let (_, key) = http_get(site.http, "/pubkey").await;
    assert_eq!(key.trim().len(), 64, "{key}");
    let (_, json) = http_get(site.http, "/status.json").await;
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(v["leases"][0]["name"], "status/demo");
    assert_eq!(v["public_key"], key.trim());
    // The shape `tenure status --json` prints too (tenure_core::report), version 1.
    assert_eq!(v["schema_version"], 1, "{v}");
    assert!(v["now_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{v}");
    let lease = &v["leases"][0];
    assert_eq!(lease["state"], "held", "{lease}");
    let holder = &lease["holders"][0];
    for field in ["token", "ttl_ms", "acquired_ms", "held_for_ms", "deadline_ms", "expires_in_ms"] {
        assert!(holder[field].is_u64(), "{field} in {holder}");
    }
    for field in ["acquired_at", "deadline_at"] {
        assert!(holder[field].as_str().is_some_and(|t| t.len() == 24 && t.ends_with('Z')), "{field} in {holder}");
    }
    assert!(lease["modified_at"].is_string(), "{lease}");
}

#[tokio::test]
async fn healthz_and_readyz_answer_ok_on_a_server_that_grants() {
    let site = site().await;
    for path in ["/healthz", "/readyz"] {
        let (head, body) = http_get(site.http, path).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
        assert_eq!(body, "ok\n", "{path}");
    }
}

#[tokio::test]
async fn readyz_is_503_during_the_restart_quarantine_and_200_after_it() {
    let clock = ManualClock::new();
    let server =
        common::start(clock.shared(), tenure_server::CoreOptions::new(common::MAX_LEASE), Default::default()).await;
    let (http, task) = serve_http(&server).await;
    let (head, body) = http_get(http, "/readyz").await;
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    assert!(body.contains("restart quarantine") && body.contains("11s"), "the reason and the time left: {body}");
    let (head, body) = http_get(http, "/healthz").await;
    assert!(head.starts_with("HTTP/1.1 200") && body == "ok\n", "alive while not ready: {head}");
    let (_, metrics) = http_get(http, "/metrics").await;
    assert!(metrics.lines().any(|l| l == "tenure_quarantine_remaining_seconds 11"), "{metrics}");

    // The server refuses grants until the quarantine is over; readyz agrees.
    clock.advance(common::MAX_LEASE);
    let (head, body) = http_get(http, "/readyz").await;
    assert!(head.starts_with("HTTP/1.1 503") && body.contains("1s"), "{head}\n{body}");
    let store = common::store(&[&server], &clock);
    let me = std::sync::Arc::new(Holder::current());
    assert!(matches!(store.try_acquire(&common::req("q/x", &me)).await.expect("ask"), Attempt::Busy(_)));
    clock.advance(Duration::from_secs(1));
    let (head, body) = http_get(http, "/readyz").await;
    assert!(head.starts_with("HTTP/1.1 200") && body == "ok\n", "{head}\n{body}");
    assert!(matches!(store.try_acquire(&common::req("q/x", &me)).await.expect("ask"), Attempt::Granted(_)));
    task.abort();
}

/// Debian's `chromium`, if installed; `None` (the test is skipped, with a
/// reason) where it is not, unless `TENURE_REQUIRE_BROWSER=1`.
fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|b| std::process::Command::new(b).arg("--version").output().is_ok_and(|o| o.status.success()));
    if found.is_none() {
        if std::env::var("TENURE_REQUIRE_BROWSER").is_ok_and(|v| v == "1") {
            panic!("chromium is not installed but TENURE_REQUIRE_BROWSER=1 (apt-get install chromium)");
        }
        eprintln!("skipped: chromium is not installed (apt-get install chromium)");
    }
    found
}

/// Runs headless `chromium` with `args` in a fresh profile; asserts it exits 0.
async fn headless(chromium: &str, args: &[String]) -> String {
    let profile = tempfile::tempdir().expect("tempdir");
    let out = tokio::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .kill_on_drop(true)
        .output();
    let out =
        tokio::time::timeout(Duration::from_secs(120), out).await.expect("chromium finishes").expect("run chromium");
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Virtual time for the page's script to refresh the table at least once.
const SCRIPT_TIME: &str = "--virtual-time-budget=10000";

/// The page in a real browser engine, after its script refreshed the table
/// from `/status.json`.
#[tokio::test]
async fn status_page_renders_in_headless_chromium() {
    let Some(chromium) = chromium() else { return };
    let site = site().await;
    let dom = headless(chromium, &[SCRIPT_TIME.into(), "--dump-dom".into(), format!("http://{}/", site.http)]).await;
    assert!(dom.contains("<title>tenure lease server</title>"), "{dom}");
    assert!(dom.contains("<span id=\"refresh\">refreshed "), "the script replaced the rows: {dom}");
    let rows = dom.split("id=\"lease-rows\">").nth(1).expect("the table's body");
    assert!(rows.contains("status/<wbr>demo") && rows.contains(">held for 0s<"), "{rows}");
    assert!(rows.contains(&format!("title=\"{}\"", site.token)), "the token is rendered: {rows}");
    assert!(rows.contains(">1 refused asks<"), "{rows}");
    assert!(rows.contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp; co"), "the label, as text: {rows}");
    assert!(!dom.contains("<script>alert"), "the injected label stays text in the DOM");
}

/// Screenshots at the two widths operators use, in a temporary directory:
/// chromium draws them, at the size asked. What they show is looked at by a
/// person; this checks that they can be taken.
#[tokio::test]
async fn status_page_screenshots_at_1200_and_600_px() {
    let Some(chromium) = chromium() else { return };
    let site = site().await;
    let dir = tempfile::tempdir().expect("tempdir");
    for width in [1200u32, 600] {
        let png = dir.path().join(format!("status-{width}.png"));
        headless(
            chromium,
            &[
                SCRIPT_TIME.into(),
                format!("--window-size={width},800"),
                format!("--screenshot={}", png.display()),
                format!("http://{}/", site.http),
            ],
        )
        .await;
        let bytes = std::fs::read(&png).expect("the screenshot exists");
        assert!(bytes.len() > 1000 && bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG: {} bytes", bytes.len());
        let png_width = u32::from_be_bytes(bytes[16..20].try_into().expect("IHDR width"));
        assert_eq!(png_width, width, "drawn at the width asked");
    }
}

/// Serves `wrapper` at `/wrap` and passes every other connection through to
/// `backend`: the wrapper and the page share an origin, so the wrapper's
/// script may measure the page in an iframe.
async fn same_origin(
    backend: std::net::SocketAddr,
    wrapper: String,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let wrapper = wrapper.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 64 * 1024 {
                    match client.read(&mut byte).await {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                if head.starts_with(b"GET /wrap ") {
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\n\
                         Connection: close\r\n\r\n{wrapper}",
                        wrapper.len()
                    );
                    let _ = client.write_all(answer.as_bytes()).await;
                    return;
                }
                let Ok(mut server) = tokio::net::TcpStream::connect(backend).await else { return };
                if server.write_all(&head).await.is_ok() {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    (addr, task)
}

/// `name=<scrollWidth>/<clientWidth>` in the wrapper's report.
fn widths(report: &str, name: &str) -> (u32, u32) {
    let value = report.split_whitespace().find_map(|w| w.strip_prefix(name)?.strip_prefix('=')).expect(name);
    let (scroll, client) = value.split_once('/').expect("scroll/client");
    (scroll.parse().expect("scrollWidth"), client.parse().expect("clientWidth"))
}

/// A long lease name and a long label without spaces do not widen the page at
/// 1200 px nor at 600 px: the page, in an iframe of that width, is measured by
/// a same-origin wrapper once the page's script has refreshed its rows. A
/// control iframe with a 3000 px wide block shows the measurement sees overflow.
#[tokio::test]
async fn a_long_name_and_label_do_not_widen_the_page_at_1200_or_600_px() {
    let Some(chromium) = chromium() else { return };
    let name = format!("ci/{}", ["integration-tests-on-a-very-long-runner-name-without-spaces"; 4].join("/"));
    let label = format!("https://ci.example.com/jobs/{}", "x".repeat(220));
    let site = site_with(&name, &label).await;
    for width in [1200u32, 600] {
        let wrapper = format!(
            r##"<!doctype html><html><body style="margin:0">
<iframe id="page" src="/" style="width:{width}px;height:800px;border:0"></iframe>
<iframe id="control" srcdoc="<div style='width:3000px'>wide</div>" style="width:{width}px;height:50px;border:0"></iframe>
<pre id="report">pending</pre>
<script>
function measure(f) {{ var d = f.contentDocument.documentElement; return d.scrollWidth + "/" + d.clientWidth; }}
var tries = 0;
function poll() {{
  var f = document.getElementById("page"), doc = f.contentDocument, r = doc && doc.getElementById("refresh");
  if ((!r || r.textContent.indexOf("refreshed") !== 0) && ++tries < 100) {{ setTimeout(poll, 200); return; }}
  document.getElementById("report").textContent = "page=" + measure(f) +
    " control=" + measure(document.getElementById("control")) +
    " rows=" + doc.querySelectorAll("#lease-rows tr").length + " refresh=" + (r ? r.textContent.split(" ")[0] : "none");
}}
setTimeout(poll, 200);
</script></body></html>"##
        );
        let (proxy, task) = same_origin(site.http, wrapper).await;
        let dom = headless(
            chromium,
            &[
                SCRIPT_TIME.into(),
                "--window-size=1400,1000".into(),
                "--dump-dom".into(),
                format!("http://{proxy}/wrap"),
            ],
        )
        .await;
        task.abort();
        let report = dom.split("<pre id=\"report\">").nth(1).and_then(|r| r.split('<').next()).expect("a report");
        eprintln!("{width} px: {report}");
        assert!(report.contains("rows=1 refresh=refreshed"), "measured after the script ran: {report}");
        let (scroll, client) = widths(report, "page");
        assert!(client <= width && client + 20 >= width, "the page had the viewport asked: {report}");
        assert!(scroll <= client, "no horizontal overflow at {width} px: {report}");
        let (scroll, client) = widths(report, "control");
        assert!(scroll > client, "the measurement sees overflow where there is some: {report}");
    }
}

/// The refresh keeps the reader's place: a page of 80 leases in a 400 px high
/// iframe, scrolled down, is still scrolled to the same place after the script
/// replaced the rows twice.
#[tokio::test]
async fn refreshing_the_rows_keeps_the_scroll_position() {
    let Some(chromium) = chromium() else { return };
    let site = site().await;
    let store = common::store(&[&site._server], &site._clock);
    let me = Arc::new(Holder::current());
    for i in 0..80 {
        let granted = store.try_acquire(&common::req(&format!("scroll/{i:03}"), &me)).await.expect("ask");
        assert!(matches!(granted, Attempt::Granted(_)));
    }
    let wrapper = r##"<!doctype html><html><body style="margin:0">
<iframe id="page" src="/" style="width:1200px;height:400px;border:0"></iframe>
<pre id="report">pending</pre>
<script>
var f = document.getElementById("page"), count = 0, first = null, before = -1, polls = 0;
function poll() {
  var d = f.contentDocument, body = d && d.getElementById("lease-rows");
  if (body && before < 0) { f.contentWindow.scrollTo(0, 900); before = f.contentWindow.scrollY; first = body.firstChild; }
  if (body && body.firstChild !== first) { count += 1; first = body.firstChild; }
  if (count < 2 && ++polls < 150) { setTimeout(poll, 100); return; }
  document.getElementById("report").textContent = "before=" + before + " after=" + f.contentWindow.scrollY +
    " rows=" + d.querySelectorAll("#lease-rows tr").length + " refreshes=" + count;
}
f.onload = function () { setTimeout(poll, 50); };
</script></body></html>"##;
    let (proxy, task) = same_origin(site.http, wrapper.to_string()).await;
    let args = ["--virtual-time-budget=20000".into(), "--dump-dom".into(), format!("http://{proxy}/wrap")];
    let dom = headless(chromium, &args).await;
    task.abort();
    let report = dom.split("<pre id=\"report\">").nth(1).and_then(|r| r.split('<').next()).expect("a report");
    eprintln!("{report}");
    assert!(report.contains("rows=81 refreshes=2"), "two refreshes of every row: {report}");
    assert!(report.starts_with("before=900 after=900 "), "scrolled, and still there: {report}");
}
