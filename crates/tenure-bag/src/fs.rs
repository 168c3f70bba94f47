//! Bags on a local or NFS file system: a bag of single-writer logs
//! (`docs/design/closable-bags.md`).
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
//! <log>/g000000431337/sweep.<lo>.<hi>            a sweep's intent (see crate::protocol)
//! <log>/g000000431337/sweep.<lo>.<hi>.done       its result: the buckets it closed empty
//! <log>/snapshots/000000000490896.snap           compacted chunks
//! ```
//!
//! # Operations, and why each is NFS-safe
//!
//! Only the operations of `docs/design/closable-bags.md#nfs-safe-file-operations`
//! are used; **no rename**, no locks, and
//! nothing depends on permission bits. All of them go through
//! [`tenure_file::fs::Dir`], the directory lease store's primitives (see
//! "Entries tenure did not write" below).
//!
//! - *Create a bucket*: `mkdir` (the server decides; `EEXIST` is fine).
//! - *Append*: the writer's data file is created with `O_CREAT|O_EXCL` (enforced by
//!   the server; on `EEXIST` the writer moves to the next generation name, so no
//!   two processes ever write one file), then every batch is `open(O_APPEND)` →
//!   one `write(2)` → `fsync` → `close(2)`: close-to-open consistency makes it
//!   visible to any process that opens the file afterwards. A writer moves to a
//!   new data file before one would grow past [`MAX_ITEM_BYTES`].
//! - *Prelock check*: `open(2)` of the bucket directory first (revalidates NFS's
//!   cached entries, including negative ones), then `fstatat(2)` of `prelock`.
//!   Any entry by that name counts as a prelock.
//! - *Prelock*: `open(O_CREAT|O_EXCL)`, `EEXIST` included — "ensure it exists".
//! - *Listing sizes*: `readdir`, then per data file `open(2)` + `fstat(2)`, which
//!   sees every write closed before the open.
//! - *Manifest*: written to a fresh `manifest.tmp-<random>` (`O_EXCL`), fsynced,
//!   then `link(2)`ed to `manifest`: the server makes exactly one link succeed,
//!   and readers can only ever see a complete manifest.
//! - *Sweep*: the intent is made like a prelock (`O_CREAT|O_EXCL`, `EEXIST`
//!   included), the result published like a manifest (a fresh file, then
//!   `link(2)`, first one wins); the buckets are listed with `readdir` of the
//!   group directory, opened after the intent exists.
//! - *Read*: `open(2)` + `read(2)` of `manifest` and of the first `size` bytes of
//!   each listed file; those bytes never change (files are append-only, single
//!   writer, never truncated or rewritten).
//! - *Read-only hint* (optional): `fchmod` of the data files and the directory.
//!   Correctness never depends on it: root ignores it, and a writer that finds a
//!   prelock after its write learns its fate from the manifest. A writer whose
//!   open is refused (`EACCES`) confirms the close by looking for the manifest
//!   and is told rejected: it wrote nothing.
//!
//! # Entries tenure did not write
//!
//! A log's directory is shared with careless and hostile tenants. Every path
//! below the log's directory (groups, buckets, `snapshots`, files) is opened
//! relative to its parent with `O_NOFOLLOW`, every entry is looked at
//! (`fstatat`, never following a link) before it is opened, only regular files
//! are opened (`O_NONBLOCK`, so nothing can block an open), and every read is
//! capped. So:
//!
//! - a **symlink, directory, FIFO, socket or device named like a data file** is
//!   never opened and never listed in a manifest: closers skip it, readers skip
//!   it (also when an older manifest lists it), and both report it
//!   ([`crate::Skipped`]); a regular file larger than [`MAX_ITEM_BYTES`] likewise;
//! - a **group, bucket or `snapshots` entry that is not a directory** (a symlink
//!   to elsewhere included) is never followed: readers skip and report it;
//!   writers and closers of that bucket fail with [`Error::Corrupt`] naming it;
//! - an odd entry named **`manifest`** leaves its bucket unclosable: readers
//!   report it and read the bucket as open, closers fail naming it; an odd
//!   **`bag.conf`**, or a garbage manifest or configuration, is an
//!   [`Error::Corrupt`] naming the file;
//! - odd **snapshots** are skipped and reported, and their buckets read instead.
//!
//! The log's directory itself is the user's choice and may be a symlink. It is
//! **never created unless asked** ([`FsStorage::with_create`], `?create=true`,
//! `tenure bag … --create`): a missing one is most likely a mount that is not
//! there or a typo, and a log made in its place would be read by nobody. The
//! first write or close then fails naming it; readers see an empty log.
//!
//! # Deadlines
//!
//! Every operation runs on a thread of tokio's blocking pool with a deadline
//! (`timeout=`, default 10 s; see [`tenure_file::offload`]): on a hung NFS or
//! FUSE mount the caller gets an error at the deadline and the thread is
//! abandoned. `io=inline` runs them on the calling task instead, without a
//! deadline (benchmarks, tmpfs).
//!
//! # Durability (`fsync`, on by default; `?fsync=false` for tmpfs and benches)
//!
//! - a batch is fsynced before its writer is told it is accepted; a new data
//!   file's directory (and a new bucket's parent directories) are fsynced once,
//!   when created, so the name survives a power loss too;
//! - a closer fsyncs each data file *after* reading its size, so every byte the
//!   manifest covers is durable before the manifest exists — also bytes of a
//!   writer that was killed before its own fsync;
//! - the manifest is fsynced before it is linked and the directory after;
//! - `close(2)` is checked on every file written, fsync or not: NFS reports
//!   deferred write errors there.
//!
//! The prelock is not fsynced: losing it in a power loss only means the close
//! starts again, and a writer rejected because of it wrote nothing.

