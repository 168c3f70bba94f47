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
//! `tenure_core::cas`), and the write carries the hint `d = ttl + max_skew`. So before
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
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use tenure_core::Result;
use tokio::time::Instant;

/// The requests the pool makes, sent by the backend (with its timeouts, resends
/// and error messages).
#[async_trait]
pub(crate) trait LeaseRpc: Sync {
    /// One `LeaseKeepAlive` exchange for lease `id`: `Ok(false)` if etcd says the
    /// lease does not exist (any more).
    async fn keep_alive(&self, id: i64) -> Result<bool>;
    /// One `LeaseGrant` of `ttl_secs`: the new lease's id and granted TTL.
    async fn grant(&self, ttl_secs: u64) -> Result<(i64, Duration)>;
    /// The error for an answer that came too late to leave the lease long enough.
    fn too_slow(&self, op: &str, left: Duration, needed: Duration) -> tenure_core::Error;
}

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

/// TTL in whole seconds of the class lease for expiry hint `d`: `1.5 × d`,
/// rounded up, at least 2 s.
pub(crate) fn class_ttl_secs(d: Duration) -> u64 {
    let ms = d.as_millis().saturating_mul(3) / 2;
    u64::try_from(ms.div_ceil(1000)).unwrap_or(u64::MAX).max(2)
}

impl LeasePool {
    fn slot(&self, class: u64) -> Arc<tokio::sync::Mutex<Option<Slot>>> {
        let mut classes = self.classes.lock();
        classes.entry(class).or_default().clone()
    }

    /// The id of an etcd lease that lives at least `d` from now, granting or
    /// refreshing one if needed. Concurrent callers of one class share one
    /// refresh.
    pub(crate) async fn lease_for(&self, rpc: &dyn LeaseRpc, d: Duration) -> Result<i64> {
        let class = class_ttl_secs(d);
        let slot = self.slot(class);
        let mut slot = slot.lock().await;
        if let Some(s) = *slot {
            if s.alive_until >= Instant::now() + d {
                return Ok(s.id);
            }
            let sent = Instant::now();
            if rpc.keep_alive(s.id).await? {
                let fresh = Slot { alive_until: sent + s.ttl, ..s };
                return checked(rpc, &mut slot, fresh, d, "refreshing our etcd lease");
            }
            // Any record still attached to it is gone; a fresh lease is needed.
            tracing::info!(lease = s.id, "our etcd lease expired; granting a new one");
            *slot = None;
        }
        let sent = Instant::now();
        let (id, ttl) = rpc.grant(class).await?;
        checked(rpc, &mut slot, Slot { id, ttl, alive_until: sent + ttl }, d, "granting an etcd lease")
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
fn checked(rpc: &dyn LeaseRpc, slot: &mut Option<Slot>, fresh: Slot, d: Duration, op: &str) -> Result<i64> {
    *slot = Some(fresh);
    let left = fresh.alive_until.saturating_duration_since(Instant::now());
    if left < d {
        return Err(rpc.too_slow(op, left, d));
    }
    Ok(fresh.id)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};

    use super::*;

    /// A fake etcd: counts requests; leases live while `alive` says so.
    #[derive(Default)]
    struct Fake {
        grants: AtomicU32,
        keep_alives: AtomicU32,
        next_id: AtomicI64,
        gone: AtomicBool,
    }

    #[async_trait]
    impl LeaseRpc for Fake {
        async fn keep_alive(&self, _id: i64) -> Result<bool> {
            self.keep_alives.fetch_add(1, Ordering::SeqCst);
            Ok(!self.gone.swap(false, Ordering::SeqCst))
        }
        async fn grant(&self, ttl_secs: u64) -> Result<(i64, Duration)> {
            self.grants.fetch_add(1, Ordering::SeqCst);
            Ok((self.next_id.fetch_add(1, Ordering::SeqCst) + 1, Duration::from_secs(ttl_secs)))
        }
        fn too_slow(&self, op: &str, left: Duration, _: Duration) -> tenure_core::Error {
            tenure_core::Error::store("fake", op, format!("{left:?} left"))
        }
    }

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

    #[tokio::test(start_paused = true)]
    async fn a_lease_is_refreshed_only_when_it_could_not_outlive_the_next_write() {
        let (pool, etcd) = (LeasePool::default(), Fake::default());
        let d = Duration::from_secs(10); // class TTL 15 s
        let id = pool.lease_for(&etcd, d).await.expect("grant");
        for _ in 0..5 {
            tokio::time::advance(Duration::from_secs(1)).await;
            assert_eq!(pool.lease_for(&etcd, d).await.expect("reuse"), id);
        }
        assert_eq!((etcd.grants.load(Ordering::SeqCst), etcd.keep_alives.load(Ordering::SeqCst)), (1, 0));
        // 15 s TTL − 5 s elapsed = 10 s left: one more second and it falls short.
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(pool.lease_for(&etcd, d).await.expect("refresh"), id);
        assert_eq!((etcd.grants.load(Ordering::SeqCst), etcd.keep_alives.load(Ordering::SeqCst)), (1, 1));
        // Another class gets a lease of its own.
        assert_ne!(pool.lease_for(&etcd, Duration::from_secs(2)).await.expect("grant"), id);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_etcd_no_longer_knows_is_replaced_by_a_fresh_grant() {
        let (pool, etcd) = (LeasePool::default(), Fake::default());
        let d = Duration::from_secs(4);
        let first = pool.lease_for(&etcd, d).await.expect("grant");
        tokio::time::advance(Duration::from_secs(3)).await;
        etcd.gone.store(true, Ordering::SeqCst);
        let second = pool.lease_for(&etcd, d).await.expect("grant again");
        assert_ne!(first, second);
        pool.forget(d, second).await;
        assert_ne!(pool.lease_for(&etcd, d).await.expect("grant after forget"), second);
        assert_eq!(etcd.grants.load(Ordering::SeqCst), 3);
    }
}
