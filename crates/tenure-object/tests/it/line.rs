//! The wait line on object stores, beyond the conformance suite: the entry of
//! a waiter that crashed lapses, judged by watching it unchanged or by the
//! store's own time, and is removed; it never blocks the line for good.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::Server;
use tenure_conformance::{MAX_SKEW, cas_options};
use tenure_core::cas::ENTRY_TTL;
use tenure_core::{AcquireRequest, Attempt, CasStore, Clock, Holder, LeaseName, LeaseStore, ManualClock, Mode};
use tenure_object::object_store::path::Path;
use tenure_object::object_store::{ObjectStoreExt, PutPayload};
use tenure_object::{LINE_DIR, ObjectBackend};

/// How long an entry may go unwritten before it lapses: `ENTRY_TTL` plus the
/// line's margin.
const QUIET: Duration = Duration::from_secs(8);

fn request(holder: &str) -> AcquireRequest {
    AcquireRequest {
        name: LeaseName::new("l").expect("name"),
        mode: Mode::Exclusive,
        ttl: Duration::from_secs(10),
        holder: Arc::new(Holder::current().with_nonce(holder)),
        retake: false,
        meta: None,
    }
}

/// The entry of an exclusive waiter, first in the line of "l", that entered
/// and crashed (it is never written again).
async fn plant_crashed_waiter(backend: &ObjectBackend) -> Path {
    let path = Path::parse(format!("{}/l/{LINE_DIR}/00000000000000000000-x-64656164", backend.prefix())).expect("path");
    backend.object_store().put(&path, PutPayload::from_static(b"crashed")).await.expect("plant");
    path
}

async fn exists(backend: &ObjectBackend, path: &Path) -> bool {
    backend.object_store().head(path).await.is_ok()
}

/// A waiter whose clock cannot judge the entry's age (a day behind the store)
/// waits behind it until it has watched it unchanged for `QUIET`, then takes
/// the lease and removes the entry.
async fn a_crashed_waiters_entry_lapses_once_watched_unchanged(server: Server) {
    assert!(ENTRY_TTL < QUIET);
    let url = server.url();
    let backend = common::trusted_backend(&server, &url).await;
    let crashed = plant_crashed_waiter(&backend).await;
    let clock = ManualClock::starting_at(tenure_core::SystemClock::new().wall_ms() - 86_400_000);
    let store = Arc::new(CasStore::new(common::trusted_backend(&server, &url).await, clock.shared(), cas_options()));
    let line = store.waiters("l").await.expect("the line");
    assert_eq!(line.iter().map(|w| w.nonce.as_str()).collect::<Vec<_>>(), ["dead"], "the planted entry is a waiter");
    let waiter = tokio::spawn({
        let store = store.clone();
        async move { store.acquire_queued(&request("alive"), Duration::from_secs(600)).await }
    });
    // Watched for less than QUIET: it still waits behind the entry.
    let step = Duration::from_millis(100);
    let mut watched = Duration::ZERO;
    while watched + step < QUIET - Duration::from_secs(1) {
        clock.advance(step);
        watched += step;
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(!waiter.is_finished(), "granted past a waiter ahead after watching it for {watched:?}");
    }
    for _ in 0..2000 {
        if waiter.is_finished() {
            break;
        }
        clock.advance(step);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    match waiter.await.expect("join") {
        Some(Ok(Attempt::Granted(_))) => {}
        other => panic!("expected the lease once the crashed entry lapsed, got {other:?}"),
    }
    assert!(!exists(&backend, &crashed).await, "the crashed waiter's entry is removed");
}

/// A waiter whose clock agrees with the store's (within the skew bound) takes
/// an entry the store last wrote more than `QUIET` plus `max_skew` ago for a
/// crashed waiter's at first sight.
async fn a_crashed_waiters_entry_lapses_by_the_stores_time(server: Server) {
    let url = server.url();
    let backend = common::trusted_backend(&server, &url).await;
    let crashed = plant_crashed_waiter(&backend).await;
    // Later than the entry's Last-Modified by more than QUIET + max_skew, with
    // two seconds to spare for its whole seconds.
    let later = ManualClock::new().skewed((QUIET + MAX_SKEW + Duration::from_secs(2)).as_millis() as i64);
    let store = CasStore::new(common::trusted_backend(&server, &url).await, later.shared(), cas_options());
    assert!(store.waiters("l").await.expect("the line").is_empty(), "a lapsed entry is no waiter");
    match store.acquire_queued(&request("alive"), Duration::from_secs(600)).await {
        Some(Ok(Attempt::Granted(_))) => {}
        other => panic!("expected the lease at once, got {other:?}"),
    }
    assert!(!exists(&backend, &crashed).await, "the crashed waiter's entry is removed");
}

macro_rules! per_server {
    ($($server:ident),*) => {
        $(
            mod $server {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn a_crashed_waiters_entry_lapses_once_watched_unchanged() {
                    if let Some(s) = super::common::$server() {
                        super::a_crashed_waiters_entry_lapses_once_watched_unchanged(s).await;
                    }
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn a_crashed_waiters_entry_lapses_by_the_stores_time() {
                    if let Some(s) = super::common::$server() {
                        super::a_crashed_waiters_entry_lapses_by_the_stores_time(s).await;
                    }
                }
            }
        )*
    };
}

per_server!(moto, rgw, azurite, gcs);
