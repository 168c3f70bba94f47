//! Fuzzing the lease server's wire protocol from both ends.
//!
//! - The codec: frame lengths, and postcard decoding of requests (what a server
//!   reads) and responses (what a client reads) from arbitrary bytes, from
//!   mutated valid encodings and from generated messages: never a panic, memory
//!   bounded by the input, and what decodes re-encodes to the same message.
//! - A real server on loopback fed mutated frame streams: every answer is a
//!   well-formed frame, the connection ends when the client stops, and the
//!   server keeps serving a normal client.
//! - A real client ([`TenureStore`]) against a fake server that answers with
//!   mutated or arbitrary frames: every call returns (an answer or an error)
//!   within its timeout, and nothing panics, not even in the client's tasks.
//!
//! `PROPTEST_CASES=20000 cargo nextest run -p tenure-server -E 'test(/^fuzz_wire::/)'`
//! for a long run.

use crate::common;
use crate::fuzz_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fuzz_support::{bytes, config, mutate, mutations, peak_during};
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use tenure_core::{AcquireRequest, EndedHow, Holder, LeaseName, LeaseStore, ManualClock, Mode, OpenOptions};
use tenure_server::wire::{
    self, AcquireReply, AskWire, BreakNoteWire, ErrorCode, GrantWire, HolderOwned, HolderViewWire, HolderWire, MAGIC,
    MAX_REQUEST, MAX_RESPONSE, Outcome, PROTOCOL_VERSION, PredecessorWire, RefWire, ReleaseWire, RenewWire, Request,
    Response, StateWire,
};
use tenure_server::{CoreOptions, ServerOptions, TenureStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Generous bound for a peer to react; asserted outcomes never depend on speed.
const PATIENCE: Duration = Duration::from_secs(20);

/// Most a decoder may allocate for `input` bytes. (postcard hints no sequence
/// length longer than the bytes left, so serde reserves nothing for a length
/// field that lies.)
fn allowance(input: usize) -> usize {
    8 * input + 64 * 1024
}

// ---------------------------------------------------------------------------
// Generated messages, encoded (postcard bodies, no frame header).

fn s(max: usize) -> BoxedStrategy<String> {
    prop_oneof![4 => proptest::string::string_regex(&format!("[a-z0-9/._-]{{0,{max}}}")).expect("regex"), 1 => any::<String>()]
        .boxed()
}

fn num() -> BoxedStrategy<u64> {
    prop_oneof![Just(0u64), Just(u64::MAX), Just(1 << 50), any::<u64>()].boxed()
}

fn holder_owned() -> BoxedStrategy<HolderOwned> {
    (s(16), any::<u32>(), s(8), s(8), s(8), proptest::option::of(s(8)))
        .prop_map(|(nonce, pid, host, user, version, label)| HolderOwned { nonce, pid, host, user, version, label })
        .boxed()
}

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![Just(Mode::Exclusive), Just(Mode::Shared)]
}

