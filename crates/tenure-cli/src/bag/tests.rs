//! Times read and printed, and the words of the human output.

use tenure::limits::MAX_TIME_MS;
use tenure_bag::{Decision, Outcome};

use super::append::decision_words;
use super::format::{at, json_line, shell_word};
use super::when::parse_when;
/// 2026-11-24T10:32:05.123Z.
const NOW: u64 = 1_795_516_325_123;

#[test]
fn times_are_dates_durations_ago_or_unix_milliseconds() {
    let day = 1_795_478_400_000; // 2026-11-24T00:00:00Z
    assert_eq!(parse_when("2026-11-24", NOW), Ok(day));
    assert_eq!(parse_when("2026-11-24T10:32:05.123Z", NOW), Ok(NOW));
    assert_eq!(parse_when("2026-11-24 10:32:05.123", NOW), Ok(NOW));
    assert_eq!(parse_when("2026-11-24T10:32Z", NOW), Ok(day + 37_920_000));
    assert_eq!(parse_when("2026-11-24T11:32:05.123+01:00", NOW), Ok(NOW));
    assert_eq!(parse_when("2026-11-24T05:02:05.123-05:30", NOW), Ok(NOW));
    assert_eq!(parse_when("-10m", NOW), Ok(NOW - 600_000));
    assert_eq!(parse_when("10m", NOW), Ok(NOW - 600_000));
    assert_eq!(parse_when("-1d", NOW), Ok(NOW - 86_400_000));
    assert_eq!(parse_when("-1h30m", NOW), Ok(NOW - 5_400_000));
    assert_eq!(parse_when("1764000000000", NOW), Ok(1_764_000_000_000));
    assert_eq!(parse_when("0", NOW), Ok(0));
    assert_eq!(parse_when("1970-01-01", NOW), Ok(0));
    assert_eq!(parse_when("9999-12-31T23:59:59.999Z", NOW), Ok(MAX_TIME_MS));
    assert_eq!(format!("{}", at(NOW)), "2026-11-24T10:32:05.123Z");
}

#[test]
fn absurd_times_are_refused_saying_what_was_given_and_what_is_accepted() {
    for s in [
        "1969-01-01",
        "1969-12-31T23:59:59Z",
        "1970-01-01T00:30:00+01:00",
        "-1970-01-01",
        "99999999999999999999",
        "253402300800000",
        "10000-01-01",
        "9999-12-31T23:59:59.999-01:00",
        "-100y",
        "-600000000y",
        "+10m",
        "-5",
        "1.5",
        "-inf",
        "NaN",
        "",
        "soon",
        "2026-13-01",
        "2026-02-30",
        "2026-11-24T25:00:00Z",
        "2026-11-24T10:00:00+24:00",
        "2026-11-24Tnonsense",
    ] {
        let e = parse_when(s, NOW).expect_err(s);
        assert!(e.contains(&format!("{s:?}")) && e.contains("a date (2026-11-24)"), "{s}: {e}");
    }
    assert!(parse_when("1969-01-01", NOW).is_err_and(|e| e.contains("before 1970")));
    assert!(parse_when("-100y", NOW).is_err_and(|e| e.contains("before 1970")));
    assert!(parse_when("99999999999999999999", NOW).is_err_and(|e| e.contains("past the year 9999")));
}

#[test]
fn human_output_has_no_debug_names_or_ranges() {
    let o = Outcome {
        accepted: false,
        decision: Decision::NotInManifest,
        bucket_ms: NOW - NOW % 1000,
        writer: "w-1".into(),
        first_seq: 12,
        count: 28,
        max_ts_ms: NOW,
    };
    let words = format!("{} {}", decision_words(o.decision), at(o.bucket_ms));
    for bad in ["Some(", "NotInManifest", ".."] {
        assert!(!words.contains(bad), "{words}");
    }
    assert_eq!(at(MAX_TIME_MS + 1), format!("{} ms (past the year 9999)", MAX_TIME_MS + 1));
    assert_eq!(shell_word("/tmp/a b"), "'/tmp/a b'");
    assert_eq!(shell_word("s3://b/p?x=1"), "'s3://b/p?x=1'");
    assert_eq!(shell_word("file:///srv/log"), "file:///srv/log");
}

#[test]
fn json_times_come_in_both_forms_at_any_depth() {
    let line = json_line(serde_json::json!({ "a_ms": NOW, "inner": [{ "w_ms": null, "b_ms": 0 }] }));
    let v: serde_json::Value = serde_json::from_str(&line).expect("json");
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["a_at"], "2026-11-24T10:32:05.123Z");
    assert_eq!(v["inner"][0]["w_at"], serde_json::Value::Null);
    assert_eq!(v["inner"][0]["b_at"], "1970-01-01T00:00:00.000Z");
}

proptest::proptest! {
    #[test]
    fn any_string_is_a_time_in_range_or_an_error(s in "\\PC*", now in 0..=MAX_TIME_MS) {
        if let Ok(ms) = parse_when(&s, now) {
            proptest::prop_assert!(ms <= MAX_TIME_MS);
        }
    }

    #[test]
    fn time_like_strings_are_a_time_in_range_or_an_error(
        s in "[-+]?([0-9]{1,22}|[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\\.[0-9]{0,12})?)?([Zz]|[-+][0-9]{2}:[0-9]{2})?)?|[0-9]{1,25}(ns|ms|s|m|h|d|w|y))",
        now in 0..=MAX_TIME_MS,
    ) {
        if let Ok(ms) = parse_when(&s, now) {
            proptest::prop_assert!(ms <= MAX_TIME_MS);
        }
    }

    #[test]
    fn every_time_printed_is_read_back(ms in 0..=MAX_TIME_MS) {
        proptest::prop_assert_eq!(parse_when(&at(ms), 0), Ok(ms));
    }
}
