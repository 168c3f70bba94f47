//! [`EtcdBackend`]: tenure's versioned register per key, on etcd. The mapping of
//! each operation to etcd requests is in the crate docs.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tenure_core::backend::{Key, Line, check_key};
use tenure_core::{Backend, Clock, Error, OpenOptions, Put, PutMode, PutOptions, Result, StoreUrl, Stored, Version};
use tonic::Status;

use crate::leases::{LeasePool, LeaseRpc};
use crate::proto::etcdserverpb::{LeaseGrantRequest, RangeRequest, RangeResponse, ResponseHeader, TxnRequest};
use crate::rpc::{self, Etcd};
use crate::url::EtcdUrl;

/// Appended to a record's etcd key to name its shadow: a persistent key written
/// with every create of a record with an expiry (holding the created value),
/// which etcd does not delete. No valid backend key contains `~~`, so a shadow
/// never collides with a record.
pub const SHADOW_SUFFIX: &str = "~~last";

/// A [`Backend`] on etcd: each key is one etcd key under the store's prefix.
pub struct EtcdBackend {
    url: String,
    endpoints: String,
    client: Etcd,
    /// `<prefix>/`.
    root: String,
    clock: Arc<dyn Clock>,
    timeout: Duration,
    /// Whether the endpoints speak TLS (for the hints in errors).
    tls: bool,
    leases: LeasePool,
}

impl fmt::Debug for EtcdBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdBackend")
            .field("url", &self.url)
            .field("endpoints", &self.endpoints)
            .field("root", &self.root)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// gRPC status codes (google.rpc.Code) that say "fix the configuration".
const PERMISSION_DENIED: i32 = 7;
const UNAUTHENTICATED: i32 = 16;

/// Whether etcd refused us for a reason retrying cannot fix: bad credentials,
/// missing permissions, authentication not enabled. (Other codes, such as
/// FailedPrecondition, also carry transient errors like "not leader".)
fn refused(s: &Status) -> bool {
    let code = s.code() as i32;
    code == PERMISSION_DENIED || code == UNAUTHENTICATED || s.message().contains("authentication")
}

