//! The `tenure://` client against a hostile or broken server, over real
//! sockets: a server that never answers a queued wait, drips an answer,
//! chatters under ids nobody asked, floods tiny frames, sends numbers no
//! working server sends, or a listing far longer than asked; a peer that is no
//! lease server at all; and callers cancelled at every point of a call.

use crate::fuzz_support;

use std::io::{Read as _, Write as _};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure_client::TenureStore;
use tenure_client::wire::{
    self, AcquireReply, GrantWire, MAX_REQUEST, PROTOCOL_VERSION, PredecessorWire, Request, Response,
};
use tenure_core::{AcquireRequest, Attempt, EndedHow, Holder, LeaseName, LeaseStore, Mode, OpenOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use fuzz_support::peak_during;

/// Reads one request frame: its id and body.
async fn read_request(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(u32, Vec<u8>)> {
    loop {
        if let Ok(Some(n)) = wire::frame_len(buf, 4, MAX_REQUEST) {
            let frame: Vec<u8> = buf.drain(..n).collect();
            return wire::split_request(&frame).map(|(id, body)| (id, body.to_vec()));
        }
        let mut chunk = [0u8; 4096];
        let k = s.read(&mut chunk).await.ok()?;
        if k == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..k]);
    }
}

fn hello_answer() -> Response {
    Response::Hello {
        version: PROTOCOL_VERSION,
        public_key: [0; 32],
        max_lease_ms: 60_000,
        quarantine_left_ms: 0,
        started_us: 0,
    }
}

fn frame(id: u32, resp: &Response) -> Vec<u8> {
    let mut out = Vec::new();
    wire::encode_response(&mut out, id, 1, resp);
    out
}

async fn answer_hello(s: &mut TcpStream, buf: &mut Vec<u8>) {
    let (id, _) = read_request(s, buf).await.expect("hello");
    s.write_all(&frame(id, &hello_answer())).await.expect("write hello");
}

/// A fake server for one connection: it answers the hello, then `serve`s
/// the socket (with what is left of its read buffer).
async fn fake<F, Fut>(serve: F) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>)
where
    F: FnOnce(TcpStream, Vec<u8>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        let mut buf = Vec::new();
        answer_hello(&mut s, &mut buf).await;
        serve(s, buf).await;
    });
    (addr, task)
}

/// A fake server answering each request with `answer` (none: no answer).
async fn answering(
    answer: impl Fn(&Request<'_>) -> Option<Response> + Send + 'static,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    fake(move |mut s, mut buf| async move {
        while let Some((id, body)) = read_request(&mut s, &mut buf).await {
            let Some(resp) = wire::decode::<Request<'_>>(&body).ok().and_then(|r| answer(&r)) else { continue };
            if s.write_all(&frame(id, &resp)).await.is_err() {
                return;
            }
        }
    })
    .await
}

/// `inspect` at the server at `addr` (connection timeout 300 ms) ends with an
/// error within 3 s: what the server did (`what`) does not hold it longer.
async fn inspect_fails_in_time(addr: std::net::SocketAddr, what: &str) {
    let s = store(addr, 300);
    let started = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(3), s.inspect(&LeaseName::new("x").expect("name"))).await;
    assert!(matches!(r, Ok(Err(_))), "inspect at a server that {what}: {r:?} after {:?}", started.elapsed());
}

fn store(addr: std::net::SocketAddr, timeout_ms: u64) -> TenureStore {
    TenureStore::new(&format!("tenure://{addr}?timeout={timeout_ms}ms"), &OpenOptions::default()).expect("store")
}

fn req(name: &str) -> AcquireRequest {
    AcquireRequest {
        name: LeaseName::new(name).expect("name"),
        mode: Mode::Exclusive,
        ttl: Duration::from_secs(5),
        holder: Arc::new(Holder::current()),
        retake: false,
        meta: None,
    }
}

fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970");
    u64::try_from(since.as_millis()).expect("in range")
}

