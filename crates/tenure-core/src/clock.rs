//! Injected time.
//!
//! tenure reads two clocks and keeps them apart:
//! - the **wall clock** (unix milliseconds), which may jump and differ between
//!   machines. It is only written into records (absolute deadlines, watermarks) and
//!   used for the skew-bounded takeover rule;
//! - the **monotonic clock** ([`Mono`]), which never jumps. A holder measures its own
//!   deadline on it, and a contender measures how long it has watched a record stay
//!   unchanged on it.
//!
//! [`SystemClock`] is the real thing; [`ManualClock`] lets tests move both clocks,
//! skew the wall clock, and wake sleepers without real sleeps.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Add, Sub};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use tokio::sync::oneshot;

/// A point on a clock's monotonic timeline: time since the clock's own origin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mono(Duration);

impl Mono {
    /// The point `d` after the origin.
    pub const fn from_origin(d: Duration) -> Self {
        Self(d)
    }
    /// Time since the origin.
    pub const fn since_origin(self) -> Duration {
        self.0
    }
    /// `self - earlier`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Mono) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

impl Add<Duration> for Mono {
    type Output = Mono;
    fn add(self, d: Duration) -> Mono {
        Mono(self.0.saturating_add(d))
    }
}

impl Sub<Duration> for Mono {
    type Output = Mono;
    fn sub(self, d: Duration) -> Mono {
        Mono(self.0.saturating_sub(d))
    }
}

/// Source of time for everything in tenure.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Wall-clock time in milliseconds since the unix epoch.
    fn wall_ms(&self) -> u64;
    /// Monotonic time.
    fn mono(&self) -> Mono;
    /// A future that completes once [`Clock::mono`] has reached `deadline`.
    fn sleep_until(&self, deadline: Mono) -> BoxFuture<'static, ()>;
}

/// Helpers every [`Clock`] gets.
pub trait ClockExt: Clock {
    /// Sleeps for `d` of monotonic time.
    fn sleep(&self, d: Duration) -> BoxFuture<'static, ()> {
        self.sleep_until(self.mono() + d)
    }

    /// Runs `fut`, giving up after `d` of monotonic time with `None`.
    fn timeout<'a, F: std::future::Future + Send + 'a>(&self, d: Duration, fut: F) -> BoxFuture<'a, Option<F::Output>>
    where
        F::Output: Send,
    {
        let sleep = self.sleep(d);
        Box::pin(async move {
            tokio::select! {
                // An answer that is ready wins, also at a deadline of zero.
                biased;
                out = fut => Some(out),
                () = sleep => None,
            }
        })
    }
}

impl<C: Clock + ?Sized> ClockExt for C {}

/// The real clocks: [`SystemTime`] for the wall clock, and for monotonic time
/// tokio's [`tokio::time::Instant`] (so `tokio::time::pause` also pauses
/// tenure's monotonic time) **plus the time the machine spent suspended**.
///
/// `CLOCK_MONOTONIC`, which tokio reads, stops while the machine sleeps; the
/// other machines' clocks do not. A holder suspended for an hour would wake up
/// believing its lease had most of its time left, long after a contender took
/// it over. So monotonic time here also counts the difference between
/// `CLOCK_BOOTTIME` (which keeps counting through suspend) and
/// `CLOCK_MONOTONIC` since the clock was made, and sleeps wake at least once a
/// second to notice a suspend that happened while they slept.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: tokio::time::Instant,
    /// `CLOCK_BOOTTIME − CLOCK_MONOTONIC` when the clock was made.
    suspended_before: Duration,
}

impl SystemClock {
    /// A clock whose monotonic origin is now.
    pub fn new() -> Self {
        Self { origin: tokio::time::Instant::now(), suspended_before: suspended_total() }
    }

    /// The shared system clock, as the `Arc<dyn Clock>` that stores take.
    pub fn shared() -> Arc<dyn Clock> {
        Arc::new(Self::new())
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

/// How long this machine has been suspended since it booted.
fn suspended_total() -> Duration {
    use rustix::time::{ClockId, clock_gettime};
    let d = |t: rustix::time::Timespec| {
        Duration::new(u64::try_from(t.tv_sec).unwrap_or(0), u32::try_from(t.tv_nsec).unwrap_or(0))
    };
    // Read in this order, a tick between the two reads counts against
    // suspension, never for it.
    let mono = d(clock_gettime(ClockId::Monotonic));
    d(clock_gettime(ClockId::Boottime)).saturating_sub(mono)
}

/// `d` in whole milliseconds, saturating at `u64::MAX`: for durations already
/// checked against the limits' `MAX_DURATION`, this is exact.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Milliseconds since the unix epoch of `t` (zero before the epoch).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, millis)
}

/// Longest a [`SystemClock`] sleep goes without looking at the clock again.
const SLEEP_CHUNK: Duration = Duration::from_secs(1);

impl Clock for SystemClock {
    fn wall_ms(&self) -> u64 {
        unix_ms(SystemTime::now())
    }
    fn mono(&self) -> Mono {
        let suspended = suspended_total().saturating_sub(self.suspended_before);
        Mono(self.origin.elapsed().saturating_add(suspended))
    }
    fn sleep_until(&self, deadline: Mono) -> BoxFuture<'static, ()> {
        let this = *self;
        Box::pin(async move {
            loop {
                let now = this.mono();
                if now >= deadline {
                    return;
                }
                tokio::time::sleep(deadline.saturating_since(now).min(SLEEP_CHUNK)).await;
            }
        })
    }
}