impl EtcdBackend {
    /// Connects to the cluster named by `url` (see [`EtcdUrl`]) and checks that it
    /// answers: one `Range` of the prefix, so that an unreachable endpoint or a
    /// refused credential is reported here, naming the store.
    ///
    /// # Errors
    /// [`Error::InvalidStore`] for a malformed URL, unknown options or credentials
    /// etcd refuses; [`Error::Store`] when no endpoint answers in time.
    pub async fn connect(url: &StoreUrl, opts: &OpenOptions) -> Result<Self> {
        let url = &url.with_params(&opts.params);
        let parsed = EtcdUrl::from_url(url)?;
        let url = &url.display().to_string();
        let s = &parsed.settings;
        // Requests are timed by this backend (see `timed`), not by tonic, so that
        // a timeout says which request and which endpoints.
        // The certificate files are read off the runtime, under the connect
        // deadline: a hung mount must not hang the caller.
        let tls = match s.tls.clone() {
            Some(tls) => {
                let read = tokio::task::spawn_blocking(move || tls.read());
                match tokio::time::timeout(s.connect_timeout, read).await {
                    Ok(Ok(Ok(files))) => Some(files),
                    Ok(Ok(Err(reason))) => return Err(Error::InvalidStore { url: url.clone(), reason }),
                    Ok(Err(e)) => return Err(Error::store(url, "reading the TLS files", e)),
                    Err(_) => {
                        let why = format!("no answer within {}: is their file system hung?", human(s.connect_timeout));
                        return Err(Error::store(url, "reading the TLS files", why));
                    }
                }
            }
            None => None,
        };
        let connect = rpc::Connect { connect_timeout: s.connect_timeout, tls, credentials: s.credentials.clone() };
        let endpoints = parsed.endpoints_display();
        let op = || format!("connecting to etcd at {endpoints}");
        // Only authentication talks to etcd here; the connections are made lazily.
        let limit = s.connect_timeout + s.request_timeout;
        let client = match tokio::time::timeout(limit, Etcd::connect(&parsed.endpoints, &connect)).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(failed_to_connect(url, s.tls.is_some(), op(), e)),
            Err(_) => return Err(Error::store(url, op(), format!("no answer within {}", human(limit)))),
        };
        let backend = Self {
            url: url.to_string(),
            endpoints: endpoints.clone(),
            client,
            root: format!("{}/", parsed.prefix),
            clock: opts.clock.clone(),
            timeout: s.request_timeout,
            tls: s.tls.is_some(),
            leases: LeasePool::default(),
        };
        let count = RangeRequest { count_only: true, ..rpc::range_prefix(&backend.root) };
        if let Err(e) = backend.try_range(&op, count).await? {
            return Err(failed_to_connect(url, backend.tls, op(), e));
        }
        Ok(backend)
    }

    /// The clock waits are measured on.
    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The error of request `op` that etcd failed.
    pub(crate) fn fail(&self, op: String, e: Status) -> Error {
        fail(&self.url, self.tls, op, e)
    }

    /// The etcd key that backend key `key` is stored under.
    pub fn etcd_key(&self, key: &str) -> String {
        format!("{}{key}", self.root)
    }

    /// The etcd client, for tools that need raw access to the same cluster.
    pub fn client(&self) -> &Etcd {
        &self.client
    }

    /// Runs one etcd request under the request timeout, keeping etcd's error.
    /// `attempt` makes the request; it is made again (within the same timeout)
    /// after errors that `resend` allows, and once after a new authentication
    /// when etcd says our token expired (it refused the request unapplied).
    pub(crate) async fn timed<T, F: Future<Output = std::result::Result<T, Status>>>(
        &self,
        op: &(dyn Fn() -> String + Sync),
        resend: Resend,
        mut attempt: impl FnMut() -> F,
    ) -> Result<std::result::Result<T, Status>> {
        let run = async {
            let (mut resent, mut reauthenticated) = (0, false);
            loop {
                match attempt().await {
                    Err(e) if !reauthenticated && self.client.token_expired(&e) => {
                        reauthenticated = true;
                        tracing::debug!(store = %self.url, op = %op(), "our etcd token expired; authenticating again");
                        self.client.authenticate().await?;
                    }
                    Err(e) if resent < MAX_RESENDS && resend.allows(&e) => {
                        resent += 1;
                        tracing::debug!(store = %self.url, op = %op(), error = %e, "resending an etcd request");
                        tokio::time::sleep(Duration::from_millis(10 << resent)).await;
                    }
                    out => return out,
                }
            }
        };
        tokio::time::timeout(self.timeout, run).await.map_err(|_| {
            Error::store(
                &self.url,
                op(),
                format!("no answer from etcd at {} within {}", self.endpoints, human(self.timeout)),
            )
        })
    }

    /// One linearizable `Range`, resent on any "unavailable" error (reads are
    /// idempotent).
    pub(crate) async fn range(&self, op: &(dyn Fn() -> String + Sync), req: RangeRequest) -> Result<RangeResponse> {
        self.try_range(op, req).await?.map_err(|e| fail(&self.url, self.tls, op(), e))
    }

    /// [`range`](Self::range), keeping etcd's error.
    pub(crate) async fn try_range(
        &self,
        op: &(dyn Fn() -> String + Sync),
        req: RangeRequest,
    ) -> Result<std::result::Result<RangeResponse, Status>> {
        let attempt = || {
            let (mut kv, req) = (self.client.kv(), req.clone());
            async move { kv.range(req).await.map(tonic::Response::into_inner) }
        };
        self.timed(op, Resend::Read, attempt).await
    }

    fn version(&self, key: &str, rev: i64) -> Result<Version> {
        match u64::try_from(rev) {
            Ok(r) if r > 0 => Ok(Version::seq(r)),
            _ => Err(Error::corrupt(&self.url, key, format!("etcd reported revision {rev}"))),
        }
    }

    fn revision_of(&self, key: &str, v: &Version) -> Result<i64> {
        v.tag.parse::<i64>().ok().filter(|r| *r > 0).ok_or_else(|| {
            Error::unsupported(
                &self.url,
                format!(
                    "version {:?} of key {key:?} is not an etcd mod_revision: it was not read from this store",
                    v.tag
                ),
            )
        })
    }

    fn header_revision(&self, key: &str, header: Option<&ResponseHeader>) -> Result<Version> {
        let rev = header.map_or(0, |h| h.revision);
        self.version(key, rev)
    }

    /// One `Range` of `k`: the revision up to which it is still at `seen` (its
    /// mod_revision, `None` for absent), or `None` if it has moved on.
    pub(crate) async fn unchanged_until(&self, k: &str, seen: Option<i64>) -> Result<Option<i64>> {
        let req = RangeRequest { keys_only: true, ..rpc::range(k) };
        let resp = self.range(&|| format!("reading key {k:?}"), req).await?;
        let now = resp.kvs.first().map(|kv| kv.mod_revision);
        let at = self.header_revision(k, resp.header.as_ref())?.seq.unwrap_or(0);
        Ok((now == seen).then_some(i64::try_from(at).unwrap_or(i64::MAX)))
    }

    /// An etcd lease for a write of `k` with expiry hint `d` (see [`crate::leases`]).
    pub(crate) async fn lease_for(&self, k: &str, d: Duration) -> Result<i64> {
        self.leases.lease_for(self, d).await.map_err(|e| match e {
            Error::Store { store, op, source } => {
                Error::Store { store, op: format!("writing key {k:?}: {op}"), source }
            }
            other => other,
        })
    }

    /// The transaction of one conditional write, and the etcd lease it attaches.
    async fn txn(&self, k: &str, value: &Bytes, opts: &PutOptions) -> Result<(TxnRequest, Option<i64>)> {
        let mut compare = vec![match &opts.mode {
            PutMode::Create => rpc::create_revision_is(k, 0),
            PutMode::Update(v) => rpc::mod_revision_is(k, self.revision_of(k, v)?),
        }];
        let Some(d) = opts.expires_after else {
            // No expiry: the record is detached from any etcd lease and stays.
            let success = vec![rpc::put_op(k, value.to_vec(), 0)];
            return Ok((TxnRequest { compare, success, failure: Vec::new() }, None));
        };
        let shadow = format!("{k}{SHADOW_SUFFIX}");
        if opts.mode == PutMode::Create
            && let Some(token) = new_token(value)
        {
            // The token rule, checked by etcd in the granting transaction: every
            // earlier write under this name happened at a revision below the new
            // token (see the crate docs, "Fencing tokens").
            let token = i64::try_from(token).unwrap_or(i64::MAX);
            compare.push(rpc::mod_revision_below(&shadow, token));
        }
        let lease = self.lease_for(k, d).await?;
        let mut success = vec![rpc::put_op(k, value.to_vec(), lease)];
        if opts.mode == PutMode::Create {
            // Only a create writes the shadow: a grant after a read that saw the
            // record absent must create it first, which moves the shadow above
            // that read's revision (see the crate docs, "Fencing tokens").
            // Updates and renewals write one key, not two.
            success.push(rpc::put_op(&shadow, value.to_vec(), 0));
        }
        Ok((TxnRequest { compare, success, failure: Vec::new() }, Some(lease)))
    }
}

