//! The TCP server: accepts connections, decodes frames, asks the [`Core`], signs
//! the witnesses of each batch, and writes the answers back in one write.
//!
//! A connection reads whatever has arrived, handles every complete frame in it
//! (up to [`MAX_FRAMES_PER_BATCH`]), signs the batch's witnesses with one
//! signature, then writes all the answers at once: a pipelining client gets its
//! answers batched, and the server never holds more than one batch of answers per
//! connection (memory stays bounded even if a client stops reading; the write
//! times out and the connection closes).
//!
//! Background tasks are owned (mini-redis's shutdown pattern): connections and
//! the sweeper live in the [`Server::run`] future's `JoinSet`; when the shutdown
//! future completes, connections are told to stop, given a grace period, then
//! aborted. Dropping the `run` future aborts everything at once (a crash, as far
//! as clients can tell: the restart rule covers it).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use tenure::{Holder, LeaseName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::core::{Acquired, Ask, Core, Granted, Refusal};
use crate::spin::Spin;
use crate::wire::{
    self, AcquireReply, ErrorCode, HolderViewWire, HolderWire, MAGIC, MAX_BATCH, MAX_REQUEST, PROTOCOL_VERSION,
    PredecessorWire, Request, Response, StateWire, out,
};
use crate::witness::Signer;

/// A wait that never ends, as a deadline that does not overflow (about 30 years).
const FOREVER: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// Most frames handled before their answers are written.
pub const MAX_FRAMES_PER_BATCH: usize = 1024;

/// How the server treats connections.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Shared secret clients must present in their hello; `None`: no check.
    pub auth_token: Option<Vec<u8>>,
    /// Close connections that send nothing for this long.
    pub idle_timeout: Duration,
    /// Close connections that take longer than this to send the rest of a frame
    /// (or their hello), or to read our answers.
    pub io_timeout: Duration,
    /// Most connections at once; more are told so and closed.
    pub max_connections: usize,
    /// Grace period for connections at shutdown.
    pub shutdown_grace: Duration,
    /// Threads of their own for connections, each a single-threaded runtime that
    /// keeps its connections for their whole life (see `pool`); 0: connections
    /// are tasks on the runtime that runs the server.
    pub connection_threads: usize,
    /// After answering, how long a connection polls for the client's next
    /// requests before it sleeps, while that client tends to send them that soon
    /// (see `spin`); zero: never. A wake-up costs more than this on most VMs.
    pub spin: Duration,
}

/// The server's default [`ServerOptions::spin`].
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            auth_token: None,
            idle_timeout: Duration::from_secs(300),
            io_timeout: Duration::from_secs(10),
            max_connections: 4096,
            shutdown_grace: Duration::from_secs(2),
            connection_threads: 0,
            spin: DEFAULT_SPIN,
        }
    }
}

/// Connection counters for `/metrics`.
#[derive(Debug, Default)]
pub struct ConnStats {
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connections open now.
    pub open: AtomicU64,
    /// Connections refused (limit) or closed for a protocol error, a failed hello
    /// or a timeout.
    pub rejected: AtomicU64,
    /// Requests handled.
    pub requests: AtomicU64,
    /// Batches: reads whose complete frames were handled and answered with one write.
    pub batches: AtomicU64,
    /// Signatures made (one per batch of witnesses).
    pub signatures: AtomicU64,
    /// Witnesses signed.
    pub witnesses: AtomicU64,
}

/// What every connection shares.
#[derive(Debug)]
pub struct Shared {
    /// The lease table.
    pub core: Arc<Core>,
    /// The witness key.
    pub signer: Signer,
    /// Connection options.
    pub opts: ServerOptions,
    /// Counters.
    pub conns: ConnStats,
    /// Set at once when a [`RunningServer`] is dropped (a crash): connections on
    /// threads of their own stop answering before the abort reaches them.
    aborted: AtomicBool,
}

/// A bound server, ready to run.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    shared: Arc<Shared>,
}