/// A clock that only moves when told to: for tests.
///
/// Both clocks advance together with [`ManualClock::advance`]; the wall clock alone
/// can be shifted with [`ManualClock::set_wall_offset`] to model skew or a jump.
/// Several `ManualClock`s can share one timeline ([`ManualClock::skewed`]) to model
/// machines whose wall clocks disagree.
#[derive(Clone)]
pub struct ManualClock {
    timeline: Arc<Timeline>,
    wall_offset_ms: Arc<Mutex<i64>>,
}

struct Timeline {
    start_wall_ms: u64,
    state: Mutex<TimelineState>,
}

#[derive(Default)]
struct TimelineState {
    now: Duration,
    next_id: u64,
    sleepers: BTreeMap<(Duration, u64), oneshot::Sender<()>>,
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock").field("mono", &self.mono()).field("wall_ms", &self.wall_ms()).finish()
    }
}

impl ManualClock {
    /// A clock whose wall time starts at the real current time and whose monotonic
    /// time starts at zero.
    pub fn new() -> Self {
        Self::starting_at(unix_ms(SystemTime::now()))
    }

    /// A clock whose wall time starts at `wall_ms`.
    pub fn starting_at(wall_ms: u64) -> Self {
        Self {
            timeline: Arc::new(Timeline { start_wall_ms: wall_ms, state: Mutex::default() }),
            wall_offset_ms: Arc::new(Mutex::new(0)),
        }
    }

    /// Another clock on the same timeline whose wall clock reads `offset_ms` apart
    /// from this one's (a machine with a skewed clock).
    pub fn skewed(&self, offset_ms: i64) -> Self {
        Self {
            timeline: self.timeline.clone(),
            wall_offset_ms: Arc::new(Mutex::new(*self.wall_offset_ms.lock() + offset_ms)),
        }
    }

    /// Shifts this clock's wall time by `offset_ms` from the shared timeline (a jump).
    pub fn set_wall_offset(&self, offset_ms: i64) {
        *self.wall_offset_ms.lock() = offset_ms;
    }

    /// Moves time forward by `d` for every clock on this timeline, waking sleepers
    /// whose deadline has come, in deadline order.
    pub fn advance(&self, d: Duration) {
        let due = {
            let mut st = self.timeline.state.lock();
            st.now += d;
            let now = st.now;
            let later = st.sleepers.split_off(&(now, u64::MAX));
            std::mem::replace(&mut st.sleepers, later)
        };
        for (_, tx) in due {
            let _ = tx.send(());
        }
    }

    /// This clock as the `Arc<dyn Clock>` that stores take.
    pub fn shared(&self) -> Arc<dyn Clock> {
        Arc::new(self.clone())
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn wall_ms(&self) -> u64 {
        let now = self.timeline.state.lock().now.as_millis() as i64;
        let offset = *self.wall_offset_ms.lock();
        (self.timeline.start_wall_ms as i64 + now + offset).max(0) as u64
    }

    fn mono(&self) -> Mono {
        Mono(self.timeline.state.lock().now)
    }

    fn sleep_until(&self, deadline: Mono) -> BoxFuture<'static, ()> {
        let rx = {
            let mut st = self.timeline.state.lock();
            if deadline.0 <= st.now {
                None
            } else {
                let (tx, rx) = oneshot::channel();
                let id = st.next_id;
                st.next_id += 1;
                st.sleepers.insert((deadline.0, id), tx);
                Some(rx)
            }
        };
        Box::pin(async move {
            if let Some(rx) = rx {
                // A dropped sender means the clock itself is gone: never wake.
                if rx.await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn manual_clock_wakes_sleepers_only_when_advanced_past_their_deadline() {
        let clock = ManualClock::starting_at(1_000_000);
        let early = tokio::spawn(clock.sleep(Duration::from_secs(1)));
        let late = tokio::spawn(clock.sleep(Duration::from_secs(5)));
        clock.advance(Duration::from_millis(999));
        tokio::task::yield_now().await;
        assert!(!early.is_finished());
        clock.advance(Duration::from_millis(1));
        early.await.expect("early sleeper");
        assert!(!late.is_finished());
        assert_eq!(clock.wall_ms(), 1_001_000);
        assert_eq!(clock.mono(), Mono::from_origin(Duration::from_secs(1)));
        clock.advance(Duration::from_secs(4));
        late.await.expect("late sleeper");
    }

    #[test]
    fn skewed_clocks_share_monotonic_time_but_not_wall_time() {
        let a = ManualClock::starting_at(10_000);
        let b = a.skewed(-3_000);
        a.advance(Duration::from_secs(1));
        assert_eq!(a.mono(), b.mono());
        assert_eq!(a.wall_ms(), 11_000);
        assert_eq!(b.wall_ms(), 8_000);
        b.set_wall_offset(500);
        assert_eq!(b.wall_ms(), 11_500);
    }

    #[tokio::test]
    async fn timeout_gives_up_on_the_injected_clock() {
        let clock = ManualClock::new();
        let c2 = clock.clone();
        let t = tokio::spawn(async move { c2.timeout(Duration::from_secs(2), std::future::pending::<()>()).await });
        tokio::task::yield_now().await;
        clock.advance(Duration::from_secs(2));
        assert_eq!(t.await.expect("join"), None);
    }
}
