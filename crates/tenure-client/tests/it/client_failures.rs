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
    TenureStore::new(&format!("tenure://{addr}?timeout=300ms"), &OpenOptions::default()).expect("store")
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
    for (bad, why) in [
        ("spin=10001us", "spin=10001us is out of range: from 0s to 10ms"),
        ("spin=-1us", "spin=-1us is not a duration"),
        ("spin=fast", "spin=fast is not a duration"),
        ("spin=40", "spin=40 has no unit: write spin=40ms or spin=40s"),
        ("timeout=0ms", "timeout=0ms is out of range"),
        ("connections=65", "connections=65 is not a whole number from 1 to 64"),
    ] {
        let err = TenureStore::new(&format!("tenure://127.0.0.1:1?{bad}"), &OpenOptions::default())
            .expect_err("an invalid setting");
        assert!(matches!(err, Error::InvalidStore { .. }) && err.to_string().contains(why), "{bad}: {err}");
    }
    assert!(TenureStore::new("tenure://127.0.0.1:1?spin=0us&timeout=5s", &OpenOptions::default()).is_ok());
}

#[test]
fn the_old_spellings_are_refused_with_the_new_ones() {
    for (old, why) in [
        ("timeout_ms=500", "timeout_ms=500 is no longer read: write timeout=500ms"),
        ("spin_us=0", "spin_us=0 is no longer read: write spin=0us"),
        ("tls=1", "tls=1 is not a flag: write tls=true or tls=false"),
        ("allow_plaintext_auth=0", "allow_plaintext_auth=0 is not a flag"),
        ("tls=yes", "tls=yes is not a flag"),
    ] {
        let err = TenureStore::new(&format!("tenure://127.0.0.1:1?{old}"), &OpenOptions::default())
            .expect_err("an old spelling");
        assert!(err.to_string().contains(why), "{old}: {err}");
    }
    let err = TenureStore::new("tenure://127.0.0.1:1?timeuot=5s", &OpenOptions::default()).expect_err("a typo");
    assert!(err.to_string().contains("unknown option \"timeuot\"") && err.to_string().contains("timeout"), "{err}");
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
