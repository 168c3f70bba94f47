//! The restart rule in-process, on a manual clock: a server that crashed (its task
//! aborted with every connection) is replaced by a fresh one on the same timeline.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use tenure_core::{Attempt, Error, Holder, LeaseStore, ManualClock};
use tenure_server::{CoreOptions, ServerOptions};

#[tokio::test]
async fn a_restarted_server_grants_nothing_in_quarantine_then_tokens_exceed_every_earlier_one() {
    let clock = ManualClock::new();
    let first = common::start_open(&clock).await;
    let store = common::store(&[&first], &clock);
    let me = Arc::new(Holder::current());
    let mut before = Vec::new();
    let mut held = None;
    for i in 0..50 {
        match store.try_acquire(&common::req(&format!("r/{}", i % 5), &me)).await.expect("acquire") {
            Attempt::Granted(g) => {
                before.push(g.token);
                if i == 49 {
                    held = Some(g);
                } else {
                    store.release(&g, &Default::default()).await.expect("release");
                }
            }
            Attempt::Busy(b) => panic!("busy: {}", b.describe()),
        }
    }
    let held = held.expect("the last grant is still held at the crash");
    drop(first); // kill -9: no goodbye to anyone

    let second = common::start(clock.shared(), CoreOptions::new(common::MAX_LEASE), ServerOptions::default()).await;
    let store = common::store(&[&second], &clock);
    let quarantine = common::MAX_LEASE + Duration::from_secs(1);
    let mut waited = Duration::ZERO;
    while waited < quarantine {
        match store.try_acquire(&common::req("r/0", &Arc::new(Holder::current()))).await.expect("ask") {
            Attempt::Busy(b) => assert_eq!(b.holders[0].holder.nonce, "quarantine", "{}", b.describe()),
            Attempt::Granted(g) => panic!("granted token {} {waited:?} into a {quarantine:?} quarantine", g.token),
        }
        let step = Duration::from_millis(500);
        clock.advance(step);
        waited += step;
    }
    match store.renew(&held).await {
        Err(Error::Lost { .. }) => {}
        other => panic!("a grant from before the crash must be lost, got {other:?}"),
    }
    let top = before.iter().copied().max().expect("tokens");
    for i in 0..5 {
        match store.try_acquire(&common::req(&format!("r/{i}"), &me)).await.expect("acquire") {
            Attempt::Granted(g) => assert!(g.token > top, "token {} after restart must exceed {top}", g.token),
            Attempt::Busy(b) => panic!("busy after the quarantine: {}", b.describe()),
        }
    }
}
