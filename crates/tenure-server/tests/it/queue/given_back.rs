//! Grants that reached no one on the server: a wait withdrawn while its grant
//! was on its way (or answered at once), a waiter whose connection failed or
//! closed, a caller that gave up after its grant arrived. Each grant is given
//! back at once, never held by nobody until its deadline, and ends released
//! without a watermark.

use super::{WAIT, ask, free_within_5s, holder, raw, taken, until_parked};
use crate::common;

use std::time::Duration;

use tokio::io::AsyncWriteExt as _;

use tenure_core::{Attempt, EndedHow, Holder, LeaseStore, ManualClock, Mode, ReleaseRequest};
use tenure_server::TenureStore;
use tenure_server::leases::CoreOptions;
use tenure_server::server::{RunningServer, ServerOptions};

/// A client whose caller gives up on a wait while its grant is on the wire
/// withdraws the wait ([`Request::Unwait`]) without ever seeing the grant (its
/// reader drops answers to withdrawn waits): the grant must be given back, not
/// held by nobody until its deadline.
#[tokio::test]
async fn a_grant_withdrawn_while_on_its_way_is_given_back() {
    use common::abuse::{exchange, frame};
    use tenure_server::wire::{AcquireReply, Request, Response};
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let store = common::store(&[&server], &clock);
    let held = taken(&store, &common::req("in-flight", &holder("holder"))).await;
    let mut s = raw(&server).await;
    let h = Holder::current().with_label("gave-up");
    let wait = Request::Wait { ask: ask("in-flight", 10_000, &h), wait_ms: 600_000 };
    s.write_all(&frame(2, &wait)).await.expect("wait");
    until_parked(&server, 1).await;
    store.release(&held, &ReleaseRequest::default()).await.expect("release");
    // The grant is sent; the client's caller has given up before its reader saw it.
    match exchange(&mut s, &[], 1).await.pop() {
        Some(Response::Acquired(AcquireReply::Granted(_))) => {}
        other => panic!("expected the grant, got {other:?}"),
    }
    let answer = exchange(&mut s, &frame(3, &Request::Unwait { id: 2 }), 1).await.pop();
    assert!(matches!(answer, Some(Response::Done)), "{answer:?}");
    match store.try_acquire(&common::req("in-flight", &holder("next"))).await.expect("acquire") {
        Attempt::Granted(_) => {}
        Attempt::Busy(b) => panic!("the withdrawn grant still holds the lease: {}", b.describe()),
    }
}

/// Every wait a connection may have is granted at once (as when many leases
/// free together), and the caller of the first gives up before it saw its
/// grant: the withdrawal still finds that grant among those sent since, and
/// gives it back, instead of leaving it held by nobody until its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_finds_its_grant_after_every_wait_of_the_connection_was_granted() {
    use common::abuse::{exchange, frame};
    use tenure_server::wire::{AcquireReply, MAX_WAITS_PER_CONNECTION, Request, Response};
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let store = common::store(&[&server], &clock);
    let n = MAX_WAITS_PER_CONNECTION;
    let names: Vec<String> = (0..n).map(|i| format!("many/{i}")).collect();
    let mut held = Vec::new();
    for name in &names {
        held.push(taken(&store, &common::req(name, &holder("holder"))).await);
    }
    let mut s = raw(&server).await;
    let h = Holder::current().with_label("waiter");
    let mut waits = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let id = u32::try_from(i + 2).expect("id");
        waits.extend(frame(id, &Request::Wait { ask: ask(name, 10_000, &h), wait_ms: 600_000 }));
    }
    s.write_all(&waits).await.expect("waits");
    until_parked(&server, n as u64).await;
    for g in &held {
        store.release(g, &ReleaseRequest::default()).await.expect("release");
    }
    let grants = exchange(&mut s, &[], n).await;
    assert!(grants.iter().all(|r| matches!(r, Response::Acquired(AcquireReply::Granted(_)))), "all granted");
    let answer = exchange(&mut s, &frame(1, &Request::Unwait { id: 2 }), 1).await.pop();
    assert!(matches!(answer, Some(Response::Done)), "the withdrawal missed its grant: {answer:?}");
    match store.try_acquire(&common::req(&names[0], &holder("next"))).await.expect("acquire") {
        Attempt::Granted(_) => {}
        Attempt::Busy(b) => panic!("the withdrawn grant still holds the lease: {}", b.describe()),
    }
}

