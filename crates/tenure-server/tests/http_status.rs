//! The HTTP side on loopback: the status page (also in a headless Chromium),
//! Prometheus metrics, the public key and the health endpoints.

mod common;

use common::abuse::http_get;

use std::sync::Arc;
use std::time::Duration;

use tenure::{AcquireRequest, Attempt, Holder, LeaseName, LeaseStore, ManualClock, Mode};

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
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let (http, task) = serve_http(&server).await;
    let store = common::store(&[&server], &clock);
    let holder = Arc::new(Holder::current().with_label("<script>alert(1)</script> & co"));
    let req = AcquireRequest {
        name: LeaseName::new("status/demo").expect("name"),
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
        assert!(name.starts_with("tenure_"), "{line}");
        assert_eq!(kind == "counter", name.ends_with("_total"), "counters, and only they, end in _total: {line}");
        assert!(!name.ends_with("_ms") && !name.contains("_millis"), "base units (seconds): {line}");
    }
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
    // The shape `tenure status --json` prints too (tenure::report), version 1.
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

/// The page in a real browser engine: Debian's `chromium`, headless. Skipped (with
/// a reason) where it is not installed, unless `TENURE_REQUIRE_BROWSER=1`.
#[tokio::test]
async fn status_page_renders_in_headless_chromium() {
    let Some(chromium) = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|b| std::process::Command::new(b).arg("--version").output().is_ok_and(|o| o.status.success()))
    else {
        if std::env::var("TENURE_REQUIRE_BROWSER").is_ok_and(|v| v == "1") {
            panic!("chromium is not installed but TENURE_REQUIRE_BROWSER=1 (apt-get install chromium)");
        }
        eprintln!("skipped: chromium is not installed (apt-get install chromium)");
        return;
    };
    let site = site().await;
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
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("http://{}/", site.http))
        .kill_on_drop(true)
        .output();
    let out =
        tokio::time::timeout(Duration::from_secs(120), out).await.expect("chromium finishes").expect("run chromium");
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(dom.contains("<title>tenure lease server</title>"), "{dom}");
    assert!(dom.contains("id=\"leases\"") && dom.contains("status/demo"), "{dom}");
    assert!(dom.contains(&site.token.to_string()), "the token is rendered: {dom}");
    assert!(!dom.contains("<script>alert"), "the injected label stays text in the DOM");
}
