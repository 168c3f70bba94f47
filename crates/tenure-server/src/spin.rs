//! Adaptive polling: a short spin on a socket instead of a sleep, while the peer
//! tends to answer within it.
//!
//! Where idle cores sleep (a VM above all), waking a thread that waits in
//! `epoll_wait` costs tens of µs: more than a lease server takes to decide. So a
//! reader that has just been busy first tries the socket for up to a window,
//! yielding to the runtime between tries: other tasks run meanwhile, and when
//! none is ready the runtime polls its I/O driver without sleeping. It spins only
//! while the peer's last answer came within the window: a slow or quiet peer
//! costs one spin that fails, then plain sleeps until it is quick again. A window
//! of zero turns it off.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::net::TcpStream;

/// One reader's spin state.
#[derive(Debug)]
pub(crate) struct Spin {
    window: Duration,
    /// The peer's last answer came within the window.
    quick: bool,
    /// When the current wait began.
    since: Instant,
}

impl Spin {
    pub(crate) fn new(window: Duration) -> Self {
        Self { window, quick: !window.is_zero(), since: Instant::now() }
    }

    /// Begins a wait for the peer: reads into `buf` if data comes within the
    /// window (`Some`, with what the read returned). `None`: it did not, or the
    /// peer is not quick; the caller waits the usual way, then calls
    /// [`Spin::woke`].
    pub(crate) async fn read(&mut self, stream: &TcpStream, buf: &mut BytesMut) -> Option<std::io::Result<usize>> {
        self.since = Instant::now();
        if !self.quick {
            return None;
        }
        loop {
            match stream.try_read_buf(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                r => return Some(r),
            }
            if self.since.elapsed() >= self.window {
                self.quick = false;
                return None;
            }
            tokio::task::yield_now().await;
        }
    }

    /// The usual wait that followed a `None` got data: spin next time if it came
    /// within the window.
    pub(crate) fn woke(&mut self) {
        self.quick = self.since.elapsed() < self.window;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).await.expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        (client, server)
    }

    #[tokio::test]
    async fn a_quick_peer_is_read_by_spinning_a_quiet_one_stops_it() {
        let (mut a, b) = pair().await;
        let mut spin = Spin::new(Duration::from_millis(200));
        let mut buf = BytesMut::new();
        // Data that comes within the window is read by the spin itself.
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            a.write_all(b"hello").await.expect("write");
            a
        });
        assert_eq!(spin.read(&b, &mut buf).await.expect("spun").expect("read"), 5);
        assert_eq!(&buf[..], b"hello");
        let mut a = writer.await.expect("writer");
        // A peer that says nothing within the window: the spin gives up...
        assert!(spin.read(&b, &mut buf).await.is_none());
        // ...and the next wait does not spin at all, however soon data comes.
        a.write_all(b"!").await.expect("write");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(spin.read(&b, &mut buf).await.is_none());
        // A usual wait that ended within the window makes the peer quick again.
        spin.woke();
        assert_eq!(spin.read(&b, &mut buf).await.expect("spun").expect("read"), 1);
    }

    #[tokio::test]
    async fn a_zero_window_never_spins() {
        let (mut a, b) = pair().await;
        a.write_all(b"x").await.expect("write");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut spin = Spin::new(Duration::ZERO);
        let mut buf = BytesMut::new();
        assert!(spin.read(&b, &mut buf).await.is_none());
        spin.woke();
        assert!(spin.read(&b, &mut buf).await.is_none());
        assert!(buf.is_empty());
    }
}
