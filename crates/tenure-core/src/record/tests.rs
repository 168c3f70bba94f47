use std::sync::Arc;

use super::*;

fn holder(nonce: &str) -> Arc<Holder> {
    Arc::new(Holder::current().with_nonce(nonce))
}

fn ask(h: &Arc<Holder>, mode: Mode, now_ms: u64) -> Ask<'_> {
    Ask { mode, ttl_ms: 1_000, holder: h, retake: false, now_ms, token_floor: 0, meta: None }
}

fn grant(current: Option<&LeaseRecord>, a: &Ask<'_>, now_ms: u64) -> (LeaseRecord, u64, Option<Predecessor>) {
    match decide_acquire("x", current, a, &ClockJudge { now_ms }) {
        Decision::Grant { record, token, predecessor } => (record, token, predecessor),
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn busy(current: &LeaseRecord, a: &Ask<'_>, now_ms: u64) -> Vec<HolderView> {
    match decide_acquire("x", Some(current), a, &ClockJudge { now_ms }) {
        Decision::Busy(v) => v,
        other => panic!("expected busy, got {other:?}"),
    }
}

#[test]
fn first_grant_gets_token_one_and_no_predecessor() {
    let a = holder("a");
    let (rec, token, pred) = grant(None, &ask(&a, Mode::Exclusive, 100), 100);
    assert_eq!(token, 1);
    assert_eq!(pred, None);
    assert_eq!(rec.last_token, 1);
    assert_eq!(rec.exclusive.as_ref().map(|e| e.deadline_ms), Some(1_100));
}

#[test]
fn token_floor_from_the_store_lifts_the_next_token() {
    let a = holder("a");
    let mut x = ask(&a, Mode::Exclusive, 0);
    x.token_floor = 41;
    assert_eq!(grant(None, &x, 0).1, 42);
}

#[test]
fn a_live_exclusive_grant_blocks_everyone_else() {
    let (a, b) = (holder("a"), holder("b"));
    let (rec, ..) = grant(None, &ask(&a, Mode::Exclusive, 0), 0);
    let v = busy(&rec, &ask(&b, Mode::Exclusive, 500), 500);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].holder.nonce, "a");
    assert_eq!(v[0].expires_in_ms, 500);
    busy(&rec, &ask(&b, Mode::Shared, 500), 500);
    // The same holder without retake is blocked by its own grant too.
    busy(&rec, &ask(&a, Mode::Exclusive, 500), 500);
}

#[test]
fn shared_grants_coexist_and_block_exclusive_until_all_end() {
    let (a, b, c) = (holder("a"), holder("b"), holder("c"));
    let (rec, t1, _) = grant(None, &ask(&a, Mode::Shared, 0), 0);
    let (rec, t2, _) = grant(Some(&rec), &ask(&b, Mode::Shared, 10), 10);
    assert!(t2 > t1);
    assert_eq!(busy(&rec, &ask(&c, Mode::Exclusive, 20), 20).len(), 2);
    let rec = decide_release(&rec, t1, "a", EndedHow::Released, 30, Some(25), None).expect("release a");
    assert_eq!(busy(&rec, &ask(&c, Mode::Exclusive, 40), 40).len(), 1);
    let rec = decide_release(&rec, t2, "b", EndedHow::Released, 50, Some(45), None).expect("release b");
    let (_, t3, pred) = grant(Some(&rec), &ask(&c, Mode::Exclusive, 60), 60);
    assert!(t3 > t2);
    let pred = pred.expect("predecessor");
    assert_eq!((pred.token, pred.how, pred.watermark_ms), (t2, EndedHow::Released, Some(45)));
}

