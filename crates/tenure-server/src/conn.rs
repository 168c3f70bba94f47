//! One multiplexed, pipelined client connection to a lease server.
//!
//! Callers encode their request straight into a shared write buffer and wait on a
//! oneshot for the answer; a writer task sends whatever has piled up in one write
//! (so 64 concurrent callers cost a handful of syscalls, not 64), and a reader task
//! routes answers back by request id. Both tasks belong to the [`Conn`]: they end
//! when it is dropped, and when the socket fails every waiting caller gets the
//! error at once (the endpoint then reconnects on the next call).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;

use crate::wire::{self, MAX_RESPONSE, Request, Response};

/// An answer: the server's time and the response body.
pub(crate) type Reply = Result<(u64, Bytes), String>;

#[derive(Default)]
struct State {
    out: Vec<u8>,
    pending: HashMap<u32, oneshot::Sender<Reply>>,
    next_id: u32,
    closed: Option<String>,
}

struct Inner {
    state: Mutex<State>,
    wake_writer: Notify,
    dead: AtomicBool,
    /// Server time minus local wall time at the last answer, µs.
    skew_us: AtomicI64,
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks the connection dead and fails every waiting caller.
    fn close(&self, why: String) {
        self.dead.store(true, Ordering::Release);
        let pending = {
            let mut st = self.lock();
            st.closed.get_or_insert(why.clone());
            std::mem::take(&mut st.pending)
        };
        for (_, tx) in pending {
            let _ = tx.send(Err(why.clone()));
        }
    }
}

/// A connection and its two tasks.
pub(crate) struct Conn {
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
    /// Wraps a connected socket.
    pub(crate) fn start(stream: TcpStream) -> Self {
        let _ = stream.set_nodelay(true);
        let (rd, wr) = stream.into_split();
        let inner = Arc::new(Inner {
            state: Mutex::new(State::default()),
            wake_writer: Notify::new(),
            dead: AtomicBool::new(false),
            skew_us: AtomicI64::new(0),
        });
        let reader = tokio::spawn(read_loop(rd, inner.clone()));
        let writer = tokio::spawn(write_loop(wr, inner.clone()));
        Self { inner, reader, writer }
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.inner.dead.load(Ordering::Acquire)
    }

    /// Server time minus local wall time, as of the last answer.
    pub(crate) fn skew_us(&self) -> i64 {
        self.inner.skew_us.load(Ordering::Relaxed)
    }

    /// Sends `req` and waits up to `timeout` for its answer.
    pub(crate) async fn call(&self, req: &Request<'_>, timeout: Duration) -> Result<(u64, Response), String> {
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut st = self.inner.lock();
            if let Some(why) = &st.closed {
                return Err(why.clone());
            }
            // Id 0 is the server's for errors that answer no request.
            st.next_id = st.next_id.wrapping_add(1).max(1);
            let id = st.next_id;
            wire::encode_request(&mut st.out, id, req);
            st.pending.insert(id, tx);
            id
        };
        self.inner.wake_writer.notify_one();
        let reply = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err("the connection was closed".to_string()),
            Err(_) => {
                self.inner.lock().pending.remove(&id);
                return Err(format!("no answer within {}", tenure::human_duration(timeout)));
            }
        };
        let (time, body) = reply?;
        let resp = postcard::from_bytes::<Response>(&body).map_err(|e| format!("undecodable answer: {e}"))?;
        Ok((time, resp))
    }
}

async fn write_loop(mut wr: OwnedWriteHalf, inner: Arc<Inner>) {
    let mut spare = Vec::with_capacity(16 * 1024);
    loop {
        inner.wake_writer.notified().await;
        loop {
            {
                let mut st = inner.lock();
                if st.out.is_empty() {
                    break;
                }
                std::mem::swap(&mut st.out, &mut spare);
            }
            if let Err(e) = wr.write_all(&spare).await {
                inner.close(format!("sending to the server failed: {e}"));
                return;
            }
            spare.clear();
        }
    }
}

async fn read_loop(mut rd: OwnedReadHalf, inner: Arc<Inner>) {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let why = loop {
        loop {
            let n = match wire::frame_len(&buf, 12, MAX_RESPONSE) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(e) => {
                    inner.close(format!("the server sent a bad frame: {e}"));
                    return;
                }
            };
            let frame = buf.split_to(n).freeze();
            let Some((id, time, body)) = wire::split_response(&frame) else { continue };
            let skew = time as i64 - (tenure::clock::unix_ms(std::time::SystemTime::now()) as i64) * 1000;
            inner.skew_us.store(skew, Ordering::Relaxed);
            let body = frame.slice_ref(body);
            let tx = inner.lock().pending.remove(&id);
            match tx {
                Some(tx) => {
                    let _ = tx.send(Ok((time, body)));
                }
                // Id 0 with nobody waiting: the server's last word before closing.
                None => {
                    if let Ok(Response::Error { message, .. }) = postcard::from_bytes::<Response>(&body) {
                        inner.close(format!("the server closed the connection: {message}"));
                        return;
                    }
                }
            }
        }
        buf.reserve(16 * 1024);
        match rd.read_buf(&mut buf).await {
            Ok(0) => break "the server closed the connection".to_string(),
            Ok(_) => {}
            Err(e) => break format!("reading from the server failed: {e}"),
        }
    };
    inner.close(why);
}