fn request_body() -> BoxedStrategy<Vec<u8>> {
    let ask = (s(24), mode(), num(), holder_owned(), any::<bool>(), proptest::option::of(s(16)));
    let reference = (s(24), num(), proptest::option::of(num()), s(16));
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>(), proptest::option::of(bytes(16))).prop_map(|(magic, version, auth)| {
            encode_request(&Request::Hello { magic, version, auth: auth.as_deref() })
        }),
        (any::<bool>(), proptest::collection::vec(ask, 0..4)).prop_map(|(tentative, asks)| {
            let asks: Vec<_> =
                asks.into_iter().map(|(n, m, t, h, r, meta)| (n, m, t, Holder::from(h), r, meta)).collect();
            let asks = asks
                .iter()
                .map(|(name, mode, ttl_ms, h, retake, meta)| AskWire {
                    name,
                    mode: *mode,
                    ttl_ms: *ttl_ms,
                    holder: HolderWire::of(h),
                    retake: *retake,
                    meta: meta.as_deref(),
                })
                .collect();
            encode_request(&Request::Acquire { tentative, asks })
        }),
        (proptest::collection::vec(reference.clone(), 0..4), 0u8..3, num(), proptest::option::of(num())).prop_map(
            |(refs, kind, n, w)| {
                let refs: Vec<RefWire<'_>> = refs
                    .iter()
                    .map(|(name, token, reservation, nonce)| RefWire {
                        name,
                        token: *token,
                        reservation: *reservation,
                        nonce,
                    })
                    .collect();
                match kind {
                    0 => encode_request(&Request::Upgrade(refs)),
                    1 => encode_request(&Request::Renew(
                        refs.into_iter().map(|grant| RenewWire { grant, ttl_ms: n }).collect(),
                    )),
                    _ => encode_request(&Request::Release(
                        refs.into_iter()
                            .map(|grant| ReleaseWire { grant, dropped: n % 2 == 0, watermark_ms: w, meta: None })
                            .collect(),
                    )),
                }
            }
        ),
        (s(24), any::<u32>(), num(), proptest::option::of(num()), 0u8..4).prop_map(
            |(name, limit, version, only, kind)| {
                match kind {
                    0 => encode_request(&Request::Inspect(&name)),
                    1 => encode_request(&Request::List { prefix: &name, limit, after: Some(&name) }),
                    2 => encode_request(&Request::Break {
                        name: &name,
                        version,
                        only_token: only,
                        note: (version % 2 == 0).then(|| BreakNoteWire {
                            by: HolderWire {
                                nonce: &name,
                                pid: limit,
                                host: &name,
                                user: "u",
                                version: "v",
                                label: None,
                            },
                            reason: Some(&name),
                        }),
                    }),
                    _ => encode_request(&Request::Ping),
                }
            }
        ),
    ]
    .boxed()
}

fn encode_request(r: &Request<'_>) -> Vec<u8> {
    postcard::to_allocvec(r).expect("a request encodes")
}

fn encode_response(r: &Response) -> Vec<u8> {
    postcard::to_allocvec(r).expect("a response encodes")
}

fn predecessor() -> BoxedStrategy<PredecessorWire> {
    let how =
        prop_oneof![Just(EndedHow::Released), Just(EndedHow::Expired), Just(EndedHow::Broken), Just(EndedHow::Corrupt)];
    (num(), proptest::option::of(holder_owned()), how, num(), proptest::option::of(num()), proptest::option::of(s(12)))
        .prop_map(|(token, holder, how, at_ms, watermark_ms, meta)| PredecessorWire {
            token,
            holder: holder.clone(),
            how,
            at_ms,
            watermark_ms,
            acquired_ms: at_ms.checked_sub(1),
            broken: holder.clone().filter(|_| how == EndedHow::Broken).map(|h| (h, meta.clone())),
            meta,
        })
        .boxed()
}

/// A `GrantWire`'s fields (it is not `Clone`, as strategy values must be).
type GrantParts = (u64, u64, u64, Option<PredecessorWire>, Vec<u8>);

fn grant_wire() -> BoxedStrategy<GrantParts> {
    (num(), num(), num(), proptest::option::of(predecessor()), bytes(48)).boxed()
}

fn to_grant(
    (token, deadline_ms, version, predecessor, witness): (u64, u64, u64, Option<PredecessorWire>, Vec<u8>),
) -> GrantWire {
    GrantWire { token, deadline_ms, version, predecessor, witness }
}

fn view() -> BoxedStrategy<HolderViewWire> {
    (holder_owned(), mode(), num(), num(), num(), num(), proptest::option::of(num()))
        .prop_map(|(holder, mode, token, deadline_ms, ttl_ms, expires_in_ms, acquired_ms)| HolderViewWire {
            holder,
            mode,
            token,
            deadline_ms,
            ttl_ms,
            expires_in_ms,
            acquired_ms,
        })
        .boxed()
}

