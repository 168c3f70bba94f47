//! Listing a log's groups, buckets and snapshots: only directories and regular
//! files named as tenure names them; anything else by such a name is skipped
//! and reported, never followed.

use std::ffi::OsStr;

use crate::protocol::Storage as _;
use bytes::Bytes;
use tenure_core::limits::MAX_TIME_MS;
use tenure_core::{Error, Result};
use tenure_file::fs::{Dir, Kind, Opened, Read, is_gone};

use super::{FsStorage, GROUP_BUCKETS, SNAPSHOTS, skipped};
use crate::layout::{MAX_SNAPSHOT_BYTES, MAX_SWEEP_BYTES, Sweep};
use crate::protocol::{Listed, Loaded, Skipped};

/// The number in `name` if it is `<prefix><exactly `digits` digits><suffix>`.
fn parse_number(name: &OsStr, prefix: &str, digits: usize, suffix: &str) -> Option<u64> {
    let n = name.to_str()?.strip_prefix(prefix)?.strip_suffix(suffix)?;
    (n.len() == digits && n.bytes().all(|b| b.is_ascii_digit())).then(|| n.parse().ok())?
}

impl FsStorage {
    pub(super) fn list_buckets_blocking(&self, from: u64, to: u64) -> Result<Listed<u64>> {
        let width = match self.width_ms.get() {
            Some(w) => *w,
            None => match self.load_config_blocking()? {
                Some(c) => *self.width_ms.get_or_init(|| c.width_ms),
                None => return Ok(Listed::default()),
            },
        };
        // Nothing is stored past the year 9999 (writers refuse it).
        let to = to.min(MAX_TIME_MS.saturating_add(1));
        let Some(root) = self.root_dir(false)? else { return Ok(Listed::default()) };
        if from >= to {
            return Ok(Listed::default());
        }
        let group_of = |b: u64| b / width / GROUP_BUCKETS;
        let mut groups = Vec::new();
        root.each(|name, _| {
            if let Some(g) =
                parse_number(name, "g", 12, "").filter(|&g| (group_of(from)..=group_of(to - 1)).contains(&g))
            {
                groups.push(g);
            }
        })
        .map_err(|e| self.err("listing the log", &self.root, e))?;
        groups.sort_unstable();
        let mut out = Listed::default();
        for group in groups {
            let name = format!("g{group:012}");
            let dir = match root.open_dir(&name, false, false) {
                Ok(Opened::Dir(d)) => d,
                Ok(Opened::Foreign { path, kind }) => {
                    out.skipped.push(skipped(&path, format!("{kind} named like a group of buckets: not followed")));
                    continue;
                }
                Ok(Opened::Absent) => continue,
                Err(e) if is_gone(&e) => continue,
                Err(e) => return Err(self.err("opening a group of buckets", &self.root.join(&name), e)),
            };
            let mut buckets = Vec::new();
            dir.each(|name, kind| {
                if let Some(b) =
                    parse_number(name, "", 16, "").filter(|&b| (from..to).contains(&b) && group_of(b) == group)
                {
                    buckets.push((b, kind));
                }
            })
            .map_err(|e| self.err("listing buckets", dir.path(), e))?;
            for (bucket, kind) in buckets {
                let name = format!("{bucket:016}");
                let kind = match kind {
                    Kind::Other => match self.kind_of(&dir, &name)? {
                        Some(kind) => kind,
                        None => continue,
                    },
                    kind => kind,
                };
                if kind == Kind::Dir {
                    out.found.push(bucket);
                } else {
                    let path = dir.path().join(&name);
                    out.skipped.push(skipped(&path, format!("{kind} named like a bucket: not followed")));
                }
            }
        }
        out.found.sort_unstable();
        Ok(out)
    }

    /// The snapshots directory, or what stands in its place.
    fn snapshots_dir(&self) -> Result<std::result::Result<Option<Dir>, Skipped>> {
        let Some(root) = self.root_dir(false)? else { return Ok(Ok(None)) };
        match root.open_dir(SNAPSHOTS, false, false) {
            Ok(Opened::Dir(d)) => Ok(Ok(Some(d))),
            Ok(Opened::Absent) => Ok(Ok(None)),
            Ok(Opened::Foreign { path, kind }) => {
                Ok(Err(skipped(&path, format!("{kind} named like the snapshots directory: not followed"))))
            }
            Err(e) if is_gone(&e) => Ok(Ok(None)),
            Err(e) => Err(self.err("opening the snapshots", &self.root.join(SNAPSHOTS), e)),
        }
    }

