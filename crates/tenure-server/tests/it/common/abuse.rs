//! Attackers and a normal client for the abuse tests, all over real sockets.
//!
//! The [`Prober`] is the normal client: every round it connects afresh (so its
//! hello has to get through whatever crowd the attackers made), acquires a
//! lease, renews it, releases it and lists it, and records whether the round
//! was served within [`SERVED_WITHIN`]. The attackers are slow-loris
//! connections that drip bytes ([`loris`]) and report how long each of their
//! connections lived.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tenure_core::{Attempt, Holder, LeaseName, LeaseStore, ManualClock, OpenOptions, ReleaseRequest, Released};
use tenure_server::TenureStore;
use tenure_server::wire::{self, MAGIC, PROTOCOL_VERSION, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A normal client's round must complete within this, whatever the attack (a
/// generous bound: the tests assert being served, not speed).
pub const SERVED_WITHIN: Duration = Duration::from_secs(10);

/// A hello frame.
pub fn hello() -> Vec<u8> {
    frame(1, &Request::Hello { magic: MAGIC, version: PROTOCOL_VERSION, auth: None })
}

/// A request frame.
pub fn frame(id: u32, req: &Request<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    wire::encode_request(&mut out, id, req);
    out
}

/// The normal client, running until [`Prober::finish`].
pub struct Prober {
    stop: Arc<AtomicBool>,
    task: JoinHandle<Vec<Result<Duration, String>>>,
}

/// Starts a normal client against the server at `addr`, whose lease names
/// start with `tag`.
pub fn probe(addr: SocketAddr, clock: &ManualClock, tag: &'static str) -> Prober {
    let stop = Arc::new(AtomicBool::new(false));
    let (stop2, clock) = (stop.clone(), clock.clone());
    let task = tokio::spawn(async move {
        let mut rounds = Vec::new();
        let mut i = 0u32;
        while !stop2.load(Ordering::Relaxed) || rounds.is_empty() {
            let started = Instant::now();
            let outcome = match tokio::time::timeout(SERVED_WITHIN, round(addr, &clock, tag, i)).await {
                Ok(Ok(())) => Ok(started.elapsed()),
                Ok(Err(e)) => Err(format!("round {i}: {e}")),
                Err(_) => Err(format!("round {i}: not served within {SERVED_WITHIN:?}")),
            };
            rounds.push(outcome);
            i += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        rounds
    });
    Prober { stop, task }
}

impl Prober {
    /// Stops the client and asserts that every one of its rounds was served.
    pub async fn finish(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        let rounds = self.task.await.expect("the prober task");
        let failed: Vec<&String> = rounds.iter().filter_map(|r| r.as_ref().err()).collect();
        assert!(failed.is_empty(), "the normal client was not served: {failed:?}");
        rounds.len()
    }
}

/// One round of a normal client on a fresh connection.
async fn round(addr: SocketAddr, clock: &ManualClock, tag: &str, i: u32) -> Result<(), String> {
    let url = format!("tenure://{addr}?timeout=5000ms");
    let store =
        TenureStore::new(&url, &OpenOptions::default().with_clock(clock.shared())).map_err(|e| e.to_string())?;
    let name = LeaseName::new(format!("{tag}/{i}")).map_err(|e| e.to_string())?;
    let req = super::req(name.as_str(), &Arc::new(Holder::current()));
    let grant = match store.try_acquire(&req).await.map_err(|e| format!("acquire: {e}"))? {
        Attempt::Granted(g) => g,
        Attempt::Busy(b) => return Err(format!("busy: {}", b.describe())),
    };
    let grant = store.renew(&grant).await.map_err(|e| format!("renew: {e}"))?;
    match store.release(&grant, &ReleaseRequest::default()).await.map_err(|e| format!("release: {e}"))? {
        Released::Released => {}
        other => return Err(format!("release: {other:?}")),
    }
    let listed = store.list(&format!("{tag}/")).await.map_err(|e| format!("list: {e}"))?;
    if !listed.contains(&name) {
        return Err(format!("list: {name} is missing"));
    }
    Ok(())
}

/// How one attacking connection ended.
#[derive(Debug, Clone, Copy)]
pub struct Ended {
    /// From its first byte sent to the server's close being seen.
    pub lived: Duration,
    /// Bytes it managed to send.
    pub sent: usize,
}

/// A slow-loris attacker: connects, sends `lead` at once, then drips `drip`
/// one byte every `every`, until the server closes the connection; then
/// connects again after `pause`. Runs until `stop`; returns how each
/// connection ended.
pub fn loris(
    addr: SocketAddr,
    lead: Vec<u8>,
    drip: Vec<u8>,
    every: Duration,
    pause: Duration,
    stop: Arc<AtomicBool>,
) -> JoinHandle<Vec<Ended>> {
    tokio::spawn(async move {
        let mut ended = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let Ok(mut s) = TcpStream::connect(addr).await else {
                tokio::time::sleep(pause).await;
                continue;
            };
            let began = Instant::now();
            let mut sent = 0;
            if s.write_all(&lead).await.is_ok() {
                sent += lead.len();
            }
            let mut bytes = drip.iter().cycle();
            let closed = loop {
                if stop.load(Ordering::Relaxed) {
                    break false;
                }
                if closed_by_peer(&mut s, every).await {
                    break true;
                }
                let Some(&b) = bytes.next() else { break false };
                if s.write_all(&[b]).await.is_err() {
                    break true;
                }
                sent += 1;
            };
            if closed {
                ended.push(Ended { lived: began.elapsed(), sent });
            }
            tokio::time::sleep(pause).await;
        }
        ended
    })
}

/// Waits `d` for the peer to close; reads (and drops) whatever it says.
pub async fn closed_by_peer(s: &mut TcpStream, d: Duration) -> bool {
    let deadline = Instant::now() + d;
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// Sends `bytes` and reads exactly `n` answers, leaving the connection open.
pub async fn exchange(s: &mut TcpStream, bytes: &[u8], n: usize) -> Vec<wire::Response> {
    s.write_all(bytes).await.expect("write");
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while out.len() < n {
        let mut chunk = [0u8; 16 * 1024];
        let k = tokio::time::timeout(SERVED_WITHIN, s.read(&mut chunk)).await.expect("an answer").expect("read");
        assert!(k > 0, "the server closed instead of answering (after {out:?})");
        buf.extend_from_slice(&chunk[..k]);
        while let Ok(Some(len)) = wire::frame_len(&buf, 12, wire::MAX_RESPONSE) {
            let (_, _, body) = wire::split_response(&buf[..len]).expect("frame");
            out.push(postcard::from_bytes(body).expect("a response"));
            buf.drain(..len);
        }
    }
    out
}

/// Everything the server says until it closes (a reset after the last answer
/// is a close too).
pub async fn last_words(s: &mut TcpStream) -> Vec<wire::Response> {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(SERVED_WITHIN, s.read_to_end(&mut buf)).await.expect("the server closes");
    parse_all(&buf)
}

/// The complete response frames in `rest`.
pub fn parse_all(mut rest: &[u8]) -> Vec<wire::Response> {
    let mut out = Vec::new();
    while let Ok(Some(len)) = wire::frame_len(rest, 12, wire::MAX_RESPONSE) {
        let (_, _, body) = wire::split_response(&rest[..len]).expect("frame");
        out.push(postcard::from_bytes(body).expect("a response"));
        rest = &rest[len..];
    }
    out
}

/// One HTTP GET on a fresh connection (`Connection: close`): the head and the
/// body, within [`SERVED_WITHIN`].
pub async fn http_get(addr: SocketAddr, path: &str) -> (String, String) {
    let exchange = async {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes())
            .await
            .expect("write");
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.expect("read");
        buf
    };
    let buf = tokio::time::timeout(SERVED_WITHIN, exchange).await.expect("an HTTP answer in time");
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    (head.to_string(), body.to_string())
}
