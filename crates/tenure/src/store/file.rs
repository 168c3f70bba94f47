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
//! # Operations (only NFS-safe ones, per seed 000's appendix)
//!
//! - **read**: list the directory (`readdir`; opening it also revalidates NFS's
//!   cached entries), then `open` + `read` + `fstat` the highest version.
//! - **conditional write** from version `n` (create: from `0`): write the value to
//!   a fresh `~tmp-<random>` file opened with `O_CREAT|O_EXCL` and close it, then
//!   `link(2)` it to `~<n+1>`. `link` fails with `EEXIST` if anyone else already
//!   wrote `n+1`: that is the compare-and-swap, and it is enforced by the NFS
//!   server. Readers only ever see fully written versions. The temp name is then
//!   unlinked.
//! - **no `rename`** (not atomic to NFS clients), **no `flock`/`fcntl`** locks, and
//!   nothing relies on permission bits (root ignores them).
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
//! `fsync`ed after the link, so a version that was reported written survives a
//! power loss of the machine that holds the directory: fencing tokens never go
//! back. (On NFS, `close` already commits the data and the server applies `link`
//! synchronously on `sync` exports.) `?fsync=false` skips both for scratch
//! directories and tmpfs; a power loss may then lose the newest versions.
//!
//! # Threads
//!
//! By default every operation runs on tokio's blocking pool, so an NFS server that
//! hangs cannot stall the caller's runtime (a keep-alive can still time out and
//! report the outage). On a local disk the hand-off to another thread costs more
//! than the file operations themselves; `?io=inline` runs them on the calling
//! task instead.
//!
//! Deleting a key's directory by hand resets its token counter: don't.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;

use crate::backend::{Backend, Put, PutMode, PutOptions, Stored, check_key};
use crate::clock::unix_ms;
use crate::error::{Error, Result};
use crate::types::Version;

/// Versions kept below the newest one (older ones are deleted by writers). A
/// write or read is only ambiguous when more than this many writes land while it
/// is paused mid-operation.
pub const KEEP: u64 = 8;
/// Age after which a leftover temp file is removed.
const STALE_TMP: Duration = Duration::from_secs(600);
const VERSION_DIGITS: usize = 20;

/// A versioned register per key, in a directory.
#[derive(Debug, Clone)]
pub struct FileBackend {
    url: Arc<str>,
    root: Arc<Path>,
    fsync: bool,
    inline: bool,
}

fn version_file(seq: u64) -> String {
    format!("~{seq:0VERSION_DIGITS$}")
}

fn parse_version(name: &OsStr) -> Option<u64> {
    let digits = name.to_str()?.strip_prefix('~')?;
    if digits.len() == VERSION_DIGITS && digits.bytes().all(|b| b.is_ascii_digit()) {
        digits.parse().ok()
    } else {
        None
    }
}

/// What one listing of a key's directory shows.
#[derive(Default)]
struct Scan {
    versions: Vec<u64>,
    tmps: Vec<PathBuf>,
    has_subdirs: bool,
}

impl Scan {
    fn max(&self) -> Option<u64> {
        self.versions.iter().copied().max()
    }
}

