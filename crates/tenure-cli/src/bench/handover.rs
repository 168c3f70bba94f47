//! `tenure bench --op handover`: N clients queued on ONE lease.
//!
//! Each client waits for the lease, holds it for `--hold`, releases it and at
//! once queues again. Measured, with one monotonic clock in this process:
//! - **hand-overs per second**: grants that pass the lease from the client
//!   that released it to *another* client. A grant back to the releaser (it
//!   asked again and won before anyone waiting did, as polling clients often
//!   do) passes nothing on: it is counted apart, as a re-take;
//! - **the gap** of each hand-over: from the moment a holder starts its release
//!   (stamped by the releaser, just before its release call) to the moment the
//!   next holder's wait returns with the lease (stamped by that holder) — how
//!   long the lease sits free for the others, release cost included. A re-take
//!   has no gap for anyone waiting, and is not in it;
//! - the share of grants after a release that were re-takes.
//!
//! The loop is written once ([`measure`]); a target only says how to wait for
//! the lease ([`Target::hold`]) and how to let it go ([`Target::unhold`]). Two
//! holders at once (an overlap) fail the run.
//!
//! The `flock(2)` anchor ([`Flock`]) is added after every `file://` target:
//! each client opens the lock file itself (its own open file description) and
//! waits in `flock(LOCK_EX)` on a blocking thread — the kernel's wait queue,
//! what `flock(1)` does.

use std::fs::{self, File};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use async_trait::async_trait;
use hdrhistogram::Histogram;
use rustix::fs::FlockOperation;

use super::{BenchArgs, Figures, Retakes, Target};

/// Who holds the one lease, and when it was last let go: the shared clock of
/// a hand-over run.
#[derive(Debug)]
pub(crate) struct Baton {
    state: Mutex<State>,
    measure_from: Instant,
    measure_until: Instant,
}

#[derive(Debug)]
struct State {
    holder: Option<usize>,
    /// The last release: when it started, and by whom.
    released: Option<(Instant, usize)>,
    /// Gaps of the hand-overs to another client.
    gaps: Histogram<u64>,
    /// Gaps of the grants back to the client that had just released.
    retake_gaps: Histogram<u64>,
}

/// What a run counted.
#[derive(Debug)]
pub(crate) struct Tally {
    /// Gaps of the hand-overs to another client (one per hand-over).
    pub(crate) gaps: Histogram<u64>,
    /// Gaps of the re-takes by the client that had just released.
    pub(crate) retake_gaps: Histogram<u64>,
}

impl Baton {
    /// Counts only releases from `measure_from` on (what came before is
    /// warm-up) and grants up to `measure_until` (what comes after is the
    /// clients stopping).
    pub(crate) fn new(measure_from: Instant, measure_until: Instant) -> Result<Self> {
        let gaps = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).context("histogram")?;
        let state = State { holder: None, released: None, retake_gaps: gaps.clone(), gaps };
        Ok(Self { state: Mutex::new(state), measure_from, measure_until })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Client `w` got the lease at `at`.
    pub(crate) fn granted(&self, w: usize, at: Instant) -> Result<()> {
        let mut st = self.state();
        if let Some(other) = st.holder {
            bail!("clients {other} and {w} held the lease at once");
        }
        st.holder = Some(w);
        if let Some((released, by)) = st.released.take()
            && released >= self.measure_from
            && at <= self.measure_until
        {
            let gap = u64::try_from(at.saturating_duration_since(released).as_micros()).unwrap_or(u64::MAX).max(1);
            let gaps = if by == w { &mut st.retake_gaps } else { &mut st.gaps };
            gaps.saturating_record(gap);
        }
        Ok(())
    }

    /// Client `w` starts releasing the lease at `at`.
    pub(crate) fn releasing(&self, w: usize, at: Instant) -> Result<()> {
        let mut st = self.state();
        if st.holder != Some(w) {
            bail!("client {w} released a lease it did not hold (holder: {:?})", st.holder);
        }
        st.holder = None;
        st.released = Some((at, w));
        Ok(())
    }