impl Server {
    /// Binds `addr` (port 0 picks one).
    pub async fn bind(addr: SocketAddr, core: Arc<Core>, signer: Signer, opts: ServerOptions) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        Ok(Self {
            listener,
            shared: Arc::new(Shared {
                core,
                signer,
                opts,
                conns: ConnStats::default(),
                aborted: AtomicBool::new(false),
            }),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// What connections share (for the HTTP side).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Serves until `shutdown` completes, then closes connections gracefully.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let (stop_tx, stop_rx) = watch::channel(false);
        let limit = Arc::new(Semaphore::new(self.shared.opts.max_connections));
        let mut tasks = JoinSet::new();
        let core = self.shared.core.clone();
        let mut sweeper_stop = stop_rx.clone();
        tasks.spawn(async move {
            let clock = core.clock().clone();
            loop {
                tokio::select! {
                    _ = sweeper_stop.changed() => return,
                    () = tenure::ClockExt::sleep(clock.as_ref(), Duration::from_secs(1)) => core.sweep(),
                }
            }
        });
        let mut pool = match self.shared.opts.connection_threads {
            0 => None,
            n => match crate::pool::Pool::start(n, &self.shared, &stop_rx) {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::warn!(error = %e, "no connection threads; serving connections as tasks");
                    None
                }
            },
        };
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                    if let Err(e) = done && e.is_panic() {
                        tracing::error!(error = %e, "a connection task panicked");
                    }
                }
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        self.shared.conns.accepted.fetch_add(1, Ordering::Relaxed);
                        let permit = limit.clone().try_acquire_owned();
                        match &pool {
                            Some(pool) => pool.serve(stream, peer, permit),
                            None => {
                                tasks.spawn(serve_one(stream, peer, self.shared.clone(), permit, stop_rx.clone()));
                            }
                        }
                    }
                    // Out of file descriptors and the like: back off instead of spinning.
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
            }
        }
        let _ = stop_tx.send(true);
        let grace = tokio::time::sleep(self.shared.opts.shutdown_grace);
        tokio::pin!(grace);
        loop {
            tokio::select! {
                next = tasks.join_next() => if next.is_none() { break },
                () = &mut grace => {
                    tasks.abort_all();
                    while tasks.join_next().await.is_some() {}
                    break;
                }
            }
        }
        // The threads keep the same grace period and then abort what is left.
        if let Some(pool) = &mut pool {
            pool.finished().await;
        }
    }
}

/// Serves one accepted connection (or refuses it when over the limit).
pub(crate) async fn serve_one(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    permit: Result<tokio::sync::OwnedSemaphorePermit, tokio::sync::TryAcquireError>,
    stop: watch::Receiver<bool>,
) {
    let Ok(_permit) = permit else {
        shared.conns.rejected.fetch_add(1, Ordering::Relaxed);
        refuse(stream, &shared.opts, "too many connections; try again later").await;
        return;
    };
    shared.conns.open.fetch_add(1, Ordering::Relaxed);
    if let Err(why) = Connection::new(stream, shared.clone(), stop).serve().await {
        shared.conns.rejected.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%peer, %why, "closed connection");
    }
    shared.conns.open.fetch_sub(1, Ordering::Relaxed);
}

/// A server running on the current runtime, owned by this handle.
///
/// [`RunningServer::shutdown`] stops it gracefully; dropping the handle aborts it
/// at once, with its connections, which is what a crash looks like to clients.
#[derive(Debug)]
pub struct RunningServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Runs the server in a task owned by the returned handle.
    pub fn spawn(self) -> std::io::Result<RunningServer> {
        let addr = self.local_addr()?;
        let shared = self.shared.clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(self.run(async move {
            let _ = stopped.await;
        }));
        Ok(RunningServer { addr, shared, stop: Some(stop), task })
    }
}

impl RunningServer {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What its connections share.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Stops accepting, lets connections finish (within the grace period), waits.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.shared.aborted.store(true, Ordering::Release);
        self.task.abort();
    }
}