use std::ffi::OsStr;
use std::fs::{File, Permissions};
use std::io::{self, ErrorKind};
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use rustix::fs::{Mode, OFlags};
use tenure_core::{Error, Result};
use tenure_file::fs::{Dir, Kind, Opened, Read, close_checked, is_gone, write_all};
use tenure_file::offload::{DEFAULT_TIMEOUT, Offload};

use crate::layout::{
    DATA_SUFFIX, LogConfig, MAX_CONFIG_BYTES, MAX_ITEM_BYTES, MAX_ITEMS, MAX_MANIFEST_BYTES, Manifest,
};
use crate::protocol::{Listed, Loaded, Skipped, Slot, Wrote};

const CONFIG: &str = "bag.conf";
const PRELOCK: &str = "prelock";
const MANIFEST: &str = "manifest";
const SNAPSHOTS: &str = "snapshots";
/// Buckets per group directory: the protocol's sweep groups.
const GROUP_BUCKETS: u64 = crate::protocol::SWEEP_GROUP;
/// Data file generations a writer tries in one bucket before giving up.
const MAX_GENERATION: u32 = 1_000_000;

/// A log in a directory.
#[derive(Clone, Debug)]
pub struct FsStorage {
    url: Arc<str>,
    root: Arc<Path>,
    fsync: bool,
    inline: bool,
    offload: Offload,
    /// Whether a missing log directory may be created.
    create: bool,
    /// Bucket width, for group directory names (known once the config is read).
    width_ms: Arc<OnceLock<u64>>,
}

fn skipped(path: &Path, reason: impl Into<String>) -> Skipped {
    Skipped { path: path.display().to_string(), reason: reason.into() }
}

/// How a listed data file turned out when opened.
enum Sized {
    File(u64),
    Odd(Kind),
    Gone,
}

impl FsStorage {
    /// A log in `root`, fsyncing as documented if `fsync`, each operation with
    /// the default deadline (10 s).
    pub fn new(root: impl Into<PathBuf>, fsync: bool) -> Self {
        let root: PathBuf = root.into();
        let url: Arc<str> = format!("file://{}", root.display()).into();
        let offload = Offload::new(url.clone(), DEFAULT_TIMEOUT);
        Self { url, root: root.into(), fsync, inline: false, offload, create: false, width_ms: Arc::default() }
    }

