//! Reaching the test servers, and the conformance harness on an object store.
//!
//! Every test works under a fresh prefix `tests/<random>` of the server's bucket
//! `tenure`, so tests never see each other's objects, and always passes explicit
//! endpoints and credentials: without them the S3 and GCS builders would fall back
//! to a cloud metadata address.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure_conformance::{Harness, Time, cas_options, server_from_env};
use tenure_core::{Backend, CasStore, Clock, LeaseStore, ManualClock, OpenOptions, StoreUrl, SystemClock};
use tenure_object::object_store::memory::InMemory;
use tenure_object::object_store::path::Path;
use tenure_object::object_store::{ObjectStoreExt, PutPayload};
use tenure_object::{ObjectBackend, Probe, Provider, probe};

/// [`tenure_object::open`] for a URL as written, its parse errors returned.
pub async fn open(url: &str, opts: &OpenOptions) -> tenure_core::Result<Arc<dyn LeaseStore>> {
    tenure_object::open(&StoreUrl::parse(url, &opts.params)?, opts).await
}

/// [`tenure_object::open_backend`] for a URL as written.
pub async fn open_backend(url: &str, opts: &OpenOptions) -> tenure_core::Result<Arc<ObjectBackend>> {
    tenure_object::open_backend(&StoreUrl::parse(url, &opts.params)?, opts).await
}

/// The probe's verdict on the store a URL names, whatever `trust_store` says.
pub async fn check_store(url: &str, opts: &OpenOptions) -> tenure_core::Result<Probe> {
    probe(&tenure_object::backend_from_url(&StoreUrl::parse(url, &opts.params)?)?).await
}

/// Azurite's well-known development account key (public, documented by Microsoft).
pub const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// A server and how to reach it.
#[derive(Clone, Debug)]
pub struct Server {
    /// Scheme and bucket, e.g. `s3://tenure`.
    pub base: String,
    /// object_store options.
    pub params: BTreeMap<String, String>,
}

impl Server {
    /// A fresh prefix on this server.
    pub fn url(&self) -> String {
        format!("{}/tests/{}", self.base, tenure_core::random_nonce())
    }

    /// Open options with this server's parameters.
    pub fn options(&self) -> OpenOptions {
        OpenOptions { params: self.params.clone(), ..OpenOptions::default() }
    }
}

fn s3(var: &str, key: &str) -> Option<Server> {
    let endpoint = server_from_env(var)?;
    let params = [
        ("aws_endpoint", endpoint.as_str()),
        ("aws_allow_http", "true"),
        ("aws_access_key_id", key),
        ("aws_secret_access_key", key),
        ("aws_region", "us-east-1"),
    ];
    Some(Server {
        base: "s3://tenure".into(),
        params: params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    })
}

/// moto (honours every condition).
pub fn moto() -> Option<Server> {
    s3("TENURE_TEST_S3_MOTO", "test")
}

/// Ceph RGW (honours every condition; only unquoted ETags in `If-Match`).
pub fn rgw() -> Option<Server> {
    s3("TENURE_TEST_S3_RGW", "test")
}

/// s3rver: ignores every condition.
pub fn s3rver() -> Option<Server> {
    s3("TENURE_TEST_S3RVER", "S3RVER")
}

/// localbucket: honours create-if-absent, ignores `If-Match`.
pub fn localbucket() -> Option<Server> {
    s3("TENURE_TEST_LOCALBUCKET", "test")
}

/// Azurite, by explicit account, key and endpoint (so any port works).
pub fn azurite() -> Option<Server> {
    let endpoint = server_from_env("TENURE_TEST_AZURITE")?;
    let params = [
        ("azure_storage_account_name", "devstoreaccount1".to_string()),
        ("azure_storage_account_key", AZURITE_KEY.to_string()),
        ("azure_storage_endpoint", format!("{}/devstoreaccount1", endpoint.trim_end_matches('/'))),
        ("azure_allow_http", "true".to_string()),
        // Azurite (Node) closes idle connections after 5 s and has been seen to
        // stall a request under load: never reuse a connection it may have closed,
        // and give up on a stalled request soon enough to retry it.
        ("pool_idle_timeout", "2s".to_string()),
        ("timeout", "10s".to_string()),
    ];
    Some(Server { base: "az://tenure".into(), params: params.into_iter().map(|(k, v)| (k.to_string(), v)).collect() })
}

