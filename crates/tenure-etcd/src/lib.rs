//! tenure leases on etcd: `etcd://host:port[,host:port…]/prefix`.
//!
//! For users who already run etcd, or need leases that survive the loss of a
//! machine: etcd replicates every write through Raft, so a lease outlives any
//! one member. The lease logic is tenure's own, written once in
//! [`tenure_core::CasStore`]; this crate gives it a [`Backend`](tenure_core::Backend) made
//! of etcd primitives: compare-and-swap on `mod_revision` in transactions, etcd
//! leases, and watches. See [`url`] for the URL and its options.
//!
//! The gRPC client is this crate's own ([`rpc`], over the code in [`proto`]
//! generated from etcd's protos and committed), so building it needs no
//! protoc.
//!
//! # Layout
//!
//! Lease `deploy/prod` in store `etcd://…/locks` is the etcd key
//! `locks/deploy/prod`, holding tenure's JSON lease record (see
//! [`tenure_core::record`]). Next to it, `locks/deploy/prod~~last` is its *shadow*:
//! a persistent key written with every record that is *created* with an expiry
//! (holding that first value), which etcd never deletes (see below). Fenced records live at `locks/<name>~fence`, and the
//! waiters in line for a lease at `locks/<name>~line/<nonce>` ([`line`](mod@line)).
//!
//! # Operations, as etcd requests
//!
//! | tenure | etcd | cost |
//! |---|---|---|
//! | read a record | `Range` (linearizable) | 1 round trip, no disk write |
//! | acquire / renew (write with expiry) | `Txn`: if `create_revision == 0` (create) or `mod_revision == seen` (update), put the record attached to our etcd lease (and, for a create, its shadow) | 1 round trip, 1 Raft write |
//! | release / break (write without expiry) | `Txn`: if `mod_revision == seen`, put the record with no etcd lease | 1 round trip, 1 Raft write |
//! | token floor of a vanished record | count-only `Range` → header revision | 1 round trip |
//! | list | keys-only prefix `Range` | 1 round trip |
//! | wait for a busy lease | `Watch` of the key from the revision after the one seen | 1 stream, woken by etcd's event |
//! | wait in line | a key per waiter, `NAME~line/NONCE`, watching the one ahead (see [`line`](mod@line)) | 1 write to enter, 1 to leave |
//! | keep our etcd lease alive | `LeaseKeepAlive` (or `LeaseGrant` when none) before a write that needs it | about once per `d/2`, see [`leases`](#etcd-leases-and-keep-alive) |
//!
//! So an uncontended acquire + release of an existing record costs 3 requests
//! (read, write, write; the holder caches what it wrote, and a handle that wrote
//! the record last skips the read), plus the count-only `Range` when the record
//! is absent; a renewal costs 1, and a waiting contender 1 read per wake-up
//! instead of a poll loop.
//!
//! A record's [`Version`](tenure_core::Version) is its `mod_revision` (`tag` and
//! `seq`): revisions grow strictly across the whole cluster, so they are exact
//! compare-and-swap conditions and valid token floors.
//!
//! # etcd leases and keep-alive
//!
//! Every write with an expiry (acquire and renew; tenure asks for
//! `ttl + max_skew`) attaches the record to an etcd lease, so that a crashed
//! holder's record is deleted by etcd on etcd's own clock. As etcd's
//! `concurrency.Session` does, a backend keeps one etcd lease per TTL class
//! (`1.5 × (ttl + max_skew)`, rounded up to seconds) rather than one per grant,
//! and keeps it alive with etcd's `LeaseKeepAlive`, lazily: before a write, if
//! the etcd lease is not known to live at least `ttl + max_skew` more, it is
//! refreshed first. That is the safety rule: etcd never deletes a record
//! before its holder's own deadline. There is no background task; when a
//! process dies or stops writing, its etcd leases lapse and its records vanish
//! between `ttl + max_skew` and `1.5 × (ttl + max_skew)` after its last write.
//! A release writes the record with no etcd lease, so released records (their
//! token counter, watermark and predecessor) stay.
//!
//! The holder's keep-alive is still tenure's: it rewrites the record every
//! `renew_interval`, because contenders judge a grant by watching its record
//! change (tenure's clock discipline). Loss is reported through the same
//! [`Health`](tenure_core::Health) as on every store: a failing renewal makes the
//! lease `AtRisk`, then `Lost(Outage)`; a record changed or deleted by someone
//! else (broken, or deleted by etcd after we were cut off for longer than the
//! etcd lease) makes it `Lost(Stolen)` at the next renewal; a holder that cannot
//! renew before its own deadline is `Lost(Expired)`.
//!
//! # Fencing tokens
//!
//! While the record exists, a new grant's token is its `last_token + 1`, so
//! tokens stay consecutive. When the record has vanished (its etcd lease
//! expired), tokens restart from etcd's revisions, as in etcd's own
//! `concurrency.Mutex`: the floor is the cluster's current revision, and the
//! token is one above it. That floor is above every token the record ever
//! granted: each grant is a write, which raises the revision by at least one,
//! so no token exceeds the revision of the write that granted it. (An
//! unreadable record's floor is its `mod_revision`, for the same reason.) A
//! counter key would need a second contended write per grant; revisions are
//! free.
//!
//! One race remains in "read absent, then create": between the read and the
//! create, another holder could create the record and it could vanish again,
//! and the create would then repeat that holder's token. So the creating `Txn`
//! also compares the shadow: `mod_revision(shadow) < new token`. The shadow is
//! written in every transaction that creates a record with an expiry (lease
//! records are only ever created that way). The new token is one above the
//! revision at which the record was read absent; any grant after that read
//! needs the record to exist again, so a create at a later revision, which
//! moved the shadow to that revision or above: the comparison fails exactly
//! when someone granted under the name since the read, and etcd checks it
//! atomically with the grant. Writes that update an existing record (acquire,
//! renew, release) leave the shadow alone: one key per write, not two. (The
//! backend reads the new token from the lease record it is writing; values
//! that are not lease records skip the check.)
//!
//! # Caveats
//!
//! - **A vanished record loses its history.** When etcd deletes a crashed
//!   holder's record, the next holder gets a token above every earlier one, but
//!   no predecessor and no watermark ([`tenure_core::Predecessor`] is `None`). etcd
//!   deletes the record at least `ttl + max_skew` after the holder's last write
//!   on etcd's clock, so a next holder whose clock is within `max_skew` of
//!   etcd's writes above the lost holder's deadline anyway. The shadow keeps
//!   only the record as it was created (`etcdctl get <key>~~last`), not its
//!   last content. A contender that was
//!   already waiting usually takes over before etcd deletes the record, and then
//!   gets the full predecessor.
//! - **No modification time**: etcd keeps none, so an unreadable record is
//!   replaced only after a contender has watched it unchanged for `corrupt_ttl`.
//! - **Compaction** of etcd's history is harmless: a watch whose start was
//!   compacted away costs one extra `Range` to tell whether the key moved,
//!   then watches on from there.
//! - **TLS and authentication**: `tls=true` (with `ca_file=`, and `cert_file=`
//!   / `key_file=` for client certificates), user and password (`user=`,
//!   [`url::PASSWORD_ENV`]); a password goes only over TLS or to this machine
//!   unless allowed (see [`url`]).
//! - **Deleting a record by hand** (`etcdctl del`) is safe for tokens (the floor
//!   is the current revision) but frees a held lease at once: don't.

#![forbid(unsafe_code)]

mod backend;
mod leases;
pub mod line;
pub mod proto;
pub mod rpc;
pub mod url;
mod watch;

use std::sync::Arc;

use tenure_core::{CasStore, LeaseStore, OpenOptions, Result, StoreUrl};

pub use backend::{EtcdBackend, SHADOW_SUFFIX};
pub use url::EtcdUrl;

/// Opens an `etcd://` store: connects, checks that the cluster answers, and
/// returns tenure's lease logic over it; `opts.params` go over the URL's
/// settings. [`EtcdBackend::connect`] gives the backend itself.
///
/// # Errors
/// [`tenure_core::Error::InvalidStore`] for a malformed URL, unknown option or refused
/// credentials; [`tenure_core::Error::Store`] when no endpoint answers in time.
pub async fn open(url: &StoreUrl, opts: &OpenOptions) -> Result<Arc<dyn LeaseStore>> {
    let backend = EtcdBackend::connect(url, opts).await?;
    Ok(Arc::new(CasStore::new(Arc::new(backend), opts.clock.clone(), opts.cas.clone())))
}
