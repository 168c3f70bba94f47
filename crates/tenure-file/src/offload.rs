//! Blocking file-system calls with a deadline.
//!
//! A hard-mounted NFS whose server went away, a stopped FUSE daemon or a dying
//! disk can hold a `read(2)` or `open(2)` in the kernel for minutes or forever; no
//! timer can interrupt it. So directory stores run every operation on a thread of
//! tokio's blocking pool and wait for it only until a deadline: past it, the
//! caller gets an error at once (a keep-alive reports the outage, `tenure lock
//! --timeout` and signals keep working) and the thread is *abandoned* — it
//! finishes, or not, on its own.
//!
//! Abandoned threads are counted. While [`MAX_STUCK`] of them are still stuck,
//! new operations fail at once instead of starting yet another thread into the
//! same hung mount, so a store that hangs for hours costs a bounded number of
//! threads. When the mount recovers, the stuck calls return and the count drops.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use std::time::Duration;

use tenure_core::human_duration;
use tenure_core::{Error, Result};

/// Abandoned operations of one store after which new ones fail at once.
pub const MAX_STUCK: usize = 4;

/// Default deadline of one file-system operation.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs blocking operations with a deadline (see the module docs).
#[derive(Clone, Debug)]
pub struct Offload {
    url: Arc<str>,
    timeout: Duration,
    stuck: Arc<AtomicUsize>,
}

/// Where one operation stands, shared by the waiter and the thread.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Running,
    Abandoned,
    Done,
}

impl Offload {
    /// For the store at `url`, giving each operation `timeout`.
    pub fn new(url: impl Into<Arc<str>>, timeout: Duration) -> Self {
        Self { url: url.into(), timeout, stuck: Arc::default() }
    }

    /// The deadline of one operation.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Operations abandoned past their deadline that have not returned yet.
    pub fn stuck(&self) -> usize {
        self.stuck.load(Ordering::Relaxed)
    }

    /// Runs `f` on a blocking thread; an [`Error::Store`] if it does not return
    /// within the deadline, or if too many earlier operations are still stuck.
    pub async fn run<T: Send + 'static>(
        &self,
        what: &str,
        f: impl FnOnce() -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let stuck = self.stuck();
        if stuck >= MAX_STUCK {
            return Err(Error::store(
                &*self.url,
                what,
                format!(
                    "{stuck} earlier operations are still stuck in the file system (a hung mount?); not starting another"
                ),
            ));
        }
        let state = Arc::new(Mutex::new(State::Running));
        let (theirs, counter) = (state.clone(), self.stuck.clone());
        let task = tokio::task::spawn_blocking(move || {
            let out = f();
            let mut st = theirs.lock();
            if *st == State::Abandoned {
                counter.fetch_sub(1, Ordering::Relaxed);
            }
            *st = State::Done;
            out
        });
        match tokio::time::timeout(self.timeout, task).await {
            Ok(Ok(out)) => out,
            Ok(Err(join)) => Err(Error::store(&*self.url, what, format!("the file-system task failed: {join}"))),
            Err(_) => {
                let mut st = state.lock();
                if *st == State::Running {
                    *st = State::Abandoned;
                    self.stuck.fetch_add(1, Ordering::Relaxed);
                }
                Err(Error::store(
                    &*self.url,
                    what,
                    format!("no answer from the file system within {} (a hung mount?)", human_duration(self.timeout)),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    #[tokio::test]
    async fn a_hung_operation_times_out_and_too_many_fail_fast_until_they_return() {
        let offload = Offload::new("file:///x", Duration::from_millis(50));
        let mut release = Vec::new();
        for i in 0..MAX_STUCK {
            let (tx, rx) = mpsc::channel::<()>();
            release.push(tx);
            let err = offload.run("reading", move || rx.recv().map_err(|e| Error::store("x", "y", e))).await;
            let err = err.expect_err("hung");
            assert!(err.to_string().contains("no answer from the file system"), "{err}");
            assert_eq!(offload.stuck(), i + 1);
        }
        let err = offload.run("reading", || Ok(())).await.expect_err("too many stuck");
        assert!(err.to_string().contains("still stuck"), "{err}");
        // The mount recovers: the stuck calls return, and work goes on.
        for tx in release {
            tx.send(()).expect("send");
        }
        for _ in 0..200 {
            if offload.stuck() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(offload.stuck(), 0);
        assert_eq!(offload.run("reading", || Ok(7)).await.expect("works again"), 7);
    }
}
