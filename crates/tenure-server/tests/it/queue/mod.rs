//! Waiting on the server: waiters queue per lease and are granted in order the
//! moment the lease frees; a waiter that leaves is skipped; a holder re-taking
//! its own grant overtakes nobody. Real sockets, a manual clock (expiries
//! happen when the test moves it). Grants whose waiter never took them are in
//! [`given_back`]; the helpers here serve it too.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use tenure_core::{AcquireRequest, Attempt, Clock, EndedHow, Holder, LeaseStore, ManualClock, Mode, ReleaseRequest};
use tenure_server::TenureStore;
use tenure_server::server::RunningServer;

mod given_back;

/// Long enough that no wait in these tests ends by itself.
const WAIT: Duration = Duration::from_secs(600);

fn holder(label: &str) -> Arc<Holder> {
    Arc::new(Holder::current().with_label(label))
}

fn parked(server: &RunningServer) -> u64 {
    server.shared().core.stats().parked.load(std::sync::atomic::Ordering::Relaxed)
}

/// Waits (in real time) until the server has queued `n` waits in all.
async fn until_parked(server: &RunningServer, n: u64) {
    for _ in 0..500 {
        if parked(server) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the server queued {} waits, not {n}", parked(server));
}

/// Takes a free lease, or fails the test.
async fn taken(store: &TenureStore, req: &AcquireRequest) -> tenure_core::Grant {
    match store.try_acquire(req).await.expect("acquire") {
        Attempt::Granted(g) => g,
        Attempt::Busy(b) => panic!("busy: {}", b.describe()),
    }
}

fn granted(a: Option<tenure_core::Result<Attempt>>) -> tenure_core::Grant {
    match a.expect("the server keeps a queue").expect("wait") {
        Attempt::Granted(g) => g,
        Attempt::Busy(b) => panic!("busy: {}", b.describe()),
    }
}

/// A raw connection to `server`, past its hello: for frames a client would
/// not send, or not at that moment.
async fn raw(server: &RunningServer) -> tokio::net::TcpStream {
    use tenure_server::wire::Response;
    let mut s = tokio::net::TcpStream::connect(server.addr()).await.expect("connect");
    let hello = common::abuse::exchange(&mut s, &common::abuse::hello(), 1).await.pop();
    assert!(matches!(hello, Some(Response::Hello { .. })), "{hello:?}");
    s
}

/// An exclusive ask for `name` by `h`, for a raw frame.
fn ask<'a>(name: &'a str, ttl_ms: u64, h: &'a Holder) -> tenure_server::wire::AskWire<'a> {
    use tenure_server::wire::{AskWire, HolderWire};
    AskWire { name, mode: Mode::Exclusive, ttl_ms, holder: HolderWire::of(h), retake: false, meta: None }
}

/// Whether `name` can be taken within 5 s (real time; the manual clock never
/// moves, so only a release frees it). The grant that shows it is kept.
async fn free_within_5s(store: &TenureStore, name: &str) -> bool {
    for _ in 0..500 {
        match store.try_acquire(&common::req(name, &holder("next"))).await.expect("acquire") {
            Attempt::Granted(_) => return true,
            Attempt::Busy(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    false
}

/// Starts a waiter on its own connection; it sends its label once granted.
fn waiter(
    server: &RunningServer,
    clock: &ManualClock,
    req: AcquireRequest,
    order: tokio::sync::mpsc::UnboundedSender<(String, tenure_core::Grant)>,
) -> tokio::task::JoinHandle<Arc<TenureStore>> {
    let store = Arc::new(common::store(&[server], clock));
    tokio::spawn(async move {
        let g = granted(store.acquire_queued(&req, WAIT).await);
        let _ = order.send((req.holder.label.clone().unwrap_or_default(), g));
        store
    })
}

#[tokio::test]
async fn waiters_are_granted_in_the_order_they_queued() {
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let store = common::store(&[&server], &clock);
    let first = taken(&store, &common::req("q", &holder("first"))).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..6 {
        tasks.push(waiter(&server, &clock, common::req("q", &holder(&format!("w{i}"))), tx.clone()));
        until_parked(&server, i + 1).await;
    }
    // The queue's length, as `tenure status` asks for it (protocol 4).
    let q = tenure_core::LeaseName::new("q").expect("name");
    assert_eq!(store.waiting(&q).await.expect("count"), Some(6));
    // Each is granted when the one before releases, and nobody else meanwhile.
    let mut last = first;
    for i in 0..6 {
        store.release(&last, &ReleaseRequest::default()).await.expect("release");
        let (label, g) =
            tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("a grant").expect("open");
        assert_eq!(label, format!("w{i}"), "grants out of order");
        assert!(g.token > last.token, "tokens grow: {} then {}", last.token, g.token);
        assert_eq!(g.predecessor.as_ref().map(|p| p.how), Some(EndedHow::Released));
        assert_eq!(store.waiting(&q).await.expect("count"), Some(5 - i), "the granted waiter left the queue");
        last = g;
    }
    for t in tasks {
        t.await.expect("waiter");
    }
}

/// Two waiters of one identity that both may re-take (two processes sharing
/// a `--holder-id`, or a client that does not take turns) are woken by one
/// release: the first is granted, and the second does not end that fresh
/// grant as its own abandoned one, then or when the queue is served again
/// (another's ask, its own timer). It waits for the next release.
#[tokio::test]
async fn one_release_does_not_grant_one_identity_twice() {
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let store = common::store(&[&server], &clock);
    let first = taken(&store, &common::req("twin", &holder("first"))).await;
    let twin = holder("twin");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..2 {
        let mut req = common::req("twin", &twin);
        req.retake = true;
        tasks.push(waiter(&server, &clock, req, tx.clone()));
        until_parked(&server, i + 1).await;
    }
    store.release(&first, &ReleaseRequest::default()).await.expect("release");
    let (_, one) = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("a grant").expect("open");
    assert_eq!(one.predecessor.as_ref().map(|p| p.how), Some(EndedHow::Released));
    if let Ok(Some((_, other))) = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await {
        panic!("one release granted one identity twice: tokens {} and {}", one.token, other.token);
    }
    // The queue is served again: by another's ask, and by the waiter's timer.
    assert!(matches!(store.try_acquire(&common::req("twin", &holder("third"))).await.expect("ask"), Attempt::Busy(_)));
    clock.advance(Duration::from_secs(2));
    if let Ok(Some((_, other))) = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await {
        panic!("the second twin ended the first's fresh grant: tokens {} and {}", one.token, other.token);
    }
    store.release(&one, &ReleaseRequest::default()).await.expect("the first grant still stands");
    let (_, other) = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("a grant").expect("open");
    assert!(other.token > one.token);
    assert_eq!(other.predecessor.as_ref().map(|p| p.how), Some(EndedHow::Released));
    for t in tasks {
        t.await.expect("waiter");
    }
}

#[tokio::test]
async fn a_newcomer_does_not_overtake_a_queued_waiter() {
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let store = common::store(&[&server], &clock);
    let mut shared = common::req("rw", &holder("reader"));
    shared.mode = Mode::Shared;
    let reader = taken(&store, &shared).await;
    // A writer queues behind the reader...
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let writer = waiter(&server, &clock, common::req("rw", &holder("writer")), tx.clone());
    until_parked(&server, 1).await;
    // ...and a second reader, who could share the lease, does not get past it.
    let mut late = common::req("rw", &holder("late reader"));
    late.mode = Mode::Shared;
    match store.try_acquire(&late).await.expect("ask") {
        Attempt::Busy(_) => {}
        Attempt::Granted(g) => panic!("a reader overtook a queued writer (token {})", g.token),
    }
    store.release(&reader, &ReleaseRequest::default()).await.expect("release");
    let (label, _) = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("a grant").expect("open");
    assert_eq!(label, "writer");
    writer.await.expect("writer");
}

#[tokio::test]
async fn a_waiter_whose_connection_closed_is_skipped() {
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let store = common::store(&[&server], &clock);
    let held = taken(&store, &common::req("gone", &holder("holder"))).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // The first waiter's process dies: task and connection go at once.
    let dead = waiter(&server, &clock, common::req("gone", &holder("dead")), tx.clone());
    until_parked(&server, 1).await;
    dead.abort();
    let _ = dead.await;
    // One that gives up but keeps its connection withdraws its wait.
    let quitter_store = common::store(&[&server], &clock);
    let quitter = common::req("gone", &holder("quitter"));
    let gave_up = tokio::time::timeout(Duration::from_millis(300), quitter_store.acquire_queued(&quitter, WAIT)).await;
    assert!(gave_up.is_err(), "the lease is held: the wait must not end");
    let alive = waiter(&server, &clock, common::req("gone", &holder("alive")), tx.clone());
    until_parked(&server, 3).await;
    store.release(&held, &ReleaseRequest::default()).await.expect("release");
    let (label, g) = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("a grant").expect("open");
    assert_eq!(label, "alive", "the lease went to a waiter that left");
    let state = store.inspect(&g.name).await.expect("inspect");
    assert_eq!(state.holders.len(), 1);
    assert_eq!(state.holders[0].holder.label.as_deref(), Some("alive"));
    drop(quitter_store);
    alive.await.expect("alive");
}

#[tokio::test]
async fn an_expired_grant_passes_to_the_first_waiter_when_its_time_is_up() {
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let store = common::store(&[&server], &clock);
    let mut crashed = common::req("expiry", &holder("crashed"));
    crashed.ttl = Duration::from_secs(2);
    let held = taken(&store, &crashed).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let next = waiter(&server, &clock, common::req("expiry", &holder("next")), tx);
    until_parked(&server, 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(rx.try_recv().is_err(), "granted while the grant was live");
    clock.advance(Duration::from_secs(3));
    let (label, g) = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("a grant").expect("open");
    assert_eq!(label, "next");
    let p = g.predecessor.expect("predecessor");
    assert_eq!((p.token, p.how), (held.token, EndedHow::Expired));
    next.await.expect("next");
}

#[tokio::test]
async fn a_wait_that_runs_out_answers_busy_and_leaves_the_queue() {
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let store = common::store(&[&server], &clock);
    let held = taken(&store, &common::req("short", &holder("holder"))).await;
    let waiting = {
        let store = Arc::new(common::store(&[&server], &clock));
        let req = common::req("short", &holder("impatient"));
        tokio::spawn(async move { store.acquire_queued(&req, Duration::from_secs(1)).await })
    };
    until_parked(&server, 1).await;
    clock.advance(Duration::from_secs(2));
    match tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("answered").expect("task") {
        Some(Ok(Attempt::Busy(b))) => assert_eq!(b.holders[0].token, held.token, "{}", b.describe()),
        other => panic!("expected busy, got {other:?}"),
    }
    // Gone from the queue: a newcomer gets the lease once it is released.
    store.release(&held, &ReleaseRequest::default()).await.expect("release");
    match store.try_acquire(&common::req("short", &holder("later"))).await.expect("acquire") {
        Attempt::Granted(_) => {}
        Attempt::Busy(b) => panic!("a waiter that ran out still blocks: {}", b.describe()),
    }
}

#[tokio::test]
async fn the_client_waits_in_the_queue_and_is_handed_the_lease() {
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let holder_client =
        tenure_core::Client::with_holder(Arc::new(common::store(&[&server], &clock)), Holder::current());
    let opts = tenure_core::LeaseOptions::exclusive().with_ttl(common::MAX_LEASE).with_timeout(WAIT);
    let lease = holder_client.acquire("client", &opts).await.expect("acquire");
    let waiting = {
        let client = tenure_core::Client::new(Arc::new(common::store(&[&server], &clock)));
        let opts = opts.clone();
        tokio::spawn(async move { client.acquire("client", &opts).await.map(|l| l.token()) })
    };
    until_parked(&server, 1).await;
    let token = lease.token();
    lease.release().await.expect("release");
    let next = tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("granted").expect("task");
    assert!(next.expect("lease") > token);
    // Handed over, not polled: on this manual clock a polling waiter's
    // backoff would never end, and it queued exactly once.
    assert_eq!(parked(&server), 1);
}

#[tokio::test]
async fn a_version_2_client_is_spoken_to_in_version_2_and_cannot_queue() {
    use common::abuse::{exchange, frame, last_words};
    use tenure_server::wire::{AskWire, ErrorCode, HolderWire, MAGIC, Request, Response};
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let mut s = tokio::net::TcpStream::connect(server.addr()).await.expect("connect");
    let hello = frame(1, &Request::Hello { magic: MAGIC, version: 2, auth: None });
    match exchange(&mut s, &hello, 1).await.pop() {
        Some(Response::Hello { version: 2, .. }) => {}
        other => panic!("expected a version 2 hello, got {other:?}"),
    }
    let h = Holder::current();
    let ask = AskWire {
        name: "v2",
        mode: Mode::Exclusive,
        ttl_ms: 1000,
        holder: HolderWire::of(&h),
        retake: false,
        meta: None,
    };
    let wait = frame(2, &Request::Wait { ask, wait_ms: 1000 });
    tokio::io::AsyncWriteExt::write_all(&mut s, &wait).await.expect("write");
    match last_words(&mut s).await.pop() {
        Some(Response::Error { code: ErrorCode::Protocol, message }) => {
            assert!(message.contains("protocol 3"), "{message}")
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
}

#[tokio::test]
async fn waiters_show_on_the_status_json_and_in_the_metrics() {
    use common::abuse::http_get;
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let http = listener.local_addr().expect("addr");
    let opts = tenure_server::http::HttpOptions::default();
    let site =
        tokio::spawn(tenure_server::http::serve(listener, server.shared().clone(), opts, std::future::pending()));
    let store = common::store(&[&server], &clock);
    let held = taken(&store, &common::req("seen", &holder("holder"))).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let a = waiter(&server, &clock, common::req("seen", &holder("a")), tx.clone());
    let b = waiter(&server, &clock, common::req("seen", &holder("b")), tx);
    until_parked(&server, 2).await;
    let (_, json) = http_get(http, "/status.json").await;
    let json: serde_json::Value = serde_json::from_str(&json).expect("json");
    let row = json["leases"].as_array().expect("leases").iter().find(|l| l["name"] == "seen").expect("row");
    assert_eq!(row["waiters"], 2, "{row}");
    let (_, metrics) = http_get(http, "/metrics").await;
    assert!(metrics.lines().any(|l| l == "tenure_waiters 2"), "{metrics}");
    assert!(metrics.lines().any(|l| l == "tenure_waits_total 2"), "{metrics}");
    store.release(&held, &ReleaseRequest::default()).await.expect("release");
    let (_, first) = rx.recv().await.expect("a grant");
    store.release(&first, &ReleaseRequest::default()).await.expect("release");
    rx.recv().await.expect("a grant");
    let (_, metrics) = http_get(http, "/metrics").await;
    assert!(metrics.lines().any(|l| l == "tenure_waiters 0"), "{metrics}");
    assert!(metrics.lines().any(|l| l == "tenure_handovers_total 2"), "{metrics}");
    a.await.expect("a");
    b.await.expect("b");
    site.abort();
}

#[tokio::test]
async fn a_grant_after_a_long_wait_counts_its_ttl_from_the_grant_not_the_wait() {
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let store = common::store(&[&server], &clock);
    let held = taken(&store, &common::req("long", &holder("holder"))).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut short = common::req("long", &holder("short ttl"));
    short.ttl = Duration::from_secs(2);
    let next = waiter(&server, &clock, short, tx);
    until_parked(&server, 1).await;
    // Three times the waiter's TTL passes before the lease frees.
    clock.advance(Duration::from_secs(6));
    store.release(&held, &ReleaseRequest::default()).await.expect("release");
    let (_, g) = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("a grant").expect("open");
    let left = g.local_deadline.saturating_since(clock.mono());
    assert!(left > Duration::from_secs(1), "the grant is usable for its TTL, not already over: {left:?} left");
    next.await.expect("next");
}

#[tokio::test]
async fn an_absurd_wait_or_an_unknown_unwait_is_refused_and_the_connection_serves_on() {
    use common::abuse::{exchange, frame};
    use tenure_server::wire::{ErrorCode, Request, Response};
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let mut s = raw(&server).await;
    let h = Holder::current();
    let asks = [
        (frame(2, &Request::Wait { ask: ask("absurd", 1000, &h), wait_ms: u64::MAX }), ErrorCode::Invalid, "wait_ms"),
        (frame(3, &Request::Wait { ask: ask("absurd", u64::MAX, &h), wait_ms: 1000 }), ErrorCode::Invalid, "ttl_ms"),
        (frame(4, &Request::Unwait { id: 77 }), ErrorCode::Nothing, "77"),
    ];
    for (bytes, want, field) in asks {
        match exchange(&mut s, &bytes, 1).await.pop() {
            Some(Response::Error { code, message }) => {
                assert_eq!(code, want, "{message}");
                assert!(message.contains(field), "{message:?} should name {field}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    assert_eq!(parked(&server), 0, "nothing was queued");
    assert!(matches!(exchange(&mut s, &frame(5, &Request::Ping), 1).await.pop(), Some(Response::Pong)));
}

/// A hundred callers of one process wait on one connection: every one of
/// them queues (none falls back to polling, where a queue that is never
/// empty would refuse it), and each is granted in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_waits_on_one_connection_all_queue_and_are_served() {
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let store = common::store(&[&server], &clock);
    let held = taken(&store, &common::req("crowded", &holder("holder"))).await;
    let waiters = Arc::new(common::store(&[&server], &clock));
    let mut tasks = Vec::new();
    for i in 0..100 {
        let (waiters, req) = (waiters.clone(), common::req("crowded", &holder(&format!("w{i}"))));
        tasks.push(tokio::spawn(async move {
            let g = granted(waiters.acquire_queued(&req, WAIT).await);
            waiters.release(&g, &ReleaseRequest::default()).await.expect("release");
        }));
    }
    until_parked(&server, 100).await;
    assert_eq!(server.shared().core.waiters(&tenure_core::LeaseName::new("crowded").expect("name")), 100);
    store.release(&held, &ReleaseRequest::default()).await.expect("release");
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t).await.expect("served").expect("waiter");
    }
}

/// A holder re-taking its own live grant (a restarted job with the same
/// holder id) gets it at once, also while others wait: they wait for that
/// grant anyway, so it overtakes nobody. Someone else is still refused.
#[tokio::test]
async fn a_holder_retakes_its_own_grant_at_once_while_others_wait() {
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let store = common::store(&[&server], &clock);
    let me = holder("restarted job");
    let held = taken(&store, &common::req("retake", &me)).await;
    let (tx, mut order) = tokio::sync::mpsc::unbounded_channel();
    let _waiting = waiter(&server, &clock, common::req("retake", &holder("other")), tx);
    until_parked(&server, 1).await;
    let mut again = common::req("retake", &me);
    again.retake = true;
    let retaken = taken(&store, &again).await;
    assert!(retaken.token > held.token);
    let newcomer = store.try_acquire(&common::req("retake", &holder("newcomer"))).await.expect("ask");
    assert!(matches!(newcomer, Attempt::Busy(_)), "a newcomer overtook the waiter");
    store.release(&retaken, &ReleaseRequest::default()).await.expect("release");
    let (label, g) = tokio::time::timeout(Duration::from_secs(5), order.recv()).await.expect("in time").expect("one");
    assert_eq!(label, "other");
    assert!(g.token > retaken.token);
}

/// A holder that re-takes its exclusive grant as shared lets the shared
/// waiters at the head of the queue in with it at once: they need not wait
/// for the queue's next look at the lease.
#[tokio::test]
async fn a_retake_from_exclusive_to_shared_lets_the_waiting_readers_in() {
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let store = common::store(&[&server], &clock);
    let me = holder("writer turned reader");
    let held = taken(&store, &common::req("down", &me)).await;
    let (tx, mut order) = tokio::sync::mpsc::unbounded_channel();
    let mut reader = common::req("down", &holder("reader"));
    reader.mode = Mode::Shared;
    let _waiting = waiter(&server, &clock, reader, tx);
    until_parked(&server, 1).await;
    let mut again = common::req("down", &me);
    again.retake = true;
    again.mode = Mode::Shared;
    let retaken = taken(&store, &again).await;
    assert!(retaken.token > held.token);
    // The queue looks again by itself after a second (real time): well
    // before that, the reader holds the lease beside the re-taker.
    let (label, g) =
        tokio::time::timeout(Duration::from_millis(500), order.recv()).await.expect("served at once").expect("one");
    assert_eq!(label, "reader");
    assert_eq!(g.mode, Mode::Shared);
}

/// The same through a reservation: a holder of the exclusive grant that
/// reserves the lease shared and upgrades lets the shared waiters in at once.
#[tokio::test]
async fn an_upgrade_from_exclusive_to_shared_lets_the_waiting_readers_in() {
    use tenure_server::Upgrade;
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let store = common::store(&[&server], &clock);
    let me = holder("writer turned reader");
    let _held = taken(&store, &common::req("down2", &me)).await;
    let mut again = common::req("down2", &me);
    again.retake = true;
    again.mode = Mode::Shared;
    let reservation = match store.try_acquire_tentative_all(std::slice::from_ref(&again)).await.expect("reserve") {
        tenure_core::AllAttempt::Granted(mut gs) => gs.pop().expect("one"),
        tenure_core::AllAttempt::Busy(b) => panic!("busy: {}", b.describe()),
    };
    let (tx, mut order) = tokio::sync::mpsc::unbounded_channel();
    let mut reader = common::req("down2", &holder("reader"));
    reader.mode = Mode::Shared;
    let _waiting = waiter(&server, &clock, reader, tx);
    until_parked(&server, 1).await;
    match store.upgrade_all(std::slice::from_ref(&reservation)).await.expect("upgrade") {
        Upgrade::Upgraded(gs) => assert_eq!(gs[0].mode, Mode::Shared),
        Upgrade::Broken { .. } => panic!("the holder's own reservation was broken"),
    }
    let (label, g) =
        tokio::time::timeout(Duration::from_millis(500), order.recv()).await.expect("served at once").expect("one");
    assert_eq!(label, "reader");
    assert_eq!(g.mode, Mode::Shared);
}

/// A reservation is broken, not upgraded, while a full request waits for its
/// lease: a reader that reserved before a writer queued does not join the
/// current readers ahead of that writer.
#[tokio::test]
async fn a_reservation_is_not_upgraded_past_a_queued_writer() {
    use tenure_server::Upgrade;
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let store = common::store(&[&server], &clock);
    let mut reader = common::req("up", &holder("reader"));
    reader.mode = Mode::Shared;
    let _held = taken(&store, &reader).await;
    let mut late = common::req("up", &holder("late reader"));
    late.mode = Mode::Shared;
    let reservation = match store.try_acquire_tentative_all(std::slice::from_ref(&late)).await.expect("reserve") {
        tenure_core::AllAttempt::Granted(mut gs) => gs.pop().expect("one"),
        tenure_core::AllAttempt::Busy(b) => panic!("busy: {}", b.describe()),
    };
    let (tx, _order) = tokio::sync::mpsc::unbounded_channel();
    let _writer = waiter(&server, &clock, common::req("up", &holder("writer")), tx);
    until_parked(&server, 1).await;
    match store.upgrade_all(std::slice::from_ref(&reservation)).await.expect("upgrade") {
        Upgrade::Broken { .. } => {}
        Upgrade::Upgraded(gs) => {
            panic!("a reader overtook a queued writer through its reservation (token {})", gs[0].token)
        }
    }
}