/// Tells a client why it is refused (one error frame), then closes.
async fn refuse(mut stream: TcpStream, opts: &ServerOptions, why: &str) {
    let mut out = Vec::new();
    wire::encode_response(&mut out, 0, 0, &Response::Error { code: ErrorCode::Overloaded, message: why.into() });
    let _ = tokio::time::timeout(opts.io_timeout, stream.write_all(&out)).await;
}

struct Connection {
    stream: TcpStream,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
    rbuf: BytesMut,
    wbuf: Vec<u8>,
    /// Answers of the batch under way (kept to reuse its allocation).
    answers: Vec<Answer>,
    /// Holders seen recently on this connection: a client usually sends the same
    /// identity again and again, and a hit saves decoding it into five strings.
    holders: Vec<Arc<Holder>>,
    spin: Spin,
}

/// A handled request whose witnesses may still need signing.
struct Answer {
    id: u32,
    resp: Reply,
    close: bool,
}

/// An answer before encoding. Grants stay as the table decided them (their
/// witnesses are signed in place, then encoded straight from them).
enum Reply {
    Wire(Response),
    /// `Response::Acquired(AcquireReply::Granted(..))`.
    Acquired(Vec<Granted>),
    /// `Response::Granted(..)`: renewals and upgrades.
    Outcomes(Vec<Result<Granted, String>>),
}

impl Connection {
    fn new(stream: TcpStream, shared: Arc<Shared>, stop: watch::Receiver<bool>) -> Self {
        let _ = stream.set_nodelay(true);
        let spin = Spin::new(shared.opts.spin);
        Self {
            stream,
            shared,
            stop,
            rbuf: BytesMut::with_capacity(16 * 1024),
            wbuf: Vec::with_capacity(16 * 1024),
            answers: Vec::new(),
            holders: Vec::new(),
            spin,
        }
    }

