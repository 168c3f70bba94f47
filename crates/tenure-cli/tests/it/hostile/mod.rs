//! Helpers for the hostile-store tests: real records written by `tenure lock`,
//! entries planted where tenure's files belong, and snapshots of what lies
//! outside the store, to show that nothing there was touched.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use crate::common::*;

/// What tenure grants at most: `u64::MAX / 2` (tenure::limits::MAX_TOKEN).
pub const MAX_TOKEN: u64 = u64::MAX / 2;

/// The file of version `v` in a lease directory.
pub fn version_path(dir: &Path, v: u64) -> PathBuf {
    dir.join(format!("~{v:020}"))
}

/// The versions (20-digit names that fit a u64) in a lease directory, sorted.
pub fn versions(dir: &Path) -> Vec<u64> {
    let mut vs: Vec<u64> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_str()?.strip_prefix('~')?.to_string();
                    if name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()) { name.parse().ok() } else { None }
                })
                .collect()
        })
        .unwrap_or_default();
    vs.sort_unstable();
    vs
}

/// Takes and releases `name` once with `tenure lock … -- true`, so that its
/// directory holds real records (version 1: the grant, version 2: the release).
/// Returns the lease's directory.
pub fn seed(store: &FileStore, name: &str) -> PathBuf {
    let out = run(&mut lock(&store.url(), name, &[], &["true"]), LIMIT);
    assert!(out.status.success(), "seeding {name}: {}", stderr(&out));
    let dir = Path::new(&store.url()).join(name);
    assert_eq!(versions(&dir), [1, 2], "a grant and a release");
    dir
}

/// Version `v` of a lease, parsed as JSON.
pub fn record(dir: &Path, v: u64) -> serde_json::Value {
    let bytes = std::fs::read(version_path(dir, v)).expect("read a record");
    serde_json::from_slice(&bytes).expect("a record tenure wrote is JSON")
}

/// Writes `value` as version `v` of a lease, as another writer would.
pub fn write_record(dir: &Path, v: u64, value: &serde_json::Value) {
    std::fs::write(version_path(dir, v), serde_json::to_vec(value).expect("json")).expect("write a record");
}

/// `tenure lock <url> <name> <flags…> -- sh -c 'echo $TENURE_TOKEN'`, run to the end.
pub fn lock_token(url: &str, name: &str, flags: &[&str]) -> Output {
    run(&mut lock(url, name, flags, &["sh", "-c", "echo $TENURE_TOKEN"]), LIMIT)
}

/// The token a successful [`lock_token`] printed.
pub fn token(out: &Output) -> u64 {
    assert!(out.status.success(), "lock failed ({:?}): {}", out.status, stderr(out));
    stdout(out).trim().parse().unwrap_or_else(|_| panic!("no token printed: {:?}", stdout(out)))
}

/// Runs `cmd`, returning its output and how long it took.
pub fn timed(cmd: &mut std::process::Command) -> (Output, Duration) {
    let start = Instant::now();
    let out = run(cmd, LIMIT);
    (out, start.elapsed())
}

/// Fails if tenure panicked.
pub fn assert_no_panic(out: &Output) {
    let err = stderr(out);
    assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "a panic: {err}");
}

/// Whether `text` contains any of `needles`, ignoring case.
pub fn mentions(text: &str, needles: &[&str]) -> bool {
    let text = text.to_lowercase();
    needles.iter().any(|n| text.contains(&n.to_lowercase()))
}

/// `tenure status <url> --all` (every lease, as a table): its output, after
/// checking it succeeded without a panic.
pub fn status_table(url: &str) -> String {
    let out = run(tenure().args(["status", url, "--all"]), LIMIT);
    assert_no_panic(&out);
    assert!(out.status.success(), "status of the whole store failed: {}", stderr(&out));
    stdout(&out)
}

/// The row of `name` in a status table.
pub fn row<'a>(table: &'a str, name: &str) -> &'a str {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row for {name} in:\n{table}"))
}

/// One entry of a directory tree, as far as these tests care: its kind and, for
/// regular files and symlinks, what it holds or points to.
#[derive(Debug, PartialEq, Eq)]
pub enum Node {
    Dir,
    File(Vec<u8>),
    Link(PathBuf),
    Other,
}

/// Everything under `root` (not following symlinks, not entering `skip`), by
/// path: compare two snapshots to show nothing was created, changed or removed.
pub fn snapshot(root: &Path, skip: &Path) -> BTreeMap<PathBuf, Node> {
    let mut tree = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path == skip {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
            let kind = meta.file_type();
            let node = if kind.is_dir() {
                stack.push(path.clone());
                Node::Dir
            } else if kind.is_symlink() {
                Node::Link(std::fs::read_link(&path).unwrap_or_default())
            } else if kind.is_file() && meta.len() <= 1 << 20 {
                Node::File(std::fs::read(&path).unwrap_or_default())
            } else {
                Node::Other
            };
            tree.insert(path, node);
        }
    }
    tree
}

/// Every file whose name starts with `~` (a version or a temp file) under `root`.
pub fn tenure_files(root: &Path) -> Vec<PathBuf> {
    snapshot(root, Path::new(""))
        .into_keys()
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('~')))
        .collect()
}

/// The peak resident size, in KiB, of the largest child process this test has
/// waited for (and of their waited-for descendants): nextest runs each test in
/// a process of its own, so this is the largest `tenure` the test ran.
pub fn max_child_rss_kib() -> u64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    assert_eq!(rc, 0, "getrusage");
    u64::try_from(usage.ru_maxrss).unwrap_or(0)
}
