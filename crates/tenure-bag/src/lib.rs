//! Closable bags of timestamped messages on dumb storage, and the lease-guarded
//! journal (`docs/design/closable-bags.md`).
//!
//! Many processes append timestamped messages to a *log* — a directory on a
//! local or NFS file system, or a prefix of an object store — with no log server,
//! and every reader agrees on which messages count and in what order.
//!
//! - A log is cut into time **buckets** (default one per second). A message goes
//!   to the bucket of its timestamp.
//! - Anyone may **close** a bucket once it is older than its grace (default 2 s):
//!   prelock → list the items and their sizes → publish a manifest, first one
//!   wins. Closing is wait-free and idempotent; [`Metronome`] and `tenure bag
//!   close --loop` do it continuously.
//! - A writer is told **accepted or rejected, for certain**: accepted iff its
//!   batch is durably in the bucket and either no close had begun after the write
//!   or the manifest lists it. A late writer helps finish the close rather than
//!   wait for it. See [`protocol`] for the steps and the one
//!   clock-dependent fast path.
//! - **Readers never write**. Closed buckets give exactly the accepted messages;
//!   open ones are reported as provisional. Messages merge in (timestamp, writer,
//!   sequence) order.
//! - **Entries tenure did not write** (symlinks, directories, FIFOs, devices or
//!   huge files named like data files, buckets, manifests or snapshots) are never
//!   followed, opened or listed in a manifest: closers and readers skip them and
//!   report them ([`Skipped`]); every read is capped, and every storage operation
//!   has a deadline, so a hostile entry or a hung mount can neither hang a
//!   command nor send tenure outside the log. See [`fs`].
//! - The [`Journal`] stamps messages under leases from any tenure store, above the
//!   predecessors' watermarks and below the deadlines; [`audit()`] checks it.
//! - [`Log::compact`] folds closed buckets into snapshots, idempotently.
//!
//! Storage specifics: [`fs`] (a bag of single-writer logs, only NFS-safe
//! operations, no rename) and [`object`] (one object per batch, conditional PUTs).
//!
//! ```no_run
//! # async fn demo() -> tenure_core::Result<()> {
//! use tenure_bag::{BagOptions, Log, ReadOptions};
//! let log = Log::open("/mnt/nfs/orders", BagOptions::default())?;
//! let writer = log.writer(tenure_bag::Writer::unique_id("web1"))?;
//! let outcome = writer.append_now("order 42 shipped").await?;
//! assert!(outcome.accepted, "rejected: {:?}", outcome.decision);
//! let read = log.read(&ReadOptions::default()).await?;
//! println!("{} messages, final: {}", read.messages.len(), read.exact);
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

pub mod audit;
#[cfg(feature = "bench")]
pub mod bench;
pub mod frame;
pub mod fs;
pub mod journal;
pub mod layout;
mod log;
pub mod object;
pub mod protocol;
pub mod read;
pub mod snapshot;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use audit::{AuditReport, VerifiedWitness, Violation, ViolationKind, WitnessVerifier, audit};
pub use frame::{LeaseStamp, Message};
pub use journal::{Journal, Txn};
pub use layout::{LogConfig, LogSettings, Manifest};
pub use log::{BagOptions, CloseReport, CloseRound, Log, Metronome, Unclosable, Writer};
pub use protocol::{Batch, BucketState, Decision, Outcome, Skipped};
pub use read::{ReadOptions, ReadResult};
pub use snapshot::CompactReport;

use object_store::ObjectStore;
use object_store::path::Path;
use tenure_core::Result;

/// Opens an object store by URL for a log (`s3://bucket/prefix`, `gs://…`,
/// `az://…`), with settings such as `aws_endpoint` or `aws_access_key_id`, exactly
/// as the object-store lease backend does ([`tenure_object::object_store_from_url`]).
pub fn open_object_store(url: &str, params: &BTreeMap<String, String>) -> Result<(Arc<dyn ObjectStore>, Path)> {
    tenure_object::object_store_from_url(&tenure_core::StoreUrl::parse(url, params)?)
}
