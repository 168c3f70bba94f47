//! One client connection on the server: reads frames, answers them in batches,
//! and closes the connection at its deadlines.
//!
//! A connection reads whatever has arrived, handles every complete frame in it
//! (up to [`MAX_FRAMES_PER_BATCH`] frames or about [`MAX_BATCH_BYTES`] of
//! answers), signs the batch's witnesses with one signature, then writes all
//! the answers at once: a pipelining client gets its answers batched, and the
//! server never holds more than one batch of answers per connection.
//!
//! # Deadlines (none of them restarts at every byte)
//!
//! - **hello**: the hello must be complete `hello_timeout` after the accept,
//!   a TLS handshake included (which must also end `io_timeout` after it);
//!   until then the connection holds a place among the few `max_pre_hello`
//!   ones, which a newer connection may take from it (see [`crate::admission`]),
//!   and its frames may be at most [`MAX_HELLO`] bytes.
//! - **frame**: a frame must be complete `io_timeout` after its first byte
//!   arrived, however slowly the rest comes.
//! - **answers**: a batch of answers must be taken by the client within
//!   `io_timeout` of being written (one deadline for the whole batch).
//! - **idle**: a client that has said hello and sends nothing for
//!   `idle_timeout` is closed.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::BytesMut;
use tenure_core::{Holder, human_duration};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

use super::answer::{Answer, Reply, error};
use super::shared::Shared;
use crate::admission::{self, Ticket};
use crate::spin::Spin;
use crate::tls::{self, Accepted, ServerStream, ServerTls};
use crate::wire::{
    self, ErrorCode, MAGIC, MAX_HELLO, MAX_REQUEST, MAX_RESPONSE, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, Request,
    Response, out,
};

/// Most frames handled before their answers are written.
pub const MAX_FRAMES_PER_BATCH: usize = 1024;

/// About the most bytes of answers handled before they are written (estimated
/// before encoding; one answer may take a batch past it). The largest single
/// answer, an inspection of a lease with every shared holder it may have or a
/// batch of 512 grants, is about 3 MB, so a connection's write buffer stays
/// below 4 MB even when a client pipelines its heaviest requests.
pub const MAX_BATCH_BYTES: usize = 1024 * 1024;

/// Room made in the read buffer before each read.
const READ_CHUNK: usize = 8 * 1024;
/// The buffers of a client (past its hello) start at this size; until the
/// hello, a connection has only a read buffer of [`READ_CHUNK`].
const CLIENT_BUFFER: usize = 16 * 1024;

/// A wait that never ends, as a deadline that does not overflow (about 30 years).
const FOREVER: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// `start + d`, or about 30 years from `start` if that does not fit.
fn after(start: Instant, d: Duration) -> Instant {
    start.checked_add(d).unwrap_or_else(|| start + FOREVER)
}

/// Serves one accepted connection, which holds a place among the connections
/// before their hello (`ticket`) until it says hello.
pub(crate) async fn serve_one(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    ticket: Ticket,
    mut stop: watch::Receiver<bool>,
) {
    shared.conns.open.fetch_add(1, Ordering::Relaxed);
    let accepted = Instant::now();
    // Before any handshake: its flights are small writes too.
    let _ = stream.set_nodelay(true);
    crate::keepalive(&stream);
    let stream = match &shared.opts.tls {
        None => Ok(Some(ServerStream::Plain(stream))),
        Some(tls) => handshake(tls, stream, &shared, &ticket, &mut stop, accepted).await,
    };
    let served = match stream {
        Ok(Some(stream)) => Connection::new(stream, shared.clone(), stop, ticket, accepted).serve().await,
        Ok(None) => Ok(()),
        Err(why) => Err(why),
    };
    if let Err(why) = served {
        shared.conns.rejected.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%peer, %why, "closed connection");
    }
    shared.conns.open.fetch_sub(1, Ordering::Relaxed);
}

