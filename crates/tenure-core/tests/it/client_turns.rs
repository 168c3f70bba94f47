//! The tasks of one client ask the store for a lease one at a time, in the
//! order they came: a task that tries while another waits hears that it is
//! busy, and whom with; one that waits past its timeout at its turn times out;
//! turns pass in order and leave nothing behind. (That two tasks of a client
//! never hold one lease at once is a conformance behaviour, on every store.)

use std::sync::Arc;
use std::time::Duration;

use tenure_core::{CasOptions, CasStore, Client, Error, LeaseOptions, LeaseStore, SystemClock};

fn store(url: &str) -> Arc<dyn LeaseStore> {
    let memory = tenure_core::store::memory::open(url).expect("open");
    Arc::new(CasStore::new(memory, SystemClock::shared(), CasOptions::default()))
}

fn waiting(secs: u64) -> LeaseOptions {
    LeaseOptions::exclusive().with_ttl(Duration::from_secs(30)).with_timeout(Duration::from_secs(secs))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_asking_while_another_of_its_client_waits_is_told_so() {
    let url = format!("memory://client-turns-busy-{}", std::process::id());
    let other = Client::new(store(&url));
    let held = other.try_acquire("t", &waiting(0)).await.expect("free");
    let client = Client::new(store(&url));
    let sibling = {
        let c = client.clone();
        tokio::spawn(async move { c.acquire("t", &waiting(60)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!sibling.is_finished(), "the sibling got a held lease");
    match client.try_acquire("t", &waiting(0)).await {
        Err(Error::Busy { holder, .. }) => assert!(holder.contains("another task of this client"), "{holder}"),
        other => panic!("a try while a sibling waits: {other:?}"),
    }
    match client.acquire("t", &waiting(0).with_timeout(Duration::from_millis(200))).await {
        Err(Error::Timeout { holder, waited, .. }) => {
            assert!(holder.contains("another task of this client"), "{holder}");
            assert!(waited >= Duration::from_millis(200), "timed out after {waited:?}");
        }
        other => panic!("a wait behind a sibling past its timeout: {other:?}"),
    }
    // Bad options are said at once, not after the sibling's turn.
    let zero_ttl = waiting(60).with_ttl(Duration::ZERO);
    match tokio::time::timeout(Duration::from_secs(5), client.acquire("t", &zero_ttl)).await {
        Ok(Err(Error::InvalidOptions { .. })) => {}
        other => panic!("invalid options behind a sibling: {other:?}"),
    }
    held.release().await.expect("release");
    let lease = tokio::time::timeout(Duration::from_secs(10), sibling).await.expect("in time").expect("join");
    let lease = lease.expect("the sibling's turn");
    lease.release().await.expect("release");
    // The turn passed on: a try is no longer told of a sibling (the map of
    // turns emptying is the unit test's in `turn.rs`).
    client.try_acquire("t", &waiting(0)).await.expect("free again").release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_pass_in_the_order_the_tasks_came_and_a_task_that_left_is_skipped() {
    let url = format!("memory://client-turns-order-{}", std::process::id());
    let other = Client::new(store(&url));
    let held = other.try_acquire("o", &waiting(0)).await.expect("free");
    let client = Client::new(store(&url));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..4 {
        let (c, tx) = (client.clone(), tx.clone());
        tasks.push(tokio::spawn(async move {
            let lease = c.acquire("o", &waiting(60)).await.expect("granted");
            let _ = tx.send((i, lease));
        }));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The third gives up while it waits for its turn.
    tasks.remove(2).abort();
    held.release().await.expect("release");
    let mut last = 0;
    for expected in [0, 1, 3] {
        let (i, lease) =
            tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("a grant").expect("open");
        assert_eq!(i, expected, "turns out of order");
        assert!(lease.token() > last, "tokens grow from turn to turn");
        last = lease.token();
        lease.release().await.expect("release");
    }
    for t in tasks {
        t.await.expect("task");
    }
}