/// A queued wait asks the server to answer within `wait_ms`; at a server that
/// never does (a bug, a lost answer, a hostile one) it fails soon after that
/// plus the connection's timeout, never waiting for ever.
#[tokio::test]
async fn a_queued_wait_the_server_never_answers_ends_soon_after_its_wait_ms() {
    // Reads everything (the connection stays healthy), answers nothing.
    let (addr, task) = answering(|_| None).await;
    let s = store(addr, 300);
    let started = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(5), s.acquire_queued(&req("x"), Duration::from_millis(200))).await;
    assert!(matches!(r, Ok(Some(Err(_)))), "a wait of 200 ms, never answered: {r:?} after {:?}", started.elapsed());
    task.abort();
}

/// A server that drips an answer one byte at a time, each byte within the
/// connection's timeout, does not hold a call past that timeout.
#[tokio::test]
async fn a_server_dripping_its_answer_does_not_hold_a_call_past_its_timeout() {
    let (addr, task) = fake(|mut s, mut buf| async move {
        let (id, _) = read_request(&mut s, &mut buf).await.expect("request");
        // A frame that says 12 + 100000 bytes follow, then one byte every 100 ms.
        let mut head = Vec::new();
        head.extend_from_slice(&(12u32 + 100_000).to_le_bytes());
        head.extend_from_slice(&id.to_le_bytes());
        s.write_all(&head).await.expect("head");
        while s.write_all(&[0]).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    inspect_fails_in_time(addr, "drips its answer a byte every 100 ms").await;
    task.abort();
}

/// A server that never answers a request but keeps saying other things
/// (answers under ids nobody asked) does not hold the call past the timeout.
#[tokio::test]
async fn answers_to_unknown_ids_do_not_keep_an_unanswered_call_alive() {
    let (addr, task) = fake(|mut s, mut buf| async move {
        let _ = read_request(&mut s, &mut buf).await.expect("request");
        while s.write_all(&frame(0xDEAD_BEEF, &Response::Pong)).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    inspect_fails_in_time(addr, "answers only ids nobody asked, every 100 ms").await;
    task.abort();
}

fn read_request_blocking(s: &mut std::net::TcpStream, buf: &mut Vec<u8>) -> Option<u32> {
    loop {
        if let Ok(Some(n)) = wire::frame_len(buf, 4, MAX_REQUEST) {
            let frame: Vec<u8> = buf.drain(..n).collect();
            return wire::split_request(&frame).map(|(id, _)| id);
        }
        let mut chunk = [0u8; 4096];
        let k = s.read(&mut chunk).ok()?;
        if k == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..k]);
    }
}

/// A grant whose token is not above its own predecessor's: tokens strictly
/// increase, so no working server sends it, and the client refuses it.
#[tokio::test]
async fn a_grant_whose_token_is_below_its_predecessors_is_refused() {
    let (addr, task) = answering(|r| {
        Some(match r {
            Request::Acquire { .. } => Response::Acquired(AcquireReply::Granted(vec![GrantWire {
                token: 5,
                deadline_ms: now_ms() + 5_000,
                version: 1,
                predecessor: Some(PredecessorWire {
                    token: 1_000_000,
                    holder: None,
                    how: EndedHow::Released,
                    at_ms: now_ms(),
                    watermark_ms: None,
                    meta: None,
                    acquired_ms: None,
                    broken: None,
                }),
                witness: vec![],
            }])),
            _ => Response::Done,
        })
    })
    .await;
    let s = store(addr, 2000);
    match s.try_acquire(&req("x")).await {
        Ok(Attempt::Granted(g)) => panic!(
            "accepted grant token {} whose predecessor had token {}",
            g.token,
            g.predecessor.as_ref().map(|p| p.token).unwrap_or(0)
        ),
        Ok(Attempt::Busy(b)) => panic!("busy: {}", b.describe()),
        Err(e) => assert!(e.to_string().contains("is not above its predecessor's 1000000"), "{e}"),
    }
    task.abort();
}

/// A server flooding tiny frames (16 bytes, ids nobody asked) once the first
/// request came, on its own thread, until the client's socket closes.
fn flooding_server() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut buf = Vec::new();
        let id = read_request_blocking(&mut s, &mut buf).expect("hello");
        s.write_all(&frame(id, &hello_answer())).expect("hello answer");
        let _ = read_request_blocking(&mut s, &mut buf);
        let mut chunk = Vec::new();
        for _ in 0..65_536 {
            chunk.extend_from_slice(&12u32.to_le_bytes());
            chunk.extend_from_slice(&0xDEAD_BEEFu32.to_le_bytes());
            chunk.extend_from_slice(&1u64.to_le_bytes());
        }
        while s.write_all(&chunk).is_ok() {}
    });
    addr
}