fn response_body() -> BoxedStrategy<Vec<u8>> {
    let code = prop_oneof![
        Just(ErrorCode::Protocol),
        Just(ErrorCode::Invalid),
        Just(ErrorCode::Overloaded),
        Just(ErrorCode::Changed),
        Just(ErrorCode::Quarantine),
        Just(ErrorCode::Nothing),
        Just(ErrorCode::Version),
        Just(ErrorCode::Unauthorized)
    ];
    prop_oneof![
        (any::<u16>(), any::<[u8; 32]>(), num(), num(), num()).prop_map(
            |(version, public_key, max_lease_ms, quarantine_left_ms, started_us)| {
                encode_response(&Response::Hello { version, public_key, max_lease_ms, quarantine_left_ms, started_us })
            }
        ),
        proptest::collection::vec(grant_wire(), 0..3).prop_map(|gs| encode_response(&Response::Acquired(
            AcquireReply::Granted(gs.into_iter().map(to_grant).collect())
        ))),
        (any::<u32>(), proptest::collection::vec(view(), 0..3), num()).prop_map(|(index, holders, version)| {
            encode_response(&Response::Acquired(AcquireReply::Busy { index, holders, version }))
        }),
        num().prop_map(|left_ms| encode_response(&Response::Acquired(AcquireReply::Quarantine { left_ms }))),
        proptest::collection::vec(
            prop_oneof![grant_wire().prop_map(|g| Outcome::Ok(to_grant(g))), s(12).prop_map(Outcome::Lost)].boxed(),
            0..3
        )
        .prop_map(|os| encode_response(&Response::Granted(os))),
        proptest::collection::vec(any::<bool>(), 0..4).prop_map(|r| encode_response(&Response::Released(r))),
        (
            proptest::option::of(num()),
            proptest::option::of(num()),
            proptest::collection::vec(view(), 0..2),
            proptest::collection::vec(view(), 0..2),
            num(),
            proptest::option::of(num()),
            proptest::option::of(predecessor())
        )
            .prop_map(|(version, modified_ms, holders, expired, last_token, watermark_ms, last)| {
                encode_response(&Response::State(Box::new(StateWire {
                    version,
                    modified_ms,
                    holders,
                    expired,
                    last_token,
                    watermark_ms,
                    last,
                })))
            }),
        (proptest::collection::vec(s(20), 0..5), any::<bool>())
            .prop_map(|(names, more)| encode_response(&Response::Names { names, more })),
        Just(encode_response(&Response::Done)),
        Just(encode_response(&Response::Pong)),
        (code, s(20)).prop_map(|(code, message)| encode_response(&Response::Error { code, message })),
    ]
    .boxed()
}

// ---------------------------------------------------------------------------
// The codec.

