//! The read side of a connection: answers matched to their requests by id,
//! polled for a short while before it sleeps, and the reason a connection
//! is given up.

use super::*;

/// Why a connection is given up when the server answered nothing for `timeout`.
fn silent(timeout: Duration) -> String {
    format!("the server answered nothing for {} while requests waited", tenure_core::human_duration(timeout))
}

/// Why a peer whose first bytes are no tenure frame (`why`, as the framing
/// says) is not a lease server: an HTTP answer is most likely `tenure serve
/// --http`'s port, named so that the user sees the mix-up.
fn not_a_lease_server(first: &[u8], why: &str) -> String {
    if first.starts_with(b"HTTP/") {
        "the peer answered in HTTP: not a tenure lease server (is this the --http port?)".to_string()
    } else {
        format!("the peer's first bytes are no tenure frame ({why}): not a tenure lease server")
    }
}

/// Closes the connection when the reader ends any other way than by closing it
/// (a panic, an abort): callers waiting for answers get an error, never a hang.
struct CloseOnDrop(Arc<Inner>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        if !self.0.dead.load(Ordering::Acquire) {
            self.0.close("the connection's reader stopped".into());
        }
    }
}

pub(super) async fn read_loop(inner: Arc<Inner>, mut reader: Reader, mut spin: Spin) {
    let _closer = CloseOnDrop(inner.clone());
    let mut buf = BytesMut::with_capacity(64 * 1024);
    // Answers of one read, handed to their callers after the lock is released.
    let mut ready: Vec<(oneshot::Sender<Reply>, u64, Bytes)> = Vec::new();
    let mut frames: Vec<(u32, u64, Bytes)> = Vec::new();
    // One timer for the connection's life, re-armed only when it fires (see below).
    let timer = tokio::time::sleep(inner.timeout);
    tokio::pin!(timer);
    // When the server last answered a request that waited, or requests
    // started waiting. Bytes alone are no answer: a server that drips a
    // frame, or answers ids nobody asked, does not hold a call for longer.
    let mut heard = tokio::time::Instant::now();
    let mut was_waiting = false;
    // Whether a whole frame came yet: until then, bytes that are no frame mean
    // the peer is not a lease server at all (pointed at the wrong port).
    let mut framed = false;
    let why = loop {
        // However fast bytes come, the reader gives the runtime its turn
        // (every so many reads): a server flooding frames must not starve
        // the process's other tasks and timers, its callers' own included.
        tokio::task::consume_budget().await;
        loop {
            let n = match wire::frame_len(&buf, 12, MAX_RESPONSE) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(e) if !framed => {
                    inner.not_a_server.store(true, Ordering::Release);
                    inner.close(not_a_lease_server(&buf, &e));
                    return;
                }
                Err(e) => {
                    inner.close(format!("the server sent a bad frame: {e}"));
                    return;
                }
            };
            let frame = buf.split_to(n).freeze();
            let Some((id, time, body)) = wire::split_response(&frame) else { continue };
            // A lease server's first frame answers the hello (or is its last
            // word, id 0): one that answers nothing asked is a peer of another
            // kind whose first bytes happened to read as a length (a MySQL
            // greeting, say), which would otherwise keep the caller until the
            // timeout.
            if !framed && id != 0 && !inner.state.lock().pending.contains_key(&id) {
                inner.not_a_server.store(true, Ordering::Release);
                let why = format!("its first frame answers no request (id {id})");
                inner.close(format!("the peer's first bytes are no tenure answer ({why}): not a tenure lease server"));
                return;
            }
            framed = true;
            let body = frame.slice_ref(body);
            frames.push((id, time, body));
        }
        if let Some(&(_, time, _)) = frames.last() {
            // Saturating: a server's time is whatever it sends, and must not panic us.
            let ours = i64::try_from(inner.clock.wall_ms()).unwrap_or(i64::MAX).saturating_mul(1000);
            let skew = i64::try_from(time).unwrap_or(i64::MAX).saturating_sub(ours);
            inner.skew_us.store(skew, Ordering::Relaxed);
        }
        // One lock for every answer of the read.
        let (waiting, in_flight, orphan) = {
            let mut st = inner.state.lock();
            let mut orphan = None;
            for (id, time, body) in frames.drain(..) {
                match st.pending.remove(&id) {
                    Some((tx, parked)) => {
                        st.parked -= usize::from(parked);
                        ready.push((tx, time, body));
                    }
                    // Id 0 answers no request: the server's word before closing.
                    // (Any other unknown id answers a withdrawn wait.)
                    None if id == 0 => orphan = Some(body),
                    None => {}
                }
            }
            st.returning += ready.len();
            // The callers of this connection's traffic: requests on their way,
            // and answers just handed out whose callers will send again soon.
            let in_flight = st.pending.len().saturating_sub(st.parked).saturating_add(st.returning);
            (st.pending.len() > st.parked, in_flight, orphan)
        };
        let answered = !ready.is_empty();
        for (tx, time, body) in ready.drain(..) {
            let _ = tx.send(Ok((time, body)));
        }
        // Id 0 with nobody waiting: the server's last word before closing.
        if let Some(body) = orphan
            && let Ok(Response::Error { code, message }) = wire::decode::<Response>(&body)
        {
            if code == ErrorCode::Idle {
                inner.idle_closed.store(true, Ordering::Release);
            }
            *inner.last_word.lock() = Some((code, message.clone()));
            inner.close(format!("the server closed the connection: {message}"));
            return;
        }
        buf.reserve(16 * 1024);
        if answered || (waiting && !was_waiting) {
            // Answers came, or requests began waiting since the last pass (the
            // idle branch may have missed their signal on a spurious
            // wake-up): time the ones waiting from now.
            heard = tokio::time::Instant::now();
        } else if waiting && tokio::time::Instant::now() >= heard + inner.timeout {
            // Checked before any read: bytes that keep coming without an
            // answer (read at once, by a poll or the spin) do not extend it.
            break silent(inner.timeout);
        }
        was_waiting = waiting;
        // While answers tend to come quickly, poll for them before sleeping;
        // not while many are on their way (see SPIN_MAX_IN_FLIGHT).
        let spins = waiting && in_flight <= SPIN_MAX_IN_FLIGHT;
        let spun = if spins { spin.read(&mut reader, &mut buf).await } else { None };
        let read = match spun {
            Some(read) => read,
            None => {
                let read = if waiting {
                    // The server has `timeout` since it last spoke (or since requests
                    // began waiting) to say anything. The timer is armed at most once per
                    // `timeout`: when it fires early it is pushed to the real deadline.
                    let deadline = heard + inner.timeout;
                    if deadline < timer.deadline() {
                        timer.as_mut().reset(deadline);
                    }
                    tokio::select! {
                        r = reader.read(&mut buf) => r,
                        () = &mut timer => {
                            let deadline = heard + inner.timeout;
                            if tokio::time::Instant::now() >= deadline {
                                break silent(inner.timeout);
                            }
                            timer.as_mut().reset(deadline);
                            continue;
                        }
                    }
                } else {
                    // Idle: nothing to time out. A request sent meanwhile finds the
                    // connection alive, and the next read is timed from then.
                    tokio::select! {
                        r = reader.read(&mut buf) => r,
                        () = inner.request_sent.notified() => {
                            heard = tokio::time::Instant::now();
                            continue;
                        }
                    }
                };
                if spins && matches!(read, Ok(n) if n > 0) {
                    spin.woke();
                }
                read
            }
        };
        match read {
            // Part of a first frame, and the end: a peer that said something
            // else and hung up (a TLS port's alert, say), not a lease server.
            Ok(0) if !framed && !buf.is_empty() => {
                inner.not_a_server.store(true, Ordering::Release);
                let e = format!("{} bytes that are no whole frame, then the end", buf.len());
                break not_a_lease_server(&buf, &e);
            }
            Ok(0) => break "the server closed the connection".to_string(),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            // A TLS server that closes without a close_notify alert.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                break "the server closed the connection".to_string();
            }
            Err(e) => break format!("reading from the server failed: {e}"),
        }
    };
    inner.close(why);
}
