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

use crate::backend::{Backend, Key, Put, PutMode, PutOptions, Stored};
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

    async fn get(&self, key: &Key) -> Result<Option<Stored>> {
        Ok(self.state.lock().slots.get(key.as_str()).cloned())
    }

    async fn put(&self, key: &Key, value: Bytes, opts: PutOptions) -> Result<Put> {
        let mut st = self.state.lock();
        let current = st.slots.get(key.as_str()).map(|s| &s.version);
        let ok = match &opts.mode {
            PutMode::Create => current.is_none(),
            PutMode::Update(v) => current == Some(v),
        };
        if !ok {
            return Ok(Put::Conflict);
        }
        let v = Self::write(&mut st, key.as_str(), value, self.clock.wall_ms());
        drop(st);
        self.changed.notify_waiters();
        Ok(Put::Done(v))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let under =
            |k: &str| prefix.is_empty() || k == prefix || k.strip_prefix(prefix).is_some_and(|r| r.starts_with('/'));
        Ok(self.state.lock().slots.keys().filter(|k| under(k)).cloned().collect())
    }

    async fn watch(&self, key: &Key, seen: Option<&Version>, timeout: Duration) -> Result<bool> {
        let deadline = self.clock.mono() + timeout;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.state.lock().slots.get(key.as_str()).map(|s| &s.version) != seen {
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
/// | setting | spelling |
/// |---|---|
/// | `timeout` | a duration with a unit (`timeout=5s`), as on every store; nothing here waits for it |
///
/// Any other setting is refused.
///
/// # Errors
/// [`crate::Error::InvalidStore`] for another scheme or any setting.
pub fn open_url(url: &StoreUrl) -> Result<Arc<MemoryBackend>> {
    if url.scheme() != "memory" {
        return Err(url.invalid("expected memory://[NAME]"));
    }
    // The one setting every store takes, the deadline of one operation
    // (`timeout=5s`): checked, and moot here, where nothing waits on I/O.
    url.retired("timeout_ms", |v| format!("timeout={v}ms"))?;
    url.duration("timeout", Duration::from_millis(1)..=crate::limits::MAX_DURATION)?;
    url.finish()?;
    // One name: `memory://a,b`, `memory://x@a` and `memory://a:1` would all
    // be `a` otherwise.
    if url.user().is_some() || url.hosts().len() > 1 || url.hosts().iter().any(|h| h.port.is_some()) {
        return Err(url.invalid("a memory:// store has one name: letters, digits, '.', '-', '_' and '/'"));
    }
    let host = url.hosts().first().map(|h| h.to_string()).unwrap_or_default();
    let name = format!("{host}{}", url.path_str("name")?);
    Ok(if name.is_empty() { Arc::new(MemoryBackend::new(SystemClock::shared())) } else { MemoryBackend::named(&name) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(url: &str) -> String {
        match open(url) {
            Err(crate::Error::InvalidStore { reason, .. }) => reason,
            other => panic!("{url}: expected InvalidStore, got {other:?}"),
        }
    }

    #[test]
    fn the_one_setting_is_timeout_with_a_unit_and_others_are_refused() {
        assert!(open("memory://?timeout=5s").is_ok());
        assert!(reason("memory://?timeout=5").contains("timeout=5 has no unit"));
        assert!(reason("memory://?timeout_ms=5").contains("timeout_ms=5 is no longer read: write timeout=5ms"));
        assert!(reason("memory://?bogus=5").contains("unknown option \"bogus\" (known: timeout)"));
        assert!(reason("memory://?fsync=false").contains("unknown option \"fsync\""));
    }
}
