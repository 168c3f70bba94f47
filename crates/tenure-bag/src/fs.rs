//! Bags on a local or NFS file system: a bag of single-writer logs (seed 000's
//! appendix).
//!
//! # Layout
//!
//! ```text
//! <log>/bag.conf                                 configuration (see crate::layout)
//! <log>/g000000431337/                           a group of 4096 buckets
//! <log>/g000000431337/0001767225600000/          one bucket (its start, ms)
//!     host1-4242-9f2c.0.data                     one single-writer data file per writer
//!     prelock                                    "a close has begun"
//!     manifest                                   the close's result: files and sizes
//! <log>/snapshots/000000000490896.snap           compacted chunks
//! ```
//!
//! # Operations, and why each is NFS-safe
//!
//! Only the operations of seed 000's list are used; **no rename**, no locks, and
//! nothing depends on permission bits.
//!
//! - *Create a bucket*: `mkdir` (the server decides; `EEXIST` is fine).
//! - *Append*: the writer's data file is created with `O_CREAT|O_EXCL` (enforced by
//!   the server; on `EEXIST` the writer moves to the next generation name, so no
//!   two processes ever write one file), then every batch is `open(O_APPEND)` →
//!   one `write(2)` → `fsync` → `close(2)`: close-to-open consistency makes it
//!   visible to any process that opens the file afterwards.
//! - *Prelock check*: `open(2)` of the bucket directory first (revalidates NFS's
//!   cached entries, including negative ones), then `stat(2)` of `prelock`.
//! - *Prelock*: `open(O_CREAT)` — "ensure a file exists".
//! - *Listing sizes*: `readdir`, then per data file `open(2)` + `fstat(2)`, which
//!   sees every write closed before the open.
//! - *Manifest*: written to a fresh `manifest.tmp-<random>` (`O_EXCL`), fsynced,
//!   then `link(2)`ed to `manifest`: the server makes exactly one link succeed,
//!   and readers can only ever see a complete manifest.
//! - *Read*: `open(2)` + `read(2)` of `manifest` and of the first `size` bytes of
//!   each listed file; those bytes never change (files are append-only, single
//!   writer, never truncated or rewritten).
//! - *Read-only hint* (optional): `chmod` of the data files and the directory.
//!   Correctness never depends on it: root ignores it, and a writer that finds a
//!   prelock after its write learns its fate from the manifest. A writer whose
//!   open is refused (`EACCES`) confirms the close by opening the manifest and is
//!   told rejected: it wrote nothing.
//!
//! # Durability (`fsync`, on by default; `?fsync=false` for tmpfs and benches)
//!
//! - a batch is fsynced before its writer is told it is accepted; a new data
//!   file's directory (and a new bucket's parent directories) are fsynced once,
//!   when created, so the name survives a power loss too;
//! - a closer fsyncs each data file *after* reading its size, so every byte the
//!   manifest covers is durable before the manifest exists — also bytes of a
//!   writer that was killed before its own fsync;
//! - the manifest is fsynced before it is linked and the directory after.
//!
//! The prelock is not fsynced: losing it in a power loss only means the close
//! starts again, and a writer rejected because of it wrote nothing.

use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use tenure::{Error, Result};

use crate::layout::{LogConfig, Manifest};
use crate::protocol::{Slot, Storage, Wrote};

const CONFIG: &str = "bag.conf";
const PRELOCK: &str = "prelock";
const MANIFEST: &str = "manifest";
const SNAPSHOTS: &str = "snapshots";
const DATA_SUFFIX: &str = ".data";
const GROUP_BUCKETS: u64 = 4096;

/// A log in a directory.
#[derive(Clone, Debug)]
pub struct FsStorage {
    url: Arc<str>,
    root: Arc<Path>,
    fsync: bool,
    /// Bucket width, for group directory names (known once the config is read).
    width_ms: Arc<std::sync::OnceLock<u64>>,
}

fn tmp_name(prefix: &str) -> String {
    format!("{prefix}.tmp-{:016x}", rand::random::<u64>())
}

impl FsStorage {
    /// A log in `root`, fsyncing as documented if `fsync`.
    pub fn new(root: impl Into<PathBuf>, fsync: bool) -> Self {
        let root: PathBuf = root.into();
        Self { url: format!("file://{}", root.display()).into(), root: root.into(), fsync, width_ms: Arc::default() }
    }

