//! The tenure lease server (`tenure serve`) and its client, the `tenure://` store.
//!
//! Seed 000: leases are small and short-lived, so they belong in RAM, in a
//! service specialised for churning through them, not in storage. The server
//! keeps every lease in a sharded in-memory table ([`core`]), judges expiry by its
//! own clock alone, and answers over a small binary protocol ([`wire`]). The
//! client, [`TenureStore`], implements [`tenure_core::LeaseStore`], so everything in
//! tenure (keep-alive, `tenure lock`, the conformance suite) works on it unchanged.
//!
//! # Wire protocol (version 3)
//!
//! TCP, or TLS over TCP ([`tls`]: `tenure serve --tls-cert --tls-key`, and
//! `tenure://host:port?tls=true` on the client's side); every frame is
//! `len:u32 id:u32 [server_time_us:u64] body`, little-endian,
//! where `len` counts the bytes after itself, responses carry the server's time
//! (so clients see their skew: [`TenureStore::skew_us`]) and `body` is a
//! [postcard](https://docs.rs/postcard)-encoded [`wire::Request`] or
//! [`wire::Response`]. Clients pipeline: many requests may be in flight on one
//! connection, and answers come back by `id`, in any order.
//!
//! 1. The first request must be `Hello { magic: "TNRW", version, auth }`, where
//!    this build speaks versions 2 and 3. The server answers with the client's
//!    version (a version 2 client is served as before), its ed25519 public key, its `max_lease`,
//!    how long its quarantine still lasts, and when it started. A wrong magic or
//!    version, or a missing or wrong shared secret (`auth`, when the server has
//!    one: `--auth-token-file`), gets an `Error` answer and the connection closes.
//!    The client sends its token only over TLS or to a loopback address,
//!    unless told otherwise (`allow_plaintext_auth=true`), and `tenure serve`
//!    likewise refuses a token without TLS on an address that is not loopback.
//! 2. Then any of `Acquire { tentative, asks }` (all or nothing, up to 512
//!    leases), `Upgrade`, `Renew`, `Release` (one outcome per item), `Inspect`,
//!    `List` (a page of names after a cursor), `Break` (conditional on the
//!    version inspected) and `Ping`; from version 3, `Wait { ask, wait_ms }` and
//!    `Unwait { id }` (see below).
//!
//! # Waiting: a queue per lease, the grant pushed
//!
//! A client waiting for a busy lease does not poll: it sends `Wait`, which
//! parks in the lease's FIFO queue ([`core`]'s queue module) and is answered
//! when the lease is granted to it, or busy when `wait_ms` (at most a day) runs
//! out; the connection's other requests go on meanwhile. A release, a break or
//! an expiry hands the lease to the head of the queue in the same critical
//! section (shared waiters together, up to the first exclusive one), so a
//! release-to-grant gap is one pushed frame. While a lease has waiters, nobody
//! overtakes them, not even an `Acquire` that could share the lease. A
//! multi-lease acquisition does not queue (it polls, holding nothing while it
//! waits), so no queue ever waits on another and waiters cannot deadlock. A
//! waiter whose connection closes, or who sends `Unwait` with its request id,
//! leaves the queue, and a grant it was handed but not sent is given back at
//! once. Bounds: [`core::MAX_WAITERS`] per lease, [`wire::MAX_WAITS_PER_CONNECTION`]
//! per connection; a connection with queued waits is not idle, and TCP
//! keepalive probes (about a minute) notice a peer that vanished. The restart
//! quarantine still holds: waiters queue through it and are served when it ends.
//!
//! # Robustness: every resource a client can take is bounded
//!
//! - **Frames**: a request frame is at most 256 KiB ([`wire::MAX_REQUEST`]), and
//!   at most 4 KiB before the hello ([`wire::MAX_HELLO`]); a response at most
//!   8 MiB ([`wire::MAX_RESPONSE`]), and every answer stays far below it: a
//!   listing is a page ([`wire::MAX_LIST_PAGE`] names, [`wire::MAX_LIST_BYTES`]),
//!   a lease has at most [`core::MAX_HOLDERS`] shared holders. A frame that is
//!   oversized, undecodable or not a hello when a hello is due gets one
//!   `Error { code: Protocol }` answer with id 0 and the connection closes.
//! - **Numbers**: every number in a request is range-checked before use
//!   ([`wire::check_request`]: TTLs within `10 ms ..= --max-lease`, tokens below
//!   `MAX_TOKEN`, watermarks before the year 9999, …); out of range is an
//!   `Error { code: Invalid }` naming the field, and the connection stays open.
//!   The client checks the server's answers the same way.
//! - **Connections**: a new connection waits for its hello among at most
//!   `--max-pre-hello` (256) others, apart from the `--max-connections` (4096)
//!   places of clients that have said hello; when that set is full the oldest is
//!   closed (see the `admission` module for why). The hello must be complete
//!   within `--hello-timeout` (5 s) of the accept; with TLS, the handshake
//!   happens within the same deadline, in the same place.
//! - **Deadlines that cannot be dripped**: a frame must be complete within
//!   `--io-timeout` (10 s) of its first byte, and a batch of answers taken by
//!   the client within `--io-timeout` of being written; a client that sends
//!   nothing for `--idle-timeout` (5 min), and has no wait queued, is closed.
//! - **Memory per connection**: a read buffer (at most one frame), and one batch
//!   of answers (up to 1024 frames or about 1 MiB of answers, plus the last
//!   answer); see [`server::MAX_BATCH_BYTES`]. With TLS, rustls's buffers for
//!   the session come on top.
//! - **Leases**: at most `--max-leases` live leases, shared holders and
//!   reservations together, and `--retain` retired records (each one record:
//!   its expired grants are ended when it retires).
//!
//! Invalid requests (bad name, TTL beyond `max_lease`, …) get an
//! `Error { code: Invalid }` answer and the connection stays open.
//!
//! # Restart rule: tokens stay monotonic with no state on disk
//!
//! The server stores nothing. Fencing tokens still grow strictly across restarts
//! and crashes, by two rules together:
//! - **tabula rasa** (seed 000): a starting server grants nothing for its
//!   quarantine, `max_lease + 1 s`. Every grant of the previous incarnation had a
//!   TTL of at most `max_lease` from a decision made before the crash, so all of
//!   them have ended (by their holders' own monotonic clocks too) before the new
//!   incarnation grants anything. Renewals of old grants are refused (the server
//!   has no record of them), so their holders learn they lost them.
//! - **time in the token**: a grant's token is `max(previous token, server time
//!   in µs) + 1`, where server time is the wall clock read once at start plus
//!   the monotonic time since. The server refuses grants that would put a token
//!   more than `max_lease / 2` ahead of its clock (more than one grant per µs on
//!   one name, sustained), so every token of an incarnation that crashed at wall
//!   time `T` is below `T + max_lease/2`, and every token of the next one is at
//!   least its clock at its first grant, `≥ T + max_lease`.
//!
//! Assumption: the wall clock at restart is not behind the wall clock at the crash
//! by more than `max_lease / 2` (an NTP step back of minutes would break it; a
//! clock that is wildly wrong, before 2020, is refused at start). Tokens look like
//! timestamps in µs (about 1.8 × 10^15 in 2027): they fit in an `f64` exactly and
//! tell roughly when a grant was made.
//!
//! # Witnesses
//!
//! Every grant, renewal, reservation and upgrade carries an ed25519-signed
//! [`witness::Witness`] (name, mode, token, deadline, holder nonce, the server's
//! time, the predecessor's token, nonce, how it ended, when, and the watermark).
//! Witnesses decided together are signed together, one signature over a Merkle
//! root (as Roughtime does); [`witness::verify`] checks one witness with the
//! public key alone.
//!
//! # Memory
//!
//! A released lease's record (its token, watermark, and the metadata the holder
//! left, seed 000's "where they stored their updates") is kept for the next
//! holder in a bounded table, `--retain` records, dropping the oldest first; live
//! leases, with their shared holders and reservations, are bounded by
//! `--max-leases`, and each lease has at most [`core::MAX_HOLDERS`] shared
//! holders and [`core::MAX_RESERVATIONS`] reservations. See [`core`]. The HTTP
//! port has limits of its own: see [`http`].