    /// Serves the connection until the client leaves, errs, or shutdown.
    async fn serve(mut self) -> Result<(), String> {
        let mut greeted = false;
        // One timer for the connection's life, re-armed only when it fires early
        // or a shorter wait begins: no timer set up and torn down per read.
        let timer = tokio::time::sleep(self.shared.opts.idle_timeout.min(FOREVER));
        tokio::pin!(timer);
        loop {
            if self.shared.aborted.load(Ordering::Acquire) {
                return Err("the server was aborted".into());
            }
            let mut answers = std::mem::take(&mut self.answers);
            answers.clear();
            loop {
                let frame = match wire::frame_len(&self.rbuf, 4, MAX_REQUEST) {
                    Ok(Some(n)) => self.rbuf.split_to(n),
                    Ok(None) => break,
                    Err(why) => {
                        self.fail(ErrorCode::Protocol, &why).await;
                        return Err(why);
                    }
                };
                let answer = self.handle_frame(&frame, &mut greeted);
                let close = answer.close;
                answers.push(answer);
                if close || answers.len() >= MAX_FRAMES_PER_BATCH {
                    break;
                }
            }
            if !answers.is_empty() {
                self.shared.conns.batches.fetch_add(1, Ordering::Relaxed);
                let close = answers.iter().any(|a| a.close);
                self.sign(&mut answers);
                let now = self.shared.core.now_us();
                for a in &answers {
                    match &a.resp {
                        Reply::Wire(r) => wire::encode_response(&mut self.wbuf, a.id, now, r),
                        Reply::Acquired(gs) => wire::encode_response_as(&mut self.wbuf, a.id, now, &out::Acquired(gs)),
                        Reply::Outcomes(os) => wire::encode_response_as(&mut self.wbuf, a.id, now, &out::Outcomes(os)),
                    }
                }
                self.flush().await?;
                if close {
                    return Err("closed after an error answer".into());
                }
                let full = answers.len() >= MAX_FRAMES_PER_BATCH;
                self.answers = answers;
                if full {
                    continue;
                }
            }
            if self.rbuf.len() > MAX_REQUEST {
                // Cannot happen with frames bounded above; defensive bound on memory.
                return Err("read buffer over its bound".into());
            }
            // Idle between frames; a frame (or the hello) under way must finish soon.
            let wait = if self.rbuf.is_empty() && greeted {
                self.shared.opts.idle_timeout
            } else {
                self.shared.opts.io_timeout
            };
            self.rbuf.reserve(8 * 1024);
            // A client that tends to send again soon is polled for a moment
            // first: cheaper than sleeping and being woken (see `spin`).
            let read = if let Some(read) = self.spin.read(&self.stream, &mut self.rbuf).await {
                Ok(read)
            } else {
                let now = tokio::time::Instant::now();
                // `Duration::MAX` means never: a deadline decades away, not an overflow.
                let deadline = now.checked_add(wait).unwrap_or_else(|| now + FOREVER);
                if deadline < timer.deadline() {
                    timer.as_mut().reset(deadline);
                }
                let read = loop {
                    tokio::select! {
                        _ = self.stop.changed() => return Ok(()),
                        r = self.stream.read_buf(&mut self.rbuf) => break Ok(r),
                        () = &mut timer => {
                            if tokio::time::Instant::now() >= deadline {
                                break Err(());
                            }
                            // Armed for an earlier wait that has since ended.
                            timer.as_mut().reset(deadline);
                        }
                    }
                };
                if matches!(read, Ok(Ok(n)) if n > 0) {
                    self.spin.woke();
                }
                read
            };
            match read {
                Err(()) if self.rbuf.is_empty() && greeted => {
                    self.fail(ErrorCode::Protocol, "idle for too long; closing").await;
                    return Ok(());
                }
                Err(()) => {
                    let why = format!("a frame took longer than {:?} to arrive", self.shared.opts.io_timeout);
                    self.fail(ErrorCode::Protocol, &why).await;
                    return Err(why);
                }
                Ok(Ok(0)) if self.rbuf.is_empty() => return Ok(()),
                Ok(Ok(0)) => {
                    return Err(format!("the client left in the middle of a frame ({} bytes)", self.rbuf.len()));
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(e.to_string()),
            }
        }
    }

    /// Sends one error frame and gives up on the connection.
    async fn fail(&mut self, code: ErrorCode, message: &str) {
        let now = self.shared.core.now_us();
        wire::encode_response(&mut self.wbuf, 0, now, &Response::Error { code, message: message.into() });
        let _ = self.flush().await;
    }

    async fn flush(&mut self) -> Result<(), String> {
        // Usually the socket takes the whole batch at once: no timer for that.
        let mut sent = 0;
        while sent < self.wbuf.len() {
            match self.stream.try_write(&self.wbuf[sent..]) {
                Ok(0) => break,
                Ok(n) => sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    self.wbuf.clear();
                    return Err(e.to_string());
                }
            }
        }
        let out = if sent < self.wbuf.len() {
            let rest = &self.wbuf[sent..];
            tokio::time::timeout(self.shared.opts.io_timeout, self.stream.write_all(rest)).await
        } else {
            Ok(Ok(()))
        };
        self.wbuf.clear();
        if self.wbuf.capacity() > 1024 * 1024 {
            self.wbuf.shrink_to(64 * 1024);
        }
        match out {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("the client does not read its answers".into()),
        }
    }

