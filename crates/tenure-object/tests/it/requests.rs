//! What each lease operation costs in requests, counted on real servers: the
//! figures in the crate docs' table, against the simple GCS lock's
//! (`docs/design/object-store-lock.md`).

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::Server;
use tenure_conformance::cas_options;
use tenure_core::{AcquireRequest, Attempt, CasStore, Grant, Holder, LeaseName, LeaseStore, ManualClock, Mode};
use tenure_object::{ObjectBackend, Probe, Provider, RequestCounts, probe};

const TTL: Duration = Duration::from_secs(10);

fn request(name: &str, holder: &Arc<Holder>) -> AcquireRequest {
    AcquireRequest {
        name: LeaseName::new(name).expect("name"),
        mode: Mode::Exclusive,
        ttl: TTL,
        holder: holder.clone(),
        retake: false,
        meta: None,
    }
}

/// One process's view: its backend (for the counters) and its lease store.
struct Handle {
    backend: Arc<ObjectBackend>,
    store: CasStore,
    holder: Arc<Holder>,
}

impl Handle {
    async fn new(server: &Server, url: &str, clock: &ManualClock) -> Self {
        let backend = common::trusted_backend(server, url).await;
        let store = CasStore::new(backend.clone(), clock.shared(), cas_options());
        Self { backend, store, holder: Arc::new(Holder::current()) }
    }

    /// Runs `op` and returns what it sent.
    async fn counting<T>(&self, op: impl std::future::Future<Output = T>) -> (T, RequestCounts) {
        let before = self.backend.requests();
        let out = op.await;
        (out, self.backend.requests() - before)
    }

    async fn try_acquire(&self, name: &str) -> (Attempt, RequestCounts) {
        let (a, n) = self.counting(self.store.try_acquire(&request(name, &self.holder))).await;
        (a.expect("try_acquire"), n)
    }
}

fn granted(a: Attempt) -> Grant {
    match a {
        Attempt::Granted(g) => g,
        Attempt::Busy(b) => panic!("expected a grant, the lease is held by {}", b.describe()),
    }
}

const fn counts(get: u64, get_not_modified: u64, put_create: u64, put_update: u64) -> RequestCounts {
    RequestCounts { get, get_not_modified, put_create, put_update, delete: 0, list: 0 }
}

async fn lease_operations_cost_the_documented_requests(server: Server) {
    let url = server.url();
    let clock = ManualClock::new();
    let a = Handle::new(&server, &url, &clock).await;
    let b = Handle::new(&server, &url, &clock).await;

    let (first, n) = a.try_acquire("l").await;
    let g = granted(first);
    assert_eq!(n, counts(1, 0, 1, 0), "acquiring a lease never used before: GET (404) + PUT If-None-Match");

    let (renewed, n) = a.counting(a.store.renew(&g)).await;
    let g = renewed.expect("renew");
    assert_eq!(n, counts(0, 0, 0, 1), "renewing: one PUT If-Match, no read");

    let (busy, n) = b.try_acquire("l").await;
    assert!(matches!(busy, Attempt::Busy(_)));
    assert_eq!(n, counts(1, 0, 0, 0), "a contender's first poll: one GET");
    // GCS answers 304 by ETag (the content's MD5) but versions are generations:
    // conditional GETs are not used there.
    let not_modified = u64::from(a.backend.provider() != Provider::Gcs);
    let (busy, n) = b.try_acquire("l").await;
    assert!(matches!(busy, Attempt::Busy(_)));
    assert_eq!(
        n,
        counts(1, not_modified, 0, 0),
        "a contender's next poll of an unchanged record: one GET answered 304"
    );

    let (released, n) = a.counting(a.store.release(&g, &Default::default())).await;
    released.expect("release");
    assert_eq!(n, counts(0, 0, 0, 1), "releasing: one PUT If-Match; the record is kept");

    let (again, n) = a.try_acquire("l").await;
    let g = granted(again);
    assert_eq!(n, counts(0, 0, 0, 1), "re-acquiring after our own release: the PUT If-Match validates our copy");
    a.store.release(&g, &Default::default()).await.expect("release");

    let (taken, n) = b.try_acquire("l").await;
    let g = granted(taken);
    assert_eq!(n, counts(1, 0, 0, 1), "acquiring a lease someone else released: GET + PUT If-Match");

    // `a` wrote the record last, then `b` took it: `a` tries its own copy once.
    let (busy, n) = a.try_acquire("l").await;
    assert!(matches!(busy, Attempt::Busy(_)));
    assert_eq!(n, counts(1, 0, 0, 1), "after writing it last: a PUT If-Match rejected, then a GET");
    let (busy, n) = a.try_acquire("l").await;
    assert!(matches!(busy, Attempt::Busy(_)));
    assert_eq!(n, counts(1, not_modified, 0, 0), "then polls cost one GET each, its stale copy dropped");

    // b "crashes" holding it; a fresh contender takes over once the deadline is
    // past the skew bound.
    clock.advance(TTL + cas_options().max_skew + Duration::from_millis(1));
    let c = Handle::new(&server, &url, &clock).await;
    let (taken, n) = c.try_acquire("l").await;
    assert!(granted(taken).token > g.token);
    assert_eq!(n, counts(1, 0, 0, 1), "taking over an expired lease: GET + PUT If-Match");
}