    /// Whether it fsyncs.
    pub fn fsync(&self) -> bool {
        self.fsync
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn err(&self, op: impl Into<String>, path: &Path, e: io::Error) -> Error {
        Error::store(&*self.url, format!("{} ({})", op.into(), path.display()), e)
    }

    fn width(&self) -> Result<u64> {
        if let Some(w) = self.width_ms.get() {
            return Ok(*w);
        }
        let cfg = self
            .load_config_blocking()?
            .ok_or_else(|| Error::store(&*self.url, "opening the log", "it has no configuration (bag.conf)"))?;
        Ok(*self.width_ms.get_or_init(|| cfg.width_ms))
    }

    fn group_dir(&self, bucket: u64) -> Result<PathBuf> {
        Ok(self.root.join(format!("g{:012}", bucket / self.width()? / GROUP_BUCKETS)))
    }

    /// The directory of `bucket`.
    pub fn bucket_dir(&self, bucket: u64) -> Result<PathBuf> {
        Ok(self.group_dir(bucket)?.join(format!("{bucket:016}")))
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        if self.fsync {
            File::open(dir).and_then(|d| d.sync_all()).map_err(|e| self.err("syncing a directory", dir, e))?;
        }
        Ok(())
    }

    /// `mkdir`, fsyncing the parent if this call created it.
    fn ensure_dir(&self, dir: &Path) -> Result<()> {
        match fs::create_dir(dir) {
            Ok(()) => self.sync_dir(dir.parent().unwrap_or(dir)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(self.err("creating a directory", dir, e)),
        }
    }

    fn ensure_bucket(&self, bucket: u64) -> Result<PathBuf> {
        self.ensure_dir(&self.root)?;
        self.ensure_dir(&self.group_dir(bucket)?)?;
        let dir = self.bucket_dir(bucket)?;
        self.ensure_dir(&dir)?;
        Ok(dir)
    }

    /// Writes `bytes` to a fresh temp file in `dir` and links it to `name`:
    /// `Ok(false)` if `name` already existed.
    fn publish(&self, dir: &Path, name: &str, bytes: &[u8]) -> Result<bool> {
        let tmp = dir.join(tmp_name(name));
        let target = dir.join(name);
        let written = (|| {
            let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            f.write_all(bytes)?;
            if self.fsync {
                f.sync_all()?;
            }
            Ok::<_, io::Error>(())
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(self.err(format!("writing {name}"), &tmp, e));
        }
        let linked = fs::hard_link(&tmp, &target);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => {
                self.sync_dir(dir)?;
                Ok(true)
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(self.err(format!("linking {name}"), &target, e)),
        }
    }

    /// Reads a whole small file; `None` if it (or its directory) does not exist.
    fn read_opt(&self, path: &Path, limit: Option<u64>) -> Result<Option<Bytes>> {
        let f = match File::open(path) {
            Ok(f) => f,
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => return Ok(None),
            Err(e) => return Err(self.err("opening", path, e)),
        };
        let mut buf = Vec::new();
        let r = match limit {
            Some(n) => f.take(n).read_to_end(&mut buf),
            None => (&f).read_to_end(&mut buf),
        };
        r.map_err(|e| self.err("reading", path, e))?;
        Ok(Some(buf.into()))
    }

    pub(crate) fn load_config_blocking(&self) -> Result<Option<LogConfig>> {
        let path = self.root.join(CONFIG);
        match self.read_opt(&path, Some(64 << 10))? {
            None => Ok(None),
            Some(b) => LogConfig::parse(&b).map(Some).map_err(|d| Error::corrupt(&*self.url, CONFIG, d)),
        }
    }

    fn write_blocking(&self, bucket: u64, slot: &mut Slot, writer: &str, frame: &[u8]) -> Result<Wrote> {
        let mut created = false;
        // Directories are only ensured when a data file is created: an existing
        // slot's file is "a file that's expected to exist".
        let dir =
            if slot.item.is_none() || slot.poisoned { self.ensure_bucket(bucket)? } else { self.bucket_dir(bucket)? };
        if slot.item.is_none() || slot.poisoned {
            if slot.poisoned {
                slot.generation += 1;
            }
            // A name nobody else has: O_EXCL, moving on past names that exist (an
            // earlier incarnation of this writer id, or a file we gave up on).
            let (item, file) = loop {
                let item = format!("{writer}.{}{DATA_SUFFIX}", slot.generation);
                match OpenOptions::new().append(true).create_new(true).mode(0o644).open(dir.join(&item)) {
                    Ok(f) => break (item, f),
                    Err(e) if e.kind() == ErrorKind::AlreadyExists && slot.generation < 1_000_000 => {
                        slot.generation += 1
                    }
                    // A read-only bucket (the optional hint) is a sign of a close;
                    // the manifest says for certain. Nothing was written.
                    Err(e) if e.kind() == ErrorKind::PermissionDenied && self.manifest_exists(bucket) => {
                        return Ok(Wrote::ClosedBefore);
                    }
                    Err(e) => return Err(self.err("creating a data file", &dir.join(&item), e)),
                }
            };
            drop(file);
            self.sync_dir(&dir)?;
            *slot = Slot { item: Some(item), generation: slot.generation, end: 0, poisoned: false };
            created = true;
        }
        let Some(item) = slot.item.clone() else {
            return Err(Error::store(&*self.url, "appending", "no data file"));
        };
        if created && self.prelock_blocking(bucket)? {
            return Ok(Wrote::ClosedBefore);
        }
        let path = dir.join(&item);
        let mut f = match OpenOptions::new().append(true).open(&path) {
            Ok(f) => f,
            // Read-only after a close (the hint): not opened, so nothing written.
            Err(e) if e.kind() == ErrorKind::PermissionDenied && self.manifest_exists(bucket) => {
                return Ok(Wrote::ClosedBefore);
            }
            Err(e) => return Err(self.err("opening a data file", &path, e)),
        };
        let written = (|| {
            f.write_all(frame)?;
            if self.fsync {
                f.sync_data()?;
            }
            Ok::<_, io::Error>(())
        })();
        if let Err(e) = written {
            // Some of the frame may be on disk: never append after it.
            slot.poisoned = true;
            return Err(self.err("appending a batch", &path, e));
        }
        slot.end += frame.len() as u64;
        Ok(Wrote::Landed { item, end: slot.end })
    }

    fn manifest_exists(&self, bucket: u64) -> bool {
        self.bucket_dir(bucket).is_ok_and(|d| File::open(d.join(MANIFEST)).is_ok())
    }

    fn prelock_blocking(&self, bucket: u64) -> Result<bool> {
        let dir = self.bucket_dir(bucket)?;
        // Opening the directory revalidates NFS's cache of its entries.
        match File::open(&dir) {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(self.err("opening a bucket", &dir, e)),
        }
        match fs::metadata(dir.join(PRELOCK)) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.err("looking for the prelock", &dir, e)),
        }
    }

    fn ensure_prelock_blocking(&self, bucket: u64) -> Result<()> {
        let dir = self.ensure_bucket(bucket)?;
        let path = dir.join(PRELOCK);
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| self.err("creating the prelock", &path, e))?;
        Ok(())
    }

