//! `tenure bag` as a user runs it: exit codes, JSON, and the journal through a
//! lease store.

use std::process::Command;

const TENURE: &str = env!("CARGO_BIN_EXE_tenure");

fn bag(args: &[&str]) -> (i32, String) {
    let out = Command::new(TENURE).arg("bag").args(args).output().expect("run tenure");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

fn json_lines(out: &str) -> Vec<serde_json::Value> {
    out.lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect()
}

/// A stamp 4 s in the past, as `--at` takes it: past its bucket's grace (2 s)
/// however slowly the commands that use it run, and inside the log's first
/// buckets.
fn four_seconds_ago() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock after 1970");
    (now.as_millis() as u64 - 4_000).to_string()
}

#[test]
fn append_says_accepted_then_rejected_once_the_bucket_is_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    std::fs::create_dir(&log).expect("mkdir log");
    let log = log.to_str().expect("utf8");
    // One stamp for both appends: the second must land in the closed bucket
    // however long the commands in between take.
    let at = four_seconds_ago();
    let (code, out) = bag(&["append", log, "--json", "--at", &at, "first", "second"]);
    assert_eq!(code, 0, "{out}");
    let outcome = &json_lines(&out)[0];
    assert_eq!((outcome["accepted"].as_bool(), outcome["count"].as_u64()), (Some(true), Some(2)));
    let (code, _) = bag(&["close", log, "--json"]);
    assert_eq!(code, 0);
    let (code, out) = bag(&["append", log, "--json", "--at", &at, "too late"]);
    assert_eq!(code, 1, "a rejected append exits 1: {out}");
    assert_eq!(json_lines(&out)[0]["accepted"], false);
    let (code, out) = bag(&["read", log, "--json"]);
    assert_eq!(code, 0);
    let lines = json_lines(&out);
    let payloads: Vec<_> = lines.iter().filter_map(|l| l["payload"].as_str()).collect();
    assert_eq!(payloads, ["first", "second"]);
    assert!(lines.last().expect("summary")["summary"]["closed"].as_u64() > Some(0));
}

#[test]
fn the_messages_of_one_append_share_one_stamp_however_narrow_the_buckets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    std::fs::create_dir(&log).expect("mkdir log");
    let messages = vec!["m"; 20_000];
    let mut args = vec!["append", log.to_str().expect("utf8"), "--json", "--bucket-width", "1ms"];
    args.extend(&messages);
    let (code, out) = bag(&args);
    assert_eq!(code, 0, "one batch, one bucket: {out}");
    assert_eq!(json_lines(&out)[0]["count"].as_u64(), Some(20_000));
}

#[test]
fn the_journal_stamps_above_the_watermark_and_the_audit_passes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (log, leases) = (dir.path().join("log"), dir.path().join("leases"));
    for d in [&log, &leases] {
        std::fs::create_dir(d).expect("mkdir");
    }
    let (log, leases) = (log.to_str().expect("utf8"), leases.to_str().expect("utf8"));
    let mut stamps = Vec::new();
    for msg in ["one", "two", "three"] {
        let (code, out) = bag(&["append", log, "--json", "--lease", "acct/1", "--lease-store", leases, msg]);
        assert_eq!(code, 0, "{out}");
        stamps.push(json_lines(&out)[0]["max_ts_ms"].as_u64().expect("stamp"));
    }
    assert!(stamps.windows(2).all(|w| w[0] < w[1]), "each holder stamps above its predecessor: {stamps:?}");
    let (code, out) = bag(&["read", log, "--json"]);
    assert_eq!(code, 0);
    let tokens: Vec<_> = json_lines(&out).iter().filter_map(|l| l["leases"][0]["token"].as_u64()).collect();
    assert_eq!(tokens, [1, 2, 3]);
    let (code, out) = bag(&["audit", log, "--json"]);
    assert_eq!(code, 0, "{out}");
    let lines = json_lines(&out);
    let summary = &lines.last().expect("summary")["summary"];
    assert_eq!((summary["messages"].as_u64(), summary["violation_count"].as_u64()), (Some(3), Some(0)));
}

#[test]
fn bad_input_is_a_usage_error_not_a_panic() {
    let (code, _) = bag(&["append", "s3://", "x"]);
    assert_eq!(code, 64);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    std::fs::create_dir(&log).expect("mkdir log");
    let (code, out) = bag(&["append", log.to_str().expect("utf8"), "--json", "--writer", "a/b c", "x"]);
    assert_eq!(code, 0, "a writer prefix is sanitised into a valid id");
    assert!(json_lines(&out)[0]["writer"].as_str().is_some_and(|w| w.starts_with("a_b_c-")), "{out}");
    let (code, _) = bag(&["read", "nosuch://x"]);
    assert_eq!(code, 64);
    let log = log.to_str().expect("utf8");
    // The journal stamps its batches itself, and needs leases to stamp under.
    for args in [
        &["append", log, "--lease", "a", "--lease-store", log, "--at", "1", "x"][..],
        &["append", log, "--lease", "a", "--lease-store", log, "--lag", "1s", "x"],
        &["append", log, "--lease-store", log, "x"],
    ] {
        assert_eq!(bag(args).0, 64, "{args:?}");
    }
}

/// Runs `tenure bag …` as the unprivileged user `nobody`, if this test runs as
/// root and `setpriv` exists (otherwise `None`, with the reason printed).
fn bag_as_nobody(args: &[&str]) -> Option<(i32, String)> {
    let root = Command::new("id").arg("-u").output().ok().is_some_and(|o| o.stdout.starts_with(b"0\n"));
    let setpriv = std::path::Path::new("/usr/bin/setpriv");
    if !root || !setpriv.exists() {
        eprintln!("skipping the non-root part: needs root and /usr/bin/setpriv");
        return None;
    }
    let out = Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", TENURE, "bag"])
        .args(args)
        .output()
        .expect("run tenure as nobody");
    Some((out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned()))
}

#[test]
fn with_the_read_only_hint_an_unprivileged_late_writer_is_told_rejected() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let log = dir.path().join("log");
    std::fs::create_dir(&log).expect("mkdir log");
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let log = log.to_str().expect("utf8");
    let at = four_seconds_ago();
    let Some((code, out)) = bag_as_nobody(&["append", log, "--json", "--at", &at, "first"]) else { return };
    assert_eq!(code, 0, "{out}");
    let (code, _) = bag(&["close", log, "--read-only-hint"]);
    assert_eq!(code, 0);
    // The bucket is now read-only to everyone but root: the late writer cannot
    // even create its file, confirms the close in the manifest, and is rejected.
    let (code, out) = bag_as_nobody(&["append", log, "--json", "--at", &at, "late"]).expect("as nobody");
    assert_eq!(code, 1, "rejected, not a store error: {out}");
    assert_eq!(json_lines(&out)[0]["decision"], "closed_before_write");
    let (_, out) = bag(&["read", log, "--json"]);
    let payloads: Vec<_> = json_lines(&out).iter().filter_map(|l| l["payload"].as_str().map(str::to_string)).collect();
    assert_eq!(payloads, ["first"]);
}
