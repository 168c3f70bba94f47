//! A directory store or bag log that does not exist is never made behind the
//! user's back: a missing NFS mount or a typo must not get leases (or a log)
//! of its own that exclude (or reach) nobody. `--create` makes it.

use crate::common;

use std::path::Path;

use common::{LIMIT, lock, run, tenure};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Asserts a refusal of the missing directory `path`: exit 64, naming it and
/// both ways to make it.
fn assert_missing(out: &std::process::Output, path: &Path) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains(&format!("the directory {} does not exist", path.display())), "{err}");
    assert!(err.contains(&format!("mkdir -p {}", path.display())) && err.contains("--create"), "{err}");
}

#[test]
fn lock_refuses_a_missing_store_directory_and_makes_it_only_with_create() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = tmp.path().join("mnt/shared/locks");
    let url = missing.display().to_string();
    let ran = tmp.path().join("ran");
    let touch = ["sh", "-c", "echo $TENURE_TOKEN >> \"$0\"", ran.to_str().expect("utf-8")];

    let out = run(&mut lock(&url, "deploy", &[], &touch), LIMIT);
    assert_missing(&out, &missing);
    assert!(!ran.exists(), "the command must not run");
    assert!(!tmp.path().join("mnt").exists(), "nothing may be created");
    // A break does not make it either, and says why there is nothing to break.
    let out = run(tenure().args(["break", &url, "deploy"]), LIMIT);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("does not exist"), "{}", text(&out.stderr));
    assert!(!tmp.path().join("mnt").exists(), "nothing may be created");

    let out = run(&mut lock(&url, "deploy", &["--create"], &touch), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&ran).expect("ran"), "1\n");
    assert!(missing.join("deploy").is_dir());

    // The URL says it too.
    let other = tmp.path().join("other");
    let out = run(&mut lock(&format!("file://{}?create=true", other.display()), "x", &[], &["true"]), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(other.is_dir());
}

#[test]
fn an_existing_store_directory_gets_lease_directories_as_needed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let url = tmp.path().display().to_string();
    let out = run(&mut lock(&url, "deploy/prod/eu", &[], &["true"]), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(tmp.path().join("deploy/prod/eu").is_dir());
}

#[test]
fn bag_append_refuses_a_missing_log_directory_and_makes_it_only_with_create() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = tmp.path().join("mnt/orders");
    let log = missing.display().to_string();
    let out = run(tenure().args(["bag", "append", &log, "order 42"]), LIMIT);
    assert_missing(&out, &missing);
    assert!(!tmp.path().join("mnt").exists(), "nothing may be created");
    let out = run(tenure().args(["bag", "close", &log]), LIMIT);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(!tmp.path().join("mnt").exists(), "nothing may be created");

    let out = run(tenure().args(["bag", "append", &log, "--create", "order 42"]), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("accepted"), "{}", text(&out.stdout));
    // Made once, the log takes appends without asking.
    let out = run(tenure().args(["bag", "append", &log, "order 43"]), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn bag_append_with_nothing_to_append_is_a_usage_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = run(tenure().args(["bag", "append", &tmp.path().display().to_string()]), LIMIT);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("nothing to append"), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_dir(tmp.path()).expect("list").count(), 0, "nothing written");
}

#[test]
fn status_never_creates_and_refuses_create() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = tmp.path().join("locks");
    let out = run(tenure().args(["status", "--create", &missing.display().to_string()]), LIMIT);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(!missing.exists());
}