/// Real Google Cloud Storage, only when asked for: `TENURE_TEST_GCS_BUCKET` names
/// a bucket the credentials may write, and `GOOGLE_SERVICE_ACCOUNT` (a key file)
/// or `GOOGLE_SERVICE_ACCOUNT_KEY` (the JSON itself) gives the credentials. No
/// emulator honours `object_store`'s GCS preconditions, so CI (which has no GCS
/// credentials) skips these too, even with `TENURE_REQUIRE_SERVERS=1`.
pub fn gcs() -> Option<Server> {
    let Some(bucket) = std::env::var("TENURE_TEST_GCS_BUCKET").ok().filter(|b| !b.is_empty()) else {
        eprintln!(
            "skipped: GCS tests run against real GCS only: set TENURE_TEST_GCS_BUCKET and GOOGLE_SERVICE_ACCOUNT (or GOOGLE_SERVICE_ACCOUNT_KEY)"
        );
        return None;
    };
    let credential = ["GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_KEY", "GOOGLE_APPLICATION_CREDENTIALS"]
        .into_iter()
        .find(|v| std::env::var(v).is_ok_and(|s| !s.is_empty()));
    // Without explicit credentials the GCS builder would ask the cloud metadata
    // address: refuse instead.
    assert!(
        credential.is_some(),
        "TENURE_TEST_GCS_BUCKET is set, but none of GOOGLE_SERVICE_ACCOUNT, GOOGLE_SERVICE_ACCOUNT_KEY, GOOGLE_APPLICATION_CREDENTIALS is"
    );
    Some(Server { base: format!("gs://{bucket}"), params: BTreeMap::new() })
}

/// A backend on a fresh prefix, without the probe.
pub async fn trusted_backend(server: &Server, url: &str) -> Arc<ObjectBackend> {
    let mut opts = server.options();
    opts.trust_store = true;
    open_backend(url, &opts).await.expect("open backend")
}

/// Where a harness's handles point.
enum Target {
    Server(Server, String),
    /// `object_store`'s in-memory store (conditional writes included): the suite
    /// without a server.
    Memory(Arc<InMemory>),
}

/// The conformance harness: one fresh prefix, handles that share nothing but the
/// bucket, and a manual clock.
pub struct Bucket {
    target: Target,
    clock: ManualClock,
    backend: Arc<ObjectBackend>,
    settle: Duration,
}

impl Bucket {
    /// A fresh prefix on `server`; `settle` is how long background renewals get
    /// per 50 ms step of the manual clock (a few round trips of this server).
    pub async fn new(server: Server, settle: Duration) -> Self {
        let url = server.url();
        let backend = trusted_backend(&server, &url).await;
        Self::with(Target::Server(server, url), backend, settle)
    }

    /// On `object_store`'s in-memory store.
    pub async fn in_memory() -> Self {
        let store = Arc::new(InMemory::new());
        let backend = memory_backend(&store).await;
        Self::with(Target::Memory(store), backend, Duration::from_millis(2))
    }

    fn with(target: Target, backend: Arc<ObjectBackend>, settle: Duration) -> Self {
        // The store stamps records with real time, while the manual clock moves
        // faster than real time. Running the manual clock a day behind the store
        // makes every store timestamp look recent, so unreadable records are
        // judged by watching them, as the suite expects; tests/servers.rs checks
        // judging by the store's timestamp with real clocks.
        let day_ago = SystemClock::new().wall_ms() - 86_400_000;
        Self { target, clock: ManualClock::starting_at(day_ago), backend, settle }
    }
}

/// A handle on the in-memory store, probed as `open` would (which also finds
/// that this store only takes quoted ETags in `If-Match`).
async fn memory_backend(store: &Arc<InMemory>) -> Arc<ObjectBackend> {
    let backend = ObjectBackend::new(store.clone(), Path::from("locks"), Provider::S3, "memory-object://locks");
    probe(&backend).await.expect("the in-memory store enforces conditions");
    Arc::new(backend)
}

#[async_trait]
impl Harness for Bucket {
    async fn store(&self) -> Arc<dyn LeaseStore> {
        let backend = match &self.target {
            Target::Server(server, url) => trusted_backend(server, url).await,
            Target::Memory(store) => memory_backend(store).await,
        };
        Arc::new(CasStore::new(backend, self.clock.shared(), cas_options()))
    }
    fn time(&self) -> Time {
        Time::Manual(self.clock.clone())
    }
    fn backend(&self) -> Option<Arc<dyn Backend>> {
        Some(self.backend.clone())
    }
    /// Overwrites the record object unconditionally, as a foreign writer would.
    async fn corrupt(&self, name: &str, bytes: &[u8]) -> bool {
        let path = self.backend.object_path(name).expect("lease name");
        self.backend.object_store().put(&path, PutPayload::from(bytes.to_vec())).await.expect("overwrite the record");
        true
    }
    fn settle(&self) -> Duration {
        self.settle
    }
}

/// Every object under the backend's prefix.
pub async fn objects(backend: &ObjectBackend) -> Vec<String> {
    use futures::TryStreamExt;
    use tenure_object::object_store::ObjectStore;
    let metas: Vec<_> =
        backend.object_store().list(Some(backend.prefix())).try_collect().await.expect("list the test prefix");
    metas.into_iter().map(|m| m.location.to_string()).collect()
}
