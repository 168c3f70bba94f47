//! `memory://`: an in-process [`Backend`] for tests and examples.
//!
//! Versions come from one counter shared by every key, so they grow strictly and a
//! token floor taken from them is always safe. Nothing is ever deleted (but by
//! [`MemoryBackend::remove`], for tests). `watch` is
//! supported, so the waiting path that etcd uses is exercised without etcd.
//! `memory://NAME` gives the same store to everyone in the process who names it;
//! bare `memory://` a fresh one.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::Notify;

use crate::backend::{Backend, Put, PutMode, PutOptions, Stored, check_key};
use crate::clock::{Clock, SystemClock};
use crate::error::Result;
use crate::store_url::StoreUrl;
use crate::types::Version;

/// An in-memory versioned register per key.
#[derive(Debug)]
pub struct MemoryBackend {
    url: String,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct State {
    next_seq: u64,
    slots: HashMap<String, Stored>,
}

impl MemoryBackend {
    /// A fresh, empty store whose modification times come from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self { url: "memory://".into(), clock, state: Mutex::default(), changed: Notify::new() }
    }

    /// The process-wide store called `name` (created on first use, on the system clock).
    pub fn named(name: &str) -> Arc<Self> {
        static NAMED: OnceLock<Mutex<HashMap<String, Arc<MemoryBackend>>>> = OnceLock::new();
        let mut named = (NAMED.get_or_init(Mutex::default)).lock();
        named
            .entry(name.to_string())
            .or_insert_with(|| {
                let mut b = Self::new(SystemClock::shared());
                b.url = format!("memory://{name}");
                Arc::new(b)
            })
            .clone()
    }

    /// Writes `value` unconditionally, as a foreign writer or a damaged disk would:
    /// for tests of corrupt records.
    pub fn overwrite(&self, key: &str, value: Bytes) -> Version {
        let mut st = self.state.lock();
        let v = Self::write(&mut st, key, value, self.clock.wall_ms());
        drop(st);
        self.changed.notify_waiters();
        v
    }

    /// Deletes `key`, as a hand or a storage lifecycle rule would (tenure
    /// never does): for tests of records that disappear.
    pub fn remove(&self, key: &str) {
        self.state.lock().slots.remove(key);
        self.changed.notify_waiters();
    }

    fn write(st: &mut State, key: &str, value: Bytes, now_ms: u64) -> Version {
        st.next_seq += 1;
        let version = Version::seq(st.next_seq);
        st.slots.insert(key.to_string(), Stored::new(value, version.clone(), Some(now_ms)));
        version
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    fn url(&self) -> &str {
        &self.url
    }

    async fn get(&self, key: &str) -> Result<Option<Stored>> {
        check_key(key)?;
        Ok(self.state.lock().slots.get(key).cloned())
    }

    async fn put(&self, key: &str, value: Bytes, opts: PutOptions) -> Result<Put> {
        check_key(key)?;
        let mut st = self.state.lock();
        let current = st.slots.get(key).map(|s| &s.version);
        let ok = match &opts.mode {
            PutMode::Create => current.is_none(),
            PutMode::Update(v) => current == Some(v),
        };
        if !ok {
            return Ok(Put::Conflict);
        }
        let v = Self::write(&mut st, key, value, self.clock.wall_ms());
        drop(st);
        self.changed.notify_waiters();
        Ok(Put::Done(v))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let under =
            |k: &str| prefix.is_empty() || k == prefix || k.strip_prefix(prefix).is_some_and(|r| r.starts_with('/'));
        Ok(self.state.lock().slots.keys().filter(|k| under(k)).cloned().collect())
    }

    async fn watch(&self, key: &str, seen: Option<&Version>, timeout: Duration) -> Result<bool> {
        let deadline = self.clock.mono() + timeout;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.state.lock().slots.get(key).map(|s| &s.version) != seen {
                return Ok(true);
            }
            tokio::select! {
                () = notified => {}
                () = self.clock.sleep_until(deadline) => return Ok(false),
            }
        }
    }
}

/// Opens a `memory://` URL.
///
/// # Errors
/// [`crate::Error::InvalidStore`] for another scheme or any setting.
pub fn open(url: &str) -> Result<Arc<MemoryBackend>> {
    open_url(&StoreUrl::parse(url, &std::collections::BTreeMap::new())?)
}

/// Opens a parsed `memory://[NAME]` URL: a fresh store, or the one of that
/// name in this process.
///
/// # Errors
/// [`crate::Error::InvalidStore`] for another scheme or any setting.
pub fn open_url(url: &StoreUrl) -> Result<Arc<MemoryBackend>> {
    if url.scheme() != "memory" {
        return Err(url.invalid("expected memory://[NAME]"));
    }
    if let Some(key) = url.options().keys().next() {
        return Err(url.unknown(key, "none: memory:// takes no options"));
    }
    // One name: `memory://a,b`, `memory://x@a` and `memory://a:1` would all
    // be `a` otherwise.
    if url.user().is_some() || url.hosts().len() > 1 || url.hosts().iter().any(|h| h.port.is_some()) {
        return Err(url.invalid("a memory:// store has one name: letters, digits, '.', '-', '_' and '/'"));
    }
    let host = url.hosts().first().map(|h| h.to_string()).unwrap_or_default();
    let name = format!("{host}{}", url.path_str("name")?);
    Ok(if name.is_empty() { Arc::new(MemoryBackend::new(SystemClock::shared())) } else { MemoryBackend::named(&name) })
}
