//! Fuzzing the lease record parser and the lease-name and key checks.
//!
//! Records are bytes any process with access to the store may have written
//! (issue 12: "every byte from outside may be absurd or malicious"). Whatever
//! they are, [`LeaseRecord::parse`] must return (never panic), what it accepts
//! must keep the record's rules and tenure's limits, survive a write and a read
//! unchanged, and be safe to decide on: no panic in `acquire`, `renew`,
//! `release` or `break`, and a grant's token is always above `last_token`.
//!
//! `PROPTEST_CASES=100000 cargo nextest run -p tenure-core --test it fuzz_record` for a
//! long run.

use crate::fuzz_support;

use std::path::{Component, Path};
use std::sync::Arc;

use fuzz_support::{bytes, config, mutate, mutations, peak_during};
use proptest::prelude::*;
use tenure_core::backend::check_key;
use tenure_core::limits::{MAX_TIME_MS, MAX_TOKEN, MAX_TTL, millis};
use tenure_core::record::{self, Ask, ClockJudge, Decision, Ending, Entry, LeaseRecord, Unreadable};
use tenure_core::{EndedHow, Holder, LeaseName, Mode};

// ---------------------------------------------------------------------------
// Generators of valid records.

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9/_.-]{0,24}",
        1 => any::<String>(),
        1 => "[\\\\\"\u{0}-\u{1f}\u{7f}\u{2028}\u{fffd}]{0,8}",
    ]
}

fn holder() -> BoxedStrategy<Arc<Holder>> {
    (text(), any::<u32>(), text(), text(), text(), proptest::option::of(text()))
        .prop_map(|(nonce, pid, host, user, version, label)| {
            Arc::new(Holder { nonce, pid, host, user, version, label })
        })
        .boxed()
}

fn time() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0), Just(MAX_TIME_MS), 0..=MAX_TIME_MS]
}

fn how() -> impl Strategy<Value = EndedHow> {
    prop_oneof![
        Just(EndedHow::Released),
        Just(EndedHow::Dropped),
        Just(EndedHow::Expired),
        Just(EndedHow::Broken),
        Just(EndedHow::Retaken),
        Just(EndedHow::Corrupt),
    ]
}

fn entry(max_token: u64) -> BoxedStrategy<Entry> {
    (0..=max_token, holder(), 1..=millis(MAX_TTL), time(), time(), any::<u64>(), proptest::option::of(text()))
        .prop_map(|(token, holder, ttl_ms, deadline_ms, acquired_ms, renewals, meta)| Entry {
            token,
            holder,
            ttl_ms,
            deadline_ms,
            acquired_ms,
            renewals,
            meta,
        })
        .boxed()
}

fn ending() -> BoxedStrategy<Ending> {
    (
        any::<u64>(),
        prop_oneof![Just(Mode::Exclusive), Just(Mode::Shared)],
        proptest::option::of(holder()),
        how(),
        time(),
        proptest::option::of(any::<u64>()),
        proptest::option::of(time()),
        proptest::option::of(text()),
    )
        .prop_map(|(token, mode, holder, how, at_ms, acquired_ms, watermark_ms, meta)| Ending {
            token,
            mode,
            holder,
            how,
            at_ms,
            acquired_ms,
            watermark_ms,
            meta,
            broken: None,
        })
        .boxed()
}

/// Records that keep every rule: tokens of grants at most `last_token`, TTLs
/// within `MAX_TTL`, times at most the year 9999; counters anywhere up to the top.
fn valid_record() -> BoxedStrategy<LeaseRecord> {
    prop_oneof![Just(0), Just(MAX_TOKEN), Just(u64::MAX), any::<u64>(), 0u64..100]
        .prop_flat_map(|last_token| {
            (
                0..=1u32,
                text(),
                Just(last_token),
                proptest::option::of(entry(last_token)),
                proptest::collection::vec(entry(last_token), 0..4),
                proptest::option::of(time()),
                proptest::option::of(ending()),
            )
        })
        .prop_map(|(tenure, name, last_token, exclusive, shared, watermark_ms, last)| LeaseRecord {
            tenure,
            name,
            last_token,
            exclusive,
            shared,
            watermark_ms,
            last,
        })
        .boxed()
}