/// The token a lease record grants, if `value` is one (see the crate docs).
fn new_token(value: &[u8]) -> Option<u64> {
    tenure_core::record::LeaseRecord::parse(value).ok().map(|r| r.last_token)
}

/// Whether etcd refused a put because its lease does not exist (any more).
fn lease_not_found(s: &Status) -> bool {
    s.message().contains("lease not found")
}

/// How many times one request is sent again after an error that allows it.
const MAX_RESENDS: u32 = 5;
/// gRPC status code "unavailable".
const UNAVAILABLE: i32 = 14;

/// Which errors a request may be sent again after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resend {
    /// Only when it certainly was not applied: the connection to the chosen
    /// endpoint could not be made, or the member refused it for want of a
    /// leader. (The client balances over the endpoints and reports a dead
    /// member's refused connection as the request's error; a write whose
    /// connection broke mid-flight may have been applied, and is not resent.)
    Unsent,
    /// On any "unavailable" error: reads are idempotent.
    Read,
}

impl Resend {
    fn allows(self, s: &Status) -> bool {
        if s.code() as i32 != UNAVAILABLE {
            return false;
        }
        // "no leader" is etcd's answer, before proposing anything, to a request
        // that requires a leader on a member that has none (during an election).
        self == Resend::Read || s.message().contains("no leader") || never_connected(s.message(), s)
    }
}

