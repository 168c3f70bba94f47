//! Helpers shared by the etcd tests: URLs from the test servers' variables,
//! a unique key prefix per test, raw etcd access, and cleanup.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use tenure_conformance::cas_options;
use tenure_core::{Backend, OpenOptions};
use tenure_etcd::EtcdBackend;
use tenure_etcd::proto::etcdserverpb::{
    CompactionRequest, DeleteRangeRequest, LeaseRevokeRequest, PutRequest, RangeResponse,
};
use tenure_etcd::rpc::{self, Etcd};

/// Plain etcd requests, for setting up and inspecting what tests need.
#[derive(Clone, Debug)]
pub struct Raw(pub Etcd);

impl Raw {
    pub async fn connect(endpoints: &[String]) -> Result<Self, tonic::Status> {
        let how = rpc::Connect { connect_timeout: Duration::from_secs(3), ..rpc::Connect::default() };
        Etcd::connect(endpoints, &how).await.map(Self)
    }

    pub async fn put(&self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Result<(), tonic::Status> {
        let req = PutRequest { key: key.into(), value: value.into(), ..PutRequest::default() };
        self.0.kv().put(req).await.map(drop)
    }

    pub async fn get(&self, key: &str) -> Result<RangeResponse, tonic::Status> {
        self.0.kv().range(rpc::range(key)).await.map(tonic::Response::into_inner)
    }

    pub async fn delete(&self, key: &str) -> Result<(), tonic::Status> {
        let req = DeleteRangeRequest { key: key.as_bytes().to_vec(), ..DeleteRangeRequest::default() };
        self.0.kv().delete_range(req).await.map(drop)
    }

    pub async fn delete_prefix(&self, prefix: &str) -> Result<(), tonic::Status> {
        let range_end = rpc::prefix_end(prefix.as_bytes());
        let req = DeleteRangeRequest { key: prefix.as_bytes().to_vec(), range_end, ..DeleteRangeRequest::default() };
        self.0.kv().delete_range(req).await.map(drop)
    }

    /// A fresh etcd lease of `ttl` seconds, never kept alive: its id.
    pub async fn lease_grant(&self, ttl: i64) -> Result<i64, tonic::Status> {
        let req = tenure_etcd::proto::etcdserverpb::LeaseGrantRequest { ttl, id: 0 };
        self.0.lease().lease_grant(req).await.map(|r| r.into_inner().id)
    }

    pub async fn put_on_lease(&self, key: &str, value: &[u8], lease: i64) -> Result<(), tonic::Status> {
        let req = PutRequest { key: key.into(), value: value.to_vec(), lease, ..PutRequest::default() };
        self.0.kv().put(req).await.map(drop)
    }

    pub async fn get_prefix(&self, prefix: &str) -> Result<RangeResponse, tonic::Status> {
        self.0.kv().range(rpc::range_prefix(prefix)).await.map(tonic::Response::into_inner)
    }

    pub async fn lease_revoke(&self, id: i64) -> Result<(), tonic::Status> {
        self.0.lease().lease_revoke(LeaseRevokeRequest { id }).await.map(drop)
    }

    pub async fn compact(&self, revision: i64) -> Result<(), tonic::Status> {
        self.0.kv().compact(CompactionRequest { revision, physical: false }).await.map(drop)
    }
}

/// `http://a:1,http://b:2` (as the test servers' variables give it) → `a:1,b:2`.
pub fn hosts(endpoints: &str) -> String {
    endpoints.split(',').map(|e| e.trim().trim_start_matches("http://")).collect::<Vec<_>>().join(",")
}

/// A key prefix nobody else uses: `tenure-test/<what>-<random>`.
pub fn unique_prefix(what: &str) -> String {
    format!("tenure-test/{what}-{}", tenure_core::random_nonce())
}

/// The options the tests open stores with: the conformance suite's timing.
pub fn open_options() -> OpenOptions {
    OpenOptions::default().with_cas(cas_options())
}

/// A raw etcd client on the same servers.
pub async fn raw(endpoints: &str) -> Raw {
    let eps: Vec<String> = endpoints.split(',').map(|e| e.trim().to_string()).collect();
    Raw::connect(&eps).await.expect("connect a raw etcd client")
}

/// One test's piece of etcd: its store URL, and everything under its prefix
/// deleted when dropped.
pub struct Scratch {
    pub url: String,
    pub prefix: String,
    pub raw: Raw,
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
        let raw = self.raw.clone();
        let prefix = format!("{}/", self.prefix);
        tokio::task::block_in_place(|| {
            handle.block_on(async move {
                let _ = raw.delete_prefix(&prefix).await;
            });
        });
    }
}
