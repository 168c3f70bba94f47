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
//! moves only the names that hash to it (change the sharding by
//! letting leases expire, no state to migrate:
//! `docs/design/leases-on-dumb-storage.md#leases-in-ram`; see the README on
//! changing the list).
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

mod connect;
mod options;
mod rendezvous;
mod store;
mod two_phase;

use crate::wire::{
    self, AskWire, BreakNoteWire, ErrorCode, MAGIC, MAX_LIST_PAGE, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, RefWire,
    ReleaseWire, RenewWire, Request, Response,
};
pub use options::ClientOptions;
pub use rendezvous::{place, rendezvous_score};
use store::{GiveBack, grant, grant_ref, unexpected_answer};
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
