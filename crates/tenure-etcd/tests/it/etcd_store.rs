//! What the etcd store does beyond the conformance suite, against a real
//! single-member etcd (`TENURE_TEST_ETCD`): etcd leases and their expiry, the
//! token rule across a vanished record, watches, and garbage under our keys.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tenure_conformance::{TTL, server_from_env};
use tenure_core::backend::Waiter;
use tenure_core::record::LeaseRecord;
use tenure_core::{
    Backend, CasOptions, Client, Error, FencedRecord, LeaseOptions, LeaseStore, ManualClock, OpenOptions, Put,
    PutOptions, Released, SystemClock,
};
use tenure_etcd::SHADOW_SUFFIX;

use common::{Scratch, held, open_options};

/// Real time to wait for anything that should happen in a few seconds.
const PATIENCE: Duration = Duration::from_secs(30);

async fn scratch(what: &str) -> Option<Scratch> {
    let endpoints = server_from_env("TENURE_TEST_ETCD")?;
    Some(Scratch::new(&endpoints, what).await)
}

async fn open(url: &str, opts: &OpenOptions) -> Arc<dyn LeaseStore> {
    common::open(url, opts).await.expect("open the etcd store")
}

/// The etcd lease a key is attached to (0: none), or `None` if the key is absent.
async fn lease_of(s: &Scratch, key: &str) -> Option<i64> {
    let resp = s.raw.get(key).await.expect("raw get");
    resp.kvs.first().map(|kv| kv.lease)
}

