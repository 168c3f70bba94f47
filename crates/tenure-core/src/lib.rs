//! tenure: leases with fencing tokens over storage you already have.
//!
//! This crate is the lease protocol, written once; the stores are crates of
//! their own (a directory: `tenure-file`; object stores, the lease server,
//! etcd), and the `tenure` crate opens them all by URL. A [`Client`] acquires
//! [`Lease`]s from a [`LeaseStore`]. Each grant carries a fencing token that
//! grows strictly per lease name; a held lease keeps itself alive and reports
//! its [`Health`] (Held → AtRisk → Lost).
//!
//! ```no_run
//! # async fn demo() -> tenure_core::Result<()> {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use tenure_core::{CasOptions, CasStore, Client, LeaseOptions, MemoryBackend, SystemClock};
//!
//! let memory = Arc::new(MemoryBackend::new(SystemClock::shared()));
//! let client = Client::new(Arc::new(CasStore::new(memory, SystemClock::shared(), CasOptions::default())));
//! let opts = LeaseOptions::exclusive().with_ttl(Duration::from_secs(30)).with_timeout(Duration::from_secs(60));
//! let lease = client.acquire("deploy/prod", &opts).await?;
//! tokio::select! {
//!     reason = lease.lost() => eprintln!("lost the lease: {reason}"),
//!     () = async { /* work, writing with lease.token() as a fence */ } => {}
//! }
//! lease.release().await?;
//! # Ok(()) }
//! ```
//!
//! Layers, top down: [`Client`] and [`Lease`] (waiting, keep-alive, health,
//! multi-lease) → [`LeaseStore`] (the lease API) → [`cas::CasStore`] (the lease
//! logic, written once) → [`Backend`] (a versioned register per key).
//!
//! Clients record their waits, holds, renewals, losses and busy answers
//! through the `metrics` facade, for whatever recorder the program installs
//! ([`meter`], `docs/metrics.md`).

#![forbid(unsafe_code)]

pub mod backend;
pub mod cas;
mod client;
pub mod clock;
mod duration;
mod error;
mod fence;
mod holder;
mod keepalive;
pub mod limits;
pub mod meter;
mod name;
pub mod once;
mod open;
mod options;
pub mod record;
pub mod report;
pub mod slots;
pub mod store;
pub mod store_url;
mod turn;
mod types;
pub mod watch;

pub use backend::{Backend, Key, Put, PutMode, PutOptions, Stored};
pub use cas::{CasOptions, CasStore};
pub use client::{Client, FINISH_GRACE};
pub use clock::{Clock, ClockExt, ManualClock, Mono, SystemClock};
pub use duration::human_duration;
pub use error::{BoxError, Error, Result};
pub use fence::{Fenced, FencedRecord};
pub use holder::{Holder, random_nonce};
pub use keepalive::{Lease, LeaseSet};
pub use name::{LeaseName, MAX_NAME_LEN, MAX_SEGMENT_LEN, MAX_SEGMENTS, SLOTS_SEGMENT};
pub use once::{Once, OnceLease, OncePer};
pub use open::OpenOptions;
pub use options::LeaseOptions;
pub use store::memory::MemoryBackend;
pub use store::{AcquireRequest, AllAttempt, LeaseStore, ReleaseRequest};
pub use store_url::{StoreUrl, unknown_option};
pub use types::{
    Attempt, BreakNote, Busy, EndedHow, Grant, Health, HolderView, LeaseState, LossReason, Mode, Predecessor, Released,
    Version,
};
pub use watch::{Change, Holding};
