//! The HTTP side: a status page for humans, Prometheus metrics, the public key
//! (the routes are in [`pages`]), served with limits of its own.
//!
//! The port is as open as the lease port, so it is bounded the same way:
//! - at most `max_connections` connections; a newcomer beyond evicts the oldest
//!   (see the `admission` module for why the oldest);
//! - a connection must send a complete request head within `idle_timeout` of
//!   connecting or of its previous answer (hyper's header-read timeout, which
//!   runs while a keep-alive connection waits for its next request too): slow
//!   headers and idle keep-alive connections are closed alike. With TLS
//!   (`tls`), the handshake counts within the first head's deadline: handshake
//!   and first head together within `idle_timeout` of connecting; a plaintext
//!   request gets a 400 answer saying the port speaks HTTPS;
//! - a request head (request line and headers) is at most `max_request_bytes`
//!   and [`MAX_HEADERS`] headers; the routes read no body;
//! - a whole answer must be taken by the client within `response_timeout` of
//!   its first byte being written;
//! - answers are bounded: the status page and `/status.json` show a page of
//!   leases at a time (see [`pages`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};

use crate::admission::{Admission, Ticket};
use crate::server::{Shared, report_panic};
use crate::tls::{self, Accepted, ServerStream, ServerTls};

mod html;
mod metrics;
pub mod pages;

pub use pages::{JSON_LIMIT, PAGE_LIMIT, router};

/// Most headers in a request.
pub const MAX_HEADERS: usize = 64;

/// Limits of the HTTP port.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// Most connections at once; a newcomer beyond evicts the oldest.
    pub max_connections: usize,
    /// A connection must send a complete request head within this of connecting
    /// or of its previous answer (idle keep-alive connections included).
    pub idle_timeout: Duration,
    /// A whole answer must be taken within this of its first byte being written.
    pub response_timeout: Duration,
    /// Largest request head (request line and headers), in bytes (at least 8 KiB).
    pub max_request_bytes: usize,
    /// Grace period for connections at shutdown.
    pub shutdown_grace: Duration,
    /// Speak TLS (HTTPS) only, with this certificate and key; `None`: plaintext.
    pub tls: Option<ServerTls>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            max_connections: 64,
            idle_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(10),
            max_request_bytes: 16 * 1024,
            shutdown_grace: Duration::from_secs(2),
            tls: None,
        }
    }
}

/// Serves the routes on `listener` until `shutdown` completes, within `opts`.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    opts: HttpOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let app = router(shared);
    let admission = Admission::new(opts.max_connections);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(done) = tasks.join_next(), if !tasks.is_empty() => report_panic(done, "an HTTP connection task"),
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let ticket = admission.admit();
                    tasks.spawn(serve_connection(stream, app.clone(), opts.clone(), ticket, stop_rx.clone()));
                }
                // Out of file descriptors and the like: back off instead of spinning.
                Err(e) => {
                    tracing::warn!(error = %e, "HTTP accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    let _ = stop_tx.send(true);
    // Connections finish their answer (they were told to stop), or are aborted.
    crate::server::finish_within(&mut tasks, opts.shutdown_grace).await;
}

/// What a plaintext request on the HTTPS port is told.
const HTTPS_ONLY: &[u8] = b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n\
content-length: 49\r\nconnection: close\r\n\r\nthis port speaks HTTPS only: use an https:// URL\n";

async fn serve_connection(
    stream: TcpStream,
    app: axum::Router,
    opts: HttpOptions,
    ticket: Ticket,
    mut stop: watch::Receiver<bool>,
) {
    // The first request head is due `idle_timeout` after the accept, TLS
    // handshake included; hyper's own timer covers the heads after it.
    let head_due = after(Instant::now(), opts.idle_timeout);
    let _ = stream.set_nodelay(true);
    let stream = match &opts.tls {
        None => ServerStream::Plain(stream),
        Some(tls) => {
            let start = async {
                match tls::accept(tls, stream).await {
                    Ok(Accepted::Tls(s)) => Some(s),
                    Ok(Accepted::Plaintext(s)) => {
                        tls::refuse_plaintext(s, HTTPS_ONLY).await;
                        None
                    }
                    Ok(Accepted::Closed) => None,
                    Err(why) => {
                        tracing::debug!(%why, "HTTP connection closed");
                        None
                    }
                }
            };
            let started = tokio::select! {
                () = ticket.evicted() => None,
                _ = stop.changed() => None,
                started = tokio::time::timeout_at(head_due, start) => started.ok().flatten(),
            };
            match started {
                Some(s) => s,
                None => return,
            }
        }
    };
    let io = TokioIo::new(AnswerDeadline::new(stream, opts.response_timeout));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(opts.idle_timeout)
        .max_buf_size(opts.max_request_bytes.max(8 * 1024))
        .max_headers(MAX_HEADERS);
    // Told when the first request head is complete.
    let first_head = Arc::new(tokio::sync::Notify::new());
    let service = {
        let (first_head, app) = (first_head.clone(), TowerToHyperService::new(app));
        hyper::service::service_fn(move |req| {
            first_head.notify_one();
            hyper::service::Service::call(&app, req)
        })
    };
    let first_head_late = async {
        tokio::select! {
            () = tokio::time::sleep_until(head_due) => {}
            () = first_head.notified() => std::future::pending().await,
        }
    };
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    tokio::select! {
        done = conn.as_mut() => {
            if let Err(e) = done {
                tracing::debug!(error = %e, "HTTP connection closed");
            }
        }
        // Dropping the connection closes it.
        () = ticket.evicted() => tracing::debug!("HTTP connection evicted by a newer one"),
        () = first_head_late => tracing::debug!("no request head within the idle timeout of connecting"),
        _ = stop.changed() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(opts.shutdown_grace, conn).await;
        }
    }
}

/// `start + d`, or about 30 years from `start` if that does not fit.
fn after(start: Instant, d: Duration) -> Instant {
    start.checked_add(d).unwrap_or_else(|| start + Duration::from_secs(30 * 365 * 24 * 3600))
}

/// A socket whose answers must be taken within a deadline: the clock starts at
/// the first write after the last flush, and hyper flushes once an answer is
/// written, so one answer gets `limit` however slowly the client reads it.
struct AnswerDeadline {
    inner: ServerStream,
    limit: Duration,
    due: Option<Pin<Box<Sleep>>>,
}

impl AnswerDeadline {
    fn new(inner: ServerStream, limit: Duration) -> Self {
        Self { inner, limit, due: None }
    }

    /// `Pending` turned into an error once the answer's deadline has passed (and
    /// the task woken at the deadline meanwhile).
    fn check<T>(&mut self, cx: &mut Context<'_>, poll: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        if poll.is_pending()
            && let Some(due) = self.due.as_mut()
            && due.as_mut().poll(cx).is_ready()
        {
            let why = format!("the client did not take its answer within {:?}", self.limit);
            return Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, why)));
        }
        poll
    }
}

impl AsyncRead for AnswerDeadline {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for AnswerDeadline {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        if self.due.is_none() {
            let limit = self.limit;
            let now = tokio::time::Instant::now();
            let at = now.checked_add(limit).unwrap_or(now + Duration::from_secs(30 * 365 * 24 * 3600));
            self.due = Some(Box::pin(tokio::time::sleep_until(at)));
        }
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.check(cx, poll)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        if matches!(poll, Poll::Ready(Ok(()))) {
            self.due = None;
        }
        self.check(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.check(cx, poll)
    }
}