    fn list_items_blocking(&self, bucket: u64, durable: bool) -> Result<Option<Vec<(String, u64)>>> {
        let dir = self.bucket_dir(bucket)?;
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => return Ok(None),
            Err(e) => return Err(self.err("listing a bucket", &dir, e)),
        };
        let mut items = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| self.err("listing a bucket", &dir, e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
            if !crate::frame::is_item_name(&name, DATA_SUFFIX) {
                continue;
            }
            let path = dir.join(&name);
            let f = File::open(&path).map_err(|e| self.err("opening a data file", &path, e))?;
            let size = f.metadata().map_err(|e| self.err("sizing a data file", &path, e))?.len();
            if durable {
                f.sync_all().map_err(|e| self.err("syncing a data file", &path, e))?;
            }
            items.push((name, size));
        }
        items.sort();
        Ok(Some(items))
    }

    fn list_buckets_blocking(&self, from: u64, to: u64) -> Result<Vec<u64>> {
        let width = match self.width_ms.get() {
            Some(w) => *w,
            None => match self.load_config_blocking()? {
                Some(c) => c.width_ms,
                None => return Ok(Vec::new()),
            },
        };
        let (g_from, g_to) = (from / width / GROUP_BUCKETS, to.saturating_sub(1) / width / GROUP_BUCKETS);
        let mut out = Vec::new();
        for group in list_numbers(&self.root, "g").map_err(|e| self.err("listing the log", &self.root, e))? {
            if group < g_from || group > g_to {
                continue;
            }
            let dir = self.root.join(format!("g{group:012}"));
            let buckets = list_numbers(&dir, "").map_err(|e| self.err("listing buckets", &dir, e))?;
            out.extend(buckets.into_iter().filter(|b| (from..to).contains(b)));
        }
        out.sort_unstable();
        Ok(out)
    }
}

/// Numbers `n` of entries named `<prefix><n>` in `dir` (nothing if it is absent).
fn list_numbers(dir: &Path, prefix: &str) -> io::Result<Vec<u64>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let name = entry?.file_name();
        if let Some(n) = name.to_str().and_then(|n| n.strip_prefix(prefix)).and_then(|n| n.parse().ok()) {
            out.push(n);
        }
    }
    Ok(out)
}

