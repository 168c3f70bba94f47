//! Helpers shared by the etcd tests: URLs from the test servers' variables,
//! a unique key prefix per test, raw etcd access, and cleanup.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use tenure_conformance::cas_options;
use tenure_core::{AcquireRequest, Attempt, Backend, Grant, Holder, LeaseName, LeaseStore, Mode, OpenOptions};
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

/// An exclusive grant of `name` for `ttl`, acquired through the store with no
/// keep-alive: a holder that dies at once, or that nothing renews while a test
/// counts what etcd does.
pub async fn held(store: &Arc<dyn LeaseStore>, name: &str, ttl: Duration) -> Grant {
    let req = AcquireRequest {
        name: LeaseName::new(name).expect("name"),
        mode: Mode::Exclusive,
        ttl,
        holder: Arc::new(Holder::current()),
        retake: false,
        meta: None,
    };
    match store.try_acquire(&req).await.expect("acquire") {
        Attempt::Granted(g) => g,
        Attempt::Busy(b) => panic!("{name} should be free: {}", b.describe()),
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
        Arc::new(connect(&self.url, &open_options()).await.expect("open the etcd backend"))
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

/// An etcd member of one test's own (the test servers' `etcd` binary), on free
/// loopback ports, killed when dropped: for what the shared servers cannot
/// give, such as TLS settings or request counts that no other test disturbs.
pub struct Member {
    child: std::process::Child,
    pub port: u16,
    _data: tempfile::TempDir,
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

impl Member {
    /// Starts etcd with its client port speaking `scheme` (`http`, or `https`
    /// with the certificate flags in `extra`), and waits until it listens.
    /// The ports are free when chosen, but another process may take one
    /// before etcd binds it (every outgoing connection takes a port of the
    /// same range): an etcd that exits at once is started again on others.
    pub fn start(scheme: &str, extra: &[&str]) -> Self {
        for attempt in 1.. {
            match Self::try_start(scheme, extra) {
                Ok(member) => return member,
                Err(why) if attempt < 5 => eprintln!("etcd attempt {attempt}: {why}; again on other ports"),
                Err(why) => panic!("etcd did not start: {why}"),
            }
        }
        unreachable!("the loop returns or panics")
    }

    fn try_start(scheme: &str, extra: &[&str]) -> Result<Self, String> {
        let data = tempfile::tempdir().expect("data dir");
        let (port, peer) = (free_port(), free_port());
        let log = std::fs::File::create(data.path().join("etcd.log")).expect("etcd log");
        let child = std::process::Command::new("etcd")
            .args(["--name", "own", "--data-dir"])
            .arg(data.path().join("data"))
            .args(["--listen-client-urls", &format!("{scheme}://127.0.0.1:{port}")])
            .args(["--advertise-client-urls", &format!("{scheme}://127.0.0.1:{port}")])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args(["--initial-advertise-peer-urls", &format!("http://127.0.0.1:{peer}")])
            .args(["--initial-cluster", &format!("own=http://127.0.0.1:{peer}")])
            .args(extra)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd (the etcd test servers' binary)");
        let mut member = Self { child, port, _data: data };
        let said = |m: &Self| {
            let log = std::fs::read_to_string(m._data.path().join("etcd.log")).unwrap_or_default();
            log.lines().rev().take(3).collect::<Vec<_>>().join(" | ")
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = member.child.try_wait() {
                return Err(format!("it exited ({status}) before listening on {port}: {}", said(&member)));
            }
            if std::time::Instant::now() >= deadline {
                panic!("etcd did not listen on {port} within 60s: {}", said(&member));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(member)
    }

    /// Its client endpoint, as the test servers' variables give one.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// What a plain-HTTP member counted so far, from its `/metrics`.
    pub async fn counts(&self) -> Counts {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await.expect("connect for /metrics");
        conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").await.expect("ask /metrics");
        let mut text = String::new();
        conn.read_to_string(&mut text).await.expect("read /metrics");
        Counts::parse(&text)
    }
}

/// Request and write counts of an etcd member (Prometheus counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Requests of etcd's KV service (Range, Put, DeleteRange, Txn, Compact).
    pub kv_requests: u64,
    /// Raft proposals committed: each a WAL entry fsynced on a quorum.
    pub proposals: u64,
    /// Bytes etcd sent to its gRPC clients.
    pub sent_bytes: u64,
}

impl Counts {
    fn parse(metrics: &str) -> Self {
        let mut counts = Self::default();
        for line in metrics.lines() {
            let Some((name, value)) = line.rsplit_once(' ') else { continue };
            let Ok(value) = value.parse::<f64>() else { continue };
            // Counters are small whole numbers here.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let value = value as u64;
            if name.starts_with("grpc_server_started_total{") && name.contains("grpc_service=\"etcdserverpb.KV\"") {
                counts.kv_requests += value;
            } else if name == "etcd_server_proposals_committed_total" {
                counts.proposals = value;
            } else if name == "etcd_network_client_grpc_sent_bytes_total" {
                counts.sent_bytes = value;
            }
        }
        counts
    }

    /// What was counted since `earlier`.
    pub fn since(self, earlier: Self) -> Self {
        Self {
            kv_requests: self.kv_requests.saturating_sub(earlier.kv_requests),
            proposals: self.proposals.saturating_sub(earlier.proposals),
            sent_bytes: self.sent_bytes.saturating_sub(earlier.sent_bytes),
        }
    }
}

/// [`tenure_etcd::open`] for a URL as written, its parse errors returned.
pub async fn open(url: &str, opts: &OpenOptions) -> tenure_core::Result<Arc<dyn LeaseStore>> {
    tenure_etcd::open(&tenure_core::StoreUrl::parse(url, &opts.params)?, opts).await
}

/// [`EtcdBackend::connect`] for a URL as written.
pub async fn connect(url: &str, opts: &OpenOptions) -> tenure_core::Result<EtcdBackend> {
    EtcdBackend::connect(&tenure_core::StoreUrl::parse(url, &opts.params)?, opts).await
}
