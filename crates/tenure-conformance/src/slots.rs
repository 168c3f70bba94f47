//! Slots (`LeaseOptions::with_slots`, `tenure_core::slots`): at most N holders
//! at once, each slot a lease of its own, on every store.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tenure_core::{EndedHow, Error, FencedRecord, Holder, LeaseOptions};

use crate::suite::{client, crashed_holder, fence, parse, with_time_flowing, wopts_poll};
use crate::{Harness, TTL, advance};

fn slots(n: u32) -> LeaseOptions {
    LeaseOptions::exclusive().with_ttl(TTL).with_slots(n)
}

/// One hold of a slot, on one clock shared by every worker (a sequence each
/// reads when it begins and ends: the recorded interval lies inside the real
/// one, so an overlap it shows is real).
#[derive(Debug)]
struct Hold {
    slot: u32,
    start: u64,
    end: u64,
}

/// 12 workers take 3 slots of one name over and over: never more than 3 hold
/// at once, and never two one slot (checked on the holds' intervals); every
/// slot is used (the first three holders wait for each other, so they hold
/// three slots at once); and each slot's fenced counter, incremented by a plain
/// read then a write fenced with the slot's token, ends at exactly the number
/// of writes made under that slot.
pub async fn slots_never_hold_more_than_n_and_each_slot_counts_exactly(h: &dyn Harness) {
    const WORKERS: usize = 12;
    const SLOTS: u32 = 3;
    // Each worker holds once: on a directory with the suite's manual clock, 12
    // workers taking a lease again and again stall its wait line (the plain
    // race test shows it too with 12 workers); once each is what every store passes.
    const EACH: u64 = 1;
    let counters: Arc<Vec<FencedRecord>> =
        Arc::new((0..SLOTS).map(|i| fence(h, &format!("slot-counter-{i}"))).collect());
    let clock = Arc::new(AtomicU64::new(0));
    let taken = Arc::new(AtomicU64::new(0));
    let first = Arc::new(tokio::sync::Barrier::new(SLOTS as usize));
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let c = client(h).await;
        let (counters, clock, taken, first) = (counters.clone(), clock.clone(), taken.clone(), first.clone());
        tasks.push(tokio::spawn(async move {
            let wait = slots(SLOTS).with_timeout(Duration::from_secs(600));
            let (mut holds, mut wrote) = (Vec::new(), vec![0u64; SLOTS as usize]);
            while wrote.iter().sum::<u64>() < EACH {
                let lease = c.acquire("slot-race", &wait).await.expect("acquire a slot");
                let slot = lease.slot().expect("the lease is a slot");
                assert!(slot < SLOTS, "slot {slot} of {SLOTS}");
                let start = clock.fetch_add(1, Ordering::SeqCst);
                if taken.fetch_add(1, Ordering::SeqCst) < u64::from(SLOTS) {
                    first.wait().await;
                }
                let counter = &counters[slot as usize];
                let current = counter.read().await.expect("read").map_or(0, |f| parse(&f.value));
                tokio::task::yield_now().await;
                match counter.write(lease.token(), Bytes::from((current + 1).to_string())).await {
                    Ok(_) => wrote[slot as usize] += 1,
                    Err(Error::Fenced { .. }) => {}
                    Err(e) => panic!("write: {e}"),
                }
                holds.push(Hold { slot, start, end: clock.fetch_add(1, Ordering::SeqCst) });
                lease.release().await.expect("release");
            }
            (holds, wrote)
        }));
    }
    let done = with_time_flowing(h, async {
        let mut done = Vec::new();
        for t in tasks {
            done.push(t.await.expect("worker"));
        }
        done
    })
    .await;
    let holds: Vec<&Hold> = done.iter().flat_map(|(holds, _)| holds).collect();
    let mut events: Vec<(u64, i64)> = holds.iter().flat_map(|h| [(h.start, 1), (h.end, -1)]).collect();
    events.sort_unstable();
    let (mut now, mut most) = (0i64, 0i64);
    for (_, step) in events {
        now += step;
        most = most.max(now);
    }
    assert!(most <= i64::from(SLOTS), "{most} holders at once with {SLOTS} slots: {holds:?}");
    assert_eq!(most, i64::from(SLOTS), "the first three holders held at once");
    for slot in 0..SLOTS {
        let mut mine: Vec<&&Hold> = holds.iter().filter(|h| h.slot == slot).collect();
        assert!(!mine.is_empty(), "slot {slot} was never used");
        mine.sort_by_key(|h| h.start);
        assert!(mine.windows(2).all(|w| w[0].end < w[1].start), "two holders of slot {slot} at once: {mine:?}");
        let wrote: u64 = done.iter().map(|(_, w)| w[slot as usize]).sum();
        let total = counters[slot as usize].read().await.expect("read").map_or(0, |f| parse(&f.value));
        assert_eq!(total, wrote, "slot {slot}'s counter lost increments: its holders overlapped");
    }
    let wrote: u64 = done.iter().map(|(_, w)| w.iter().sum::<u64>()).sum();
    assert_eq!(wrote, WORKERS as u64 * EACH);
}

