//! The storage trait: a versioned register per key, and nothing that can be
//! written once above it.
//!
//! Every lease operation on dumb storage is a read followed by a conditional
//! write (see [`crate::cas`]), so a backend only has to offer:
//! - [`Backend::get`]: the value and its [`Version`], read-only;
//! - [`Backend::put`]: create-if-absent, or replace-if-still-at-version;
//! - [`Backend::list`]: the keys under a prefix.
//!
//! A backend that cannot do one of these atomically returns
//! [`Error::Unsupported`]; it never fakes atomicity
//! with two steps. Keys are `/`-separated, made of lease-name segments, and may
//! end in a `~suffix` that tenure uses for its own records (such as fences).

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::{Error, Result};
use crate::types::Version;

/// A stored value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The bytes.
    pub value: Bytes,
    /// Its version.
    pub version: Version,
    /// When the store last modified it (the store's wall clock, ms), if known.
    pub modified_ms: Option<u64>,
    /// Set when what is stored at this version is not something tenure could have
    /// written — a directory, a FIFO, a symlink or a device where a record belongs,
    /// or a value over [`crate::limits::MAX_RECORD_BYTES`] — saying what it is.
    /// `value` is then empty, and the record counts as corrupt: judged by its age,
    /// never followed or read.
    pub foreign: Option<String>,
}

impl Stored {
    /// A readable value at `version`.
    pub fn new(value: Bytes, version: Version, modified_ms: Option<u64>) -> Self {
        Self { value, version, modified_ms, foreign: None }
    }
}

/// A write's precondition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PutMode {
    /// Only if the key does not exist.
    Create,
    /// Only if the key is still at this version.
    Update(Version),
}

/// Options of a conditional write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PutOptions {
    /// The precondition.
    pub mode: PutMode,
    /// How long the value matters if nobody writes it again: a store with
    /// server-side expiry (etcd) may drop the key after this. Others ignore it.
    pub expires_after: Option<Duration>,
}

impl PutOptions {
    /// Create-if-absent.
    pub fn create() -> Self {
        Self { mode: PutMode::Create, expires_after: None }
    }
    /// Replace-if-at-`version`.
    pub fn update(version: Version) -> Self {
        Self { mode: PutMode::Update(version), expires_after: None }
    }
    /// From what was read: create if nothing was, else update from its version.
    pub fn after(read: Option<&Stored>) -> Self {
        read.map_or_else(Self::create, |s| Self::update(s.version.clone()))
    }
    /// With a server-side expiry hint.
    pub fn with_expires_after(mut self, d: Duration) -> Self {
        self.expires_after = Some(d);
        self
    }
}

/// The outcome of a conditional write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Put {
    /// Written; the new version.
    Done(Version),
    /// The precondition failed: someone else wrote first.
    Conflict,
}

/// A versioned register per key.
#[async_trait]
pub trait Backend: Send + Sync + Debug + 'static {
    /// The store's URL, for messages.
    fn url(&self) -> &str;

    /// Reads `key`. Never writes anything.
    async fn get(&self, key: &str) -> Result<Option<Stored>>;

    /// Writes `value` at `key` if `opts.mode` still holds.
    async fn put(&self, key: &str, value: Bytes, opts: PutOptions) -> Result<Put>;

    /// Keys under `prefix` (all keys for `""`), in any order.
    async fn list(&self, prefix: &str) -> Result<Vec<String>>;

    /// A lower bound for the sequence of any future version of `key`, asked when
    /// [`Backend::get`] found it absent. Stores whose keys can disappear (etcd's
    /// server-side expiry) return their current revision, so fencing tokens never
    /// restart from 1. Default: 0 (keys written by tenure never disappear).
    async fn absent_floor(&self, key: &str) -> Result<u64> {
        let _ = key;
        Ok(0)
    }

    /// Waits until `key` may have moved past `seen` (`None`: absent), or until
    /// `timeout`. Returns `Ok(true)` if it saw a change. Stores that cannot watch
    /// return `Unsupported`, and callers poll instead.
    async fn watch(&self, key: &str, seen: Option<&Version>, timeout: Duration) -> Result<bool> {
        let _ = (key, seen, timeout);
        Err(Error::unsupported(self.url(), "watching keys"))
    }
}

/// Checks a backend key: lease-name segments, optionally ending in `~suffix`.
pub fn check_key(key: &str) -> Result<()> {
    let (base, suffix) = key.split_once('~').unwrap_or((key, ""));
    crate::LeaseName::new(base)?;
    if suffix.contains('~') || !suffix.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(Error::InvalidName { name: key.into(), reason: "has an invalid '~' suffix".into() });
    }
    Ok(())
}
