//! The `tenure://` store: [`TenureStore`], a client of one or more lease servers.
//!
//! With several servers (`tenure://h1:p1,h2:p2,h3:p3`), each lease name lives on
//! one of them, chosen by rendezvous hashing over the servers' *identities*
//! ([`place`]): the server with the highest
//! `splitmix64(fnv1a64(identity || 0xff || name))` wins. An identity is what the
//! server says it is ([`wire::Request::Identify`], protocol 5), kept across its
//! restarts, never the address as written: `localhost:7777` and
//! `127.0.0.1:7777` are one server, and every client listing the same servers,
//! in any spelling and any order, picks the same one. A list that names one
//! server twice is refused, naming both addresses. Adding or removing a server
//! moves only the names that hash to it (seed 000: change the sharding by
//! letting leases expire, no state to migrate; see the README on changing the
//! list).
//!
//! The identities are learned from every server of the list before the first
//! name is placed, and checked again on every new connection: while one server
//! has never answered, no name is placed (a name cannot be placed on a guess:
//! the silent server may be the one that owns it), and a server whose identity
//! changed (restarted without its state, say) gets no request. Each connection
//! that acquires tells its server the list ([`wire::Request::Servers`]), and the
//! server refuses a name the list places elsewhere. A store of one server needs
//! no identity and sends none of this. Batches are split per server and sent at
//! once; an all-or-nothing acquisition that spans servers releases what it got
//! from the others when one server says busy.
//!
//! Each grant's `local_deadline` is measured on the store's clock from the moment
//! the request was *sent*, and its `witness` is the server's signed witness.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::join_all;
use tenure_core::{
    AcquireRequest, AllAttempt, Attempt, BreakNote, Busy, Clock, Error, Grant, Holder, HolderView, LeaseName,
    LeaseState, LeaseStore, LossReason, Mode, Mono, OpenOptions, Predecessor, ReleaseRequest, Released, Result,
    StoreUrl, Version,
};

use crate::conn::{Conn, Socket};
use crate::tls::{ClientTls, HandshakeError};
use crate::wire::inbound::{AcquireReplyIn, GrantIn, OutcomeIn, PredIn, ResponseIn};

mod rendezvous;
mod two_phase;

use crate::wire::{
    self, AskWire, BreakNoteWire, ErrorCode, MAGIC, MAX_LIST_PAGE, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, RefWire,
    ReleaseWire, RenewWire, Request, Response,
};
pub use rendezvous::{place, rendezvous_score};
use tenure_core::limits::{MAX_DURATION, millis};
use two_phase::reservation_id;
pub use two_phase::{Upgrade, is_reservation};

/// Most names a listing takes from one server: far more than a server holds
/// (`--max-leases` plus `--retain`), and a bound on what a hostile one can make
/// a client keep.
const MAX_LISTED: usize = 1 << 24;

/// Connections tried for one hello when the server closes them before it answers.
const HELLO_ATTEMPTS: usize = 3;

/// Longest wait for the answer to a hello (or the store's `timeout`, if
/// shorter). A lease server answers it at once, without looking at its table;
/// a peer still silent by then is a server of another kind (waiting for its
/// own protocol's first words), or none at all, and the user should hear so
/// now, not after the whole timeout.
const HELLO_WAIT: Duration = Duration::from_secs(1);

/// The largest `auth_token_file` read (a token is far smaller).
const MAX_TOKEN_FILE: u64 = 64 * 1024;

/// The settings a `tenure://` URL takes, for the message that refuses others.
const KNOWN_PARAMS: &str = "tls, ca_file, server_name, allow_plaintext_auth, auth_token, auth_token_file, \
                            timeout_ms, spin_us, connections";

/// How a [`TenureStore`] talks to its servers.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Shared secret presented in the hello (param `auth_token`, or the contents
    /// of the file named by `auth_token_file`, or `TENURE_AUTH_TOKEN`).
    pub auth_token: Option<Vec<u8>>,
    /// Longest wait for an answer (param `timeout_ms`; default 10 s); the
    /// answer to a new connection's hello is waited for at most 1 s of it (a
    /// peer silent that long is named as no lease server).
    pub timeout: Duration,
    /// Connections per server, used in turn (param `connections`; default 1).
    pub connections: usize,
    /// How long a connection polls for answers before it sleeps, while answers
    /// tend to come that soon: a server on the same host or a close one (param
    /// `spin_us`; default 40; 0: never). It yields to other tasks while it polls,
    /// and polls only while at most 32 requests are on their way on the connection.
    pub spin: Duration,
    /// TLS (param `tls=true`, with `ca_file` and `server_name`); `None`: plaintext.
    pub tls: Option<ClientTls>,
    /// Send the auth token without TLS to a server that is not on this machine
    /// (param `allow_plaintext_auth=true`); without it, that is refused before
    /// anything is sent. To a loopback address the token does not leave the machine.
    pub allow_plaintext_auth: bool,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            auth_token: None,
            timeout: Duration::from_secs(10),
            connections: 1,
            spin: Duration::from_micros(40),
            tls: None,
            allow_plaintext_auth: false,
        }
    }
}

/// A `true`/`false` URL parameter.
fn flag(key: &str, value: &str) -> std::result::Result<bool, String> {
    match value {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(format!("{key}={value} (true or false)")),
    }
}

/// What a server said in its hello.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    /// Its ed25519 public key: witnesses verify with it.
    pub public_key: [u8; 32],
    /// Longest lease it grants.
    pub max_lease: Duration,
    /// When its current incarnation started (µs since the unix epoch).
    pub started_us: u64,
    /// The protocol version it speaks with this client: from 3 on, it keeps
    /// waiters in a queue ([`wire::Request::Wait`]).
    pub protocol: u16,
}

struct Endpoint {
    addr: String,
    /// The identity the server said (a store of several servers asks).
    id: parking_lot::Mutex<Option<Arc<str>>>,
    slots: Vec<parking_lot::Mutex<Option<Arc<Conn>>>>,
    connecting: Vec<tokio::sync::Mutex<()>>,
    next: AtomicUsize,
    info: parking_lot::Mutex<Option<ServerInfo>>,
}

/// The lease store of one or more `tenure serve` servers.
pub struct TenureStore {
    url: String,
    clock: Arc<dyn Clock>,
    endpoints: Vec<Endpoint>,
    opts: ClientOptions,
    /// The servers' identities, in list order, once every one has said it (a
    /// store of several servers).
    placement: std::sync::OnceLock<Box<[Arc<str>]>>,
    /// Held while the identities are learned, so that it happens once.
    learning: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for TenureStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let addrs: Vec<&str> = self.endpoints.iter().map(|e| e.addr.as_str()).collect();
        f.debug_struct("TenureStore").field("servers", &addrs).finish()
    }
}