/// During the restart quarantine a wait is queued, not refused: only a wait
/// whose answer is the quarantine counts as a refusal in the metrics, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_in_the_quarantine_count_as_refused_only_when_refused() {
    use common::abuse::{exchange, frame};
    use tenure_server::wire::{AcquireReply, Request, Response};
    let clock = ManualClock::new();
    let server = common::start(clock.shared(), CoreOptions::new(common::MAX_LEASE), ServerOptions::default()).await;
    let refused = || server.shared().core.stats().quarantined.load(std::sync::atomic::Ordering::Relaxed);
    let mut s = raw(&server).await;
    let h = Holder::current().with_label("early");
    let now = exchange(&mut s, &frame(2, &Request::Wait { ask: ask("early", 10_000, &h), wait_ms: 0 }), 1).await;
    assert!(matches!(now.first(), Some(Response::Acquired(AcquireReply::Quarantine { .. }))), "{now:?}");
    assert_eq!(refused(), 1, "a wait of no time, refused: counted once");
    s.write_all(&frame(3, &Request::Wait { ask: ask("early", 10_000, &h), wait_ms: 600_000 })).await.expect("wait");
    until_parked(&server, 1).await;
    assert_eq!(refused(), 1, "a queued wait is no refusal");
    clock.advance(common::MAX_LEASE + Duration::from_secs(2));
    let granted = exchange(&mut s, &[], 1).await;
    assert!(matches!(granted.first(), Some(Response::Acquired(AcquireReply::Granted(_)))), "{granted:?}");
    assert_eq!(refused(), 1);
}

/// A wait answered at once with a grant, then withdrawn before the client saw
/// the answer, gives the grant back too; but an Unwait never gives back the
/// grant of an older wait whose request id has come round again (its client
/// has seen and may be using it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawn_immediate_grant_is_given_back_an_older_one_under_the_same_id_is_not() {
    use common::abuse::{exchange, frame};
    use tenure_server::wire::{ErrorCode, Request, Response};
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let store = common::store(&[&server], &clock);
    let mut s = raw(&server).await;
    let h = Holder::current().with_label("waiter");
    let wait = |id: u32, name: &'static str, ttl_ms: u64| {
        frame(id, &Request::Wait { ask: ask(name, ttl_ms, &h), wait_ms: 600_000 })
    };
    let store = &store;
    let busy = |name: &'static str| async move {
        matches!(store.try_acquire(&common::req(name, &holder("other"))).await.expect("acquire"), Attempt::Busy(_))
    };

    // Granted at once, withdrawn unseen: given back.
    let answer = exchange(&mut s, &wait(4, "free-now", 10_000), 1).await.pop();
    assert!(matches!(answer, Some(Response::Acquired(_))), "{answer:?}");
    assert!(busy("free-now").await, "granted to the waiter");
    let answer = exchange(&mut s, &frame(5, &Request::Unwait { id: 4 }), 1).await.pop();
    assert!(matches!(answer, Some(Response::Done)), "{answer:?}");
    assert!(!busy("free-now").await, "the withdrawn grant was given back");

    // Granted and seen under id 6; id 6 comes round again for a wait that is
    // refused (a TTL of zero). Withdrawing that one gives nothing back.
    let answer = exchange(&mut s, &wait(6, "kept", 10_000), 1).await.pop();
    assert!(matches!(answer, Some(Response::Acquired(_))), "{answer:?}");
    let answer = exchange(&mut s, &wait(6, "other", 0), 1).await.pop();
    assert!(matches!(answer, Some(Response::Error { .. })), "{answer:?}");
    let answer = exchange(&mut s, &frame(7, &Request::Unwait { id: 6 }), 1).await.pop();
    assert!(matches!(answer, Some(Response::Error { code: ErrorCode::Nothing, .. })), "{answer:?}");
    assert!(busy("kept").await, "the older grant under id 6 is still held");
}

