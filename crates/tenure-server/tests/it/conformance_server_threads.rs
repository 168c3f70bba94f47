//! The conformance suite over `tenure://` again, with the server's connections on
//! threads of their own (`connection_threads`, as `tenure serve` runs them) and
//! no polling on either side (`spin`: every wait sleeps, as across a network), and
//! what ownership of those threads means: a graceful shutdown waits for them, and
//! dropping the server closes every connection at once, as a crash does.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use tenure_conformance::conformance_tests;
use tenure_core::{Attempt, Holder, LeaseStore, ManualClock};
use tenure_server::server::RunningServer;
use tenure_server::{CoreOptions, ServerOptions};

async fn start(clock: &ManualClock) -> RunningServer {
    let opts = ServerOptions { connection_threads: 2, spin: Duration::ZERO, ..ServerOptions::default() };
    let server = common::start(clock.shared(), CoreOptions::new(common::MAX_LEASE), opts).await;
    clock.advance(common::MAX_LEASE + Duration::from_secs(1));
    server
}

async fn served() -> Option<common::Served> {
    let clock = ManualClock::new();
    let server = start(&clock).await;
    Some(common::Served { clock, server, query: "spin=0us".into(), ca: None })
}

conformance_tests!(served);

#[tokio::test]
async fn connection_threads_serve_many_connections_and_stop_with_the_server() {
    let clock = ManualClock::new();
    let server = start(&clock).await;
    let url = format!("tenure://{}?connections=4", server.addr());
    let store = tenure_server::TenureStore::new(&url, &tenure_core::OpenOptions::default().with_clock(clock.shared()))
        .expect("store");
    let me = Arc::new(Holder::current());
    for i in 0..40 {
        let name = format!("threads/{}", i % 7);
        match store.try_acquire(&common::req(&name, &me)).await.expect("acquire") {
            Attempt::Granted(g) => assert!(store.release(&g, &Default::default()).await.is_ok()),
            Attempt::Busy(b) => panic!("busy: {}", b.describe()),
        }
    }
    assert_eq!(server.shared().conns.open.load(std::sync::atomic::Ordering::Relaxed), 4);
    // A graceful shutdown returns once the threads have closed their connections.
    tokio::time::timeout(Duration::from_secs(10), server.shutdown()).await.expect("shutdown finishes");
    assert!(store.try_acquire(&common::req("threads/after", &me)).await.is_err(), "nothing serves after shutdown");
}

#[tokio::test]
async fn dropping_the_server_closes_the_connections_on_its_threads() {
    let clock = ManualClock::new();
    let server = start(&clock).await;
    let store = common::store(&[&server], &clock);
    let me = Arc::new(Holder::current());
    let Attempt::Granted(held) = store.try_acquire(&common::req("threads/crash", &me)).await.expect("acquire") else {
        panic!("busy")
    };
    drop(server); // a crash: no goodbye
    // The connection's thread drops it with its runtime: the client sees the close
    // (or, once it notices, finds nothing listening) instead of an answer.
    let renewed = tokio::time::timeout(Duration::from_secs(5), store.renew(&held)).await;
    assert!(matches!(renewed, Ok(Err(_))), "a dropped server must renew nothing: {renewed:?}");
}
