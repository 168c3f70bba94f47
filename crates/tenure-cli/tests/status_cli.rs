//! `tenure status` reports what it can: one unreadable lease is shown as such,
//! never the failure of the whole listing.

mod common;

use std::os::unix::fs::symlink;
use std::time::Duration;

use common::{FileStore, lock, run, tenure};

const LIMIT: Duration = Duration::from_secs(30);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn one_unreadable_lease_does_not_hide_the_others() {
    let store = FileStore::new();
    let url = store.url();
    for name in ["a", "c"] {
        let out = run(&mut lock(&url, name, &[], &["true"]), LIMIT);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    // b: a lease directory that is a link out of the store; c: a FIFO as its newest version.
    let outside = tempfile::tempdir().expect("tempdir");
    symlink(outside.path(), store.path("leases/b")).expect("symlink");
    let fifo = store.path("leases/c").join(format!("~{:020}", 99));
    rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from(0o600)).expect("mkfifo");

    let out = run(tenure().args(["status", &url]), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let line = |name: &str| table.lines().find(|l| l.starts_with(name)).map(str::to_string).unwrap_or_default();
    assert!(line("a ").contains("free"), "{table}");
    assert!(line("b ").contains("error") && line("b ").contains("symbolic link"), "{table}");
    assert!(line("c ").contains("corrupt") && line("c ").contains("FIFO"), "{table}");

    let out = run(tenure().args(["status", &url, "--json"]), LIMIT);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let states: Vec<(&str, &str)> = rows
        .as_array()
        .expect("array")
        .iter()
        .map(|r| (r["name"].as_str().unwrap_or(""), r["state"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(states, [("a", "free"), ("b", "error"), ("c", "corrupt")]);

    // Asked about the unreadable one alone, the answer is its error.
    let out = run(tenure().args(["status", &url, "b"]), LIMIT);
    assert_eq!(out.status.code(), Some(65), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("symbolic link"), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_dir(outside.path()).expect("list").count(), 0);
}
