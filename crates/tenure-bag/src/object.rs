//! Bags on an object store (S3, GCS, Azure through `object_store`): a bag of
//! objects closed by a manifest object (`docs/design/closable-bags.md`).
//!
//! # Layout (under the log's prefix)
//!
//! ```text
//! bag.conf                                        configuration (create-if-absent)
//! b/0001767225600000/m/<writer>.<first seq, 20 digits>   one object per batch
//! b/0001767225600000/prelock                      "a close has begun"
//! b/0001767225600000/manifest                     the close's result: objects and sizes
//! w/<lo>.<hi>                                     a sweep's intent (see crate::protocol)
//! w/<lo>.<hi>.done                                its result: the buckets it closed empty
//! s/000000000490896.snap                          compacted chunks
//! ```
//!
//! # Operations
//!
//! - *Append*: `PUT` of a new object with `PutMode::Create` (`If-None-Match: *`);
//!   the name is unique per writer and sequence, so it never overwrites. A PUT
//!   that finds the name taken `GET`s it: our own bytes there are a resent PUT
//!   whose first attempt landed, and count as written. After the
//!   PUT, unless clearly early, the writer `HEAD`s the prelock (seed: "writers
//!   check for a prelock after their PUT"); with read-after-write and list-after-
//!   write consistency (S3 since 2020, GCS, Azure), a close that `PUT`s the
//!   prelock later lists the object.
//! - *Close*: `PUT` prelock create-if-absent, `LIST` the batch objects, `PUT` the
//!   manifest create-if-absent: the store's conditional write makes the first
//!   manifest win; losers and late writers `GET` it.
//! - *Sweep* (buckets nobody wrote to, a group at once): `PUT` the intent
//!   create-if-absent, `LIST` the buckets under `b/`, `PUT` the result
//!   create-if-absent; losers and late writers `GET` it.
//! - *Read*: `GET` the manifest, then each listed object (checked against its
//!   recorded size); without a manifest, `LIST` + `GET` (provisional).
//!
//! Every request has a deadline: `object_store`'s request timeout (30 s by
//! default, `--store-opt timeout=10s`) and connect timeout (5 s), retried at most
//! a few times within a bounded window (see `tenure_object`'s config).
//!
//! Objects tenure did not write are never read past a cap: a configuration,
//! manifest or snapshot larger than tenure writes is refused or skipped as on
//! a file system, a batch object larger than a data file may be is skipped and
//! reported, and a bucket with more than [`MAX_ITEMS`] batch objects cannot be
//! closed.
//!
//! Objects are immutable and every PUT is atomic, so there are no torn batches
//! here; a damaged object is still detected by its frame checksum. Durability is
//! the store's: a successful PUT is durable. Stores that ignore `If-None-Match`
//! would let two manifests race: use the object-store lease backend's probe (or
//! a store known to honour conditional writes).

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{GetOptions, ObjectStore};
use tenure_core::{Error, Result};
use tenure_object::{ObjectBackend, Probe, Provider};

use tenure_core::limits::MAX_TIME_MS;

use crate::frame::MAX_FRAME;
use crate::layout::{
    LogConfig, MAX_CONFIG_BYTES, MAX_ITEM_BYTES, MAX_ITEMS, MAX_MANIFEST_BYTES, MAX_SNAPSHOT_BYTES, MAX_SWEEP_BYTES,
    Manifest, Sweep,
};
use crate::protocol::{Listed, Loaded, SWEEP_GROUP, Skipped, Slot, Storage, Wrote};

/// The range `<lo>.<hi>` (16 digits each) names.
fn parse_sweep_name(name: &str) -> Option<(u64, u64)> {
    let (lo, hi) = name.split_once('.')?;
    let number = |n: &str| (n.len() == 16 && n.bytes().all(|b| b.is_ascii_digit())).then(|| n.parse().ok())?;
    Some((number(lo)?, number(hi)?))
}

/// Most snapshot objects listed (a chunk per hour of 1 s buckets for 100 years
/// is under a million).
const MAX_SNAPSHOTS: usize = 1 << 20;

/// A log under a prefix of an object store.
#[derive(Clone, Debug)]
pub struct ObjectStorage {
    url: Arc<str>,
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    /// The lease store's view of the same objects, for its probe.
    backend: Arc<ObjectBackend>,
}

impl ObjectStorage {
    /// A log under `prefix` of `store`; `url` names it in messages. The store
    /// is taken to be S3-like for the probe's sake (see [`Self::on_backend`]).
    pub fn new(url: impl Into<String>, store: Arc<dyn ObjectStore>, prefix: Path) -> Self {
        let url: String = url.into();
        Self::on_backend(ObjectBackend::new(store, prefix, Provider::S3, url))
    }

