//! The client against servers that misbehave: silent, gone, or speaking garbage.
//! Every waiting caller gets an error, and the next call reconnects.

use tenure_client::TenureStore;
use tenure_client::wire::{self, ErrorCode, MAX_REQUEST, PROTOCOL_VERSION, Response};
use tenure_core::{Error, LeaseName, LeaseStore, OpenOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Reads one request frame and returns its id.
async fn read_request(s: &mut TcpStream) -> Option<u32> {
    let mut buf = Vec::new();
    loop {
        if let Ok(Some(n)) = wire::frame_len(&buf, 4, MAX_REQUEST) {
            return wire::split_request(&buf[..n]).map(|(id, _)| id);
        }
        let mut chunk = [0u8; 4096];
        let k = s.read(&mut chunk).await.ok()?;
        if k == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..k]);
    }
}

async fn answer_hello(s: &mut TcpStream, server_time_us: u64) {
    let id = read_request(s).await.expect("hello");
    let mut out = Vec::new();
    let hello = Response::Hello {
        version: PROTOCOL_VERSION,
        public_key: [0; 32],
        max_lease_ms: 10_000,
        quarantine_left_ms: 0,
        started_us: 0,
    };
    wire::encode_response(&mut out, id, server_time_us, &hello);
    s.write_all(&out).await.expect("write hello");
}

/// A fake server that answers the hello, then behaves as `then` says.
async fn fake(then: &'static str) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            answer_hello(&mut s, if then == "far-future" { 1 << 63 } else { 1 }).await;
            match then {
                "silent" | "far-future" => {
                    let mut sink = Vec::new();
                    let _ = s.read_to_end(&mut sink).await;
                }
                "hang-up" => {
                    let _ = read_request(&mut s).await;
                    drop(s);
                }
                _ => {
                    let _ = read_request(&mut s).await;
                    let _ = s.write_all(&[0xff; 64]).await;
                }
            }
        }
    });
    (addr, task)
}

fn store(addr: std::net::SocketAddr) -> TenureStore {
    TenureStore::new(&format!("tenure://{addr}?timeout_ms=300"), &OpenOptions::default()).expect("store")
}

fn name() -> LeaseName {
    LeaseName::new("x").expect("name")
}

#[tokio::test]
async fn a_silent_server_fails_waiting_callers_after_the_timeout() {
    let (addr, task) = fake("silent").await;
    let s = store(addr);
    let n = name();
    let (a, b) = tokio::join!(s.inspect(&n), s.inspect(&n));
    for r in [a, b] {
        match r {
            Err(e @ Error::Store { .. }) => assert!(e.to_string().contains("answered nothing"), "{e}"),
            other => panic!("expected a store error, got {other:?}"),
        }
    }
    task.abort();
}

#[tokio::test]
async fn a_server_time_beyond_any_clock_neither_panics_the_client_nor_hangs_its_callers() {
    let (addr, task) = fake("far-future").await;
    let s = store(addr);
    let answer = tokio::time::timeout(std::time::Duration::from_secs(5), s.inspect(&name())).await;
    match answer {
        Ok(Err(e @ Error::Store { .. })) => assert!(e.to_string().contains("answered nothing"), "{e}"),
        other => panic!("expected the timeout's store error, got {other:?}"),
    }
    task.abort();
}

#[tokio::test]
async fn a_server_that_hangs_up_mid_call_gives_an_error_and_the_next_call_reconnects() {
    let (addr, task) = fake("hang-up").await;
    let s = store(addr);
    for _ in 0..2 {
        match s.inspect(&name()).await {
            Err(e @ Error::Store { .. }) => assert!(e.to_string().contains("closed"), "{e}"),
            other => panic!("expected a store error, got {other:?}"),
        }
    }
    task.abort();
}

#[tokio::test]
async fn a_server_speaking_garbage_is_dropped_with_a_clear_error() {
    let (addr, task) = fake("garbage").await;
    let s = store(addr);
    match s.list("").await {
        Err(e @ Error::Store { .. }) => assert!(e.to_string().contains("bad frame"), "{e}"),
        other => panic!("expected a store error, got {other:?}"),
    }
    task.abort();
}

#[tokio::test]
async fn nothing_listening_is_a_store_error_naming_the_address() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let err = store(addr).inspect(&name()).await.expect_err("nobody there");
    assert!(err.is_transient() && err.to_string().contains(&addr.to_string()), "{err}");
}

#[test]
fn a_spin_outside_its_range_is_refused_naming_the_parameter() {
    for bad in ["spin_us=10001", "spin_us=-1", "spin_us=fast"] {
        let err = TenureStore::new(&format!("tenure://127.0.0.1:1?{bad}"), &OpenOptions::default())
            .expect_err("an invalid spin");
        assert!(matches!(err, Error::InvalidStore { .. }) && err.to_string().contains(bad), "{bad}: {err}");
    }
    assert!(TenureStore::new("tenure://127.0.0.1:1?spin_us=0", &OpenOptions::default()).is_ok());
}

#[tokio::test]
async fn a_request_that_crosses_the_servers_idle_close_is_sent_again() {
    // The first connection is closed as idle when the request arrives (the
    // server read nothing more); the second answers it.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        for connection in 0.. {
            let Ok((mut s, _)) = listener.accept().await else { return };
            answer_hello(&mut s, 1).await;
            let Some(id) = read_request(&mut s).await else { continue };
            let mut out = Vec::new();
            let resp = if connection == 0 {
                wire::encode_response(
                    &mut out,
                    0,
                    1,
                    &Response::Error { code: ErrorCode::Idle, message: "idle".into() },
                );
                s.write_all(&out).await.expect("write");
                continue;
            } else {
                Response::Names { names: vec!["x".into()], more: false }
            };
            wire::encode_response(&mut out, id, 1, &resp);
            s.write_all(&out).await.expect("write");
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink).await;
        }
    });
    let names = store(addr).list("").await.expect("the listing is sent again on a new connection");
    assert_eq!(names, vec![name()]);
    task.abort();
}