// ---------------------------------------------------------------------------
// What every accepted record must satisfy.

/// The record's rules and tenure's limits, as the format documents them.
fn assert_within_rules(r: &LeaseRecord) -> Result<(), TestCaseError> {
    prop_assert!(r.tenure <= record::FORMAT_VERSION, "newer format accepted: {}", r.tenure);
    for (e, _) in r.entries() {
        prop_assert!(e.token <= r.last_token, "grant token {} above last_token {}", e.token, r.last_token);
        prop_assert!(e.ttl_ms >= 1 && e.ttl_ms <= millis(MAX_TTL), "ttl {} out of range", e.ttl_ms);
        prop_assert!(e.deadline_ms <= MAX_TIME_MS && e.acquired_ms <= MAX_TIME_MS);
    }
    for t in [r.watermark_ms, r.last.as_ref().map(|l| l.at_ms), r.last.as_ref().and_then(|l| l.watermark_ms)] {
        prop_assert!(t.is_none_or(|t| t <= MAX_TIME_MS), "time {t:?} past the year 9999");
    }
    Ok(())
}

/// An accepted record is written back and read again unchanged, and deciding
/// on it never panics and never hands out a token at or below `last_token`.
fn assert_usable(r: &LeaseRecord, now_ms: u64, ttl_ms: u64) -> Result<(), TestCaseError> {
    assert_within_rules(r)?;
    prop_assert_eq!(&LeaseRecord::parse(&r.to_bytes()), &Ok(r.clone()), "round trip");
    let me = ME.clone();
    let judge = ClockJudge { now_ms };
    for (mode, retake) in [(Mode::Exclusive, false), (Mode::Shared, true)] {
        let ask = Ask { mode, ttl_ms, holder: &me, retake, now_ms, token_floor: 0, meta: None };
        match record::decide_acquire(&r.name, Some(r), &ask, &judge) {
            Decision::Grant { record: next, token, .. } => {
                prop_assert!(token > r.last_token && token < MAX_TOKEN, "token {token} after {}", r.last_token);
                prop_assert_eq!(next.last_token, token);
                // What tenure writes after a grant it must read back.
                prop_assert_eq!(LeaseRecord::parse(&next.to_bytes()), Ok(next.clone()));
                let renewed = record::decide_renew(&next, token, &me.nonce, ttl_ms, now_ms, None);
                prop_assert!(renewed.is_ok(), "renewing a fresh grant: {renewed:?}");
                let released =
                    record::decide_release(&next, token, &me.nonce, EndedHow::Released, now_ms, Some(now_ms), None);
                prop_assert!(released.is_ok_and(|rel| rel.last_token == token));
            }
            Decision::Busy(holders) => prop_assert!(!holders.is_empty()),
            Decision::Exhausted { last_token } => prop_assert!(last_token >= MAX_TOKEN - 1),
        }
    }
    let _ = record::decide_break(r, None, None, now_ms);
    let _ = record::views(r, &judge);
    let _ = record::expired_views(r, &judge);
    Ok(())
}

/// The asker's clock and TTL, such that the new deadline is still before the
/// year 9999 (see `a_grant_by_a_clock_at_the_year_9999_is_written_unreadable`).
static ME: std::sync::LazyLock<Arc<Holder>> = std::sync::LazyLock::new(|| Arc::new(Holder::current()));

fn now_and_ttl() -> impl Strategy<Value = (u64, u64)> {
    let latest = MAX_TIME_MS - millis(MAX_TTL);
    (prop_oneof![Just(0), Just(latest), 0..=latest], 1..=millis(MAX_TTL))
}

