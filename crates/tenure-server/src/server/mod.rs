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
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::admission::Admission;
use crate::leases::Core;
use crate::witness::Signer;

mod answer;
mod connection;
mod dispatch;
mod latency;
mod pool;
mod shared;

pub use latency::Latencies;
pub use shared::{ConnStats, DEFAULT_SPIN, ServerOptions, Shared, random_server_id};
pub(crate) use shared::{finish_within, report_panic};

use connection::serve_one;
pub use connection::{MAX_BATCH_BYTES, MAX_FRAMES_PER_BATCH};

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
            n => match pool::Pool::start(n, &self.shared, &stop_rx) {
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
