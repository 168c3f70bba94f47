use std::sync::Arc;

use super::*;
use crate::holder::Holder;
use crate::types::Mode;

fn holder(token: u64) -> HolderView {
    HolderView {
        holder: Arc::new(Holder::current()),
        mode: Mode::Exclusive,
        token,
        deadline_ms: 1_000,
        ttl_ms: 1_000,
        acquired_ms: None,
        expires_in_ms: 500,
    }
}

fn state(live: &[u64], expired: &[u64], last: Option<(u64, EndedHow)>) -> LeaseState {
    let last_token = live.iter().chain(expired).copied().chain(last.map(|l| l.0)).max().unwrap_or(0);
    LeaseState {
        name: LeaseName::new("w").expect("name"),
        version: None,
        modified_ms: None,
        holders: live.iter().map(|&t| holder(t)).collect(),
        expired: expired.iter().map(|&t| holder(t)).collect(),
        last_token,
        watermark_ms: None,
        last: last.map(|(token, how)| Predecessor {
            token,
            holder: None,
            how,
            at_ms: 0,
            acquired_ms: None,
            watermark_ms: None,
            meta: None,
            broken: None,
        }),
        corrupt: None,
    }
}

fn changes(before: &LeaseState, now: &LeaseState) -> Vec<(Change, Option<u64>)> {
    diff(before, now).into_iter().map(|(c, t, _, _)| (c, t)).collect()
}

#[test]
fn each_ending_is_named_as_the_record_says() {
    let held = state(&[1], &[], None);
    assert_eq!(changes(&state(&[], &[], None), &held), [(Change::Acquired, Some(1))]);
    assert_eq!(changes(&held, &state(&[], &[], Some((1, EndedHow::Released)))), [(Change::Released, Some(1))]);
    assert_eq!(changes(&held, &state(&[], &[], Some((1, EndedHow::Broken)))), [(Change::Broken, Some(1))]);
    // Another grant came and went after it: how it ended is not known; the
    // other one is told by its ending.
    assert_eq!(
        changes(&held, &state(&[], &[], Some((2, EndedHow::Released)))),
        [(Change::Ended, Some(1)), (Change::Acquired, Some(2)), (Change::Released, Some(2))]
    );
    // Renewals in time are no change.
    assert!(changes(&held, &held).is_empty());
}

#[test]
fn an_expiry_is_told_once_then_the_takeover() {
    let held = state(&[1], &[], None);
    let expired = state(&[], &[1], None);
    assert_eq!(changes(&held, &expired), [(Change::Expired, Some(1))]);
    // Taken over after the expiry was seen: only the takeover is new.
    let taken = state(&[2], &[], Some((1, EndedHow::Expired)));
    assert_eq!(changes(&expired, &taken), [(Change::TakenOver, Some(2))]);
    // Expired and taken over between two reads: both, in order.
    assert_eq!(changes(&held, &taken), [(Change::Expired, Some(1)), (Change::TakenOver, Some(2))]);
    // Its holder renewed after all.
    assert_eq!(changes(&expired, &held), [(Change::RenewedLate, Some(1))]);
}

#[test]
fn shared_holders_come_and_go_one_by_one() {
    let two = state(&[1, 2], &[], None);
    assert_eq!(changes(&state(&[1], &[], None), &two), [(Change::Acquired, Some(2))]);
    assert_eq!(changes(&two, &state(&[2], &[], Some((1, EndedHow::Released)))), [(Change::Released, Some(1))]);
}

#[test]
fn the_next_read_waits_for_the_first_expiry_or_the_poll() {
    let poll = Duration::from_secs(5);
    assert_eq!(next_wake(&state(&[], &[], None), poll), poll);
    assert_eq!(next_wake(&state(&[1], &[], None), poll), Duration::from_millis(500) + EXPIRY_MARGIN);
    assert_eq!(next_wake(&state(&[1], &[], None), Duration::from_millis(100)), Duration::from_millis(100));
}

#[test]
fn a_grant_taken_and_ended_between_two_reads_is_told_by_its_ending() {
    let free = state(&[], &[], None);
    assert_eq!(
        changes(&free, &state(&[], &[], Some((1, EndedHow::Released)))),
        [(Change::Acquired, Some(1)), (Change::Released, Some(1))]
    );
    // Then a new holder beside it: its acquire comes after.
    assert_eq!(
        changes(&free, &state(&[2], &[], Some((1, EndedHow::Broken)))),
        [(Change::Acquired, Some(1)), (Change::Broken, Some(1)), (Change::Acquired, Some(2))]
    );
    // An ending already known is not told again.
    let after = state(&[], &[], Some((1, EndedHow::Released)));
    assert!(changes(&after, &after).is_empty());
}
