//! The waiting line: the order waiters are granted in, on every store that
//! keeps one.

use std::sync::Arc;
use std::time::Duration;

use tenure_core::{AcquireRequest, Attempt, Client, Holder, LeaseOptions, LeaseStore, Mode, ReleaseRequest};

use crate::suite::*;
use crate::{Harness, TTL};

/// Waiters are granted the lease in the order they queued, and one that gives
/// up (its future dropped, as when its process is interrupted) leaves the line
/// and is skipped, on every store that keeps a wait line (a directory with
/// change notifications, memory, etcd, object stores); a store without one (a
/// directory on NFS polls) is skipped, and so is the lease server, whose queue
/// its own tests cover. Time flows while waiters wait: a polled line (object
/// stores) is looked at again on the store's clock.
pub async fn waiters_are_granted_in_the_order_they_queued(h: &dyn Harness) {
    if h.backend().is_none() {
        return;
    }
    let lease = "conf/line";
    let store = h.store().await;
    let first = crashed_holder(&store, lease, Holder::current().with_label("first")).await;
    let ask = |label: String| AcquireRequest {
        name: name(lease),
        mode: Mode::Exclusive,
        ttl: TTL,
        holder: Arc::new(Holder::current().with_label(label)),
        retake: false,
        meta: None,
    };
    // A wait of no time says whether the store queues at all.
    if store.acquire_queued(&ask("probe".into()), Duration::ZERO).await.is_none() {
        return;
    }
    let onlooker = h.store().await;
    let until_queued = async |n: usize| until_queued(&onlooker, lease, n).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for i in 0..5 {
        let (s, tx, r) = (h.store().await, tx.clone(), ask(format!("w{i}")));
        waiters.push(tokio::spawn(async move {
            let granted = s.acquire_queued(&r, Duration::from_secs(600)).await.expect("a queue").expect("wait");
            let Attempt::Granted(g) = granted else { panic!("w{i}: the wait ran out") };
            let _ = tx.send((i, g, s));
        }));
        until_queued(i + 1).await;
    }
    // The third waiter gives up: it leaves the line, and the lease skips it.
    waiters.remove(2).abort();
    until_queued(4).await;
    let (mut last, mut last_store) = (first, store);
    for i in [0, 1, 3, 4] {
        last_store.release(&last, &ReleaseRequest::default()).await.expect("release");
        let got = with_time_flowing(h, tokio::time::timeout(Duration::from_secs(60), rx.recv()))
            .await
            .expect("a grant")
            .expect("open");
        assert_eq!(got.0, i, "granted out of order");
        assert!(got.1.token > last.token, "tokens grow along the line");
        (last, last_store) = (got.1, got.2);
    }
    for w in waiters {
        w.await.expect("waiter");
    }
    until_queued(0).await;
}

/// A multi-lease waiter on a store that keeps queues takes its turn: while
/// others keep the queue of one of its leases full, it is granted after those
/// ahead of it and before those behind it, instead of being refused for as
/// long as anyone waits (it holds the leases before that one meanwhile).
pub async fn a_multi_lease_waiter_takes_its_turn_in_a_queue_that_never_empties(h: &dyn Harness) {
    let (hot, cold) = ("conf/turn/hot", "conf/turn/cold");
    let store = h.store().await;
    let ask = |label: &str| AcquireRequest {
        name: name(hot),
        mode: Mode::Exclusive,
        ttl: TTL,
        holder: Arc::new(Holder::current().with_label(label)),
        retake: false,
        meta: None,
    };
    let first = crashed_holder(&store, hot, Holder::current().with_label("first")).await;
    // A wait of no time says whether the store queues at all.
    if store.acquire_queued(&ask("probe"), Duration::ZERO).await.is_none() {
        return;
    }
    let onlooker = h.store().await;
    let until_queued = async |n: usize| until_queued(&onlooker, hot, n).await;
    let waiter = |label: &'static str, s: Arc<dyn LeaseStore>| {
        let r = ask(label);
        tokio::spawn(async move {
            match s.acquire_queued(&r, Duration::from_secs(600)).await.expect("a queue").expect("wait") {
                Attempt::Granted(g) => (g, s),
                Attempt::Busy(_) => panic!("{label}: the wait ran out"),
            }
        })
    };
    // One waits ahead; then the multi-lease waiter; then one more behind it.
    let ahead = waiter("ahead", h.store().await);
    until_queued(1).await;
    let multi = client(h).await;
    let both = LeaseOptions::exclusive().with_ttl(TTL).with_timeout(Duration::from_secs(600));
    let set = tokio::spawn(async move { multi.acquire_all(&[hot, cold], &both).await });
    until_queued(2).await;
    let behind = waiter("behind", h.store().await);
    until_queued(3).await;
    // The lease passes along the queue: to the one ahead, then to the set.
    store.release(&first, &ReleaseRequest::default()).await.expect("release");
    let (g, s) = with_time_flowing(h, tokio::time::timeout(Duration::from_secs(60), ahead))
        .await
        .expect("ahead's turn")
        .expect("join");
    s.release(&g, &ReleaseRequest::default()).await.expect("release");
    let set = with_time_flowing(h, async { tokio::time::timeout(Duration::from_secs(60), set).await })
        .await
        .expect("the set's turn came before the one behind it")
        .expect("join")
        .expect("the set");
    let names: Vec<String> = set.grants().iter().map(|g| g.name.to_string()).collect();
    assert_eq!(names, [cold, hot], "both, in canonical order");
    assert!(!behind.is_finished(), "the one behind the set got the lease first");
    set.release().await.expect("release the set");
    let (g, s) = with_time_flowing(h, tokio::time::timeout(Duration::from_secs(60), behind))
        .await
        .expect("behind's turn")
        .expect("join");
    s.release(&g, &ReleaseRequest::default()).await.expect("release");
}