#[test]
fn expired_grant_is_taken_over_with_its_deadline_as_watermark() {
    let (a, b) = (holder("a"), holder("b"));
    let (rec, t1, _) = grant(None, &ask(&a, Mode::Exclusive, 0), 0);
    busy(&rec, &ask(&b, Mode::Exclusive, 999), 999);
    let (rec, t2, pred) = grant(Some(&rec), &ask(&b, Mode::Exclusive, 1_000), 1_000);
    assert_eq!(t2, t1 + 1);
    let pred = pred.expect("predecessor");
    assert_eq!(pred.how, EndedHow::Expired);
    assert_eq!(pred.watermark_ms, Some(1_000), "a broken holder may have written up to its deadline");
    assert!(!pred.how.graceful());
    assert_eq!(rec.exclusive.map(|e| e.holder.nonce.clone()), Some("b".into()));
}

#[test]
fn same_holder_retakes_its_own_grant_at_once_when_allowed() {
    let a = holder("a");
    let (rec, t1, _) = grant(None, &ask(&a, Mode::Exclusive, 0), 0);
    let mut again = ask(&a, Mode::Exclusive, 10);
    again.retake = true;
    let (_, t2, pred) = grant(Some(&rec), &again, 10);
    assert!(t2 > t1);
    assert_eq!(pred.map(|p| p.how), Some(EndedHow::Retaken));
}

#[test]
fn renewing_moves_the_deadline_and_stamps_the_entry() {
    let a = holder("a");
    let (rec, t, _) = grant(None, &ask(&a, Mode::Exclusive, 0), 0);
    let rec = decide_renew(&rec, t, "a", 2_000, 500, Some("s3://b/p")).expect("renew");
    let e = rec.exclusive.expect("entry");
    assert_eq!((e.deadline_ms, e.ttl_ms, e.renewals, e.meta.as_deref()), (2_500, 2_000, 1, Some("s3://b/p")));
}

#[test]
fn metadata_is_carried_forward_by_grants_that_bring_none_however_they_end() {
    let (a, b, c, d) = (holder("a"), holder("b"), holder("c"), holder("d"));
    let (rec, ta, _) = grant(None, &ask(&a, Mode::Exclusive, 0), 0);
    let rec = decide_release(&rec, ta, "a", EndedHow::Released, 10, None, Some("mark-1")).expect("release");
    // b brings none: it starts with a's, and a plain release leaves it.
    let (rec, tb, pred) = grant(Some(&rec), &ask(&b, Mode::Exclusive, 20), 20);
    assert_eq!(pred.and_then(|p| p.meta).as_deref(), Some("mark-1"));
    assert_eq!(rec.exclusive.as_ref().and_then(|e| e.meta.as_deref()), Some("mark-1"));
    let rec = decide_release(&rec, tb, "b", EndedHow::Released, 30, None, None).expect("release");
    // c expires, d is broken: neither loses it.
    let (rec, _, _) = grant(Some(&rec), &ask(&c, Mode::Exclusive, 40), 40);
    let (rec, td, pred) = grant(Some(&rec), &ask(&d, Mode::Exclusive, 5_000), 5_000);
    assert_eq!(pred.map(|p| (p.how, p.meta)), Some((EndedHow::Expired, Some("mark-1".into()))));
    let rec = decide_break(&rec, Some(td), None, 5_100).expect("break");
    assert_eq!(rec.predecessor().and_then(|p| p.meta).as_deref(), Some("mark-1"));
    // An ask that brings its own replaces it.
    let mut own = ask(&a, Mode::Exclusive, 6_000);
    own.meta = Some("own");
    let (rec, _, _) = grant(Some(&rec), &own, 6_000);
    assert_eq!(rec.exclusive.as_ref().and_then(|e| e.meta.as_deref()), Some("own"));
}

#[test]
fn renewing_or_releasing_a_grant_that_is_gone_says_what_happened() {
    let (a, b) = (holder("a"), holder("b"));
    let (rec, t1, _) = grant(None, &ask(&a, Mode::Exclusive, 0), 0);
    let (rec, _, _) = grant(Some(&rec), &ask(&b, Mode::Exclusive, 2_000), 2_000);
    let err = decide_renew(&rec, t1, "a", 1_000, 2_001, None).expect_err("gone");
    assert!(err.detail.contains("expired and taken over"), "{}", err.detail);
    let err = decide_release(&rec, t1, "a", EndedHow::Released, 2_001, None, None).expect_err("gone");
    assert!(err.detail.contains("expired"), "{}", err.detail);
    // A delayed release from the old holder never frees the new holder's grant.
    assert!(rec.exclusive.is_some());
}

