//! A lease server on loopback for tests, on an injected clock.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure_conformance::{Harness, Time};
use tenure_core::{AcquireRequest, Backend, Clock, Holder, LeaseName, LeaseStore, ManualClock, Mode, OpenOptions};
use tenure_server::server::RunningServer;
use tenure_server::{Core, CoreOptions, Server, ServerOptions, Signer, TenureStore};

pub mod abuse;
pub mod table_store;
pub mod tls;

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
    store_with(servers, clock, "")
}

/// A store on `servers`, on `clock`, with URL parameters `query` (`a=1&b=2`).
pub fn store_with(servers: &[&RunningServer], clock: &ManualClock, query: &str) -> TenureStore {
    let hosts: Vec<String> = servers.iter().map(|s| s.addr().to_string()).collect();
    let url = format!("tenure://{}?{query}", hosts.join(","));
    TenureStore::new(&url, &OpenOptions::default().with_clock(clock.shared())).expect("store")
}

/// An exclusive request for `name` by `holder`, for `MAX_LEASE`.
pub fn req(name: &str, holder: &Arc<Holder>) -> AcquireRequest {
    AcquireRequest {
        name: LeaseName::new(name).expect("name"),
        mode: Mode::Exclusive,
        ttl: MAX_LEASE,
        holder: holder.clone(),
        retake: false,
        meta: None,
    }
}

/// The conformance harness over one running server on a manual clock.
pub struct Served {
    pub clock: ManualClock,
    pub server: RunningServer,
    /// URL parameters of the stores (`""` for none).
    pub query: String,
    /// The CA of a TLS server (kept for its files), if it has one.
    pub ca: Option<tls::TestCa>,
}

#[async_trait]
impl Harness for Served {
    async fn store(&self) -> Arc<dyn LeaseStore> {
        Arc::new(store_with(&[&self.server], &self.clock, &self.query))
    }
    fn time(&self) -> Time {
        Time::Manual(self.clock.clone())
    }
    fn backend(&self) -> Option<Arc<dyn Backend>> {
        None
    }
    /// The server keeps records in RAM only: nothing can damage them.
    async fn corrupt(&self, _name: &str, _bytes: &[u8]) -> bool {
        false
    }
    fn settle(&self) -> Duration {
        Duration::from_millis(10)
    }
}