proptest! {
    #![proptest_config(config(1500))]

    #[test]
    fn arbitrary_bytes_are_refused_or_a_usable_record(bytes in bytes(512), (now, ttl) in now_and_ttl()) {
        if let Ok(r) = LeaseRecord::parse(&bytes) {
            assert_usable(&r, now, ttl)?;
        }
    }

    #[test]
    fn valid_records_round_trip_and_decide_without_panics(r in valid_record(), (now, ttl) in now_and_ttl()) {
        prop_assert_eq!(LeaseRecord::parse(&r.to_bytes()), Ok(r.clone()));
        assert_usable(&r, now, ttl)?;
    }

    #[test]
    fn mutated_records_are_refused_or_usable(r in valid_record(), m in mutations(4), (now, ttl) in now_and_ttl()) {
        let bytes = mutate(&r.to_bytes(), &m);
        match LeaseRecord::parse(&bytes) {
            Ok(r) => assert_usable(&r, now, ttl)?,
            Err(Unreadable::Newer(v)) => prop_assert!(v > record::FORMAT_VERSION),
            Err(Unreadable::Corrupt(why)) => prop_assert!(!why.is_empty()),
        }
    }

    /// Each number of a valid record replaced by an absurd JSON value: beyond
    /// u64, negative, fractional, exponent, string, null, nested.
    #[test]
    fn absurd_numbers_in_json_are_refused_or_in_range(
        r in valid_record(),
        field in 0usize..64,
        absurd in absurd_json_number(),
        (now, ttl) in now_and_ttl(),
    ) {
        let mut json: serde_json::Value = serde_json::from_slice(&r.to_bytes()).expect("tenure's own JSON");
        let mut numbers = Vec::new();
        collect_number_paths(&json, &mut Vec::new(), &mut numbers);
        prop_assume!(!numbers.is_empty());
        let path = &numbers[field % numbers.len()];
        let text = serde_json::to_string(&json).expect("json");
        // Splice the absurd text in by hand: serde_json::Value cannot hold 1e400.
        let marker = "\"__ABSURD__\"";
        *pointer_mut(&mut json, path) = serde_json::Value::String("__ABSURD__".into());
        let spliced = serde_json::to_string(&json).expect("json").replace(marker, &absurd);
        prop_assume!(spliced != text);
        match LeaseRecord::parse(spliced.as_bytes()) {
            Ok(r) => assert_usable(&r, now, ttl)?,
            Err(Unreadable::Newer(v)) => prop_assert!(v > record::FORMAT_VERSION),
            Err(Unreadable::Corrupt(_)) => {}
        }
    }
}

fn absurd_json_number() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("18446744073709551616".to_string()),
        Just("18446744073709551615".to_string()),
        Just("9223372036854775807".to_string()),
        Just("4294967296".to_string()),
        Just("-1".to_string()),
        Just("-0".to_string()),
        Just("1e400".to_string()),
        Just("1e19".to_string()),
        Just("0.5".to_string()),
        Just("1.0".to_string()),
        Just("null".to_string()),
        Just("true".to_string()),
        Just("\"42\"".to_string()),
        Just("[]".to_string()),
        Just("{}".to_string()),
        Just(format!("{}1", "9".repeat(400))),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:e}")),
    ]
}

