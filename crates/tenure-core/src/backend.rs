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

use std::fmt::{self, Debug};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::{Error, Result};
use crate::name::LeaseName;
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
    /// The write must survive a crash of the machine once it is reported
    /// done (the default). A store may skip its flushes for a write that need
    /// not: a directory then does not `fsync`.
    pub durable: bool,
}

impl PutOptions {
    /// Create-if-absent.
    pub fn create() -> Self {
        Self { mode: PutMode::Create, expires_after: None, durable: true }
    }
    /// Replace-if-at-`version`.
    pub fn update(version: Version) -> Self {
        Self { mode: PutMode::Update(version), expires_after: None, durable: true }
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
    /// A write a crash may lose (see [`PutOptions::durable`]).
    pub fn volatile(mut self) -> Self {
        self.durable = false;
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
    async fn get(&self, key: &Key) -> Result<Option<Stored>>;

    /// Writes `value` at `key` if `opts.mode` still holds.
    async fn put(&self, key: &Key, value: Bytes, opts: PutOptions) -> Result<Put>;

    /// Keys under `prefix` (all keys for `""`), in any order.
    async fn list(&self, prefix: &str) -> Result<Vec<String>>;

    /// A lower bound for the sequence of any future version of `key`, asked when
    /// [`Backend::get`] found it absent. Stores whose keys can disappear (etcd's
    /// server-side expiry) return their current revision, so fencing tokens never
    /// restart from 1. Default: 0 (keys written by tenure never disappear).
    async fn absent_floor(&self, key: &Key) -> Result<u64> {
        let _ = key;
        Ok(0)
    }

    /// Waits until `key` may have moved past `seen` (`None`: absent), or until
    /// `timeout`. Returns `Ok(true)` if it saw a change. Stores that cannot watch
    /// return `Unsupported`, and callers poll instead.
    async fn watch(&self, key: &Key, seen: Option<&Version>, timeout: Duration) -> Result<bool> {
        let _ = (key, seen, timeout);
        Err(Error::unsupported(self.url(), "watching keys"))
    }

    /// The store's own wait line, if it keeps one (etcd: a key per waiter, in
    /// revision order; an object store: an object per waiter). Others get one
    /// record per lease over [`Backend::put`] and [`Backend::watch`] (see
    /// [`crate::cas`]). A line that judges its entries' age does so on `clock`
    /// (the lease store's), with `max_skew` of tolerance against the store's own.
    fn line(
        self: std::sync::Arc<Self>,
        clock: &std::sync::Arc<dyn crate::clock::Clock>,
        max_skew: Duration,
    ) -> Option<std::sync::Arc<dyn Line>> {
        let _ = (clock, max_skew);
        None
    }
}

/// One waiter in a lease's wait line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    /// The waiting holder's nonce.
    pub nonce: String,
    /// It waits for a shared grant.
    pub shared: bool,
}

/// Whether `waiter` may try the lease with `line` as it stands: nobody is
/// ahead of it, or only shared waiters are and it is one. `None`: it is not
/// in the line.
pub fn may_try(line: &[Waiter], waiter: &Waiter) -> Option<bool> {
    let at = line.iter().position(|w| w.nonce == waiter.nonce)?;
    Some(at == 0 || (waiter.shared && line[..at].iter().all(|w| w.shared)))
}

/// A wait line per lease: who waits for it, in the order they came, so that
/// a freed lease goes to the first of them (see [`crate::cas`]'s queue for
/// the waiting itself). Every operation ends by its deadline.
#[async_trait]
pub trait Line: Send + Sync + Debug + 'static {
    /// Puts `waiter` at the back of `name`'s line, or keeps it where it is if
    /// it is there: a waiter calls this again every few seconds to show it is
    /// alive, and one that stops (it crashed) leaves the line by itself.
    async fn enter(&self, name: &str, waiter: &Waiter) -> Result<()>;

    /// The waiters of `name`'s line, first first.
    async fn waiters(&self, name: &str) -> Result<Vec<Waiter>>;

    /// `Some(true)` at once if `waiter` may try the lease ([`may_try`]);
    /// otherwise waits until the line ahead of it may have moved, or for
    /// `timeout`, and says `Some(false)`. `None`: it is not in the line (it
    /// was taken for crashed).
    async fn turn(&self, name: &str, waiter: &Waiter, timeout: Duration) -> Result<Option<bool>>;

    /// Takes the waiter `nonce` out of `name`'s line.
    async fn leave(&self, name: &str, nonce: &str) -> Result<()>;

    /// Whether this line is polled rather than watched (a store that can
    /// watch nothing: object stores). Its [`Line::turn`] looks once, then
    /// sleeps out its timeout; its waiters shorten that timeout to a poll
    /// schedule, and poll the lease itself at their turn (see [`crate::cas`]).
    fn polls(&self) -> bool {
        false
    }
}

/// A backend key, checked once when it is made: lease-name segments,
/// optionally ending in a `~suffix` of ASCII letters, digits, `-` and `_`
/// (see [`check_key`]). Backends take it as it is; cloning it is cheap.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(Arc<str>);

impl Key {
    /// Checks `key` ([`check_key`]).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for a key that is not a lease name with an
    /// optional `~suffix`.
    pub fn new(key: &str) -> Result<Self> {
        check_key(key)?;
        Ok(Self(key.into()))
    }

    /// The key of lease `name`'s record.
    pub fn lease(name: &LeaseName) -> Self {
        Self(name.as_str().into())
    }

    /// The key `<name>~<suffix>`, for tenure's own records beside a lease's
    /// (such as `fence` or `queue`).
    pub(crate) fn suffixed(name: &LeaseName, suffix: &str) -> Self {
        let key = Self(format!("{name}~{suffix}").into());
        debug_assert!(check_key(key.as_str()).is_ok(), "{key}");
        key
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Debug::fmt(&*self.0, f)
    }
}

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<&LeaseName> for Key {
    fn from(name: &LeaseName) -> Self {
        Self::lease(name)
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