/// While a server floods tiny frames, a 1 s timeout around `inspect` (on a
/// store at `query`) on the runtime `rt` still fires: the reader
/// gives the runtime its turn, and the process's timers keep running.
fn a_flood_leaves_the_runtime_its_timers(mut rt: tokio::runtime::Builder, query: &str) {
    let addr = flooding_server();
    let url = format!("tenure://{addr}?timeout=300ms{query}");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = rt.enable_all().build().expect("runtime");
        let started = Instant::now();
        rt.block_on(async {
            let s = TenureStore::new(&url, &OpenOptions::default()).expect("store");
            let _ = tokio::time::timeout(Duration::from_secs(1), s.inspect(&LeaseName::new("x").expect("name"))).await;
        });
        let _ = tx.send(started.elapsed());
        // A runtime whose reader never yielded would not shut down either.
        std::mem::forget(rt);
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(took) => assert!(took < Duration::from_secs(5), "took {took:?}"),
        Err(_) => panic!("a 1 s timeout around inspect had not fired after 10 s of the flood"),
    }
}

#[test]
fn a_flood_of_tiny_frames_does_not_wedge_a_current_thread_runtime() {
    a_flood_leaves_the_runtime_its_timers(tokio::runtime::Builder::new_current_thread(), "");
}

/// The plain read path (`readable()` + `try_read_buf`), without the spin.
#[test]
fn a_flood_with_spin_off_does_not_wedge_the_runtime_either() {
    a_flood_leaves_the_runtime_its_timers(tokio::runtime::Builder::new_current_thread(), "&spin=0us");
}

/// Two workers, as a CLI's.
#[test]
fn a_flood_of_tiny_frames_does_not_freeze_a_multi_thread_runtime() {
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.worker_threads(2);
    a_flood_leaves_the_runtime_its_timers(rt, "");
}

/// Polls `f` at most `n` times (yielding between), then drops it.
async fn cancel_after_polls<F: std::future::Future>(f: F, n: usize) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    for _ in 0..n {
        if let std::task::Poll::Ready(v) = futures::poll!(f.as_mut()) {
            return Some(v);
        }
        tokio::task::yield_now().await;
    }
    None
}

/// Many callers on one connection, cancelled at every point of their call
/// (leaders before they sent, waits before and after their answer): the
/// connection keeps serving, and a last call is answered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_cancelled_anywhere_never_wedge_the_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let acc = accepts.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            acc.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                answer_hello(&mut s, &mut buf).await;
                while let Some((id, body)) = read_request(&mut s, &mut buf).await {
                    let resp = match wire::decode::<Request<'_>>(&body) {
                        Ok(Request::Wait { .. }) => continue,
                        Ok(Request::Unwait { .. }) => Response::Done,
                        _ => Response::Waiters(1),
                    };
                    if s.write_all(&frame(id, &resp)).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let s = Arc::new(store(addr, 2000));
    let name = LeaseName::new("x").expect("name");
    s.waiting(&name).await.expect("first call");
    let mut tasks = Vec::new();
    for t in 0..32usize {
        let s = s.clone();
        let name = name.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..2000usize {
                let n = (i * 7 + t) % 7;
                if (i + t) % 5 == 0 {
                    let r = req("x");
                    let _ = cancel_after_polls(s.acquire_queued(&r, Duration::from_secs(60)), n).await;
                } else {
                    let _ = cancel_after_polls(s.waiting(&name), n).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let started = Instant::now();
    let last = tokio::time::timeout(Duration::from_secs(3), s.waiting(&name)).await;
    assert!(matches!(last, Ok(Ok(Some(1)))), "last call after {:?}: {last:?}", started.elapsed());
    assert_eq!(accepts.load(std::sync::atomic::Ordering::SeqCst), 1, "the connection was given up");
    task.abort();
}

/// A renewal answered for another grant (a different token) is refused, not
/// taken as a renewal of the client's own.
#[tokio::test]
async fn a_renewal_answered_with_another_token_is_refused() {
    use tenure_client::wire::Outcome;
    let g = |token| GrantWire { token, deadline_ms: now_ms() + 5_000, version: 1, predecessor: None, witness: vec![] };
    let (addr, task) = answering(move |r| {
        Some(match r {
            Request::Acquire { .. } => Response::Acquired(AcquireReply::Granted(vec![g(7)])),
            Request::Renew(_) => Response::Granted(vec![Outcome::Ok(g(3))]),
            _ => Response::Done,
        })
    })
    .await;
    let s = store(addr, 2000);
    let Attempt::Granted(g) = s.try_acquire(&req("x")).await.expect("acquire") else { panic!("busy") };
    assert_eq!(g.token, 7);
    match s.renew(&g).await {
        Ok(r) => panic!("renewal of token 7 answered for token 3 was accepted as a renewal of token {}", r.token),
        Err(e) => assert!(e.to_string().contains("the renewal of token 7 came back for token 3"), "{e}"),
    }
    task.abort();
}

/// A peer that is no tenure lease server: for each connection, it reads what
/// the client sends first (its hello) and answers `answer`, then closes.
/// Returns its address and how many connections it took.
async fn not_a_lease_server(
    answer: &'static [u8],
) -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let acc = accepts.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            acc.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut hello = [0u8; 4096];
            let _ = s.read(&mut hello).await;
            let _ = s.write_all(answer).await;
        }
    });
    (addr, accepts, task)
}

