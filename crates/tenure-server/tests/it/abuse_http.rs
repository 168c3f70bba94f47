//! The HTTP port under attack, over real sockets: idle floods beyond its
//! connection cap, request heads dripped byte by byte, oversized heads, idle
//! keep-alive connections, and a client that never reads its answers. The status
//! pages (and the lease port) are served throughout, within a generous bound.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::abuse::{closed_by_peer, http_get, probe};
use tenure_core::{Holder, ManualClock, Mode};
use tenure_server::http::{HttpOptions, MAX_HEADERS};
use tenure_server::leases::{Acquired, Ask};
use tenure_server::server::RunningServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CAP: usize = 8;
const IDLE: Duration = Duration::from_secs(1);
const ANSWER: Duration = Duration::from_secs(1);
const PATIENCE: Duration = Duration::from_secs(20);

struct Site {
    clock: ManualClock,
    srv: RunningServer,
    http: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Site {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A lease server with `leases` leases of about 100 bytes' name, and its HTTP port.
async fn site(leases: usize) -> Site {
    site_with(leases, IDLE).await
}

async fn site_with(leases: usize, idle_timeout: Duration) -> Site {
    let clock = ManualClock::new();
    let srv = common::start_open(&clock).await;
    let holder = Arc::new(Holder::current());
    let names: Vec<String> = (0..leases).map(|i| format!("site/{i:06}/{}", "n".repeat(60))).collect();
    for n in &names {
        let ask = Ask { name: n, mode: Mode::Exclusive, ttl_ms: 10_000, holder: &holder, retake: false, meta: None };
        assert!(matches!(srv.shared().core.acquire(&[ask], false), Ok(Acquired::Granted(_))));
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let http = listener.local_addr().expect("addr");
    let opts = HttpOptions { max_connections: CAP, idle_timeout, response_timeout: ANSWER, ..HttpOptions::default() };
    let task = tokio::spawn(tenure_server::http::serve(listener, srv.shared().clone(), opts, std::future::pending()));
    Site { clock, srv, http, task }
}

/// One GET on a fresh connection: the status line and the body.
async fn get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    let (head, body) = http_get(addr, path).await;
    (head.lines().next().unwrap_or_default().to_string(), body)
}

async fn served(addr: std::net::SocketAddr) {
    for path in ["/status.json", "/metrics", "/pubkey"] {
        let (status, _) = get(addr, path).await;
        assert!(status.starts_with("HTTP/1.1 200"), "{path}: {status}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_beyond_the_cap_evict_the_oldest_and_pages_are_served() {
    // An idle timeout long enough that only eviction can close the oldest soon.
    let idle_timeout = Duration::from_secs(5);
    let site = site_with(10, idle_timeout).await;
    let prober = probe(site.srv.addr(), &site.clock, "http-idle");
    let mut idle = Vec::new();
    for _ in 0..3 * CAP {
        idle.push(TcpStream::connect(site.http).await.expect("connect"));
    }
    // The oldest are closed at once (well before the idle timeout) by the newer ones.
    for s in idle.iter_mut().take(2 * CAP) {
        assert!(closed_by_peer(s, idle_timeout / 2).await, "the oldest beyond the cap are evicted");
    }
    served(site.http).await;
    // The newest were evicted by those page requests, or close at the idle timeout.
    for s in idle.iter_mut().skip(2 * CAP) {
        assert!(closed_by_peer(s, idle_timeout * 3).await, "an idle connection outlived the idle timeout");
    }
    served(site.http).await;
    assert!(prober.finish().await >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_dripped_byte_by_byte_is_cut_at_the_deadline() {
    let site = site(10).await;
    let mut drippers = Vec::new();
    for _ in 0..CAP / 2 {
        let mut s = TcpStream::connect(site.http).await.expect("connect");
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await.expect("write");
        drippers.push(s);
    }
    let began = tokio::time::Instant::now();
    let mut open = drippers.len();
    while open > 0 {
        assert!(began.elapsed() < IDLE * 4, "a dripped request head outlived its deadline");
        open = 0;
        for s in &mut drippers {
            // A header line that never ends, a byte every 50 ms.
            if s.write_all(b"X").await.is_ok() && !closed_by_peer(s, Duration::from_millis(50)).await {
                open += 1;
            }
        }
        if began.elapsed() > IDLE / 2 {
            let (status, _) = get(site.http, "/pubkey").await;
            assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        }
    }
    served(site.http).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_request_heads_are_refused_and_nothing_else_is_disturbed() {
    let site = site(10).await;
    let huge = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "b".repeat(64 * 1024));
    let many: String = (0..=MAX_HEADERS).map(|i| format!("X-H{i}: v\r\n")).collect();
    let many = format!("GET / HTTP/1.1\r\nHost: x\r\n{many}\r\n");
    for request in [huge, many] {
        let mut s = TcpStream::connect(site.http).await.expect("connect");
        let _ = s.write_all(request.as_bytes()).await;
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(PATIENCE, s.read_to_end(&mut buf)).await.expect("closed in time");
        let answer = String::from_utf8_lossy(&buf);
        assert!(!answer.starts_with("HTTP/1.1 200"), "an oversized head is not served: {answer}");
    }
    served(site.http).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let site = site(10).await;
    let mut s = TcpStream::connect(site.http).await.expect("connect");
    s.write_all(b"GET /pubkey HTTP/1.1\r\nHost: x\r\n\r\n").await.expect("write");
    let mut buf = [0u8; 4096];
    let n = tokio::time::timeout(PATIENCE, s.read(&mut buf)).await.expect("an answer").expect("read");
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let began = tokio::time::Instant::now();
    assert!(closed_by_peer(&mut s, PATIENCE).await, "the idle keep-alive connection is closed");
    assert!(began.elapsed() < IDLE * 4, "at the idle timeout: {:?}", began.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_answers_is_cut_off() {
    let site = site(1000).await;
    let (_, body) = get(site.http, "/").await;
    let one = body.len();
    assert!(one > 100 * 1024, "a page of leases is large ({one} bytes)");
    // Forty pages asked at once on a connection with a tiny receive buffer,
    // and nothing read: the answers cannot all fit in the socket buffers.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("buffer size");
    let mut s = socket.connect(site.http).await.expect("connect");
    let requests = "GET / HTTP/1.1\r\nHost: x\r\n\r\n".repeat(40);
    s.write_all(requests.as_bytes()).await.expect("write");
    tokio::time::sleep(ANSWER * 4).await;
    served(site.http).await;
    // Now read: the server gave up on the connection at the answer deadline.
    let mut got = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    let read_all = async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
    };
    tokio::time::timeout(PATIENCE, read_all).await.expect("the connection ends");
    assert!(got < 40 * one * 9 / 10, "the server stopped answering a client that did not read ({got} bytes)");
}
