//! Numbers on the wire, checked on both sides: a client's absurd numbers get an
//! `Invalid` answer naming the field (and the connection stays open); a hostile
//! server's absurd answers give the client a clear error, never a panic or a
//! wrapped deadline. Also what version 2 of the protocol carries: the
//! predecessor's acquisition time, and a refusal at the top of the token space.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::abuse::{exchange, frame, hello};
use tenure_core::limits::{MAX_TIME_MS, MAX_TOKEN};
use tenure_core::{Attempt, Error, Holder, LeaseName, LeaseStore, ManualClock, Mode, OpenOptions, ReleaseRequest};
use tenure_server::wire::{
    self, AcquireReply, AskWire, BreakNoteWire, ErrorCode, GrantWire, HolderViewWire, HolderWire, MAX_REQUEST,
    PROTOCOL_VERSION, RefWire, ReleaseWire, RenewWire, Request, Response, StateWire,
};
use tenure_server::{CoreOptions, ServerOptions, TenureStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[tokio::test]
async fn absurd_numbers_from_a_client_are_refused_naming_the_field() {
    let clock = ManualClock::new();
    let srv = common::start_open(&clock).await;
    let mut s = TcpStream::connect(srv.addr()).await.expect("connect");
    let holder = HolderWire { nonce: "abc", pid: 1, host: "h", user: "u", version: "0", label: None };
    let ask = |ttl_ms| AskWire { name: "n", mode: Mode::Exclusive, ttl_ms, holder, retake: false, meta: None };
    let grant = |token| RefWire { name: "n", token, reservation: None, nonce: "abc" };
    let long = "x".repeat(300);
    let reason = "r".repeat(1025);
    let cases: Vec<(Request<'_>, &str)> = vec![
        (
            Request::Acquire { tentative: false, asks: vec![ask(1000), ask(u64::MAX)] },
            "asks[1].ttl_ms 18446744073709551615",
        ),
        (Request::Acquire { tentative: false, asks: vec![ask(0)] }, "asks[0].ttl_ms 0"),
        (Request::Acquire { tentative: false, asks: vec![ask(9)] }, "asks[0].ttl_ms 9"),
        (
            Request::Acquire { tentative: false, asks: vec![ask(common::MAX_LEASE.as_millis() as u64 + 1)] },
            "--max-lease",
        ),
        (Request::Renew(vec![RenewWire { grant: grant(u64::MAX), ttl_ms: 1000 }]), "items[0].token"),
        (Request::Renew(vec![RenewWire { grant: grant(5), ttl_ms: u64::MAX }]), "items[0].ttl_ms"),
        (
            Request::Release(vec![ReleaseWire {
                grant: grant(5),
                dropped: false,
                watermark_ms: Some(MAX_TIME_MS + 1),
                meta: None,
            }]),
            "items[0].watermark_ms",
        ),
        (Request::Upgrade(vec![grant(MAX_TOKEN)]), "refs[0].token"),
        (Request::Break { name: "n", version: u64::MAX, only_token: Some(u64::MAX), note: None }, "only_token"),
        (
            Request::Break {
                name: "n",
                version: 1,
                only_token: None,
                note: Some(BreakNoteWire { by: holder, reason: Some(&reason) }),
            },
            "break reason is 1025 bytes",
        ),
        (
            Request::Renew(vec![RenewWire { grant: RefWire { name: &long, ..grant(5) }, ttl_ms: 1000 }]),
            "items[0].name is 300 bytes",
        ),
        // Decoded keeping one past the bound, whatever the count sent.
        (
            Request::Acquire { tentative: false, asks: (0..wire::MAX_BATCH + 1000).map(|_| ask(1000)).collect() },
            "a batch of more than 512 leases",
        ),
        (
            Request::Renew((0..wire::MAX_BATCH + 1000).map(|_| RenewWire { grant: grant(5), ttl_ms: 1000 }).collect()),
            "a batch of more than 512 leases",
        ),
        (Request::List { prefix: "", limit: 10, after: Some(&long) }, "cursor"),
        (Request::List { prefix: &long, limit: 10, after: None }, "prefix"),
    ];
    let mut bytes = hello();
    for (i, (req, _)) in cases.iter().enumerate() {
        bytes.extend(frame(u32::try_from(i).expect("id") + 2, req));
    }
    bytes.extend(frame(1000, &Request::Ping));
    let answers = exchange(&mut s, &bytes, cases.len() + 2).await;
    for ((_, field), answer) in cases.iter().zip(&answers[1..]) {
        match answer {
            Response::Error { code: ErrorCode::Invalid, message } => {
                assert!(message.contains(field), "{message:?} should name {field:?}");
            }
            other => panic!("expected an Invalid error naming {field}, got {other:?}"),
        }
    }
    assert!(matches!(answers.last(), Some(Response::Pong)), "the connection stays open: {answers:?}");
    // A limit of u32::MAX is only a wish: the page stays bounded.
    let answers = exchange(&mut s, &frame(2000, &Request::List { prefix: "", limit: u32::MAX, after: None }), 1).await;
    assert!(matches!(&answers[0], Response::Names { more: false, .. }), "{answers:?}");
}

#[tokio::test]
async fn a_lease_at_the_top_of_the_token_space_is_refused_as_exhausted_not_wrapped() {
    // A server clock so far ahead that its time in µs passes MAX_TOKEN: every
    // token would have to be at least that.
    let clock = ManualClock::starting_at(MAX_TOKEN / 1000 + 1_000);
    let opts = ServerOptions::default();
    let srv = common::start(clock.shared(), CoreOptions::new(common::MAX_LEASE), opts).await;
    clock.advance(common::MAX_LEASE + Duration::from_secs(1));
    let store = common::store(&[&srv], &clock);
    let me = Arc::new(Holder::current());
    match store.try_acquire(&common::req("top", &me)).await {
        Err(Error::TokensExhausted { name, last_token, .. }) => {
            assert_eq!(name, "top");
            assert!(last_token >= MAX_TOKEN - 1, "{last_token}");
        }
        other => panic!("expected TokensExhausted, got {other:?}"),
    }
    // The same through a batch names the lease that is exhausted.
    let reqs = [common::req("top/a", &me), common::req("top/b", &me)];
    assert!(matches!(store.try_acquire_all(&reqs).await, Err(Error::TokensExhausted { name, .. }) if name == "top/a"));
}

#[tokio::test]
async fn a_grant_carries_when_its_predecessor_was_acquired() {
    let clock = ManualClock::new();
    let srv = common::start_open(&clock).await;
    let store = common::store(&[&srv], &clock);
    let me = Arc::new(Holder::current());
    let first = match store.try_acquire(&common::req("pred", &me)).await.expect("acquire") {
        Attempt::Granted(g) => g,
        Attempt::Busy(b) => panic!("busy: {}", b.describe()),
    };
    clock.advance(Duration::from_secs(2));
    store.release(&first, &ReleaseRequest::default()).await.expect("release");
    let second = match store.try_acquire(&common::req("pred", &me)).await.expect("acquire") {
        Attempt::Granted(g) => g,
        Attempt::Busy(b) => panic!("busy: {}", b.describe()),
    };
    let pred = second.predecessor.expect("a predecessor");
    let began = first.deadline_ms - common::MAX_LEASE.as_millis() as u64;
    assert_eq!(pred.acquired_ms, Some(began), "the predecessor's grant began at its acquisition");
    assert_eq!(pred.token, first.token);
    let state = store.inspect(&LeaseName::new("pred").expect("name")).await.expect("inspect");
    assert_eq!(state.last.and_then(|l| l.acquired_ms), Some(began), "inspection reports it too");
}

/// What a fake server answers to each request after its hello.
type Answer = Arc<dyn Fn(&Request<'_>) -> Response + Send + Sync>;

/// A fake server: a normal hello (with `max_lease_ms`), then `answer` to everything.
async fn fake(max_lease_ms: u64, answer: Answer) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    fake_speaking(PROTOCOL_VERSION, max_lease_ms, answer).await
}

/// A fake server whose hello says it speaks protocol `version`.
async fn fake_speaking(version: u16, max_lease_ms: u64, answer: Answer) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    while let Ok(Some(n)) = wire::frame_len(&buf, 4, MAX_REQUEST) {
                        let frame: Vec<u8> = buf.drain(..n).collect();
                        let Some((id, body)) = wire::split_request(&frame) else { return };
                        let Ok(req) = postcard::from_bytes::<Request<'_>>(body) else { return };
                        let resp = match req {
                            Request::Hello { .. } => Response::Hello {
                                version,
                                public_key: [0; 32],
                                max_lease_ms,
                                quarantine_left_ms: 0,
                                started_us: 0,
                            },
                            ref other => answer(other),
                        };
                        let mut out = Vec::new();
                        wire::encode_response(&mut out, id, 1, &resp);
                        if s.write_all(&out).await.is_err() {
                            return;
                        }
                    }
                    let mut chunk = [0u8; 4096];
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(k) => buf.extend_from_slice(&chunk[..k]),
                    }
                }
            });
        }
    });
    (addr, task)
}

