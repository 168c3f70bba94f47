//! Which writes of a lease record must survive a crash of the machine, and what
//! a crash that loses the others leaves: a release without metadata is
//! volatile, and losing it leaves the acquisition's record, never a token
//! issued twice nor two holders.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;
use tenure_core::{
    Backend, CasOptions, CasStore, Client, Key, LeaseOptions, ManualClock, MemoryBackend, Put, PutOptions,
    ReleaseRequest, Result, Stored, Version,
};

/// A memory store that remembers, per key, the last value written durably, and
/// can "crash": every key whose newest write was volatile goes back to that value.
#[derive(Debug)]
struct Crashable {
    inner: MemoryBackend,
    /// (key, durable) of every write, in order.
    writes: Mutex<Vec<(String, bool)>>,
    /// Key -> (last durable value, whether a volatile write came after it).
    durable: Mutex<HashMap<String, (Bytes, bool)>>,
}

impl Crashable {
    fn durable_flags(&self, key_prefix: &str) -> Vec<bool> {
        self.writes.lock().iter().filter(|(k, _)| k.starts_with(key_prefix)).map(|(_, d)| *d).collect()
    }

    /// A power loss: keys whose newest write was volatile get their last durable
    /// value back (written on top, as a new version). Returns how many did.
    async fn crash(&self) -> usize {
        let lost: Vec<(String, Bytes)> = self
            .durable
            .lock()
            .iter_mut()
            .filter(|(_, (_, dirty))| *dirty)
            .map(|(k, (v, dirty))| {
                *dirty = false;
                (k.clone(), v.clone())
            })
            .collect();
        let count = lost.len();
        for (k, v) in lost {
            let key = Key::new(&k).expect("a key");
            let current = self.inner.get(&key).await.expect("read").expect("a record");
            let put = self.inner.put(&key, v, PutOptions::update(current.version)).await.expect("restore");
            assert!(matches!(put, Put::Done(_)), "{put:?}");
        }
        count
    }
}

#[async_trait]
impl Backend for Crashable {
    fn url(&self) -> &str {
        "crashable://"
    }
    async fn get(&self, key: &Key) -> Result<Option<Stored>> {
        self.inner.get(key).await
    }
    async fn put(&self, key: &Key, value: Bytes, opts: PutOptions) -> Result<Put> {
        let durable = opts.durable;
        let put = self.inner.put(key, value.clone(), opts).await?;
        if matches!(put, Put::Done(_)) {
            self.writes.lock().push((key.as_str().to_string(), durable));
            let mut map = self.durable.lock();
            if durable {
                map.insert(key.as_str().to_string(), (value, false));
            } else if let Some(entry) = map.get_mut(key.as_str()) {
                entry.1 = true;
            }
        }
        Ok(put)
    }
    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        self.inner.list(prefix).await
    }
    async fn watch(&self, key: &Key, seen: Option<&Version>, timeout: Duration) -> Result<bool> {
        self.inner.watch(key, seen, timeout).await
    }
}

fn setup() -> (ManualClock, Arc<Crashable>, Client) {
    let clock = ManualClock::new();
    let store = Arc::new(Crashable {
        inner: MemoryBackend::new(clock.shared()),
        writes: Mutex::new(Vec::new()),
        durable: Mutex::new(HashMap::new()),
    });
    let cas = Arc::new(CasStore::new(store.clone(), clock.shared(), CasOptions::default()));
    (clock, store, Client::new(cas))
}

fn opts() -> LeaseOptions {
    LeaseOptions::exclusive().with_ttl(Duration::from_secs(8)).no_wait()
}

#[tokio::test(start_paused = true)]
async fn acquisitions_are_durable_and_a_release_is_volatile_unless_it_leaves_metadata() {
    let (_clock, store, client) = setup();
    let lease = client.try_acquire("l", &opts()).await.expect("acquire");
    lease.release().await.expect("release");
    let lease = client.try_acquire("l", &opts()).await.expect("acquire again");
    let with_meta = ReleaseRequest { meta: Some("mark".into()), ..ReleaseRequest::default() };
    lease.release_with(with_meta).await.expect("release with metadata");
    assert_eq!(store.durable_flags("l"), [true, false, true, true]);
}

#[tokio::test(start_paused = true)]
async fn a_crash_that_loses_a_release_leaves_the_grant_to_expire_and_never_reissues_its_token() {
    let (clock, store, client) = setup();
    let first = client.try_acquire("l", &opts()).await.expect("acquire");
    let token = first.token();
    first.release().await.expect("release");
    assert_eq!(store.crash().await, 1, "the crash must lose the release");
    // The lost release reads as a holder that crashed with the machine: the
    // lease is busy, not granted to a second holder...
    let other = CasStore::new(store.clone(), clock.shared(), CasOptions::default());
    let other = Client::new(Arc::new(other));
    assert!(other.try_acquire("l", &opts()).await.is_err(), "a lost release must not free the lease early");
    // ...until its deadline, and the next token is above the one granted.
    clock.advance(Duration::from_secs(20));
    let next = other.try_acquire("l", &opts()).await.expect("acquire after the deadline");
    assert!(next.token() > token, "token {} reissued after {token}", next.token());
}
