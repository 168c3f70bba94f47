//! The lease port under attack, over real sockets: slow-loris connections before
//! and after their hello, idle floods up to and beyond the caps, half-open and
//! silent connections, oversized and absurd frames. In each case a normal client
//! (a fresh connection every round: acquire, renew, release, list) is served
//! throughout, within a generous bound, and the attackers are closed at their
//! deadlines however they drip their bytes.
//!
//! Timeouts are short here (a second) so that the tests run in seconds; bounds on
//! how long something took are several times what is expected.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::abuse::{Ended, closed_by_peer, exchange, frame, hello, last_words, loris, parse_all, probe};
use tenure_core::{Attempt, Holder, LeaseStore, ManualClock, ReleaseRequest};
use tenure_server::server::RunningServer;
use tenure_server::wire::{ErrorCode, MAX_HELLO, MAX_REQUEST, Request, Response};
use tenure_server::{CoreOptions, ServerOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HELLO: Duration = Duration::from_secs(1);
const IO: Duration = Duration::from_secs(1);
const IDLE: Duration = Duration::from_secs(2);
const PRE_HELLO: usize = 16;
const CLIENTS: usize = 24;
/// Generous bound for anything the server should do "at once".
const PATIENCE: Duration = Duration::from_secs(10);

async fn server(threads: usize) -> (ManualClock, RunningServer) {
    server_idle(threads, IDLE).await
}

async fn server_idle(threads: usize, idle_timeout: Duration) -> (ManualClock, RunningServer) {
    let opts = ServerOptions {
        hello_timeout: HELLO,
        io_timeout: IO,
        idle_timeout,
        max_pre_hello: PRE_HELLO,
        max_connections: CLIENTS,
        connection_threads: threads,
        ..ServerOptions::default()
    };
    let clock = ManualClock::new();
    let srv = common::start(clock.shared(), CoreOptions::new(common::MAX_LEASE), opts).await;
    clock.advance(common::MAX_LEASE + Duration::from_secs(1));
    (clock, srv)
}

async fn stop_all(stop: &AtomicBool, attackers: Vec<tokio::task::JoinHandle<Vec<Ended>>>) -> Vec<Ended> {
    stop.store(true, Ordering::Relaxed);
    let mut ended = Vec::new();
    for a in attackers {
        ended.extend(a.await.expect("attacker task"));
    }
    ended
}

/// Waits (within [`PATIENCE`]) until `cond` holds.
async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn error_of(r: &Response) -> (ErrorCode, &str) {
    match r {
        Response::Error { code, message } => (*code, message),
        other => panic!("expected an error answer, got {other:?}"),
    }
}

/// Sends `bytes` on a new connection (after a hello if `greeted`) and expects a
/// protocol error that mentions `needle`, then the close.
async fn refused(addr: std::net::SocketAddr, greeted: bool, bytes: &[u8], needle: &str) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    if greeted {
        exchange(&mut s, &hello(), 1).await;
    }
    s.write_all(bytes).await.expect("write");
    let words = last_words(&mut s).await;
    let (code, message) = error_of(words.last().expect("an answer"));
    assert_eq!(code, ErrorCode::Protocol, "{message}");
    assert!(message.contains(needle), "{message:?} should mention {needle:?}");
}

