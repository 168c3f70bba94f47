//! One multiplexed, pipelined client connection to a lease server.
//!
//! Callers encode their request straight into a shared write buffer and wait on a
//! oneshot for the answer. The first caller to find no write under way becomes the
//! *leader* (flat combining): while callers whose answers just came in have not
//! yet added their next request, it yields (a few times at most), then it sends
//! everything with one non-blocking write, and again for what was added during
//! that write. A lone caller sends at once. The leader does not wait for all of
//! them: once half of the requests in flight are queued it sends those, so
//! that two chunks are in flight and the server decides one while this side
//! prepares the next (one chunk at a time made the two sides take turns, each idle
//! half the time). Only if the socket is full does the writer task take over, with
//! async writes. A reader task routes answers back by request id, all answers of a
//! read under one lock; while answers tend to come quickly, and no more than
//! [`SPIN_MAX_IN_FLIGHT`] requests are on their way, it polls for them briefly
//! before it sleeps (see `spin`).
//!
//! Requests have no timer each: the reader gives the server `timeout` to answer
//! *any* of the requests waiting (bytes that answer none — a frame dripped a
//! byte at a time, answers to ids nobody asked — do not count), and otherwise
//! declares the connection dead, failing every waiting caller (one timer for
//! the connection, re-armed when it fires early). Both tasks belong to the [`Conn`]: they end when it is
//! dropped, and when the socket fails every waiting caller gets the error at once
//! (the endpoint then reconnects on the next call; a request that crossed the
//! server's idle close, which the server never read, is sent again at once).
//!
//! Over TLS the socket is split into a read half for the reader and a write
//! half for the writer task, which then does every write (a TLS stream has no
//! non-blocking write for a leader to try); leaders still gather requests into
//! one write, and the reader's polls are single polls of the TLS stream.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use parking_lot::Mutex;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;
use tokio_rustls::client::TlsStream;

use crate::spin::{Spin, TryRead};
use crate::wire::{self, ErrorCode, MAX_RESPONSE, Request, Response};

mod read;

use read::read_loop;

/// An answer: the server's time and the response body.
pub(crate) type Reply = Result<(u64, Bytes), String>;

/// Request ids are distinct small integers: a multiply spreads them over the
/// table's buckets and tags at a fraction of SipHash's cost.
#[derive(Default, Clone, Copy)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, id: u32) {
        self.0 = u64::from(id).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Callers waiting for their answers, by request id, each with whether it is a
/// queued wait (see [`Conn::call_waiting`]).
type Pending = HashMap<u32, (oneshot::Sender<Reply>, bool), std::hash::BuildHasherDefault<IdHasher>>;

#[derive(Default)]
struct State {
    out: Vec<u8>,
    /// A leader or the writer task is sending: others only append to `out`.
    writing: bool,
    pending: Pending,
    /// How many of `pending` are queued waits: the server may rightly say
    /// nothing about them for a long time.
    parked: usize,
    next_id: u32,
    closed: Option<String>,
    /// Callers whose answers were handed over and who have not sent a request
    /// since (an estimate: each answer adds one, each request takes one away).
    /// A leader waits a little for them, so that one write carries their
    /// requests too; reset when they do not come.
    returning: usize,
    /// Requests added to `out` since it was last taken.
    queued: usize,
}