impl Storage for FsStorage {
    fn url(&self) -> &str {
        &self.url
    }

    async fn load_config(&self) -> Result<Option<LogConfig>> {
        self.load_config_blocking()
    }

    async fn create_config(&self, cfg: &LogConfig) -> Result<()> {
        fs::create_dir_all(&self.root).map_err(|e| self.err("creating the log directory", &self.root, e))?;
        self.publish(&self.root, CONFIG, cfg.encode().as_bytes())?;
        Ok(())
    }

    async fn write(&self, bucket: u64, slot: &mut Slot, writer: &str, _seq: u64, frame: &[u8]) -> Result<Wrote> {
        self.write_blocking(bucket, slot, writer, frame)
    }

    async fn prelock_exists(&self, bucket: u64) -> Result<bool> {
        self.prelock_blocking(bucket)
    }

    async fn ensure_prelock(&self, bucket: u64) -> Result<()> {
        self.ensure_prelock_blocking(bucket)
    }

    async fn list_items(&self, bucket: u64, durable: bool) -> Result<Option<Vec<(String, u64)>>> {
        self.list_items_blocking(bucket, durable)
    }

    async fn load_manifest(&self, bucket: u64) -> Result<Option<Manifest>> {
        let path = self.bucket_dir(bucket)?.join(MANIFEST);
        match self.read_opt(&path, Some(64 << 20))? {
            None => Ok(None),
            Some(b) => Manifest::parse(&b, bucket)
                .map(Some)
                .map_err(|d| Error::corrupt(&*self.url, path.display().to_string(), d)),
        }
    }

    async fn publish_manifest(&self, m: &Manifest) -> Result<bool> {
        let dir = self.ensure_bucket(m.bucket)?;
        self.publish(&dir, MANIFEST, &m.encode())
    }

    async fn read_item(&self, bucket: u64, item: &str, covered: Option<u64>) -> Result<Bytes> {
        if item.contains('/') || item.starts_with('.') {
            return Err(Error::corrupt(&*self.url, format!("bucket {bucket}"), format!("bad item name {item:?}")));
        }
        let path = self.bucket_dir(bucket)?.join(item);
        self.read_opt(&path, covered)?.ok_or_else(|| {
            Error::corrupt(&*self.url, path.display().to_string(), "a data file listed in the manifest is missing")
        })
    }

    async fn hint_closed(&self, m: &Manifest) {
        let Ok(dir) = self.bucket_dir(m.bucket) else { return };
        for name in m.items.keys() {
            let _ = fs::set_permissions(dir.join(name), fs::Permissions::from_mode(0o444));
        }
        let _ = fs::set_permissions(&dir, fs::Permissions::from_mode(0o555));
    }

    async fn list_buckets(&self, from: u64, to: u64) -> Result<Vec<u64>> {
        self.list_buckets_blocking(from, to)
    }

    async fn list_snapshots(&self) -> Result<Vec<u64>> {
        let dir = self.root.join(SNAPSHOTS);
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.err("listing snapshots", &dir, e)),
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            if let Some(n) = name.to_str().and_then(|n| n.strip_suffix(".snap")).and_then(|n| n.parse().ok()) {
                out.push(n);
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    async fn load_snapshot(&self, chunk: u64) -> Result<Option<Bytes>> {
        self.read_opt(&self.root.join(SNAPSHOTS).join(format!("{chunk:015}.snap")), None)
    }

    async fn publish_snapshot(&self, chunk: u64, bytes: Bytes) -> Result<bool> {
        let dir = self.root.join(SNAPSHOTS);
        self.ensure_dir(&dir)?;
        self.publish(&dir, &format!("{chunk:015}.snap"), &bytes)
    }
}

/// Opens `file:///dir[?fsync=false]` or a plain path.
pub fn open(url: &str) -> Result<FsStorage> {
    let invalid = |reason: &str| Error::InvalidStore { url: url.into(), reason: reason.into() };
    let (path, query) = match url.strip_prefix("file://") {
        Some(rest) => {
            let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
            if !path.starts_with('/') {
                return Err(invalid("a file:// URL needs an absolute path, as in file:///var/lib/log"));
            }
            (path, query)
        }
        None => (url, ""),
    };
    if path.is_empty() {
        return Err(invalid("the directory is empty"));
    }
    let mut fsync = true;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("fsync", "true" | "1")) => fsync = true,
            Some(("fsync", "false" | "0")) => fsync = false,
            _ => return Err(invalid(&format!("unknown option {pair:?} (known: fsync=true|false)"))),
        }
    }
    Ok(FsStorage::new(path, fsync))
}
