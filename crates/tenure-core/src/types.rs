//! The values that flow between stores, the client and its users.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::Mono;
use crate::duration::human_duration;
use crate::holder::Holder;
use crate::name::LeaseName;

/// Exclusive (one holder) or shared (many holders, no exclusive one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One holder at a time, and no shared holders.
    #[default]
    Exclusive,
    /// Any number of holders at once, while there is no exclusive holder.
    Shared,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        })
    }
}

/// A store's version of a record, as observed: the precondition for the next write.
///
/// `tag` is opaque (a file sequence number, an ETag, a generation, an etcd
/// mod_revision). `seq`, when the store has one, grows strictly with every write
/// of the key and survives corrupt content, so fencing tokens can be floored on it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Version {
    /// Opaque version tag.
    pub tag: String,
    /// Strictly increasing sequence number, if the store has one.
    pub seq: Option<u64>,
}

impl Version {
    /// A version that is its own sequence number.
    pub fn seq(seq: u64) -> Self {
        Self { tag: seq.to_string(), seq: Some(seq) }
    }
}

/// How a grant ended, as remembered in the record for the next holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EndedHow {
    /// Released gracefully by its holder, with a watermark.
    Released,
    /// Dropped by its holder without an explicit release (its deadline is the watermark).
    Dropped,
    /// Taken over after its deadline passed.
    Expired,
    /// Broken by an administrator.
    Broken,
    /// Re-taken by the same holder identity.
    Retaken,
    /// The record was unreadable and was replaced after it went stale.
    Corrupt,
}

impl EndedHow {
    /// Whether the holder let go itself (its watermark is exact).
    pub fn graceful(self) -> bool {
        matches!(self, EndedHow::Released)
    }
}

impl fmt::Display for EndedHow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EndedHow::Released => "released",
            EndedHow::Dropped => "dropped",
            EndedHow::Expired => "expired and taken over",
            EndedHow::Broken => "broken by an administrator",
            EndedHow::Retaken => "re-taken by the same holder",
            EndedHow::Corrupt => "replaced after its record was corrupt",
        })
    }
}

/// Who broke a grant, and why (`tenure break --reason`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakNote {
    /// The process that broke it.
    pub by: Arc<Holder>,
    /// Why, as its user said (at most [`crate::limits::MAX_REASON_BYTES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What a new holder learns about the grant before it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Predecessor {
    /// The predecessor's fencing token (for a corrupt record: the floor used).
    pub token: u64,
    /// The predecessor, if known.
    pub holder: Option<Arc<Holder>>,
    /// How it ended.
    pub how: EndedHow,
    /// When it ended (wall ms of whoever ended it).
    pub at_ms: u64,
    /// When it began, on its holder's own clock (wall ms), if known: with
    /// `watermark_ms`, it bounds the timestamps the predecessor may have stamped,
    /// however long it held the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquired_ms: Option<u64>,
    /// Upper bound of the timestamps of everything written under this name so far:
    /// write strictly above it. `None` if nobody ever published one.
    pub watermark_ms: Option<u64>,
    /// Metadata the predecessor left, e.g. where it stored its updates; a
    /// predecessor that asked for none and left none passes on the metadata it
    /// inherited, so this is the latest metadata any holder left.
    pub meta: Option<String>,
    /// Who broke it and why, if it was broken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broken: Option<BreakNote>,
}

/// One successful acquisition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// Lease name.
    pub name: LeaseName,
    /// Mode.
    pub mode: Mode,
    /// Fencing token: strictly greater than every earlier grant's under this name.
    pub token: u64,
    /// Lease duration asked for.
    pub ttl: Duration,
    /// Absolute deadline as written into the store (wall ms; the server's clock for
    /// the lease server, this holder's clock otherwise).
    pub deadline_ms: u64,
    /// The holder's own deadline on its monotonic clock: request send time + TTL.
    /// Act only before `local_deadline - safety margin`.
    pub local_deadline: Mono,
    /// Who holds it.
    pub holder: Arc<Holder>,
    /// What came before.
    pub predecessor: Option<Predecessor>,
    /// Store version after our last write: the precondition for renew and release.
    pub version: Version,
    /// A signed witness of this grant, from stores that sign (the lease server).
    pub witness: Option<Vec<u8>>,
}

