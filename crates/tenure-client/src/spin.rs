//! Adaptive polling: a short spin on a socket instead of a sleep, while the peer
//! tends to answer within it.
//!
//! Where idle cores sleep (a VM above all), waking a thread that waits in
//! `epoll_wait` costs tens of µs: more than a lease server takes to decide. So a
//! reader that has just been busy first tries the socket for up to a window,
//! yielding to the runtime between tries: other tasks run meanwhile, and when
//! none is ready the runtime polls its I/O driver without sleeping. It spins only
//! while the peer's last answer came within four windows: a slow or quiet peer
//! costs one spin that fails, then plain sleeps until it is quick again, while a
//! peer that is only sometimes late (a hiccup of the machine) is polled again at
//! once. A window of zero turns it off.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use futures::FutureExt as _;
use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio::net::TcpStream;

/// How many windows late a peer may answer and still be polled next time.
const LATE: u32 = 4;

/// A socket that can be read without waiting (`WouldBlock` when nothing is there).
pub trait TryRead {
    fn try_read_buf(&mut self, buf: &mut BytesMut) -> std::io::Result<usize>;
}

impl TryRead for TcpStream {
    fn try_read_buf(&mut self, buf: &mut BytesMut) -> std::io::Result<usize> {
        TcpStream::try_read_buf(self, buf)
    }
}

/// One poll of an async reader (a TLS stream, which has no `try_read`):
/// `WouldBlock` unless data (or the end) is there at once. The waker given to
/// that poll does nothing; the next real wait registers its own.
pub fn read_now<R: AsyncRead + Unpin + ?Sized>(r: &mut R, buf: &mut BytesMut) -> std::io::Result<usize> {
    r.read_buf(buf).now_or_never().unwrap_or_else(|| Err(std::io::ErrorKind::WouldBlock.into()))
}

/// One reader's spin state.
#[derive(Debug)]
pub struct Spin {
    window: Duration,
    /// The peer's last answer came within the window.
    quick: bool,
    /// When the current wait began.
    since: Instant,
}

impl Spin {
    pub fn new(window: Duration) -> Self {
        Self { window, quick: !window.is_zero(), since: Instant::now() }
    }

    /// Begins a wait for the peer: reads into `buf` if data comes within the
    /// window (`Some`, with what the read returned). `None`: it did not, or the
    /// peer is not quick; the caller waits the usual way, then calls
    /// [`Spin::woke`].
    pub async fn read<S: TryRead + ?Sized>(
        &mut self,
        stream: &mut S,
        buf: &mut BytesMut,
    ) -> Option<std::io::Result<usize>> {
        self.read_unless(stream, buf, || false).await
    }

    /// [`Spin::read`], that also gives up the spin as soon as `other()` says
    /// there is other work (a lease server's queued acquisition granted while
    /// it polls its client: the grant must not wait for the window to pass).
    /// Giving up for that does not make the peer slow.
    pub async fn read_unless<S: TryRead + ?Sized>(
        &mut self,
        stream: &mut S,
        buf: &mut BytesMut,
        mut other: impl FnMut() -> bool,
    ) -> Option<std::io::Result<usize>> {
        self.since = Instant::now();
        if !self.quick {
            return None;
        }
        loop {
            match stream.try_read_buf(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                r => return Some(r),
            }
            if other() {
                return None;
            }
            if self.since.elapsed() >= self.window {
                self.quick = false;
                return None;
            }
            tokio::task::yield_now().await;
        }
    }

    /// The usual wait that followed a `None` got data: spin next time if it came
    /// within [`LATE`] windows. (Only within one window made each late answer cost
    /// the next wait a sleep too: at one request at a time, p99 doubled.)
    pub fn woke(&mut self) {
        self.quick = self.since.elapsed() < self.window * LATE;
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
        let (mut a, mut b) = pair().await;
        let mut spin = Spin::new(Duration::from_millis(200));
        let mut buf = BytesMut::new();
        // Data that comes within the window is read by the spin itself.
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            a.write_all(b"hello").await.expect("write");
            a
        });
        assert_eq!(spin.read(&mut b, &mut buf).await.expect("spun").expect("read"), 5);
        assert_eq!(&buf[..], b"hello");
        let mut a = writer.await.expect("writer");
        // A peer that says nothing within the window: the spin gives up...
        assert!(spin.read(&mut b, &mut buf).await.is_none());
        // ...and the next wait does not spin at all, however soon data comes.
        a.write_all(b"!").await.expect("write");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(spin.read(&mut b, &mut buf).await.is_none());
        // A usual wait that ended within the window makes the peer quick again.
        spin.woke();
        assert_eq!(spin.read(&mut b, &mut buf).await.expect("spun").expect("read"), 1);
    }

    #[tokio::test]
    async fn a_peer_a_little_late_is_polled_again_one_later_than_four_windows_is_not() {
        let (mut a, mut b) = pair().await;
        let mut spin = Spin::new(Duration::from_millis(100));
        let mut buf = BytesMut::new();
        // Nothing within the window: the spin gives up. The usual wait that
        // follows ends after about 1.6 windows: late, but not four windows late.
        assert!(spin.read(&mut b, &mut buf).await.is_none());
        tokio::time::sleep(Duration::from_millis(60)).await;
        spin.woke();
        // So the next wait spins, and reads what comes.
        a.write_all(b"x").await.expect("write");
        assert_eq!(spin.read(&mut b, &mut buf).await.expect("spun").expect("read"), 1);
        // This time the wait that follows the failed spin ends after five windows.
        assert!(spin.read(&mut b, &mut buf).await.is_none());
        tokio::time::sleep(Duration::from_millis(400)).await;
        spin.woke();
        // So the next wait does not spin, though data is there.
        a.write_all(b"y").await.expect("write");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(spin.read(&mut b, &mut buf).await.is_none());
        assert_eq!(&buf[..], b"x");
    }

    #[tokio::test]
    async fn other_work_ends_the_spin_without_making_the_peer_slow() {
        let (mut a, mut b) = pair().await;
        let mut spin = Spin::new(Duration::from_secs(3600));
        let mut buf = BytesMut::new();
        // Nothing to read, and other work on the third look: the spin ends
        // there, long before its window.
        let mut looks = 0;
        assert!(
            spin.read_unless(&mut b, &mut buf, || {
                looks += 1;
                looks == 3
            })
            .await
            .is_none()
        );
        assert_eq!(looks, 3);
        // The peer is still quick: the next wait spins and reads.
        a.write_all(b"z").await.expect("write");
        assert_eq!(spin.read(&mut b, &mut buf).await.expect("spun").expect("read"), 1);
    }

    #[tokio::test]
    async fn a_zero_window_never_spins() {
        let (mut a, mut b) = pair().await;
        a.write_all(b"x").await.expect("write");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut spin = Spin::new(Duration::ZERO);
        let mut buf = BytesMut::new();
        assert!(spin.read(&mut b, &mut buf).await.is_none());
        spin.woke();
        assert!(spin.read(&mut b, &mut buf).await.is_none());
        assert!(buf.is_empty());
    }
}
