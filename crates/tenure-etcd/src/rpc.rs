//! A small etcd v3 client: one gRPC channel balanced over the cluster's
//! endpoints, optionally TLS, with etcd's per-request metadata (the
//! authentication token and `hasleader`) added to every request, and the few
//! request shapes tenure sends. Everything else is etcd's own API in
//! [`crate::proto`].

use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Request, Status};

use crate::proto::etcdserverpb::{
    AuthenticateRequest, Compare, LeaseKeepAliveRequest, PutRequest, RangeRequest, RequestOp, auth_client::AuthClient,
    cluster_client, compare, kv_client, lease_client, maintenance_client, request_op, watch_client,
};
use crate::proto::v3lockpb::lock_client;

/// The channel every generated client is built on.
pub type Service = InterceptedService<Channel, Metadata>;

/// Adds etcd's metadata to every request: the authentication token, once
/// authenticated, and `hasleader`, so that a member cut off from its cluster
/// fails a request at once instead of holding it.
#[derive(Clone, Default)]
pub struct Metadata {
    token: Arc<RwLock<Option<MetadataValue<Ascii>>>>,
}

/// Says whether there is a token, never the token.
impl std::fmt::Debug for Metadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metadata").field("token", &self.token.read().as_ref().map(|_| "…")).finish()
    }
}

impl tonic::service::Interceptor for Metadata {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        let meta = req.metadata_mut();
        meta.insert("hasleader", MetadataValue::from_static("true"));
        if let Some(token) = self.token.read().clone() {
            meta.insert("token", token);
        }
        Ok(req)
    }
}

/// How to reach the cluster.
#[derive(Clone, Default)]
pub struct Connect {
    /// Longest wait for a connection to one endpoint.
    pub connect_timeout: Duration,
    /// TLS, when the endpoints speak it.
    pub tls: Option<TlsFiles>,
    /// etcd user and password.
    pub credentials: Option<(String, String)>,
}

/// Names the user, never the password.
impl std::fmt::Debug for Connect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connect")
            .field("connect_timeout", &self.connect_timeout)
            .field("tls", &self.tls)
            .field("user", &self.credentials.as_ref().map(|(u, _)| u))
            .finish()
    }
}

/// The PEM contents TLS needs (read, size-capped, by the caller).
#[derive(Clone, Default)]
pub struct TlsFiles {
    /// CA certificates to trust instead of the platform's roots.
    pub ca: Option<Vec<u8>>,
    /// A client certificate chain and its key, for etcd's `--client-cert-auth`.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// The name to check the server's certificate against, instead of the host.
    pub server_name: Option<String>,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsFiles")
            .field("ca", &self.ca.is_some())
            .field("identity", &self.identity.is_some())
            .field("server_name", &self.server_name)
            .finish()
    }
}

/// A connection to an etcd cluster. Cheap to clone; clones share the channel
/// and the token.
#[derive(Clone)]
pub struct Etcd {
    channel: Channel,
    meta: Metadata,
    credentials: Option<Arc<(String, String)>>,
}

/// Names the user, never the password or the token.
impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd")
            .field("meta", &self.meta)
            .field("user", &self.credentials.as_ref().map(|c| &c.0))
            .finish_non_exhaustive()
    }
}

impl Etcd {
    /// A client for `endpoints` (`http://host:port`, or `https://` with TLS).
    /// Connections are made lazily; with credentials, this authenticates first.
    ///
    /// # Errors
    /// An invalid endpoint or TLS setting, or etcd refusing the credentials.
    pub async fn connect(endpoints: &[String], how: &Connect) -> Result<Self, Status> {
        let tls = how.tls.as_ref().map(tls_config);
        let mut list = Vec::with_capacity(endpoints.len());
        for e in endpoints {
            let mut ep = Endpoint::from_shared(e.clone())
                .map_err(|err| Status::invalid_argument(format!("endpoint {e}: {err}")))?
                .connect_timeout(how.connect_timeout)
                // HTTP/2 pings find dead connections; etcd refuses pings more often
                // than every 5 s, and any ping on a connection without streams.
                .http2_keep_alive_interval(Duration::from_secs(10))
                .keep_alive_timeout(Duration::from_secs(5))
                .keep_alive_while_idle(false);
            if let Some(tls) = &tls {
                ep = ep
                    .tls_config(tls.clone())
                    .map_err(|err| Status::invalid_argument(format!("TLS for {e}: {err}")))?;
            }
            list.push(ep);
        }
        let client = Self {
            channel: Channel::balance_list(list.into_iter()),
            meta: Metadata::default(),
            credentials: how.credentials.clone().map(Arc::new),
        };
        client.authenticate().await?;
        Ok(client)
    }

    /// Asks etcd for a fresh token with our credentials (etcd's simple tokens
    /// expire when unused for a while). Without credentials, does nothing.
    ///
    /// # Errors
    /// etcd's answer when it refuses.
    pub async fn authenticate(&self) -> Result<(), Status> {
        let Some(creds) = &self.credentials else { return Ok(()) };
        let (name, password) = (creds.0.clone(), creds.1.clone());
        let resp = AuthClient::new(self.channel.clone()).authenticate(AuthenticateRequest { name, password }).await?;
        let token = MetadataValue::try_from(resp.into_inner().token)
            .map_err(|_| Status::internal("etcd sent an authentication token that is not ASCII"))?;
        *self.meta.token.write() = Some(token);
        Ok(())
    }

