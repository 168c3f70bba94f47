//! Listing a log's groups, buckets and snapshots: only directories and regular
//! files named as tenure names them; anything else by such a name is skipped
//! and reported, never followed.

use std::ffi::OsStr;

use bytes::Bytes;
use tenure_core::limits::MAX_TIME_MS;
use tenure_core::store::fs::{Dir, Kind, Opened, Read, is_gone};
use tenure_core::{Error, Result};

use super::{FsStorage, GROUP_BUCKETS, SNAPSHOTS, skipped};
use crate::layout::MAX_SNAPSHOT_BYTES;
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
