//! What every connection of a server shares: its options, its counters, the
//! lease table and witness key, the places of connections; and the two helpers
//! that end the server's tasks.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::latency::Latencies;
use crate::admission::Admission;
use crate::leases::Core;
use crate::tls::ServerTls;
use crate::witness::Signer;

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
    /// Set at once when a [`RunningServer`](super::RunningServer) is dropped (a crash): connections on
    /// threads of their own stop answering before the abort reaches them.
    pub(super) aborted: AtomicBool,
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