/// Grants of waits a connection remembers after sending them (see
/// [`Connection::sent_grants`]). Between a grant's answer and a withdrawal of
/// it, the connection may send a grant to each of its waits (as many as
/// [`wire::MAX_WAITS_PER_CONNECTION`]: all of them served at once, as when the
/// restart quarantine ends) and to as many waits again, sent before the
/// withdrawal by callers whose grants had come: fewer remembered, and a
/// withdrawal could miss its grant, which nobody would then hold until its
/// deadline. (It was 256.)
pub(super) const MAX_SENT_GRANTS: usize = 2 * wire::MAX_WAITS_PER_CONNECTION;

/// A queued wait of a connection, by request id.
pub(super) struct Queued {
    /// Its task.
    pub(super) abort: AbortHandle,
    pub(super) name: Box<str>,
    pub(super) nonce: Box<str>,
}

/// A grant sent to a waiter, which its client may still withdraw.
pub(super) struct SentGrant {
    pub(super) id: u32,
    pub(super) name: Box<str>,
    pub(super) nonce: Box<str>,
    pub(super) token: u64,
}

/// Why a connection before its hello is closed for a newer one.
const EVICTED: &str = "too many connections are waiting for their hello; the oldest is closed";

/// What a plaintext client on a TLS port is told.
const TLS_ONLY: &str = "this server speaks TLS only: connect with tls=true (tenure://HOST:PORT?tls=true), \
                        and ca_file=PATH if its certificate comes from a private CA";

/// The TLS handshake of a new connection. It is part of getting to the hello:
/// it must end before the hello's deadline, and before a frame's (the
/// handshake's first byte came after the accept), while the connection keeps
/// its place among those before their hello, which a newer one may take. A
/// plaintext client is told in its own protocol that the server speaks TLS
/// only. `None`: nothing to serve (the peer left, or the server stops).
async fn handshake(
    tls: &ServerTls,
    stream: TcpStream,
    shared: &Shared,
    ticket: &Ticket,
    stop: &mut watch::Receiver<bool>,
    accepted: Instant,
) -> Result<Option<ServerStream>, String> {
    let opts = &shared.opts;
    let limit = opts.hello_timeout.min(opts.io_timeout);
    let start = async {
        match tls::accept(tls, stream).await? {
            Accepted::Tls(s) => Ok(Some(s)),
            Accepted::Closed => Ok(None),
            Accepted::Plaintext(s) => {
                let mut answer = Vec::new();
                let refusal = Response::Error { code: ErrorCode::Version, message: TLS_ONLY.into() };
                wire::encode_response(&mut answer, 0, shared.core.now_us(), &refusal);
                tls::refuse_plaintext(s, &answer).await;
                Err("a plaintext client on the TLS port".to_string())
            }
        }
    };
    tokio::select! {
        _ = stop.changed() => Ok(None),
        () = ticket.evicted() => Err(EVICTED.into()),
        started = tokio::time::timeout_at(after(accepted, limit), start) => started.unwrap_or_else(|_| {
            shared.conns.timed_out.fetch_add(1, Ordering::Relaxed);
            Err(format!("no TLS handshake within {} of connecting", human_duration(limit)))
        }),
    }
}

/// Why the serving loop woke up.
enum Woke {
    /// The socket was read.
    Read(std::io::Result<usize>),
    /// What it was waiting for did not come in time.
    Late(Wait),
    /// Its pre-hello slot went to a newer connection.
    Evicted,
    /// A queued wait ended: its answer is in `pushed`.
    Answered,
}

/// What the connection is waiting for when it reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// The hello, due at a fixed time after the accept.
    Hello,
    /// The rest of a frame that has begun.
    Frame,
    /// The next frame of a client that has said hello.
    Idle,
}