fn check_request_decoding(body: &[u8]) -> Result<(), TestCaseError> {
    let (decoded, peak) = peak_during(|| postcard::from_bytes::<Request<'_>>(body).map(|r| encode_request(&r)));
    prop_assert!(peak <= allowance(body.len()), "{peak} bytes allocated to decode a request of {}", body.len());
    if let Ok(again) = decoded {
        // Decoding what was re-encoded gives the same message again.
        let twice = postcard::from_bytes::<Request<'_>>(&again).map(|r| encode_request(&r));
        prop_assert_eq!(twice.ok(), Some(again));
    }
    Ok(())
}

fn check_response_decoding(body: &[u8]) -> Result<(), TestCaseError> {
    let (decoded, peak) = peak_during(|| postcard::from_bytes::<Response>(body).map(|r| encode_response(&r)));
    prop_assert!(peak <= allowance(body.len()), "{peak} bytes allocated to decode a response of {}", body.len());
    if let Ok(again) = decoded {
        let twice = postcard::from_bytes::<Response>(&again).map(|r| encode_response(&r));
        prop_assert_eq!(twice.ok(), Some(again));
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn frame_lengths_are_within_bounds_or_refused(buf in bytes(64), min in 0usize..32, extra in 0usize..1 << 20) {
        let max = min + 4 + extra;
        match wire::frame_len(&buf, min, max) {
            Ok(Some(n)) => prop_assert!(n >= 4 + min && n <= max && n <= buf.len(), "{n} of {}", buf.len()),
            Ok(None) => {}
            Err(why) => prop_assert!(why.contains("frame length")),
        }
        if let Ok(Some(n)) = wire::frame_len(&buf, 4, MAX_REQUEST) {
            let (id, body) = wire::split_request(&buf[..n]).expect("a delimited frame has its header");
            let _ = (id, check_request_decoding(body)?);
        }
        if let Ok(Some(n)) = wire::frame_len(&buf, 12, MAX_RESPONSE) {
            prop_assert!(wire::split_response(&buf[..n]).is_some());
        }
    }

    #[test]
    fn arbitrary_bodies_never_panic_a_decoder(body in bytes(256)) {
        check_request_decoding(&body)?;
        check_response_decoding(&body)?;
    }

    #[test]
    fn generated_requests_round_trip_and_survive_mutation(body in request_body(), m in mutations(3)) {
        let decoded = postcard::from_bytes::<Request<'_>>(&body).map(|r| encode_request(&r));
        prop_assert_eq!(decoded.ok(), Some(body.clone()));
        check_request_decoding(&mutate(&body, &m))?;
    }

    #[test]
    fn generated_responses_round_trip_and_survive_mutation(body in response_body(), m in mutations(3)) {
        let decoded = postcard::from_bytes::<Response>(&body).map(|r| encode_response(&r));
        prop_assert_eq!(decoded.ok(), Some(body.clone()));
        check_response_decoding(&mutate(&body, &m))?;
    }
}

#[test]
fn sequence_lengths_claiming_billions_reserve_a_bounded_amount() {
    // Acquire { tentative: false, asks: <2^32 - 1 asks> } in 7 bytes; and the
    // same for a response's list of names and a state's holders. (The request
    // read as a response, and the responses read as requests, are refused or are
    // a message followed by ignored bytes: see `bytes_after_a_message_are_refused`.)
    let varint_max = [0xff, 0xff, 0xff, 0xff, 0x0f];
    let acquire = [&[1u8, 0][..], &varint_max].concat();
    let names = [&[5u8][..], &varint_max].concat();
    let state = [&[4u8, 0, 0][..], &varint_max].concat();
    for (what, body) in [("acquire", &acquire), ("names", &names), ("state", &state)] {
        let (r, peak) = peak_during(|| postcard::from_bytes::<Response>(body).is_ok());
        assert!(!r || what == "acquire", "{what}");
        assert!(peak <= allowance(body.len()), "{what}: {peak} bytes reserved for a response of {} bytes", body.len());
        let (r, peak) = peak_during(|| postcard::from_bytes::<Request<'_>>(body).is_ok());
        assert!(!r || what != "acquire", "{what}");
        assert!(peak <= allowance(body.len()), "{what}: {peak} bytes reserved for a request of {} bytes", body.len());
    }
}

// ---------------------------------------------------------------------------
// A real server fed mutated frame streams.

fn frame_request(id: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + body.len());
    out.extend_from_slice(&u32::try_from(4 + body.len()).expect("small").to_le_bytes());
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// Parses everything a server sent: well-formed response frames only.
fn parse_answers(mut buf: &[u8]) -> Result<Vec<Response>, TestCaseError> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let n = match wire::frame_len(buf, 12, MAX_RESPONSE) {
            Ok(Some(n)) => n,
            other => return Err(TestCaseError::fail(format!("a bad or cut answer frame: {other:?}"))),
        };
        let (_, _, body) = wire::split_response(&buf[..n]).ok_or_else(|| TestCaseError::fail("short frame"))?;
        out.push(postcard::from_bytes(body).map_err(|e| TestCaseError::fail(format!("undecodable answer: {e}")))?);
        buf = &buf[n..];
    }
    Ok(out)
}

async fn ping(addr: std::net::SocketAddr) -> bool {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let mut bytes =
        frame_request(1, &encode_request(&Request::Hello { magic: MAGIC, version: PROTOCOL_VERSION, auth: None }));
    bytes.extend(frame_request(2, &encode_request(&Request::Ping)));
    s.write_all(&bytes).await.expect("write");
    s.shutdown().await.expect("half-close");
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, s.read_to_end(&mut buf)).await;
    parse_answers(&buf).is_ok_and(|a| matches!(a.get(1), Some(Response::Pong)))
}