    /// A log under the lease backend's prefix of its store, as a URL opens it
    /// (with its provider's quirks known to the probe).
    pub fn on_backend(backend: ObjectBackend) -> Self {
        let url = tenure_core::Backend::url(&backend).into();
        Self {
            url,
            store: backend.object_store().clone(),
            prefix: backend.prefix().clone(),
            backend: Arc::new(backend),
        }
    }

    fn key(&self, rest: &str) -> Path {
        let p = if self.prefix.as_ref().is_empty() { rest.to_string() } else { format!("{}/{rest}", self.prefix) };
        Path::from(p)
    }

    fn bucket_key(bucket: u64) -> String {
        format!("b/{bucket:016}")
    }

    fn err(&self, op: impl Into<String>, e: object_store::Error) -> Error {
        self.backend.error(op, e)
    }

    /// GETs `key`, reading no more than `cap` bytes of it, whatever its
    /// metadata claims: past that it is `Odd`, naming `what` it should have
    /// been (the lease store's capped read, so a fix to it lands once).
    async fn get_capped(&self, key: &Path, cap: u64, what: &str) -> Result<Loaded<Bytes>> {
        let cap = usize::try_from(cap).unwrap_or(usize::MAX);
        match self.backend.read_object(key, cap).await {
            Ok((_, Some(bytes))) => Ok(Loaded::Found(bytes)),
            Ok((meta, None)) => Ok(Loaded::Odd(Skipped {
                path: key.to_string(),
                reason: format!("{} bytes, more than {what} holds ({cap}): not read", meta.size),
            })),
            Err(object_store::Error::NotFound { .. }) => Ok(Loaded::Absent),
            Err(e) => Err(self.err(format!("reading {key}"), e)),
        }
    }

    /// Like [`Self::get_capped`], for what a log cannot do without: an
    /// oversized object is an error naming it.
    async fn get_required(&self, key: &Path, cap: usize, what: &str) -> Result<Option<Bytes>> {
        match self.get_capped(key, cap as u64, what).await? {
            Loaded::Found(bytes) => Ok(Some(bytes)),
            Loaded::Absent => Ok(None),
            Loaded::Odd(odd) => Err(Error::corrupt(&*self.url, odd.path, odd.reason)),
        }
    }

    /// `PUT` create-if-absent: `Ok(false)` if the key existed (the lease
    /// store's conditional write).
    async fn create(&self, key: &Path, bytes: Bytes) -> Result<bool> {
        self.backend.create_object(key, bytes).await.map_err(|e| self.err(format!("creating {key}"), e))
    }

    /// Checks that the store enforces conditional writes, with the lease
    /// store's probe (one probe, so a fix to it lands once): the bag protocol
    /// rests on create-if-absent (prelocks, manifests and batches are all
    /// created only if absent). A few requests, once per handle, before its
    /// first write.
    pub(crate) async fn check_create_if_absent(&self) -> Result<()> {
        match tenure_object::probe(&self.backend).await? {
            Probe::Enforced { .. } => Ok(()),
            Probe::ReadOnly { detail } => Err(Error::unsupported(
                &*self.url,
                format!("these credentials may not write ({detail}): a log can be read with them, not written"),
            )),
            other => Err(Error::unsupported(&*self.url, format!("the store's probe answered {other:?}"))),
        }
    }

    /// Names (relative to `under`) and sizes of the objects under `under`; more
    /// than `max` is corrupt (a prefix flooded with objects tenure did not
    /// write), and is not listed to the end.
    async fn list_under(&self, under: &Path, max: usize) -> Result<Vec<(String, u64)>> {
        let mut stream = self.store.list(Some(under));
        let base = format!("{under}/");
        let mut out = Vec::new();
        while let Some(meta) = stream.try_next().await.map_err(|e| self.err(format!("listing {under}"), e))? {
            if out.len() >= max {
                return Err(Error::corrupt(&*self.url, under.to_string(), format!("more than {max} objects")));
            }
            if let Some(name) = meta.location.as_ref().strip_prefix(&base) {
                out.push((name.to_string(), meta.size));
            }
        }
        Ok(out)
    }
}

impl Storage for ObjectStorage {
    fn url(&self) -> &str {
        &self.url
    }