/// `inspect` at `addr` fails at once, with a permanent error naming the
/// address and saying `says`, after one connection: asking again cannot help.
async fn refused_as_not_a_lease_server(
    addr: std::net::SocketAddr,
    accepts: &std::sync::atomic::AtomicUsize,
    says: &str,
) {
    let r =
        tokio::time::timeout(Duration::from_secs(5), store(addr, 2000).inspect(&LeaseName::new("x").expect("name")))
            .await
            .expect("an answer within 5 s");
    let e = r.expect_err("no lease server there");
    let text = e.to_string();
    assert!(text.contains(&addr.to_string()) && text.contains(says), "{text}");
    assert!(!e.is_transient(), "not a lease server is no transient failure: {text}");
    assert_eq!(accepts.load(std::sync::atomic::Ordering::SeqCst), 1, "connected again to a non-server: {text}");
}

/// An HTTP server (a `tenure serve --http` port, or any web server) answers
/// the hello with a 400: the client says it answered in HTTP, not that a
/// frame was bad.
#[tokio::test]
async fn an_http_server_is_named_as_not_a_lease_server() {
    let answer = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
    let (addr, accepts, task) = not_a_lease_server(answer).await;
    refused_as_not_a_lease_server(addr, &accepts, "answered in HTTP: not a tenure lease server").await;
    task.abort();
}

/// A peer answering the hello with garbage (random bytes, fixed here, whose
/// first four are no frame length) is no lease server either.
#[tokio::test]
async fn a_peer_answering_garbage_is_named_as_not_a_lease_server() {
    const GARBAGE: [u8; 64] = {
        // xorshift32 from a fixed seed: the same "random" bytes every run.
        let (mut out, mut x, mut i) = ([0u8; 64], 0x9E37_79B9u32, 0);
        while i < out.len() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            out[i] = x as u8;
            i += 1;
        }
        out
    };
    let (addr, accepts, task) = not_a_lease_server(&GARBAGE).await;
    refused_as_not_a_lease_server(addr, &accepts, "not a tenure lease server").await;
    task.abort();
}

/// A TLS port (a plaintext client at `tenure://` without `tls=true`, pointed
/// at some HTTPS server) answers the hello with an alert record, whose first
/// four bytes read as a plausible frame length, and hangs up: a first frame
/// cut short is no lease server either.
#[tokio::test]
async fn a_tls_port_answering_with_an_alert_is_named_as_not_a_lease_server() {
    // A TLS 1.2 record: alert, fatal, protocol_version.
    let (addr, accepts, task) = not_a_lease_server(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46]).await;
    refused_as_not_a_lease_server(addr, &accepts, "not a tenure lease server").await;
    task.abort();
}