pub(super) struct Connection {
    stream: ServerStream,
    /// When the connection was accepted: the hello is due a fixed time after.
    accepted: Instant,
    pub(super) shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
    rbuf: BytesMut,
    wbuf: Vec<u8>,
    /// Answers of the batch under way (kept to reuse its allocation).
    answers: Vec<Answer>,
    /// Holders seen recently on this connection: a client usually sends the same
    /// identity again and again, and a hit saves decoding it into five strings.
    pub(super) holders: Vec<Arc<Holder>>,
    spin: Spin,
    /// Its place among the connections before their hello, until the hello.
    ticket: Option<Ticket>,
    /// Its place among the clients, from the hello on.
    permit: Option<OwnedSemaphorePermit>,
    /// The protocol version agreed at the hello.
    pub(super) version: u16,
    /// Its queued waits ([`Request::Wait`]), each answering when its lease is
    /// granted or its wait ends. Dropped with the connection, which takes every
    /// one of them out of its queue.
    pub(super) waits: JoinSet<Answer>,
    /// The queued waits by request id, to withdraw one ([`Request::Unwait`]).
    pub(super) wait_ids: HashMap<u32, Queued>,
    /// The grants of waits sent lately, newest last (at most
    /// [`MAX_SENT_GRANTS`]): a client whose caller gave up while the grant was
    /// on its way withdraws the wait without ever seeing it, and the grant is
    /// then given back instead of being held by nobody until its deadline.
    pub(super) sent_grants: VecDeque<SentGrant>,
    /// Waits withdrawn while their task may still answer: an answer that comes
    /// anyway is not sent, and its grant is given back.
    pub(super) withdrawn: HashMap<u32, Queued>,
    /// Waits that ended (answered, or cancelled), not yet looked at.
    pushed: Vec<Result<Answer, tokio::task::JoinError>>,
    /// The client's server list ([`Request::Servers`]), if it sent one, and
    /// this server's place in it: acquisitions of names it places elsewhere
    /// are refused.
    pub(super) servers: Option<(Box<[Box<str>]>, usize)>,
}

impl Connection {
    fn new(
        stream: ServerStream,
        shared: Arc<Shared>,
        stop: watch::Receiver<bool>,
        ticket: Ticket,
        accepted: Instant,
    ) -> Self {
        let spin = Spin::new(shared.opts.spin);
        Self {
            stream,
            accepted,
            shared,
            stop,
            // Small until the client has said hello: a connection that never
            // does costs little; the buffers grow with the client's batches.
            rbuf: BytesMut::with_capacity(READ_CHUNK),
            wbuf: Vec::new(),
            answers: Vec::new(),
            holders: Vec::new(),
            spin,
            ticket: Some(ticket),
            permit: None,
            version: PROTOCOL_VERSION,
            waits: JoinSet::new(),
            wait_ids: HashMap::new(),
            sent_grants: VecDeque::new(),
            withdrawn: HashMap::new(),
            pushed: Vec::new(),
            servers: None,
        }
    }

    fn greeted(&self) -> bool {
        self.permit.is_some()
    }

