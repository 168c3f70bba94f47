//! What waiting in etcd's wait line costs etcd, counted by an etcd member of
//! each test's own (its `/metrics`), so that no other test's requests blur the
//! figures: waiters that sit in line write nothing, and a key planted at a
//! waiter's place sends it into no loop of requests. Runs where the etcd test
//! servers run (`TENURE_TEST_ETCD`), since their `etcd` binary is what it starts.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure_conformance::server_from_env;
use tenure_core::cas::REFRESH;
use tenure_core::{Client, LeaseOptions, LeaseStore, ReleaseRequest};

use common::{Member, Scratch, held, open_options};

/// Real time to wait for anything that should happen in a few seconds.
const PATIENCE: Duration = Duration::from_secs(30);

async fn own_etcd(what: &str) -> Option<(Member, Scratch)> {
    server_from_env("TENURE_TEST_ETCD")?;
    let member = Member::start("http", &[]);
    let scratch = Scratch::new(&member.endpoint(), what).await;
    Some((member, scratch))
}

async fn open(url: &str) -> Arc<dyn LeaseStore> {
    common::open(url, &open_options()).await.expect("open the etcd store")
}

/// Longer than any test here runs: nothing renews the grant (see [`held`]).
const LONG: Duration = Duration::from_secs(300);

/// A waiter for `name` with all the time in the world, in a task of its own.
async fn waiter(url: &str, name: &'static str) -> tokio::task::JoinHandle<tenure_core::Result<tenure_core::Lease>> {
    let client = Client::new(open(url).await);
    let wait = LeaseOptions::exclusive().with_ttl(tenure_conformance::TTL).with_timeout(Duration::from_secs(3600));
    tokio::spawn(async move { client.acquire(name, &wait).await })
}

/// The keys of `line` once there are `n` of them.
async fn line_of(s: &Scratch, line: &str, n: usize) -> Vec<tenure_etcd::proto::mvccpb::KeyValue> {
    let started = Instant::now();
    loop {
        let kvs = s.raw.get_prefix(line).await.expect("range").kvs;
        if kvs.len() == n || started.elapsed() > PATIENCE {
            assert_eq!(kvs.len(), n, "{n} waiters in line");
            return kvs;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A waiter refreshes its place every 2 s; a `Txn` that may put is a Raft
/// write even when its comparison fails, so refreshing with one cost a WAL
/// entry fsynced on a quorum per waiter every 2 s (512/s for a full line).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_sitting_in_line_make_etcd_write_nothing() {
    let Some((etcd, s)) = own_etcd("idle").await else { return };
    const WAITERS: usize = 8;
    let holder = open(&s.url).await;
    let grant = held(&holder, "q", LONG).await;
    let mut tasks = Vec::new();
    for _ in 0..WAITERS {
        tasks.push(waiter(&s.url, "q").await);
    }
    let line = s.key("q~line/");
    line_of(&s, &line, WAITERS).await;
    // Every waiter past its entrance (and its first look at the lease).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let revision = |r: tenure_etcd::proto::etcdserverpb::RangeResponse| r.header.map(|h| h.revision);
    let (before, rev_before) = (etcd.counts().await, revision(s.raw.get_prefix(&line).await.expect("range")));
    tokio::time::sleep(REFRESH * 3 + Duration::from_millis(500)).await;
    let (after, rev_after) = (etcd.counts().await, revision(s.raw.get_prefix(&line).await.expect("range")));
    let spent = after.since(before);
    eprintln!("{WAITERS} waiters for {:?}: {spent:?}", REFRESH * 3);
    assert_eq!(spent.proposals, 0, "waiters sitting in line made etcd write: {spent:?}");
    assert_eq!(rev_before, rev_after, "and changed nothing");
    assert!(tasks.iter().all(|t| !t.is_finished()), "nobody gets a held lease");
    assert_eq!(line_of(&s, &line, WAITERS).await.len(), WAITERS, "and every waiter is still in line");

    for t in &tasks {
        t.abort();
    }
    holder.release(&grant, &ReleaseRequest::default()).await.expect("release");
}

/// A key with no etcd lease at a waiter's own place in line (a careless or
/// hostile tenant's, or a bug's) is no waiter's: entering again used to see
/// "there already" while the turn said "not in line", and the waiter asked
/// etcd both, over and over, with no pause, until its wait ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_on_no_etcd_lease_planted_at_a_waiters_place_costs_no_loop_and_the_waiter_still_gets_the_lease() {
    let Some((etcd, s)) = own_etcd("planted").await else { return };
    let holder = open(&s.url).await;
    let grant = held(&holder, "p", LONG).await;
    let task = waiter(&s.url, "p").await;
    let line = s.key("p~line/");
    let entry = line_of(&s, &line, 1).await.remove(0);
    let key = String::from_utf8(entry.key).expect("a UTF-8 key");
    // Put without a lease: the same key, detached from the waiter's etcd lease.
    s.raw.put(key.clone(), "x").await.expect("plant");
    assert_eq!(s.raw.get(&key).await.expect("get").kvs[0].lease, 0);

    let before = etcd.counts().await;
    tokio::time::sleep(REFRESH * 2 + Duration::from_millis(500)).await;
    let spent = etcd.counts().await.since(before);
    eprintln!("one waiter over a planted key for {:?}: {spent:?}", REFRESH * 2);
    // About 6 reads per refresh, and a delete and a create once.
    assert!(spent.kv_requests < 40, "a waiter whose place was taken must not loop: {spent:?}");
    let now = s.raw.get(&key).await.expect("get").kvs;
    assert!(now.first().is_some_and(|kv| kv.lease != 0), "the waiter took its place back, on its etcd lease");

    holder.release(&grant, &ReleaseRequest::default()).await.expect("release");
    let lease = tokio::time::timeout(PATIENCE, task)
        .await
        .expect("the waiter must get the lease once it is released")
        .expect("join")
        .expect("acquire");
    lease.release().await.expect("release");
}