/// Whether a status reports a failed connection attempt (refused, unreachable,
/// timed out while connecting), as opposed to a connection that broke.
fn never_connected(message: &str, status: &(dyn std::error::Error + 'static)) -> bool {
    if message.contains("connect error") {
        return true;
    }
    let mut cause = status.source();
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::HostUnreachable
                    | std::io::ErrorKind::NetworkUnreachable
                    | std::io::ErrorKind::AddrNotAvailable
            )
        {
            return true;
        }
        cause = c.source();
    }
    false
}

fn fail(url: &str, tls: bool, op: String, e: Status) -> Error {
    failure(url, op, &e, hint(tls, &e, false))
}

/// [`fail`] for the first request to the cluster, where a closed connection
/// most likely means a TLS setting that does not match the server's.
fn failed_to_connect(url: &str, tls: bool, op: String, e: Status) -> Error {
    failure(url, op, &e, hint(tls, &e, true))
}

/// The error for `e`: a configuration error ([`Error::InvalidStore`], exit 64,
/// not retried) when etcd refused our credentials, when our own TLS or
/// endpoint settings are unusable, or when a certificate check failed; a
/// store error (an outage, retried) otherwise.
fn failure(url: &str, op: String, e: &Status, hint: Option<Hint>) -> Error {
    let text = match hint {
        Some(hint) => format!("{}; {}", describe(e), hint.text),
        None => describe(e),
    };
    // tonic checks endpoints and TLS files before sending anything; etcd's own
    // invalid-argument answers start with "etcdserver:".
    let ours = e.code() == tonic::Code::InvalidArgument && !e.message().starts_with("etcdserver:");
    if refused(e) {
        Error::InvalidStore { url: url.to_string(), reason: format!("{op}: etcd refused: {text}") }
    } else if ours || hint.is_some_and(|h| h.certain) {
        Error::InvalidStore { url: url.to_string(), reason: format!("{op}: {text}") }
    } else {
        Error::store(url, op, text)
    }
}

/// What to do about a failure, and whether it certainly is a setting (a
/// certificate check, a TLS alert) rather than a guess from a closed connection.
#[derive(Clone, Copy, Debug)]
struct Hint {
    text: &'static str,
    certain: bool,
}

/// A gRPC status as one sentence: etcd's message, then each underlying cause
/// that adds something (tonic repeats its own "transport error").
fn describe(s: &Status) -> String {
    let mut text = s.message().to_string();
    let mut cause = std::error::Error::source(s);
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) && more != "transport error" {
            text = if text.is_empty() || more.contains(&text) { more } else { format!("{text}: {more}") };
        }
        cause = c.source();
    }
    if text.is_empty() { s.code().description().to_string() } else { text }
}

/// What to do about a connection that failed the way a TLS mistake does; a
/// closed connection counts only when `connecting` (later, a member that
/// stopped closes connections too).
fn hint(tls: bool, s: &Status, connecting: bool) -> Option<Hint> {
    let text = describe(s).to_lowercase();
    let certain = |text| Some(Hint { text, certain: true });
    let guess = |text| Some(Hint { text, certain: false });
    if text.contains("received fatal alert") {
        // etcd refused *us*: no client certificate, or one it does not trust.
        certain(
            "etcd refused the TLS connection: if it asks for client certificates (--client-cert-auth), \
             give cert_file= and key_file= signed by a CA it trusts",
        )
    } else if text.contains("certificate") || text.contains("unknownissuer") || text.contains("badsignature") {
        certain(
            "the server's certificate is not trusted under this name: give the CA that signed it in ca_file= \
             (and server_name= if the certificate names another host)",
        )
    } else if tls && (text.contains("handshake") || text.contains("corrupt message")) {
        guess("etcd did not answer the TLS handshake: if it speaks plain HTTP on this port, drop tls=true")
    } else if !connecting
        || !matches!(s.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled)
        || ["refused", "timed out", "deadline", "dns error", "unreachable", "no route"].iter().any(|w| text.contains(w))
    {
        // Not a TLS mismatch: nothing listens, or nothing answers, or no such host.
        None
    } else if tls {
        // A plain-HTTP member may reset the connection instead of answering, as
        // may one that wants a client certificate: name both.
        guess(
            "etcd closed the connection during TLS: if it speaks plain HTTP on this port, drop tls=true; \
             if it asks for client certificates (--client-cert-auth), give cert_file= and key_file=",
        )
    } else {
        guess("if etcd speaks TLS on this port, add tls=true (and ca_file= for a private CA)")
    }
}