impl FileBackend {
    /// A store in directory `root` (created on first write), with fsync on.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root: PathBuf = root.into();
        Self { url: format!("file://{}", root.display()).into(), root: root.into(), fsync: true, inline: false }
    }

    /// Runs file operations on the calling task instead of the blocking pool:
    /// faster on local disks, but a hung NFS server would stall the runtime.
    pub fn with_inline_io(mut self, inline: bool) -> Self {
        self.inline = inline;
        self
    }

    /// Turns fsync of temp files and directories on or off.
    pub fn with_fsync(mut self, fsync: bool) -> Self {
        self.fsync = fsync;
        self
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn dir(&self, key: &str) -> Result<PathBuf> {
        check_key(key)?;
        Ok(self.root.join(key))
    }

    fn err(&self, op: impl Into<String>, path: &Path, e: io::Error) -> Error {
        Error::store(&*self.url, format!("{} ({})", op.into(), path.display()), e)
    }

    fn scan(&self, dir: &Path) -> io::Result<Scan> {
        let mut scan = Scan::default();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            if let Some(v) = parse_version(&name) {
                scan.versions.push(v);
            } else if name.to_str().is_some_and(|n| n.starts_with("~tmp-")) {
                scan.tmps.push(entry.path());
            } else if !name.to_string_lossy().starts_with('~') {
                scan.has_subdirs = true;
            }
        }
        Ok(scan)
    }

    /// Reads the highest version of `key`.
    pub fn get_blocking(&self, key: &str) -> Result<Option<Stored>> {
        let dir = self.dir(key)?;
        // A version can be garbage-collected between the listing and the open; a
        // newer one then exists, so list again.
        for _ in 0..8 {
            let scan = match self.scan(&dir) {
                Ok(s) => s,
                Err(e) if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::NotADirectory => return Ok(None),
                Err(e) => return Err(self.err(format!("listing key {key:?}"), &dir, e)),
            };
            let Some(seq) = scan.max() else { return Ok(None) };
            let path = dir.join(version_file(seq));
            let mut file = match File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(self.err(format!("opening key {key:?}"), &path, e)),
            };
            let mut value = Vec::new();
            file.read_to_end(&mut value).map_err(|e| self.err(format!("reading key {key:?}"), &path, e))?;
            let modified_ms = file.metadata().and_then(|m| m.modified()).ok().map(unix_ms);
            // A reader paused between its listing and its open may have opened a
            // collected slot that a stale writer re-created: that can only happen
            // once the newest version is more than KEEP above it. List once more.
            let again = self.scan(&dir).map_err(|e| self.err(format!("listing key {key:?}"), &dir, e))?;
            if again.max().is_some_and(|max| max > seq + KEEP) {
                continue;
            }
            return Ok(Some(Stored::new(value.into(), Version::seq(seq), modified_ms)));
        }
        Err(Error::store(&*self.url, format!("reading key {key:?}"), "its versions kept disappearing while being read"))
    }

    /// Writes `value` as the next version of `key` if `mode` holds.
    pub fn put_blocking(&self, key: &str, value: &[u8], mode: &PutMode) -> Result<Put> {
        let dir = self.dir(key)?;
        let target = match mode {
            PutMode::Create => 1,
            PutMode::Update(v) => match v.seq {
                Some(seq) => seq + 1,
                None => {
                    return Err(Error::store(
                        &*self.url,
                        format!("writing key {key:?}"),
                        format!("version {:?} is not a file-store version", v.tag),
                    ));
                }
            },
        };
        if matches!(mode, PutMode::Create) {
            fs::create_dir_all(&dir)
                .map_err(|e| self.err(format!("creating the directory of key {key:?}"), &dir, e))?;
        }
        let tmp = dir.join(format!("~tmp-{:016x}", rand::random::<u64>()));
        match self.write_new(&tmp, value) {
            Ok(()) => {}
            // The key's directory vanished under an update: the record is gone.
            Err(e) if e.kind() == ErrorKind::NotFound && !matches!(mode, PutMode::Create) => return Ok(Put::Conflict),
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(self.err(format!("writing key {key:?}"), &tmp, e));
            }
        }
        let path = dir.join(version_file(target));
        let linked = fs::hard_link(&tmp, &path);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok(Put::Conflict),
            Err(e) => return Err(self.err(format!("linking the new version of key {key:?}"), &path, e)),
        }
        if self.fsync {
            File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| self.err(format!("syncing the directory of key {key:?}"), &dir, e))?;
        }
        let scan = self.scan(&dir).map_err(|e| self.err(format!("listing key {key:?}"), &dir, e))?;
        if scan.max().is_some_and(|max| max > target + KEEP) {
            // Either our slot had been collected and we re-created it (ABA: the
            // write did not happen), or more than KEEP writes landed on top of ours
            // since (it did). The listing cannot tell which, so the outcome is
            // unknown: the caller must read again. Our file is below the newest
            // version minus KEEP, collectable either way.
            let _ = fs::remove_file(&path);
            return Err(Error::store(
                &*self.url,
                format!("writing key {key:?}"),
                format!(
                    "outcome unknown: more than {KEEP} newer versions appeared while version {target} was being written; read it again"
                ),
            ));
        }
        self.collect(&scan, &dir, target);
        Ok(Put::Done(Version::seq(target)))
    }

    fn write_new(&self, path: &Path, value: &[u8]) -> io::Result<()> {
        let mut f = OpenOptions::new().write(true).create_new(true).open(path)?;
        f.write_all(value)?;
        if self.fsync {
            f.sync_data()?;
        }
        Ok(())
    }

    /// Deletes versions more than [`KEEP`] below `newest`, and stale temp files.
    /// Failures are harmless (someone else collected first) and ignored.
    fn collect(&self, scan: &Scan, dir: &Path, newest: u64) {
        for &v in scan.versions.iter().filter(|&&v| v + KEEP < newest) {
            let _ = fs::remove_file(dir.join(version_file(v)));
        }
        let now = SystemTime::now();
        for tmp in &scan.tmps {
            let old = fs::metadata(tmp).and_then(|m| m.modified()).ok().and_then(|m| now.duration_since(m).ok());
            if old.is_some_and(|age| age > STALE_TMP) {
                let _ = fs::remove_file(tmp);
            }
        }
    }

    /// Keys at or under `prefix`.
    pub fn list_blocking(&self, prefix: &str) -> Result<Vec<String>> {
        let start = if prefix.is_empty() { self.root.to_path_buf() } else { self.dir(prefix)? };
        let mut keys = Vec::new();
        let mut stack = vec![(start, prefix.to_string(), 0usize)];
        while let Some((dir, key, depth)) = stack.pop() {
            let scan = match self.scan(&dir) {
                Ok(s) => s,
                Err(e) if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::NotADirectory => continue,
                Err(e) => return Err(self.err("listing leases", &dir, e)),
            };
            if !scan.versions.is_empty() && !key.is_empty() {
                keys.push(key.clone());
            }
            if !scan.has_subdirs || depth >= crate::name::MAX_SEGMENTS {
                continue;
            }
            let entries = fs::read_dir(&dir).map_err(|e| self.err("listing leases", &dir, e))?;
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(name) = name.to_str() else { continue };
                if name.starts_with('~') || name.starts_with('.') || !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let child = if key.is_empty() { name.to_string() } else { format!("{key}/{name}") };
                stack.push((entry.path(), child, depth + 1));
            }
        }
        Ok(keys)
    }
}