/// A store whose clock never moves: it can only take over a lease when etcd
/// deletes the record or someone releases it, and only wakes up through a watch.
fn frozen(clock: &ManualClock) -> OpenOptions {
    open_options().with_clock(clock.shared()).with_cas(CasOptions::default().with_max_skew(Duration::from_secs(3600)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_deletes_a_crashed_holders_record_and_a_frozen_waiter_takes_over_above_its_token() {
    let Some(s) = scratch("vanish").await else { return };
    let started = Instant::now();
    let holder = open(&s.url, &open_options()).await;
    let dead = held(&holder, "crash", TTL).await;
    let key = s.key("crash");
    let lease = lease_of(&s, &key).await.expect("the record exists");
    assert_ne!(lease, 0, "a grant's record is attached to an etcd lease");
    assert_eq!(lease_of(&s, &format!("{key}{SHADOW_SUFFIX}")).await, Some(0), "its shadow is not");
    drop(holder);

    // Neither clock rule can fire on a frozen clock: only etcd's expiry frees it.
    let clock = ManualClock::new();
    let waiter = Client::new(open(&s.url, &frozen(&clock)).await);
    let wait = LeaseOptions::exclusive().with_ttl(TTL).with_timeout(Duration::from_secs(3600));
    let lease = tokio::time::timeout(PATIENCE, waiter.acquire("crash", &wait))
        .await
        .expect("etcd must delete the record of a holder that stopped writing, and the watch must wake the waiter")
        .expect("acquire");
    assert!(
        started.elapsed() >= TTL,
        "etcd deleted the record {:?} after the grant, before the holder's own deadline ({TTL:?})",
        started.elapsed()
    );
    assert!(lease.token() > dead.token, "token {} must exceed the vanished holder's {}", lease.token(), dead.token);
    assert_eq!(lease.grant().predecessor, None, "a vanished record leaves no predecessor (documented)");
    assert!(lease_of(&s, &format!("{key}{SHADOW_SUFFIX}")).await.is_some(), "the shadow outlives the record");
    lease.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_racing_a_vanished_record_cannot_repeat_its_token() {
    let Some(s) = scratch("race").await else { return };
    let (slow, fast) = (s.backend().await, s.backend().await);
    let record = |token: u64| {
        let mut r = LeaseRecord::empty("r");
        r.last_token = token;
        Bytes::from(r.to_bytes())
    };
    let expiring = || PutOptions::create().with_expires_after(TTL);

    // The slow creator reads "absent" and its floor...
    assert_eq!(slow.get(&tenure_core::Key::new("r").expect("key")).await.expect("get"), None);
    let slow_floor = slow.absent_floor(&tenure_core::Key::new("r").expect("key")).await.expect("floor");
    // ...then another holder creates the record, acquires it again (an update,
    // which leaves the shadow alone), and it vanishes (etcd expiry).
    assert_eq!(fast.get(&tenure_core::Key::new("r").expect("key")).await.expect("get"), None);
    let fast_token = fast.absent_floor(&tenure_core::Key::new("r").expect("key")).await.expect("floor") + 1;
    let Put::Done(created) =
        fast.put(&tenure_core::Key::new("r").expect("key"), record(fast_token), expiring()).await.expect("put")
    else {
        panic!("the fast creator's create must land");
    };
    let again = PutOptions::update(created).with_expires_after(TTL);
    let updated = fast.put(&tenure_core::Key::new("r").expect("key"), record(fast_token + 1), again).await;
    assert!(matches!(updated.expect("put"), Put::Done(_)));
    s.raw.delete(&s.key("r")).await.expect("raw delete");

    // The slow creator's token would not exceed the vanished one's: refused.
    assert!(slow_floor < fast_token);
    assert_eq!(
        slow.put(&tenure_core::Key::new("r").expect("key"), record(slow_floor + 1), expiring()).await.expect("put"),
        Put::Conflict
    );
    // Read again, it gets a floor above everything, and succeeds.
    assert_eq!(slow.get(&tenure_core::Key::new("r").expect("key")).await.expect("get"), None);
    let floor = slow.absent_floor(&tenure_core::Key::new("r").expect("key")).await.expect("floor");
    assert!(floor >= fast_token, "the floor {floor} is at least every earlier token ({fast_token})");
    assert!(matches!(
        slow.put(&tenure_core::Key::new("r").expect("key"), record(floor + 1), expiring()).await.expect("put"),
        Put::Done(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_a_frozen_clock_wakes_through_the_watch_when_the_holder_releases() {
    let Some(s) = scratch("watch").await else { return };
    let holder = Client::new(open(&s.url, &open_options()).await);
    let held = holder.try_acquire("w", &LeaseOptions::exclusive().with_ttl(TTL)).await.expect("acquire");

    let clock = ManualClock::new();
    let waiter = Client::new(open(&s.url, &frozen(&clock)).await);
    let wait = LeaseOptions::exclusive().with_ttl(TTL).with_timeout(Duration::from_secs(3600));
    let task = tokio::spawn(async move { waiter.acquire("w", &wait).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!task.is_finished(), "the waiter must not get a held lease");

    assert_eq!(held.release().await.expect("release"), Released::Released);
    // The waiter's clock never moves, so it cannot poll: only the watch wakes it.
    let lease = tokio::time::timeout(PATIENCE, task)
        .await
        .expect("the release must wake the waiter through its watch")
        .expect("join")
        .expect("acquire after release");
    assert_eq!(lease.grant().predecessor.map(|p| p.how), Some(tenure_core::EndedHow::Released));
    lease.release().await.expect("release");
}

/// etcd's own wait line: each waiter is a key of its own on an etcd lease (no
/// shared queue record to rewrite), a waiter ahead that crashed holds the line
/// up only until etcd deletes its key, and a granted waiter leaves the line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_keys_of_their_own_and_a_crashed_waiters_key_lapses_with_its_etcd_lease() {
    let Some(s) = scratch("line").await else { return };
    let holder = Client::new(open(&s.url, &open_options()).await);
    let held = holder.try_acquire("q", &LeaseOptions::exclusive().with_ttl(TTL)).await.expect("acquire");
    // A waiter ahead of everyone that crashed: its etcd lease is never kept alive.
    let line = s.key("q~line/");
    let ghost = format!("{line}ghost");
    let short = s.raw.lease_grant(2).await.expect("lease grant");
    s.raw.put_on_lease(&ghost, b"x", short).await.expect("put the ghost");

    let waiter = Client::new(open(&s.url, &open_options()).await);
    let wait = LeaseOptions::exclusive().with_ttl(TTL).with_timeout(Duration::from_secs(3600));
    let task = tokio::spawn(async move { waiter.acquire("q", &wait).await });
    let started = Instant::now();
    let in_line = loop {
        let kvs = s.raw.get_prefix(&line).await.expect("range").kvs;
        if kvs.len() == 2 || started.elapsed() > PATIENCE {
            break kvs;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(in_line.len(), 2, "the ghost and the waiter, each a key");
    assert!(in_line.iter().all(|kv| kv.lease != 0), "every waiter's key is on an etcd lease");
    assert!(lease_of(&s, &s.key("q~queue")).await.is_none(), "no shared queue record on etcd");

    assert_eq!(held.release().await.expect("release"), Released::Released);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let done = task.is_finished();
    if lease_of(&s, &ghost).await.is_some() {
        assert!(!done, "the lease went past a waiter still in line ahead");
    }
    let lease = tokio::time::timeout(PATIENCE, task)
        .await
        .expect("etcd must delete the crashed waiter's key, and the watch wake the one behind it")
        .expect("join")
        .expect("acquire");
    assert!(lease_of(&s, &ghost).await.is_none(), "granted only once the ghost lapsed");
    // A granted waiter leaves the line in the background; its release waits
    // for that (checking before the release raced the departure).
    lease.release().await.expect("release");
    assert!(s.raw.get_prefix(&line).await.expect("range").kvs.is_empty(), "the granted waiter left the line");
}

/// Whose turn it is, read from the key just ahead only (and further back only
/// while that does not decide): an exclusive waiter waits for the waiter just
/// ahead, a shared one for any exclusive one ahead; keys that are no waiter's
/// are skipped, however many (past a page of them), and never block the line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_goes_by_the_waiters_ahead_skipping_keys_that_are_no_waiters() {
    let Some(s) = scratch("turns").await else { return };
    let line = s.backend().await.line(&SystemClock::shared(), Duration::from_secs(2)).expect("etcd keeps a line");
    let waiter = |nonce: &str, shared: bool| Waiter { nonce: nonce.to_string(), shared };
    let (a, b, c, d) = (waiter("a", false), waiter("b", true), waiter("c", true), waiter("d", false));
    let garbage = |i: usize| {
        let raw = s.raw.clone();
        let key = s.key(&format!("t~line/junk{i}"));
        async move { raw.put(key, if i.is_multiple_of(2) { "x" } else { "?" }).await.expect("plant") }
    };
    line.enter("t", &a).await.expect("enter a");
    for i in 0..70 {
        garbage(i).await;
    }
    line.enter("t", &b).await.expect("enter b");
    garbage(70).await;
    line.enter("t", &c).await.expect("enter c");
    line.enter("t", &d).await.expect("enter d");
    let names = |w: Vec<Waiter>| w.into_iter().map(|w| w.nonce).collect::<Vec<_>>();
    assert_eq!(names(line.waiters("t").await.expect("waiters")), ["a", "b", "c", "d"]);

    let brief = Duration::from_millis(50);
    let turn = |w: &Waiter| {
        let (line, w) = (line.clone(), w.clone());
        async move { line.turn("t", &w, brief).await.expect("turn") }
    };
    assert_eq!(turn(&a).await, Some(true), "the first waiter, past 70 keys that are no waiter's");
    assert_eq!(turn(&b).await, Some(false), "a shared waiter behind an exclusive one");
    assert_eq!(turn(&c).await, Some(false), "a shared one further back still");
    assert_eq!(turn(&d).await, Some(false));
    // Staying in line writes nothing.
    let before = s.raw.get(&s.key("t~line/b")).await.expect("get").header.expect("header").revision;
    line.enter("t", &b).await.expect("stay");
    let after = s.raw.get(&s.key("t~line/b")).await.expect("get").header.expect("header").revision;
    assert_eq!(before, after, "staying in line is a read");

    line.leave("t", "a").await.expect("a leaves");
    assert_eq!(turn(&b).await, Some(true));
    assert_eq!(turn(&c).await, Some(true), "shared waiters behind shared ones try together");
    assert_eq!(turn(&d).await, Some(false), "an exclusive one waits for them");
    assert_eq!(turn(&a).await, None, "a waiter that left is not in line");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_etcd_lease_is_revoked_learns_it_lost_and_the_store_recovers_with_a_new_one() {
    let Some(s) = scratch("revoked").await else { return };
    let c = Client::new(open(&s.url, &open_options()).await);
    let lease = c.try_acquire("r", &LeaseOptions::exclusive().with_ttl(TTL)).await.expect("acquire");
    let etcd_lease = lease_of(&s, &s.key("r")).await.expect("exists");
    // As if etcd had expired it while we were cut off: the record goes with it.
    s.raw.lease_revoke(etcd_lease).await.expect("revoke");
    let reason = tokio::time::timeout(PATIENCE, lease.lost()).await.expect("the holder must learn it lost the lease");
    match &reason {
        tenure_core::LossReason::Stolen { detail } => assert!(detail.contains("disappeared"), "{detail}"),
        other => panic!("expected Stolen, got {other:?}"),
    }
    assert_eq!(lease.release().await.expect("release after loss"), Released::NotHeld);
    // The store's next write finds its etcd lease gone and gets a new one.
    let again = c.try_acquire("r", &LeaseOptions::exclusive().with_ttl(TTL)).await.expect("acquire again");
    let fresh = lease_of(&s, &s.key("r")).await.expect("exists");
    assert!(fresh != 0 && fresh != etcd_lease, "a new etcd lease: {fresh:x} vs revoked {etcd_lease:x}");
    again.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_detaches_the_record_from_its_etcd_lease_so_its_history_stays() {
    let Some(s) = scratch("detach").await else { return };
    let c = Client::new(open(&s.url, &open_options()).await);
    let lease = c.try_acquire("d", &LeaseOptions::exclusive().with_ttl(TTL)).await.expect("acquire");
    let attached = lease_of(&s, &s.key("d")).await.expect("exists");
    assert_ne!(attached, 0);
    let token = lease.token();
    lease.release().await.expect("release");
    assert_eq!(lease_of(&s, &s.key("d")).await, Some(0), "a released record is kept, with no etcd lease");
    let state = c.inspect("d").await.expect("inspect");
    assert_eq!((state.last_token, state.holders.len()), (token, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_under_the_prefix_is_reported_naming_store_and_key_never_a_panic() {
    let Some(s) = scratch("garbage").await else { return };
    let raw = s.raw.clone();
    let junk: &[u8] = b"\xff\x00 not a record";
    for (key, value) in [
        (s.key("junk").into_bytes(), junk),
        (format!("{}/\u{7f}bad", s.prefix).into_bytes(), junk),
        ([s.prefix.as_bytes(), b"/\xff\xfe"].concat(), junk),
        (s.key("a//b").into_bytes(), junk),
        (s.key(&format!("lonely{SHADOW_SUFFIX}")).into_bytes(), junk),
        (s.key("newer").into_bytes(), br#"{"tenure": 99, "name": "newer", "last_token": 1}"#),
        (s.key("f~fence").into_bytes(), junk),
    ] {
        raw.put(key, value).await.expect("raw put");
    }
    let store = open(&s.url, &open_options()).await;
    let c = Client::new(store.clone());
    c.try_acquire("ok", &LeaseOptions::exclusive().with_ttl(TTL)).await.expect("acquire").release().await.expect("rel");

    let names: Vec<String> = c.list("").await.expect("list").iter().map(|n| n.to_string()).collect();
    assert_eq!(names, ["junk", "newer", "ok"], "foreign keys, bad keys and shadows are not lease names");

    let state = c.inspect("junk").await.expect("inspecting garbage is not an error");
    let detail = state.corrupt.expect("inspect reports the damage");
    assert!(detail.contains("not a tenure lease record"), "{detail}");

    let busy = c.try_acquire("junk", &LeaseOptions::exclusive().with_ttl(TTL)).await.expect_err("garbage blocks");
    let text = busy.to_string();
    assert!(matches!(busy, Error::Busy { .. }) && text.contains(&s.url) && text.contains("\"junk\""), "{text}");
    assert!(text.contains("unreadable"), "{text}");

    let newer = c.try_acquire("newer", &LeaseOptions::exclusive().with_ttl(TTL)).await.expect_err("refused");
    let text = newer.to_string();
    assert!(matches!(newer, Error::Unsupported { .. }) && text.contains(&s.url) && text.contains("newer"), "{text}");

    let fence = FencedRecord::new(s.dyn_backend().await, "f").expect("fence");
    match fence.read().await {
        Err(e @ Error::Corrupt { .. }) => {
            let text = e.to_string();
            assert!(text.contains(&s.url) && text.contains("f~fence"), "{text}");
        }
        other => panic!("a garbage fenced record must be reported corrupt, got {other:?}"),
    }

    // A garbage shadow is never read: the lease next to it works.
    c.try_acquire("lonely", &LeaseOptions::exclusive().with_ttl(TTL))
        .await
        .expect("acquire")
        .release()
        .await
        .expect("r");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_endpoint_next_to_a_live_one_does_not_stop_the_store() {
    let Some(s) = scratch("dead-endpoint").await else { return };
    let dead = closed_port().await;
    let url = s.url.replacen("etcd://", &format!("etcd://127.0.0.1:{dead},"), 1);
    let c = Client::new(open(&url, &open_options()).await);
    for _ in 0..10 {
        let lease = c.try_acquire("e", &LeaseOptions::exclusive().with_ttl(TTL)).await.expect("acquire");
        lease.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_refused_clearly_when_etcd_does_not_know_them() {
    let Some(s) = scratch("auth").await else { return };
    let opts = open_options().with_param("user", "nobody").with_param("password", "wrong");
    match common::open(&s.url, &opts).await {
        Err(e @ Error::InvalidStore { .. }) => {
            let text = e.to_string();
            assert!(text.contains(&s.url) && text.contains("authentication"), "{text}");
        }
        other => panic!("unknown credentials must be refused as a configuration error, got {:?}", other.err()),
    }
}

/// A loopback port nothing listens on.
async fn closed_port() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    l.local_addr().expect("addr").port()
}

#[tokio::test]
async fn an_unreachable_endpoint_is_reported_naming_the_store_and_endpoint() {
    let port = closed_port().await;
    let url = format!("etcd://127.0.0.1:{port}/locks");
    let opts = OpenOptions::default().with_param("connect_timeout", "1s").with_param("timeout", "1s");
    let started = Instant::now();
    let err = common::open(&url, &opts).await.expect_err("nothing listens there");
    let text = err.to_string();
    assert!(matches!(err, Error::Store { .. }), "{err:?}");
    assert!(text.contains(&url) && text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(started.elapsed() < PATIENCE, "open must give up, not hang");
}

#[tokio::test]
async fn an_endpoint_that_never_answers_is_given_up_on_after_the_timeout() {
    // Accepts connections and says nothing, like a wedged server.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = silent.local_addr().expect("addr").port();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = silent.accept().await {
            held.push(conn);
        }
    });
    let url = format!("etcd://127.0.0.1:{port}/locks");
    let opts = OpenOptions::default().with_param("connect_timeout", "1s").with_param("timeout", "1s");
    let err = tokio::time::timeout(PATIENCE, common::open(&url, &opts))
        .await
        .expect("open must give up on a silent endpoint")
        .expect_err("a silent endpoint is not a store");
    let text = err.to_string();
    assert!(matches!(err, Error::Store { .. }) && text.contains(&url) && text.contains("no answer"), "{text}");
    hold.abort();
}

#[tokio::test]
async fn malformed_urls_are_refused_before_connecting() {
    for url in ["etcd://127.0.0.1:2379", "etcd://127.0.0.1:99999/x", "etcd://h/x?bogus=1", "etcd://h/../x"] {
        match common::open(url, &OpenOptions::default()).await {
            // Named without the query, which may hold a password.
            Err(Error::InvalidStore { url: u, .. }) => assert_eq!(u, url.split('?').next().unwrap_or_default()),
            other => panic!("{url}: expected InvalidStore, got {:?}", other.err()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_reads_only_under_the_prefix() {
    let Some(s) = scratch("list").await else { return };
    let other = Scratch::new(&server_from_env("TENURE_TEST_ETCD").unwrap_or_default(), "list-other").await;
    let (mine, theirs) = (Client::new(open(&s.url, &open_options()).await), open(&other.url, &open_options()).await);
    for name in ["a/x", "a/y", "ab"] {
        mine.try_acquire(name, &LeaseOptions::exclusive().with_ttl(TTL))
            .await
            .expect("acq")
            .release()
            .await
            .expect("r");
    }
    Client::new(theirs)
        .try_acquire("a/z", &LeaseOptions::exclusive().with_ttl(TTL))
        .await
        .expect("a")
        .release()
        .await
        .expect("r");
    let under_a: Vec<String> = mine.list("a").await.expect("list").iter().map(|n| n.to_string()).collect();
    assert_eq!(under_a, ["a/x", "a/y"], "'a' lists a/… but not ab, nor another prefix's keys");
}

/// Compaction is cluster-wide, so this runs on the three-member cluster this
/// crate's tests own, not on the shared single-member etcd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_whose_history_was_compacted_away_keeps_waiting_and_still_sees_the_next_change() {
    let Some(endpoints) = server_from_env("TENURE_TEST_ETCD_CLUSTER") else { return };
    let s = Scratch::new(&endpoints, "compacted").await;
    let b = s.backend().await;
    let Put::Done(seen) = b
        .put(&tenure_core::Key::new("c").expect("key"), Bytes::from_static(b"v1"), PutOptions::create())
        .await
        .expect("put")
    else {
        panic!("a fresh key is created");
    };
    let raw = s.raw.clone();
    for i in 0..3 {
        raw.put(s.key("other"), format!("{i}")).await.expect("put other");
    }
    let now = raw.get(&s.key("other")).await.expect("get").header.expect("header").revision;
    raw.compact(now).await.expect("compact");

    // Watching from just after `seen` now starts in compacted history: the key
    // has not changed, so the watch must wait out its timeout, not report a change.
    let clock = ManualClock::new();
    let frozen = common::connect(&s.url, &frozen(&clock)).await.expect("backend");
    let seen1 = seen.clone();
    let waiting = tokio::spawn(async move {
        frozen.watch(&tenure_core::Key::new("c").expect("key"), Some(&seen1), Duration::from_secs(60)).await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "an unchanged key must not be reported changed");
    // Run the watch's clock out. It starts its timer when the task first runs,
    // which a loaded machine may delay: keep advancing until it gives up.
    let started = Instant::now();
    while !waiting.is_finished() && started.elapsed() < PATIENCE {
        clock.advance(Duration::from_secs(60));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!waiting.await.expect("join").expect("watch"), "it timed out unchanged");

    let watcher = common::connect(&s.url, &open_options()).await.expect("backend");
    let seen2 = seen.clone();
    let waiting =
        tokio::spawn(
            async move { watcher.watch(&tenure_core::Key::new("c").expect("key"), Some(&seen2), PATIENCE).await },
        );
    tokio::time::sleep(Duration::from_millis(300)).await;
    b.put(&tenure_core::Key::new("c").expect("key"), Bytes::from_static(b"v2"), PutOptions::update(seen))
        .await
        .expect("update");
    assert!(waiting.await.expect("join").expect("watch"), "the change after compaction is seen");
}

/// A watch that ends takes its etcd watcher with it, whether it saw a change
/// or gave up. One left
/// open would get every later change of its key, unread, until HTTP/2's guard
/// against floods of small frames closed the connection under every lease of
/// the process (`too_many_data_frames`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_that_ended_leave_no_watcher_behind_to_flood_the_connection() {
    let Some(s) = scratch("zombies").await else { return };
    let b = s.backend().await;
    let Put::Done(first) = b
        .put(&tenure_core::Key::new("k").expect("key"), Bytes::from_static(b"0"), PutOptions::create())
        .await
        .expect("put")
    else {
        panic!("a fresh key is created");
    };
    let seen = Arc::new(parking_lot::Mutex::new(first));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Watchers that give up after 2 to 20 ms, some before a change, some after.
    let watchers: Vec<_> = (0..4u64)
        .map(|w| {
            let (b, seen, stop) = (b.clone(), seen.clone(), stop.clone());
            tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let was = seen.lock().clone();
                    let _ = tokio::time::timeout(Duration::from_micros(2000 + (n * 997 + w * 311) % 18_000), async {
                        b.watch(&tenure_core::Key::new("k").expect("key"), Some(&was), PATIENCE).await
                    })
                    .await;
                    n += 1;
                }
            })
        })
        .collect();
    // A writer changing the key all along: every watcher still open is sent each change.
    for i in 1..=1500 {
        let was = seen.lock().clone();
        let put = b
            .put(&tenure_core::Key::new("k").expect("key"), Bytes::from(format!("{i}")), PutOptions::update(was))
            .await;
        match put.expect("the connection keeps working") {
            Put::Done(v) => *seen.lock() = v,
            Put::Conflict => panic!("nobody else writes k"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in watchers {
        w.await.expect("watcher");
    }
}