#![forbid(unsafe_code)]

mod admission;
pub mod client;
mod conn;
pub mod core;
pub mod http;
mod pool;
pub mod server;
mod spin;
pub mod tls;
pub mod wire;
pub mod witness;

use std::sync::Arc;

use tenure_core::{LeaseStore, OpenOptions, Result, StoreUrl};

pub use client::{ClientOptions, ServerInfo, TenureStore, Upgrade, is_reservation};
pub use core::{Core, CoreOptions};
pub use server::{Server, ServerOptions};
pub use tls::{ClientTls, ServerTls, TlsError};
pub use witness::{Signer, Witness, WitnessError, verify};

/// Opens a `tenure://host:port[,host:port…]` store. Connections are made on first use.
///
/// The files the URL names (`auth_token_file`, `ca_file`, the platform's
/// roots) are read off the runtime and within [`OPEN_FILES_LIMIT`], so that a
/// hung mount cannot hang the caller.
pub async fn open(url: &str, opts: &OpenOptions) -> Result<Arc<dyn LeaseStore>> {
    open_url(&StoreUrl::parse(url, &opts.params)?, opts).await
}

/// [`open`] for a parsed URL (whose options already include `opts.params`).
///
/// # Errors
/// As [`TenureStore::from_url`]; a store error if the files it names cannot
/// be read in time.
pub async fn open_url(url: &StoreUrl, opts: &OpenOptions) -> Result<Arc<dyn LeaseStore>> {
    let (u, o) = (url.clone(), opts.clone());
    let shown = url.display().to_string();
    match tokio::time::timeout(OPEN_FILES_LIMIT, tokio::task::spawn_blocking(move || TenureStore::from_url(&u, &o)))
        .await
    {
        Ok(Ok(store)) => Ok(Arc::new(store?)),
        Ok(Err(e)) => Err(tenure_core::Error::store(shown, "opening the store", e)),
        Err(_) => Err(tenure_core::Error::store(
            shown,
            "reading the files the URL names",
            "no answer within 10s: is their file system hung?",
        )),
    }
}

/// Longest wait for the files a `tenure://` URL names.
pub const OPEN_FILES_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Turns on TCP keepalive probes, so that a peer that vanished without a word
/// (a crash of its machine, a cut cable) is noticed within about a minute even
/// while the connection only waits in a lease's queue and nothing is said: on
/// the server its waits leave their queues, on the client the wait fails and
/// is tried again.
pub(crate) fn keepalive(stream: &tokio::net::TcpStream) {
    let probes = socket2::TcpKeepalive::new()
        .with_time(std::time::Duration::from_secs(30))
        .with_interval(std::time::Duration::from_secs(10))
        .with_retries(3);
    if let Err(e) = socket2::SockRef::from(stream).set_tcp_keepalive(&probes) {
        tracing::debug!(error = %e, "could not turn on TCP keepalive");
    }
}