    async fn load_config(&self) -> Result<Option<LogConfig>> {
        match self.get_required(&self.key("bag.conf"), MAX_CONFIG_BYTES, "a configuration").await? {
            None => Ok(None),
            Some(b) => LogConfig::parse(&b).map(Some).map_err(|d| Error::corrupt(&*self.url, "bag.conf", d)),
        }
    }

    async fn create_config(&self, cfg: &LogConfig) -> Result<()> {
        self.create(&self.key("bag.conf"), Bytes::from(cfg.encode())).await.map(drop)
    }

    async fn write(&self, bucket: u64, _slot: &mut Slot, writer: &str, seq: u64, frame: Bytes) -> Result<Wrote> {
        let item = format!("{writer}.{seq:020}");
        let key = self.key(&format!("{}/m/{item}", Self::bucket_key(bucket)));
        let end = frame.len() as u64;
        if !self.create(&key, frame.clone()).await?
            // `object_store` resends a PUT whose answer was lost (a timeout, a
            // 5xx): if the first one landed, the resend finds it. Our very bytes
            // there mean the batch is in the bucket, whoever put them.
            && !matches!(self.get_capped(&key, end, "a batch").await?, Loaded::Found(b) if b == frame)
        {
            return Err(Error::store(
                &*self.url,
                format!("appending {key}"),
                "another batch object already exists under this name: two writers share one writer id",
            ));
        }
        Ok(Wrote::Landed { item, end })
    }