/// A connected socket: plaintext, or TLS over TCP.
pub(crate) enum Socket {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// The reader task's side of the socket.
enum Reader {
    Plain(Arc<TcpStream>),
    Tls(ReadHalf<Box<TlsStream<TcpStream>>>),
}

impl TryRead for Reader {
    fn try_read_buf(&mut self, buf: &mut BytesMut) -> std::io::Result<usize> {
        match self {
            Self::Plain(s) => s.try_read_buf(buf),
            Self::Tls(r) => crate::spin::read_now(r, buf),
        }
    }
}

impl Reader {
    /// Waits for data and reads it (a plaintext socket may still say
    /// `WouldBlock`, after a spurious wake-up). Cancel-safe.
    async fn read(&mut self, buf: &mut BytesMut) -> std::io::Result<usize> {
        match self {
            Self::Plain(s) => {
                s.readable().await?;
                s.try_read_buf(buf)
            }
            Self::Tls(r) => r.read_buf(buf).await,
        }
    }
}

/// The writer task's side of the socket.
enum Writer {
    Plain(Arc<TcpStream>),
    Tls(WriteHalf<Box<TlsStream<TcpStream>>>),
}

impl Writer {
    async fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Self::Plain(s) => {
                let mut sent = 0;
                while sent < buf.len() {
                    s.writable().await?;
                    match s.try_write(&buf[sent..]) {
                        Ok(n) => sent += n,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            }
            // What TLS has encrypted is held back until flushed.
            Self::Tls(w) => {
                w.write_all(buf).await?;
                w.flush().await
            }
        }
    }
}

struct Inner {
    /// The plaintext socket, which callers write to directly (see
    /// [`send_once`]); with TLS, every write goes through the writer task.
    direct: Option<Arc<TcpStream>>,
    timeout: Duration,
    /// The client's clock, for the skew.
    clock: Arc<dyn tenure_core::Clock>,
    state: Mutex<State>,
    wake_writer: Notify,
    /// Wakes an idle reader so that it starts timing the server's answer.
    request_sent: Notify,
    dead: AtomicBool,
    /// The server closed the connection as idle: requests that were waiting
    /// then were not handled.
    idle_closed: AtomicBool,
    /// Server time minus local wall time at the last answer, µs.
    skew_us: AtomicI64,
    /// The error the server closed the connection with, unasked (id 0).
    last_word: Mutex<Option<(ErrorCode, String)>>,
    /// The peer's first bytes were no tenure frame: it is not a lease server.
    not_a_server: AtomicBool,
}

impl Inner {
    /// Marks the connection dead and fails every waiting caller.
    fn close(&self, why: String) {
        self.dead.store(true, Ordering::Release);
        let pending = {
            let mut st = self.state.lock();
            st.closed.get_or_insert(why.clone());
            st.parked = 0;
            std::mem::take(&mut st.pending)
        };
        for (_, (tx, _)) in pending {
            let _ = tx.send(Err(why.clone()));
        }
    }
}

/// A connection and its two tasks.
pub(crate) struct Conn {
    /// It told its server the store's server list (see `TenureStore::placed_conn`).
    pub(crate) placed: AtomicBool,
    inner: Arc<Inner>,
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("dead", &self.is_dead()).finish()
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer.abort();
        self.inner.close("the connection was closed".into());
    }
}

impl Conn {
    /// Wraps a connected socket (`TCP_NODELAY` already set).
    pub(crate) fn start(socket: Socket, timeout: Duration, spin: Duration, clock: Arc<dyn tenure_core::Clock>) -> Self {
        let (direct, reader, writer) = match socket {
            Socket::Plain(stream) => {
                let stream = Arc::new(stream);
                (Some(stream.clone()), Reader::Plain(stream.clone()), Writer::Plain(stream))
            }
            Socket::Tls(stream) => {
                let (r, w) = tokio::io::split(stream);
                (None, Reader::Tls(r), Writer::Tls(w))
            }
        };
        let inner = Arc::new(Inner {
            direct,
            timeout,
            clock,
            state: Mutex::new(State::default()),
            wake_writer: Notify::new(),
            request_sent: Notify::new(),
            dead: AtomicBool::new(false),
            idle_closed: AtomicBool::new(false),
            skew_us: AtomicI64::new(0),
            last_word: Mutex::new(None),
            not_a_server: AtomicBool::new(false),
        });
        let reader = tokio::spawn(read_loop(inner.clone(), reader, Spin::new(spin)));
        let writer = tokio::spawn(write_loop(inner.clone(), writer));
        Self { placed: AtomicBool::new(false), inner, reader, writer }
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.inner.dead.load(Ordering::Acquire)
    }

    /// The server closed this connection as idle: a request that failed with
    /// it was never handled, and may be sent again on a new connection.
    pub(crate) fn closed_idle(&self) -> bool {
        self.inner.idle_closed.load(Ordering::Acquire)
    }

    /// The error the server closed the connection with, if it said one unasked
    /// (a refusal before the hello, an idle close).
    pub(crate) fn last_word(&self) -> Option<(ErrorCode, String)> {
        self.inner.last_word.lock().clone()
    }

    /// The peer's first bytes were no tenure frame (an HTTP answer, a banner,
    /// garbage): it is some other kind of server, and asking again cannot help.
    pub(crate) fn not_a_server(&self) -> bool {
        self.inner.not_a_server.load(Ordering::Acquire)
    }

    /// Server time minus local wall time, as of the last answer.
    pub(crate) fn skew_us(&self) -> i64 {
        self.inner.skew_us.load(Ordering::Relaxed)
    }

    /// Sends `req` and waits for its answer (or the connection's death), undecoded.
    pub(crate) async fn call_raw(&self, req: &Request<'_>) -> Result<(u64, Bytes), String> {
        self.send(req, false).await
    }

