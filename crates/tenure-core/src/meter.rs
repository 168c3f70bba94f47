//! The client's metrics, recorded through the [`metrics`] facade: written once
//! here, for every store. Nothing is exported by tenure itself; a program that
//! installs a recorder (`metrics-exporter-prometheus`, say) gets them, and
//! one that does not pays for a few calls that do nothing. The names, types,
//! units and labels are listed in `docs/metrics.md`.
//!
//! Labels are bounded: `store` is the store's kind (its URL's scheme, never
//! the URL, which may hold secrets and is unbounded), `mode` is `exclusive` or
//! `shared`, and a loss's `reason` is one of three words.

use std::time::Duration;

use metrics::{counter, histogram};

use crate::types::{LossReason, Mode};

/// Time from asking for a lease to holding it (histogram, seconds).
pub const WAIT_SECONDS: &str = "tenure_lease_wait_seconds";
/// Time from holding a lease to its end: released, dropped or lost (histogram, seconds).
pub const HOLD_SECONDS: &str = "tenure_lease_hold_seconds";
/// Successful renewals of a grant (counter).
pub const RENEWALS_TOTAL: &str = "tenure_lease_renewals_total";
/// Time one renewal took, answered or not (histogram, seconds).
pub const RENEWAL_SECONDS: &str = "tenure_lease_renewal_seconds";
/// Held leases lost, by `reason` (counter).
pub const LOST_TOTAL: &str = "tenure_lease_lost_total";
/// Busy answers: an attempt found the lease held by someone else (counter).
pub const BUSY_TOTAL: &str = "tenure_lease_busy_total";
/// Acquisitions that returned a held lease (counter).
pub const ACQUIRED_TOTAL: &str = "tenure_lease_acquired_total";

/// The store's kind, from its URL: `file`, `s3`, `gs`, `az`, `tenure`, `etcd`,
/// `memory`, or `other`. A URL without a scheme is a directory.
pub fn store_kind(url: &str) -> &'static str {
    const KINDS: [(&str, &str); 12] = [
        ("file", "file"),
        ("s3", "s3"),
        ("s3a", "s3"),
        ("gs", "gs"),
        ("gcs", "gs"),
        ("az", "az"),
        ("azure", "az"),
        ("abfs", "az"),
        ("abfss", "az"),
        ("tenure", "tenure"),
        ("etcd", "etcd"),
        ("memory", "memory"),
    ];
    // No allocation: this runs for every busy answer of a wait.
    match crate::store_url::scheme(url) {
        None => "file",
        Some(scheme) => KINDS.iter().find(|(s, _)| s.eq_ignore_ascii_case(scheme)).map_or("other", |(_, kind)| kind),
    }
}

fn mode(mode: Mode) -> &'static str {
    match mode {
        Mode::Exclusive => "exclusive",
        Mode::Shared => "shared",
    }
}

/// The labels every lease metric carries, fixed when a lease is asked for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Labels {
    store: &'static str,
    mode: &'static str,
}

impl Labels {
    pub(crate) fn new(url: &str, m: Mode) -> Self {
        Self { store: store_kind(url), mode: mode(m) }
    }

    pub(crate) fn acquired(self, waited: Duration) {
        counter!(ACQUIRED_TOTAL, "store" => self.store, "mode" => self.mode).increment(1);
        histogram!(WAIT_SECONDS, "store" => self.store, "mode" => self.mode).record(waited.as_secs_f64());
    }

    pub(crate) fn busy(self) {
        counter!(BUSY_TOTAL, "store" => self.store, "mode" => self.mode).increment(1);
    }

    /// A renewal attempt that took `took`; `renewed` grants were renewed by it.
    pub(crate) fn renewal(self, took: Duration, renewed: u64) {
        histogram!(RENEWAL_SECONDS, "store" => self.store, "mode" => self.mode).record(took.as_secs_f64());
        if renewed > 0 {
            counter!(RENEWALS_TOTAL, "store" => self.store, "mode" => self.mode).increment(renewed);
        }
    }

    pub(crate) fn lost(self, reason: &LossReason) {
        let reason = match reason {
            LossReason::Outage { .. } => "outage",
            LossReason::Stolen { .. } => "stolen",
            LossReason::Expired => "expired",
            // Not a loss: the holder let it go.
            LossReason::Released => return,
        };
        counter!(LOST_TOTAL, "store" => self.store, "mode" => self.mode, "reason" => reason).increment(1);
    }

    pub(crate) fn held(self, held: Duration) {
        histogram!(HOLD_SECONDS, "store" => self.store, "mode" => self.mode).record(held.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::store_kind;

    #[test]
    fn the_store_label_is_the_kind_never_the_url() {
        for (url, kind) in [
            ("/var/lib/locks", "file"),
            ("./locks", "file"),
            ("file:///mnt/nfs/locks", "file"),
            ("s3://bucket/prefix?aws_secret_access_key=x", "s3"),
            ("gs://b/p", "gs"),
            ("az://c/p", "az"),
            ("tenure://h:7777,h2:7777?tls=true", "tenure"),
            ("etcd://user:pw@h:2379/p", "etcd"),
            ("memory://", "memory"),
            ("flaky://", "other"),
            ("S3://b/p", "s3"),
        ] {
            assert_eq!(store_kind(url), kind, "{url}");
        }
    }
}