async fn slow_loris_before_hello(threads: usize) {
    let (clock, srv) = server(threads).await;
    let stop = Arc::new(AtomicBool::new(false));
    // A plausible hello length, then one byte at a time: the hello never
    // completes in time, though bytes keep coming. Three times as many
    // attackers as there are places before the hello, each reconnecting as
    // soon as it is closed (after one drip interval): the places churn, each
    // lasting tens of milliseconds, and the normal client gets through anyway.
    let lead = 200u32.to_le_bytes().to_vec();
    let every = Duration::from_millis(100);
    let attackers: Vec<_> =
        (0..3 * PRE_HELLO).map(|_| loris(srv.addr(), lead.clone(), vec![0x55], every, every, stop.clone())).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let prober = probe(srv.addr(), &clock, "loris-before");
    tokio::time::sleep(HELLO * 3).await;
    assert!(srv.shared().pre_hello_open() <= PRE_HELLO, "the places before the hello are bounded");
    let rounds = prober.finish().await;
    let ended = stop_all(&stop, attackers).await;
    assert!(rounds >= 3, "the normal client kept working ({rounds} rounds)");
    assert!(ended.len() >= 3 * PRE_HELLO, "attackers were closed ({} closes)", ended.len());
    let longest = ended.iter().map(|e| e.lived).max().unwrap_or_default();
    assert!(longest < HELLO * 4, "no hello-less connection lives past the hello deadline: {longest:?}");
    let shared = srv.shared();
    assert!(shared.pre_hello_evicted() > 0, "a full set of places evicts the oldest");
    assert!(shared.conns.timed_out.load(Ordering::Relaxed) > 0 || shared.pre_hello_evicted() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_loris_before_hello_does_not_lock_out_clients() {
    slow_loris_before_hello(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_loris_before_hello_does_not_lock_out_clients_on_connection_threads() {
    slow_loris_before_hello(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_loris_after_hello_is_closed_at_the_whole_frame_deadline() {
    let (clock, srv) = server(0).await;
    let stop = Arc::new(AtomicBool::new(false));
    // A hello, then the start of a 100-byte frame, then a byte every 150 ms:
    // the frame would take 15 s; its deadline is a second after its first byte.
    let mut lead = hello();
    lead.extend_from_slice(&100u32.to_le_bytes());
    let attackers: Vec<_> = (0..CLIENTS / 2)
        .map(|_| {
            loris(
                srv.addr(),
                lead.clone(),
                vec![0x55],
                Duration::from_millis(150),
                Duration::from_millis(50),
                stop.clone(),
            )
        })
        .collect();
    let prober = probe(srv.addr(), &clock, "loris-after");
    tokio::time::sleep(IO * 4).await;
    let rounds = prober.finish().await;
    let ended = stop_all(&stop, attackers).await;
    assert!(rounds >= 3, "the normal client kept working ({rounds} rounds)");
    assert!(ended.len() >= CLIENTS / 2, "every dripping connection was closed ({} closes)", ended.len());
    for e in &ended {
        assert!(e.lived < IO * 4, "a frame dripped byte by byte is cut at its deadline: {e:?}");
        assert!(e.sent < lead.len() + 40, "dripping did not extend the deadline: {e:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dripped_frame_is_told_why_it_was_closed() {
    let (_clock, srv) = server(0).await;
    let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
    let answers = exchange(&mut s, &hello(), 1).await;
    assert!(matches!(answers[0], Response::Hello { .. }));
    s.write_all(&100u32.to_le_bytes()).await.expect("write");
    // A byte every 100 ms until the server closes; keep what it says.
    let began = tokio::time::Instant::now();
    let mut said = Vec::new();
    loop {
        assert!(began.elapsed() < PATIENCE, "the dripping connection was never closed");
        let _ = s.write_all(&[0]).await;
        let mut chunk = [0u8; 1024];
        match tokio::time::timeout(Duration::from_millis(100), s.read(&mut chunk)).await {
            Err(_) => {}
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(k)) => said.extend_from_slice(&chunk[..k]),
        }
    }
    assert!(began.elapsed() < IO * 4, "closed at the frame deadline, not later: {:?}", began.elapsed());
    let words = parse_all(&said);
    let (code, message) = error_of(words.last().expect("a last word"));
    assert_eq!(code, ErrorCode::Protocol, "{message}");
    assert!(message.contains("longer than"), "{message}");
    assert!(srv.shared().conns.timed_out.load(Ordering::Relaxed) >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_before_hello_beyond_the_cap_evict_the_oldest_and_clients_get_in() {
    let (clock, srv) = server(0).await;
    let mut silent = Vec::new();
    for _ in 0..3 * PRE_HELLO {
        silent.push(TcpStream::connect(srv.addr()).await.expect("connect"));
    }
    eventually("the places before the hello hold at most the cap", || srv.shared().pre_hello_open() <= PRE_HELLO).await;
    let prober = probe(srv.addr(), &clock, "silent");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(prober.finish().await >= 1);
    // Every silent connection is closed: the oldest by newer ones, the rest at
    // the hello deadline.
    for s in &mut silent {
        assert!(closed_by_peer(s, HELLO * 4).await, "a silent connection outlived the hello deadline");
    }
    eventually("no connection is left before its hello", || srv.shared().pre_hello_open() == 0).await;
    assert!(srv.shared().pre_hello_evicted() >= (2 * PRE_HELLO) as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_clients_up_to_and_beyond_the_cap_get_a_clear_refusal_then_room_again() {
    // Long enough for the flood to be in place before any of it is idle too long.
    let idle = Duration::from_secs(5);
    let (clock, srv) = server_idle(0, idle).await;
    // A client connected before the flood keeps being served throughout.
    let store = common::store(&[&srv], &clock);
    let me = Arc::new(Holder::current());
    let cycle = |name: &'static str| {
        let (store, me) = (&store, &me);
        async move {
            match store.try_acquire(&common::req(name, me)).await.expect("acquire") {
                Attempt::Granted(g) => store.release(&g, &ReleaseRequest::default()).await.expect("release"),
                Attempt::Busy(b) => panic!("busy: {}", b.describe()),
            };
        }
    };
    cycle("idle/before").await;
    // Fill every other place with clients that say hello, then nothing.
    let mut flood = Vec::new();
    for _ in 0..CLIENTS - 1 {
        let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
        assert!(matches!(exchange(&mut s, &hello(), 1).await[0], Response::Hello { .. }));
        flood.push(s);
    }
    // One more: a clear refusal naming the limit, not a hang.
    let mut extra = TcpStream::connect(srv.addr()).await.expect("connect");
    extra.write_all(&hello()).await.expect("write");
    let words = last_words(&mut extra).await;
    let (code, message) = error_of(words.last().expect("an answer"));
    assert_eq!(code, ErrorCode::Overloaded, "{message}");
    assert!(message.contains(&format!("limit of {CLIENTS} client connections")), "{message}");
    cycle("idle/during").await;
    // The idle ones are closed at the idle timeout; then newcomers get in.
    for s in &mut flood {
        assert!(closed_by_peer(s, idle * 3).await, "an idle client outlived the idle timeout");
    }
    let fresh = common::store(&[&srv], &clock);
    tokio::time::timeout(PATIENCE, fresh.list("")).await.expect("served").expect("a newcomer is served again");
    cycle("idle/after").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_half_closed_and_reset_connections_hold_no_place() {
    let (clock, srv) = server(0).await;
    let prober = probe(srv.addr(), &clock, "half");
    // Half-closed in the middle of a frame: closed at once.
    let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
    let h = hello();
    s.write_all(&h[..h.len() - 2]).await.expect("write");
    s.shutdown().await.expect("half-close");
    assert!(closed_by_peer(&mut s, PATIENCE).await);
    // Half-closed after a request: answered, then closed.
    let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
    let mut bytes = hello();
    bytes.extend(frame(2, &Request::Ping));
    s.write_all(&bytes).await.expect("write");
    s.shutdown().await.expect("half-close");
    let words = last_words(&mut s).await;
    assert!(matches!(words.as_slice(), [Response::Hello { .. }, Response::Pong]), "{words:?}");
    // Reset (SO_LINGER 0) before and after the hello, and silent ones that never
    // finish (a peer that vanished): none of them keeps a place.
    for with_hello in [false, true] {
        for _ in 0..PRE_HELLO {
            let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
            if with_hello {
                exchange(&mut s, &hello(), 1).await;
            }
            s.set_zero_linger().expect("linger");
            drop(s);
        }
    }
    let mut vanished = Vec::new();
    for _ in 0..PRE_HELLO / 2 {
        let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
        s.write_all(&h[..3]).await.expect("write");
        vanished.push(s);
    }
    assert!(prober.finish().await >= 1);
    let open = || srv.shared().conns.open.load(Ordering::Relaxed);
    eventually("every connection is gone", || open() == 0).await;
    assert_eq!(srv.shared().clients_open(), 0, "no client place is left taken");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_frames_are_refused_before_they_are_read() {
    let (clock, srv) = server(0).await;
    let prober = probe(srv.addr(), &clock, "oversized");
    // Before the hello, a frame may be only as large as a hello; after it, up
    // to MAX_REQUEST.
    for len in [u32::MAX, (MAX_HELLO as u32) + 1, MAX_REQUEST as u32] {
        refused(srv.addr(), false, &len.to_le_bytes(), "not within").await;
    }
    refused(srv.addr(), true, &(MAX_REQUEST as u32).to_le_bytes(), "not within").await;
    // A body that claims a sequence of 2^62 items is undecodable, not an allocation.
    let mut body = vec![1u8, 0]; // Request::Acquire, tentative: false
    body.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f]);
    let mut bytes = u32::try_from(body.len() + 4).expect("len").to_le_bytes().to_vec();
    bytes.extend_from_slice(&9u32.to_le_bytes());
    bytes.extend_from_slice(&body);
    refused(srv.addr(), true, &bytes, "undecodable").await;
    assert!(prober.finish().await >= 1);
}
