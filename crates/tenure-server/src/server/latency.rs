//! How long the server takes to decide each kind of request, as Prometheus
//! histograms (`tenure_request_duration_seconds{op=…}`): from its frame to its
//! answer, decoding, checks and the lease table included; witness signing (once
//! per batch) and the network are not. Within a batch, a request is timed from
//! the answer to the one before it, so each costs one clock read.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::wire::Request;

/// Upper bounds of the buckets, in µs: 10 µs to 100 ms, then `+Inf`.
const BOUNDS_US: [u64; 12] = [10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 100_000];

/// The kinds of request, as the `op` label names them.
const OPS: [&str; 8] = ["acquire", "renew", "release", "upgrade", "inspect", "list", "break", "ping"];

/// The `op` of a request (a hello is not timed).
pub(super) fn op(req: &Request<'_>) -> Option<usize> {
    Some(match req {
        Request::Acquire { .. } => 0,
        Request::Renew(_) => 1,
        Request::Release(_) => 2,
        Request::Upgrade(_) => 3,
        Request::Inspect(_) => 4,
        Request::List { .. } => 5,
        Request::Break { .. } => 6,
        Request::Ping => 7,
        // A wait's time is how long its lease stayed held, not the server's.
        Request::Hello { .. }
        | Request::Wait { .. }
        | Request::Unwait { .. }
        | Request::Waiters(_)
        | Request::Identify
        | Request::Servers(_) => return None,
    })
}

#[derive(Debug, Default)]
struct Histogram {
    /// Observations per bucket (not cumulative); the last one is `+Inf`.
    buckets: [AtomicU64; BOUNDS_US.len() + 1],
    sum_ns: AtomicU64,
}

/// One histogram per kind of request.
#[derive(Debug, Default)]
pub struct Latencies {
    ops: [Histogram; OPS.len()],
}

impl Latencies {
    /// Records that a request of kind `op` took `took`.
    pub(super) fn observe(&self, op: usize, took: Duration) {
        let Some(h) = self.ops.get(op) else { return };
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let bucket = BOUNDS_US.iter().position(|&b| us <= b).unwrap_or(BOUNDS_US.len());
        h.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        h.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The histograms in Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let name = "tenure_request_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time the server took to decide a request (checks and the lease table; \
             witness signing and the network excluded).\n# TYPE {name} histogram"
        );
        for (op, h) in OPS.iter().zip(&self.ops) {
            let mut cumulative = 0u64;
            for (i, bucket) in h.buckets.iter().enumerate() {
                cumulative = cumulative.saturating_add(bucket.load(Ordering::Relaxed));
                let le = BOUNDS_US.get(i).map_or_else(|| "+Inf".to_string(), |&us| format!("{}", us as f64 / 1e6));
                let _ = writeln!(out, "{name}_bucket{{op=\"{op}\",le=\"{le}\"}} {cumulative}");
            }
            let sum = h.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
            let _ = writeln!(out, "{name}_sum{{op=\"{op}\"}} {sum}\n{name}_count{{op=\"{op}\"}} {cumulative}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_cumulative_buckets_with_sum_and_count() {
        let l = Latencies::default();
        l.observe(0, Duration::from_micros(7));
        l.observe(0, Duration::from_micros(10));
        l.observe(0, Duration::from_micros(300));
        l.observe(0, Duration::from_secs(3));
        l.observe(99, Duration::from_secs(1));
        let mut out = String::new();
        l.render(&mut out);
        let line = |s: &str| out.lines().find(|l| l.starts_with(s)).unwrap_or_else(|| panic!("no {s} in\n{out}"));
        let value = |s: &str| line(s).rsplit_once(' ').map(|(_, v)| v.to_string()).expect("a value");
        assert_eq!(value("tenure_request_duration_seconds_bucket{op=\"acquire\",le=\"0.00001\"}"), "2");
        assert_eq!(value("tenure_request_duration_seconds_bucket{op=\"acquire\",le=\"0.00025\"}"), "2");
        assert_eq!(value("tenure_request_duration_seconds_bucket{op=\"acquire\",le=\"0.0005\"}"), "3");
        assert_eq!(value("tenure_request_duration_seconds_bucket{op=\"acquire\",le=\"0.1\"}"), "3");
        assert_eq!(value("tenure_request_duration_seconds_bucket{op=\"acquire\",le=\"+Inf\"}"), "4");
        assert_eq!(value("tenure_request_duration_seconds_count{op=\"acquire\"}"), "4");
        let sum: f64 = value("tenure_request_duration_seconds_sum{op=\"acquire\"}").parse().expect("sum");
        assert!((sum - 3.000317).abs() < 1e-9, "{sum}");
        assert_eq!(value("tenure_request_duration_seconds_count{op=\"renew\"}"), "0");
    }
}
