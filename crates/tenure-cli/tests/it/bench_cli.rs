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