/// What the wait line costs: a free lease reads no line; a reader that would
/// join readers lists it once (to stay behind a waiting writer); a waiter
/// enters with a LIST and a PUT If-None-Match and leaves with a DELETE.
async fn the_wait_line_costs_a_free_lease_nothing(server: Server) {
    let url = server.url();
    let clock = ManualClock::new();
    let (a, b, c) = (
        Handle::new(&server, &url, &clock).await,
        Handle::new(&server, &url, &clock).await,
        Handle::new(&server, &url, &clock).await,
    );
    let shared = |h: &Handle| AcquireRequest { mode: Mode::Shared, ..request("l", &h.holder) };
    let (first, n) = a.counting(a.store.try_acquire(&shared(&a))).await;
    granted(first.expect("try_acquire"));
    assert_eq!(n, counts(1, 0, 1, 0), "a free lease: GET + PUT, no listing");
    let (second, n) = b.counting(b.store.try_acquire(&shared(&b))).await;
    granted(second.expect("try_acquire"));
    assert_eq!(n, RequestCounts { list: 1, ..counts(1, 0, 0, 1) }, "a reader joining a reader: one LIST more");
    let (waited, n) = c.counting(c.store.acquire_queued(&request("l", &c.holder), Duration::ZERO)).await;
    assert!(matches!(waited, Some(Ok(Attempt::Busy(_)))), "{waited:?}");
    assert_eq!(
        n,
        RequestCounts { list: 1, delete: 1, ..counts(1, 0, 1, 0) },
        "a wait of no time: LIST + PUT If-None-Match to enter, DELETE to leave, GET to say who holds it"
    );
}

async fn probe_costs_six_requests_and_leaves_nothing_behind(server: Server) {
    let url = server.url();
    let backend = common::trusted_backend(&server, &url).await;
    let outcome = probe(&backend).await.expect("a conforming store passes the probe");
    assert!(matches!(outcome, Probe::Enforced { conditional_get: true, .. }), "{outcome:?}");
    let n = backend.requests();
    assert_eq!(
        n,
        RequestCounts { get: 1, get_not_modified: 0, put_create: 2, put_update: 2, delete: 1, list: 0 },
        "{n}"
    );
    let left = common::objects(&backend).await;
    assert!(left.is_empty(), "the probe object must be deleted, found {left:?}");
}

/// What a slot costs (`tenure_core::slots`): an uncontended acquire takes the
/// gate, slot 0, and releases the gate — three lease operations.
async fn an_uncontended_slot_costs_three_lease_operations(server: Server) {
    let url = server.url();
    let clock = ManualClock::new();
    let a = Handle::new(&server, &url, &clock).await;
    let client = tenure_core::Client::new(Arc::new(CasStore::new(a.backend.clone(), clock.shared(), cas_options())));
    let opts = tenure_core::LeaseOptions::exclusive().with_ttl(TTL).with_slots(4).no_wait();
    let (lease, first) = a.counting(client.acquire("s", &opts)).await;
    let lease = lease.expect("a free slot");
    let (released, release) = a.counting(lease.release()).await;
    released.expect("release");
    let (lease, again) = a.counting(client.acquire("s", &opts)).await;
    lease.expect("a free slot again").release().await.expect("release");
    assert_eq!(
        first,
        counts(2, 0, 2, 1),
        "first use: the gate and slot 0 created (GET + PUT If-None-Match each), the gate released"
    );
    assert_eq!(release, counts(0, 0, 0, 1), "releasing a slot: one PUT If-Match, as any lease");
    assert_eq!(
        again,
        counts(0, 0, 0, 3),
        "again by the writer of both records: a PUT If-Match each validates its copy"
    );
}

macro_rules! per_server {
    ($($server:ident),*) => {
        $(
            mod $server {
                #[tokio::test]
                async fn lease_operations_cost_the_documented_requests() {
                    if let Some(s) = super::common::$server() {
                        super::lease_operations_cost_the_documented_requests(s).await;
                    }
                }
                #[tokio::test]
                async fn the_wait_line_costs_a_free_lease_nothing() {
                    if let Some(s) = super::common::$server() {
                        super::the_wait_line_costs_a_free_lease_nothing(s).await;
                    }
                }
                #[tokio::test]
                async fn an_uncontended_slot_costs_three_lease_operations() {
                    if let Some(s) = super::common::$server() {
                        super::an_uncontended_slot_costs_three_lease_operations(s).await;
                    }
                }
                #[tokio::test]
                async fn probe_costs_six_requests_and_leaves_nothing_behind() {
                    if let Some(s) = super::common::$server() {
                        super::probe_costs_six_requests_and_leaves_nothing_behind(s).await;
                    }
                }
            }
        )*
    };
}

per_server!(moto, rgw, azurite, gcs);