fn collect_number_paths(v: &serde_json::Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match v {
        serde_json::Value::Number(_) => out.push(at.clone()),
        serde_json::Value::Object(map) => {
            for (k, child) in map {
                at.push(k.clone());
                collect_number_paths(child, at, out);
                at.pop();
            }
        }
        serde_json::Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                at.push(i.to_string());
                collect_number_paths(child, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

fn pointer_mut<'a>(v: &'a mut serde_json::Value, path: &[String]) -> &'a mut serde_json::Value {
    let pointer: String = path.iter().map(|p| format!("/{p}")).collect();
    v.pointer_mut(&pointer).expect("a path collect_number_paths found")
}

// ---------------------------------------------------------------------------
// Fixed hostile records: deep nesting, huge strings, huge arrays, the top of
// the token space.

#[test]
fn deeply_nested_json_is_refused_without_exhausting_the_stack() {
    for depth in [2, 127, 128, 129, 10_000, 1_000_000] {
        let nest = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        // An unknown field is skipped (serde_json skips without recursing);
        // nesting where a field is expected is corrupt.
        let unknown = format!("{{\"tenure\":1,\"name\":\"n\",\"last_token\":0,\"x\":{nest}}}");
        assert!(LeaseRecord::parse(unknown.as_bytes()).is_ok(), "depth {depth}");
        let known = format!("{{\"tenure\":1,\"name\":\"n\",\"last_token\":0,\"shared\":{nest}}}");
        assert!(matches!(LeaseRecord::parse(known.as_bytes()), Err(Unreadable::Corrupt(_))), "depth {depth}");
    }
}

/// Bug (fuzz/FINDINGS.md, F1): `acquire` and `renew` set `deadline_ms = now_ms +
/// ttl_ms` without checking it against `MAX_TIME_MS`, so an asker whose clock
/// reads the last millisecond of the year 9999 (or any wall clock beyond it)
/// writes a record that every reader, including itself, then refuses as corrupt.
#[test]
fn a_grant_by_a_clock_at_the_year_9999_is_written_unreadable() {
    let me = Arc::new(Holder::current());
    let ask = Ask {
        mode: Mode::Exclusive,
        ttl_ms: 1,
        holder: &me,
        retake: false,
        now_ms: MAX_TIME_MS,
        token_floor: 0,
        meta: None,
    };
    let Decision::Grant { record, .. } = record::decide_acquire("n", None, &ask, &ClockJudge { now_ms: MAX_TIME_MS })
    else {
        // Refusing to grant from a clock past the limits is a fine outcome too.
        return;
    };
    assert_eq!(LeaseRecord::parse(&record.to_bytes()), Ok(record), "tenure must read back what it writes");
}

#[test]
fn a_record_of_many_megabytes_is_parsed_within_a_small_multiple_of_its_size() {
    // MAX_RECORD_BYTES is enforced where records are read (it is not the parser's
    // job); the parser itself must still not amplify: a record is at most a few
    // times its size in memory.
    let big = "x".repeat(4 << 20);
    let json = format!("{{\"tenure\":1,\"name\":\"{big}\",\"last_token\":0}}");
    let (parsed, peak) = peak_during(|| LeaseRecord::parse(json.as_bytes()));
    assert!(parsed.is_ok());
    assert!(peak < 4 * json.len(), "peak {peak} bytes for a record of {}", json.len());
    let shared = format!(
        "{{\"tenure\":1,\"name\":\"n\",\"last_token\":5,\"shared\":[{}]}}",
        vec![r#"{"token":1,"holder":{"nonce":"a"},"ttl_ms":1,"deadline_ms":0,"acquired_ms":0}"#; 20_000].join(",")
    );
    let (parsed, peak) = peak_during(|| LeaseRecord::parse(shared.as_bytes()));
    assert!(parsed.is_ok_and(|r| r.shared.len() == 20_000));
    assert!(peak < 16 * shared.len(), "peak {peak} bytes for a record of {}", shared.len());
}

#[test]
fn a_counter_at_the_top_of_the_token_space_is_readable_and_grants_nothing() {
    for last in [MAX_TOKEN - 2, MAX_TOKEN - 1, MAX_TOKEN, u64::MAX] {
        let json = format!("{{\"tenure\":1,\"name\":\"n\",\"last_token\":{last}}}");
        let r = LeaseRecord::parse(json.as_bytes()).expect("a high counter is not corrupt");
        let me = Arc::new(Holder::current());
        let ask = Ask {
            mode: Mode::Exclusive,
            ttl_ms: 1000,
            holder: &me,
            retake: false,
            now_ms: 0,
            token_floor: 0,
            meta: None,
        };
        match record::decide_acquire("n", Some(&r), &ask, &ClockJudge { now_ms: 0 }) {
            Decision::Grant { token, .. } => assert!(token > last && token < MAX_TOKEN, "{last} -> {token}"),
            Decision::Exhausted { last_token } => assert_eq!(last_token, last),
            Decision::Busy(_) => panic!("nothing holds it"),
        }
    }
}

// ---------------------------------------------------------------------------
// Lease names and backend keys, against an independent reading of the rules.

/// The rules of `tenure_core::name`, written again from its documentation.
fn name_ok_by_the_docs(name: &str) -> bool {
    let segments: Vec<&str> = name.split('/').collect();
    !name.is_empty()
        && name.len() <= 255
        && segments.len() <= 16
        && segments.iter().all(|s| {
            !s.is_empty()
                && s.len() <= 64
                && !s.starts_with(['.', '-', '+', '='])
                && s.chars().all(|c| c.is_ascii_alphanumeric() || "_-.@+=,:".contains(c))
        })
}

fn name_like() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-zA-Z0-9_.@+=,:/~ -]{0,80}",
        1 => proptest::collection::vec("[a-z0-9_.-]{0,70}", 0..20).prop_map(|s| s.join("/")),
        1 => any::<String>(),
        1 => "(\\.\\.|\\.|/|~|[a-z]|\u{0}|\\\\|%2e|\u{ff0e}){0,12}",
    ]
}

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn lease_names_follow_the_documented_rules_and_never_leave_the_root(name in name_like()) {
        let checked = LeaseName::new(name.clone());
        prop_assert_eq!(checked.is_ok(), name_ok_by_the_docs(&name), "{:?}: {:?}", name, checked);
        if let Ok(n) = checked {
            prop_assert_eq!(n.as_str(), name.as_str());
            let joined = Path::new("/root").join(n.as_str());
            prop_assert!(joined.components().skip(2).all(|c| matches!(c, Component::Normal(_))), "{joined:?}");
            prop_assert!(!n.as_str().contains('~'), "tenure's own files start with '~'");
        }
    }

    #[test]
    fn backend_keys_are_a_name_and_an_optional_plain_suffix(base in name_like(), suffix in "[a-zA-Z0-9_~./-]{0,12}", tilde in any::<bool>()) {
        let key = if tilde { format!("{base}~{suffix}") } else { base.clone() };
        let ok = check_key(&key).is_ok();
        let expected = match key.split_once('~') {
            None => name_ok_by_the_docs(&key),
            Some((b, s)) => name_ok_by_the_docs(b) && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
        };
        prop_assert_eq!(ok, expected, "{:?}", key);
        if ok {
            let joined = Path::new("/root").join(&key);
            prop_assert!(joined.components().skip(2).all(|c| matches!(c, Component::Normal(_))), "{joined:?}");
        }
    }
}

