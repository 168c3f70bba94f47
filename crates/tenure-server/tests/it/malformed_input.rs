//! Garbage, truncated, oversized, slow and idle clients against a real server on
//! loopback: each gets a clear error frame or a closed connection, and the server
//! keeps serving everyone else.

use crate::common;

use std::time::Duration;

use tenure_core::{ManualClock, Mode};
use tenure_server::wire::{
    self, AskWire, ErrorCode, HolderWire, MAGIC, MAX_REQUEST, PROTOCOL_VERSION, Request, Response,
};
use tenure_server::{CoreOptions, ServerOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Generous bound for the server to react; the tests assert what happens, never how fast.
const PATIENCE: Duration = Duration::from_secs(20);

fn opts() -> ServerOptions {
    ServerOptions {
        auth_token: None,
        idle_timeout: Duration::from_secs(1),
        io_timeout: Duration::from_secs(1),
        ..ServerOptions::default()
    }
}

async fn server() -> (ManualClock, tenure_server::server::RunningServer) {
    let clock = ManualClock::new();
    let s = common::start(clock.shared(), CoreOptions::new(common::MAX_LEASE), opts()).await;
    clock.advance(common::MAX_LEASE + Duration::from_secs(1));
    (clock, s)
}

fn frame(id: u32, req: &Request<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    wire::encode_request(&mut out, id, req);
    out
}

fn hello() -> Vec<u8> {
    frame(1, &Request::Hello { magic: MAGIC, version: PROTOCOL_VERSION, auth: None })
}

/// Everything the server says until it closes the connection.
async fn answers_until_closed(stream: &mut TcpStream) -> Vec<Response> {
    let mut buf = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut buf))
        .await
        .expect("the server must close the connection")
        .expect("read");
    parse(&buf)
}

fn parse(mut buf: &[u8]) -> Vec<Response> {
    let mut out = Vec::new();
    while let Ok(Some(n)) = wire::frame_len(buf, 12, wire::MAX_RESPONSE) {
        let (_, _, body) = wire::split_response(&buf[..n]).expect("response frame");
        out.push(postcard::from_bytes(body).expect("a decodable response"));
        buf = &buf[n..];
    }
    assert!(buf.is_empty(), "{} stray bytes after the last frame", buf.len());
    out
}

/// Sends frames and reads exactly `n` answers, leaving the connection open.
async fn exchange(stream: &mut TcpStream, bytes: &[u8], n: usize) -> Vec<Response> {
    stream.write_all(bytes).await.expect("write");
    let mut buf = Vec::new();
    loop {
        let got = parse_prefix(&buf);
        if got.len() >= n {
            return got;
        }
        let mut chunk = [0u8; 4096];
        let k = tokio::time::timeout(PATIENCE, stream.read(&mut chunk)).await.expect("answer").expect("read");
        assert!(k > 0, "the server closed instead of answering");
        buf.extend_from_slice(&chunk[..k]);
    }
}

fn parse_prefix(mut buf: &[u8]) -> Vec<Response> {
    let mut out = Vec::new();
    while let Ok(Some(n)) = wire::frame_len(buf, 12, wire::MAX_RESPONSE) {
        let (_, _, body) = wire::split_response(&buf[..n]).expect("frame");
        out.push(postcard::from_bytes(body).expect("response"));
        buf = &buf[n..];
    }
    out
}

fn assert_error(answers: &[Response], code: ErrorCode, needle: &str) {
    match answers.last() {
        Some(Response::Error { code: c, message }) => {
            assert_eq!(*c, code, "{message}");
            assert!(message.contains(needle), "{message:?} should mention {needle:?}");
        }
        other => panic!("expected an {code:?} error, got {other:?}"),
    }
}

async fn still_serves(addr: std::net::SocketAddr) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let mut bytes = hello();
    bytes.extend(frame(2, &Request::Ping));
    let answers = exchange(&mut s, &bytes, 2).await;
    assert!(matches!(answers[1], Response::Pong), "{answers:?}");
}

#[tokio::test]
async fn an_http_request_on_the_wire_port_gets_a_protocol_error_and_a_close() {
    let (_clock, srv) = server().await;
    let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.expect("write");
    assert_error(&answers_until_closed(&mut s).await, ErrorCode::Protocol, "frame length");
    still_serves(srv.addr()).await;
}