    /// What was counted.
    pub(crate) fn tally(&self) -> Tally {
        let st = self.state();
        Tally { gaps: st.gaps.clone(), retake_gaps: st.retake_gaps.clone() }
    }
}

/// Runs `clients` clients on the one lease of `target` (see the module docs).
pub(crate) async fn measure(target: Arc<dyn Target>, clients: usize, args: &BenchArgs) -> Result<Figures> {
    for w in 0..clients {
        target.setup(w).await?;
    }
    let warmup = (args.seconds / 5).min(Duration::from_secs(1));
    let start = Instant::now();
    let measure_from = start + warmup;
    let end = measure_from + args.seconds;
    let baton = Arc::new(Baton::new(measure_from, end)?);
    let hold = args.hold;
    let mut tasks = Vec::with_capacity(clients);
    for w in 0..clients {
        let (t, baton) = (target.clone(), baton.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                t.hold(w).await?;
                let granted = Instant::now();
                baton.granted(w, granted)?;
                // tokio's timer rounds up to its 1 ms tick, even for zero:
                // `--hold 0` must not hold for a millisecond. Past the end,
                // nobody holds: the clients still queued pass the lease on
                // at once, and the run ends on time.
                let until = (granted + hold).min(end);
                if !hold.is_zero() && granted < until {
                    tokio::time::sleep_until(until.into()).await;
                }
                baton.releasing(w, Instant::now())?;
                t.unhold(w).await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    target.teardown().await?;
    let tally = baton.tally();
    let secs = args.seconds.as_secs_f64();
    // One client can only take the lease back: its re-takes are its figures.
    let gaps = if clients == 1 { &tally.retake_gaps } else { &tally.gaps };
    let retakes = tally.retake_gaps.len();
    let grants = tally.gaps.len() + retakes;
    if grants == 0 {
        bail!("{}: no grant after a release in {secs}s", target.label());
    }
    let mut f = Figures::of(target.label(), target.is_anchor(), clients, args, gaps, secs, None);
    // No hand-over at all (the releaser always won): no gap to show.
    if gaps.is_empty() {
        (f.p50_us, f.p99_us, f.max_us) = (f64::NAN, f64::NAN, f64::NAN);
    }
    f.retakes = Some(Retakes { per_sec: retakes as f64 / secs, share: retakes as f64 / grants as f64 });
    Ok(f)
}

/// The kernel's lock: `flock(LOCK_EX)` on one file, each client with its own
/// open file description, waiting on a blocking thread.
pub(crate) struct Flock {
    path: PathBuf,
    files: Mutex<Vec<Option<Arc<File>>>>,
}

impl Flock {
    pub(crate) fn new(dir: &str) -> Self {
        let path = PathBuf::from(dir).join(format!(".bench-flock-{}", tenure_core::random_nonce()));
        Self { path, files: Mutex::new(Vec::new()) }
    }

    fn file(&self, w: usize) -> Result<Arc<File>> {
        let files = self.files.lock().unwrap_or_else(PoisonError::into_inner);
        files.get(w).cloned().flatten().context("bench worker without its lock file")
    }
}

#[async_trait]
impl Target for Flock {
    fn label(&self) -> String {
        "flock(2) LOCK_EX, one open file per client (anchor)".into()
    }

    fn is_anchor(&self) -> bool {
        true
    }

    fn contends(&self) -> bool {
        true
    }

    async fn setup(&self, w: usize) -> Result<()> {
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.path)
            .with_context(|| format!("opening {}", self.path.display()))?;
        let mut files = self.files.lock().unwrap_or_else(PoisonError::into_inner);
        if files.len() <= w {
            files.resize(w + 1, None);
        }
        files[w] = Some(Arc::new(file));
        Ok(())
    }

    async fn op(&self, _w: usize) -> Result<()> {
        bail!("the flock anchor measures hand-overs only (--op handover)")
    }

    async fn hold(&self, w: usize) -> Result<()> {
        let file = self.file(w)?;
        tokio::task::spawn_blocking(move || rustix::fs::flock(&*file, FlockOperation::LockExclusive)).await??;
        Ok(())
    }

    async fn unhold(&self, w: usize) -> Result<()> {
        rustix::fs::flock(&*self.file(w)?, FlockOperation::Unlock)?;
        Ok(())
    }

    async fn teardown(&self) -> Result<()> {
        self.files.lock().unwrap_or_else(PoisonError::into_inner).clear();
        fs::remove_file(&self.path).ok();
        Ok(())
    }
}

/// The waits of a client that polls, as tenure's own waiters do by default:
/// full jitter over `[b/2, b]`, `b` doubling from 25 ms to 1 s.
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
    seed: u64,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        let defaults = tenure::LeaseOptions::exclusive();
        let seed = tenure_core::random_nonce()
            .bytes()
            .fold(0x9E37_79B9_7F4A_7C15u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3));
        Self { next: defaults.backoff_initial, max: defaults.backoff_max, seed: seed | 1 }
    }

    /// How long to sleep before the next look.
    pub(crate) fn next(&mut self) -> Duration {
        // xorshift64: jitter needs no better randomness.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let half = self.next / 2;
        let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        let sleep = half + Duration::from_nanos(self.seed % nanos.saturating_add(1));
        self.next = (self.next * 2).min(self.max);
        sleep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_run_from_the_release_to_another_clients_grant_re_takes_apart_and_warm_up_left_out() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let baton = Baton::new(ms(100), ms(1_000)).expect("baton");
        // Warm-up: a release before measure_from is not a measured hand-over.
        baton.granted(0, ms(0)).expect("first grant");
        baton.releasing(0, ms(50)).expect("release");
        baton.granted(1, ms(120)).expect("grant after warm-up release");
        // Measured: 1 → 2 after 3 ms, 2 → 2 (a re-take) after 1 ms, 2 → 0 after 10 ms.
        baton.releasing(1, ms(200)).expect("release");
        baton.granted(2, ms(203)).expect("grant");
        baton.releasing(2, ms(300)).expect("release");
        baton.granted(2, ms(301)).expect("re-take");
        baton.releasing(2, ms(400)).expect("release");
        baton.granted(0, ms(410)).expect("grant");
        // Past the end: the clients stopping are not measured.
        baton.releasing(0, ms(995)).expect("release");
        baton.granted(1, ms(1_001)).expect("grant after the end");
        let tally = baton.tally();
        // Two hand-overs to another client (3 ms and 10 ms), one re-take (1 ms).
        assert_eq!((tally.gaps.len(), tally.retake_gaps.len()), (2, 1));
        assert!(tally.gaps.equivalent(tally.gaps.min(), 3_000), "min {}", tally.gaps.min());
        assert!(tally.gaps.equivalent(tally.gaps.max(), 10_000), "max {}", tally.gaps.max());
        assert!(tally.retake_gaps.equivalent(tally.retake_gaps.max(), 1_000));
    }

    #[test]
    fn two_holders_at_once_or_a_release_by_a_non_holder_fail_the_run() {
        let t0 = Instant::now();
        let baton = Baton::new(t0, t0 + Duration::from_secs(1)).expect("baton");
        baton.granted(0, t0).expect("grant");
        assert!(baton.granted(1, t0).is_err(), "an overlap must be caught");
        assert!(baton.releasing(1, t0).is_err(), "only the holder releases");
        baton.releasing(0, t0).expect("release");
    }

    #[test]
    fn the_polling_backoff_is_tenures_default() {
        let mut b = Backoff::new();
        let first = b.next();
        assert!((Duration::from_micros(12_500)..=Duration::from_millis(25)).contains(&first), "{first:?}");
        let later: Vec<Duration> = (0..10).map(|_| b.next()).collect();
        assert!(later.iter().all(|d| *d <= Duration::from_secs(1)), "{later:?}");
        assert!(later.last().is_some_and(|d| *d >= Duration::from_millis(500)), "{later:?}");
    }
}