    fn handle_frame(&mut self, frame: &[u8], greeted: &mut bool) -> Answer {
        self.shared.conns.requests.fetch_add(1, Ordering::Relaxed);
        let Some((id, body)) = wire::split_request(frame) else {
            return error(0, ErrorCode::Protocol, "a frame shorter than its header".into(), true);
        };
        let req = match postcard::from_bytes::<Request<'_>>(body) {
            Ok(r) => r,
            Err(e) => return error(id, ErrorCode::Protocol, format!("undecodable request: {e}"), true),
        };
        if !*greeted {
            return self.hello(id, req, greeted);
        }
        let resp = match self.dispatch(req) {
            Ok(resp) => resp,
            Err((code, message)) => {
                return error(id, code, message, matches!(code, ErrorCode::Protocol));
            }
        };
        Answer { id, resp, close: false }
    }

    fn hello(&self, id: u32, req: Request<'_>, greeted: &mut bool) -> Answer {
        let Request::Hello { magic, version, auth } = req else {
            return error(id, ErrorCode::Protocol, "the first request must be a hello".into(), true);
        };
        if magic != MAGIC {
            return error(id, ErrorCode::Protocol, "not a tenure client (bad magic)".into(), true);
        }
        if version != PROTOCOL_VERSION {
            let message = format!("this server speaks protocol {PROTOCOL_VERSION}, the client {version}");
            return error(id, ErrorCode::Version, message, true);
        }
        if let Some(secret) = &self.shared.opts.auth_token
            && !auth.is_some_and(|given| constant_time_eq(given, secret))
        {
            return error(id, ErrorCode::Unauthorized, "missing or wrong auth token".into(), true);
        }
        *greeted = true;
        let core = &self.shared.core;
        let resp = Response::Hello {
            version: PROTOCOL_VERSION,
            public_key: self.shared.signer.public_key(),
            max_lease_ms: core.options().max_lease.as_millis() as u64,
            quarantine_left_ms: core.quarantine_left().as_millis() as u64,
            started_us: core.started_us(),
        };
        Answer { id, resp: Reply::Wire(resp), close: false }
    }

    fn dispatch(&mut self, req: Request<'_>) -> Result<Reply, (ErrorCode, String)> {
        let shared = self.shared.clone();
        let core = &shared.core;
        let batch = |n: usize| {
            if n == 0 || n > MAX_BATCH {
                Err((ErrorCode::Invalid, format!("a batch of {n} leases (1..={MAX_BATCH})")))
            } else {
                Ok(())
            }
        };
        Ok(match req {
            Request::Hello { .. } => return Err((ErrorCode::Protocol, "hello sent twice".into())),
            Request::Acquire { tentative, asks } => {
                batch(asks.len())?;
                let holders = asks
                    .iter()
                    .map(|a| self.holder(&a.holder))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| (ErrorCode::Invalid, e))?;
                let asks: Vec<Ask<'_>> = asks
                    .iter()
                    .zip(&holders)
                    .map(|(a, holder)| Ask {
                        name: a.name,
                        mode: a.mode,
                        ttl_ms: a.ttl_ms,
                        holder,
                        retake: a.retake,
                        meta: a.meta,
                    })
                    .collect();
                match core.acquire(&asks, tentative) {
                    Ok(Acquired::Granted(gs)) => return Ok(Reply::Acquired(gs)),
                    Ok(Acquired::Busy { index, holders, version }) => Response::Acquired(AcquireReply::Busy {
                        index: index as u32,
                        holders: holders.iter().map(HolderViewWire::from).collect(),
                        version,
                    }),
                    Err(Refusal::Quarantine(left)) => {
                        Response::Acquired(AcquireReply::Quarantine { left_ms: left.as_millis() as u64 + 1 })
                    }
                    Err(r) => return Err(refusal(r)),
                }
            }
            Request::Upgrade(refs) => {
                batch(refs.len())?;
                let mut out = Vec::with_capacity(refs.len());
                for r in refs {
                    let id = r.reservation.unwrap_or(0);
                    out.push(core.upgrade(r.name, id, r.nonce).map_err(refusal)?);
                }
                return Ok(Reply::Outcomes(out));
            }
            Request::Renew(items) => {
                batch(items.len())?;
                let mut out = Vec::with_capacity(items.len());
                for it in items {
                    let g = it.grant;
                    out.push(core.renew(g.name, g.token, g.reservation, g.nonce, it.ttl_ms).map_err(refusal)?);
                }
                return Ok(Reply::Outcomes(out));
            }
            Request::Release(items) => {
                batch(items.len())?;
                let mut out = Vec::with_capacity(items.len());
                for it in items {
                    let g = it.grant;
                    let released = core
                        .release(g.name, g.token, g.reservation, g.nonce, it.dropped, it.watermark_ms, it.meta)
                        .map_err(refusal)?;
                    out.push(released);
                }
                Response::Released(out)
            }
            Request::Inspect(name) => {
                let name = LeaseName::new(name).map_err(|e| (ErrorCode::Invalid, e.to_string()))?;
                let s = core.inspect(&name);
                Response::State(StateWire {
                    version: s.version.and_then(|v| v.seq),
                    modified_ms: s.modified_ms,
                    holders: s.holders.iter().map(HolderViewWire::from).collect(),
                    expired: s.expired.iter().map(HolderViewWire::from).collect(),
                    last_token: s.last_token,
                    watermark_ms: s.watermark_ms,
                    last: s.last.as_ref().map(PredecessorWire::from),
                })
            }
            Request::List { prefix, limit } => Response::Names(core.list(prefix, (limit as usize).min(100_000))),
            Request::Break { name, version, only_token } => {
                core.break_lease(name, version, only_token).map_err(refusal)?;
                Response::Done
            }
            Request::Ping => Response::Pong,
        }
        .into())
    }

    fn holder(&mut self, w: &HolderWire<'_>) -> Result<Arc<Holder>, String> {
        let same = |h: &Holder| {
            h.nonce == w.nonce
                && h.pid == w.pid
                && h.host == w.host
                && h.user == w.user
                && h.version == w.version
                && h.label.as_deref() == w.label
        };
        if let Some(h) = self.holders.iter().find(|h| same(h)) {
            return Ok(h.clone());
        }
        let h = Arc::new(w.to_holder()?);
        if self.holders.len() >= 16 {
            self.holders.remove(0);
        }
        self.holders.push(h.clone());
        Ok(h)
    }

    /// Signs every witness of the batch with one signature.
    fn sign(&self, answers: &mut [Answer]) {
        let mut witnesses: Vec<&mut Vec<u8>> = Vec::new();
        for a in answers.iter_mut() {
            collect_witnesses(&mut a.resp, &mut witnesses);
        }
        if witnesses.is_empty() {
            return;
        }
        let stats = &self.shared.conns;
        stats.signatures.fetch_add(1, Ordering::Relaxed);
        stats.witnesses.fetch_add(witnesses.len() as u64, Ordering::Relaxed);
        self.shared.signer.sign_in_place(&mut witnesses);
    }
}

