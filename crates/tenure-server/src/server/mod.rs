//! The TCP server: accepts connections, admits them, and runs each one (see
//! the `connection` module) until it leaves, errs, times out or the server stops.
//!
//! # Admission and deadlines
//!
//! A new connection has not proved anything yet (no hello, no auth token), so it
//! does not take one of the `max_connections` slots of real clients: it waits in
//! a separate, small set of `max_pre_hello` places, where a newcomer evicts the
//! oldest (see the `admission` module for why the oldest). It must complete its
//! hello within `hello_timeout` of being accepted, however it sends the bytes;
//! then it takes a slot, or is told the server is full. With TLS, the handshake
//! is part of getting to the hello: it happens within the same deadline (and a
//! frame's, from the accept), in the same place among those before their hello.
//! After the hello, a frame that has begun must be complete within `io_timeout`
//! of its first byte (a whole-frame deadline: dripping bytes does not extend
//! it), an answer must be taken by the client within `io_timeout` of being
//! written, and a client that sends nothing for `idle_timeout` is closed.
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

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::admission::Admission;
use crate::core::Core;
use crate::tls::ServerTls;
use crate::witness::Signer;

mod connection;
mod dispatch;
mod latency;

pub use latency::Latencies;

pub(crate) use connection::serve_one;
pub use connection::{MAX_BATCH_BYTES, MAX_FRAMES_PER_BATCH};

/// How the server treats connections.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Shared secret clients must present in their hello; `None`: no check.
    pub auth_token: Option<Vec<u8>>,
    /// Close connections (after their hello) that send nothing for this long.
    pub idle_timeout: Duration,
    /// Close connections that take longer than this to send a whole frame, from
    /// its first byte, or to take a whole batch of answers.
    pub io_timeout: Duration,
    /// Close connections that have not completed their hello this long after
    /// they were accepted.
    pub hello_timeout: Duration,
    /// Most connections past their hello at once; a hello beyond is told so and
    /// closed.
    pub max_connections: usize,
    /// Most connections still before their hello, apart from `max_connections`;
    /// a newcomer beyond evicts the oldest of them.
    pub max_pre_hello: usize,
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
    /// Speak TLS only, with this certificate and key; `None`: plaintext. The
    /// handshake must end within the hello's deadline (see [`crate::tls`]).
    pub tls: Option<ServerTls>,
    /// This server's identity ([`crate::wire::check_server_id`]): clients of
    /// several servers place names by it, never by the address they wrote, so
    /// it must stay the same across restarts (`tenure serve` keeps it in its
    /// state file) and differ from every other server's. The default is random.
    pub server_id: String,
}

/// A random server identity: 32 hex digits.
pub fn random_server_id() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

/// The server's default [`ServerOptions::spin`].
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            auth_token: None,
            idle_timeout: Duration::from_secs(300),
            io_timeout: Duration::from_secs(10),
            hello_timeout: Duration::from_secs(5),
            max_connections: 4096,
            max_pre_hello: 256,
            shutdown_grace: Duration::from_secs(2),
            connection_threads: 0,
            spin: DEFAULT_SPIN,
            tls: None,
            server_id: random_server_id(),
        }
    }
}

/// Connection counters for `/metrics`.
#[derive(Debug, Default)]
pub struct ConnStats {
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connections open now (before and after their hello).
    pub open: AtomicU64,
    /// Connections refused (limit) or closed for a protocol error, a failed hello
    /// or a timeout.
    pub rejected: AtomicU64,
    /// Connections closed for a deadline: no hello in time, a frame too slow to
    /// arrive, answers not taken in time, or idle.
    pub timed_out: AtomicU64,
    /// Requests handled.
    pub requests: AtomicU64,
    /// Batches: reads whose complete frames were handled and answered with one write.
    pub batches: AtomicU64,
    /// Signatures made (one per batch of witnesses).
    pub signatures: AtomicU64,
    /// Witnesses signed.
    pub witnesses: AtomicU64,
    /// How long requests took to decide, per kind.
    pub latency: Latencies,
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
    /// Connections before their hello (`max_pre_hello`, oldest evicted first).
    pub(crate) pre_hello: Arc<Admission>,
    /// Places of connections past their hello (`max_connections`).
    pub(crate) slots: Arc<Semaphore>,
    /// Set at once when a [`RunningServer`] is dropped (a crash): connections on
    /// threads of their own stop answering before the abort reaches them.
    aborted: AtomicBool,
}

/// Logs a task that ended in a panic (a bug: its connection is gone, the rest serve on).
pub(crate) fn report_panic(done: Result<(), tokio::task::JoinError>, what: &str) {
    if let Err(e) = done
        && e.is_panic()
    {
        tracing::error!(error = %e, "{what} panicked");
    }
}

/// Waits for `tasks` to finish (they were told to stop), at most `grace`; then
/// aborts what is left.
pub(crate) async fn finish_within(tasks: &mut JoinSet<()>, grace: Duration) {
    let all = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(grace, all).await.is_err() {
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }
}

impl Shared {
    /// Connections open now that have not completed their hello.
    pub fn pre_hello_open(&self) -> usize {
        self.pre_hello.len()
    }

    /// Connections closed before their hello to make room for newer ones.
    pub fn pre_hello_evicted(&self) -> u64 {
        self.pre_hello.evicted()
    }

    /// Connections past their hello now.
    pub fn clients_open(&self) -> usize {
        self.opts.max_connections.min(Semaphore::MAX_PERMITS).saturating_sub(self.slots.available_permits())
    }
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
        Ok(Self::from_listener(TcpListener::bind(addr).await?, core, signer, opts))
    }

    /// Serves on a bound `listener` (whose port decides, say, where state is kept
    /// before the table is made).
    pub fn from_listener(listener: TcpListener, core: Arc<Core>, signer: Signer, opts: ServerOptions) -> Self {
        Self {
            listener,
            shared: Arc::new(Shared {
                core,
                signer,
                pre_hello: Admission::new(opts.max_pre_hello),
                slots: Arc::new(Semaphore::new(opts.max_connections.min(Semaphore::MAX_PERMITS))),
                opts,
                conns: ConnStats::default(),
                aborted: AtomicBool::new(false),
            }),
        }
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
        let mut tasks = JoinSet::new();
        let core = self.shared.core.clone();
        let mut sweeper_stop = stop_rx.clone();
        tasks.spawn(async move {
            let clock = core.clock().clone();
            loop {
                tokio::select! {
                    _ = sweeper_stop.changed() => return,
                    () = tenure_core::ClockExt::sleep(clock.as_ref(), Duration::from_secs(1)) => core.sweep(),
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
                Some(done) = tasks.join_next(), if !tasks.is_empty() => report_panic(done, "a connection task"),
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        self.shared.conns.accepted.fetch_add(1, Ordering::Relaxed);
                        // Admitted here, in accept order, so that the oldest is evicted.
                        let ticket = self.shared.pre_hello.admit();
                        match &pool {
                            Some(pool) => pool.serve(stream, peer, ticket),
                            None => {
                                tasks.spawn(serve_one(stream, peer, self.shared.clone(), ticket, stop_rx.clone()));
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
        finish_within(&mut tasks, self.shared.opts.shutdown_grace).await;
        // The threads keep the same grace period and then abort what is left.
        if let Some(pool) = &mut pool {
            pool.finished().await;
        }
    }
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
