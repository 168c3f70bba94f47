//! Client-side sharding over three servers on loopback: rendezvous hashing of lease
//! names over the servers' identities, batches split per server, all-or-nothing
//! across servers; two spellings of one server, and a server that checks the
//! placement of what it is asked for.

use crate::common;

use std::sync::Arc;

use tenure_core::{AcquireRequest, AllAttempt, Attempt, Holder, LeaseName, LeaseStore, ManualClock, Released};
use tenure_server::TenureStore;
use tenure_server::client::place;

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
            Attempt::Granted(_) => per_server[all.server_for(n).expect("placed")] += 1,
            Attempt::Busy(b) => panic!("busy: {}", b.describe()),
        }
    }
    assert!(per_server.iter().all(|&c| c >= 5), "names should spread over all servers: {per_server:?}");
    for (i, s) in servers.iter().enumerate() {
        let one = common::store(&[s], &clock);
        let held = one.list("shard/").await.expect("list");
        assert_eq!(held.len(), per_server[i], "server {i} holds exactly the names that hash to it");
        assert!(held.iter().all(|n| all.server_for(n.as_str()) == Some(i)));
    }
    assert_eq!(all.list("shard/").await.expect("list").len(), names.len(), "list merges every server");
}

#[test]
fn every_client_picks_the_same_server_whatever_the_order_and_removal_moves_only_its_names() {
    let (a, b, c) = ("5f0c2a9e81d34b7c", "locks-2", "9a0e6f1d2c3b4a59");
    for i in 0..500 {
        let n = format!("name/{i}");
        let one = [a, b, c][place(&[a, b, c], &n)];
        assert_eq!(one, [c, a, b][place(&[c, a, b], &n)], "{n}: order must not matter");
        if one != c {
            assert_eq!(one, [a, b][place(&[a, b], &n)], "{n}: removing c must not move it");
        }
    }
}

/// `127.0.0.1:P` and `localhost:P` are one server: lists that spell it
/// differently place every name on the same server, so a name held through
/// one list is busy through the other.
#[tokio::test]
async fn two_spellings_of_one_list_place_every_name_on_the_same_server() {
    let clock = ManualClock::new();
    let servers = [common::start_open(&clock).await, common::start_open(&clock).await];
    let (p0, p1) = (servers[0].addr().port(), servers[1].addr().port());
    let url = |hosts: &str| format!("tenure://{hosts}");
    let opts = tenure_core::OpenOptions::default().with_clock(clock.shared());
    let numeric = TenureStore::new(&url(&format!("127.0.0.1:{p0},127.0.0.1:{p1}")), &opts).expect("store");
    let named = TenureStore::new(&url(&format!("localhost:{p0},127.0.0.1:{p1}")), &opts).expect("store");
    let (me, other) = (Arc::new(Holder::current()), Arc::new(Holder::current()));
    let mut per_server = [0usize; 2];
    for i in 0..40 {
        let n = format!("spelling/{i}");
        match numeric.try_acquire(&common::req(&n, &me)).await.expect("acquire") {
            Attempt::Granted(_) => per_server[numeric.server_for(&n).expect("placed")] += 1,
            Attempt::Busy(b) => panic!("busy: {}", b.describe()),
        }
        assert_eq!(numeric.server_for(&n), named.locate(&n).await.ok(), "{n}: placed on the same server");
        match named.try_acquire(&common::req(&n, &other)).await.expect("acquire") {
            Attempt::Busy(_) => {}
            Attempt::Granted(g) => panic!("{n} granted twice, token {} through the other spelling", g.token),
        }
    }
    assert!(per_server.iter().all(|&c| c > 0), "names spread over both servers: {per_server:?}");
}

/// A list that names one server twice (two addresses, one identity) is a
/// configuration error naming both addresses, before any name is placed.
#[tokio::test]
async fn a_list_naming_one_server_twice_is_refused_naming_both_addresses() {
    let clock = ManualClock::new();
    let servers = [common::start_open(&clock).await, common::start_open(&clock).await];
    let (p0, p1) = (servers[0].addr().port(), servers[1].addr().port());
    let list = format!("tenure://127.0.0.1:{p0},127.0.0.1:{p1},localhost:{p0}");
    let opts = tenure_core::OpenOptions::default().with_clock(clock.shared());
    let store = TenureStore::new(&list, &opts).expect("the URL itself is well formed");
    let me = Arc::new(Holder::current());
    for _ in 0..2 {
        match store.try_acquire(&common::req("twice/a", &me)).await {
            Err(tenure_core::Error::InvalidStore { reason, .. }) => {
                let (first, second) = (format!("127.0.0.1:{p0}"), format!("localhost:{p0}"));
                assert!(reason.contains(&first) && reason.contains(&second), "{reason}");
                assert!(reason.contains("one server"), "{reason}");
            }
            other => panic!("a list naming one server twice must be refused, got {other:?}"),
        }
    }
}

/// A server that was told the client's list refuses a name the list places
/// on another server, and grants one placed on itself.
#[tokio::test]
async fn a_server_refuses_a_name_the_clients_list_places_elsewhere() {
    use tenure_server::wire::{AskWire, ErrorCode, HolderWire, Request, Response};
    let clock = ManualClock::new();
    let servers = [common::start_open(&clock).await, common::start_open(&clock).await];
    let ids: Vec<String> = servers.iter().map(|s| s.shared().opts.server_id.clone()).collect();
    let name_on =
        |server: usize| (0..).map(|i| format!("placed/{i}")).find(|n| place(&ids, n) == server).expect("a name");
    let (mine, theirs) = (name_on(0), name_on(1));
    let mut s = tokio::net::TcpStream::connect(servers[0].addr()).await.expect("connect");
    let list = Request::Servers(ids.iter().map(String::as_str).collect());
    let answers =
        common::abuse::exchange(&mut s, &[common::abuse::hello(), common::abuse::frame(2, &list)].concat(), 2).await;
    assert!(matches!(answers[1], Response::Done), "{answers:?}");
    let holder = Holder::current();
    for (name, placed_here) in [(&theirs, false), (&mine, true)] {
        let ask = AskWire {
            name,
            mode: tenure_core::Mode::Exclusive,
            ttl_ms: 1000,
            holder: HolderWire::of(&holder),
            retake: false,
            meta: None,
        };
        let acquire = common::abuse::frame(3, &Request::Acquire { tentative: false, asks: vec![ask] });
        let answer = common::abuse::exchange(&mut s, &acquire, 1).await.remove(0);
        match answer {
            Response::Error { code: ErrorCode::Invalid, message } if !placed_here => {
                assert!(message.contains(&theirs) && message.contains(&ids[1]), "{message}");
            }
            Response::Acquired(_) if placed_here => {}
            other => panic!("{name} (placed here: {placed_here}): {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_batch_spanning_servers_is_all_or_nothing() {
    let clock = ManualClock::new();
    let servers =
        [common::start_open(&clock).await, common::start_open(&clock).await, common::start_open(&clock).await];
    let all = common::store(&[&servers[0], &servers[1], &servers[2]], &clock);
    all.locate("batch/any").await.expect("the servers say their identities");
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