#[test]
fn mutated_request_streams_get_well_formed_answers_and_the_server_keeps_serving() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let clock = ManualClock::new();
    let opts = ServerOptions {
        io_timeout: Duration::from_secs(2),
        idle_timeout: Duration::from_secs(5),
        ..ServerOptions::default()
    };
    let server = rt.block_on(common::start(clock.shared(), CoreOptions::new(common::MAX_LEASE), opts));
    clock.advance(common::MAX_LEASE + Duration::from_secs(1));
    let addr = server.addr();
    let mut runner = TestRunner::new(config(150));
    let inputs = (proptest::collection::vec(request_body(), 1..4), mutations(3), any::<bool>(), any::<bool>());
    let outcome = runner.run(&inputs, |(bodies, muts, greet, mutate_all)| {
        let mut stream = Vec::new();
        if greet {
            stream.extend(frame_request(
                1,
                &encode_request(&Request::Hello { magic: MAGIC, version: PROTOCOL_VERSION, auth: None }),
            ));
        }
        let start = stream.len();
        for (i, b) in bodies.iter().enumerate() {
            stream.extend(frame_request(i as u32 + 2, b));
        }
        // Mutate the frames after the hello (lengths and ids included), or all.
        let stream = if mutate_all {
            mutate(&stream, &muts)
        } else {
            [&stream[..start], &mutate(&stream[start..], &muts)].concat()
        };
        rt.block_on(async {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            let _ = s.write_all(&stream).await;
            let _ = s.shutdown().await;
            let mut buf = Vec::new();
            let read = tokio::time::timeout(PATIENCE, s.read_to_end(&mut buf)).await;
            prop_assert!(read.is_ok(), "the server must end the connection once the client has stopped");
            parse_answers(&buf)?;
            Ok(())
        })
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
    assert!(rt.block_on(ping(addr)), "the server still serves a normal client");
    rt.block_on(server.shutdown());
}

// ---------------------------------------------------------------------------
// A real client against a fake server that answers with damaged frames.

static PANICS: AtomicUsize = AtomicUsize::new(0);

/// What the fake server does with the client's first request after the hello.
#[derive(Clone, Debug)]
enum Answer {
    /// A damaged hello answer instead of a good one.
    BadHello(Vec<u8>),
    /// A good hello, then this body in a correct frame with the request's id.
    Body(Vec<u8>),
    /// A good hello, then these raw bytes.
    Raw(Vec<u8>),
}

/// What a server says to a hello, encoded.
fn good_hello() -> Vec<u8> {
    let hello =
        Response::Hello { version: 1, public_key: [7; 32], max_lease_ms: 10_000, quarantine_left_ms: 0, started_us: 1 };
    encode_response(&hello)
}

fn answer() -> impl Strategy<Value = (Answer, bool)> {
    let hello = good_hello();
    let a = prop_oneof![
        1 => mutations(3).prop_map(move |m| Answer::BadHello(mutate(&hello, &m))),
        4 => (response_body(), proptest::option::of(mutations(2))).prop_map(|(b, m)| Answer::Body(m.map_or(b.clone(), |m| mutate(&b, &m)))),
        1 => bytes(64).prop_map(Answer::Body),
        1 => bytes(64).prop_map(Answer::Raw),
    ];
    // Mostly hang up after answering (the client sees the close at once);
    // sometimes keep the connection open, so the client's timeout must end it.
    (a, proptest::bool::weighted(0.1))
}

async fn read_frame(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(u32, usize)> {
    loop {
        if let Ok(Some(n)) = wire::frame_len(buf, 4, MAX_REQUEST) {
            let id = wire::split_request(&buf[..n]).map(|(id, _)| id)?;
            buf.drain(..n);
            return Some((id, n));
        }
        let mut chunk = [0u8; 4096];
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
        }
    }
}

fn frame_response(id: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&u32::try_from(12 + body.len()).expect("small").to_le_bytes());
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&1_767_225_600_000_000u64.to_le_bytes());
    out.extend_from_slice(body);
    out
}

async fn fake_server(listener: Arc<TcpListener>, answer: Answer, hold: bool) {
    let Ok((mut s, _)) = listener.accept().await else { return };
    let mut buf = Vec::new();
    let Some((hello_id, _)) = read_frame(&mut s, &mut buf).await else { return };
    let reply = match &answer {
        Answer::BadHello(b) => frame_response(hello_id, b),
        Answer::Body(_) | Answer::Raw(_) => frame_response(hello_id, &good_hello()),
    };
    let _ = s.write_all(&reply).await;
    if !matches!(answer, Answer::BadHello(_))
        && let Some((id, _)) = read_frame(&mut s, &mut buf).await
    {
        let bytes = match answer {
            Answer::Body(b) => frame_response(id, &b),
            Answer::Raw(b) => b,
            Answer::BadHello(_) => Vec::new(),
        };
        let _ = s.write_all(&bytes).await;
    }
    if hold {
        // Until the client gives up (its timeout) and closes.
        let mut sink = [0u8; 1024];
        while let Ok(Ok(n)) = tokio::time::timeout(PATIENCE, s.read(&mut sink)).await {
            if n == 0 {
                break;
            }
        }
    }
}

