//! Witnesses verify with the server's public key and say what was granted; two-phase
//! acquisition through the client.

use crate::common;

use std::sync::Arc;

use tenure_core::{AcquireRequest, AllAttempt, Attempt, EndedHow, Holder, LeaseStore, ManualClock, ReleaseRequest};
use tenure_server::witness::{WitnessKind, verify};
use tenure_server::{Upgrade, is_reservation};

#[tokio::test]
async fn grants_and_renewals_carry_witnesses_that_verify_and_describe_them() {
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let store = common::store(&[&server], &clock);
    let key = store.server_info(0).await.expect("hello").public_key;
    let (a, b) = (Arc::new(Holder::current()), Arc::new(Holder::current()));
    let first = match store.try_acquire(&common::req("w", &a)).await.expect("acquire") {
        Attempt::Granted(g) => g,
        Attempt::Busy(_) => panic!("busy"),
    };
    let w = verify(&key, first.witness.as_deref().expect("a witness")).expect("verifies");
    assert_eq!(
        (w.kind, w.name.as_str(), w.token, w.deadline_ms, w.holder_nonce.as_str()),
        (WitnessKind::Grant, "w", first.token, first.deadline_ms, a.nonce.as_str())
    );
    assert!(w.predecessor.is_none());
    assert!(w.server_time_us / 1000 <= first.deadline_ms);
    let renewed = store.renew(&first).await.expect("renew");
    let w = verify(&key, renewed.witness.as_deref().expect("witness")).expect("verifies");
    assert_eq!((w.kind, w.token), (WitnessKind::Renewal, first.token));
    let watermark = renewed.deadline_ms - 10;
    let release = ReleaseRequest { watermark_ms: Some(watermark), meta: None, dropped: false };
    store.release(&renewed, &release).await.expect("release");

    // A batch: one signature, every witness verifies on its own and names the predecessor.
    let names: Vec<String> = (0..7).map(|i| format!("w{i}")).collect();
    let mut reqs: Vec<AcquireRequest> = names.iter().map(|n| common::req(n, &b)).collect();
    reqs.push(common::req("w", &b));
    let grants = match store.try_acquire_all(&reqs).await.expect("batch") {
        AllAttempt::Granted(g) => g,
        AllAttempt::Busy(_) => panic!("busy"),
    };
    for g in &grants {
        let w = verify(&key, g.witness.as_deref().expect("witness")).expect("every witness of a batch verifies");
        assert_eq!((w.name.as_str(), w.token), (g.name.as_str(), g.token));
    }
    let last = verify(&key, grants[7].witness.as_deref().expect("witness")).expect("verifies");
    let pred = last.predecessor.expect("w had a predecessor");
    assert_eq!(
        (pred.token, pred.nonce.as_deref(), pred.how, pred.watermark_ms),
        (first.token, Some(a.nonce.as_str()), EndedHow::Released, Some(watermark))
    );
    let mut forged = grants[0].witness.clone().expect("witness");
    let at = forged.len() - 70;
    forged[at] ^= 1;
    assert!(verify(&key, &forged).is_err(), "a changed witness must not verify");
}

#[tokio::test]
async fn answers_carry_server_time_so_clients_see_their_skew() {
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let behind = clock.skewed(-5_000);
    let store = common::store(&[&server], &behind);
    store.list("").await.expect("list");
    // Manual clocks do not move on their own: the skew is exact.
    assert_eq!(store.skew_us(0), Some(5_000_000), "a client 5 s behind the server sees +5 s");
}

#[tokio::test]
async fn two_phase_acquisition_upgrades_reservations_unless_a_full_request_broke_one() {
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    let store = common::store(&[&server], &clock);
    let key = store.server_info(0).await.expect("hello").public_key;
    let (me, rival) = (Arc::new(Holder::current()), Arc::new(Holder::current()));
    let reqs = [common::req("tp/a", &me), common::req("tp/b", &me)];

    let reservations = match store.try_acquire_tentative_all(&reqs).await.expect("reserve") {
        AllAttempt::Granted(r) => r,
        AllAttempt::Busy(_) => panic!("busy"),
    };
    assert!(reservations.iter().all(|r| is_reservation(r) && r.token == 0));
    let w = verify(&key, reservations[0].witness.as_deref().expect("witness")).expect("verifies");
    assert!(!w.kind.authorizes_writes(), "a reservation's witness allows no write");
    let grants = match store.upgrade_all(&reservations).await.expect("upgrade") {
        Upgrade::Upgraded(g) => g,
        Upgrade::Broken { name, detail } => panic!("{name} broken: {detail}"),
    };
    assert!(grants.iter().all(|g| g.token > 0 && !is_reservation(g)));
    let w = verify(&key, grants[1].witness.as_deref().expect("witness")).expect("verifies");
    assert_eq!(w.kind, WitnessKind::Upgrade);
    store.release_all(&grants, &ReleaseRequest::default()).await;

    let reservations = match store.try_acquire_tentative_all(&reqs).await.expect("reserve") {
        AllAttempt::Granted(r) => r,
        AllAttempt::Busy(_) => panic!("busy"),
    };
    let full = match store.try_acquire(&common::req("tp/b", &rival)).await.expect("full request") {
        Attempt::Granted(g) => g,
        Attempt::Busy(b) => panic!("a full request must break a reservation, got busy: {}", b.describe()),
    };
    match store.upgrade_all(&reservations).await.expect("upgrade") {
        Upgrade::Broken { name, .. } => assert_eq!(name.as_str(), "tp/b"),
        Upgrade::Upgraded(_) => panic!("the upgrade of a broken reservation must fail"),
    }
    let a_free = store.try_acquire(&common::req("tp/a", &rival)).await.expect("acquire");
    assert!(matches!(a_free, Attempt::Granted(_)), "a failed upgrade leaves nothing held");
    assert!(matches!(store.acquire_two_phase(&reqs).await.expect("two-phase"), AllAttempt::Busy(_)));
    store.release(&full, &ReleaseRequest::default()).await.expect("release");
}
