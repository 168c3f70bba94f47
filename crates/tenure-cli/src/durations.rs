//! Durations on the command line: every duration flag and variable is parsed
//! and range-checked here, before anything happens.

use std::time::Duration;

use tenure::limits::{MAX_DURATION, MAX_TTL};
use tenure_core::human_duration;

/// Parses `30s`, `5m`, `1h30m`, `250ms`, or a bare number of seconds (`5`, `0.5`),
/// at most [`MAX_DURATION`]: every duration flag (and `TENURE_MAX_SKEW`,
/// `TENURE_CORRUPT_TTL`) goes through here, so an absurd value is refused with
/// exit 64 before anything happens, never wrapped later.
pub(crate) fn duration(s: &str) -> Result<Duration, String> {
    bounded(s, Duration::ZERO, MAX_DURATION)
}

/// The shortest `--ttl` the lease's timing works with (renewals and the safety
/// margin are fractions of it).
const MIN_TTL: Duration = Duration::from_millis(10);

/// Like [`duration`], at most [`MAX_TTL`]: for `--ttl`. A longer lease would only
/// delay takeover after a crash, and its milliseconds must fit the record.
pub(crate) fn ttl(s: &str) -> Result<Duration, String> {
    bounded(s, MIN_TTL, MAX_TTL)
}

fn bounded(s: &str, min: Duration, max: Duration) -> Result<Duration, String> {
    let bare = s.trim().parse::<f64>().ok();
    // A bare number is seconds: say so when it is out of range, it may have been
    // meant as milliseconds.
    let unit = if bare.is_some() { "; a bare number is seconds" } else { "" };
    let d = if let Some(secs) = bare {
        // NaN, infinities, negative numbers and values past `Duration::MAX` fail here.
        Duration::try_from_secs_f64(secs)
            .map_err(|_| format!("{s:?} is not a valid number of seconds (it must be finite and not negative)"))?
    } else {
        humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 250ms, 30s, 5m, 1h30m, or 5 for seconds)"))?
    };
    if d > max {
        return Err(format!("{s:?} is too long (at most {}{unit})", in_days(max)));
    }
    if d < min {
        return Err(format!("{s:?} is too short (from {} to {}{unit})", human_duration(min), in_days(max)));
    }
    Ok(d)
}

/// A limit in words: `30 days`, `3660 days (about 10 years)`.
fn in_days(d: Duration) -> String {
    let days = d.as_secs() / 86_400;
    match days {
        0 => human_duration(d),
        1..365 => format!("{days} days"),
        _ => format!("{days} days (about {} years)", days / 365),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_accept_units_and_bare_seconds() {
        assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(duration("0.5"), Ok(Duration::from_millis(500)));
        assert!(duration("-1").is_err());
        assert!(duration("soon").is_err_and(|e| e.contains("examples")));
    }

    #[test]
    fn absurd_durations_are_refused_not_wrapped() {
        for s in ["NaN", "nan", "inf", "-inf", "infinity", "-0.5", "1e300", "18446744073709551616", "600000000y"] {
            assert!(duration(s).is_err(), "{s} was accepted");
        }
        assert!(duration("11y").is_err_and(|e| e.contains("too long")));
        assert!(duration("9y").is_ok());
        // `--ttl` stops at 30 days: the value that overflowed the record's milliseconds is refused.
        assert_eq!(ttl("30days"), Ok(MAX_TTL));
        assert!(
            ttl("31days").is_err_and(|e| e.contains("too long") && e.contains("at most 30 days")),
            "{:?}",
            ttl("31days")
        );
        assert!(ttl("18446744073709551").is_err());
        // Too short: the range is given, and a bare number is said to be seconds.
        for s in ["0", "0.001", "1ms"] {
            assert!(ttl(s).is_err_and(|e| e.contains("from 10ms to 30 days")), "{s}: {:?}", ttl(s));
        }
        assert!(ttl("0").is_err_and(|e| e.contains("bare number is seconds")));
        assert!(ttl("1ms").is_err_and(|e| !e.contains("bare number")));
        assert!(ttl("99999999").is_err_and(|e| e.contains("at most 30 days; a bare number is seconds")));
    }

    proptest::proptest! {
        #![proptest_config(config())]

        /// Arbitrary text: never a panic, never more than the limit.
        #[test]
        fn any_text_parses_within_the_limits_or_is_refused(s in "\\PC{0,40}") {
            if let Ok(d) = duration(&s) {
                proptest::prop_assert!(d <= MAX_DURATION, "{s:?} gave {d:?}");
            }
            if let Ok(d) = ttl(&s) {
                proptest::prop_assert!(d <= MAX_TTL, "{s:?} gave {d:?}");
            }
        }

        /// Text shaped like durations (numbers with units, big exponents, signs),
        /// which random text rarely is.
        #[test]
        fn duration_shaped_text_parses_within_the_limits_or_is_refused(
            s in "[-+ ]?[0-9]{0,25}(\\.[0-9]{0,12})?(e[-+]?[0-9]{1,4})?(ns|us|ms|s|m|h|d|w|M|y|days|years)?( ?[0-9]{1,20}(ms|s|h|y))?"
        ) {
            if let Ok(d) = duration(&s) {
                proptest::prop_assert!(d <= MAX_DURATION, "{s:?} gave {d:?}");
            }
            if let Ok(d) = ttl(&s) {
                proptest::prop_assert!(d <= MAX_TTL, "{s:?} gave {d:?}");
            }
        }
    }

    /// 4096 cases per property, or `PROPTEST_CASES` for a longer run.
    fn config() -> proptest::prelude::ProptestConfig {
        match std::env::var_os("PROPTEST_CASES") {
            Some(_) => proptest::prelude::ProptestConfig::default(),
            None => proptest::prelude::ProptestConfig::with_cases(4096),
        }
    }
}
