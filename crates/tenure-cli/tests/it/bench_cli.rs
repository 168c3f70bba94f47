//! `tenure bench` as a process: what it reports is possible, and arguments
//! that measure nothing are usage errors.
#![cfg(feature = "bench")]

use crate::common;

use std::time::Duration;

use common::*;

/// Each client holds the lease for `--hold`, so at most one hand-over fits
/// in each `--hold` of the measured window: the clients still queued when it
/// ends are not counted (nor held up: the run ends on time).
#[test]
fn handover_rate_is_at_most_one_per_hold() {
    let store = FileStore::new();
    std::fs::create_dir_all(store.path("d")).expect("dir");
    let flock = format!("flock://{}", store.path("d").display());
    for (target, hold_ms, clients) in [(flock.as_str(), 100u64, "8"), ("memory://", 200, "16")] {
        let hold = format!("{hold_ms}ms");
        let started = std::time::Instant::now();
        let out = run(
            tenure()
                .args(["bench", "--op", "handover", "--json", "--seconds", "2", "--hold", &hold, "--clients", clients])
                .args(["--target", target]),
            Duration::from_secs(120),
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let line = stdout(&out).lines().last().unwrap_or_default().to_string();
        let v: serde_json::Value = serde_json::from_str(&line).expect("json");
        let rate = v["cycles_per_sec"].as_f64().expect("rate");
        let retakes = v["retakes"]["per_sec"].as_f64().unwrap_or(0.0);
        let max = 1000.0 / hold_ms as f64;
        // Every hold is a hand-over or a re-take (flock lets a releaser take its
        // lock back before a waiter wakes), and holds do not overlap: one more
        // than fits may start at the edge of the 2 s window.
        let holds = rate + retakes;
        assert!(holds <= max + 0.5, "{target}: {holds} holds/s reported, at most {max}/s possible: {line}");
        assert!(rate > 0.0, "{target}: no hand-over reported in 2 s: {line}");
        // Warm-up (0.4 s), 2 s measured, and the queue passing the lease on at once.
        assert!(started.elapsed() < Duration::from_secs(30), "{target}: the run took {:?}", started.elapsed());
    }
}

#[test]
fn zero_clients_or_seconds_is_a_usage_error() {
    let store = FileStore::new();
    for extra in [&["--clients", "0", "--seconds", "1"][..], &["--clients", "2", "--seconds", "0"]] {
        let out = run(
            tenure().args(["bench", "--op", "handover", "--target", &store.url()]).args(extra),
            Duration::from_secs(60),
        );
        assert_eq!(out.status.code(), Some(64), "{extra:?}: {}", stderr(&out));
    }
}

/// A `tenure serve` with its status page, killed when dropped.
#[cfg(feature = "server")]
struct Serve {
    child: std::process::Child,
    addr: String,
    http: String,
}

#[cfg(feature = "server")]
impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(feature = "server")]
fn serve() -> Serve {
    use std::io::{BufRead, BufReader};
    let mut child = tenure()
        .args(["serve", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--max-lease", "2s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start tenure serve");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let (mut addr, mut http) = (None, None);
    while addr.is_none() || http.is_none() {
        let line = lines.next().expect("tenure serve exited early").expect("read stdout");
        if let Some(a) = line.strip_prefix("tenure serve: listening on tenure://") {
            addr = Some(a.to_string());
        }
        if let Some(h) = line.strip_prefix("tenure serve: status page on ") {
            http = Some(h.trim_end_matches('/').to_string());
        }
    }
    std::thread::spawn(move || lines.for_each(drop));
    Serve { child, addr: addr.unwrap_or_default(), http: http.unwrap_or_default() }
}

/// With `--server-metrics`, a `tenure://` line carries the server's CPU per
/// cycle, read from its `/metrics`, and the bench's own; without it, only the
/// bench's. (Quantities, not speeds: the server did work for the cycles.)
#[cfg(feature = "server")]
#[test]
fn server_cpu_per_cycle_comes_from_the_servers_metrics() {
    let server = serve();
    let target = format!("tenure://{}", server.addr);
    let metrics = format!("{}/metrics", server.http);
    // The restart quarantine (2 s here) refuses grants: wait it out.
    let ready = eventually(Duration::from_secs(20), || {
        run(tenure().args(["lock", &target, "probe", "--ttl", "2s", "--", "true"]), Duration::from_secs(20))
            .status
            .success()
    });
    assert!(ready, "the server never granted");
    for (with_metrics, expect_server) in [(true, true), (false, false)] {
        let mut cmd = tenure();
        cmd.args(["bench", "--json", "--seconds", "1", "--ttl", "2s", "--clients", "2", "--target", &target]);
        if with_metrics {
            cmd.args(["--server-metrics", &metrics]);
        }
        let out = run(&mut cmd, Duration::from_secs(60));
        assert!(out.status.success(), "{}", stderr(&out));
        let line = stdout(&out).lines().last().unwrap_or_default().to_string();
        let v: serde_json::Value = serde_json::from_str(&line).expect("json");
        let server_us = v["cpu"]["server_us"].as_f64();
        assert_eq!(server_us.is_some(), expect_server, "{line}");
        assert!(server_us.is_none_or(|us| us > 0.0 && us.is_finite()), "{line}");
        assert!(v["cpu"]["bench_us"].as_f64().is_some_and(|us| us > 0.0 && us.is_finite()), "{line}");
    }
}

#[test]
fn a_metrics_url_that_is_not_plain_http_is_a_usage_error() {
    for url in ["https://127.0.0.1:1/metrics", "127.0.0.1:1/metrics", "http:///metrics"] {
        let out = run(
            tenure().args(["bench", "--target", "memory://", "--seconds", "1", "--server-metrics", url]),
            Duration::from_secs(60),
        );
        assert_eq!(out.status.code(), Some(64), "{url}: {}", stderr(&out));
    }
}

/// Hand-over runs measure a loopback round trip in the same run and give each
/// target's gap as a multiple of it.
#[test]
fn handovers_are_compared_with_a_loopback_round_trip() {
    let out = run(
        tenure()
            .args(["bench", "--op", "handover", "--json", "--seconds", "1", "--hold", "0ms", "--clients", "4"])
            .args(["--target", "memory://"]),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> =
        stdout(&out).lines().map(|l| serde_json::from_str(l).expect("json line")).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0]["target"].as_str().is_some_and(|t| t.starts_with("loopback TCP round trip")), "{lines:?}");
    assert!(lines[0]["p50_us"].as_f64().is_some_and(|us| us >= 1.0), "{lines:?}");
    if lines[1]["p50_us"].as_f64().is_some_and(f64::is_finite) {
        assert!(lines[1]["gap_rtt_ratio"].as_f64().is_some_and(|r| r > 0.0 && r.is_finite()), "{lines:?}");
    }
}