fn collect_witnesses<'a>(resp: &'a mut Reply, out: &mut Vec<&'a mut Vec<u8>>) {
    match resp {
        Reply::Acquired(gs) => out.extend(gs.iter_mut().map(|g| &mut g.witness)),
        Reply::Outcomes(os) => out.extend(os.iter_mut().filter_map(|o| o.as_mut().ok().map(|g| &mut g.witness))),
        Reply::Wire(_) => {}
    }
}

impl From<Response> for Reply {
    fn from(r: Response) -> Self {
        Reply::Wire(r)
    }
}

fn refusal(r: Refusal) -> (ErrorCode, String) {
    match r {
        Refusal::Quarantine(left) => (
            ErrorCode::Quarantine,
            format!("the server restarted recently and grants nothing for {}", tenure::human_duration(left)),
        ),
        Refusal::Invalid(m) => (ErrorCode::Invalid, m),
        Refusal::Overloaded(m) => (ErrorCode::Overloaded, m),
        Refusal::Changed => (ErrorCode::Changed, "the lease changed since it was inspected".into()),
        Refusal::Nothing(m) => (ErrorCode::Nothing, m),
    }
}

fn error(id: u32, code: ErrorCode, message: String, close: bool) -> Answer {
    Answer { id, resp: Reply::Wire(Response::Error { code, message }), close }
}

/// Compares secrets without an early exit on the first differing byte.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