    /// Sends a [`Request::Wait`] and waits for its answer, however long the
    /// server keeps it queued: the server's silence about it is no sign of
    /// death (other requests and TCP keepalive probes still tell).
    /// A caller that gives up before the answer (dropping the future)
    /// withdraws the wait with a [`Request::Unwait`], so that the lease is not
    /// granted to nobody.
    pub(crate) async fn call_waiting(&self, req: &Request<'_>) -> Result<(u64, Bytes), String> {
        self.send(req, true).await
    }

    /// Sends `req` and does not wait for its answer: for a drop guard, which
    /// cannot wait. Nothing is sent on a closed connection.
    pub(crate) fn send_unanswered(&self, req: &Request<'_>) {
        let st = self.inner.state.lock();
        if st.closed.is_none() {
            unanswered(&self.inner, st, req);
        }
    }

    async fn send(&self, req: &Request<'_>, parked: bool) -> Result<(u64, Bytes), String> {
        let (tx, rx) = oneshot::channel();
        let (lead, first, id) = {
            let mut st = self.inner.state.lock();
            if let Some(why) = &st.closed {
                return Err(why.clone());
            }
            // Id 0 is the server's for errors that answer no request.
            let id = next_id(&mut st);
            wire::encode_request(&mut st.out, id, req);
            st.queued += 1;
            st.pending.insert(id, (tx, parked));
            st.parked += usize::from(parked);
            st.returning = st.returning.saturating_sub(1);
            let lead = !std::mem::replace(&mut st.writing, true);
            let first = !parked && st.pending.len() == st.parked + 1;
            (lead, first, id)
        };
        if first {
            self.inner.request_sent.notify_one();
        }
        let withdraw = parked.then(|| Withdraw { inner: &self.inner, id });
        if lead {
            self.lead().await;
        }
        let answer = rx.await.unwrap_or_else(|_| Err("the connection was closed".to_string()));
        std::mem::forget(withdraw);
        answer
    }
}

impl Conn {
    /// The leader's part: gathers the requests of callers on their way and sends
    /// them together, until nothing is left to send.
    ///
    /// A lone caller (nobody answered is still on the way: the common case at low
    /// concurrency) sends at once. Otherwise the leader yields while callers whose
    /// answers just came in have not added their next request, a few times at
    /// most: on a multi-threaded runtime they run on the other workers too, and
    /// every separate write is a syscall here and a wake-up of the server there.
    /// It stops waiting once half of the requests in flight are queued (two
    /// at least): the server starts on those while the rest are prepared. Requests
    /// added while a write was under way are sent the same way.
    async fn lead(&self) {
        let handover = Handover(&self.inner);
        loop {
            for round in 0..=MAX_LEADER_YIELDS {
                {
                    let st = self.inner.state.lock();
                    if st.returning == 0 || st.queued >= (st.pending.len() / CHUNKS_IN_FLIGHT).max(2) {
                        break;
                    }
                }
                if round == MAX_LEADER_YIELDS {
                    // They are not coming (callers that stopped, or do other work
                    // between requests): stop waiting for them.
                    self.inner.state.lock().returning = 0;
                    break;
                }
                tokio::task::yield_now().await;
            }
            if !send_once(&self.inner) {
                break;
            }
        }
        std::mem::forget(handover);
    }
}

/// The next request id. Id 0 is the server's, for errors that answer no request.
/// After 2^32 requests the ids wrap, and a request may still wait under an
/// early one (a queued wait lasts up to a day): that id is skipped, or the
/// newcomer would take its caller's place in `pending` and its answer. The
/// loop ends: far fewer than 2^32 - 1 requests can wait at once.
fn next_id(st: &mut State) -> u32 {
    loop {
        st.next_id = st.next_id.wrapping_add(1).max(1);
        if !st.pending.contains_key(&st.next_id) {
            return st.next_id;
        }
    }
}

/// A queued wait whose caller gave up before its answer: dropping this
/// withdraws it on the server ([`Request::Unwait`]), sent like any request.
struct Withdraw<'a> {
    inner: &'a Inner,
    id: u32,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        let mut st = self.inner.state.lock();
        if st.closed.is_some() {
            return;
        }
        // Still waiting; or answered, the answer not yet taken by the caller
        // that gave up: the server gives back a grant it sent under this id
        // (an Unwait of any other answer changes nothing).
        if st.pending.remove(&self.id).is_some() {
            st.parked = st.parked.saturating_sub(1);
        }
        unanswered(self.inner, st, &Request::Unwait { id: self.id });
    }
}