    /// Serves the connection until the client leaves, errs, times out, or shutdown.
    async fn serve(mut self) -> Result<(), String> {
        let opts = self.shared.opts.clone();
        let hello_due = after(self.accepted, opts.hello_timeout);
        // When the first byte of the frame under way arrived (none under way: None).
        let mut frame_began: Option<Instant> = None;
        // One timer for the connection's life, re-armed only when it fires early
        // or a shorter wait begins: no timer set up and torn down per read.
        let timer = tokio::time::sleep_until(hello_due);
        tokio::pin!(timer);
        loop {
            if self.shared.aborted.load(Ordering::Acquire) {
                return Err("the server was aborted".into());
            }
            let mut answers = std::mem::take(&mut self.answers);
            answers.clear();
            let mut batch_bytes = 0usize;
            let mut consumed = false;
            // Waits that ended since the last pass: their answers go first.
            while let Some(done) = self.waits.try_join_next() {
                self.pushed.push(done);
            }
            let mut pushed = std::mem::take(&mut self.pushed);
            for done in pushed.drain(..) {
                let Some(answer) = self.waited(done) else { continue };
                batch_bytes = batch_bytes.saturating_add(answer.resp.size_hint());
                answers.push(answer);
            }
            self.pushed = pushed;
            // When the last timed request of this batch was answered: the next
            // one is timed from there, one clock read per request instead of two.
            let mut mark = None;
            loop {
                // Before the hello, a frame may be only as large as a hello.
                let max = if self.greeted() { MAX_REQUEST } else { MAX_HELLO };
                let frame = match wire::frame_len(&self.rbuf, 4, max) {
                    Ok(Some(n)) => self.rbuf.split_to(n),
                    Ok(None) => break,
                    Err(why) => {
                        self.fail(ErrorCode::Protocol, &why).await;
                        return Err(why);
                    }
                };
                consumed = true;
                let Some(answer) = self.handle_frame(&frame, &mut mark) else { continue };
                let close = answer.close;
                batch_bytes = batch_bytes.saturating_add(answer.resp.size_hint());
                answers.push(answer);
                if close || answers.len() >= MAX_FRAMES_PER_BATCH || batch_bytes >= MAX_BATCH_BYTES {
                    break;
                }
            }
            if !answers.is_empty() {
                self.shared.conns.batches.fetch_add(1, Ordering::Relaxed);
                let close = answers.iter().any(|a| a.close);
                self.sign(&mut answers);
                let now = self.shared.core.now_us();
                // Where each answer's frame ends in the write buffer.
                let mut ends = Vec::with_capacity(answers.len());
                for a in &answers {
                    let start = self.wbuf.len();
                    match &a.resp {
                        Reply::Wire(r) => wire::encode_response(&mut self.wbuf, a.id, now, r),
                        Reply::Acquired(gs) => wire::encode_response_as(&mut self.wbuf, a.id, now, &out::Acquired(gs)),
                        Reply::Outcomes(os) => wire::encode_response_as(&mut self.wbuf, a.id, now, &out::Outcomes(os)),
                    }
                    // Every answer is bounded well below what a client accepts;
                    // should one not be, the client gets an error, not a frame
                    // it must refuse (and with it, the connection).
                    if self.wbuf.len() - start > MAX_RESPONSE {
                        self.wbuf.truncate(start);
                        let message = "the answer would exceed the largest frame; ask for less".to_string();
                        let too_big = Response::Error { code: ErrorCode::Overloaded, message };
                        wire::encode_response(&mut self.wbuf, a.id, now, &too_big);
                    }
                    ends.push(self.wbuf.len());
                }
                let (written, flushed) = self.flush().await;
                // A grant to a wait whose whole frame was written is the
                // client's now; the rest are given back when `answers` goes.
                for (a, end) in answers.iter_mut().zip(ends) {
                    if let Some(unsent) = a.unsent.take_if(|_| end <= written) {
                        unsent.sent();
                    }
                }
                flushed?;
                if close {
                    return Err("closed after an error answer".into());
                }
                let full = answers.len() >= MAX_FRAMES_PER_BATCH || batch_bytes >= MAX_BATCH_BYTES;
                self.answers = answers;
                if full {
                    // More complete frames may be waiting: no read, no new deadline.
                    continue;
                }
            }
            if self.rbuf.len() > MAX_REQUEST {
                // Cannot happen with frames bounded above; defensive bound on memory.
                return Err("read buffer over its bound".into());
            }
            // What is left is the start of the next frame: it began with the last
            // read if frames were taken out before it, or it is still the one
            // whose first byte came earlier.
            if self.rbuf.is_empty() {
                frame_began = None;
            } else if consumed || frame_began.is_none() {
                frame_began = Some(Instant::now());
            }
            // What the next read waits for, and until when; idle waits are
            // timed from when the wait begins (below).
            let due = match (self.greeted(), frame_began.map(|t| after(t, opts.io_timeout))) {
                (false, Some(f)) if f < hello_due => Some((Wait::Frame, f)),
                (false, _) => Some((Wait::Hello, hello_due)),
                (true, Some(f)) => Some((Wait::Frame, f)),
                (true, None) => None,
            };
            // A deadline passed is checked before any read: bytes that keep
            // coming just fast enough for the spin below do not extend it.
            let expired = due.filter(|(_, d)| Instant::now() >= *d).map(|(wait, _)| wait);
            self.rbuf.reserve(READ_CHUNK);
            // A client that tends to send again soon is polled for a moment
            // first: cheaper than sleeping and being woken (see `spin`).
            let woke = if let Some(wait) = expired {
                Woke::Late(wait)
            } else if let Some(read) = self
                .spin
                .read_unless(&mut self.stream, &mut self.rbuf, || match self.waits.try_join_next() {
                    // A queued acquisition was granted (or cancelled) meanwhile:
                    // answer it now, not when the spin's window has passed.
                    Some(done) => {
                        self.pushed.push(done);
                        true
                    }
                    None => false,
                })
                .await
            {
                Woke::Read(read)
            } else if !self.pushed.is_empty() {
                Woke::Answered
            } else {
                // A client with queued waits is not idle: it waits for their answers.
                let idle = if self.waits.is_empty() { opts.idle_timeout } else { FOREVER };
                let (wait, deadline) = due.unwrap_or_else(|| (Wait::Idle, after(Instant::now(), idle)));
                if deadline < timer.deadline() {
                    timer.as_mut().reset(deadline);
                }
                let woke = loop {
                    tokio::select! {
                        _ = self.stop.changed() => return Ok(()),
                        () = admission::evicted(self.ticket.as_ref()) => break Woke::Evicted,
                        r = self.stream.read_buf(&mut self.rbuf) => break Woke::Read(r),
                        Some(done) = self.waits.join_next(), if !self.waits.is_empty() => {
                            self.pushed.push(done);
                            break Woke::Answered;
                        }
                        () = &mut timer => {
                            if Instant::now() >= deadline {
                                break Woke::Late(wait);
                            }
                            // Armed for an earlier wait that has since ended.
                            timer.as_mut().reset(deadline);
                        }
                    }
                };
                if matches!(woke, Woke::Read(Ok(n)) if n > 0) {
                    self.spin.woke();
                }
                woke
            };
            let read = match woke {
                Woke::Answered => continue,
                Woke::Evicted => {
                    self.fail(ErrorCode::Overloaded, EVICTED).await;
                    return Err(EVICTED.into());
                }
                Woke::Late(wait) => {
                    self.shared.conns.timed_out.fetch_add(1, Ordering::Relaxed);
                    let why = match wait {
                        Wait::Idle => {
                            self.fail(ErrorCode::Idle, "idle for too long; closing").await;
                            return Ok(());
                        }
                        Wait::Hello => format!("no hello within {} of connecting", human_duration(opts.hello_timeout)),
                        Wait::Frame => format!("a frame took longer than {:?} to arrive", opts.io_timeout),
                    };
                    self.fail(ErrorCode::Protocol, &why).await;
                    return Err(why);
                }
                Woke::Read(read) => read,
            };
            match read {
                Ok(0) if self.rbuf.is_empty() => return Ok(()),
                Ok(0) => {
                    return Err(format!("the client left in the middle of a frame ({} bytes)", self.rbuf.len()));
                }
                Ok(_) => {}
                // A TLS client that closes its socket without a close_notify
                // alert (as most do) leaves like a plaintext one, between frames.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && self.rbuf.is_empty() => return Ok(()),
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// Sends one error frame and gives up on the connection.
    async fn fail(&mut self, code: ErrorCode, message: &str) {
        let now = self.shared.core.now_us();
        wire::encode_response(&mut self.wbuf, 0, now, &Response::Error { code, message: message.into() });
        let _ = self.flush().await;
    }

    /// Writes the batch of answers: the client must take all of it within
    /// `io_timeout` (one deadline for the whole batch, not one per write).
    /// Returns how many bytes the socket took (with TLS: the stream, which
    /// may not have sent them all yet), also when it fails.
    async fn flush(&mut self) -> (usize, Result<(), String>) {
        // Usually the socket takes the whole batch at once: no timer for that.
        let mut sent = 0;
        while sent < self.wbuf.len() {
            match self.stream.try_write(&self.wbuf[sent..]) {
                Ok(0) => break,
                Ok(n) => sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    self.wbuf.clear();
                    return (sent, Err(e.to_string()));
                }
            }
        }
        let out = if sent < self.wbuf.len() {
            let (buf, stream) = (&self.wbuf, &mut self.stream);
            let sent = &mut sent;
            // A TLS stream holds back what it has encrypted until it is flushed.
            let write = async move {
                while *sent < buf.len() {
                    match stream.write(&buf[*sent..]).await? {
                        0 => return Err(std::io::ErrorKind::WriteZero.into()),
                        n => *sent += n,
                    }
                }
                stream.flush().await
            };
            tokio::time::timeout(self.shared.opts.io_timeout, write).await
        } else {
            Ok(Ok(()))
        };
        self.wbuf.clear();
        if self.wbuf.capacity() > 1024 * 1024 {
            self.wbuf.shrink_to(64 * 1024);
        }
        let out = match out {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => {
                self.shared.conns.timed_out.fetch_add(1, Ordering::Relaxed);
                Err(format!("the client did not take its answers within {:?}", self.shared.opts.io_timeout))
            }
        };
        (sent, out)
    }

    /// The answer to one frame: `None` for a wait that was queued (its answer
    /// comes later, from [`Connection::waits`]). A timed request is timed from
    /// `mark`, when the request before it in the batch was answered (read now
    /// if it was not timed), and leaves its own end there.
    fn handle_frame(&mut self, frame: &[u8], mark: &mut Option<std::time::Instant>) -> Option<Answer> {
        let started = mark.take().unwrap_or_else(std::time::Instant::now);
        self.shared.conns.requests.fetch_add(1, Ordering::Relaxed);
        let Some((id, body)) = wire::split_request(frame) else {
            return Some(error(0, ErrorCode::Protocol, "a frame shorter than its header".into(), true));
        };
        let req = match wire::decode::<Request<'_>>(body) {
            Ok(r) => r,
            Err(e) => return Some(error(id, ErrorCode::Protocol, format!("undecodable request: {e}"), true)),
        };
        if !self.greeted() {
            return Some(self.hello(id, req));
        }
        if matches!(req, Request::Wait { .. }) {
            return self.wait(id, &req);
        }
        let op = super::latency::op(&req);
        let answer = match self.dispatch(req) {
            Ok(resp) => Answer::new(id, resp),
            Err((code, message)) => error(id, code, message, matches!(code, ErrorCode::Protocol)),
        };
        if let Some(op) = op {
            let answered = std::time::Instant::now();
            self.shared.conns.latency.observe(op, answered.saturating_duration_since(started));
            *mark = Some(answered);
        }
        Some(answer)
    }

    /// The first frame: checks it, then moves the connection from the places
    /// before the hello to a client's place, if one is free.
    fn hello(&mut self, id: u32, req: Request<'_>) -> Answer {
        let Request::Hello { magic, version, auth } = req else {
            return error(id, ErrorCode::Protocol, "the first request must be a hello".into(), true);
        };
        if magic != MAGIC {
            return error(id, ErrorCode::Protocol, "not a tenure client (bad magic)".into(), true);
        }
        if !(MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&version) {
            let message = format!(
                "this server speaks protocol {MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION}, the client {version}"
            );
            return error(id, ErrorCode::Version, message, true);
        }
        if let Some(secret) = &self.shared.opts.auth_token
            && !auth.is_some_and(|given| constant_time_eq(given, secret))
        {
            return error(id, ErrorCode::Unauthorized, "missing or wrong auth token".into(), true);
        }
        let Ok(permit) = self.shared.slots.clone().try_acquire_owned() else {
            let message = format!(
                "the server has its limit of {} client connections; try again later",
                self.shared.opts.max_connections
            );
            return error(id, ErrorCode::Overloaded, message, true);
        };
        self.permit = Some(permit);
        self.ticket = None;
        // A client now: room for its batches of requests and answers at once.
        self.rbuf.reserve(CLIENT_BUFFER);
        self.wbuf.reserve(CLIENT_BUFFER);
        let core = &self.shared.core;
        // The client's version, which this server speaks too.
        self.version = version;
        let resp = Response::Hello {
            version,
            public_key: self.shared.signer.public_key(),
            max_lease_ms: tenure_core::limits::millis(core.options().max_lease),
            quarantine_left_ms: tenure_core::limits::millis(core.quarantine_left()),
            started_us: core.started_us(),
        };
        Answer::new(id, Reply::Wire(resp))
    }
}

/// Compares secrets without an early exit on the first differing byte.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
