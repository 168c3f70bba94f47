use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::types::{EndedHow, Predecessor};
use crate::{Holder, LeaseName, Mono, Version};

const HOUR: u64 = 3_600_000;

fn hourly() -> OncePer {
    OncePer::new(Duration::from_secs(3600)).expect("an hour is a valid period")
}

fn after(meta: Option<String>) -> Predecessor {
    Predecessor {
        token: 7,
        holder: None,
        how: EndedHow::Released,
        at_ms: 0,
        acquired_ms: None,
        watermark_ms: None,
        meta,
        broken: None,
    }
}

fn grant(token: u64, predecessor: Option<Predecessor>) -> Grant {
    Grant {
        name: LeaseName::new("nightly").expect("name"),
        mode: Mode::Exclusive,
        token,
        ttl: Duration::from_secs(30),
        deadline_ms: 0,
        local_deadline: Mono::from_origin(Duration::ZERO),
        holder: Arc::new(Holder::current().with_label("cron")),
        predecessor,
        version: Version::seq(1),
        witness: None,
    }
}

#[test]
fn periods_are_aligned_to_the_epoch() {
    let once = hourly();
    assert_eq!((once.period_of(0), once.period_of(HOUR - 1), once.period_of(HOUR)), (0, 0, 1));
    assert_eq!(once.period_start_ms(5 * HOUR + 1_234), 5 * HOUR);
    assert_eq!(once.every(), Duration::from_secs(3600));
}

#[test]
fn periods_out_of_range_are_refused() {
    for bad in [Duration::ZERO, Duration::from_millis(999), Duration::from_secs(11 * 366 * 24 * 3600)] {
        assert!(matches!(OncePer::new(bad), Err(Error::InvalidOptions { .. })), "{bad:?}");
    }
}

#[test]
fn a_run_is_due_unless_a_mark_of_this_period_or_a_later_one_is_in_the_record() {
    let once = hourly();
    let now = 10 * HOUR + 60_000;
    assert_eq!(once.check(None, now), Due::Run { last: None, unreadable: None });
    assert_eq!(once.check(Some(&after(None)), now), Due::Run { last: None, unreadable: None });
    // The run of this period, counted by a first machine, is seen by the others.
    let ran = once.ran(&grant(8, None), now + 5).meta;
    let mark = Mark::parse(ran.as_deref().expect("a mark")).expect("readable");
    assert_eq!((mark.ran_ms, mark.every_ms, mark.token), (now + 5, HOUR, 8));
    assert!(mark.by.as_deref().is_some_and(|b| b.contains("cron")), "{mark:?}");
    assert_eq!(once.check(Some(&after(ran.clone())), now), Due::AlreadyRan(mark.clone()));
    // A machine whose clock is behind, still in the hour before: that hour is done too.
    assert_eq!(once.check(Some(&after(ran.clone())), 10 * HOUR - 1), Due::AlreadyRan(mark.clone()));
    // The next hour is due again, and says what ran last.
    assert_eq!(once.check(Some(&after(ran)), 11 * HOUR), Due::Run { last: Some(mark), unreadable: None });
}

#[test]
fn a_longer_period_counts_every_run_inside_it() {
    let mark = Mark { ran_ms: 30 * HOUR + 5, every_ms: HOUR, token: 3, by: None }.to_meta();
    let daily = OncePer::new(Duration::from_secs(24 * 3600)).expect("a day");
    // Hour 30 is in day 1: a daily job stamped later in day 1 has already run.
    assert!(matches!(daily.check(Some(&after(Some(mark.clone()))), 47 * HOUR), Due::AlreadyRan(_)));
    assert!(matches!(daily.check(Some(&after(Some(mark))), 48 * HOUR), Due::Run { .. }));
}

#[test]
fn metadata_that_is_not_a_mark_lets_the_run_go_ahead_and_says_why() {
    let once = hourly();
    let foreign = [
        "s3://bucket/segment-7".to_string(),
        r#"{"tenure_once":2,"ran_ms":1,"every_ms":1000,"token":1}"#.to_string(),
        r#"{"tenure_once":1,"ran_ms":18446744073709551615,"every_ms":1000,"token":1}"#.to_string(),
        r#"{"tenure_once":1,"ran_ms":1,"every_ms":0,"token":1}"#.to_string(),
        format!(r#"{{"tenure_once":1,"ran_ms":1,"every_ms":1000,"token":1,"by":"{}"}}"#, "x".repeat(300)),
    ];
    for meta in foreign {
        match once.check(Some(&after(Some(meta.clone()))), HOUR) {
            Due::Run { last: None, unreadable: Some(why) } => assert!(!why.is_empty()),
            other => panic!("{meta}: {other:?}"),
        }
    }
}

#[test]
fn a_release_that_counts_nothing_leaves_the_previous_metadata() {
    assert_eq!(OncePer::keep(&grant(9, Some(after(Some("m".into()))))).meta.as_deref(), Some("m"));
    assert_eq!(OncePer::keep(&grant(9, None)).meta, None);
}

#[test]
fn the_runner_is_kept_short_and_printed_without_control_characters() {
    let long = "é".repeat(200);
    assert!(truncate(&long, MAX_BY).len() <= MAX_BY);
    let mark = Mark { ran_ms: 0, every_ms: 1000, token: 1, by: Some("evil\u{1b}[2Jhost".into()) };
    assert!(!mark.describe().contains('\u{1b}'), "{}", mark.describe());
}

#[test]
fn shared_leases_and_metadata_of_ones_own_are_refused() {
    let once = hourly();
    assert!(once.check_options(&LeaseOptions::exclusive()).is_ok());
    assert!(once.check_options(&LeaseOptions::shared()).is_err());
    assert!(once.check_options(&LeaseOptions::exclusive().with_meta("mine")).is_err());
}
