//! The etcd leases that lease records are attached to.
//!
//! Like etcd's own `concurrency.Session`, a backend does not grant one etcd lease
//! per tenure grant: it keeps one etcd lease per *TTL class* (the record's
//! expiry hint, rounded up) and attaches every record it writes with that hint
//! to it. A crashed process stops refreshing its etcd leases, etcd expires them
//! on its own clock and deletes every record attached: nobody else's clock is
//! involved.
//!
//! # The one safety rule
//!
//! etcd must never delete a record before its holder's own deadline. A holder's
//! deadline is `sent + ttl`, where `sent` is when it sent the write (see
//! `tenure::cas`), and the write carries the hint `d = ttl + max_skew`. So before
//! a write with hint `d` is sent, the etcd lease it attaches to must be known to
//! live at least until `now + d`: [`LeasePool::lease_for`] checks that against a
//! lower bound of the lease's expiry (the moment we *sent* its last grant or
//! keep-alive, plus its TTL, on the local monotonic clock) and refreshes the
//! lease first when it falls short. etcd only ever extends a lease's expiry
//! (a new leader restarts every lease's TTL), so the bound stays true.
//!
//! # Cost
//!
//! A class lease has a TTL of `1.5 × d` (at least 2 s, etcd's minimum). It is
//! refreshed lazily, by the writes that need it: one `LeaseKeepAlive` exchange
//! once every `d / 2` or so, on an otherwise ordinary write. There is no
//! background task: a process that stops writing lets its etcd leases lapse,
//! and its records disappear between `d` and `1.5 × d` after its last write.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::Client;
use tokio::time::Instant;

/// An etcd lease, and how long it is known to live.
#[derive(Debug, Clone, Copy)]
struct Slot {
    id: i64,
    ttl: Duration,
    /// A lower bound of the lease's expiry on our monotonic clock.
    alive_until: Instant,
}

/// The class leases of one backend.
#[derive(Debug, Default)]
pub(crate) struct LeasePool {
    classes: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<Option<Slot>>>>>,
}

/// What went wrong while getting a lease: which request, and why.
#[derive(Debug)]
pub(crate) struct LeaseError {
    pub(crate) op: &'static str,
    pub(crate) source: LeaseFailure,
}

/// Why a lease could not be had.
#[derive(Debug)]
pub(crate) enum LeaseFailure {
    /// The request failed.
    Etcd(etcd_client::Error),
    /// The answer came too late to leave the lease `d` to live.
    TooSlow(Duration),
}

/// TTL in whole seconds of the class lease for expiry hint `d`: `1.5 × d`,
/// rounded up, at least 2 s.
pub(crate) fn class_ttl_secs(d: Duration) -> u64 {
    let ms = d.as_millis().saturating_mul(3) / 2;
    (ms.div_ceil(1000) as u64).max(2)
}

impl LeasePool {
    fn slot(&self, class: u64) -> Arc<tokio::sync::Mutex<Option<Slot>>> {
        let mut classes = self.classes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        classes.entry(class).or_default().clone()
    }

    /// The id of an etcd lease that lives at least `d` from now, granting or
    /// refreshing one if needed. Concurrent callers of one class share one
    /// refresh.
    pub(crate) async fn lease_for(&self, client: &Client, d: Duration) -> Result<i64, LeaseError> {
        let class = class_ttl_secs(d);
        let slot = self.slot(class);
        let mut slot = slot.lock().await;
        if let Some(s) = *slot {
            if s.alive_until >= Instant::now() + d {
                return Ok(s.id);
            }
            let op = "refreshing our etcd lease (LeaseKeepAlive)";
            let sent = Instant::now();
            match client.lease_client().keep_alive(s.id).await {
                // The stream is dropped here: one exchange is all we need.
                Ok(_) => return checked(&mut slot, Slot { alive_until: sent + s.ttl, ..s }, d, op),
                // etcd-client reports a lease that no longer exists this way; any
                // record still attached to it is gone, and a fresh lease is needed.
                Err(etcd_client::Error::LeaseKeepAliveError(e)) => {
                    tracing::info!(lease = s.id, error = %e, "our etcd lease is gone; granting a new one");
                    *slot = None;
                }
                Err(e) => return Err(LeaseError { op, source: LeaseFailure::Etcd(e) }),
            }
        }
        let op = "granting an etcd lease (LeaseGrant)";
        let sent = Instant::now();
        let granted = client
            .lease_client()
            .grant(class as i64, None)
            .await
            .map_err(|e| LeaseError { op, source: LeaseFailure::Etcd(e) })?;
        let ttl = Duration::from_secs(u64::try_from(granted.ttl()).unwrap_or(0));
        checked(&mut slot, Slot { id: granted.id(), ttl, alive_until: sent + ttl }, d, op)
    }

    /// Forgets lease `id` (etcd said it does not exist), so the next write grants
    /// a new one.
    pub(crate) async fn forget(&self, d: Duration, id: i64) {
        let slot = self.slot(class_ttl_secs(d));
        let mut slot = slot.lock().await;
        if slot.is_some_and(|s| s.id == id) {
            *slot = None;
        }
    }
}

/// Keeps `fresh` and returns its id if it lives at least `d` from now.
fn checked(slot: &mut Option<Slot>, fresh: Slot, d: Duration, op: &'static str) -> Result<i64, LeaseError> {
    *slot = Some(fresh);
    let left = fresh.alive_until.saturating_duration_since(Instant::now());
    if left < d {
        return Err(LeaseError { op, source: LeaseFailure::TooSlow(left) });
    }
    Ok(fresh.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_leases_outlive_the_hint_by_half_and_respect_etcds_minimum() {
        assert_eq!(class_ttl_secs(Duration::from_millis(2_500)), 4);
        assert_eq!(class_ttl_secs(Duration::from_secs(32)), 48);
        assert_eq!(class_ttl_secs(Duration::from_millis(10)), 2);
        for ms in [1, 999, 1_000, 1_001, 2_500, 60_000, 3_600_000] {
            let d = Duration::from_millis(ms);
            assert!(Duration::from_secs(class_ttl_secs(d)) >= d + d / 2, "{d:?}");
        }
    }
}