    /// Gives each file-system operation `timeout` before it is reported as
    /// failed and its thread abandoned.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.offload = Offload::new(self.url.clone(), timeout);
        self
    }

    /// Lets the first write or close create the log's directory (and its
    /// parents) if it does not exist. Off by default (see the module's "Entries
    /// tenure did not write"); directories below it are always made as needed.
    pub fn with_create(mut self, create: bool) -> Self {
        self.create = create;
        self
    }

    /// Runs file operations on the calling task instead of the blocking pool:
    /// faster on local disks, but without a deadline. Needed to drive the
    /// storage without a tokio runtime (the benchmark's threads).
    pub fn with_inline_io(mut self, inline: bool) -> Self {
        self.inline = inline;
        self
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

    fn corrupt(&self, path: &Path, detail: impl Into<String>) -> Error {
        Error::corrupt(&*self.url, path.display().to_string(), detail)
    }

    /// Something tenure did not write sits where a directory of the log belongs.
    fn foreign_dir(&self, path: &Path, kind: Kind) -> Error {
        self.corrupt(
            path,
            format!(
                "it is {kind}, not a directory of the log; tenure never follows or replaces it (remove it by hand)"
            ),
        )
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

    /// The bucket's directory relative to the log's.
    fn bucket_rel(&self, bucket: u64) -> Result<String> {
        Ok(format!("g{:012}/{bucket:016}", bucket / self.width()? / GROUP_BUCKETS))
    }

    /// The directory of `bucket`.
    pub fn bucket_dir(&self, bucket: u64) -> Result<PathBuf> {
        Ok(self.root.join(self.bucket_rel(bucket)?))
    }

    /// The log's directory; `None` if it does not exist and `create` is not
    /// set, an error naming it if `create` is set but the log may not create it.
    fn root_dir(&self, create: bool) -> Result<Option<Dir>> {
        match Dir::open_root(&self.root, create && self.create) {
            Ok(None) if create => Err(tenure_file::missing_root(&self.url, &self.root)),
            opened => opened.map_err(|e| self.err("opening the log", &self.root, e)),
        }
    }

    /// `rel` below the log's directory, never following a link: `None` if absent,
    /// [`Error::Corrupt`] if something else is in the way. With `create`, makes
    /// what is missing.
    fn sub_dir(&self, rel: &str, create: bool) -> Result<Option<Dir>> {
        let Some(root) = self.root_dir(create)? else { return Ok(None) };
        match root.open_dir(rel, create, self.fsync) {
            Ok(Opened::Dir(d)) => Ok(Some(d)),
            Ok(Opened::Absent) => Ok(None),
            Ok(Opened::Foreign { path, kind }) => Err(self.foreign_dir(&path, kind)),
            Err(e) if is_gone(&e) => Ok(None),
            Err(e) => Err(self.err("opening", &self.root.join(rel), e)),
        }
    }

    /// The bucket's directory, made if missing.
    fn bucket_dir_made(&self, bucket: u64) -> Result<Dir> {
        let rel = self.bucket_rel(bucket)?;
        self.sub_dir(&rel, true)?
            .ok_or_else(|| Error::store(&*self.url, format!("creating bucket {bucket}"), "it vanished at once"))
    }

    fn kind_of(&self, dir: &Dir, name: &str) -> Result<Option<Kind>> {
        dir.kind(OsStr::new(name)).map_err(|e| self.err("looking at", &dir.path().join(name), e))
    }

    pub(crate) fn load_config_blocking(&self) -> Result<Option<LogConfig>> {
        let Some(root) = self.root_dir(false)? else { return Ok(None) };
        let path = self.root.join(CONFIG);
        match root.read(CONFIG, MAX_CONFIG_BYTES).map_err(|e| self.err("reading the configuration", &path, e))? {
            Read::Absent => Ok(None),
            Read::File { bytes, .. } => LogConfig::parse(&bytes).map(Some).map_err(|d| self.corrupt(&path, d)),
            Read::Foreign { kind, .. } => {
                Err(self.corrupt(&path, format!("it is {kind}, not a configuration tenure wrote; never followed")))
            }
            Read::TooLarge { size, .. } => Err(self
                .corrupt(&path, format!("it holds {size} bytes, more than a configuration may ({MAX_CONFIG_BYTES})"))),
        }
    }

    fn create_config_blocking(&self, cfg: &LogConfig) -> Result<()> {
        let root = self
            .root_dir(true)?
            .ok_or_else(|| Error::store(&*self.url, "creating the log", "its directory vanished at once"))?;
        root.publish(CONFIG, cfg.encode().as_bytes(), self.fsync)
            .map_err(|e| self.err("writing the configuration", &self.root.join(CONFIG), e))?;
        Ok(())
    }

    fn write_blocking(&self, bucket: u64, slot: &mut Slot, writer: &str, frame: &[u8]) -> Result<Wrote> {
        let len = frame.len() as u64;
        // A data file never grows past the cap readers hold it to.
        if slot.item.is_some() && slot.end.checked_add(len).is_none_or(|end| end > MAX_ITEM_BYTES) {
            slot.poisoned = true;
        }
        let new_file = slot.item.is_none() || slot.poisoned;
        // Directories are only made when a data file is created: an existing
        // slot's file is "a file that's expected to exist".
        let dir = match self.sub_dir(&self.bucket_rel(bucket)?, new_file)? {
            Some(dir) => dir,
            None => return Err(Error::store(&*self.url, format!("appending to bucket {bucket}"), "it vanished")),
        };
        if new_file {
            if slot.poisoned {
                slot.generation = slot.generation.saturating_add(1);
            }
            // A name nobody else has: O_EXCL, moving on past names that exist (an
            // earlier incarnation of this writer id, a file we gave up on, or
            // anything else someone left there).
            let (item, fd) = loop {
                let item = format!("{writer}.{}{DATA_SUFFIX}", slot.generation);
                match dir.create_excl(&item, OFlags::WRONLY | OFlags::APPEND) {
                    Ok(fd) => break (item, fd),
                    Err(e) if e.kind() == ErrorKind::AlreadyExists && slot.generation < MAX_GENERATION => {
                        slot.generation += 1
                    }
                    // A read-only bucket (the optional hint) is a sign of a close;
                    // the manifest says for certain. Nothing was written.
                    Err(e) if e.kind() == ErrorKind::PermissionDenied && manifest_exists(&dir) => {
                        return Ok(Wrote::ClosedBefore);
                    }
                    Err(e) => return Err(self.err("creating a data file", &dir.path().join(&item), e)),
                }
            };
            let path = dir.path().join(&item);
            close_checked(fd).map_err(|e| self.err("creating a data file", &path, e))?;
            if self.fsync {
                dir.sync().map_err(|e| self.err("syncing a bucket", dir.path(), e))?;
            }
            *slot = Slot { item: Some(item), generation: slot.generation, end: 0, poisoned: false };
            if self.prelock_blocking(bucket)? {
                return Ok(Wrote::ClosedBefore);
            }
        }
        let Some(item) = slot.item.clone() else {
            return Err(Error::store(&*self.url, "appending", "no data file"));
        };
        let path = dir.path().join(&item);
        let fd = match dir.open_file(&item, OFlags::WRONLY | OFlags::APPEND) {
            Ok(fd) => fd,
            // Read-only after a close (the hint): not opened, so nothing written.
            Err(e) if e.kind() == ErrorKind::PermissionDenied && manifest_exists(&dir) => {
                return Ok(Wrote::ClosedBefore);
            }
            // Replaced by something else: never write there again.
            Err(e) => {
                slot.poisoned = true;
                return Err(self.err("opening a data file", &path, e));
            }
        };
        let fsync = self.fsync;
        let written = (move || {
            write_all(&fd, frame)?;
            if fsync {
                rustix::fs::fdatasync(&fd)?;
            }
            close_checked(fd)
        })();
        if let Err(e) = written {
            // Some of the frame may be on disk: never append after it.
            slot.poisoned = true;
            return Err(self.err("appending a batch", &path, e));
        }
        slot.end = slot.end.saturating_add(len);
        Ok(Wrote::Landed { item, end: slot.end })
    }

    fn prelock_blocking(&self, bucket: u64) -> Result<bool> {
        // Opening the directory revalidates NFS's cache of its entries.
        let Some(dir) = self.sub_dir(&self.bucket_rel(bucket)?, false)? else { return Ok(false) };
        Ok(self.kind_of(&dir, PRELOCK)?.is_some())
    }

    fn ensure_prelock_blocking(&self, bucket: u64) -> Result<()> {
        let dir = self.bucket_dir_made(bucket)?;
        match dir.create_excl(PRELOCK, OFlags::WRONLY) {
            Ok(fd) => close_checked(fd).map_err(|e| self.err("creating the prelock", &dir.path().join(PRELOCK), e)),
            // Whatever holds the name, a close has begun.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(self.err("creating the prelock", &dir.path().join(PRELOCK), e)),
        }
    }

    /// Opens the data file `name` to size it (and make it durable): only a
    /// regular file, never following a link or blocking.
    fn size_of(&self, dir: &Dir, name: &str, durable: bool) -> Result<Sized> {
        let path = dir.path().join(name);
        let fd = match dir.open_file(name, OFlags::RDONLY) {
            Ok(fd) => fd,
            Err(e) if is_gone(&e) => return Ok(Sized::Gone),
            // Swapped for something else since the listing (ELOOP for a link)?
            Err(e) => {
                return match self.kind_of(dir, name)? {
                    None => Ok(Sized::Gone),
                    Some(kind) if kind != Kind::File => Ok(Sized::Odd(kind)),
                    Some(_) => Err(self.err("opening a data file", &path, e)),
                };
            }
        };
        let file = File::from(fd);
        let size = file.metadata().map_err(|e| self.err("sizing a data file", &path, e))?.len();
        if durable {
            file.sync_all().map_err(|e| self.err("syncing a data file", &path, e))?;
        }
        close_checked(OwnedFd::from(file)).map_err(|e| self.err("closing a data file", &path, e))?;
        Ok(Sized::File(size))
    }

    fn list_items_blocking(&self, bucket: u64, durable: bool) -> Result<Option<Listed<(String, u64)>>> {
        let Some(dir) = self.sub_dir(&self.bucket_rel(bucket)?, false)? else { return Ok(None) };
        let (mut names, mut over) = (Vec::new(), false);
        dir.each(|name, kind| {
            let Some(name) = name.to_str().filter(|n| crate::frame::is_item_name(n, DATA_SUFFIX)) else { return };
            if names.len() < MAX_ITEMS {
                names.push((name.to_string(), kind));
            } else {
                over = true;
            }
        })
        .map_err(|e| self.err("listing a bucket", dir.path(), e))?;
        if over {
            return Err(self.corrupt(dir.path(), format!("it holds more than {MAX_ITEMS} data files")));
        }
        let mut out = Listed::default();
        for (name, kind) in names {
            let path = dir.path().join(&name);
            let kind = match kind {
                Kind::Other => match self.kind_of(&dir, &name)? {
                    Some(kind) => kind,
                    None => continue,
                },
                kind => kind,
            };
            let odd = |kind: Kind| skipped(&path, format!("{kind} named like a data file: not listed"));
            if kind != Kind::File {
                out.skipped.push(odd(kind));
                continue;
            }
            match self.size_of(&dir, &name, durable)? {
                Sized::File(size) if size > MAX_ITEM_BYTES => out.skipped.push(skipped(
                    &path,
                    format!("{size} bytes, more than a data file holds ({MAX_ITEM_BYTES}): not listed"),
                )),
                Sized::File(size) => out.found.push((name, size)),
                Sized::Odd(kind) => out.skipped.push(odd(kind)),
                Sized::Gone => {}
            }
        }
        out.found.sort();
        Ok(Some(out))
    }

    fn load_manifest_blocking(&self, bucket: u64) -> Result<Loaded<Manifest>> {
        let Some(dir) = self.sub_dir(&self.bucket_rel(bucket)?, false)? else { return Ok(Loaded::Absent) };
        let path = dir.path().join(MANIFEST);
        match dir.read(MANIFEST, MAX_MANIFEST_BYTES).map_err(|e| self.err("reading a manifest", &path, e))? {
            Read::Absent => Ok(Loaded::Absent),
            Read::File { bytes, .. } => {
                Manifest::parse(&bytes, bucket).map(Loaded::Found).map_err(|d| self.corrupt(&path, d))
            }
            Read::Foreign { kind, .. } => Ok(Loaded::Odd(skipped(
                &path,
                format!("{kind} named manifest, not a manifest tenure wrote: the bucket cannot be closed"),
            ))),
            Read::TooLarge { size, .. } => {
                Err(self
                    .corrupt(&path, format!("it holds {size} bytes, more than a manifest may ({MAX_MANIFEST_BYTES})")))
            }
        }
    }

    fn publish_manifest_blocking(&self, m: &Manifest) -> Result<bool> {
        let dir = self.bucket_dir_made(m.bucket)?;
        dir.publish(MANIFEST, &m.encode(), self.fsync)
            .map_err(|e| self.err("publishing the manifest", &dir.path().join(MANIFEST), e))
    }

    fn read_item_blocking(&self, bucket: u64, item: &str, covered: Option<u64>) -> Result<Loaded<Bytes>> {
        // Only a plain name a writer makes: never a path elsewhere.
        if !crate::frame::is_item_name(item, DATA_SUFFIX) {
            return Err(Error::corrupt(&*self.url, format!("bucket {bucket}"), format!("bad item name {item:?}")));
        }
        let Some(dir) = self.sub_dir(&self.bucket_rel(bucket)?, false)? else { return Ok(Loaded::Absent) };
        let path = dir.path().join(item);
        match dir.read_prefix(item, MAX_ITEM_BYTES as usize, covered) {
            Ok(Read::File { bytes, .. }) => Ok(Loaded::Found(bytes.into())),
            Ok(Read::Absent) => Ok(Loaded::Absent),
            Ok(Read::Foreign { kind, .. }) => {
                Ok(Loaded::Odd(skipped(&path, format!("{kind} named like a data file: not read"))))
            }
            Ok(Read::TooLarge { size, .. }) => Ok(Loaded::Odd(skipped(
                &path,
                format!("{size} bytes, more than a data file holds ({MAX_ITEM_BYTES}): not read"),
            ))),
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                Err(self.corrupt(&path, format!("{e}: data covered by the manifest was lost after the close")))
            }
            Err(e) => Err(self.err("reading a data file", &path, e)),
        }
    }

    fn hint_closed_blocking(&self, m: &Manifest) -> Result<()> {
        let Some(dir) = self.sub_dir(&self.bucket_rel(m.bucket)?, false)? else { return Ok(()) };
        // fchmod of what was opened without following links: never anything else.
        for name in m.items.keys() {
            if let Ok(fd) = dir.open_file(name, OFlags::RDONLY) {
                let _ = File::from(fd).set_permissions(Permissions::from_mode(0o444));
            }
        }
        let _ = rustix::fs::fchmod(&dir, Mode::from(0o555));
        Ok(())
    }
}

/// Whether the bucket has a manifest (a regular file by that name).
fn manifest_exists(dir: &Dir) -> bool {
    matches!(dir.kind(OsStr::new(MANIFEST)), Ok(Some(Kind::File)))
}

mod storage;
mod tree;

pub use storage::{from_dir_url, open, open_with};
