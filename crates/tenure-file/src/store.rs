//! `file:///dir` (or a plain path): a [`Backend`] on a local or NFS directory.
//!
//! # Layout
//!
//! Key `a/b` is the directory `<root>/a/b/`. Each write of the key creates a new
//! immutable file `~NNNNNNNNNNNNNNNNNNNN` (the version, 20 digits); the current
//! value is the highest version. Lease-name segments never start with `~`, so
//! these files can never collide with a child key's directory.
//!
//! ```text
//! <root>/deploy/~00000000000000000041
//! <root>/deploy/~00000000000000000042      <- current
//! <root>/deploy/prod/~00000000000000000007 <- key "deploy/prod"
//! ```
//!
//! # Operations (only NFS-safe ones)
//!
//! See `docs/design/closable-bags.md#nfs-safe-file-operations` for why each is safe.
//!
//! Every operation goes through [`crate::fs::Dir`]: relative to an open
//! directory, opening each lease-name segment with `O_NOFOLLOW | O_DIRECTORY`, so
//! nothing in the store can send tenure elsewhere (see "Entries tenure did not
//! write" below).
//!
//! - **read**: list the directory (`readdir`; opening it also revalidates NFS's
//!   cached entries), then `fstatat` + `open` + `read` of the highest version.
//! - **conditional write** from version `n` (create: from `0`): write the value to
//!   a fresh `~tmp-<random>` file opened with `O_CREAT|O_EXCL` and close it
//!   (checking the close: NFS reports deferred write errors there), then
//!   `link(2)` it to `~<n+1>`. `link` fails with `EEXIST` if anyone else already
//!   wrote `n+1`: that is the compare-and-swap, and it is enforced by the NFS
//!   server. Readers only ever see fully written versions. The temp name is then
//!   unlinked.
//! - **no `rename`** (not atomic to NFS clients), **no `flock`/`fcntl`** locks, and
//!   nothing relies on permission bits (root ignores them).
//!
//! # Entries tenure did not write
//!
//! The store is shared with careless and hostile tenants:
//! - a **version entry that is not a regular file** (a directory, a symlink —
//!   dangling or not —, a FIFO, a device) or a file over
//!   [`tenure_core::limits::MAX_RECORD_BYTES`] is never opened or read: it is reported as
//!   [`Stored::foreign`] at its version, so the lease counts as corrupt and is
//!   judged by its age like any unreadable record, then replaced by a write on top;
//! - a **lease directory (or a directory on the way) that is a symlink or not a
//!   directory** is never followed, written through or replaced: operations on
//!   that lease fail with [`Error::Corrupt`] naming the path, and listings show
//!   it, so that `tenure status` reports it;
//! - **version numbers above the token space** (`~18446744073709551615`) are not
//!   tenure's and are ignored, so nobody can make the next version overflow.
//!
//! The store's root itself is the user's choice and may be a symlink.
//!
//! # A root that does not exist
//!
//! The root is **never created unless asked** ([`FileBackend::with_create`],
//! `?create=true`, `tenure lock --create`): a root that is missing is most
//! likely an NFS mount that is not there or a typo, and a private directory
//! made in its place would grant leases that exclude nobody. A write then fails
//! with [`Error::InvalidStore`] naming the directory and how to create it;
//! reads see no leases. Lease directories below an existing root are made as
//! needed.
//!
//! # Garbage collection without ABA
//!
//! After each write the writer lists the directory once and deletes versions more
//! than [`KEEP`] below its own. The highest version is never deleted, so the
//! highest version number never decreases, and a slot is only ever collected once
//! the newest version is more than `KEEP` above it. A writer paused for a long time
//! could otherwise re-create a collected slot `n+1` from a stale `n` (ABA); the
//! same listing catches it: if it shows a version more than `KEEP` above the one
//! just linked, the write may or may not have happened (ours was re-created, or
//! more than `KEEP` writes landed on top of it), so it is reported as an error
//! with an unknown outcome, as a network store reports a lost answer, and the
//! caller reads again. Any smaller gap means others wrote on top of a write that
//! did happen: done. Readers likewise list once more after reading version `v`
//! and start over if a version above `v + KEEP` exists, so they never return a
//! re-created slot's value. Both rules are model-checked
//! (`tests/model_file_store.rs`). Temp files left by crashed writers are removed
//! once they are ten minutes old.
//!
//! # Durability
//!
//! By default each temp file is `fsync`ed before it is linked and the directory is
//! `fsync`ed after the link and the collection of old versions (one commit for
//! both), so a version that was reported written survives a power loss of the
//! machine that holds the directory: fencing tokens never go back. (On NFS, `close` already commits the data and the server applies `link`
//! synchronously on `sync` exports.) `?fsync=false` skips both for scratch
//! directories and tmpfs; a power loss may then lose the newest versions. Writes
//! marked [`PutOptions::volatile`] skip both too: a lease's wait line, where a
//! lost or torn record only costs the order of the waiters, never a lease, and a
//! release without metadata, whose loss leaves the durable record of the
//! acquisition (see `docs/file-store.md#what-survives-a-crash`).
//!
//! # Threads and deadlines
//!
//! By default every operation runs on a thread of tokio's blocking pool with a
//! deadline (`?timeout=`, default 10 s; see [`crate::offload::Offload`]): a call
//! stuck in a hung NFS or FUSE mount is abandoned, the caller gets an error at
//! once, and at most a few threads stay stuck. On a local disk the hand-off to
//! another thread costs more than the file operations themselves; `?io=inline`
//! runs them on the calling task instead, without a deadline.
//!
//! # Waiters
//!
//! A waiter on a held lease is woken by inotify when a version file appears in
//! the lease's directory, instead of polling (see its `watch` module); on NFS and other
//! network file systems, where another machine's write raises no event, waiters
//! poll as before.
//!
//! Deleting a key's directory by hand resets its token counter: don't.

