//! The storage operations with their deadlines, and opening a log by URL.

use std::collections::BTreeMap;

use bytes::Bytes;
use tenure_core::Result;

use super::FsStorage;
use crate::layout::{LogConfig, Manifest, Sweep};
use crate::protocol::{Listed, Loaded, Slot, Storage, Wrote};

impl FsStorage {
    /// Runs `f` on a blocking thread with the deadline, or inline when so set.
    async fn run<T: Send + 'static>(
        &self,
        what: impl Into<String>,
        f: impl FnOnce(&FsStorage) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        if self.inline {
            return f(self);
        }
        let this = self.clone();
        self.offload.run(&what.into(), move || f(&this)).await
    }
}

impl Storage for FsStorage {
    fn url(&self) -> &str {
        &self.url
    }

    async fn load_config(&self) -> Result<Option<LogConfig>> {
        self.run("reading the configuration", |s| s.load_config_blocking()).await
    }

    async fn create_config(&self, cfg: &LogConfig) -> Result<()> {
        let cfg = *cfg;
        self.run("creating the log", move |s| s.create_config_blocking(&cfg)).await
    }

    async fn write(&self, bucket: u64, slot: &mut Slot, writer: &str, _seq: u64, frame: Bytes) -> Result<Wrote> {
        let (mut mine, writer) = (slot.clone(), writer.to_string());
        let ran = self
            .run(format!("appending to bucket {bucket}"), move |s| {
                let wrote = s.write_blocking(bucket, &mut mine, &writer, &frame);
                Ok((wrote, mine))
            })
            .await;
        match ran {
            Ok((wrote, after)) => {
                *slot = after;
                wrote
            }
            // Past the deadline the write may still land: never append after it.
            Err(e) => {
                slot.poisoned = true;
                Err(e)
            }
        }
    }

    async fn prelock_exists(&self, bucket: u64) -> Result<bool> {
        self.run(format!("looking for the prelock of bucket {bucket}"), move |s| s.prelock_blocking(bucket)).await
    }

    async fn ensure_prelock(&self, bucket: u64) -> Result<()> {
        self.run(format!("prelocking bucket {bucket}"), move |s| s.ensure_prelock_blocking(bucket)).await
    }

    async fn list_items(&self, bucket: u64, durable: bool) -> Result<Option<Listed<(String, u64)>>> {
        self.run(format!("listing bucket {bucket}"), move |s| s.list_items_blocking(bucket, durable)).await
    }

    async fn load_manifest(&self, bucket: u64) -> Result<Loaded<Manifest>> {
        self.run(format!("reading the manifest of bucket {bucket}"), move |s| s.load_manifest_blocking(bucket)).await
    }

    async fn publish_manifest(&self, m: &Manifest) -> Result<bool> {
        let m = m.clone();
        self.run(format!("publishing the manifest of bucket {}", m.bucket), move |s| s.publish_manifest_blocking(&m))
            .await
    }

    async fn read_item(&self, bucket: u64, item: &str, covered: Option<u64>) -> Result<Loaded<Bytes>> {
        let item = item.to_string();
        self.run(format!("reading bucket {bucket}"), move |s| s.read_item_blocking(bucket, &item, covered)).await
    }

    async fn hint_closed(&self, m: &Manifest) {
        let m = m.clone();
        if let Err(e) = self.run("marking a closed bucket read-only", move |s| s.hint_closed_blocking(&m)).await {
            tracing::debug!(error = %e, "the read-only hint failed (only a hint)");
        }
    }

    async fn list_buckets(&self, from: u64, to: u64) -> Result<Listed<u64>> {
        self.run("listing buckets", move |s| s.list_buckets_blocking(from, to)).await
    }

    async fn sweeps(&self, from: u64, to: u64) -> Result<Vec<Sweep>> {
        self.run("listing sweeps", move |s| s.sweeps_blocking(from, to)).await
    }

    async fn ensure_sweep(&self, lo: u64, hi: u64) -> Result<()> {
        self.run(format!("sweeping buckets {lo} to {hi}"), move |s| s.ensure_sweep_blocking(lo, hi)).await
    }

    async fn publish_sweep(&self, sweep: &Sweep) -> Result<bool> {
        let sweep = sweep.clone();
        self.run("publishing a sweep", move |s| s.publish_sweep_blocking(&sweep)).await
    }

    async fn list_snapshots(&self) -> Result<Listed<u64>> {
        self.run("listing snapshots", |s| s.list_snapshots_blocking()).await
    }

    async fn load_snapshot(&self, chunk: u64) -> Result<Loaded<Bytes>> {
        self.run(format!("reading snapshot {chunk}"), move |s| s.load_snapshot_blocking(chunk)).await
    }

    async fn publish_snapshot(&self, chunk: u64, bytes: Bytes) -> Result<bool> {
        self.run(format!("publishing snapshot {chunk}"), move |s| s.publish_snapshot_blocking(chunk, &bytes)).await
    }
}

/// Opens `file:///dir[?fsync=false&timeout=10s&io=inline]` or a plain path.
pub fn open(url: &str) -> Result<FsStorage> {
    open_with(url, &BTreeMap::new())
}

/// Like [`open`], with settings given apart from the URL (`--store-opt
/// timeout=30s`), which take the same keys as the query and override it:
/// `fsync=true|false`, `timeout=DURATION` (10 ms to 10 years, default 10 s),
/// `io=pool|inline`, `create=true|false` (default false: a directory that does
/// not exist is an error at the first write, not created).
pub fn open_with(url: &str, params: &BTreeMap<String, String>) -> Result<FsStorage> {
    Ok(from_dir_url(&tenure_file::DirUrl::parse(url, params)?))
}

/// The storage a parsed directory URL describes.
pub fn from_dir_url(d: &tenure_file::DirUrl) -> FsStorage {
    FsStorage::new(d.path.clone(), d.fsync).with_timeout(d.timeout).with_inline_io(d.inline).with_create(d.create)
}
