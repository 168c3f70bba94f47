//! The recipes' contracts on every store: metadata carried forward (once per
//! period keeps its mark there) and the watch of a lease's changes.

use std::time::Duration;

use tenure_core::{EndedHow, Holder, ReleaseRequest, Released};

use crate::suite::*;
use crate::{Harness, TTL};

/// Metadata is carried forward by holders that leave none, however their
/// grants end — released, expired, broken, dropped — until one leaves its own
/// (what `tenure lock --once-per` keeps its mark in: `tenure_core::once`).
pub async fn metadata_is_carried_forward_until_a_holder_leaves_its_own(h: &dyn Harness) {
    let store = h.store().await;
    let (a, admin) = (client(h).await, client(h).await);
    let meta_after = |l: &tenure_core::Lease| l.grant().predecessor.and_then(|p| p.meta);
    let la = a.try_acquire("carry", &opts()).await.expect("acquire");
    la.release_with(ReleaseRequest { meta: Some("mark-1".into()), ..Default::default() }).await.expect("release");
    // Released without metadata.
    let lb = client(h).await.try_acquire("carry", &opts()).await.expect("acquire");
    assert_eq!(meta_after(&lb).as_deref(), Some("mark-1"));
    lb.release().await.expect("release");
    // A holder that died without releasing, taken over after its TTL.
    crashed_holder(&store, "carry", Holder::current()).await;
    let waiting = opts().with_timeout(TTL * 5);
    let ld = with_time_flowing(h, client(h).await.acquire("carry", &waiting)).await.expect("take over");
    assert_eq!(ld.grant().predecessor.map(|p| (p.how, p.meta)), Some((EndedHow::Expired, Some("mark-1".into()))));
    ld.release().await.expect("release");
    // A holder broken by an administrator.
    let broken = crashed_holder(&store, "carry", Holder::current()).await;
    break_token(&admin, "carry", broken.token).await;
    let lf = client(h).await.try_acquire("carry", &opts()).await.expect("acquire after the break");
    assert_eq!(lf.grant().predecessor.map(|p| (p.how, p.meta)), Some((EndedHow::Broken, Some("mark-1".into()))));
    // A handle dropped without a release.
    drop(lf);
    let lg = with_time_flowing(h, client(h).await.acquire("carry", &waiting)).await.expect("acquire after the drop");
    assert_eq!(meta_after(&lg).as_deref(), Some("mark-1"), "{:?}", lg.grant().predecessor);
    // A holder that leaves its own replaces it.
    lg.release_with(ReleaseRequest { meta: Some("mark-2".into()), ..Default::default() }).await.expect("release");
    let lh = client(h).await.try_acquire("carry", &opts()).await.expect("acquire");
    assert_eq!(meta_after(&lh).as_deref(), Some("mark-2"));
    lh.release().await.expect("release");
}