/// A grant to a waiter whose connection fails before the grant is written
/// is given back, never left to hold the lease for its TTL: here the waiter's
/// client stops reading, so the server is stuck writing earlier answers when
/// the lease frees, and closes the connection when its `io_timeout` runs out
/// with the grant still unsent (the clock never moves: a grant kept would hold
/// the lease for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_its_waiters_connection_failed_to_take_is_given_back() {
    use common::abuse::frame;
    use tenure_server::wire::{MAX_LIST_PAGE, Request};
    use tenure_server::{CoreOptions, ServerOptions};
    let clock = ManualClock::new();
    let opts = ServerOptions { io_timeout: Duration::from_secs(1), ..ServerOptions::default() };
    let server = common::start(clock.shared(), CoreOptions::new(common::MAX_LEASE), opts).await;
    clock.advance(common::MAX_LEASE + Duration::from_secs(1));
    let store = common::store(&[&server], &clock);
    // Leases with long names: each page of their list is a large answer.
    let core = &server.shared().core;
    let lister = holder("lister");
    for i in 0..2_000 {
        let n = "n".repeat(60);
        let name = format!("crowd/{i:05}/{n}/{n}/{n}");
        let ask = tenure_server::leases::Ask {
            name: &name,
            mode: Mode::Exclusive,
            ttl_ms: 10_000,
            holder: &lister,
            retake: false,
            meta: None,
        };
        core.acquire(&[ask], false).expect("a crowd lease");
    }
    let held = taken(&store, &common::req("unsent", &holder("holder"))).await;
    // A client that queues, then asks for far more than its socket takes, and
    // reads nothing.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("a small receive buffer");
    let mut s = socket.connect(server.addr()).await.expect("connect");
    s.write_all(&common::abuse::hello()).await.expect("hello");
    let h = Holder::current().with_label("stuck");
    let wait = Request::Wait { ask: ask("unsent", 10_000, &h), wait_ms: 600_000 };
    s.write_all(&frame(2, &wait)).await.expect("wait");
    until_parked(&server, 1).await;
    let list = Request::List { prefix: "crowd/", limit: MAX_LIST_PAGE as u32, after: None };
    let lists: Vec<u8> = (0..64u32).flat_map(|id| frame(10 + id, &list)).collect();
    s.write_all(&lists).await.expect("lists");
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The lease frees while the server is stuck on the lists' answers.
    store.release(&held, &ReleaseRequest::default()).await.expect("release");
    assert!(free_within_5s(&store, "unsent").await, "the grant the server could not send still holds the lease");
    drop(s);
}

/// A caller that gives up on its wait after the grant reached its
/// connection, but before it took it, gives the grant back: the client
/// withdraws the wait all the same, and the server, which sent the grant,
/// releases it (the clock never moves: a grant kept would hold the lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_up_after_its_grant_arrived_gives_it_back() {
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let store = common::store(&[&server], &clock);
    let held = taken(&store, &common::req("arrived", &holder("holder"))).await;
    let waiter = common::store(&[&server], &clock);
    let req = common::req("arrived", &holder("gave-up"));
    let mut wait = Box::pin(waiter.acquire_queued(&req, WAIT));
    assert!(tokio::time::timeout(Duration::from_millis(100), &mut wait).await.is_err(), "the lease is held");
    until_parked(&server, 1).await;
    store.release(&held, &ReleaseRequest::default()).await.expect("release");
    // The grant goes to the waiter's connection; its caller never looks again.
    let handovers = || server.shared().core.stats().handovers.load(std::sync::atomic::Ordering::Relaxed);
    for _ in 0..500 {
        if handovers() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(handovers(), 1, "the lease was handed to the waiter");
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(wait);
    assert!(free_within_5s(&store, "arrived").await, "the grant its caller never took still holds the lease");
    drop(waiter);
}