fn human(d: Duration) -> String {
    tenure_core::human_duration(d)
}

#[async_trait]
impl LeaseRpc for EtcdBackend {
    async fn keep_alive(&self, id: i64) -> Result<bool> {
        let op = || format!("refreshing our etcd lease {id:x} (LeaseKeepAlive)");
        let attempt = || self.client.keep_alive_once(id);
        // TTL 0 (or less) is etcd's way of saying there is no such lease.
        let ttl = self.timed(&op, Resend::Read, attempt).await?.map_err(|e| fail(&self.url, self.tls, op(), e))?;
        Ok(ttl > 0)
    }

    async fn grant(&self, ttl_secs: u64) -> Result<(i64, Duration)> {
        let op = || format!("granting an etcd lease of {ttl_secs}s (LeaseGrant)");
        // A grant whose answer was lost leaves an unused lease that expires by
        // itself, so it is safe to send again.
        let ttl = i64::try_from(ttl_secs).unwrap_or(i64::MAX);
        let attempt = || {
            let mut leases = self.client.lease();
            async move { leases.lease_grant(LeaseGrantRequest { ttl, id: 0 }).await.map(tonic::Response::into_inner) }
        };
        let granted = self.timed(&op, Resend::Read, attempt).await?.map_err(|e| fail(&self.url, self.tls, op(), e))?;
        if !granted.error.is_empty() || granted.id == 0 {
            let why = format!("etcd granted no lease: {:?}", granted.error);
            return Err(Error::store(&self.url, op(), why));
        }
        Ok((granted.id, Duration::from_secs(u64::try_from(granted.ttl).unwrap_or(0))))
    }

    fn too_slow(&self, op: &str, left: Duration, needed: Duration) -> Error {
        Error::store(
            &self.url,
            op,
            format!(
                "etcd answered so late that the lease has only {} left, less than the {} a write needs",
                human(left),
                human(needed)
            ),
        )
    }
}

#[async_trait]
impl Backend for EtcdBackend {
    fn url(&self) -> &str {
        &self.url
    }

    /// One linearizable `Range` of the key.
    async fn get(&self, key: &Key) -> Result<Option<Stored>> {
        let key = key.as_str();
        let k = self.etcd_key(key);
        let resp = self.range(&|| format!("reading key {k:?}"), rpc::range(&k)).await?;
        let Some(found) = resp.kvs.into_iter().next() else { return Ok(None) };
        // etcd keeps no modification time; unreadable records are judged by how
        // long a contender has watched them instead.
        Ok(Some(Stored::new(Bytes::from(found.value), self.version(&k, found.mod_revision)?, None)))
    }

    /// One `Txn`: compare, then put (with the shadow, when it creates a record
    /// that expires); plus, now and then, one `LeaseKeepAlive` or `LeaseGrant`
    /// first.
    async fn put(&self, key: &Key, value: Bytes, opts: PutOptions) -> Result<Put> {
        let key = key.as_str();
        let k = self.etcd_key(key);
        let op = || format!("writing key {k:?}");
        let mut retried = false;
        loop {
            let (txn, lease) = self.txn(&k, &value, &opts).await?;
            let attempt = || {
                let (mut kv, txn) = (self.client.kv(), txn.clone());
                async move { kv.txn(txn).await.map(tonic::Response::into_inner) }
            };
            match self.timed(&op, Resend::Unsent, attempt).await? {
                Ok(resp) if resp.succeeded => return Ok(Put::Done(self.header_revision(&k, resp.header.as_ref())?)),
                Ok(_) => return Ok(Put::Conflict),
                // Our etcd lease expired under us (we were cut off for longer than
                // its TTL): get a new one and write once more.
                Err(e) if lease_not_found(&e) && !retried => {
                    if let (Some(id), Some(d)) = (lease, opts.expires_after) {
                        self.leases.forget(d, id).await;
                    }
                    retried = true;
                }
                Err(e) => return Err(fail(&self.url, self.tls, op(), e)),
            }
        }
    }