/// A server that answers the hello, then the first request with a frame of
/// `body` (a postcard `Response`), on its own thread (whose allocations the
/// meter does not count), until the client's socket closes.
fn answering_once_with(body: Vec<u8>) -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut buf = Vec::new();
        let id = read_request_blocking(&mut s, &mut buf).expect("hello");
        s.write_all(&frame(id, &hello_answer())).expect("hello answer");
        let id = read_request_blocking(&mut s, &mut buf).expect("request");
        let len = u32::try_from(12 + body.len()).expect("a frame length");
        let mut out = Vec::with_capacity(16 + body.len());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&1u64.to_le_bytes());
        out.extend_from_slice(&body);
        let _ = s.write_all(&out);
        while read_request_blocking(&mut s, &mut buf).is_some() {}
    });
    addr
}

/// A page of a listing as long as the largest frame can carry: millions of
/// empty names, one byte each on the wire but 24 in memory as a `String`
/// (about 200 MiB for one 8 MiB frame). The client asked for at most
/// `MAX_LIST_PAGE` names: it keeps no more than that while decoding, and
/// refuses the page, saying why.
#[test]
fn a_listing_page_of_millions_of_names_is_refused_without_holding_them() {
    let names = wire::MAX_RESPONSE - 64;
    // Response::Names { names: <`names` empty names>, more: false }: its
    // variant tag from the real encoding, then the count, the names, `more`.
    let empty = postcard::to_extend(&Response::Names { names: vec![], more: false }, Vec::new()).expect("encode");
    let mut body = postcard::to_extend(&(empty[0], names), Vec::new()).expect("encode");
    body.resize(body.len() + names, 0);
    body.push(0);
    let addr = answering_once_with(body);
    // The client's tasks run on this thread, where the meter counts.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let (r, peak) = peak_during(|| rt.block_on(store(addr, 10_000).list("")));
    // The frame itself, in the read buffer it grew in (8 MiB, up to twice
    // that while growing), and room to spare: far below the page as Strings.
    assert!(peak < 4 * wire::MAX_RESPONSE, "{} MiB allocated to refuse one 8 MiB page", peak >> 20);
    let e = r.expect_err("a page of millions of names, asked for 10000");
    assert!(e.to_string().contains("more than 10000 names in one page"), "{e}");
}

/// An acquisition answered with millions of grants, five bytes each on the
/// wire (about 250 each decoded): the client keeps no more than a batch's
/// worth while decoding, and refuses the answer with a short error.
#[test]
fn an_acquisition_answered_with_millions_of_grants_is_refused_without_holding_them() {
    let grants = (wire::MAX_RESPONSE - 64) / 5;
    // Response::Acquired(AcquireReply::Granted(<`grants` grants>)): the two
    // variant tags from the real encoding, the count, then each grant (token,
    // deadline, version, no predecessor, an empty witness).
    let empty = postcard::to_extend(&Response::Acquired(AcquireReply::Granted(vec![])), Vec::new()).expect("encode");
    let mut body = postcard::to_extend(&(empty[0], empty[1], grants), Vec::new()).expect("encode");
    for _ in 0..grants {
        body.extend_from_slice(&[1, 1, 1, 0, 0]);
    }
    let addr = answering_once_with(body);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let (r, peak) = peak_during(|| rt.block_on(store(addr, 10_000).try_acquire(&req("many"))));
    assert!(peak < 4 * wire::MAX_RESPONSE, "{} MiB allocated to refuse one 8 MiB answer", peak >> 20);
    let e = r.expect_err("millions of grants for one ask");
    assert!(e.to_string().len() < 2_000, "an error of {} bytes", e.to_string().len());
}

/// An error answer with a message of megabytes: the caller's error quotes a
/// few lines of it, marked as cut.
#[test]
fn a_megabyte_error_message_is_quoted_in_a_few_lines() {
    let message = "x".repeat(wire::MAX_RESPONSE - 64);
    let body = postcard::to_extend(&Response::Error { code: wire::ErrorCode::Overloaded, message }, Vec::new())
        .expect("encode");
    let addr = answering_once_with(body);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let e = rt.block_on(store(addr, 10_000).try_acquire(&req("loud"))).expect_err("an error answer");
    let text = e.to_string();
    assert!(text.len() < 2_000 && text.ends_with("xxx…"), "an error of {} bytes: {}", text.len(), &text[..200]);
}

