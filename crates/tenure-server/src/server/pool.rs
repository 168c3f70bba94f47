//! Connection threads: each runs a single-threaded runtime that owns the
//! connections handed to it, for their whole life.
//!
//! On a multi-threaded runtime a connection's task wakes up on whichever worker
//! its socket's readiness reached and is stolen back and forth, and every wake-up
//! of an idle worker is a futex call and a context switch. A lease server's
//! connection is a tight read, decide, sign, write loop: pinned to one thread it
//! never migrates, and an idle thread sleeps in `epoll_wait` itself. Connections
//! are dealt to the threads in turn.
//!
//! Ownership is kept as in [`crate::server`]: the threads end when the [`Pool`]
//! is dropped (their connections are dropped with their runtime, as in a crash),
//! or, after the server's stop signal, once their connections have finished or
//! the grace period has passed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

use super::connection::serve_one;
use super::shared::{Shared, finish_within, report_panic};
use crate::admission::Ticket;

/// A connection on its way to a thread, with its place before the hello.
type Handoff = (std::net::TcpStream, SocketAddr, Ticket);

/// The connection threads of one server.
pub(crate) struct Pool {
    threads: Vec<mpsc::UnboundedSender<Handoff>>,
    next: AtomicUsize,
    /// One per thread, completed when it has finished.
    done: Vec<oneshot::Receiver<()>>,
}

impl Pool {
    /// Starts `n` threads (at least one).
    pub(crate) fn start(n: usize, shared: &Arc<Shared>, stop: &watch::Receiver<bool>) -> std::io::Result<Self> {
        let mut threads = Vec::new();
        let mut done = Vec::new();
        for i in 0..n.max(1) {
            let (tx, rx) = mpsc::unbounded_channel();
            let (done_tx, done_rx) = oneshot::channel();
            let (shared, stop) = (shared.clone(), stop.clone());
            // The runtime is built on its thread: one built here could not be
            // dropped here (inside async code) if the thread failed to start.
            let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
            std::thread::Builder::new().name(format!("tenure-conn-{i}")).spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                runtime.block_on(run_thread(rx, shared, stop));
                // Dropping the runtime drops whatever connections are left.
                drop(runtime);
                let _ = done_tx.send(());
            })?;
            // Building a runtime takes microseconds: waiting for it here is brief.
            ready_rx.recv().map_err(|_| std::io::Error::other("a connection thread ended while starting"))??;
            threads.push(tx);
            done.push(done_rx);
        }
        Ok(Self { threads, next: AtomicUsize::new(0), done })
    }

    /// Hands a connection to the next thread.
    pub(crate) fn serve(&self, stream: tokio::net::TcpStream, peer: SocketAddr, ticket: Ticket) {
        let stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(%peer, error = %e, "could not hand the connection to a thread");
                return;
            }
        };
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.threads.len();
        // A thread that is gone drops the connection (closing it): only at shutdown.
        let _ = self.threads[i].send((stream, peer, ticket));
    }

    /// Waits until every thread has finished (they finish after the stop signal,
    /// within the grace period).
    pub(crate) async fn finished(&mut self) {
        for d in &mut self.done {
            let _ = d.await;
        }
    }
}

async fn run_thread(mut rx: mpsc::UnboundedReceiver<Handoff>, shared: Arc<Shared>, stop: watch::Receiver<bool>) {
    let mut tasks = JoinSet::new();
    let mut stopping = stop.clone();
    loop {
        tokio::select! {
            // Stopping first: a dropped server (its stop sender gone) is a crash,
            // and must not be taken for a graceful stop while connections go on.
            biased;
            changed = stopping.changed() => {
                if changed.is_err() {
                    return;
                }
                if *stopping.borrow() {
                    break;
                }
            }
            next = rx.recv() => match next {
                Some((stream, peer, ticket)) => match tokio::net::TcpStream::from_std(stream) {
                    Ok(stream) => {
                        tasks.spawn(serve_one(stream, peer, shared.clone(), ticket, stop.clone()));
                    }
                    Err(e) => tracing::warn!(%peer, error = %e, "could not take over the connection"),
                },
                // The pool was dropped without a stop: abort, as in a crash.
                None => return,
            },
            Some(done) = tasks.join_next(), if !tasks.is_empty() => report_panic(done, "a connection task"),
        }
    }
    // Stopping: connections see the same signal and finish; after the grace
    // period the rest are aborted.
    finish_within(&mut tasks, shared.opts.shutdown_grace).await;
}
