//! The loopback round trip: the floor of a hand-over through a server on the
//! same machine, measured in the same run as the hand-overs.
//!
//! An echo thread (blocking, as a server's thread would wait) answers each byte
//! a client task sends on one TCP connection over 127.0.0.1 (`TCP_NODELAY` on
//! both ends); the client, on the bench's runtime like the bench's clients,
//! sends the next byte when the last one is back. A hand-over through
//! `tenure serve` costs at least one such trip: the release goes to the server,
//! the grant comes back to the next holder.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Round trips for `seconds`: their latency in µs (warm-up left out).
pub(crate) async fn measure(seconds: Duration) -> Result<Histogram<u64>> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding the loopback echo")?;
    let addr = listener.local_addr()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut conn, _) = listener.accept()?;
        conn.set_nodelay(true)?;
        let mut byte = [0u8; 1];
        // Until the client closes (a read of nothing).
        while conn.read(&mut byte)? == 1 {
            conn.write_all(&byte)?;
        }
        Ok(())
    });
    let mut conn = tokio::net::TcpStream::connect(addr).await.context("connecting to the loopback echo")?;
    conn.set_nodelay(true)?;
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).context("histogram")?;
    let warmup = (seconds / 5).min(Duration::from_secs(1));
    let measure_from = Instant::now() + warmup;
    let end = measure_from + seconds;
    let mut byte = [b'.'; 1];
    loop {
        let t0 = Instant::now();
        if t0 >= end {
            break;
        }
        conn.write_all(&byte).await?;
        if conn.read(&mut byte).await? != 1 {
            bail!("the loopback echo closed the connection");
        }
        if t0 >= measure_from {
            hist.saturating_record(u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX).max(1));
        }
    }
    drop(conn);
    echo.join().map_err(|_| anyhow::anyhow!("the loopback echo thread panicked"))?.context("loopback echo")?;
    if hist.is_empty() {
        bail!("no loopback round trip completed");
    }
    Ok(hist)
}
