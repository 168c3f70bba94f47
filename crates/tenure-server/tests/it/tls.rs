//! TLS over real sockets, with a CA made at test time: leases through the real
//! client; refusals of an untrusted certificate, of a name the certificate
//! does not list, and of plaintext on one side and TLS on the other, each with
//! what to do and well within the client's timeout; handshakes that drip or
//! never come, cut off like a hello that does; the auth token kept off the
//! network without TLS; and the HTTP port over TLS.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::tls::TestCa;
use tenure_core::{Attempt, Error, Holder, LeaseStore, ManualClock, OpenOptions, ReleaseRequest, Released};
use tenure_server::http::HttpOptions;
use tenure_server::server::RunningServer;
use tenure_server::{CoreOptions, ServerOptions, ServerTls, TenureStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The clients' timeout in these tests; every refusal must come well within it.
const TIMEOUT_MS: u64 = 3000;
/// Generous bound for what the server should do at once.
const PATIENCE: Duration = Duration::from_secs(10);

async fn server_with(clock: &ManualClock, tls: Option<ServerTls>, opts: ServerOptions) -> RunningServer {
    let opts = ServerOptions { tls, ..opts };
    let server = common::start(clock.shared(), CoreOptions::new(common::MAX_LEASE), opts).await;
    clock.advance(common::MAX_LEASE + Duration::from_secs(1));
    server
}

async fn server(clock: &ManualClock, tls: Option<ServerTls>) -> RunningServer {
    server_with(clock, tls, ServerOptions::default()).await
}

fn store(url: &str, clock: &ManualClock) -> tenure_core::Result<TenureStore> {
    TenureStore::new(url, &OpenOptions::default().with_clock(clock.shared()))
}

/// The error of a first acquisition through `url`, and how long it took.
async fn refusal(url: &str, clock: &ManualClock) -> (Error, Duration) {
    let store = store(url, clock).expect("store");
    let started = Instant::now();
    let me = Arc::new(Holder::current());
    let outcome = tokio::time::timeout(PATIENCE, store.try_acquire(&common::req("tls/refused", &me)))
        .await
        .expect("an answer, not a hang");
    match outcome {
        Err(e) => (e, started.elapsed()),
        Ok(_) => panic!("{url}: granted"),
    }
}

#[tokio::test]
async fn acquire_renew_release_over_tls_through_the_real_client() {
    let clock = ManualClock::new();
    let ca = TestCa::new();
    let server = server(&clock, Some(ca.loopback())).await;
    let url = format!("tenure://{}?{}&timeout={TIMEOUT_MS}ms", server.addr(), ca.query());
    let store = store(&url, &clock).expect("store");
    let me = Arc::new(Holder::current());
    let Attempt::Granted(g) = store.try_acquire(&common::req("tls/a", &me)).await.expect("acquire") else {
        panic!("busy")
    };
    assert!(g.witness.is_some());
    let other = Arc::new(Holder::current());
    assert!(matches!(store.try_acquire(&common::req("tls/a", &other)).await.expect("ask"), Attempt::Busy(_)));
    let g = store.renew(&g).await.expect("renew");
    assert_eq!(store.release(&g, &ReleaseRequest::default()).await.expect("release"), Released::Released);
    assert_eq!(store.list("tls/").await.expect("list").len(), 1);
    // By the name in the certificate, too.
    let url = format!("tenure://localhost:{}?{}", server.addr().port(), ca.query());
    let by_name = self::store(&url, &clock).expect("store");
    assert!(matches!(by_name.try_acquire(&common::req("tls/b", &me)).await.expect("acquire"), Attempt::Granted(_)));
    assert_eq!(server.shared().conns.rejected.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_refused_naming_ca_file() {
    let clock = ManualClock::new();
    let (ca, other) = (TestCa::new(), TestCa::new());
    let server = server(&clock, Some(ca.loopback())).await;
    let url = format!("tenure://{}?{}&timeout={TIMEOUT_MS}ms", server.addr(), other.query());
    let (e, took) = refusal(&url, &clock).await;
    let text = e.to_string();
    assert!(matches!(e, Error::Unsupported { .. }), "a refusal for good, not an outage: {e:?}");
    assert!(text.contains(&server.addr().to_string()) && text.contains("not signed by a CA"), "{text}");
    assert!(text.contains("ca_file=PATH") && text.contains(&other.ca_file.display().to_string()), "{text}");
    assert!(took < Duration::from_millis(TIMEOUT_MS), "{took:?}");
}

#[tokio::test]
async fn a_name_the_certificate_does_not_list_is_refused_and_server_name_fixes_it() {
    let clock = ManualClock::new();
    let ca = TestCa::new();
    let server = server(&clock, Some(ca.server(&["locks.example"]))).await;
    let url = format!("tenure://{}?{}&timeout={TIMEOUT_MS}ms", server.addr(), ca.query());
    let (e, took) = refusal(&url, &clock).await;
    let text = e.to_string();
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    assert!(text.contains("not valid for the name \"127.0.0.1\"") && text.contains("server_name=NAME"), "{text}");
    assert!(took < Duration::from_millis(TIMEOUT_MS), "{took:?}");
    let store = store(&format!("{url}&server_name=locks.example"), &clock).expect("store");
    let me = Arc::new(Holder::current());
    assert!(matches!(store.try_acquire(&common::req("tls/named", &me)).await.expect("acquire"), Attempt::Granted(_)));
}

#[tokio::test]
async fn a_plaintext_client_at_a_tls_server_is_told_to_use_tls() {
    let clock = ManualClock::new();
    let ca = TestCa::new();
    let server = server(&clock, Some(ca.loopback())).await;
    let (e, took) = refusal(&format!("tenure://{}?timeout={TIMEOUT_MS}ms", server.addr()), &clock).await;
    let text = e.to_string();
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    assert!(text.contains(&server.addr().to_string()) && text.contains("speaks TLS only"), "{text}");
    assert!(text.contains("tls=true"), "{text}");
    assert!(took < Duration::from_millis(TIMEOUT_MS), "{took:?}");
    let since = Instant::now();
    while server.shared().conns.open.load(Ordering::Relaxed) > 0 {
        assert!(since.elapsed() < PATIENCE, "the server keeps the refused connection");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_tls_client_at_a_plaintext_server_is_told_it_does_not_speak_tls() {
    let clock = ManualClock::new();
    let ca = TestCa::new();
    let server = server(&clock, None).await;
    let url = format!("tenure://{}?{}&timeout={TIMEOUT_MS}ms", server.addr(), ca.query());
    let (e, took) = refusal(&url, &clock).await;
    let text = e.to_string();
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    assert!(text.contains(&server.addr().to_string()) && text.contains("did not answer in TLS"), "{text}");
    assert!(text.contains("--tls-cert") && text.contains("drop tls=true"), "{text}");
    assert!(took < Duration::from_millis(TIMEOUT_MS), "{took:?}");
}

#[tokio::test]
async fn a_tls_client_whose_server_never_answers_gives_up_at_its_timeout() {
    let clock = ManualClock::new();
    let ca = TestCa::new();
    // Accepts, then says nothing.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let _silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let (e, took) = refusal(&format!("tenure://{addr}?{}&timeout=500ms", ca.query()), &clock).await;
    assert!(e.to_string().contains("no TLS connection within 500ms"), "{e}");
    assert!(took >= Duration::from_millis(500) && took < PATIENCE, "{took:?}");
}

/// The first bytes of a TLS ClientHello record header: enough for the server
/// to take the connection for TLS, never enough to finish.
const CLIENT_HELLO_START: &[u8] = &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03];

/// Sends a ClientHello one byte every 100 ms until the server closes the
/// connection; how long after `started` that was.
async fn drip_until_closed(drip: &mut TcpStream, started: Instant) -> Duration {
    for b in CLIENT_HELLO_START.iter().cycle() {
        if drip.write_all(&[*b]).await.is_err() || common::abuse::closed_by_peer(drip, Duration::from_millis(100)).await
        {
            break;
        }
    }
    started.elapsed()
}

#[tokio::test]
async fn a_dripping_or_missing_handshake_is_cut_off_at_the_hello_deadline() {
    let clock = ManualClock::new();
    let ca = TestCa::new();
    let hello_timeout = Duration::from_millis(700);
    let opts = ServerOptions { hello_timeout, ..ServerOptions::default() };
    let server = server_with(&clock, Some(ca.loopback()), opts).await;
    // One byte of a ClientHello every 100 ms, and a connection that sends nothing.
    let mut drip = TcpStream::connect(server.addr()).await.expect("connect");
    let mut mute = TcpStream::connect(server.addr()).await.expect("connect");
    let started = Instant::now();
    let dripping = drip_until_closed(&mut drip, started);
    let muted = async {
        assert!(common::abuse::closed_by_peer(&mut mute, PATIENCE).await, "the mute connection is closed");
        started.elapsed()
    };
    let (dripped, muted) =
        tokio::time::timeout(PATIENCE, async { tokio::join!(dripping, muted) }).await.expect("closed");
    for lived in [dripped, muted] {
        assert!(lived >= hello_timeout - Duration::from_millis(100), "closed before its deadline: {lived:?}");
        assert!(lived < hello_timeout + Duration::from_secs(3), "lived past its deadline: {lived:?}");
    }
    assert_eq!(server.shared().conns.timed_out.load(Ordering::Relaxed), 2);
    // The server still serves.
    let url = format!("tenure://{}?{}", server.addr(), ca.query());
    let me = Arc::new(Holder::current());
    let store = store(&url, &clock).expect("store");
    assert!(matches!(store.try_acquire(&common::req("tls/after", &me)).await.expect("acquire"), Attempt::Granted(_)));
}

#[tokio::test]
async fn a_handshake_under_way_holds_a_place_before_the_hello_that_a_newcomer_takes() {
    let clock = ManualClock::new();
    let ca = TestCa::new();
    let opts = ServerOptions { max_pre_hello: 1, hello_timeout: Duration::from_secs(30), ..ServerOptions::default() };
    let server = server_with(&clock, Some(ca.loopback()), opts).await;
    let mut first = TcpStream::connect(server.addr()).await.expect("connect");
    first.write_all(CLIENT_HELLO_START).await.expect("write");
    // Wait until the server holds it, then a real client connects.
    let since = Instant::now();
    while server.shared().pre_hello_open() < 1 {
        assert!(since.elapsed() < PATIENCE, "the server never took the connection");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let url = format!("tenure://{}?{}", server.addr(), ca.query());
    let me = Arc::new(Holder::current());
    let store = store(&url, &clock).expect("store");
    assert!(matches!(
        store.try_acquire(&common::req("tls/newcomer", &me)).await.expect("acquire"),
        Attempt::Granted(_)
    ));
    assert!(common::abuse::closed_by_peer(&mut first, PATIENCE).await, "the oldest handshake is closed");
    assert!(since.elapsed() < Duration::from_secs(30), "closed by the newcomer, not by its deadline");
    assert_eq!(server.shared().pre_hello_evicted(), 1);
}

#[tokio::test]
async fn the_auth_token_goes_in_plaintext_only_to_this_machine() {
    let clock = ManualClock::new();
    // TEST-NET-1 (RFC 5737): refused before any packet is sent.
    let url = "tenure://192.0.2.1:7777?auth_token=s3cret&timeout=1000ms";
    let (e, took) = refusal(url, &clock).await;
    let text = e.to_string();
    assert!(matches!(e, Error::InvalidStore { .. }), "{e:?}");
    assert!(text.contains("refusing to send the auth token in plaintext to 192.0.2.1:7777"), "{text}");
    assert!(text.contains("tls=true") && text.contains("allow_plaintext_auth=true"), "{text}");
    assert!(took < Duration::from_millis(100), "refused before connecting: {took:?}");
    // To loopback it goes (it does not leave the machine), with or without TLS.
    let ca = TestCa::new();
    let token = ServerOptions { auth_token: Some(b"s3cret".to_vec()), ..ServerOptions::default() };
    let me = Arc::new(Holder::current());
    for (tls, query) in [(None, String::new()), (Some(ca.loopback()), format!("&{}", ca.query()))] {
        let server = server_with(&clock, tls, token.clone()).await;
        let store = store(&format!("tenure://{}?auth_token=s3cret{query}", server.addr()), &clock).expect("store");
        assert!(matches!(
            store.try_acquire(&common::req("tls/token", &me)).await.expect("acquire"),
            Attempt::Granted(_)
        ));
    }
    // Settings that need TLS without it, and bad values, are refused.
    for (query, says) in [
        ("ca_file=/nonexistent", "add tls=true"),
        ("server_name=x", "add tls=true"),
        ("tls=yes", "tls=yes is not a flag: write tls=true or tls=false"),
        ("allow_plaintext_auth=maybe", "allow_plaintext_auth=true or allow_plaintext_auth=false"),
        ("tls=true&ca_file=/nonexistent/ca.pem", "CA file /nonexistent/ca.pem: no such file"),
    ] {
        let e = store(&format!("tenure://127.0.0.1:1?{query}"), &clock).expect_err(query).to_string();
        assert!(e.contains(says), "{query}: {e}");
    }
    assert!(store("tenure://127.0.0.1:1?allow_plaintext_auth=true&tls=false", &clock).is_ok());
}

/// Serves the HTTP side of `server` over TLS on a loopback port.
async fn https(server: &RunningServer, tls: ServerTls, idle_timeout: Duration) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let opts = HttpOptions { tls: Some(tls), idle_timeout, ..HttpOptions::default() };
    tokio::spawn(tenure_server::http::serve(listener, server.shared().clone(), opts, std::future::pending()));
    addr
}

/// One GET over TLS: the status line and the body.
async fn https_get(ca: &TestCa, addr: std::net::SocketAddr, path: &str) -> (String, String) {
    let exchange = async {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        let mut s = ca.connector().connect(name, tcp).await.expect("handshake");
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes())
            .await
            .expect("write");
        let mut buf = Vec::new();
        // A close without close_notify after the whole answer is fine here.
        let _ = s.read_to_end(&mut buf).await;
        buf
    };
    let buf = tokio::time::timeout(PATIENCE, exchange).await.expect("an answer in time");
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    (head.lines().next().unwrap_or_default().to_string(), body.to_string())
}

#[tokio::test]
async fn the_http_port_over_tls_serves_its_pages_and_tells_plaintext_to_use_https() {
    let clock = ManualClock::new();
    let ca = TestCa::new();
    let tls = ca.loopback();
    let server = server(&clock, Some(tls.clone())).await;
    let idle_timeout = Duration::from_millis(800);
    let addr = https(&server, tls, idle_timeout).await;
    for (path, says) in [("/healthz", "ok"), ("/readyz", "ok"), ("/status.json", "\"leases\""), ("/metrics", "tenure_")]
    {
        let (status, body) = https_get(&ca, addr, path).await;
        assert!(status.starts_with("HTTP/1.1 200"), "{path}: {status}");
        assert!(body.contains(says), "{path}: {body}");
    }
    // Plaintext gets a readable answer, not TLS bytes.
    let (head, body) = common::abuse::http_get(addr, "/healthz").await;
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    assert!(body.contains("HTTPS only"), "{body}");
    // A dripping handshake, and one that completes but sends no request, are
    // closed at the first head's deadline, as a plaintext connection is.
    let started = Instant::now();
    let mut drip = TcpStream::connect(addr).await.expect("connect");
    let dripping = drip_until_closed(&mut drip, started);
    let mute = async {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        let mut s = ca.connector().connect(name, tcp).await.expect("handshake");
        let mut buf = [0u8; 64];
        // Ends with the close (an error without close_notify, or 0).
        let _ = s.read(&mut buf).await;
        started.elapsed()
    };
    let (dripped, muted) =
        tokio::time::timeout(PATIENCE, async { tokio::join!(dripping, mute) }).await.expect("closed");
    for lived in [dripped, muted] {
        assert!(lived >= idle_timeout - Duration::from_millis(100), "closed before its deadline: {lived:?}");
        assert!(lived < idle_timeout + Duration::from_secs(3), "lived past its deadline: {lived:?}");
    }
}