#[test]
fn damaged_answers_from_a_server_end_every_client_call_without_a_panic() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        previous(info);
    }));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let listener = Arc::new(rt.block_on(TcpListener::bind("127.0.0.1:0")).expect("bind"));
    let addr = listener.local_addr().expect("addr");
    let req = acquire_request();
    let mut runner = TestRunner::new(config(200));
    let outcome = runner.run(&(answer(), 0u8..4), |((answer, hold), op)| {
        // F5 (the client adds a server's quarantine to its clock unchecked) has its
        // own ignored reproducer below; left out here until it is fixed.
        if let Answer::Body(b) = &answer
            && let Ok(Response::Acquired(AcquireReply::Quarantine { left_ms })) = postcard::from_bytes::<Response>(b)
        {
            prop_assume!(left_ms < u64::MAX / 2);
        }
        PANICS.store(0, Ordering::SeqCst);
        rt.block_on(async {
            let url = format!("tenure://{addr}?timeout=300ms&spin=0us");
            let store =
                TenureStore::new(&url, &OpenOptions::default()).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let fake = tokio::spawn(fake_server(listener.clone(), answer, hold));
            let call = async {
                match op {
                    0 => store.try_acquire(&req).await.map(|_| ()),
                    1 => store.inspect(&req.name).await.map(|_| ()),
                    2 => store.list("").await.map(|_| ()),
                    _ => store.try_acquire_all(std::slice::from_ref(&req)).await.map(|_| ()),
                }
            };
            let done = tokio::time::timeout(PATIENCE, call).await;
            // Dropping the store closes its connection, which ends the fake server.
            drop(store);
            let ended = tokio::time::timeout(PATIENCE, fake).await;
            prop_assert!(done.is_ok(), "a client call must end (answer or error) within its timeout");
            prop_assert!(ended.is_ok(), "the client must close its connection when dropped");
            prop_assert_eq!(PANICS.load(Ordering::SeqCst), 0, "nothing may panic, not even the client's tasks");
            Ok(())
        })
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

fn acquire_request() -> AcquireRequest {
    AcquireRequest {
        name: LeaseName::new("fuzz/lease").expect("name"),
        mode: Mode::Exclusive,
        ttl: Duration::from_secs(5),
        holder: Arc::new(Holder::current()),
        retake: false,
        meta: None,
    }
}

/// A server (or anything on its address) that answers an acquisition with
/// `Quarantine { left_ms: u64::MAX }` gets an error, not a panic or a wrapped
/// deadline (fuzz/FINDINGS.md, F5).
#[test]
fn a_quarantine_of_u64_max_from_the_server_is_an_error_not_a_panic() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async {
        let listener = Arc::new(TcpListener::bind("127.0.0.1:0").await.expect("bind"));
        let url = format!("tenure://{}?timeout=2000ms", listener.local_addr().expect("addr"));
        let body = encode_response(&Response::Acquired(AcquireReply::Quarantine { left_ms: u64::MAX }));
        let fake = tokio::spawn(fake_server(listener, Answer::Body(body), false));
        let store = TenureStore::new(&url, &OpenOptions::default()).expect("store");
        let req = acquire_request();
        let call = tokio::spawn(async move { store.try_acquire(&req).await.map(|_| ()) });
        assert!(call.await.is_ok(), "the client must not panic on a server's number");
        let _ = fake.await;
    });
}

/// `postcard::from_bytes` stops after one message and ignores what follows;
/// tenure's decoder refuses it, so each request and answer has one encoding
/// (fuzz/FINDINGS.md, N5).
#[test]
fn bytes_after_a_message_are_refused() {
    let mut body = encode_request(&Request::Ping);
    assert!(tenure_server::wire::decode::<Request<'_>>(&body).is_ok());
    body.extend_from_slice(b"junk");
    assert!(tenure_server::wire::decode::<Request<'_>>(&body).is_err(), "a ping followed by junk");
}