    /// One keys-only `Range` over the prefix. Keys that are not valid tenure keys
    /// (written by someone else, or not UTF-8) and shadows are left out.
    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let start = format!("{}{prefix}", self.root);
        let req = RangeRequest { keys_only: true, ..rpc::range_prefix(&start) };
        let resp = self.range(&|| format!("listing keys under {start:?}"), req).await?;
        let under =
            |k: &str| prefix.is_empty() || k == prefix || k.strip_prefix(prefix).is_some_and(|r| r.starts_with('/'));
        let mut keys = Vec::with_capacity(resp.kvs.len());
        for found in &resp.kvs {
            let Some(key) = std::str::from_utf8(&found.key).ok().and_then(|k| k.strip_prefix(self.root.as_str()))
            else {
                continue;
            };
            if !key.contains(SHADOW_SUFFIX) && under(key) && check_key(key).is_ok() {
                keys.push(key.to_string());
            }
        }
        Ok(keys)
    }

    /// One count-only `Range`: the store's current revision, which is above every
    /// revision, and so every token, the vanished record ever had.
    async fn absent_floor(&self, key: &Key) -> Result<u64> {
        let key = key.as_str();
        let k = self.etcd_key(key);
        let count = RangeRequest { count_only: true, ..rpc::range(&k) };
        let resp = self.range(&|| format!("reading the revision for key {k:?}"), count).await?;
        Ok(self.header_revision(&k, resp.header.as_ref())?.seq.unwrap_or(0))
    }

    /// One `Watch` of the key from the revision after `seen` (after a count-only
    /// `Range` when `seen` is `None`): etcd replays any change since, so none is
    /// missed between the caller's read and the watch. If etcd has compacted
    /// that history away, one `Range` tells whether the key changed, and the
    /// watch starts again from there.
    async fn watch(&self, key: &Key, seen: Option<&Version>, timeout: Duration) -> Result<bool> {
        let key = key.as_str();
        let k = self.etcd_key(key);
        let seen = seen.map(|v| self.revision_of(&k, v)).transpose()?;
        self.watch_etcd_key(&k, seen, timeout).await
    }

    /// etcd's own wait line: a key per waiter (see [`crate::line`]).
    fn line(self: Arc<Self>, _: &Arc<dyn tenure_core::Clock>, _: Duration) -> Option<Arc<dyn Line>> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hint_for(tls: bool, s: Status) -> &'static str {
        hint(tls, &s, true).map_or("none", |h| h.text)
    }

    #[test]
    fn tls_mistakes_get_the_setting_that_fixes_them() {
        // etcd refusing us (no client certificate) may arrive as an alert or a closed connection.
        let alert = Status::unavailable("transport error: received fatal alert: BadCertificate");
        assert!(hint_for(true, alert).contains("cert_file="));
        let closed = hint_for(true, Status::unavailable("connection error: broken pipe"));
        assert!(closed.contains("cert_file=") && closed.contains("drop tls=true"), "{closed}");
        let reset = hint_for(true, Status::unavailable("Connection reset by peer (os error 104)"));
        assert!(reset.contains("drop tls=true"), "{reset}");
        // Its certificate not trusted by us.
        let untrusted = Status::unavailable("invalid peer certificate: UnknownIssuer");
        assert!(hint_for(true, untrusted).contains("ca_file="));
        // TLS against plain HTTP, and plain HTTP against TLS.
        assert!(hint_for(true, Status::unavailable("tls handshake eof")).contains("drop tls=true"));
        let corrupt = Status::unavailable("received corrupt message of type InvalidContentType");
        assert!(hint_for(true, corrupt).contains("drop tls=true"));
        let h2 = Status::unknown("h2 protocol error: frame with invalid size");
        assert!(hint_for(false, h2).contains("add tls=true"));
        assert!(hint_for(false, Status::unavailable("connection reset")).contains("add tls=true"));
        // A certificate check or an alert is certain: a configuration error, not an outage.
        let certain = |m: &str| hint(true, &Status::unavailable(m), true).is_some_and(|h| h.certain);
        assert!(certain("received fatal alert: BadCertificate") && certain("invalid peer certificate: UnknownIssuer"));
        assert!(!certain("connection error: broken pipe"));
        // Not a TLS matter, or not while connecting: no hint.
        assert_eq!(hint_for(false, Status::unavailable("connection refused")), "none");
        assert!(hint(false, &Status::unavailable("connection reset"), false).is_none());
        assert_eq!(hint_for(false, Status::failed_precondition("etcdserver: no leader")), "none");
    }
}