#[test]
fn renew_with_a_wrong_nonce_is_refused() {
    let a = holder("a");
    let (rec, t, _) = grant(None, &ask(&a, Mode::Exclusive, 0), 0);
    assert!(decide_renew(&rec, t, "intruder", 1_000, 1, None).is_err());
}

#[test]
fn break_ends_every_grant_and_raises_the_watermark() {
    let (a, b) = (holder("a"), holder("b"));
    let (rec, _, _) = grant(None, &ask(&a, Mode::Shared, 0), 0);
    let (rec, t2, _) = grant(Some(&rec), &ask(&b, Mode::Shared, 100), 100);
    let note = BreakNote { by: holder("admin"), reason: Some("stuck since Friday".into()) };
    let broken = decide_break(&rec, None, Some(&note), 200).expect("break");
    assert!(broken.exclusive.is_none() && broken.shared.is_empty());
    assert_eq!(broken.watermark_ms, Some(1_100));
    assert_eq!(broken.last.as_ref().map(|l| (l.token, l.how)), Some((t2, EndedHow::Broken)));
    // Who broke it and why survive a write and a read, and reach the next holder.
    let read = LeaseRecord::parse(&broken.to_bytes()).expect("parse");
    assert_eq!(read.last.as_ref().and_then(|l| l.broken.as_ref()), Some(&note));
    assert_eq!(read.predecessor().and_then(|p| p.broken), Some(note.clone()));
    let only = decide_break(&rec, Some(t2), None, 200).expect("break one");
    assert_eq!(only.shared.len(), 1);
    assert_eq!(only.last.as_ref().and_then(|l| l.broken.as_ref()), None);
    assert!(decide_break(&broken, None, None, 300).is_err());
    // A reason longer than a break may give is not a record tenure wrote.
    let mut long = broken.clone();
    long.last.as_mut().expect("last").broken.as_mut().expect("note").reason = Some("x".repeat(1025));
    assert!(LeaseRecord::parse(&long.to_bytes()).is_err());
}

#[test]
fn records_round_trip_and_ignore_unknown_fields() {
    let a = holder("a");
    let (rec, ..) = grant(None, &ask(&a, Mode::Exclusive, 0), 0);
    assert_eq!(LeaseRecord::parse(&rec.to_bytes()), Ok(rec.clone()));
    let mut v: serde_json::Value = serde_json::from_slice(&rec.to_bytes()).expect("json");
    v["added_in_a_later_minor_version"] = serde_json::json!({"x": 1});
    let bytes = serde_json::to_vec(&v).expect("json");
    assert_eq!(LeaseRecord::parse(&bytes), Ok(rec));
}