#[tokio::test]
async fn an_oversized_frame_is_refused_before_it_is_read() {
    let (_clock, srv) = server().await;
    let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
    s.write_all(&((MAX_REQUEST as u32) * 4).to_le_bytes()).await.expect("write");
    assert_error(&answers_until_closed(&mut s).await, ErrorCode::Protocol, "not within");
    still_serves(srv.addr()).await;
}

#[tokio::test]
async fn undecodable_bodies_and_a_missing_hello_are_protocol_errors() {
    let (_clock, srv) = server().await;
    let mut garbage = vec![0u8; 8];
    garbage.extend_from_slice(&[0xff; 40]);
    garbage[..4].copy_from_slice(&44u32.to_le_bytes());
    let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
    s.write_all(&garbage).await.expect("write");
    assert_error(&answers_until_closed(&mut s).await, ErrorCode::Protocol, "undecodable");

    let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
    s.write_all(&frame(1, &Request::Ping)).await.expect("write");
    assert_error(&answers_until_closed(&mut s).await, ErrorCode::Protocol, "hello");

    let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
    s.write_all(&frame(1, &Request::Hello { magic: *b"NOPE", version: PROTOCOL_VERSION, auth: None }))
        .await
        .expect("write");
    assert_error(&answers_until_closed(&mut s).await, ErrorCode::Protocol, "magic");

    let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
    s.write_all(&frame(1, &Request::Hello { magic: MAGIC, version: 99, auth: None })).await.expect("write");
    assert_error(
        &answers_until_closed(&mut s).await,
        ErrorCode::Version,
        &format!("to {PROTOCOL_VERSION}, the client 99"),
    );
    still_serves(srv.addr()).await;
}

#[tokio::test]
async fn random_frames_never_crash_the_server() {
    let (_clock, srv) = server().await;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..200 {
        let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
        let mut bytes = hello();
        let len = (next() % 200) as usize;
        let body: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        bytes.extend_from_slice(&((len + 4) as u32).to_le_bytes());
        bytes.extend_from_slice(&7u32.to_le_bytes());
        bytes.extend_from_slice(&body);
        s.write_all(&bytes).await.expect("write");
        // Whatever it was, the answer is a valid frame: an answer or an error.
        s.shutdown().await.expect("half-close");
        let answers = answers_until_closed(&mut s).await;
        assert!(matches!(answers.first(), Some(Response::Hello { .. })), "{answers:?}");
    }
    still_serves(srv.addr()).await;
}

#[tokio::test]
async fn a_truncated_frame_then_hang_up_leaves_the_server_serving() {
    let (_clock, srv) = server().await;
    let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
    let h = hello();
    s.write_all(&h[..h.len() - 3]).await.expect("write");
    drop(s);
    still_serves(srv.addr()).await;
}

#[tokio::test]
async fn a_client_stalling_inside_a_frame_is_closed_after_the_io_timeout() {
    let (_clock, srv) = server().await;
    let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
    let mut bytes = hello();
    bytes.extend_from_slice(&100u32.to_le_bytes());
    bytes.extend_from_slice(b"only part");
    s.write_all(&bytes).await.expect("write");
    let answers = answers_until_closed(&mut s).await;
    assert!(matches!(answers[0], Response::Hello { .. }));
    assert_error(&answers, ErrorCode::Protocol, "longer than");
}

#[tokio::test]
async fn an_idle_client_is_closed_after_the_idle_timeout() {
    let (_clock, srv) = server().await;
    let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
    s.write_all(&hello()).await.expect("write");
    assert_error(&answers_until_closed(&mut s).await, ErrorCode::Idle, "idle");
}

#[tokio::test]
async fn an_idle_timeout_of_duration_max_means_never_not_a_crash_of_the_connection() {
    let clock = ManualClock::new();
    let opts = ServerOptions { idle_timeout: Duration::MAX, ..opts() };
    let srv = common::start(clock.shared(), CoreOptions::new(common::MAX_LEASE), opts).await;
    clock.advance(common::MAX_LEASE + Duration::from_secs(1));
    let store = common::store(&[&srv], &clock);
    let name = tenure_core::LeaseName::new("x").expect("name");
    let state = tokio::time::timeout(PATIENCE, tenure_core::LeaseStore::inspect(&store, &name)).await;
    assert!(matches!(state, Ok(Ok(_))), "{state:?}");
}