    async fn prelock_exists(&self, bucket: u64) -> Result<bool> {
        let key = self.key(&format!("{}/prelock", Self::bucket_key(bucket)));
        match self.store.get_opts(&key, GetOptions { head: true, ..Default::default() }).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.err(format!("looking for {key}"), e)),
        }
    }

    async fn ensure_prelock(&self, bucket: u64) -> Result<()> {
        self.create(&self.key(&format!("{}/prelock", Self::bucket_key(bucket))), Bytes::new()).await.map(drop)
    }

    async fn list_items(&self, bucket: u64, _durable: bool) -> Result<Option<Listed<(String, u64)>>> {
        let under = self.key(&Self::bucket_key(bucket));
        // A bucket holds its batches, a prelock and a manifest.
        let all = self.list_under(&under, MAX_ITEMS + 2).await?;
        if all.is_empty() {
            return Ok(None);
        }
        let mut out = Listed::default();
        for (name, size) in all {
            let Some(item) = name.strip_prefix("m/").filter(|n| crate::frame::is_item_name(n, "")) else { continue };
            if size > MAX_ITEM_BYTES {
                out.skipped.push(Skipped {
                    path: format!("{under}/{name}"),
                    reason: format!("{size} bytes, more than a batch holds ({MAX_ITEM_BYTES}): not listed"),
                });
            } else {
                out.found.push((item.to_string(), size));
            }
        }
        out.found.sort();
        Ok(Some(out))
    }

    async fn load_manifest(&self, bucket: u64) -> Result<Loaded<Manifest>> {
        let key = self.key(&format!("{}/manifest", Self::bucket_key(bucket)));
        match self.get_required(&key, MAX_MANIFEST_BYTES, "a manifest").await? {
            None => Ok(Loaded::Absent),
            Some(b) => Manifest::parse(&b, bucket)
                .map(Loaded::Found)
                .map_err(|d| Error::corrupt(&*self.url, key.to_string(), d)),
        }
    }

    async fn publish_manifest(&self, m: &Manifest) -> Result<bool> {
        self.create(&self.key(&format!("{}/manifest", Self::bucket_key(m.bucket))), Bytes::from(m.encode())).await
    }

    async fn read_item(&self, bucket: u64, item: &str, covered: Option<u64>) -> Result<Loaded<Bytes>> {
        // Only a plain name a writer makes: never a key elsewhere.
        if !crate::frame::is_item_name(item, "") {
            return Err(Error::corrupt(&*self.url, format!("bucket {bucket}"), format!("bad item name {item:?}")));
        }
        let key = self.key(&format!("{}/m/{item}", Self::bucket_key(bucket)));
        // One batch per object: at most a frame, whatever a manifest claims.
        let cap = MAX_ITEM_BYTES.min(MAX_FRAME as u64 + 8);
        Ok(match self.get_capped(&key, cap, "a batch").await? {
            Loaded::Found(bytes) => match covered.and_then(|n| usize::try_from(n).ok()) {
                Some(n) if bytes.len() > n => Loaded::Found(bytes.slice(..n)),
                _ => Loaded::Found(bytes),
            },
            other => other,
        })
    }

    async fn hint_closed(&self, _m: &Manifest) {}

    async fn list_buckets(&self, from: u64, to: u64) -> Result<Listed<u64>> {
        let base = self.key("b");
        let offset = self.key(&Self::bucket_key(from));
        let mut stream = self.store.list_with_offset(Some(&base), &offset);
        let mut out = BTreeSet::new();
        let strip = format!("{base}/");
        while let Some(meta) = stream.try_next().await.map_err(|e| self.err(format!("listing {base}"), e))? {
            let Some(rest) = meta.location.as_ref().strip_prefix(&strip) else { continue };
            let Some(b) = rest.split('/').next().and_then(|b| b.parse::<u64>().ok()) else { continue };
            // Nothing is stored past the year 9999 (writers refuse it).
            if b >= to || b > MAX_TIME_MS {
                break;
            }
            if b >= from {
                out.insert(b);
            }
        }
        Ok(Listed { found: out.into_iter().collect(), skipped: Vec::new() })
    }

    async fn sweeps(&self, from: u64, to: u64) -> Result<Vec<Sweep>> {
        let mut out: Vec<Sweep> = Vec::new();
        let Some(width) = self.load_config().await?.map(|c| c.width_ms) else { return Ok(out) };
        if from >= to {
            return Ok(out);
        }
        // A sweep covers one group at most: one meeting `from` starts less
        // than a group before it. Names sort as their numbers (fixed width).
        let base = self.key("w");
        let offset = self.key(&format!("w/{:016}", from.saturating_sub(width.saturating_mul(SWEEP_GROUP) + 1)));
        let mut stream = self.store.list_with_offset(Some(&base), &offset);
        let strip = format!("{base}/");
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        while let Some(meta) = stream.try_next().await.map_err(|e| self.err(format!("listing {base}"), e))? {
            let Some(name) = meta.location.as_ref().strip_prefix(&strip) else { continue };
            let Some((lo, hi)) = parse_sweep_name(name.strip_suffix(".done").unwrap_or(name)) else { continue };
            if lo >= to {
                break;
            }
            if from < hi && ranges.last() != Some(&(lo, hi)) {
                ranges.push((lo, hi));
            }
        }
        for (lo, hi) in ranges {
            let key = self.key(&format!("w/{lo:016}.{hi:016}.done"));
            let empty = match self.get_capped(&key, MAX_SWEEP_BYTES as u64, "a sweep").await? {
                Loaded::Found(bytes) => {
                    Sweep::parse(&bytes, lo, hi).map_err(|d| Error::corrupt(&*self.url, key.to_string(), d))?.empty
                }
                Loaded::Absent => None,
                // Too large to be tenure's: never settled, nothing it covers final.
                Loaded::Odd(odd) => {
                    tracing::warn!(
                        path = odd.path,
                        reason = odd.reason,
                        "an object tenure did not write holds a sweep's name"
                    );
                    None
                }
            };
            out.push(Sweep { lo, hi, empty });
        }
        Ok(out)
    }

    async fn ensure_sweep(&self, lo: u64, hi: u64) -> Result<()> {
        self.create(&self.key(&format!("w/{lo:016}.{hi:016}")), Bytes::new()).await.map(drop)
    }

    async fn publish_sweep(&self, sweep: &Sweep) -> Result<bool> {
        let key = self.key(&format!("w/{:016}.{:016}.done", sweep.lo, sweep.hi));
        self.create(&key, Bytes::from(sweep.encode())).await
    }

    async fn list_snapshots(&self) -> Result<Listed<u64>> {
        let mut found: Vec<u64> = self
            .list_under(&self.key("s"), MAX_SNAPSHOTS)
            .await?
            .into_iter()
            .filter_map(|(n, _)| {
                let chunk: u64 = n.strip_suffix(".snap")?.parse().ok()?;
                // Only the name tenure writes counts: `1767225600.snap` next to
                // `000001767225600.snap` is another tenant's, not a second copy.
                (format!("{chunk:015}.snap") == n).then_some(chunk)
            })
            .collect();
        found.sort_unstable();
        found.dedup();
        Ok(Listed { found, skipped: Vec::new() })
    }

    async fn load_snapshot(&self, chunk: u64) -> Result<Loaded<Bytes>> {
        self.get_capped(&self.key(&format!("s/{chunk:015}.snap")), MAX_SNAPSHOT_BYTES as u64, "a snapshot").await
    }

    async fn publish_snapshot(&self, chunk: u64, bytes: Bytes) -> Result<bool> {
        self.create(&self.key(&format!("s/{chunk:015}.snap")), bytes).await
    }
}