/// A live entry in a lease record, as shown to contenders and humans.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderView {
    /// Holder identity.
    pub holder: Arc<Holder>,
    /// Mode of its grant.
    pub mode: Mode,
    /// Its fencing token.
    pub token: u64,
    /// Its absolute deadline (wall ms, as written).
    pub deadline_ms: u64,
    /// Its TTL.
    pub ttl_ms: u64,
    /// When it was granted, on its holder's clock (wall ms), if the store says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquired_ms: Option<u64>,
    /// Longest this observer may have to wait for it to be taken over, if it is
    /// never renewed (clock discipline included).
    pub expires_in_ms: u64,
}

/// Someone else holds the lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Busy {
    /// Lease name.
    pub name: LeaseName,
    /// Live holders that block us.
    pub holders: Vec<HolderView>,
    /// The record is unreadable and not yet stale.
    pub corrupt: Option<String>,
    /// The version that blocked us (waiters may watch it change).
    pub version: Option<Version>,
    /// The store failed on this attempt, with this error: a waiter waits it out
    /// as if the lease were busy, and does not know who holds it.
    pub failure: Option<String>,
}

impl Busy {
    /// What a look at the lease shows: busy as its state says.
    pub fn of(state: LeaseState) -> Self {
        Self { name: state.name, holders: state.holders, corrupt: state.corrupt, version: state.version, failure: None }
    }

    /// One line for humans: who holds it and when it could be taken over.
    pub fn describe(&self) -> String {
        if let Some(error) = &self.failure {
            return format!("nobody known: the store failed ({error}); retrying");
        }
        if let Some(detail) = &self.corrupt {
            return format!("an unreadable record ({detail}), waiting for it to go stale");
        }
        match self.holders.as_slice() {
            [] => "nobody (it was just freed)".to_string(),
            [h] => format!(
                "{} ({}, token {}, expires in {} unless renewed)",
                h.holder,
                h.mode,
                h.token,
                human_duration(Duration::from_millis(h.expires_in_ms))
            ),
            [h, rest @ ..] => format!("{} and {} other {} holder(s)", h.holder, rest.len(), h.mode),
        }
    }
}

/// The outcome of one acquisition attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// We hold it.
    Granted(Grant),
    /// Someone else does.
    Busy(Busy),
}

/// The outcome of a release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Released {
    /// Our grant was ended and the watermark published.
    Released,
    /// Our grant had already ended (expired and taken over, or broken): nothing was
    /// changed, and nobody else's lease was touched.
    NotHeld,
}

/// What a lease record holds right now, read without writing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseState {
    /// Lease name.
    pub name: LeaseName,
    /// Store version read (the precondition for `break`); `None` if absent.
    pub version: Option<Version>,
    /// When the store last modified the record (wall ms of the store), if it says.
    pub modified_ms: Option<u64>,
    /// Live holders.
    pub holders: Vec<HolderView>,
    /// Entries whose time is up but that nobody has taken over yet.
    pub expired: Vec<HolderView>,
    /// Highest token granted so far.
    pub last_token: u64,
    /// Highest published watermark.
    pub watermark_ms: Option<u64>,
    /// How the most recent grant ended.
    pub last: Option<Predecessor>,
    /// Set when the record cannot be read: what is wrong with it.
    pub corrupt: Option<String>,
}

/// Why a lease was lost.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "lowercase")]
pub enum LossReason {
    /// Renewals kept failing (store unreachable, too slow).
    Outage {
        /// The last error.
        error: String,
    },
    /// The record shows someone else (broken, or taken over after expiry).
    Stolen {
        /// What the record says happened, for humans.
        detail: String,
    },
    /// The local deadline passed before a renewal succeeded (e.g. the process was paused).
    Expired,
    /// It was released.
    Released,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossReason::Outage { error } => write!(f, "renewals kept failing: {error}"),
            LossReason::Stolen { detail } => write!(f, "the record no longer holds our grant: {detail}"),
            LossReason::Expired => f.write_str("its deadline passed before a renewal succeeded"),
            LossReason::Released => f.write_str("it was released"),
        }
    }
}

/// A held lease's health, published by its keep-alive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// Renewals succeed. Act only before `stop_by`.
    Held {
        /// Local monotonic time by which to stop acting (deadline − safety margin).
        stop_by: Mono,
    },
    /// Renewals are failing; the lease is still ours until `stop_by`.
    AtRisk {
        /// Local monotonic time by which to stop acting.
        stop_by: Mono,
        /// Consecutive failed renewals.
        failures: u32,
        /// The last error.
        error: String,
    },
    /// The lease is gone: stop acting now.
    Lost(LossReason),
}

impl Health {
    /// Whether this is [`Health::Lost`].
    pub fn is_lost(&self) -> bool {
        matches!(self, Health::Lost(_))
    }
}
