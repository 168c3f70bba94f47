//! Client-side sharding over three servers on loopback: rendezvous hashing of lease
//! names, batches split per server, all-or-nothing across servers.

mod common;

use std::sync::Arc;

use tenure_core::{AcquireRequest, AllAttempt, Attempt, Holder, LeaseName, LeaseStore, ManualClock, Released};
use tenure_server::TenureStore;

#[tokio::test]
async fn leases_spread_over_three_servers_and_each_lives_on_its_rendezvous_server() {
    let clock = ManualClock::new();
    let servers =
        [common::start_open(&clock).await, common::start_open(&clock).await, common::start_open(&clock).await];
    let all = common::store(&[&servers[0], &servers[1], &servers[2]], &clock);
    let me = Arc::new(Holder::current());
    let names: Vec<String> = (0..60).map(|i| format!("shard/{i}")).collect();
    let mut per_server = [0usize; 3];
    for n in &names {
        match all.try_acquire(&common::req(n, &me)).await.expect("acquire") {
            Attempt::Granted(_) => per_server[all.server_for(n)] += 1,
            Attempt::Busy(b) => panic!("busy: {}", b.describe()),
        }
    }
    assert!(per_server.iter().all(|&c| c >= 5), "names should spread over all servers: {per_server:?}");
    for (i, s) in servers.iter().enumerate() {
        let one = common::store(&[s], &clock);
        let held = one.list("shard/").await.expect("list");
        assert_eq!(held.len(), per_server[i], "server {i} holds exactly the names that hash to it");
        assert!(held.iter().all(|n| all.server_for(n.as_str()) == i));
    }
    assert_eq!(all.list("shard/").await.expect("list").len(), names.len(), "list merges every server");
}

#[tokio::test]
async fn every_client_picks_the_same_server_whatever_the_order_and_removal_moves_only_its_names() {
    let a = "10.0.0.1:7777";
    let b = "10.0.0.2:7777";
    let c = "10.0.0.3:7777";
    let opts = tenure_core::OpenOptions::default();
    let abc = TenureStore::new(&format!("tenure://{a},{b},{c}"), &opts).expect("store");
    let cab = TenureStore::new(&format!("tenure://{c},{a},{b}"), &opts).expect("store");
    let ab = TenureStore::new(&format!("tenure://{a},{b}"), &opts).expect("store");
    for i in 0..500 {
        let n = format!("name/{i}");
        let one = abc.servers()[abc.server_for(&n)];
        assert_eq!(one, cab.servers()[cab.server_for(&n)], "{n}: order must not matter");
        if one != c {
            assert_eq!(one, ab.servers()[ab.server_for(&n)], "{n}: removing c must not move it");
        }
    }
}

#[tokio::test]
async fn a_batch_spanning_servers_is_all_or_nothing() {
    let clock = ManualClock::new();
    let servers =
        [common::start_open(&clock).await, common::start_open(&clock).await, common::start_open(&clock).await];
    let all = common::store(&[&servers[0], &servers[1], &servers[2]], &clock);
    // One name per server, in name order.
    let mut names: Vec<String> = Vec::new();
    for i in 0.. {
        let n = format!("batch/{i:03}");
        if !names.iter().any(|m| all.server_for(m) == all.server_for(&n)) {
            names.push(n);
        }
        if names.len() == 3 {
            break;
        }
    }
    let blocker = Arc::new(Holder::current());
    let held = match all.try_acquire(&common::req(&names[2], &blocker)).await.expect("acquire") {
        Attempt::Granted(g) => g,
        Attempt::Busy(_) => panic!("busy"),
    };
    let me = Arc::new(Holder::current());
    let reqs: Vec<AcquireRequest> = names.iter().map(|n| common::req(n, &me)).collect();
    match all.try_acquire_all(&reqs).await.expect("batch") {
        AllAttempt::Busy(b) => assert_eq!(b.name.as_str(), names[2]),
        AllAttempt::Granted(_) => panic!("granted while one lease was held"),
    }
    for n in &names[..2] {
        let state = all.inspect(&LeaseName::new(n.as_str()).expect("name")).await.expect("inspect");
        assert!(state.holders.is_empty(), "{n} must not stay held after a failed batch: {state:?}");
    }
    all.release(&held, &Default::default()).await.expect("release");
    let grants = match all.try_acquire_all(&reqs).await.expect("batch") {
        AllAttempt::Granted(g) => g,
        AllAttempt::Busy(b) => panic!("busy: {}", b.describe()),
    };
    let got: Vec<&str> = grants.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(got, names.iter().map(String::as_str).collect::<Vec<_>>(), "grants come back in request order");
    let renewed = all.renew_all(&grants).await;
    assert!(renewed.iter().all(Result::is_ok), "{renewed:?}");
    let released = all.release_all(&grants, &Default::default()).await;
    assert!(released.iter().all(|r| matches!(r, Ok(Released::Released))), "{released:?}");
}