impl FileBackend {
    /// Runs `f` on the blocking pool, or inline when so configured.
    async fn run<T: Send + 'static>(&self, f: impl FnOnce(&FileBackend) -> Result<T> + Send + 'static) -> Result<T> {
        if self.inline {
            return f(self);
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || f(&this))
            .await
            .map_err(|e| Error::store(&*self.url, "running a file-system task", e))?
    }
}

#[async_trait]
impl Backend for FileBackend {
    fn url(&self) -> &str {
        &self.url
    }

    async fn get(&self, key: &str) -> Result<Option<Stored>> {
        let key = key.to_string();
        self.run(move |b| b.get_blocking(&key)).await
    }

    async fn put(&self, key: &str, value: Bytes, opts: PutOptions) -> Result<Put> {
        let key = key.to_string();
        self.run(move |b| b.put_blocking(&key, &value, &opts.mode)).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let prefix = prefix.to_string();
        self.run(move |b| b.list_blocking(&prefix)).await
    }
}

/// Opens `file:///dir[?fsync=false&io=inline]` or a plain path.
pub fn open(url: &str) -> Result<FileBackend> {
    open_with(url, &BTreeMap::new())
}

/// Like [`open`], with settings given apart from the URL (`--store-opt
/// fsync=false`), which take the same keys as the query and override it.
pub fn open_with(url: &str, params: &BTreeMap<String, String>) -> Result<FileBackend> {
    let invalid = |reason: &str| Error::InvalidStore { url: url.into(), reason: reason.into() };
    let (path, query) = match url.strip_prefix("file://") {
        Some(rest) => {
            let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
            if !path.starts_with('/') {
                return Err(invalid("a file:// URL needs an absolute path, as in file:///var/lib/locks"));
            }
            (path.to_string(), query)
        }
        None => (url.to_string(), ""),
    };
    if path.is_empty() {
        return Err(invalid("the directory is empty"));
    }
    let from_query = query.split('&').filter(|p| !p.is_empty()).map(|p| p.split_once('=').unwrap_or((p, "")));
    let from_params = params.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    let (mut fsync, mut inline) = (true, false);
    for (key, value) in from_query.chain(from_params) {
        match (key, value) {
            ("fsync", "true" | "1") => fsync = true,
            ("fsync", "false" | "0") => fsync = false,
            ("io", "inline") => inline = true,
            ("io", "pool") => inline = false,
            _ => {
                return Err(invalid(&format!(
                    "unknown option {key}={value:?} (known: fsync=true|false, io=pool|inline)"
                )));
            }
        }
    }
    Ok(FileBackend::new(path).with_fsync(fsync).with_inline_io(inline))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, FileBackend) {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = FileBackend::new(dir.path()).with_fsync(false);
        (dir, b)
    }

    fn done(p: Put) -> Version {
        match p {
            Put::Done(v) => v,
            Put::Conflict => panic!("unexpected conflict"),
        }
    }

    #[test]
    fn versions_are_sequential_and_conditional() {
        let (_d, b) = store();
        assert_eq!(b.get_blocking("k").expect("get"), None);
        let v1 = done(b.put_blocking("k", b"one", &PutMode::Create).expect("create"));
        assert_eq!(v1, Version::seq(1));
        assert_eq!(b.put_blocking("k", b"again", &PutMode::Create).expect("create"), Put::Conflict);
        let v2 = done(b.put_blocking("k", b"two", &PutMode::Update(v1.clone())).expect("update"));
        assert_eq!(b.put_blocking("k", b"stale", &PutMode::Update(v1)).expect("stale"), Put::Conflict);
        let got = b.get_blocking("k").expect("get").expect("present");
        assert_eq!((got.value.as_ref(), got.version), (&b"two"[..], v2));
        assert!(got.modified_ms.is_some());
    }

    #[test]
    fn old_versions_are_collected_but_the_newest_stays() {
        let (d, b) = store();
        let mut v = done(b.put_blocking("k", b"0", &PutMode::Create).expect("create"));
        for i in 1..20 {
            v = done(b.put_blocking("k", format!("{i}").as_bytes(), &PutMode::Update(v)).expect("update"));
        }
        let mut left: Vec<u64> = fs::read_dir(d.path().join("k"))
            .expect("dir")
            .flatten()
            .filter_map(|e| parse_version(&e.file_name()))
            .collect();
        left.sort();
        assert_eq!(left, (20 - KEEP..=20).collect::<Vec<_>>());
        assert_eq!(b.get_blocking("k").expect("get").map(|s| s.value), Some(Bytes::from_static(b"19")));
    }

    #[test]
    fn a_stale_writer_cannot_resurrect_a_collected_slot() {
        let (d, b) = store();
        let v1 = done(b.put_blocking("k", b"a", &PutMode::Create).expect("create"));
        let mut v = v1.clone();
        for _ in 0..(KEEP + 10) {
            v = done(b.put_blocking("k", b"b", &PutMode::Update(v)).expect("update"));
        }
        // Slot 2 was collected; a writer that read version 1 long ago tries again.
        assert!(!d.path().join("k").join(version_file(2)).exists());
        match b.put_blocking("k", b"stale", &PutMode::Update(v1)) {
            Err(Error::Store { source, .. }) => assert!(source.to_string().contains("outcome unknown"), "{source}"),
            other => panic!("a re-created slot must be reported with an unknown outcome, got {other:?}"),
        }
        assert!(!d.path().join("k").join(version_file(2)).exists(), "the stray version must be removed");
        assert_eq!(b.get_blocking("k").expect("get").map(|s| s.version), Some(v));
    }

    #[test]
    fn a_write_with_fewer_than_keep_versions_on_top_is_done() {
        let (_d, b) = store();
        let v1 = done(b.put_blocking("k", b"a", &PutMode::Create).expect("create"));
        let v2 = done(b.put_blocking("k", b"b", &PutMode::Update(v1.clone())).expect("update"));
        // A conflicting write from an old version is a plain conflict while its
        // slot still exists.
        assert_eq!(b.put_blocking("k", b"c", &PutMode::Update(v1)).expect("stale"), Put::Conflict);
        assert_eq!(b.get_blocking("k").expect("get").map(|s| s.version), Some(v2));
    }

    #[test]
    fn no_temp_files_are_left_behind() {
        let (d, b) = store();
        let v = done(b.put_blocking("a/b", b"x", &PutMode::Create).expect("create"));
        assert_eq!(b.put_blocking("a/b", b"y", &PutMode::Create).expect("conflict"), Put::Conflict);
        done(b.put_blocking("a/b", b"z", &PutMode::Update(v)).expect("update"));
        let names: Vec<String> = fs::read_dir(d.path().join("a/b"))
            .expect("dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with("~tmp-")), "{names:?}");
    }

    #[test]
    fn listing_finds_nested_keys_and_ignores_other_files() {
        let (d, b) = store();
        for k in ["a", "a/b", "c/d/e"] {
            done(b.put_blocking(k, b"x", &PutMode::Create).expect("create"));
        }
        fs::write(d.path().join("README"), "not a lease").expect("write");
        fs::create_dir_all(d.path().join(".git/objects")).expect("mkdir");
        let mut keys = b.list_blocking("").expect("list");
        keys.sort();
        assert_eq!(keys, ["a", "a/b", "c/d/e"]);
        assert_eq!(b.list_blocking("c").expect("list"), ["c/d/e"]);
        assert!(b.list_blocking("zzz").expect("list").is_empty());
    }

    #[test]
    fn keys_that_would_escape_the_root_are_refused() {
        let (_d, b) = store();
        for bad in ["../x", "/etc", "a/../../b", "a\0b"] {
            assert!(matches!(b.put_blocking(bad, b"x", &PutMode::Create), Err(Error::InvalidName { .. })), "{bad:?}");
        }
    }

    #[test]
    fn urls_and_paths_open_with_options() {
        let b = open("file:///tmp/x?fsync=false&io=inline").expect("url");
        assert!(!b.fsync && b.inline);
        assert!(open("./relative/dir").expect("path").fsync);
        assert!(matches!(open("file://relative"), Err(Error::InvalidStore { .. })));
        assert!(matches!(open("file:///x?sync=1"), Err(Error::InvalidStore { .. })));
    }

    #[test]
    fn settings_given_apart_from_the_url_apply_and_unknown_ones_are_refused() {
        let params = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let b = open_with("/tmp/x", &params(&[("fsync", "false"), ("io", "inline")])).expect("params");
        assert!(!b.fsync && b.inline);
        let b = open_with("file:///tmp/x?fsync=false", &params(&[("fsync", "true")])).expect("override");
        assert!(b.fsync, "a --store-opt overrides the URL's query");
        let err = open_with("/tmp/x", &params(&[("aws_region", "eu-west-1")])).expect_err("unknown key");
        assert!(err.to_string().contains("aws_region"), "{err}");
    }
}
