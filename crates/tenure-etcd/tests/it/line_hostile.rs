//! Waiting on etcd next to keys that no waiter wrote, and waits that are
//! cancelled: a line that cannot be read is no line (its waiters poll), keys
//! that are no waiter's take no place, and a cancelled wait leaves no entry
//! behind. Against a real etcd (`TENURE_TEST_ETCD`).

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure_conformance::{TTL, server_from_env};
use tenure_core::{Client, LeaseOptions, LeaseStore, ReleaseRequest};
use tenure_etcd::proto::etcdserverpb::RangeRequest;
use tenure_etcd::rpc;

use common::{Scratch, held, open_options};

const LONG: Duration = Duration::from_secs(300);

async fn scratch(what: &str) -> Option<Scratch> {
    let endpoints = server_from_env("TENURE_TEST_ETCD")?;
    Some(Scratch::new(&endpoints, what).await)
}

async fn open(url: &str) -> Arc<dyn LeaseStore> {
    common::open(url, &open_options()).await.expect("open the etcd store")
}

/// Keys (only) under `prefix`: a raw keys-only range, so that big values do not matter.
async fn keys(s: &Scratch, prefix: &str) -> Vec<(String, i64)> {
    let req = RangeRequest { keys_only: true, ..rpc::range_prefix(prefix) };
    let resp = s.raw.0.kv().range(req).await.expect("keys-only range").into_inner();
    resp.kvs.into_iter().map(|kv| (String::from_utf8_lossy(&kv.key).into_owned(), kv.lease)).collect()
}

/// A hostile tenant plants six keys under `NAME~line/` with values of 1.2 MB
/// each (under etcd's 1.5 MiB request limit), on no etcd lease: no waiter's
/// entries by the line's own rule. A waiter that queued behind them must get
/// the lease once its holder releases it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_junk_values_in_the_line_do_not_keep_a_waiter_from_a_released_lease() {
    let Some(s) = scratch("bigjunk-wait").await else { return };
    let holder = open(&s.url).await;
    let grant = held(&holder, "h", LONG).await;
    let line = s.key("h~line/");
    let big = vec![b'z'; 1_200_000];
    for i in 0..6 {
        s.raw.put(format!("{line}junk{i}"), big.clone()).await.expect("plant a big junk key");
    }
    let client = Client::new(open(&s.url).await);
    let wait = LeaseOptions::exclusive().with_ttl(TTL).with_timeout(Duration::from_secs(15));
    let task = tokio::spawn(async move { client.acquire("h", &wait).await });
    // The waiter's own key appears behind the junk.
    let started = Instant::now();
    while keys(&s, &line).await.len() < 7 && started.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    holder.release(&grant, &ReleaseRequest::default()).await.expect("release");
    let got = tokio::time::timeout(Duration::from_secs(20), task).await;
    match got {
        Ok(Ok(Ok(lease))) => {
            lease.release().await.expect("release");
        }
        Ok(Ok(Err(e))) => panic!("the lease was released ~13 s before the wait ended, yet the waiter failed: {e}"),
        Ok(Err(e)) => panic!("join: {e}"),
        Err(_) => panic!("the waiter did not get the released lease within 20 s (junk keys in its line)"),
    }
}

/// The same junk, read by `status`: the line is unusable, so no count, and
/// no error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_junk_values_in_the_line_do_not_break_counting_its_waiters() {
    let Some(s) = scratch("bigjunk-count").await else { return };
    let store = open(&s.url).await;
    let line = s.key("w~line/");
    let big = vec![b'z'; 1_200_000];
    for i in 0..4 {
        s.raw.put(format!("{line}junk{i}"), big.clone()).await.expect("plant a big junk key");
    }
    let name = tenure_core::LeaseName::new("w").expect("name");
    let n = store.waiting(&name).await;
    assert!(matches!(n, Ok(None)), "an unusable line counts no waiters, and fails nothing: {n:?}");
}

/// More than MAX_WAITERS keys that are no waiter's (no etcd lease): a waiter
/// for a held lease must still wait in line (or poll), and a wait that ends
/// must end as a timeout, not as "the line is full".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_keys_do_not_count_as_waiters_toward_the_line_limit() {
    let Some(s) = scratch("junk-count").await else { return };
    let holder = open(&s.url).await;
    let grant = held(&holder, "f", LONG).await;
    let line = s.key("f~line/");
    for i in 0..1030 {
        s.raw.put(format!("{line}junk{i:05}"), "?").await.expect("plant");
    }
    let client = Client::new(open(&s.url).await);
    let wait = LeaseOptions::exclusive().with_ttl(TTL).with_timeout(Duration::from_secs(3));
    let out = client.acquire("f", &wait).await;
    let err = out.expect_err("the lease is held");
    assert!(matches!(err, tenure_core::Error::Timeout { .. }), "expected a timeout, got: {err}");
    holder.release(&grant, &ReleaseRequest::default()).await.expect("release");
}

/// A wait cancelled while it enters the line (the caller's own `timeout` or
/// `select!`), the moment its key lands, leaves no key behind: one would sit
/// on the store's etcd lease for entries, which the process keeps alive while
/// anything else on that store waits in a line, and hold up every waiter
/// behind it for as long as the process lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_cancelled_while_entering_leaves_no_entry_behind() {
    let Some(s) = scratch("cancelled-entry").await else { return };
    let holder = open(&s.url).await;
    let grant = held(&holder, "g", LONG).await;
    let other = held(&holder, "keep", LONG).await;
    let line = s.key("g~line/");
    // One process: one store. One of its clients waits for another lease the
    // whole time, keeping the store's etcd lease for entries alive.
    let a = open(&s.url).await;
    let keeper = Client::new(a.clone());
    let keep_wait = LeaseOptions::exclusive().with_ttl(TTL).with_timeout(Duration::from_secs(3600));
    let keep_task = tokio::spawn(async move { keeper.acquire("keep", &keep_wait).await });
    for attempt in 0..20 {
        let c = Client::new(a.clone());
        let wait = LeaseOptions::exclusive().with_ttl(TTL).with_timeout(Duration::from_secs(3600));
        let acquire = c.acquire("g", &wait);
        let landed = async {
            while keys(&s, &line).await.is_empty() {
                tokio::task::yield_now().await;
            }
        };
        tokio::select! {
            biased;
            () = landed => {}
            r = acquire => panic!("the lease is held: {:?}", r.map(|_| ())),
        }
        // The departure runs in the background: give it time to land.
        let mut left = keys(&s, &line).await;
        for _ in 0..50 {
            if left.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            left = keys(&s, &line).await;
        }
        assert!(left.is_empty(), "attempt {attempt}: a cancelled wait left {left:?} in the line");
    }
    keep_task.abort();
    holder.release(&grant, &ReleaseRequest::default()).await.expect("release");
    holder.release(&other, &ReleaseRequest::default()).await.expect("release");
}