    pub(super) fn list_snapshots_blocking(&self) -> Result<Listed<u64>> {
        let dir = match self.snapshots_dir()? {
            Ok(Some(dir)) => dir,
            Ok(None) => return Ok(Listed::default()),
            Err(odd) => return Ok(Listed { found: Vec::new(), skipped: vec![odd] }),
        };
        let mut chunks = Vec::new();
        dir.each(|name, kind| {
            if let Some(chunk) = parse_number(name, "", 15, ".snap") {
                chunks.push((chunk, kind));
            }
        })
        .map_err(|e| self.err("listing snapshots", dir.path(), e))?;
        let mut out = Listed::default();
        for (chunk, kind) in chunks {
            let name = format!("{chunk:015}.snap");
            match kind {
                Kind::Other => match self.kind_of(&dir, &name)? {
                    Some(Kind::File) => out.found.push(chunk),
                    Some(kind) => out
                        .skipped
                        .push(skipped(&dir.path().join(&name), format!("{kind} named like a snapshot: not read"))),
                    None => {}
                },
                Kind::File => out.found.push(chunk),
                kind => out
                    .skipped
                    .push(skipped(&dir.path().join(&name), format!("{kind} named like a snapshot: not read"))),
            }
        }
        out.found.sort_unstable();
        Ok(out)
    }

    pub(super) fn load_snapshot_blocking(&self, chunk: u64) -> Result<Loaded<Bytes>> {
        let dir = match self.snapshots_dir()? {
            Ok(Some(dir)) => dir,
            Ok(None) => return Ok(Loaded::Absent),
            Err(odd) => return Ok(Loaded::Odd(odd)),
        };
        let name = format!("{chunk:015}.snap");
        let path = dir.path().join(&name);
        Ok(match dir.read(&name, MAX_SNAPSHOT_BYTES).map_err(|e| self.err("reading a snapshot", &path, e))? {
            Read::File { bytes, .. } => Loaded::Found(bytes.into()),
            Read::Absent => Loaded::Absent,
            Read::Foreign { kind, .. } => {
                Loaded::Odd(skipped(&path, format!("{kind} named like a snapshot: not read")))
            }
            Read::TooLarge { size, .. } => Loaded::Odd(skipped(
                &path,
                format!("{size} bytes, more than a snapshot may hold ({MAX_SNAPSHOT_BYTES}): not read"),
            )),
        })
    }

    pub(super) fn publish_snapshot_blocking(&self, chunk: u64, bytes: &[u8]) -> Result<bool> {
        let dir = self
            .sub_dir(SNAPSHOTS, true)?
            .ok_or_else(|| Error::store(&*self.url, "publishing a snapshot", "the directory vanished at once"))?;
        let name = format!("{chunk:015}.snap");
        dir.publish(&name, bytes, self.fsync).map_err(|e| self.err("publishing a snapshot", &dir.path().join(&name), e))
    }
}

/// A sweep's intent: `sweep.<lo>.<hi>` in the group directory.
fn sweep_name(lo: u64, hi: u64) -> String {
    format!("sweep.{lo:016}.{hi:016}")
}

/// A sweep's published result.
const SWEEP_DONE: &str = ".done";

/// The range a sweep entry names, and whether it is the result.
fn parse_sweep(name: &OsStr) -> Option<(u64, u64, bool)> {
    let rest = name.to_str()?.strip_prefix("sweep.")?;
    let (rest, done) = match rest.strip_suffix(SWEEP_DONE) {
        Some(r) => (r, true),
        None => (rest, false),
    };
    let (lo, hi) = rest.split_once('.')?;
    let number = |n: &str| (n.len() == 16 && n.bytes().all(|b| b.is_ascii_digit())).then(|| n.parse().ok())?;
    Some((number(lo)?, number(hi)?, done))
}

impl FsStorage {
    /// The group directory a sweep of `[lo, hi)` lives in (one group: the
    /// protocol never sweeps across groups).
    fn group_rel(&self, bucket: u64) -> Result<String> {
        Ok(format!("g{:012}", bucket / self.width()? / GROUP_BUCKETS))
    }

