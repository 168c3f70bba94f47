//! A lease server on loopback for tests, on an injected clock.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use tenure::{Clock, ManualClock, OpenOptions};
use tenure_server::server::RunningServer;
use tenure_server::{Core, CoreOptions, Server, ServerOptions, Signer, TenureStore};

/// Longest lease the test servers grant.
pub const MAX_LEASE: Duration = Duration::from_secs(10);

/// Starts a server on 127.0.0.1 (any port) whose clock is `clock`.
pub async fn start(clock: Arc<dyn Clock>, core_opts: CoreOptions, opts: ServerOptions) -> RunningServer {
    let core = Arc::new(Core::new(clock, core_opts));
    let server = Server::bind("127.0.0.1:0".parse().expect("addr"), core, Signer::generate(), opts)
        .await
        .expect("bind a loopback port");
    server.spawn().expect("spawn")
}

/// Starts a server on a manual clock and moves the clock past its quarantine.
pub async fn start_open(clock: &ManualClock) -> RunningServer {
    let server = start(clock.shared(), CoreOptions::new(MAX_LEASE), ServerOptions::default()).await;
    clock.advance(MAX_LEASE + Duration::from_secs(1));
    assert!(server.shared().core.quarantine_left().is_zero());
    server
}

/// A store on `servers`, on `clock`.
pub fn store(servers: &[&RunningServer], clock: &ManualClock) -> TenureStore {
    let hosts: Vec<String> = servers.iter().map(|s| s.addr().to_string()).collect();
    TenureStore::new(&format!("tenure://{}", hosts.join(",")), &OpenOptions::default().with_clock(clock.shared()))
        .expect("store")
}