    /// Whether `status` says our token is no longer valid (re-authenticate, then
    /// send again: etcd refused the request before applying it).
    pub fn token_expired(&self, status: &Status) -> bool {
        self.credentials.is_some()
            && status.code() == tonic::Code::Unauthenticated
            && status.message().contains("invalid auth token")
    }

    /// One `LeaseKeepAlive` exchange for etcd lease `id`: the TTL etcd answers
    /// (0 or less: no such lease). The request stream stays open until the
    /// answer, then both are dropped.
    ///
    /// # Errors
    /// etcd's, or the stream ending without an answer.
    pub async fn keep_alive_once(&self, id: i64) -> Result<i64, Status> {
        use futures::StreamExt;
        let ask = futures::stream::iter([LeaseKeepAliveRequest { id }]).chain(futures::stream::pending());
        let mut answers = self.lease().lease_keep_alive(ask).await?.into_inner();
        match answers.message().await? {
            Some(a) => Ok(a.ttl),
            None => Err(Status::unavailable("etcd closed the keep-alive stream without an answer")),
        }
    }

    /// etcd's KV service.
    pub fn kv(&self) -> kv_client::KvClient<Service> {
        kv_client::KvClient::with_interceptor(self.channel.clone(), self.meta.clone())
    }

    /// etcd's Watch service.
    pub fn watch(&self) -> watch_client::WatchClient<Service> {
        watch_client::WatchClient::with_interceptor(self.channel.clone(), self.meta.clone())
    }

    /// etcd's Lease service.
    pub fn lease(&self) -> lease_client::LeaseClient<Service> {
        lease_client::LeaseClient::with_interceptor(self.channel.clone(), self.meta.clone())
    }

    /// etcd's Cluster service (members).
    pub fn cluster(&self) -> cluster_client::ClusterClient<Service> {
        cluster_client::ClusterClient::with_interceptor(self.channel.clone(), self.meta.clone())
    }

    /// etcd's Maintenance service (status, alarms).
    pub fn maintenance(&self) -> maintenance_client::MaintenanceClient<Service> {
        maintenance_client::MaintenanceClient::with_interceptor(self.channel.clone(), self.meta.clone())
    }

    /// etcd's Lock service.
    pub fn lock(&self) -> lock_client::LockClient<Service> {
        lock_client::LockClient::with_interceptor(self.channel.clone(), self.meta.clone())
    }
}

fn tls_config(files: &TlsFiles) -> ClientTlsConfig {
    let mut tls = ClientTlsConfig::new();
    tls = match &files.ca {
        Some(pem) => tls.ca_certificate(Certificate::from_pem(pem)),
        None => tls.with_native_roots(),
    };
    if let Some((cert, key)) = &files.identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    if let Some(name) = &files.server_name {
        tls = tls.domain_name(name.clone());
    }
    tls
}

/// The end of the range of every key starting with `prefix`: etcd's "prefix"
/// option (the prefix with its last byte below 0xff incremented; `\0`, all
/// keys, when there is none).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A `Range` of one key.
pub fn range(key: &str) -> RangeRequest {
    RangeRequest { key: key.as_bytes().to_vec(), ..RangeRequest::default() }
}

/// A `Range` of every key under `prefix`.
pub fn range_prefix(prefix: &str) -> RangeRequest {
    RangeRequest { range_end: prefix_end(prefix.as_bytes()), ..range(prefix) }
}

/// `target(key) result value`, for a transaction's conditions.
fn compare(key: &str, target: compare::CompareTarget, result: compare::CompareResult, v: i64) -> Compare {
    let union = match target {
        compare::CompareTarget::Create => compare::TargetUnion::CreateRevision(v),
        compare::CompareTarget::Mod => compare::TargetUnion::ModRevision(v),
        _ => compare::TargetUnion::Version(v),
    };
    Compare {
        result: result as i32,
        target: target as i32,
        key: key.as_bytes().to_vec(),
        target_union: Some(union),
        range_end: Vec::new(),
    }
}

/// `create_revision(key) == v` (0: the key does not exist).
pub fn create_revision_is(key: &str, v: i64) -> Compare {
    compare(key, compare::CompareTarget::Create, compare::CompareResult::Equal, v)
}

/// `mod_revision(key) == v`.
pub fn mod_revision_is(key: &str, v: i64) -> Compare {
    compare(key, compare::CompareTarget::Mod, compare::CompareResult::Equal, v)
}

/// `mod_revision(key) < v`.
pub fn mod_revision_below(key: &str, v: i64) -> Compare {
    compare(key, compare::CompareTarget::Mod, compare::CompareResult::Less, v)
}

/// A put in a transaction, attached to etcd lease `lease` (0: none).
pub fn put_op(key: &str, value: Vec<u8>, lease: i64) -> RequestOp {
    let put = PutRequest { key: key.as_bytes().to_vec(), value, lease, ..PutRequest::default() };
    RequestOp { request: Some(request_op::Request::RequestPut(put)) }
}