#[tokio::test]
async fn invalid_requests_get_an_error_and_the_connection_stays_open() {
    let (_clock, srv) = server().await;
    let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
    let long_name = "n".repeat(300);
    let big_host = "h".repeat(1000);
    let holder = HolderWire { nonce: "abc", pid: 1, host: "h", user: "u", version: "0", label: None };
    let ask =
        |name: &'static str| AskWire { name, mode: Mode::Exclusive, ttl_ms: 1000, holder, retake: false, meta: None };
    let mut bytes = hello();
    bytes.extend(frame(
        2,
        &Request::Acquire {
            tentative: false,
            asks: vec![AskWire {
                name: &long_name,
                mode: Mode::Exclusive,
                ttl_ms: 1000,
                holder,
                retake: false,
                meta: None,
            }],
        },
    ));
    bytes.extend(frame(
        3,
        &Request::Acquire {
            tentative: false,
            asks: vec![AskWire {
                name: "ok",
                mode: Mode::Exclusive,
                ttl_ms: 1000,
                holder: HolderWire { host: &big_host, ..holder },
                retake: false,
                meta: None,
            }],
        },
    ));
    bytes.extend(frame(4, &Request::Acquire { tentative: false, asks: (0..600).map(|_| ask("x")).collect() }));
    bytes.extend(frame(5, &Request::Acquire { tentative: false, asks: vec![] }));
    bytes.extend(frame(6, &Request::Ping));
    let answers = exchange(&mut s, &bytes, 6).await;
    assert_error(&answers[1..2], ErrorCode::Invalid, "bytes long");
    assert_error(&answers[2..3], ErrorCode::Invalid, "host");
    assert_error(&answers[3..4], ErrorCode::Invalid, "batch of more than 512");
    assert_error(&answers[4..5], ErrorCode::Invalid, "batch of 0");
    assert!(matches!(answers[5], Response::Pong));
}

#[tokio::test]
async fn a_client_that_never_reads_is_cut_off_and_memory_stays_bounded() {
    let (_clock, srv) = server().await;
    let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
    let holder = HolderWire { nonce: "abc", pid: 1, host: "h", user: "u", version: "0", label: None };
    let names: Vec<String> = (0..100).map(|i| format!("fill/{i:03}{}", "x".repeat(60))).collect();
    let asks = names
        .iter()
        .map(|n| AskWire { name: n, mode: Mode::Exclusive, ttl_ms: 1000, holder, retake: false, meta: None })
        .collect();
    let mut bytes = hello();
    bytes.extend(frame(2, &Request::Acquire { tentative: false, asks }));
    let answers = exchange(&mut s, &bytes, 2).await;
    assert!(matches!(answers[1], Response::Acquired(_)), "{answers:?}");
    // Each List answer is about 7 KB. Keep asking, never read: the answers fill the
    // socket buffers, the server's write times out and it closes; our writes fail.
    let list = frame(3, &Request::List { prefix: "", limit: 1000, after: None });
    let outcome = tokio::time::timeout(PATIENCE, async {
        for _ in 0..1_000_000 {
            if s.write_all(&list).await.is_err() {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(outcome, Ok(true), "the server must close a client that does not read");
    still_serves(srv.addr()).await;
}

#[tokio::test]
async fn a_server_with_a_secret_refuses_clients_without_it() {
    let clock = ManualClock::new();
    let opts = ServerOptions { auth_token: Some(b"s3cret".to_vec()), ..opts() };
    let srv = common::start(clock.shared(), CoreOptions::new(common::MAX_LEASE), opts).await;
    for auth in [None, Some(&b"wrong"[..]), Some(&b"s3cre"[..])] {
        let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
        s.write_all(&frame(1, &Request::Hello { magic: MAGIC, version: PROTOCOL_VERSION, auth })).await.expect("write");
        assert_error(&answers_until_closed(&mut s).await, ErrorCode::Unauthorized, "auth token");
    }
    let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
    let mut bytes = frame(1, &Request::Hello { magic: MAGIC, version: PROTOCOL_VERSION, auth: Some(b"s3cret") });
    bytes.extend(frame(2, &Request::Ping));
    assert!(matches!(exchange(&mut s, &bytes, 2).await[1], Response::Pong));

    let url = format!("tenure://{}", srv.addr());
    let opts = tenure_core::OpenOptions::default().with_clock(clock.shared());
    let refused = tenure_server::TenureStore::new(&url, &opts).expect("store");
    let err = tenure_core::LeaseStore::list(&refused, "").await.expect_err("no secret");
    assert!(err.to_string().contains("auth token"), "{err}");
    let allowed = tenure_server::TenureStore::new(&format!("{url}?auth_token=s3cret"), &opts).expect("store");
    tenure_core::LeaseStore::list(&allowed, "").await.expect("the right secret is let in");
}