#[test]
fn unreadable_records_are_classified_never_panicking() {
    let valid = LeaseRecord::empty("x").to_bytes();
    let cases: [(&[u8], &str); 4] = [
        (b"", "empty"),
        (&valid[..valid.len() / 2], "truncated"),
        (b"\x00\xffgarbage", "not a tenure lease record"),
        (br#"{"tenure":1}"#, "not a tenure lease record"),
    ];
    for (bytes, want) in cases {
        match LeaseRecord::parse(bytes) {
            Err(Unreadable::Corrupt(d)) => assert!(d.contains(want), "{d:?} should say {want:?}"),
            other => panic!("{bytes:?} gave {other:?}"),
        }
    }
    assert_eq!(LeaseRecord::parse(br#"{"tenure":2,"whatever":true}"#), Err(Unreadable::Newer(2)));
}

#[test]
fn records_whose_grants_lie_about_the_counter_are_unreadable() {
    let a = holder("a");
    let (mut rec, ..) = grant(None, &ask(&a, Mode::Exclusive, 0), 0);
    rec.last_token = 0;
    match LeaseRecord::parse(&rec.to_bytes()) {
        Err(Unreadable::Corrupt(d)) => assert!(d.contains("above last_token"), "{d}"),
        other => panic!("a grant above the counter must be unreadable, got {other:?}"),
    }
}

#[test]
fn at_the_top_of_the_token_space_nothing_is_granted_and_the_counter_never_moves_back() {
    let a = holder("a");
    let (mut rec, ..) = grant(None, &ask(&a, Mode::Exclusive, 0), 0);
    rec.exclusive = None;
    // One token left below the limit: granted, and it is the last one.
    rec.last_token = MAX_TOKEN - 2;
    let (rec, token, _) = grant(Some(&rec), &ask(&a, Mode::Exclusive, 10), 10);
    assert_eq!(token, MAX_TOKEN - 1);
    // The record stays readable (not "corrupt", which would reset the counter to
    // the store's version) and refuses every further grant.
    let parsed = LeaseRecord::parse(&rec.to_bytes()).expect("an exhausted record is still readable");
    let later = ask(&a, Mode::Exclusive, 10_000);
    let mut retake = later.clone();
    retake.retake = true;
    for a in [later, retake] {
        match decide_acquire("x", Some(&parsed), &a, &ClockJudge { now_ms: 10_000 }) {
            Decision::Exhausted { last_token } => assert_eq!(last_token, MAX_TOKEN - 1),
            other => panic!("expected exhaustion, got {other:?}"),
        }
    }
    // A counter past the limit (only a foreign writer puts it there) is refused
    // the same way, and so is a floor at the top.
    let mut beyond = parsed.clone();
    beyond.last_token = u64::MAX;
    beyond.exclusive = None;
    let beyond = LeaseRecord::parse(&beyond.to_bytes()).expect("readable");
    assert!(matches!(
        decide_acquire("x", Some(&beyond), &ask(&a, Mode::Exclusive, 20_000), &ClockJudge { now_ms: 20_000 }),
        Decision::Exhausted { last_token: u64::MAX }
    ));
    let mut floored = ask(&a, Mode::Shared, 0);
    floored.token_floor = u64::MAX;
    assert!(matches!(decide_acquire("x", None, &floored, &ClockJudge { now_ms: 0 }), Decision::Exhausted { .. }));
}

#[test]
fn numbers_no_holder_could_have_written_make_a_record_unreadable() {
    use crate::limits::{MAX_TIME_MS, MAX_TTL, millis};
    let a = holder("a");
    let (rec, ..) = grant(None, &ask(&a, Mode::Exclusive, 0), 0);
    type Damage = Box<dyn Fn(&mut LeaseRecord)>;
    let cases: Vec<(&str, Damage)> = vec![
        ("zero ttl", Box::new(|r| r.exclusive.as_mut().map_or((), |e| e.ttl_ms = 0))),
        ("ttl beyond the limit", Box::new(|r| r.exclusive.as_mut().map_or((), |e| e.ttl_ms = millis(MAX_TTL) + 1))),
        ("deadline past 9999", Box::new(|r| r.exclusive.as_mut().map_or((), |e| e.deadline_ms = MAX_TIME_MS + 1))),
        ("acquired past 9999", Box::new(|r| r.exclusive.as_mut().map_or((), |e| e.acquired_ms = u64::MAX))),
        ("watermark past 9999", Box::new(|r| r.watermark_ms = Some(u64::MAX))),
    ];
    for (what, damage) in cases {
        let mut bad = rec.clone();
        damage(&mut bad);
        assert!(
            matches!(LeaseRecord::parse(&bad.to_bytes()), Err(Unreadable::Corrupt(_))),
            "{what}: must be judged corrupt"
        );
    }
    let mut longest = rec.clone();
    if let Some(e) = longest.exclusive.as_mut() {
        e.ttl_ms = millis(MAX_TTL);
    }
    assert!(LeaseRecord::parse(&longest.to_bytes()).is_ok(), "the longest lease is fine");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Acquire(u8, bool),
        Renew(u8),
        Release(u8),
        Break,
        Advance(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..3, any::<bool>()).prop_map(|(h, s)| Op::Acquire(h, s)),
            (0u8..3).prop_map(Op::Renew),
            (0u8..3).prop_map(Op::Release),
            Just(Op::Break),
            (0u64..1_500).prop_map(Op::Advance),
        ]
    }

    proptest! {
        /// Under any sequence of operations judged by one clock: tokens strictly
        /// increase, no two live exclusive grants (or exclusive + shared) coexist,
        /// and the watermark never decreases.
        #[test]
        fn tokens_grow_and_exclusion_holds(ops in proptest::collection::vec(op(), 1..80)) {
            let holders: Vec<Arc<Holder>> = (0..3).map(|i| holder(&format!("h{i}"))).collect();
            let mut rec: Option<LeaseRecord> = None;
            let mut now = 0u64;
            let mut held: Vec<Vec<u64>> = vec![Vec::new(); 3];
            let mut last_token = 0;
            let mut last_watermark = None;
            for op in ops {
                let judge = ClockJudge { now_ms: now };
                match op {
                    Op::Advance(d) => now += d,
                    Op::Acquire(h, shared) => {
                        let mode = if shared { Mode::Shared } else { Mode::Exclusive };
                        let a = Ask { mode, ttl_ms: 1_000, holder: &holders[h as usize], retake: false, now_ms: now, token_floor: 0, meta: None };
                        if let Decision::Grant { record, token, .. } = decide_acquire("x", rec.as_ref(), &a, &judge) {
                            prop_assert!(token > last_token);
                            last_token = token;
                            held[h as usize].push(token);
                            rec = Some(record);
                        }
                    }
                    Op::Renew(h) | Op::Release(h) => {
                        let Some(cur) = rec.clone() else { continue };
                        let Some(&t) = held[h as usize].last() else { continue };
                        let nonce = &holders[h as usize].nonce;
                        let out = if matches!(op, Op::Renew(_)) {
                            decide_renew(&cur, t, nonce, 1_000, now, None)
                        } else {
                            decide_release(&cur, t, nonce, EndedHow::Released, now, Some(now), None)
                        };
                        if let Ok(r) = out { rec = Some(r) }
                    }
                    Op::Break => {
                        if let Some(r) = rec.as_ref().and_then(|c| decide_break(c, None, None, now).ok()) { rec = Some(r) }
                    }
                }
                if let Some(r) = &rec {
                    let live = views(r, &ClockJudge { now_ms: now });
                    let ex = live.iter().filter(|v| v.mode == Mode::Exclusive).count();
                    prop_assert!(ex <= 1);
                    prop_assert!(ex == 0 || live.len() == 1, "exclusive alongside others: {live:?}");
                    prop_assert!(r.watermark_ms >= last_watermark);
                    last_watermark = r.watermark_ms;
                }
            }
        }
    }
}

#[test]
fn a_clock_past_the_year_9999_never_writes_what_it_would_refuse_to_read() {
    use crate::limits::MAX_TIME_MS;
    let a = holder("a");
    for now_ms in [MAX_TIME_MS, MAX_TIME_MS + 1, u64::MAX / 3] {
        let (rec, token, _) = grant(None, &ask(&a, Mode::Exclusive, now_ms), now_ms);
        let parsed = LeaseRecord::parse(&rec.to_bytes()).expect("a record this code wrote is readable");
        let renewed = decide_renew(&parsed, token, "a", 1_000, now_ms, None).expect("renew");
        LeaseRecord::parse(&renewed.to_bytes()).expect("readable after renewal");
        let released =
            decide_release(&renewed, token, "a", EndedHow::Released, now_ms, Some(u64::MAX), None).expect("release");
        LeaseRecord::parse(&released.to_bytes()).expect("readable after release");
    }
}
