//! Helpers shared by the etcd tests: URLs from the test servers' variables,
//! a unique key prefix per test, raw etcd access, and cleanup.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;

use tenure::{Backend, OpenOptions};
use tenure_conformance::cas_options;
use tenure_etcd::EtcdBackend;
use tenure_etcd::etcd_client::{Client, DeleteOptions};

/// `http://a:1,http://b:2` (as the test servers' variables give it) → `a:1,b:2`.
pub fn hosts(endpoints: &str) -> String {
    endpoints.split(',').map(|e| e.trim().trim_start_matches("http://")).collect::<Vec<_>>().join(",")
}

/// A key prefix nobody else uses: `tenure-test/<what>-<random>`.
pub fn unique_prefix(what: &str) -> String {
    format!("tenure-test/{what}-{}", tenure::random_nonce())
}

/// The options the tests open stores with: the conformance suite's timing.
pub fn open_options() -> OpenOptions {
    OpenOptions::default().with_cas(cas_options())
}

/// A raw etcd client on the same servers.
pub async fn raw(endpoints: &str) -> Client {
    let eps: Vec<String> = endpoints.split(',').map(|e| e.trim().to_string()).collect();
    Client::connect(eps, None).await.expect("connect a raw etcd client")
}

/// One test's piece of etcd: its store URL, and everything under its prefix
/// deleted when dropped.
pub struct Scratch {
    pub url: String,
    pub prefix: String,
    pub raw: Client,
}

impl Scratch {
    pub async fn new(endpoints: &str, what: &str) -> Self {
        let prefix = unique_prefix(what);
        Self { url: format!("etcd://{}/{prefix}", hosts(endpoints)), raw: raw(endpoints).await, prefix }
    }

    /// A backend (as a separate process would open it).
    pub async fn backend(&self) -> Arc<EtcdBackend> {
        Arc::new(EtcdBackend::connect(&self.url, &open_options()).await.expect("open the etcd backend"))
    }

    /// The same backend as a trait object.
    pub async fn dyn_backend(&self) -> Arc<dyn Backend> {
        self.backend().await
    }

    /// The etcd key of lease `name`.
    pub fn key(&self, name: &str) -> String {
        format!("{}/{name}", self.prefix)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Best effort, and only where blocking is allowed (the multi-thread
        // runtime every test here uses).
        let Ok(handle) = tokio::runtime::Handle::try_current() else { return };
        if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return;
        }
        let mut raw = self.raw.clone();
        let prefix = format!("{}/", self.prefix);
        tokio::task::block_in_place(|| {
            handle.block_on(async move {
                let _ = raw.delete(prefix, Some(DeleteOptions::new().with_prefix())).await;
            });
        });
    }
}
