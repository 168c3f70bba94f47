//! The file system a directory store lives on, and the NFS mount options that
//! would break it.
//!
//! The directory store relies on NFS's close-to-open consistency: a version file
//! one machine wrote and closed is seen by any machine that opens it afterwards.
//! A mount with `nocto` gives that up (a reader may be served stale listings and
//! attributes for up to `actimeo`), so tenure refuses such a store; a `soft`
//! mount turns a slow server into I/O errors in the middle of operations, which
//! tenure survives but reports as store failures, so it warns.
//!
//! Read from `/proc/self/mountinfo` by the path's text alone: looking at the
//! store itself could hang on the very mount being checked.

use std::path::{Component, Path, PathBuf};

/// One entry of the mount table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Mount {
    /// Where it is mounted.
    pub point: PathBuf,
    /// The file-system type (`nfs`, `nfs4`, `ext4`, …).
    pub fstype: String,
    /// Its options: the mount's own and the file system's.
    pub options: Vec<String>,
}

impl Mount {
    /// Whether it is an NFS mount.
    pub(crate) fn is_nfs(&self) -> bool {
        self.fstype == "nfs" || self.fstype == "nfs4"
    }

    /// Whether `option` (e.g. `nocto`, or `soft`) is set.
    pub(crate) fn has(&self, option: &str) -> bool {
        self.options.iter().any(|o| o == option)
    }
}

/// The mount that holds `path` (made absolute against the current directory),
/// or `None` where the mount table cannot be read.
pub(crate) fn mount_of(path: &Path) -> Option<Mount> {
    let absolute = if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir().ok()?.join(path) };
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    find(&table, &normalize(&absolute))
}

/// `.` and `..` resolved by text (symlinks are not looked at).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The longest mount point of `table` (mountinfo text) that holds `path`.
fn find(table: &str, path: &Path) -> Option<Mount> {
    table
        .lines()
        .filter_map(parse_line)
        .filter(|m| path.starts_with(&m.point))
        .max_by_key(|m| m.point.components().count())
}

/// `36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - nfs4 server:/x rw,vers=4.2,nocto`
fn parse_line(line: &str) -> Option<Mount> {
    let (mine, fs) = line.split_once(" - ")?;
    let mine: Vec<&str> = mine.split(' ').collect();
    let point = unescape(mine.get(4)?);
    let mut fs = fs.split(' ');
    let fstype = fs.next()?.to_string();
    let _source = fs.next()?;
    let options = mine.get(5)?.split(',').chain(fs.next().unwrap_or_default().split(',')).map(str::to_string).collect();
    Some(Mount { point: PathBuf::from(point), fstype, options })
}

/// Mount points escape space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 4).and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(b) => {
                out.push(char::from(b));
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 22 0:50 / /mnt/nfs rw,relatime shared:20 - nfs4 10.0.0.1:/export rw,vers=4.2,hard,proto=tcp
41 40 0:51 / /mnt/nfs/fast rw,relatime shared:21 - nfs 10.0.0.1:/fast rw,vers=3,nocto,actimeo=60
42 22 0:52 / /mnt/my\\040disk rw - nfs4 h:/d rw,soft,timeo=10
";

    #[test]
    fn the_longest_mount_point_holding_the_path_wins() {
        let m = find(TABLE, Path::new("/mnt/nfs/locks")).expect("found");
        assert_eq!((m.point.as_path(), m.fstype.as_str()), (Path::new("/mnt/nfs"), "nfs4"));
        assert!(m.is_nfs() && m.has("hard") && !m.has("nocto"));
        let m = find(TABLE, Path::new("/mnt/nfs/fast/locks")).expect("found");
        assert!(m.has("nocto") && m.has("actimeo=60"));
        assert_eq!(find(TABLE, Path::new("/mnt/nfsx")).map(|m| m.fstype), Some("ext4".into()), "components, not text");
        let m = find(TABLE, Path::new("/mnt/my disk/x")).expect("escaped space");
        assert!(m.has("soft"));
    }

    #[test]
    fn paths_are_normalized_by_text_alone() {
        assert_eq!(normalize(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(normalize(Path::new("/../..")), PathBuf::from("/"));
    }

    #[test]
    fn garbage_lines_are_skipped() {
        assert_eq!(parse_line("nonsense"), None);
        assert_eq!(parse_line("1 2 3 4"), None);
        assert!(find("x - y\n\\\\\\ - \n", Path::new("/")).is_none());
    }
}