impl TenureStore {
    /// A store for `url` (`tenure://host:port[,host:port…][?key=value&…]`); no
    /// connection is made until the first request.
    ///
    /// Parameters: `auth_token`, `auth_token_file`, `timeout_ms`, `spin_us`,
    /// `connections` (see [`ClientOptions`]); `tls=true` to speak TLS, trusting
    /// the platform's roots or only the CAs in `ca_file=PATH` (PEM), checking
    /// the URL's host or `server_name=NAME` against the certificate; and
    /// `allow_plaintext_auth=true`. Unknown keys are refused.
    pub fn new(url: &str, opts: &OpenOptions) -> Result<Self> {
        Self::from_url(&StoreUrl::parse(url, &opts.params)?, opts)
    }

    /// [`TenureStore::new`] for a parsed URL; `opts.params` go over its
    /// settings.
    ///
    /// # Errors
    /// [`Error::InvalidStore`] saying what is wrong with the URL or a setting.
    pub fn from_url(url: &StoreUrl, opts: &OpenOptions) -> Result<Self> {
        let url = &url.with_params(&opts.params);
        let invalid = |reason: String| url.invalid(reason);
        if url.scheme() != "tenure" {
            return Err(invalid("not a tenure:// URL".into()));
        }
        if url.user().is_some() {
            return Err(invalid(
                "credentials in the URL are not supported (they would show in logs): use auth_token_file= \
                 or the TENURE_AUTH_TOKEN environment variable"
                    .into(),
            ));
        }
        if !url.path_str("path")?.chars().all(|c| c == '/') {
            return Err(invalid("a tenure:// URL has no path: tenure://host:port[,host:port…]".into()));
        }
        let mut copts = ClientOptions::default();
        let (mut tls, mut ca_file, mut server_name) = (false, None, None);
        for (k, v) in url.options() {
            match k.as_str() {
                "tls" => tls = flag(k, v).map_err(invalid)?,
                "ca_file" => ca_file = Some(std::path::PathBuf::from(v)),
                "server_name" => server_name = Some(v.as_str()),
                "allow_plaintext_auth" => copts.allow_plaintext_auth = flag(k, v).map_err(invalid)?,
                "auth_token" => copts.auth_token = Some(v.as_bytes().to_vec()),
                "auth_token_file" => {
                    let bytes = tenure_core::limits::read_small_file(std::path::Path::new(v), MAX_TOKEN_FILE)
                        .map_err(|e| invalid(format!("auth_token_file={v}: {e}")))?;
                    copts.auth_token = Some(bytes.trim_ascii().to_vec());
                }
                "timeout_ms" => {
                    copts.timeout = Duration::from_millis(
                        v.parse()
                            .ok()
                            .filter(|n| (1..=millis(MAX_DURATION)).contains(n))
                            .ok_or_else(|| invalid(format!("timeout_ms={v} (1..={})", millis(MAX_DURATION))))?,
                    )
                }
                "spin_us" => {
                    copts.spin = Duration::from_micros(
                        v.parse()
                            .ok()
                            .filter(|n| *n <= 10_000)
                            .ok_or_else(|| invalid(format!("spin_us={v} is not a whole number from 0 to 10000")))?,
                    )
                }
                "connections" => {
                    copts.connections = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=64).contains(n))
                        .ok_or_else(|| invalid(format!("connections={v} is not a whole number from 1 to 64")))?
                }
                other => return Err(url.unknown(other, KNOWN_PARAMS)),
            }
        }
        if tls {
            let tls = ClientTls::new(ca_file.as_deref(), server_name).map_err(|e| invalid(e.to_string()))?;
            copts.tls = Some(tls);
        } else if ca_file.is_some() || server_name.is_some() {
            return Err(invalid("ca_file and server_name are TLS settings: add tls=true".into()));
        }
        if copts.auth_token.is_none()
            && let Ok(t) = std::env::var("TENURE_AUTH_TOKEN")
            && !t.is_empty()
        {
            copts.auth_token = Some(t.into_bytes());
        }
        if url.hosts().is_empty() {
            return Err(invalid("no server: expected tenure://host:port[,host:port…]".into()));
        }
        let mut endpoints = Vec::new();
        for host in url.hosts() {
            if host.port.is_none() {
                return Err(invalid(format!("{:?} is not host:port", host.host)));
            }
            let addr = host.to_string();
            if endpoints.iter().any(|e: &Endpoint| e.addr == addr) {
                return Err(invalid(format!("{addr} is listed twice")));
            }
            endpoints.push(Endpoint {
                addr,
                id: parking_lot::Mutex::new(None),
                slots: (0..copts.connections).map(|_| parking_lot::Mutex::new(None)).collect(),
                connecting: (0..copts.connections).map(|_| tokio::sync::Mutex::new(())).collect(),
                next: AtomicUsize::new(0),
                info: parking_lot::Mutex::new(None),
            });
        }
        let hosts = url.hosts().iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
        Ok(Self {
            url: format!("tenure://{hosts}"),
            clock: opts.clock.clone(),
            endpoints,
            opts: copts,
            placement: std::sync::OnceLock::new(),
            learning: tokio::sync::Mutex::new(()),
        })
    }

    /// The servers, as written in the URL.
    pub fn servers(&self) -> Vec<&str> {
        self.endpoints.iter().map(|e| e.addr.as_str()).collect()
    }

    /// Index (in [`TenureStore::servers`]) of the server that owns `name`, by
    /// the servers' identities: `None` while a store of several servers has not
    /// learned them (its first request does, or [`TenureStore::locate`]).
    pub fn server_for(&self, name: &str) -> Option<usize> {
        if self.endpoints.len() == 1 {
            return Some(0);
        }
        self.placement.get().map(|ids| place(ids, name))
    }

    /// [`TenureStore::server_for`], learning the servers' identities first if
    /// need be (connecting to every server of the list).
    pub async fn locate(&self, name: &str) -> Result<usize> {
        Ok(self.placement().await?.map_or(0, |ids| place(ids, name)))
    }

    /// The identity server `index` said, if it was asked (a store of several
    /// servers asks each one when it connects).
    pub fn server_id(&self, index: usize) -> Option<String> {
        self.endpoints.get(index)?.id.lock().as_deref().map(str::to_string)
    }

    /// The servers' identities in list order (`None` for a store of one
    /// server, which places nothing), learned from every server of the list
    /// before the first name is placed. A server that cannot be reached then
    /// makes this an error: the name could be its, and is not placed on a
    /// guess. Two addresses of one server are refused, naming both.
    async fn placement(&self) -> Result<Option<&[Arc<str>]>> {
        if self.endpoints.len() == 1 {
            return Ok(None);
        }
        if let Some(ids) = self.placement.get() {
            return Ok(Some(ids));
        }
        let _learning = self.learning.lock().await;
        if let Some(ids) = self.placement.get() {
            return Ok(Some(ids));
        }
        let connected = join_all(self.endpoints.iter().map(|e| self.conn(e))).await;
        let op = "placing names (every server of the list must say its identity first; none is placed on a guess)";
        let mut ids: Vec<Arc<str>> = Vec::with_capacity(self.endpoints.len());
        for (i, (e, c)) in self.endpoints.iter().zip(connected).enumerate() {
            if let Err(err) = c {
                return Err(match err {
                    // Its operation ("connecting to ADDR") and cause, under this one.
                    Error::Store { op: inner, source, .. } => Error::store(&self.url, op, format!("{inner}: {source}")),
                    other => other,
                });
            }
            let id =
                e.id.lock().clone().ok_or_else(|| Error::store(&self.url, op, format!("{}: no identity", e.addr)))?;
            if let Some(j) = ids.iter().position(|other| *other == id) {
                return Err(Error::InvalidStore {
                    url: self.url.clone(),
                    reason: format!(
                        "{} and {} are one server (identity {id}): list each server once",
                        self.endpoints[j].addr, self.endpoints[i].addr
                    ),
                });
            }
            ids.push(id);
        }
        Ok(Some(self.placement.get_or_init(|| ids.into())))
    }

    /// A connection to `server` for acquisitions: in a store of several
    /// servers, one that has told its server the list's identities, so that
    /// the server checks each name asked for is placed on it.
    async fn placed_conn(&self, server: usize) -> Result<Arc<Conn>> {
        let e = &self.endpoints[server];
        let conn = self.conn(e).await?;
        if let Some(ids) = self.placement.get()
            && !conn.placed.load(Ordering::Acquire)
        {
            let op = "telling the server the server list";
            let list = Request::Servers(ids.iter().map(|id| &**id).collect());
            let (_, body) = conn.call_raw(&list).await.map_err(|m| Error::store(&self.url, op, m))?;
            match self.decode_in(op, &body)? {
                ResponseIn::Done => conn.placed.store(true, Ordering::Release),
                other => return Err(self.unexpected(op, &other)),
            }
        }
        Ok(conn)
    }

    /// Asks the server on a new connection `conn` (which said hello with
    /// `version`) for its identity, and checks it is the one it said before: a
    /// server whose identity changed may own other names now.
    async fn identify(&self, e: &Endpoint, conn: &Conn, version: u16, op: &str) -> Result<()> {
        if version < wire::IDENTITY_VERSION {
            return Err(Error::unsupported(
                &self.url,
                format!(
                    "{op}: the server speaks protocol {version}, which does not say the server's identity, and a \
                     list of several servers places names by identity (protocol {}): upgrade the servers first",
                    wire::IDENTITY_VERSION
                ),
            ));
        }
        let (_, body) = conn.call_raw(&Request::Identify).await.map_err(|m| Error::store(&self.url, op, m))?;
        let id = match self.decode_in(op, &body)? {
            ResponseIn::Identity(id) => id,
            other => return Err(self.unexpected(op, &other)),
        };
        wire::check_server_id(&id).map_err(|m| self.hostile(op, m))?;
        let mut known = e.id.lock();
        match known.as_deref() {
            Some(before) if *before != *id => Err(Error::unsupported(
                &self.url,
                format!(
                    "{op}: the server there is now {id}, and was {before}: names may have moved between servers, \
                     so this store places none on it; open the store anew once every lease of the old list has \
                     expired (see the README on changing the server list)"
                ),
            )),
            Some(_) => Ok(()),
            None => {
                *known = Some(id.into());
                Ok(())
            }
        }
    }

    /// What server `index` said in its hello (connecting if needed).
    pub async fn server_info(&self, index: usize) -> Result<ServerInfo> {
        let e = self.endpoints.get(index).ok_or_else(|| Error::unsupported(&self.url, "no such server"))?;
        self.conn(e).await?;
        e.info.lock().ok_or_else(|| Error::store(&self.url, "hello", "no hello answer"))
    }

    /// Server time minus this store's wall clock at the last answer of server
    /// `index`, in µs (every answer carries the server's time; the network delay
    /// of the answer is included).
    pub fn skew_us(&self, index: usize) -> Option<i64> {
        let e = self.endpoints.get(index)?;
        e.slots.iter().find_map(|s| s.lock().as_ref().map(|c| c.skew_us()))
    }

    async fn conn(&self, e: &Endpoint) -> Result<Arc<Conn>> {
        // One connection (the default): no shared counter to bump on every call.
        let i = match e.slots.len() {
            1 => 0,
            n => e.next.fetch_add(1, Ordering::Relaxed) % n,
        };
        if let Some(c) = e.slots[i].lock().as_ref().filter(|c| !c.is_dead()) {
            return Ok(c.clone());
        }
        // Connecting is rare, and its future large (resolving, connecting, the
        // TLS handshake, the hello): boxed, it does not make the future of
        // every call that might connect that large too (which would allocate
        // and copy it on each call).
        Box::pin(self.reconnect(e, i)).await
    }

    /// Connects slot `i` of `e` (unless another caller just did).
    async fn reconnect(&self, e: &Endpoint, i: usize) -> Result<Arc<Conn>> {
        let _connecting = e.connecting[i].lock().await;
        if let Some(c) = e.slots[i].lock().as_ref().filter(|c| !c.is_dead()) {
            return Ok(c.clone());
        }
        let op = format!("connecting to {}", e.addr);
        let hello = Request::Hello { magic: MAGIC, version: PROTOCOL_VERSION, auth: self.opts.auth_token.as_deref() };
        let started = tokio::time::Instant::now();
        let mut attempt = 0;
        let (conn, answer) = loop {
            // Connecting and the TLS handshake: one deadline for both.
            let socket = match tokio::time::timeout(self.opts.timeout, self.connect(e, &op)).await {
                Ok(socket) => socket?,
                Err(_) if self.opts.tls.is_some() => {
                    let why = format!(
                        "no TLS connection within {} (is the server up, and serving TLS on this port?)",
                        tenure_core::human_duration(self.opts.timeout)
                    );
                    return Err(Error::store(&self.url, op, why));
                }
                Err(_) => return Err(Error::store(&self.url, op, "timed out")),
            };
            let conn = Arc::new(Conn::start(socket, self.opts.timeout, self.opts.spin, self.clock.clone()));
            let hello_wait = HELLO_WAIT.min(self.opts.timeout);
            let Ok(answer) = tokio::time::timeout(hello_wait, conn.call_raw(&hello)).await else {
                // Transient all the same: a lease server too busy to answer in
                // time would answer the next attempt.
                let why = format!(
                    "no answer to the hello within {}: not a tenure lease server (a server of another kind, or a \
                     silent listener), or one too busy to answer",
                    tenure_core::human_duration(hello_wait)
                );
                return Err(Error::store(&self.url, op, why));
            };
            match answer {
                Ok((_, body)) => match wire::decode::<Response>(&body) {
                    Ok(answer) => break (conn, answer),
                    // A frame, by chance, but no answer of ours.
                    Err(m) => {
                        let why =
                            format!("{op}: its answer to the hello is undecodable ({m}): not a tenure lease server");
                        return Err(Error::unsupported(&self.url, why));
                    }
                },
                // The server refused this client before its hello, for good: a
                // plaintext client at a TLS server, say.
                Err(_)
                    if let Some((code @ (ErrorCode::Version | ErrorCode::Unauthorized), message)) =
                        conn.last_word() =>
                {
                    return Err(self.server_error(&op, code, message));
                }
                // Something other than a lease server is listening there: a
                // mistake in the URL, which no retry mends.
                Err(m) if conn.not_a_server() => return Err(Error::unsupported(&self.url, format!("{op}: {m}"))),
                // Closed before the hello was answered, and quickly: a server
                // crowded by connections that never say hello closes its oldest
                // ones, and a connection that waited too long to be read may be
                // one. A fresh connection is the newest again.
                Err(_) if attempt + 1 < HELLO_ATTEMPTS && started.elapsed() < self.opts.timeout / 2 => attempt += 1,
                Err(m) => return Err(Error::store(&self.url, op, m)),
            }
        };
        match answer {
            Response::Hello { version, public_key, max_lease_ms, quarantine_left_ms: _, started_us } => {
                if !(MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&version) {
                    let why = format!(
                        "the server speaks protocol {version}, this client {MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION}"
                    );
                    return Err(Error::unsupported(&self.url, why));
                }
                wire::check_max_lease(max_lease_ms).map_err(|m| self.hostile(&op, m))?;
                let max_lease = Duration::from_millis(max_lease_ms);
                if self.endpoints.len() > 1 {
                    self.identify(e, &conn, version, &op).await?;
                }
                *e.info.lock() = Some(ServerInfo { public_key, max_lease, started_us, protocol: version });
            }
            Response::Error { code, message } => return Err(self.server_error(&op, code, message)),
            other => return Err(Error::store(&self.url, op, format!("hello: {}", unexpected_answer(&other)))),
        }
        *e.slots[i].lock() = Some(conn.clone());
        Ok(conn)
    }

    /// A socket to server `e`, TLS if the store speaks it. The auth token is
    /// checked here, before anything is sent: without TLS it goes only to this
    /// machine (the addresses the host resolves to, of which only loopback ones
    /// are used), unless `allow_plaintext_auth`.
    async fn connect(&self, e: &Endpoint, op: &str) -> Result<Socket> {
        let mut addrs: Vec<std::net::SocketAddr> =
            tokio::net::lookup_host(&e.addr).await.map_err(|err| Error::store(&self.url, op, err))?.collect();
        let guard_token = self.opts.tls.is_none() && self.opts.auth_token.is_some() && !self.opts.allow_plaintext_auth;
        if guard_token {
            let all = addrs.len();
            addrs.retain(|a| a.ip().to_canonical().is_loopback());
            if addrs.is_empty() {
                let to = if all == 1 { "an address" } else { "addresses" };
                return Err(Error::InvalidStore {
                    url: self.url.clone(),
                    reason: format!(
                        "refusing to send the auth token in plaintext to {}, {to} not on this machine: connect \
                         with tls=true (the server needs --tls-cert and --tls-key), or add \
                         allow_plaintext_auth=true to send it unencrypted anyway",
                        e.addr
                    ),
                });
            }
        }
        let tcp = tokio::net::TcpStream::connect(&addrs[..]).await.map_err(|err| Error::store(&self.url, op, err))?;
        // Requests are small writes, and so are a handshake's flights.
        let _ = tcp.set_nodelay(true);
        crate::keepalive(&tcp);
        let Some(tls) = &self.opts.tls else { return Ok(Socket::Plain(tcp)) };
        match tls.connect(&e.addr, tcp).await {
            Ok(s) => Ok(Socket::Tls(Box::new(s))),
            Err(HandshakeError::Permanent(why)) => Err(Error::unsupported(&self.url, format!("{op}: {why}"))),
            Err(HandshakeError::Transient(why)) => Err(Error::store(&self.url, op, why)),
        }
    }

    /// Sends `req` to `server` and waits for its answer, undecoded. A request
    /// that met the server's idle close on its way (the server read nothing
    /// after deciding to close) is sent once more, on a new connection.
    async fn call_raw(&self, server: usize, op: &str, req: &Request<'_>) -> Result<bytes::Bytes> {
        let e = &self.endpoints[server];
        // Acquisitions go where the server checks their names' placement.
        let connect = async || match req {
            Request::Acquire { .. } => self.placed_conn(server).await,
            _ => self.conn(e).await,
        };
        let conn = connect().await?;
        let answer = match conn.call_raw(req).await {
            Err(_) if conn.closed_idle() => connect().await?.call_raw(req).await,
            answer => answer,
        };
        answer.map(|(_, body)| body).map_err(|m| Error::store(&self.url, op, m))
    }

    async fn call(&self, server: usize, op: &str, req: &Request<'_>) -> Result<Response> {
        let body = self.call_raw(server, op, req).await?;
        let resp = postcard::from_bytes::<Response>(&body)
            .map_err(|e| Error::store(&self.url, op, format!("undecodable answer: {e}")))?;
        match resp {
            Response::Error { code, message } => Err(self.server_error(op, code, message)),
            other => Ok(other),
        }
    }

    /// Decodes an answer in place ([`ResponseIn`], borrowing from `body`), once;
    /// an error answer becomes the error.
    fn decode_in<'b>(&self, op: &str, body: &'b [u8]) -> Result<ResponseIn<'b>> {
        match wire::decode::<ResponseIn<'_>>(body) {
            Ok(ResponseIn::Error { code, message }) => Err(self.server_error(op, code, message)),
            Ok(resp) => Ok(resp),
            Err(e) => Err(Error::store(&self.url, op, format!("undecodable answer: {e}"))),
        }
    }

    fn server_error(&self, op: &str, code: ErrorCode, message: String) -> Error {
        match code {
            ErrorCode::Invalid => Error::InvalidOptions { reason: message },
            ErrorCode::Changed => Error::Changed { store: self.url.clone(), name: op.to_string() },
            ErrorCode::Version | ErrorCode::Unauthorized | ErrorCode::Nothing => {
                Error::unsupported(&self.url, format!("{op}: {message}"))
            }
            ErrorCode::Protocol | ErrorCode::Overloaded | ErrorCode::Quarantine | ErrorCode::Idle => {
                Error::store(&self.url, op, message)
            }
        }
    }

    fn unexpected(&self, op: &str, resp: &impl std::fmt::Debug) -> Error {
        Error::store(&self.url, op, unexpected_answer(resp))
    }

    /// An answer whose numbers no working server sends (see [`wire::check_grant`]
    /// and its neighbours): a store error naming the field, never a panic or a
    /// wrapped deadline.
    fn hostile(&self, op: &str, why: String) -> Error {
        Error::store(&self.url, op, format!("the server's answer is out of range: {why}"))
    }

    async fn renew_on(&self, server: usize, idx: &[usize], grants: &[Grant]) -> (Result<bytes::Bytes>, Mono) {
        let items: Vec<RenewWire<'_>> =
            idx.iter().map(|&i| RenewWire { grant: grant_ref(&grants[i]), ttl_ms: millis(grants[i].ttl) }).collect();
        let sent = self.clock.mono();
        (self.call_raw(server, "renewing", &Request::Renew(items)).await, sent)
    }

    async fn release_on(
        &self,
        server: usize,
        idx: &[usize],
        grants: &[Grant],
        req: &ReleaseRequest,
    ) -> Result<Response> {
        let items: Vec<ReleaseWire<'_>> = idx
            .iter()
            .map(|&i| ReleaseWire {
                grant: grant_ref(&grants[i]),
                dropped: req.dropped,
                watermark_ms: req.watermark_ms,
                meta: req.meta.as_deref(),
            })
            .collect();
        self.call(server, "releasing", &Request::Release(items)).await
    }

    /// Groups request indices by server (by `placement`, see
    /// [`TenureStore::placement`]), keeping request order inside each group.
    fn by_server<'n>(
        &self,
        placement: Option<&[Arc<str>]>,
        names: impl Iterator<Item = &'n str>,
    ) -> Vec<(usize, Vec<usize>)> {
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, name) in names.enumerate() {
            let s = placement.map_or(0, |ids| place(ids, name));
            match groups.iter_mut().find(|(g, _)| *g == s) {
                Some((_, v)) => v.push(i),
                None => groups.push((s, vec![i])),
            }
        }
        groups
    }

    /// One server's part of an acquisition, as grants or busy.
    async fn acquire_on(
        &self,
        server: usize,
        reqs: &[&AcquireRequest],
        tentative: bool,
    ) -> Result<std::result::Result<Vec<Grant>, (usize, Busy)>> {
        self.check_ttls(server, reqs.iter().map(|r| r.ttl)).await?;
        let asks: Vec<AskWire<'_>> = reqs.iter().map(|r| AskWire::of(r)).collect();
        let sent = self.clock.mono();
        let body = self.call_raw(server, "acquiring", &Request::Acquire { tentative, asks }).await?;
        self.acquired(server, &body, reqs, sent, tentative)
    }

    /// Waits for `req` in its server's queue for up to `wait`; `None` if the
    /// server keeps no queue (protocol 2).
    async fn wait_on(&self, req: &AcquireRequest, wait: Duration) -> Option<Result<Attempt>> {
        let server = match self.locate(req.name.as_str()).await {
            Ok(server) => server,
            Err(e) => return Some(Err(e)),
        };
        if let Err(e) = self.check_ttls(server, std::iter::once(req.ttl)).await {
            return Some(Err(e));
        }
        if self.endpoints[server].info.lock().as_ref().is_none_or(|i| i.protocol < 3) {
            return None;
        }
        let op = "waiting";
        let ask = AskWire::of(req);
        let wait_ms = millis(wait).min(wire::MAX_WAIT_MS);
        let wait = Request::Wait { ask, wait_ms };
        let sent = self.clock.mono();
        // The server answers a wait by its end; one that does not (a bug, a
        // hostile server that answers everything else) gets the connection's
        // timeout more, then the wait is withdrawn and fails: never a caller
        // waiting for ever.
        let answer_by = Duration::from_millis(wait_ms).saturating_add(self.opts.timeout);
        let answer = async {
            let conn = self.placed_conn(server).await?;
            let answer = match conn.call_waiting(&wait).await {
                Err(_) if conn.closed_idle() => {
                    let conn = self.placed_conn(server).await?;
                    conn.call_waiting(&wait).await.map(|a| (a, conn))
                }
                answer => answer.map(|a| (a, conn)),
            };
            answer.map_err(|m| Error::store(&self.url, op, m))
        };
        let Ok(answer) = tokio::time::timeout(answer_by, answer).await else {
            let why = format!(
                "the server did not answer a wait of {} within {} of its end",
                tenure_core::human_duration(Duration::from_millis(wait_ms)),
                tenure_core::human_duration(self.opts.timeout)
            );
            return Some(Err(Error::store(&self.url, op, why)));
        };
        let (grant, conn) = match answer {
            Ok(((_, body), conn)) => match self.acquired(server, &body, &[req], sent, false) {
                Ok(Ok(mut grants)) => (grants.pop().ok_or_else(|| Error::store(&self.url, op, "no grant")), conn),
                Ok(Err((_, busy))) => return Some(Ok(Attempt::Busy(busy))),
                Err(e) => return Some(Err(e)),
            },
            Err(e) => return Some(Err(e)),
        };
        Some(match grant {
            // The grant was made at some moment since the wait was sent, and
            // only that moment is known to be early enough to count its TTL
            // from: after a long wait little or nothing of it would be left
            // (a wait through the restart quarantine outlasts a short TTL).
            // A renewal at once counts the TTL from now. A caller that gives
            // up during it (its timeout) gives the grant back.
            Ok(g) if self.clock.mono().saturating_since(sent) > g.ttl / 50 => {
                let give_back = GiveBack { conn: &conn, grant: &g };
                let renewed = self.renew(&g).await;
                std::mem::forget(give_back);
                renewed.map(Attempt::Granted)
            }
            other => other.map(Attempt::Granted),
        })
    }

    /// Decodes the answer to an acquisition of `reqs` sent at `sent`.
    fn acquired(
        &self,
        server: usize,
        body: &[u8],
        reqs: &[&AcquireRequest],
        sent: Mono,
        tentative: bool,
    ) -> Result<std::result::Result<Vec<Grant>, (usize, Busy)>> {
        match self.decode_in("acquiring", body)? {
            ResponseIn::Acquired(AcquireReplyIn::Granted(gs)) if gs.len() == reqs.len() => {
                let grants = gs.into_iter().zip(reqs).map(|(g, r)| grant(r, g, sent, tentative));
                Ok(Ok(grants.collect::<std::result::Result<_, _>>().map_err(|m| self.hostile("acquiring", m))?))
            }
            ResponseIn::Acquired(AcquireReplyIn::Busy { index, holders, version }) => {
                let index = usize::try_from(index).unwrap_or(usize::MAX).min(reqs.len().saturating_sub(1));
                holders.iter().try_for_each(wire::check_view).map_err(|m| self.hostile("acquiring", m))?;
                let busy = Busy {
                    name: reqs[index].name.clone(),
                    holders: holders.into_iter().map(HolderView::from).collect(),
                    corrupt: None,
                    version: Some(Version::seq(version)),
                    failure: None,
                };
                Ok(Err((index, busy)))
            }
            ResponseIn::Acquired(AcquireReplyIn::Quarantine { left_ms }) => {
                wire::check_quarantine(left_ms).map_err(|m| self.hostile("acquiring", m))?;
                let busy = self.quarantine_busy(server, reqs[0].name.clone(), left_ms);
                Ok(Err((0, busy)))
            }
            ResponseIn::Acquired(AcquireReplyIn::Exhausted { index, last_token }) => {
                let index = usize::try_from(index).unwrap_or(usize::MAX).min(reqs.len().saturating_sub(1));
                Err(Error::TokensExhausted { store: self.url.clone(), name: reqs[index].name.to_string(), last_token })
            }
            other => Err(self.unexpected("acquiring", &other)),
        }
    }

    /// Refuses, before anything is asked or waited for, a TTL longer than the
    /// server's `--max-lease` (from its hello): the server would refuse it on
    /// every attempt, and the user should hear it in their own terms.
    async fn check_ttls(&self, server: usize, ttls: impl Iterator<Item = Duration>) -> Result<()> {
        // Known since the connection's hello: no second connection lookup per
        // acquisition, except before the first.
        let known = self.endpoints[server].info.lock().map(|i| i.max_lease);
        let max = match known {
            Some(max) => max,
            None => self.server_info(server).await?.max_lease,
        };
        match ttls.max().filter(|&ttl| ttl > max) {
            Some(ttl) => Err(Error::InvalidOptions {
                reason: format!(
                    "a TTL of {} is longer than the server's --max-lease of {} ({}): ask for {} or less, \
                     or start the server with a longer --max-lease",
                    tenure_core::human_duration(ttl),
                    tenure_core::human_duration(max),
                    self.endpoints[server].addr,
                    tenure_core::human_duration(max),
                ),
            }),
            None => Ok(()),
        }
    }

    /// Every name under `prefix` on one server, a page at a time: however many
    /// leases it holds, each answer stays a bounded frame. A server must make
    /// progress (names in order, after the previous page), send no page longer
    /// than asked (the decoder keeps one name more, to tell), and stop at
    /// [`MAX_LISTED`]: what it can make the client hold is bounded by these.
    async fn list_on(&self, server: usize, prefix: &str) -> Result<Vec<LeaseName>> {
        let op = "listing";
        let limit = u32::try_from(MAX_LIST_PAGE).unwrap_or(u32::MAX);
        let mut names: Vec<LeaseName> = Vec::new();
        loop {
            let after = names.last().map(LeaseName::as_str);
            let (page, more) = match self.call(server, op, &Request::List { prefix, limit, after }).await? {
                Response::Names { names, more } => (names, more),
                other => return Err(self.unexpected(op, &other)),
            };
            if more && page.is_empty() {
                return Err(self.hostile(op, "an empty page said more names follow".into()));
            }
            if page.len() > MAX_LIST_PAGE {
                return Err(
                    self.hostile(op, format!("more than {MAX_LIST_PAGE} names in one page, asked for at most {limit}"))
                );
            }
            if names.len() + page.len() > MAX_LISTED {
                return Err(self.hostile(op, format!("more than {MAX_LISTED} names")));
            }
            for n in page {
                let in_order = names.last().is_none_or(|last| last.as_str() < n.as_str());
                if !in_order || !n.starts_with(prefix) {
                    return Err(self.hostile(op, format!("{n:?} is out of order or outside the prefix {prefix:?}")));
                }
                names.push(LeaseName::new(n).map_err(|e| self.hostile(op, e.to_string()))?);
            }
            if !more {
                return Ok(names);
            }
        }
    }

    /// A server in quarantine looks like a lease held until the quarantine ends, so
    /// waiting clients wake up exactly then.
    fn quarantine_busy(&self, server: usize, name: LeaseName, left_ms: u64) -> Busy {
        let holder = Holder {
            nonce: "quarantine".into(),
            pid: 0,
            host: self.endpoints[server].addr.clone(),
            user: "tenure-serve".into(),
            version: String::new(),
            label: Some(
                "restart quarantine: nothing is granted until every lease of the previous run has ended".into(),
            ),
        };
        let view = HolderView {
            holder: Arc::new(holder),
            mode: Mode::Exclusive,
            token: 0,
            deadline_ms: self.clock.wall_ms().saturating_add(left_ms),
            ttl_ms: left_ms,
            acquired_ms: None,
            expires_in_ms: left_ms,
        };
        Busy { name, holders: vec![view], corrupt: None, version: None, failure: None }
    }

    async fn acquire_all(&self, reqs: &[AcquireRequest], tentative: bool) -> Result<AllAttempt> {
        let groups = self.by_server(self.placement().await?, reqs.iter().map(|r| r.name.as_str()));
        let outcomes = join_all(groups.iter().map(|(s, idx)| {
            let part: Vec<&AcquireRequest> = idx.iter().map(|&i| &reqs[i]).collect();
            async move { self.acquire_on(*s, &part, tentative).await }
        }))
        .await;
        let mut slots: Vec<Option<Grant>> = vec![None; reqs.len()];
        let mut first_busy: Option<(usize, Busy)> = None;
        let mut first_err = None;
        for ((_, idx), out) in groups.iter().zip(outcomes) {
            match out {
                Ok(Ok(grants)) => idx.iter().zip(grants).for_each(|(&i, g)| slots[i] = Some(g)),
                Ok(Err((j, busy))) => {
                    let at = idx[j];
                    if first_busy.as_ref().is_none_or(|(k, _)| at < *k) {
                        first_busy = Some((at, busy));
                    }
                }
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        if first_busy.is_none() && first_err.is_none() {
            return Ok(AllAttempt::Granted(slots.into_iter().flatten().collect()));
        }
        // All or nothing across servers: give back what the others granted.
        let taken: Vec<Grant> = slots.into_iter().flatten().collect();
        if !taken.is_empty() {
            self.release_all(&taken, &ReleaseRequest::default()).await;
        }
        match (first_err, first_busy) {
            (Some(e), _) => Err(e),
            (None, Some((_, busy))) => Ok(AllAttempt::Busy(busy)),
            (None, None) => Err(Error::store(&self.url, "acquiring", "no outcome")),
        }
    }
}

/// A grant to a wait whose caller gave up before it was returned (dropped
/// while it was renewed): released on its connection without waiting, so that
/// the lease does not stay held by nobody until its TTL (as released: nothing
/// was written under it).
struct GiveBack<'a> {
    conn: &'a Conn,
    grant: &'a Grant,
}