/// At most once per period (`tenure_core::once`): of the holders stamped in
/// one period, one runs; a run counts only if it ended well with its grant
/// still in the record — failed, dropped (its process died) or broken, the
/// next holder of the period runs — and holders that only looked, even one
/// that died holding the lease, never erase the mark.
pub async fn once_per_period_counts_only_runs_that_ended_well(h: &dyn Harness) {
    use tenure_core::{Once, OncePer};
    let once = OncePer::new(Duration::from_secs(60)).expect("a minute");
    let t0 = 1_000 * 60_000; // the start of period 1000
    let (a, b, c, admin) = (client(h).await, client(h).await, client(h).await, client(h).await);
    let waiting = opts().with_timeout(TTL * 5);
    let run = |o: Once, what: &str| match o {
        Once::Run(run) => run,
        Once::AlreadyRan(mark) => panic!("{what} must run, but the record says it ran: {mark:?}"),
    };
    let ran = |o: Once, what: &str| match o {
        Once::AlreadyRan(mark) => mark,
        Once::Run(_) => panic!("{what} must not run: the period's run already counted"),
    };
    // Nothing ran yet: a runs; b, asking meanwhile, finds the lease busy.
    let ra = run(a.acquire_once_at("nightly", &once, t0 + 1, &opts()).await.expect("a"), "the first");
    assert_busy(b.acquire_once_at("nightly", &once, t0 + 2, &opts()).await, "while a runs");
    // a failed: it does not count, and b runs.
    assert_eq!(ra.failed().await.expect("release"), Released::Released);
    let rb = run(b.acquire_once_at("nightly", &once, t0 + 2, &opts()).await.expect("b"), "after a failure");
    assert_eq!(rb.period_start_ms(), t0);
    assert_eq!(rb.ran().await.expect("release"), Released::Released);
    // Everyone else in the period — a clock a little behind, in the period
    // before, too — learns that it ran, and when.
    let mark = ran(c.acquire_once_at("nightly", &once, t0 + 59_999, &opts()).await.expect("c"), "c");
    assert_eq!(mark.ran_ms, t0 + 2);
    ran(c.acquire_once_at("nightly", &once, t0 - 1, &opts()).await.expect("c behind"), "a clock behind");
    // The next period: a's run dies with its process; b's runs after it; a
    // run whose grant is broken does not count either.
    let t1 = t0 + 60_000;
    drop(run(a.acquire_once_at("nightly", &once, t1, &opts()).await.expect("a"), "the next period"));
    let rb = run(with_time_flowing(h, b.acquire_once_at("nightly", &once, t1 + 1, &waiting)).await.expect("b"), "b");
    break_token(&admin, "nightly", rb.lease().token()).await;
    assert_eq!(rb.ran().await.expect("release"), Released::NotHeld, "a broken run never counts");
    let rc = run(c.acquire_once_at("nightly", &once, t1 + 2, &opts()).await.expect("c"), "after a broken run");
    assert_eq!(rc.last().map(|m| m.ran_ms), Some(t0 + 2), "the last counted run, a period before");
    assert_eq!(rc.ran().await.expect("release"), Released::Released);
    // A holder that dies while only looking (it never releases) keeps the mark.
    let store = h.store().await;
    crashed_holder(&store, "nightly", Holder::current()).await;
    let mark = ran(with_time_flowing(h, a.acquire_once_at("nightly", &once, t1 + 3, &waiting)).await.expect("a"), "a");
    assert_eq!(mark.ran_ms, t1 + 2);
}

/// Leader election's view (`Client::watch`): the state first, then each
/// change in order — acquired, released, acquired by a holder that then died,
/// expired when its deadline passed (with no write to wake the watcher),
/// taken over, broken.
pub async fn watch_sees_each_change_in_order(h: &dyn Harness) {
    use futures::StreamExt;
    let store = h.store().await;
    let watcher = client(h).await;
    let mut changes = Box::pin(watcher.watch("watched", Duration::from_millis(200)).expect("watch"));
    let mut next = async |what: &str| {
        let item = with_time_flowing(h, changes.next()).await.expect("the watch never ends by itself");
        let held = item.unwrap_or_else(|e| panic!("watching for {what}: {e}"));
        (held.change, held.token)
    };
    let (first, _) = next("the state now").await;
    assert_eq!(first, tenure_core::Change::Current);

    let a = client(h).await.try_acquire("watched", &opts()).await.expect("acquire");
    assert_eq!(next("an acquire").await, (tenure_core::Change::Acquired, Some(a.token())));
    let t1 = a.token();
    a.release().await.expect("release");
    assert_eq!(next("a release").await, (tenure_core::Change::Released, Some(t1)));

    let dead = crashed_holder(&store, "watched", Holder::current()).await;
    assert_eq!(next("a second acquire").await, (tenure_core::Change::Acquired, Some(dead.token)));
    assert_eq!(next("the expiry").await, (tenure_core::Change::Expired, Some(dead.token)));
    // A contender that has not watched the record may have to wait a little
    // longer than the watcher (clock discipline): it waits.
    let b = with_time_flowing(h, client(h).await.acquire("watched", &opts().with_timeout(TTL * 5)))
        .await
        .expect("take over");
    assert_eq!(next("the takeover").await, (tenure_core::Change::TakenOver, Some(b.token())));

    let admin = client(h).await;
    break_token(&admin, "watched", b.token()).await;
    assert_eq!(next("the break").await, (tenure_core::Change::Broken, Some(b.token())));
    drop(b);
}