/// A count other than the one in force is refused while a slot is held, and
/// takes effect once none is; a holder never takes two slots of one name; a
/// slot is a lease of its own: broken by its name, and taken over after its
/// holder crashed, after its TTL and not before.
pub async fn slots_refuse_another_count_and_a_second_slot_and_are_leases_of_their_own(h: &dyn Harness) {
    let (a, b, c) = (client(h).await, client(h).await, client(h).await);
    let now = slots(2).no_wait();
    let held = a.acquire("conf-slots", &now).await.expect("a free slot");
    assert_eq!(held.slot(), Some(0), "the first free slot");
    assert_eq!(held.grant().name.as_str(), "conf-slots/+slots/0");
    match b.acquire("conf-slots", &slots(3).no_wait()).await {
        Err(Error::InvalidOptions { reason }) => assert!(reason.contains("in use with 2 slots"), "{reason}"),
        other => panic!("another count while a slot is held must be refused, got {other:?}"),
    }
    match a.acquire("conf-slots", &now).await {
        Err(Error::InvalidOptions { reason }) => assert!(reason.contains("already holds slot 0"), "{reason}"),
        other => panic!("a second slot for one holder must be refused, got {other:?}"),
    }
    let second = b.acquire("conf-slots", &now).await.expect("the other slot");
    assert_eq!(second.slot(), Some(1));
    match c.acquire("conf-slots", &now).await {
        Err(Error::Busy { name, holder, .. }) => {
            assert_eq!(name, "conf-slots");
            assert!(holder.contains("all 2 slots"), "{holder}");
        }
        other => panic!("a third holder of two slots, got {other:?}"),
    }

    // A slot is broken as any lease, by its own name; the next one takes it.
    let admin = client(h).await;
    for attempt in 0.. {
        let seen = admin.inspect("conf-slots/+slots/1").await.expect("inspect the slot");
        match admin.break_lease(&seen, Some(second.token()), None).await {
            Ok(()) => break,
            Err(Error::Changed { .. }) if attempt < 10 => {}
            Err(e) => panic!("breaking a slot: {e}"),
        }
    }
    let third = c.acquire("conf-slots", &now).await.expect("the broken slot");
    assert_eq!(third.slot(), Some(1));
    assert!(third.token() > second.token(), "a slot's tokens grow like any lease's");
    assert_eq!(third.grant().predecessor.map(|p| p.how), Some(EndedHow::Broken));
    // The release of a broken slot finds it gone; that is not what this test is about.
    let _ = second.release().await;

    // Once no slot is held, another count takes effect.
    held.release().await.expect("release");
    third.release().await.expect("release");
    let three = b.acquire("conf-slots", &slots(3).no_wait()).await.expect("a new count once none is held");
    assert_eq!(three.slot(), Some(0));
    three.release().await.expect("release");

    // A crashed holder's slot is taken over after its TTL, not before.
    let store = h.store().await;
    let dead = crashed_holder(&store, "conf-slots-crash/+slots/0", Holder::current()).await;
    let waiter = client(h).await;
    let wopts = slots(1).with_timeout(TTL * 10);
    let task = tokio::spawn(async move { waiter.acquire("conf-slots-crash", &wopts).await });
    advance(h, TTL - Duration::from_millis(300)).await;
    assert!(!task.is_finished(), "a slot was taken over before its TTL");
    advance(h, Duration::from_millis(300) + wopts_poll() + Duration::from_millis(200)).await;
    let mut waited = Duration::ZERO;
    while !task.is_finished() && waited < Duration::from_secs(5) {
        advance(h, Duration::from_millis(100)).await;
        waited += Duration::from_millis(100);
    }
    assert!(task.is_finished(), "a crashed holder's slot must be taken over within TTL + one poll");
    let lease = task.await.expect("join").expect("the crashed holder's slot");
    assert_eq!(lease.slot(), Some(0));
    assert!(lease.token() > dead.token);
    assert_eq!(lease.grant().predecessor.map(|p| p.how), Some(EndedHow::Expired));
    lease.release().await.expect("release");
}

/// A dropped slot is let go at once as far as its client goes: the same client
/// takes a slot again without waiting, with the same count and with another
/// (the dropped slot, whose release is still on its way, is not in the way),
/// and the late release of the dropped grant leaves the new one held.
pub async fn a_dropped_slot_is_let_go_and_its_client_takes_one_again_at_once(h: &dyn Harness) {
    let a = client(h).await;
    let first = a.acquire("conf-slots-drop", &slots(2).no_wait()).await.expect("a free slot");
    assert_eq!(first.slot(), Some(0));
    drop(first);
    let again = match a.acquire("conf-slots-drop", &slots(2).no_wait()).await {
        Ok(lease) => lease,
        Err(e) => panic!("the same count right after a drop must be granted at once: {e}"),
    };
    assert_eq!(again.slot(), Some(0), "the dropped slot, re-taken");
    drop(again);
    let other = match a.acquire("conf-slots-drop", &slots(3).no_wait()).await {
        Ok(lease) => lease,
        Err(e) => panic!("another count right after a drop must be granted at once: {e}"),
    };
    assert_eq!(other.slot(), Some(0));
    // Give the dropped leases' background releases time to land.
    with_time_flowing(h, tokio::time::sleep(Duration::from_millis(300))).await;
    assert!(matches!(other.health(), tenure_core::Health::Held { .. }), "{:?}", other.health());
    assert_eq!(other.release().await.expect("release"), tenure_core::Released::Released);
}