use std::ffi::OsStr;
use std::io::{self, ErrorKind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::fs::{Dir, Kind, Opened, Read, is_gone};
use crate::offload::{DEFAULT_TIMEOUT, Offload};
use crate::url::{DirUrl, missing_root};
use tenure_core::Version;
use tenure_core::backend::{Backend, Key, Put, PutMode, PutOptions, Stored, check_key};
use tenure_core::clock::unix_ms;
use tenure_core::limits::{MAX_RECORD_BYTES, MAX_TOKEN};
use tenure_core::{Error, Result};

/// Versions kept below the newest one (older ones are deleted by writers). A
/// write or read is only ambiguous when more than this many writes land while it
/// is paused mid-operation.
pub const KEEP: u64 = 8;
/// Age after which a leftover temp file is removed.
const STALE_TMP: Duration = Duration::from_secs(600);
const VERSION_DIGITS: usize = 20;
/// Temp files one listing remembers for collection (a directory flooded with
/// them is cleaned a bounded slice at a time).
const MAX_TMPS: usize = 256;

/// A versioned register per key, in a directory.
#[derive(Debug, Clone)]
pub struct FileBackend {
    url: Arc<str>,
    root: Arc<Path>,
    fsync: bool,
    inline: bool,
    offload: Offload,
    /// Whether a missing root may be created (see the module's "A root that
    /// does not exist").
    create: bool,
    /// Why the root's mount cannot report changes by other machines, if it
    /// cannot (looked up once; see [`watch`]).
    network: Arc<std::sync::OnceLock<Option<String>>>,
    /// The inotify instance its waiters share (see [`watch`]).
    inotify: watch::Slot,
    /// The locked files of its waiters in wait lines (see [`line`](mod@line)).
    held: line::Held,
}

fn version_file(seq: u64) -> String {
    format!("~{seq:0VERSION_DIGITS$}")
}

/// The version a file name stands for. Numbers above the token space are not
/// tenure's (no store ever gets there one write at a time): ignored, so that
/// nobody can make the next version overflow.
fn parse_version(name: &OsStr) -> Option<u64> {
    let digits = name.to_str()?.strip_prefix('~')?;
    if digits.len() == VERSION_DIGITS && digits.bytes().all(|b| b.is_ascii_digit()) {
        digits.parse().ok().filter(|&v| v < MAX_TOKEN)
    } else {
        None
    }
}

/// What one listing of a key's directory shows.
#[derive(Default)]
struct Scan {
    versions: Vec<u64>,
    tmps: Vec<String>,
}

impl Scan {
    fn max(&self) -> Option<u64> {
        self.versions.iter().copied().max()
    }
}

impl FileBackend {
    /// A store in directory `root`, which must exist (see
    /// [`FileBackend::with_create`]), with fsync on.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root: PathBuf = root.into();
        // Messages show the URL: a relative root as `file://d` would not parse
        // back (a file:// URL needs an absolute path), so show it made absolute.
        let shown =
            if root.is_relative() { std::path::absolute(&root).unwrap_or_else(|_| root.clone()) } else { root.clone() };
        // Percent-encoded, so that a path with `%`, `?` or spaces parses back.
        let url: Arc<str> = url::Url::from_file_path(&shown)
            .map_or_else(|()| format!("file://{}", shown.display()), String::from)
            .into();
        let offload = Offload::new(url.clone(), DEFAULT_TIMEOUT);
        Self {
            url,
            root: root.into(),
            fsync: true,
            inline: false,
            offload,
            create: false,
            network: Arc::default(),
            inotify: Arc::default(),
            held: Arc::default(),
        }
    }

    /// Runs file operations on the calling task instead of the blocking pool:
    /// faster on local disks, but without a deadline — a hung NFS server would
    /// stall the caller.
    pub fn with_inline_io(mut self, inline: bool) -> Self {
        self.inline = inline;
        self
    }

    /// Lets the first write create the root directory (and its parents) if it
    /// does not exist. Off by default: a missing root is most likely a mount
    /// that is not there or a typo, and leases in a directory made in its place
    /// would exclude nobody.
    pub fn with_create(mut self, create: bool) -> Self {
        self.create = create;
        self
    }

    /// Turns fsync of temp files and directories on or off.
    pub fn with_fsync(mut self, fsync: bool) -> Self {
        self.fsync = fsync;
        self
    }

    /// Gives each file-system operation `timeout` (default 10 s) before it is
    /// reported as failed and its thread abandoned (see [`Offload`]).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.offload = Offload::new(self.url.clone(), timeout);
        self
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn err(&self, op: impl Into<String>, path: &Path, e: io::Error) -> Error {
        Error::store(&*self.url, format!("{} ({})", op.into(), path.display()), e)
    }

    /// Something tenure did not write sits where a lease directory belongs.
    fn foreign_dir(&self, key: &str, path: &Path, kind: Kind) -> Error {
        Error::corrupt(
            &*self.url,
            path.display().to_string(),
            format!(
                "lease {key:?}: {} is {kind}, not a lease directory; tenure never follows or replaces it \
                 (remove it by hand to use this lease name again)",
                path.display()
            ),
        )
    }

    /// The key's directory, opened without following links; `None` if absent.
    /// `key` was checked by whoever made it ([`Key`], or the callers below).
    fn key_dir(&self, key: &str, create: bool) -> Result<Option<Dir>> {
        debug_assert!(check_key(key).is_ok(), "{key:?}");
        let root = match Dir::open_root(&self.root, create && self.create) {
            Ok(Some(root)) => root,
            Ok(None) if create => return Err(missing_root(&self.url, &self.root)),
            Ok(None) => return Ok(None),
            Err(e) => return Err(self.err("opening the store", &self.root, e)),
        };
        match root.open_dir(key, create, self.fsync) {
            Ok(Opened::Dir(d)) => Ok(Some(d)),
            Ok(Opened::Absent) => Ok(None),
            Ok(Opened::Foreign { path, kind }) => Err(self.foreign_dir(key, &path, kind)),
            Err(e) if is_gone(&e) => Ok(None),
            Err(e) => Err(self.err(format!("opening the directory of key {key:?}"), &self.root.join(key), e)),
        }
    }

    fn scan(&self, dir: &Dir) -> io::Result<Scan> {
        let mut scan = Scan::default();
        dir.each(|name, _| {
            if let Some(v) = parse_version(name) {
                scan.versions.push(v);
            } else if scan.tmps.len() < MAX_TMPS
                && let Some(tmp) = name.to_str().filter(|n| n.starts_with("~tmp-"))
            {
                scan.tmps.push(tmp.to_string());
            }
        })?;
        Ok(scan)
    }

    /// Reads the highest version of `key`.
    pub fn get_blocking(&self, key: &str) -> Result<Option<Stored>> {
        check_key(key)?;
        self.read_key(key)
    }

    /// [`Self::get_blocking`] of a key already checked.
    fn read_key(&self, key: &str) -> Result<Option<Stored>> {
        // A version can be garbage-collected between the listing and the open,
        // and on NFS the directory itself can be replaced (a stale handle): a
        // newer version then exists, so look again.
        //
        // A version that stays listed but cannot be opened means the listing is
        // not the server's: an NFS client serves a directory removed on the
        // server (or by another client) from its cache until the directory's
        // attributes expire, and every open in it fails. Collection cannot do
        // that (it only removes versions more than KEEP below a newer one, which
        // the listing would show), so the key is treated as gone, as it is on the
        // server.
        let mut unopenable: Option<u64> = None;
        for _ in 0..8 {
            let Some(dir) = self.key_dir(key, false)? else { return Ok(None) };
            let scan = match self.scan(&dir) {
                Ok(s) => s,
                // The directory went away between its open and its listing.
                Err(e) if is_gone(&e) => return Ok(None),
                Err(e) => return Err(self.err(format!("listing key {key:?}"), dir.path(), e)),
            };
            let Some(seq) = scan.max() else { return Ok(None) };
            let name = version_file(seq);
            let path = dir.path().join(&name);
            let read =
                dir.read(&name, MAX_RECORD_BYTES).map_err(|e| self.err(format!("reading key {key:?}"), &path, e))?;
            let stored = match read {
                Read::Absent if unopenable == Some(seq) => {
                    tracing::debug!(key, seq, "a listed version cannot be opened twice over: the directory is gone");
                    return Ok(None);
                }
                Read::Absent => {
                    unopenable = Some(seq);
                    continue;
                }
                Read::File { bytes, modified_ms } => Stored::new(bytes.into(), Version::seq(seq), modified_ms),
                Read::Foreign { kind, modified_ms } => Stored {
                    foreign: Some(format!("{} is {kind}, not a record tenure wrote", path.display())),
                    ..Stored::new(Bytes::new(), Version::seq(seq), modified_ms)
                },
                Read::TooLarge { size, modified_ms } => Stored {
                    foreign: Some(format!(
                        "{} holds {size} bytes, more than a record's {MAX_RECORD_BYTES}",
                        path.display()
                    )),
                    ..Stored::new(Bytes::new(), Version::seq(seq), modified_ms)
                },
            };
            // A reader paused between its listing and its read may have read a
            // collected slot that a stale writer re-created: that can only happen
            // once the newest version is more than KEEP above it. List once more.
            match self.scan(&dir) {
                Ok(again) if again.max().is_some_and(|max| max > seq.saturating_add(KEEP)) => continue,
                Ok(_) => return Ok(Some(stored)),
                Err(e) if is_gone(&e) => continue,
                Err(e) => return Err(self.err(format!("listing key {key:?}"), dir.path(), e)),
            }
        }
        Err(Error::store(&*self.url, format!("reading key {key:?}"), "its versions kept disappearing while being read"))
    }

    /// Writes `value` as the next version of `key` if `mode` holds.
    pub fn put_blocking(&self, key: &str, value: &[u8], mode: &PutMode) -> Result<Put> {
        check_key(key)?;
        self.write_version(key, value, mode, self.fsync)
    }

    /// [`Self::put_blocking`] of a key already checked, with `fsync` of the
    /// file and the directory or without.
    fn write_version(&self, key: &str, value: &[u8], mode: &PutMode, fsync: bool) -> Result<Put> {
        let target = match mode {
            PutMode::Create => 1,
            // Versions this store reads are below MAX_TOKEN: the sum cannot wrap.
            PutMode::Update(Version { seq: Some(seq), .. }) if *seq < MAX_TOKEN => seq + 1,
            PutMode::Update(v) => {
                return Err(Error::store(
                    &*self.url,
                    format!("writing key {key:?}"),
                    format!("version {:?} is not a file-store version", v.tag),
                ));
            }
        };
        let create = matches!(mode, PutMode::Create);
        // The key's directory vanished under an update: the record is gone.
        let Some(dir) = self.key_dir(key, create)? else { return Ok(Put::Conflict) };
        let tmp = format!("~tmp-{:016x}", rand::random::<u64>());
        if let Err(e) = dir.create_new(&tmp, value, fsync) {
            let _ = dir.remove(&tmp);
            if is_gone(&e) && !create {
                return Ok(Put::Conflict);
            }
            return Err(self.err(format!("writing key {key:?}"), &dir.path().join(&tmp), e));
        }
        let name = version_file(target);
        let linked = dir.link(&tmp, &name);
        let _ = dir.remove(&tmp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok(Put::Conflict),
            Err(e) if is_gone(&e) && !create => return Ok(Put::Conflict),
            Err(e) => {
                return Err(self.err(format!("linking the new version of key {key:?}"), &dir.path().join(&name), e));
            }
        }
        let scan = self.scan(&dir).map_err(|e| self.err(format!("listing key {key:?}"), dir.path(), e))?;
        if scan.max().is_some_and(|max| max > target + KEEP) {
            // Either our slot had been collected and we re-created it (ABA: the
            // write did not happen), or more than KEEP writes landed on top of ours
            // since (it did). The listing cannot tell which, so the outcome is
            // unknown: the caller must read again. Our file is below the newest
            // version minus KEEP, collectable either way.
            let _ = dir.remove(&name);
            return Err(Error::store(
                &*self.url,
                format!("writing key {key:?}"),
                format!(
                    "outcome unknown: more than {KEEP} newer versions appeared while version {target} was being written; read it again"
                ),
            ));
        }
        self.collect(&scan, &dir, target);
        // One fsync of the directory after the link and the collection: the
        // link is durable before the write is reported done, and the unlinks
        // ride along in the same commit instead of waiting behind it (on ext4
        // an unlink right after an fsync waits for that journal commit). The
        // unlinks only remove versions more than KEEP below ours, never the
        // newest one before it, so a crash that keeps them and loses the link
        // leaves the record as it was before this write.
        if fsync {
            dir.sync().map_err(|e| self.err(format!("syncing the directory of key {key:?}"), dir.path(), e))?;
        }
        Ok(Put::Done(Version::seq(target)))
    }

    /// Deletes versions more than [`KEEP`] below `newest`, and stale temp files.
    /// Failures are harmless (someone else collected first, or the entry is not
    /// a file tenure wrote) and ignored.
    fn collect(&self, scan: &Scan, dir: &Dir, newest: u64) {
        for &v in scan.versions.iter().filter(|&&v| v + KEEP < newest) {
            let _ = dir.remove(&version_file(v));
        }
        let now = unix_ms(std::time::SystemTime::now());
        for tmp in &scan.tmps {
            let modified = dir.file_size(tmp).ok().flatten().and_then(|(_, m)| m);
            if modified.is_some_and(|m| now.saturating_sub(m) > tenure_core::limits::millis(STALE_TMP)) {
                let _ = dir.remove(tmp);
            }
        }
    }

    /// Keys at or under `prefix`. A symlink (or other odd entry) named like a
    /// lease segment is listed too, so that inspecting it reports what it is.
    pub fn list_blocking(&self, prefix: &str) -> Result<Vec<String>> {
        let root = match Dir::open_root(&self.root, false) {
            Ok(Some(root)) => root,
            Ok(None) => return Ok(Vec::new()),
            Err(e) => return Err(self.err("listing leases", &self.root, e)),
        };
        if !prefix.is_empty() {
            check_key(prefix)?;
        }
        // Depth first, keeping names on the stack rather than open directories:
        // a directory is opened (from the root, never following a link) only
        // when its turn comes, so a listing holds a handful of descriptors
        // however many leases there are.
        let mut keys = Vec::new();
        let mut stack = vec![(prefix.to_string(), 0usize)];
        while let Some((key, depth)) = stack.pop() {
            let opened;
            let dir = if key.is_empty() {
                &root
            } else {
                match root.open_dir(&key, false, false) {
                    Ok(Opened::Dir(d)) => {
                        opened = d;
                        &opened
                    }
                    // Swapped for a link or a file since its parent's listing:
                    // shown, so that inspecting it reports what it is. The
                    // prefix itself is not a lease directory: nothing under it.
                    Ok(Opened::Foreign { .. }) if depth > 0 => {
                        keys.push(key);
                        continue;
                    }
                    Ok(Opened::Absent | Opened::Foreign { .. }) => continue,
                    Err(e) if is_gone(&e) => continue,
                    Err(e) => return Err(self.err("listing leases", &self.root.join(&key), e)),
                }
            };
            let mut versions = false;
            let mut children = Vec::new();
            let listed = dir.each(|name, kind| {
                if parse_version(name).is_some() {
                    versions = true;
                } else if let Some(name) = name.to_str().filter(|n| tenure_core::LeaseName::new(*n).is_ok()) {
                    children.push((name.to_string(), kind));
                }
            });
            match listed {
                Ok(()) => {}
                Err(e) if is_gone(&e) => continue,
                Err(e) => return Err(self.err("listing leases", dir.path(), e)),
            }
            if versions && !key.is_empty() {
                keys.push(key.clone());
            }
            if depth >= tenure_core::MAX_SEGMENTS {
                continue;
            }
            for (name, kind) in children {
                let child = if key.is_empty() { name.clone() } else { format!("{key}/{name}") };
                let kind = match kind {
                    Kind::Other => dir.kind(OsStr::new(&name)).ok().flatten().unwrap_or(Kind::Other),
                    kind => kind,
                };
                match kind {
                    Kind::Dir => stack.push((child, depth + 1)),
                    Kind::Symlink => keys.push(child),
                    _ => {}
                }
            }
        }
        Ok(keys)
    }
}