/// A peer of another kind that says nothing to the hello and keeps the
/// connection open: it sends `banner` on connecting (nothing: a silent
/// listener; an SSH banner; a MySQL-like greeting, whose first bytes read as a
/// plausible frame), then reads and never answers. The client names it as no
/// lease server within about a second (the hello's own deadline), not after
/// its 10 s timeout.
#[tokio::test]
async fn a_peer_silent_after_the_hello_is_named_as_not_a_lease_server_within_a_second() {
    let mysql: &'static [u8] = b"\x4a\x00\x00\x00\x0a8.0.36\x00\x08\x00\x00\x00abcdefgh\x00\xff\xf7\x21\x02\x00\xff\xdf\x15\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00ijklmnopqrst\x00mysql_native_password\x00";
    for banner in [&b""[..], b"SSH-2.0-OpenSSH_9.6\r\n", mysql] {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            let mut open = Vec::new();
            loop {
                let Ok((mut s, _)) = listener.accept().await else { return };
                let _ = s.write_all(banner).await;
                let mut hello = [0u8; 4096];
                let _ = s.read(&mut hello).await;
                open.push(s);
            }
        });
        let asked = std::time::Instant::now();
        let r = tokio::time::timeout(
            Duration::from_secs(5),
            store(addr, 10_000).inspect(&LeaseName::new("x").expect("name")),
        )
        .await
        .expect("named within 5 s, not after the 10 s timeout");
        let text = r.expect_err("no lease server there").to_string();
        assert!(text.contains(&addr.to_string()) && text.contains("not a tenure lease server"), "{text}");
        assert!(asked.elapsed() < Duration::from_secs(5), "{:?}: {text}", asked.elapsed());
        task.abort();
    }
}

/// A server that speaks `version` and answers each request with `answer`.
async fn speaking(
    version: u16,
    answer: impl Fn(&Request<'_>) -> Option<Response> + Send + 'static,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        let mut buf = Vec::new();
        let (id, _) = read_request(&mut s, &mut buf).await.expect("hello");
        let hello = match hello_answer() {
            Response::Hello { public_key, max_lease_ms, quarantine_left_ms, started_us, .. } => {
                Response::Hello { version, public_key, max_lease_ms, quarantine_left_ms, started_us }
            }
            other => other,
        };
        s.write_all(&frame(id, &hello)).await.expect("write hello");
        while let Some((id, body)) = read_request(&mut s, &mut buf).await {
            let Some(resp) = wire::decode::<Request<'_>>(&body).ok().and_then(|r| answer(&r)) else { continue };
            if s.write_all(&frame(id, &resp)).await.is_err() {
                return;
            }
        }
    });
    (addr, task)
}

/// A list of several servers places names by the servers' identities: one
/// speaking protocol 4, which has none, is refused clearly (naming it and the
/// version), and one whose identity is no identity is refused as hostile;
/// nothing is placed on a guess either way.
#[tokio::test]
async fn a_list_of_several_servers_needs_each_ones_identity() {
    let identified = |id: &'static str| {
        move |r: &Request<'_>| match r {
            Request::Identify => Some(Response::Identity(id.into())),
            _ => Some(Response::Error { code: wire::ErrorCode::Invalid, message: "placed nothing".into() }),
        }
    };
    for odd_one in [false, true] {
        let (good, t1) = speaking(PROTOCOL_VERSION, identified("server-a")).await;
        let (other, t2) = match odd_one {
            false => speaking(4, |_| None).await,
            true => speaking(PROTOCOL_VERSION, identified("two words")).await,
        };
        let says = if odd_one { "is not a server identity" } else { "protocol 4" };
        let s = TenureStore::new(&format!("tenure://{good},{other}?timeout=2000ms"), &OpenOptions::default())
            .expect("store");
        let r = tokio::time::timeout(Duration::from_secs(5), s.try_acquire(&req("x"))).await.expect("in time");
        let text = r.expect_err("nothing placed").to_string();
        assert!(text.contains(&other.to_string()) && text.contains(says), "{text}");
        assert_eq!(s.server_for("x"), None, "no placement learned: {text}");
        t1.abort();
        t2.abort();
    }
}
