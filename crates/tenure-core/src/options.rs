//! How to hold a lease: mode, TTL, waiting, renewal and safety timing.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::limits::{MAX_DURATION, MAX_TTL, check_duration};
use crate::types::Mode;

/// Options for acquiring and holding leases.
///
/// Defaults: exclusive, TTL 30 s, wait forever, renew every TTL/8, give up after 3
/// consecutive failed renewals, stop acting TTL/10 before the deadline, back off
/// from 25 ms up to 1 s between polls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseOptions {
    /// Exclusive or shared.
    pub mode: Mode,
    /// Lease duration.
    pub ttl: Duration,
    /// How long `acquire` waits; `None` waits forever, zero does not wait.
    pub timeout: Option<Duration>,
    /// Renewal interval; default TTL/8, at most TTL/3.
    pub renew_every: Option<Duration>,
    /// Consecutive failed renewals before the lease is declared lost.
    pub max_failures: u32,
    /// How long before the deadline a holder stops acting; default TTL/10.
    pub safety_margin: Option<Duration>,
    /// First wait between polls of a busy lease (doubles each time, with jitter).
    pub backoff_initial: Duration,
    /// Longest wait between polls of a busy lease.
    pub backoff_max: Duration,
    /// Metadata stored with the grant; `None` keeps the predecessor's (see
    /// [`crate::Predecessor::meta`]).
    pub meta: Option<String>,
    /// Take one of this many slots of the name instead of the name itself (a
    /// counting semaphore; exclusive mode only): see [`crate::slots`].
    pub slots: Option<u32>,
}

impl Default for LeaseOptions {
    fn default() -> Self {
        Self {
            mode: Mode::Exclusive,
            ttl: Duration::from_secs(30),
            timeout: None,
            renew_every: None,
            max_failures: 3,
            safety_margin: None,
            backoff_initial: Duration::from_millis(25),
            backoff_max: Duration::from_secs(1),
            meta: None,
            slots: None,
        }
    }
}

impl LeaseOptions {
    /// Exclusive lease with default timing.
    pub fn exclusive() -> Self {
        Self::default()
    }
    /// Shared lease with default timing.
    pub fn shared() -> Self {
        Self { mode: Mode::Shared, ..Self::default() }
    }
    /// With mode.
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }
    /// With TTL.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// Waits at most `timeout` in `acquire`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
    /// Does not wait in `acquire`: fail with [`Error::Busy`] at once.
    pub fn no_wait(mut self) -> Self {
        self.timeout = Some(Duration::ZERO);
        self
    }
    /// With renewal interval.
    pub fn with_renew_every(mut self, d: Duration) -> Self {
        self.renew_every = Some(d);
        self
    }
    /// With safety margin.
    pub fn with_safety_margin(mut self, d: Duration) -> Self {
        self.safety_margin = Some(d);
        self
    }
    /// With max consecutive renewal failures.
    pub fn with_max_failures(mut self, n: u32) -> Self {
        self.max_failures = n;
        self
    }
    /// With the longest wait between polls.
    pub fn with_backoff_max(mut self, d: Duration) -> Self {
        self.backoff_max = d;
        self
    }
    /// With metadata.
    pub fn with_meta(mut self, meta: impl Into<String>) -> Self {
        self.meta = Some(meta.into());
        self
    }

    /// Takes one of `n` slots of the name (at most `n` holders at once, each
    /// with a lease and fencing token of its own): see [`crate::slots`].
    pub fn with_slots(mut self, n: u32) -> Self {
        self.slots = Some(n);
        self
    }

    /// The renewal interval in effect.
    pub fn renew_interval(&self) -> Duration {
        self.renew_every.unwrap_or(self.ttl / 8)
    }

    /// The safety margin in effect.
    pub fn safety(&self) -> Duration {
        self.safety_margin.unwrap_or(self.ttl / 10)
    }

    /// Checks that the timing can work: renewals well inside the TTL, and the
    /// safety margin leaving room for them.
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| Err(Error::InvalidOptions { reason });
        if self.ttl < Duration::from_millis(10) {
            return bad(format!("ttl {:?} is too short (at least 10ms)", self.ttl));
        }
        check_duration("ttl", self.ttl, MAX_TTL)?;
        for (what, d) in [
            ("timeout", self.timeout),
            ("renew interval", self.renew_every),
            ("safety margin", self.safety_margin),
            ("backoff", Some(self.backoff_max)),
        ] {
            if let Some(d) = d {
                check_duration(what, d, MAX_DURATION)?;
            }
        }
        if self.renew_interval().is_zero() || self.renew_interval() > self.ttl / 3 {
            return bad(format!(
                "renewing every {:?} does not fit a ttl of {:?}: renew at most every ttl/3",
                self.renew_interval(),
                self.ttl
            ));
        }
        if self.safety() + self.renew_interval() >= self.ttl {
            return bad(format!(
                "safety margin {:?} plus renew interval {:?} leave no time in a ttl of {:?}",
                self.safety(),
                self.renew_interval(),
                self.ttl
            ));
        }
        if let Some(n) = self.slots {
            crate::slots::check_count(n)?;
            if self.mode != Mode::Exclusive {
                return bad(format!("slots are exclusive: {n} slots cannot be taken in {} mode", self.mode));
            }
        }
        if self.max_failures == 0 {
            return bad("max_failures must be at least 1".into());
        }
        if self.backoff_initial.is_zero() || self.backoff_max < self.backoff_initial {
            return bad("backoff must be positive, with max ≥ initial".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_seed_001_timing() {
        let o = LeaseOptions::default();
        assert_eq!(o.renew_interval(), Duration::from_millis(3_750));
        assert_eq!(o.safety(), Duration::from_secs(3));
        o.validate().expect("defaults are valid");
    }

    #[test]
    fn timing_that_cannot_work_is_refused_with_a_reason() {
        let slow = LeaseOptions::default().with_renew_every(Duration::from_secs(15));
        assert!(matches!(slow.validate(), Err(Error::InvalidOptions { reason }) if reason.contains("ttl/3")));
        let greedy = LeaseOptions::default().with_safety_margin(Duration::from_secs(28));
        assert!(greedy.validate().is_err());
        assert!(LeaseOptions::default().with_ttl(Duration::from_millis(1)).validate().is_err());
    }

    #[test]
    fn durations_beyond_the_limits_are_refused_not_wrapped() {
        let huge = Duration::from_secs(u64::MAX / 1000);
        let err = LeaseOptions::default().with_ttl(huge).validate().expect_err("a ttl of centuries");
        assert!(err.to_string().contains("ttl of"), "{err}");
        assert!(LeaseOptions::default().with_ttl(MAX_TTL).validate().is_ok());
        assert!(LeaseOptions::default().with_timeout(Duration::MAX).validate().is_err());
    }
}