impl FileBackend {
    /// Runs `f` on a blocking thread with the store's deadline, or inline when so
    /// configured.
    async fn run<T: Send + 'static>(
        &self,
        what: String,
        f: impl FnOnce(&FileBackend) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        if self.inline {
            return f(self);
        }
        let this = self.clone();
        self.offload.run(&what, move || f(&this)).await
    }
}

#[async_trait]
impl Backend for FileBackend {
    fn url(&self) -> &str {
        &self.url
    }

    async fn get(&self, key: &Key) -> Result<Option<Stored>> {
        let key = key.clone();
        self.run(format!("reading key {key:?}"), move |b| b.read_key(key.as_str())).await
    }

    async fn put(&self, key: &Key, value: Bytes, opts: PutOptions) -> Result<Put> {
        let key = key.clone();
        let fsync = self.fsync && opts.durable;
        self.run(format!("writing key {key:?}"), move |b| b.write_version(key.as_str(), &value, &opts.mode, fsync))
            .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let prefix = prefix.to_string();
        self.run("listing leases".into(), move |b| b.list_blocking(&prefix)).await
    }

    /// Woken by inotify on a local file system; `Unsupported` on network ones
    /// (see the `watch` module).
    async fn watch(&self, key: &Key, seen: Option<&Version>, timeout: Duration) -> Result<bool> {
        self.watch_dir(key.as_str(), seen, timeout).await
    }

    /// A file per waiter (see the `line` module).
    fn line(
        self: Arc<Self>,
        _: &Arc<dyn tenure_core::clock::Clock>,
        _: Duration,
    ) -> Option<Arc<dyn tenure_core::backend::Line>> {
        Some(self)
    }
}

impl FileBackend {
    /// The backend a parsed directory URL describes.
    pub fn from_dir_url(d: &DirUrl) -> Self {
        FileBackend::new(d.path.clone())
            .with_fsync(d.fsync)
            .with_inline_io(d.inline)
            .with_timeout(d.timeout)
            .with_create(d.create)
    }
}

mod line;
#[cfg(test)]
mod tests;
mod watch;