// ---------------------------------------------------------------------------
// Fenced records (`tenure-fence/1 <token>\n<value>`): bytes in any backend.

proptest! {
    #![proptest_config(config(1500))]

    /// Whatever is stored under a fenced record's key, reading it is an error or
    /// a token and a value; a write round-trips; a lower token is fenced off.
    #[test]
    fn fenced_records_decode_or_are_refused_and_round_trip(
        planted in prop_oneof![bytes(64), (any::<u64>(), "[+0-9a-z -]{0,6}", bytes(16)).prop_map(|(t, s, v)| [format!("tenure-fence/1 {t}{s}\n").into_bytes(), v].concat())],
        token in any::<u64>(),
        value in bytes(32),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async {
            let backend = Arc::new(tenure_core::MemoryBackend::new(tenure_core::SystemClock::shared()));
            let record = tenure_core::FencedRecord::new(backend.clone(), "f").expect("name");
            let put = tenure_core::Backend::put(&*backend, &tenure_core::Key::new("f~fence").expect("key"), planted.clone().into(), tenure_core::PutOptions::create()).await;
            prop_assert!(put.is_ok());
            if let Ok(Some(f)) = record.read().await {
                prop_assert!(planted.starts_with(b"tenure-fence/1 ") && planted.ends_with(&f.value));
            }
            match record.write(token, value.clone().into()).await {
                Ok(w) => {
                    let back = record.read().await.map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert_eq!(back.map(|b| (b.token, b.value)), Some((token, w.value)));
                    if token > 0 {
                        prop_assert!(record.write(token - 1, value.into()).await.is_err(), "a lower token is fenced off");
                    }
                }
                Err(tenure_core::Error::Fenced { current, ours, .. }) => prop_assert!(current > ours),
                Err(_) => {} // an unreadable record stays unreadable
            }
            Ok(())
        })?;
    }
}