/// Holds `name` on a raw connection, queues a wait by another holder behind
/// it on the same connection, and returns the connection and the grant's token.
async fn held_with_a_waiter(server: &RunningServer, name: &str) -> (tokio::net::TcpStream, u64, Holder) {
    use common::abuse::{exchange, frame};
    use tenure_server::wire::{AcquireReply, Request, Response};
    let mut s = raw(server).await;
    let (h1, h2) = (Holder::current().with_label("holder"), Holder::current().with_label("waiter"));
    let acquire = Request::Acquire { tentative: false, asks: vec![ask(name, 10_000, &h1)] };
    let token = match exchange(&mut s, &frame(2, &acquire), 1).await.pop() {
        Some(Response::Acquired(AcquireReply::Granted(gs))) => gs[0].token,
        other => panic!("expected a grant, got {other:?}"),
    };
    s.write_all(&frame(3, &Request::Wait { ask: ask(name, 10_000, &h2), wait_ms: 600_000 })).await.expect("wait");
    until_parked(server, 1).await;
    (s, token, h1)
}

/// A release frame for the raw holder's grant.
fn release_frame(id: u32, name: &str, token: u64, h: &Holder) -> Vec<u8> {
    use tenure_server::wire::{RefWire, ReleaseWire, Request};
    let grant = RefWire { name, token, reservation: None, nonce: &h.nonce };
    common::abuse::frame(
        id,
        &Request::Release(vec![ReleaseWire { grant, dropped: false, watermark_ms: None, meta: None }]),
    )
}

/// Waits (in real time) until the waiter's grant, made after `token`, has
/// ended and nothing holds `name`; says how it ended and the lease's watermark.
async fn given_back(store: &TenureStore, name: &str, token: u64) -> (EndedHow, Option<u64>) {
    let name = tenure_core::LeaseName::new(name).expect("name");
    for _ in 0..500 {
        let state = store.inspect(&name).await.expect("inspect");
        if let Some(last) = state.last.filter(|l| l.token > token && state.holders.is_empty()) {
            return (last.how, state.watermark_ms);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the waiter's grant on {name} was not given back");
}

/// A grant handed to a waiter whose wait is withdrawn before the waiter got
/// it (the release that hands it over and the Unwait come in one batch) was
/// never seen by anyone: it ends as released, and raises no watermark to its
/// deadline (which would make the next holder's writes look late).
#[tokio::test]
async fn a_grant_withdrawn_before_its_waiter_got_it_ends_released_without_a_watermark() {
    use common::abuse::{exchange, frame};
    use tenure_server::wire::{Request, Response};
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let store = common::store(&[&server], &clock);
    let (mut s, token, h1) = held_with_a_waiter(&server, "ghost").await;
    let mut bytes = release_frame(4, "ghost", token, &h1);
    bytes.extend(frame(5, &Request::Unwait { id: 3 }));
    let answers = exchange(&mut s, &bytes, 2).await;
    assert!(matches!(answers[1], Response::Done), "{answers:?}");
    assert_eq!(given_back(&store, "ghost", token).await, (EndedHow::Released, None));
}

/// Same when the waiter's connection closes right after the release that
/// hands it the lease.
#[tokio::test]
async fn a_grant_to_a_waiter_whose_connection_closed_ends_released_without_a_watermark() {
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let store = common::store(&[&server], &clock);
    let (mut s, token, h1) = held_with_a_waiter(&server, "ghost2").await;
    s.write_all(&release_frame(4, "ghost2", token, &h1)).await.expect("release");
    s.shutdown().await.expect("close");
    drop(s);
    assert_eq!(given_back(&store, "ghost2", token).await, (EndedHow::Released, None));
}
