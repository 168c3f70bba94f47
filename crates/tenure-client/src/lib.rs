//! The `tenure://` client and the lease server's wire protocol.
//!
//! [`TenureStore`] implements [`tenure_core::LeaseStore`] over one or more
//! `tenure serve` servers (sharded by lease name with rendezvous hashing over
//! the servers' identities, see [`remote`]), so
//! everything in tenure (keep-alive, `tenure lock`, the conformance suite) works
//! on it unchanged. The protocol's messages and codec ([`wire`]), its witnesses
//! ([`witness`]: format and verification) and rendezvous scores are defined
//! here, once; the server (`tenure-server`) depends on this crate, so a
//! client-only user builds neither the server nor its HTTP stack.
//!
//! # Settings
//!
//! A `tenure://` URL's query (or `--store-opt KEY=VALUE`) takes, in the one
//! spelling every store uses (see [`tenure_core::store_url`]):
//!
//! | setting | spelling | default |
//! |---|---|---|
//! | `timeout` | a duration with a unit, 1ms to 10 years: `timeout=5s` | `10s` |
//! | `spin` | a duration, 0s to 10ms: `spin=40us`, `spin=0us` (never) | `40us` |
//! | `connections` | per server, 1 to 64 | `1` |
//! | `tls`, `allow_plaintext_auth` | `true` or `false` | `false` |
//! | `ca_file`, `auth_token_file` | a path | — |
//! | `server_name`, `auth_token` | text | — |
//!
//! The old spellings `timeout_ms=500` and `spin_us=40` are refused with the
//! new one to write (`timeout=500ms`, `spin=40us`); so are flags written `1`,
//! `0`, `yes` or `on`.
//!
//! # Wire protocol (version 5)
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
//!    this build speaks versions 2 to 5. The server answers with the client's
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
//!    `Unwait { id }` (the server's crate docs say how a queue serves them);
//!    from version 4, `Waiters(name)`, the length of a lease's queue (what
//!    `tenure status` shows); from version 5, `Identify` (the server's
//!    identity) and `Servers(ids)` (the identities of the client's whole list:
//!    the server then refuses to grant a name the list places on another
//!    server). A client asks a server only what its version knows: an older
//!    server's answers stay the same. A client of several servers needs
//!    version 5 of each (it places names by identity), and asks each new
//!    connection `Identify` after the hello.
//!
#![forbid(unsafe_code)]

mod conn;
pub mod remote;
#[doc(hidden)]
pub mod spin;
pub mod tls;
pub mod wire;
pub mod witness;

use std::sync::Arc;

use tenure_core::{LeaseStore, OpenOptions, Result, StoreUrl};

pub use remote::{ClientOptions, ServerInfo, TenureStore, Upgrade, is_reservation, place, rendezvous_score};
pub use tls::{ClientTls, TlsError};
pub use witness::{Witness, WitnessError, verify};

/// Opens a `tenure://host:port[,host:port…]` store; `opts.params` go over
/// the URL's settings. Connections are made on first use.
///
/// The files the URL names (`auth_token_file`, `ca_file`, the platform's
/// roots) are read off the runtime and within [`OPEN_FILES_LIMIT`], so that a
/// hung mount cannot hang the caller.
///
/// # Errors
/// As [`TenureStore::from_url`]; a store error if the files it names cannot
/// be read in time.
pub async fn open(url: &StoreUrl, opts: &OpenOptions) -> Result<Arc<dyn LeaseStore>> {
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
#[doc(hidden)]
pub fn keepalive(stream: &tokio::net::TcpStream) {
    let probes = socket2::TcpKeepalive::new()
        .with_time(std::time::Duration::from_secs(30))
        .with_interval(std::time::Duration::from_secs(10))
        .with_retries(3);
    if let Err(e) = socket2::SockRef::from(stream).set_tcp_keepalive(&probes) {
        tracing::debug!(error = %e, "could not turn on TCP keepalive");
    }
}

/// `text`, cut to at most [`wire::MAX_QUOTED`] bytes (on a character
/// boundary) and marked as cut: how much of a peer's words an error quotes.
pub(crate) fn clipped(text: &str) -> String {
    if text.len() <= wire::MAX_QUOTED {
        return text.to_string();
    }
    let end = (0..=wire::MAX_QUOTED).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    format!("{}…", &text[..end])
}