/// Sends `req` without waiting for its answer (which the reader drops, as it
/// answers no caller): for what a caller that gave up leaves to be done.
fn unanswered(inner: &Inner, mut st: parking_lot::MutexGuard<'_, State>, req: &Request<'_>) {
    let id = next_id(&mut st);
    wire::encode_request(&mut st.out, id, req);
    if !std::mem::replace(&mut st.writing, true) {
        drop(st);
        inner.wake_writer.notify_one();
    }
}

/// The reader polls for answers (see `spin`) only while at most this many
/// requests are on their way (with the callers just answered, who are about to
/// send their next). Polling saves a wake-up per answer batch, which
/// counts while a batch is small; with many requests in flight the server's
/// work on them dwarfs a wake-up, and a poll loop takes CPU from the server
/// (on a 2-core machine both sides share the cores). Measured with `tenure
/// bench` on two 2-core VMs: polling was worth it at 1 and 16 clients on
/// one connection, and cost 14-18 % of the rate at 64.
const SPIN_MAX_IN_FLIGHT: usize = 32;

/// Most times a leader yields for callers on their way (see [`Conn::lead`]).
const MAX_LEADER_YIELDS: usize = 4;

/// A leader sends once `1 / CHUNKS_IN_FLIGHT` of the requests in flight are
/// queued. Measured with `tenure bench --clients 64` on a 2-core VM, 8 paired
/// runs: halves made 305 k cycles/s on average against 291 k for quarters
/// (each of the 8 higher), with 0.2 µs less CPU a cycle on each side; sending
/// all at once was in between. At 16 clients the two were within 2 %.
const CHUNKS_IN_FLIGHT: usize = 2;

/// If a leader is cancelled before it sent, the writer task sends for it.
struct Handover<'a>(&'a Inner);

impl Drop for Handover<'_> {
    fn drop(&mut self) {
        self.0.wake_writer.notify_one();
    }
}

/// One non-blocking write of everything in `out`. Returns whether the leader
/// should go on: requests were added meanwhile. If `out` is empty, the leader is
/// done (`writing` cleared); if the socket is full, or it is a TLS stream, the
/// writer task finishes (with `writing` still set); on an error the connection
/// is closed.
fn send_once(inner: &Inner) -> bool {
    let Some(stream) = &inner.direct else {
        inner.wake_writer.notify_one();
        return false;
    };
    let mut buf = {
        let mut st = inner.state.lock();
        if st.out.is_empty() {
            st.writing = false;
            return false;
        }
        st.queued = 0;
        std::mem::take(&mut st.out)
    };
    let mut sent = 0;
    while sent < buf.len() {
        match stream.try_write(&buf[sent..]) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => {
                inner.close(format!("sending to the server failed: {e}"));
                return false;
            }
        }
    }
    let mut st = inner.state.lock();
    if sent < buf.len() {
        // Put the rest back in front of what others appended meanwhile.
        buf.drain(..sent);
        buf.extend_from_slice(&st.out);
        st.out = buf;
        drop(st);
        inner.wake_writer.notify_one();
        return false;
    }
    if st.out.is_empty() {
        buf.clear();
        st.out = buf;
        st.writing = false;
        return false;
    }
    true
}

/// Sends what leaders could not: async writes until `out` is empty.
async fn write_loop(inner: Arc<Inner>, mut writer: Writer) {
    loop {
        inner.wake_writer.notified().await;
        loop {
            let buf = {
                let mut st = inner.state.lock();
                if st.out.is_empty() {
                    st.writing = false;
                    break;
                }
                st.queued = 0;
                std::mem::take(&mut st.out)
            };
            if let Err(e) = writer.write_all(&buf).await {
                inner.close(format!("sending to the server failed: {e}"));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After 2^32 requests the ids wrap: one still waiting for its answer (a
    /// queued wait lasts up to a day) keeps its id, which the next request
    /// skips instead of taking over its caller's place in `pending`.
    #[test]
    fn wrapped_request_ids_skip_those_still_waiting() {
        let mut st = State { next_id: u32::MAX - 1, ..State::default() };
        let (tx, _rx) = oneshot::channel();
        st.pending.insert(1, (tx, true));
        assert_eq!(next_id(&mut st), u32::MAX);
        // 0 is the server's, 1 still waits.
        assert_eq!(next_id(&mut st), 2);
        assert_eq!(next_id(&mut st), 3);
    }
}