fn client(addr: SocketAddr) -> TenureStore {
    TenureStore::new(&format!("tenure://{addr}?timeout=2000ms"), &OpenOptions::default()).expect("store")
}

fn out_of_range(what: &str, r: Result<impl std::fmt::Debug, Error>, field: &str) {
    match r {
        Err(e @ Error::Store { .. }) => {
            let m = e.to_string();
            assert!(m.contains("out of range") && m.contains(field), "{what}: {m:?} should name {field:?}");
        }
        other => panic!("{what}: expected a store error naming {field}, got {other:?}"),
    }
}

fn view(token: u64, deadline_ms: u64, ttl_ms: u64, expires_in_ms: u64) -> HolderViewWire {
    HolderViewWire {
        holder: wire::HolderOwned {
            nonce: "n".into(),
            pid: 1,
            host: "h".into(),
            user: "u".into(),
            version: "0".into(),
            label: None,
        },
        mode: Mode::Exclusive,
        token,
        deadline_ms,
        ttl_ms,
        expires_in_ms,
        acquired_ms: Some(1),
    }
}

#[tokio::test]
async fn a_hostile_servers_absurd_answers_are_clear_client_errors() {
    let me = Arc::new(Holder::current());
    let name = LeaseName::new("x").expect("name");
    let grant = |token, deadline_ms| GrantWire { token, deadline_ms, version: 1, predecessor: None, witness: vec![] };
    let cases: Vec<(&str, Answer)> = vec![
        ("token", Arc::new(move |_: &Request<'_>| Response::Acquired(AcquireReply::Granted(vec![grant(u64::MAX, 5)])))),
        ("token", Arc::new(move |_: &Request<'_>| Response::Acquired(AcquireReply::Granted(vec![grant(0, 5)])))),
        (
            "deadline_ms",
            Arc::new(move |_: &Request<'_>| Response::Acquired(AcquireReply::Granted(vec![grant(7, u64::MAX)]))),
        ),
        (
            "expires_in_ms",
            Arc::new(|_: &Request<'_>| {
                let holders = vec![view(7, 5, 1000, u64::MAX)];
                Response::Acquired(AcquireReply::Busy { index: u32::MAX, holders, version: 1 })
            }),
        ),
        (
            "acquired_ms",
            Arc::new(|_: &Request<'_>| {
                let holders = vec![HolderViewWire { acquired_ms: Some(u64::MAX), ..view(7, 5, 1000, 1000) }];
                Response::Acquired(AcquireReply::Busy { index: 0, holders, version: 1 })
            }),
        ),
        ("left_ms", Arc::new(|_: &Request<'_>| Response::Acquired(AcquireReply::Quarantine { left_ms: u64::MAX }))),
    ];
    for (field, answer) in cases {
        let (addr, task) = fake(10_000, answer).await;
        let r = client(addr).try_acquire(&common::req("x", &me)).await;
        out_of_range("acquire", r, field);
        task.abort();
    }
    let state = |deadline_ms, last_token| {
        move |_: &Request<'_>| {
            Response::State(Box::new(StateWire {
                version: Some(1),
                modified_ms: Some(1),
                holders: vec![view(7, deadline_ms, 1000, 1000)],
                expired: vec![],
                last_token,
                watermark_ms: None,
                last: None,
            }))
        }
    };
    for (field, deadline_ms, last_token) in [("deadline_ms", u64::MAX, 7), ("last_token", 5, u64::MAX)] {
        let (addr, task) = fake(10_000, Arc::new(state(deadline_ms, last_token))).await;
        out_of_range("inspect", client(addr).inspect(&name).await, field);
        task.abort();
    }
    // A server of another protocol version, which answered the hello anyway.
    let (addr, task) = fake_speaking(1, 10_000, Arc::new(|_: &Request<'_>| Response::Pong)).await;
    match client(addr).inspect(&name).await {
        Err(e @ Error::Unsupported { .. }) => assert!(e.to_string().contains("protocol 1"), "{e}"),
        other => panic!("expected a version refusal, got {other:?}"),
    }
    task.abort();
    // A hello promising leases of 500 million years.
    let (addr, task) = fake(u64::MAX, Arc::new(|_: &Request<'_>| Response::Pong)).await;
    out_of_range("hello", client(addr).inspect(&name).await, "max_lease_ms");
    task.abort();
}

#[tokio::test]
async fn a_hostile_servers_listing_cannot_loop_or_disorder_the_client() {
    // Pages that never end: the same name again and again.
    let (addr, task) =
        fake(10_000, Arc::new(|_: &Request<'_>| Response::Names { names: vec!["a".into()], more: true })).await;
    out_of_range("list", client(addr).list("").await, "out of order");
    task.abort();
    // An empty page that says more follow.
    let (addr, task) = fake(10_000, Arc::new(|_: &Request<'_>| Response::Names { names: vec![], more: true })).await;
    out_of_range("list", client(addr).list("").await, "empty page");
    task.abort();
    // A name outside the prefix, and a name that is not a lease name.
    let (addr, task) =
        fake(10_000, Arc::new(|_: &Request<'_>| Response::Names { names: vec!["b/1".into()], more: false })).await;
    out_of_range("list", client(addr).list("a/").await, "prefix");
    task.abort();
    let (addr, task) =
        fake(10_000, Arc::new(|_: &Request<'_>| Response::Names { names: vec!["../x".into()], more: false })).await;
    out_of_range("list", client(addr).list("").await, "..");
    task.abort();
    // Pages that make progress are followed to the end.
    let (addr, task) = fake(
        10_000,
        Arc::new(|req: &Request<'_>| {
            let Request::List { after, .. } = req else { return Response::Pong };
            let next: u32 = after.map_or(0, |a| a.trim_start_matches('n').parse::<u32>().unwrap_or(0) + 1);
            Response::Names { names: vec![format!("n{next:05}")], more: next < 20 }
        }),
    )
    .await;
    let names = client(addr).list("").await.expect("a listing of 21 pages");
    assert_eq!(names.len(), 21);
    task.abort();
}