/// Two tasks of one client (one holder identity: a cloned [`Client`]) waiting
/// for one lease: it goes to one of them, and to the other only once the first
/// lets it go. A fresh grant of the identity is no abandoned grant to re-take,
/// so the lease is never held twice, whether the store hands it along a line
/// (both tasks woken by one release) or the tasks poll.
pub async fn two_tasks_of_one_client_never_hold_one_lease_at_once(h: &dyn Harness) {
    let lease = "conf/siblings";
    let store = h.store().await;
    let first = crashed_holder(&store, lease, Holder::current().with_label("first")).await;
    let siblings = client(h).await;
    let wait = LeaseOptions::exclusive().with_ttl(TTL).with_timeout(Duration::from_secs(600));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let tasks: Vec<_> = (0..2)
        .map(|i| {
            let (c, wait, tx) = (siblings.clone(), wait.clone(), tx.clone());
            tokio::spawn(async move {
                let _ = tx.send((i, c.acquire(lease, &wait).await));
            })
        })
        .collect();
    // Both are waiting: in the store's line, or polling.
    with_time_flowing(h, tokio::time::sleep(Duration::from_millis(300))).await;
    store.release(&first, &ReleaseRequest::default()).await.expect("release");
    let mut next = async |within: Duration| with_time_flowing(h, tokio::time::timeout(within, rx.recv())).await;
    let (i, one) = next(Duration::from_secs(60)).await.expect("a sibling's grant").expect("open");
    let one = one.expect("granted");
    if let Ok(Some((_, Ok(other)))) = next(Duration::from_millis(500)).await {
        panic!(
            "both tasks of one client hold the lease: tokens {} and {} ({:?} / {:?})",
            one.token(),
            other.token(),
            one.grant().predecessor,
            other.grant().predecessor
        );
    }
    let token = one.token();
    one.release().await.expect("the first sibling still held the lease");
    let (j, other) = next(Duration::from_secs(60)).await.expect("the other sibling's turn").expect("open");
    let other = other.expect("granted");
    assert_ne!(i, j, "one task granted twice");
    assert!(other.token() > token, "tokens grow from one sibling to the other");
    other.release().await.expect("release");
    for t in tasks {
        t.await.expect("sibling");
    }
}

/// An exclusive waiter is not starved by readers, on every store: one that
/// queued while a reader held the lease (a garbage collector behind a backup)
/// is granted before the readers that came after it, which wait behind it
/// instead of joining the reader that holds the lease.
pub async fn an_exclusive_waiter_is_granted_before_readers_that_came_after_it(h: &dyn Harness) {
    let lease = "conf/gc";
    let reader = LeaseOptions::shared().with_ttl(TTL);
    let first = client(h).await.try_acquire(lease, &reader.clone().no_wait()).await.expect("the first reader");
    let onlooker = h.store().await;
    let wait = |o: LeaseOptions| o.with_ttl(TTL).with_timeout(Duration::from_secs(600));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let spawn = |who: &'static str, c: Client, opts: LeaseOptions| {
        let tx = tx.clone();
        tokio::spawn(async move {
            let _ = tx.send((who, c.acquire(lease, &opts).await.expect("granted")));
        })
    };
    let gc = spawn("collector", client(h).await, wait(LeaseOptions::exclusive()));
    until_queued(&onlooker, lease, 1).await;
    let mut readers = Vec::new();
    for _ in 0..2 {
        readers.push(spawn("reader", client(h).await, wait(LeaseOptions::shared())));
    }
    // Both readers wait, behind the collector: neither joined the first reader.
    until_queued(&onlooker, lease, 3).await;
    if let Ok((who, _)) = rx.try_recv() {
        panic!("a {who} was granted while the first reader held the lease and the collector waited");
    }
    first.release().await.expect("the first reader releases");
    let mut next = async || with_time_flowing(h, tokio::time::timeout(Duration::from_secs(60), rx.recv())).await;
    let (who, collector) = next().await.expect("a grant").expect("open");
    assert_eq!(who, "collector", "a reader that came after the waiting collector was granted before it");
    collector.release().await.expect("the collector releases");
    for _ in 0..2 {
        let (who, r) = next().await.expect("the readers' turn").expect("open");
        assert_eq!(who, "reader");
        r.release().await.expect("release");
    }
    gc.await.expect("collector");
    for r in readers {
        r.await.expect("reader");
    }
}