impl Drop for GiveBack<'_> {
    fn drop(&mut self) {
        let release = ReleaseWire { grant: grant_ref(self.grant), dropped: false, watermark_ms: None, meta: None };
        self.conn.send_unanswered(&Request::Release(vec![release]));
    }
}

/// "unexpected answer …", quoting at most [`wire::MAX_QUOTED`] bytes of it.
fn unexpected_answer(resp: &impl std::fmt::Debug) -> String {
    format!("unexpected answer {}", crate::clipped(&format!("{resp:?}")))
}

fn grant_ref(g: &Grant) -> RefWire<'_> {
    RefWire { name: g.name.as_str(), token: g.token, reservation: reservation_id(g), nonce: &g.holder.nonce }
}

/// A grant from the wire, its numbers checked (`Err` names the one out of range).
fn grant(r: &AcquireRequest, g: GrantIn<'_>, sent: Mono, tentative: bool) -> std::result::Result<Grant, String> {
    wire::check_grant(g.token, g.deadline_ms, tentative, g.predecessor.as_ref().map(|p| p.token))?;
    if let Some(p) = &g.predecessor {
        wire::check_predecessor(p.token, p.at_ms, p.acquired_ms, p.watermark_ms)?;
    }
    let version = if tentative {
        Version { tag: format!("reservation-{}", g.version), seq: Some(g.version) }
    } else {
        Version::seq(g.version)
    };
    Ok(Grant {
        name: r.name.clone(),
        mode: r.mode,
        token: g.token,
        ttl: r.ttl,
        deadline_ms: g.deadline_ms,
        local_deadline: sent + r.ttl,
        holder: r.holder.clone(),
        predecessor: g.predecessor.map(|p| predecessor(p, &r.holder)),
        version,
        witness: Some(g.witness.to_vec()),
    })
}