    /// Sweeps meeting `[from, to)`, with their results if published. Any entry
    /// by an intent's name counts as the intent (as with prelocks); an odd
    /// entry by a result's name is an error naming it: the sweep can then
    /// never be settled, and nothing it covers may be called final.
    pub(super) fn sweeps_blocking(&self, from: u64, to: u64) -> Result<Vec<Sweep>> {
        let mut out = Vec::new();
        if from >= to {
            return Ok(out);
        }
        // Only the groups that exist: a range may span billions of buckets.
        let Some(root) = self.root_dir(false)? else { return Ok(out) };
        let (first, last) = (self.group_rel(from)?, self.group_rel(to - 1)?);
        let mut groups = Vec::new();
        root.each(|name, _| {
            if let Some(name) = name
                .to_str()
                .filter(|n| n.len() == first.len() && n.starts_with('g') && n[1..].bytes().all(|b| b.is_ascii_digit()))
                && (first.as_str()..=last.as_str()).contains(&name)
            {
                groups.push(name.to_string());
            }
        })
        .map_err(|e| self.err("listing the log", &self.root, e))?;
        groups.sort_unstable();
        for group in groups {
            // A group that is not a directory holds no sweeps (readers report it).
            let dir = match root.open_dir(&group, false, false) {
                Ok(Opened::Dir(d)) => d,
                Ok(Opened::Absent | Opened::Foreign { .. }) => continue,
                Err(e) if is_gone(&e) => continue,
                Err(e) => return Err(self.err("opening a group of buckets", &self.root.join(&group), e)),
            };
            let mut found: Vec<(u64, u64, bool)> = Vec::new();
            dir.each(|name, _| {
                if let Some(range) = parse_sweep(name).filter(|&(lo, hi, _)| lo < to && from < hi) {
                    found.push(range);
                }
            })
            .map_err(|e| self.err("listing sweeps", dir.path(), e))?;
            found.sort_unstable();
            found.dedup_by_key(|&mut (lo, hi, _)| (lo, hi));
            for (lo, hi, _) in found {
                out.push(self.load_sweep(&dir, lo, hi)?);
            }
        }
        Ok(out)
    }

    fn load_sweep(&self, dir: &Dir, lo: u64, hi: u64) -> Result<Sweep> {
        let name = format!("{}{SWEEP_DONE}", sweep_name(lo, hi));
        let path = dir.path().join(&name);
        match dir.read(&name, MAX_SWEEP_BYTES).map_err(|e| self.err("reading a sweep", &path, e))? {
            Read::Absent => Ok(Sweep { lo, hi, empty: None }),
            Read::File { bytes, .. } => Sweep::parse(&bytes, lo, hi).map_err(|d| self.corrupt(&path, d)),
            // Something tenure did not write holds the result's name: the sweep
            // can never be settled, so nothing it covers is final (never followed).
            Read::Foreign { .. } | Read::TooLarge { .. } => {
                tracing::warn!(path = %path.display(), "an entry tenure did not write holds a sweep's name");
                Ok(Sweep { lo, hi, empty: None })
            }
        }
    }

    /// Creates the intent of sweep `[lo, hi)` unless it exists.
    pub(super) fn ensure_sweep_blocking(&self, lo: u64, hi: u64) -> Result<()> {
        let group = self.group_rel(lo)?;
        let dir = self
            .sub_dir(&group, true)?
            .ok_or_else(|| Error::store(self.url(), "sweeping", "the group directory vanished at once"))?;
        let name = sweep_name(lo, hi);
        match dir.create_excl(&name, rustix::fs::OFlags::WRONLY) {
            Ok(fd) => {
                tenure_file::fs::close_checked(fd).map_err(|e| self.err("creating a sweep", &dir.path().join(&name), e))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(self.err("creating a sweep", &dir.path().join(&name), e)),
        }
    }

    /// Publishes a sweep's result, first one wins.
    pub(super) fn publish_sweep_blocking(&self, sweep: &Sweep) -> Result<bool> {
        let group = self.group_rel(sweep.lo)?;
        let dir = self
            .sub_dir(&group, true)?
            .ok_or_else(|| Error::store(self.url(), "sweeping", "the group directory vanished at once"))?;
        let name = format!("{}{SWEEP_DONE}", sweep_name(sweep.lo, sweep.hi));
        dir.publish(&name, &sweep.encode(), self.fsync)
            .map_err(|e| self.err("publishing a sweep", &dir.path().join(&name), e))
    }
}