/// A predecessor from the wire. Its holder is very often the asker itself (a
/// process re-taking a lease it released), whose identity is shared, not copied.
fn predecessor(p: PredIn<'_>, asker: &Arc<Holder>) -> Predecessor {
    let holder = p.holder.map(|h| {
        let same = h.nonce == asker.nonce
            && h.pid == asker.pid
            && h.host == asker.host
            && h.user == asker.user
            && h.version == asker.version
            && h.label == asker.label.as_deref();
        if same {
            asker.clone()
        } else {
            Arc::new(Holder {
                nonce: h.nonce.to_string(),
                pid: h.pid,
                host: h.host.to_string(),
                user: h.user.to_string(),
                version: h.version.to_string(),
                label: h.label.map(str::to_string),
            })
        }
    });
    Predecessor {
        token: p.token,
        holder,
        how: p.how,
        at_ms: p.at_ms,
        acquired_ms: p.acquired_ms,
        watermark_ms: p.watermark_ms,
        meta: p.meta.map(str::to_string),
        // A note the client cannot take (oversized) is dropped, not fatal: it is
        // for people, and the grant is valid without it.
        broken: p.broken.and_then(|(by, reason)| BreakNoteWire { by, reason }.to_note().ok()),
    }
}

#[async_trait]
impl LeaseStore for TenureStore {
    fn url(&self) -> &str {
        &self.url
    }

    fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    async fn acquire_queued(&self, req: &AcquireRequest, wait: Duration) -> Option<Result<Attempt>> {
        self.wait_on(req, wait).await
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Attempt> {
        let server = self.locate(req.name.as_str()).await?;
        match self.acquire_on(server, &[req], false).await? {
            Ok(mut grants) => {
                grants.pop().map(Attempt::Granted).ok_or_else(|| Error::store(&self.url, "acquiring", "no grant"))
            }
            Err((_, busy)) => Ok(Attempt::Busy(busy)),
        }
    }

    async fn renew(&self, grant: &Grant) -> Result<Grant> {
        self.renew_all(std::slice::from_ref(grant))
            .await
            .pop()
            .unwrap_or_else(|| Err(Error::store(&self.url, "renewing", "no answer")))
    }

    async fn release(&self, grant: &Grant, req: &ReleaseRequest) -> Result<Released> {
        // `release_all` of one grant, without its grouping and joining.
        let server = match self.locate(grant.name.as_str()).await {
            Ok(server) => server,
            Err(e) => return Err(Error::store(&self.url, "releasing", e.to_string())),
        };
        match self.release_on(server, &[0], std::slice::from_ref(grant), req).await {
            Ok(Response::Released(flags)) if flags.len() == 1 => {
                Ok(if flags[0] { Released::Released } else { Released::NotHeld })
            }
            Ok(other) => Err(self.unexpected("releasing", &other)),
            Err(e) => Err(Error::store(&self.url, "releasing", e.to_string())),
        }
    }

    async fn inspect(&self, name: &LeaseName) -> Result<LeaseState> {
        let server = self.locate(name.as_str()).await?;
        match self.call(server, "inspecting", &Request::Inspect(name.as_str())).await? {
            Response::State(s) if let Err(m) = wire::check_state(&s) => Err(self.hostile("inspecting", m)),
            Response::State(s) => Ok(LeaseState {
                name: name.clone(),
                version: s.version.map(Version::seq),
                modified_ms: s.modified_ms,
                holders: s.holders.into_iter().map(Into::into).collect(),
                expired: s.expired.into_iter().map(Into::into).collect(),
                last_token: s.last_token,
                watermark_ms: s.watermark_ms,
                last: s.last.map(Into::into),
                corrupt: None,
            }),
            other => Err(self.unexpected("inspecting", &other)),
        }
    }

    async fn waiting(&self, name: &LeaseName) -> Result<Option<usize>> {
        let server = self.locate(name.as_str()).await?;
        let e = &self.endpoints[server];
        self.conn(e).await?;
        // A server before protocol 4 cannot say.
        if e.info.lock().as_ref().is_none_or(|i| i.protocol < 4) {
            return Ok(None);
        }
        match self.call(server, "counting waiters", &Request::Waiters(name.as_str())).await? {
            Response::Waiters(n) => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
            other => Err(self.unexpected("counting waiters", &other)),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LeaseName>> {
        let answers = join_all((0..self.endpoints.len()).map(|s| self.list_on(s, prefix))).await;
        let mut names = Vec::new();
        for a in answers {
            names.extend(a?);
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    async fn break_lease(&self, seen: &LeaseState, only_token: Option<u64>, note: Option<&BreakNote>) -> Result<()> {
        let name = seen.name.as_str();
        let Some(version) = seen.version.as_ref().and_then(|v| v.seq) else {
            return Err(Error::unsupported(
                &self.url,
                format!("lease {name:?} does not exist; there is nothing to break"),
            ));
        };
        let req = Request::Break { name, version, only_token, note: note.map(BreakNoteWire::of) };
        match self.call(self.locate(name).await?, "breaking", &req).await {
            Ok(Response::Done) => Ok(()),
            Ok(other) => Err(self.unexpected("breaking", &other)),
            Err(Error::Changed { .. }) => Err(Error::Changed { store: self.url.clone(), name: name.to_string() }),
            Err(e) => Err(e),
        }
    }

    async fn try_acquire_all(&self, reqs: &[AcquireRequest]) -> Result<AllAttempt> {
        self.acquire_all(reqs, false).await
    }

    async fn renew_all(&self, grants: &[Grant]) -> Vec<Result<Grant>> {
        let placement = match self.placement().await {
            Ok(p) => p,
            Err(e) => return grants.iter().map(|_| Err(Error::store(&self.url, "renewing", e.to_string()))).collect(),
        };
        let groups = self.by_server(placement, grants.iter().map(|g| g.name.as_str()));
        // One server (one grant, usually): no join machinery.
        let answers = if let [(srv, idx)] = groups.as_slice() {
            vec![self.renew_on(*srv, idx, grants).await]
        } else {
            join_all(groups.iter().map(|(srv, idx)| self.renew_on(*srv, idx, grants))).await
        };
        let mut out: Vec<Option<Result<Grant>>> = grants.iter().map(|_| None).collect();
        for ((_, idx), (answer, sent)) in groups.iter().zip(answers) {
            let body = match answer {
                Ok(body) => body,
                Err(e) => {
                    let msg = e.to_string();
                    idx.iter().for_each(|&i| out[i] = Some(Err(Error::store(&self.url, "renewing", msg.clone()))));
                    continue;
                }
            };
            match self.decode_in("renewing", &body) {
                Ok(ResponseIn::Granted(outs)) if outs.len() == idx.len() => {
                    for (&i, o) in idx.iter().zip(outs) {
                        let g = &grants[i];
                        out[i] = Some(match o {
                            OutcomeIn::Ok(w)
                                if let Err(m) = wire::check_grant(w.token, w.deadline_ms, is_reservation(g), None) =>
                            {
                                Err(self.hostile("renewing", m))
                            }
                            // The server renews the grant asked for, under its token.
                            OutcomeIn::Ok(w) if w.token != g.token => Err(self.hostile(
                                "renewing",
                                format!("the renewal of token {} came back for token {}", g.token, w.token),
                            )),
                            OutcomeIn::Ok(w) => Ok(Grant {
                                name: g.name.clone(),
                                mode: g.mode,
                                token: g.token,
                                ttl: g.ttl,
                                deadline_ms: w.deadline_ms,
                                local_deadline: sent + g.ttl,
                                holder: g.holder.clone(),
                                predecessor: g.predecessor.clone(),
                                version: if is_reservation(g) { g.version.clone() } else { Version::seq(w.version) },
                                witness: Some(w.witness.to_vec()),
                            }),
                            OutcomeIn::Lost(detail) => Err(Error::Lost {
                                store: self.url.clone(),
                                name: g.name.to_string(),
                                token: g.token,
                                reason: LossReason::Stolen { detail },
                            }),
                        });
                    }
                }
                Ok(other) => {
                    let msg = unexpected_answer(&other);
                    idx.iter().for_each(|&i| out[i] = Some(Err(Error::store(&self.url, "renewing", msg.clone()))));
                }
                // A renewal the server refuses as invalid (an older server's
                // answer to a duration above its --max-lease, after a restart
                // with a lower one) is refused again however often it is sent:
                // the grant will not be renewed, so it is lost now, not after
                // a passing outage's retries.
                Err(Error::InvalidOptions { reason }) => {
                    for &i in idx {
                        out[i] = Some(Err(Error::Lost {
                            store: self.url.clone(),
                            name: grants[i].name.to_string(),
                            token: grants[i].token,
                            reason: LossReason::Stolen { detail: format!("the server refuses to renew it: {reason}") },
                        }));
                    }
                }
                Err(e) => {
                    let msg = e.to_string();
                    idx.iter().for_each(|&i| out[i] = Some(Err(Error::store(&self.url, "renewing", msg.clone()))));
                }
            }
        }
        out.into_iter().map(|o| o.unwrap_or_else(|| Err(Error::store(&self.url, "renewing", "no answer")))).collect()
    }

    async fn release_all(&self, grants: &[Grant], req: &ReleaseRequest) -> Vec<Result<Released>> {
        let placement = match self.placement().await {
            Ok(p) => p,
            Err(e) => return grants.iter().map(|_| Err(Error::store(&self.url, "releasing", e.to_string()))).collect(),
        };
        let groups = self.by_server(placement, grants.iter().map(|g| g.name.as_str()));
        let answers = if let [(srv, idx)] = groups.as_slice() {
            vec![self.release_on(*srv, idx, grants, req).await]
        } else {
            join_all(groups.iter().map(|(srv, idx)| self.release_on(*srv, idx, grants, req))).await
        };
        let mut out: Vec<Option<Result<Released>>> = grants.iter().map(|_| None).collect();
        for ((_, idx), answer) in groups.iter().zip(answers) {
            match answer {
                Ok(Response::Released(flags)) if flags.len() == idx.len() => {
                    for (&i, held) in idx.iter().zip(flags) {
                        out[i] = Some(Ok(if held { Released::Released } else { Released::NotHeld }));
                    }
                }
                Ok(other) => {
                    let msg = unexpected_answer(&other);
                    idx.iter().for_each(|&i| out[i] = Some(Err(Error::store(&self.url, "releasing", msg.clone()))));
                }
                Err(e) => {
                    let msg = e.to_string();
                    idx.iter().for_each(|&i| out[i] = Some(Err(Error::store(&self.url, "releasing", msg.clone()))));
                }
            }
        }
        out.into_iter().map(|o| o.unwrap_or_else(|| Err(Error::store(&self.url, "releasing", "no answer")))).collect()
    }
}
