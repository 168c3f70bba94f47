//! Absurd numbers, from a record another process wrote and from the command
//! line, against the real `tenure` binary on a directory store.
//!
//! A record whose times or durations no working holder can have written is
//! corrupt: judged by age, and replaced with a token above every version. A
//! record at the top of the token space is not corrupt: tenure refuses to grant
//! from it (exit 65) rather than wrap or start again, so no run ever sees a
//! token smaller than one seen before. A flag or lease name out of range is a
//! usage error (exit 64) that acquires nothing, never a wrapped value: a `--ttl`
//! whose milliseconds overflowed once stored a tiny TTL and let a contender in
//! while the first command still ran.

use crate::common;
use crate::hostile;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use hostile::*;

/// The version the edited record is written as (the seed wrote 1 and 2).
const EDITED: u64 = 3;

/// A store with lease `x` seeded, and `edit` applied to a copy of one of its
/// records — version 1 (a grant, with an `exclusive` entry) if `grant`, else
/// version 2 (released) — written as the newest version.
fn store_with_edited_record(grant: bool, edit: impl FnOnce(&mut serde_json::Value)) -> (FileStore, String) {
    let store = FileStore::new();
    let url = store.url();
    let dir = seed(&store, "x");
    let mut value = record(&dir, if grant { 1 } else { 2 });
    edit(&mut value);
    write_record(&dir, EDITED, &value);
    (store, url)
}

/// The edited record is corrupt: busy at once, reported by status, taken
/// over after `--corrupt-ttl` with a token above the edited version.
fn assert_corrupt_and_judged_by_age(url: &str, what: &str) {
    let out = run(&mut lock(url, "x", &["--no-wait"], &["true"]), LIMIT);
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(75), "{what}: {}", stderr(&out));
    assert!(mentions(&stderr(&out), &["unreadable"]), "{what}: {}", stderr(&out));
    let table = status_table(url);
    assert!(mentions(row(&table, "x"), &["corrupt", "unreadable"]), "{what}: {table}");

    let flags = ["--corrupt-ttl", "1s", "--max-skew", "0s", "--timeout", "20s"];
    let first = token(&lock_token(url, "x", &flags));
    assert!(first > EDITED && first < 1000, "{what}: token {first} after version {EDITED}");
    let second = token(&lock_token(url, "x", &["--no-wait"]));
    assert_eq!(second, first + 1, "{what}: tokens keep growing");
}

#[test]
fn a_grant_with_a_ttl_of_zero_is_corrupt_and_judged_by_age() {
    let (_s, url) = store_with_edited_record(true, |r| r["exclusive"]["ttl_ms"] = 0.into());
    assert_corrupt_and_judged_by_age(&url, "ttl_ms 0");
}

#[test]
fn a_grant_with_the_largest_ttl_is_corrupt_and_judged_by_age() {
    let (_s, url) = store_with_edited_record(true, |r| r["exclusive"]["ttl_ms"] = u64::MAX.into());
    assert_corrupt_and_judged_by_age(&url, "ttl_ms u64::MAX");
}

#[test]
fn a_grant_with_the_largest_deadline_is_corrupt_and_judged_by_age() {
    let (_s, url) = store_with_edited_record(true, |r| r["exclusive"]["deadline_ms"] = u64::MAX.into());
    assert_corrupt_and_judged_by_age(&url, "deadline_ms u64::MAX");
}

#[test]
fn a_grant_acquired_at_the_end_of_time_is_corrupt_and_judged_by_age() {
    let (_s, url) = store_with_edited_record(true, |r| r["exclusive"]["acquired_ms"] = u64::MAX.into());
    assert_corrupt_and_judged_by_age(&url, "acquired_ms u64::MAX");
}

#[test]
fn a_watermark_at_the_end_of_time_is_corrupt_and_judged_by_age() {
    let (_s, url) = store_with_edited_record(false, |r| r["watermark_ms"] = u64::MAX.into());
    assert_corrupt_and_judged_by_age(&url, "watermark_ms u64::MAX");
}

/// `lock` of `x` exits 65 saying the tokens are used up, also once the record
/// is older than `--corrupt-ttl` (it must not be judged corrupt and replaced).
fn assert_exhausted_for_good(url: &str) {
    for _ in 0..2 {
        let out = lock_token(url, "x", &["--corrupt-ttl", "1s", "--max-skew", "0s", "--timeout", "5s"]);
        assert_no_panic(&out);
        assert_eq!(out.status.code(), Some(65), "at the top of the token space: {}", stderr(&out));
        assert!(stderr(&out).contains("has used up its fencing tokens"), "{}", stderr(&out));
        assert_eq!(stdout(&out), "", "the command must not run");
        std::thread::sleep(Duration::from_millis(1500));
    }
}

#[test]
fn the_last_token_is_granted_once_and_then_tokens_never_go_back() {
    let (_s, url) = store_with_edited_record(false, |r| r["last_token"] = (MAX_TOKEN - 2).into());
    assert_eq!(token(&lock_token(&url, "x", &["--no-wait"])), MAX_TOKEN - 1, "the last token there is");
    assert_exhausted_for_good(&url);
    let json = status_json(&url, "x");
    assert_eq!(json[0]["last_token"].as_u64(), Some(MAX_TOKEN - 1), "{json}");
}

#[test]
fn a_record_at_the_top_of_the_token_space_is_not_granted_from() {
    for last in [MAX_TOKEN - 1, MAX_TOKEN, u64::MAX] {
        let (_s, url) = store_with_edited_record(false, |r| r["last_token"] = last.into());
        assert_exhausted_for_good(&url);
    }
}

#[test]
fn a_crashed_holder_of_the_last_token_is_not_followed_by_a_small_token() {
    // The holder of the last token dies (SIGKILL, no release); once its grant
    // expired the next `lock` must refuse, not replace the record and restart.
    let (store, url) = store_with_edited_record(false, |r| r["last_token"] = (MAX_TOKEN - 2).into());
    let ready = store.path("ready");
    let script = format!("echo $TENURE_TOKEN > '{}'; exec sleep 60", ready.display());
    let mut holder = lock(&url, "x", &["--ttl", "1s"], &["sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn holder");
    assert_eq!(wait_lines(&ready, 1, LIMIT), [(MAX_TOKEN - 1).to_string()]);
    let _ = holder.kill();
    let _ = holder.wait();
    std::thread::sleep(Duration::from_secs(2));
    assert_exhausted_for_good(&url);
}

// ------------------------------------------------------------------ arguments ---

/// Runs `tenure <args…>` and checks it is a usage error (64) in one clear line
/// that acquired nothing in `store`.
fn assert_refused(store: &FileStore, args: &[&str]) {
    let out = run(tenure().args(args), LIMIT);
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(64), "{args:?}: {}", stderr(&out));
    assert_one_line_error(&out);
    let written = tenure_files(store.dir.path());
    assert!(written.is_empty(), "{args:?} wrote {written:?}");
}

#[test]
fn durations_out_of_range_are_usage_errors_that_acquire_nothing() {
    let store = FileStore::new();
    let url = store.url();
    let flags: [&[&str]; 21] = [
        &["--ttl", "1000000000000000s"],
        &["--ttl", "300y"],
        &["--ttl", "31d"],
        &["--ttl", "30days 1ms"],
        &["--ttl", "inf"],
        &["--ttl", "NaN"],
        &["--timeout", "99999999999999999999s"],
        &["--timeout", "11y"],
        &["--timeout", "1e300"],
        &["--poll", "0"],
        &["--poll", "11y"],
        &["--kill-grace", "1e30"],
        &["--kill-grace", "11y"],
        &["--max-skew", "-1s"],
        &["--max-skew=-1s"],
        &["--max-skew", "11y"],
        &["--corrupt-ttl", "NaN"],
        &["--corrupt-ttl", "-0.5"],
        &["--corrupt-ttl", "11y"],
        &["--store-opt", "fsync"],
        &["--store-opt", "=x"],
    ];
    for f in flags {
        let mut args = vec!["lock", url.as_str(), "x"];
        args.extend_from_slice(f);
        args.extend_from_slice(&["--", "true"]);
        assert_refused(&store, &args);
    }
    for f in [["--max-skew", "11y"], ["--corrupt-ttl", "NaN"]] {
        assert_refused(&store, &["status", &url, f[0], f[1]]);
        assert_refused(&store, &["break", &url, "x", f[0], f[1]]);
    }
    assert_refused(&store, &["break", &url, "x", "--token", "18446744073709551616"]);
    assert_refused(&store, &["break", &url, "x", "--token", "-1"]);
}

#[test]
fn lease_names_at_every_limit() {
    let store = FileStore::new();
    let url = store.url();
    let seg = |n: usize| "s".repeat(n);
    let segments = |n: usize| vec!["a"; n].join("/");
    let longest = [seg(63), seg(63), seg(63), seg(63)].join("/");
    assert_eq!(longest.len(), 255);
    let too_long = [seg(64), seg(63), seg(63), seg(63)].join("/");
    assert_eq!(too_long.len(), 256);

    // At the limits: a lease like any other.
    for name in [longest.clone(), segments(16), seg(64), "a:b@c,d=e+f_g.h-i".into()] {
        let out = lock_token(&url, &name, &["--no-wait"]);
        assert_no_panic(&out);
        assert_eq!(token(&out), 1, "{name:?}");
    }
    let before = tenure_files(store.dir.path());

    // One over each, and the names that could escape or hide.
    let bad = [
        too_long,
        segments(17),
        seg(65),
        String::new(),
        "..".into(),
        "a/../b".into(),
        "a/./b".into(),
        "a//b".into(),
        "/a".into(),
        "a/".into(),
        "-a".into(),
        ".a".into(),
        "a/.b".into(),
        "~a".into(),
        "a/~00000000000000000001".into(),
        "ñ".into(),
        "a b".into(),
        "a\\b".into(),
        "a\nb".into(),
    ];
    for name in &bad {
        let out = run(&mut lock(&url, name, &[], &["true"]), LIMIT);
        assert_no_panic(&out);
        assert_eq!(out.status.code(), Some(64), "{name:?}: {}", stderr(&out));
        assert_one_line_error(&out);
        let out = run(tenure().args(["status", &url, name]), LIMIT);
        assert_no_panic(&out);
        assert_eq!(out.status.code(), Some(64), "status {name:?}: {}", stderr(&out));
    }
    assert_eq!(tenure_files(store.dir.path()), before, "a refused name acquired something");
}

#[test]
fn a_holder_with_the_longest_ttl_keeps_contenders_out_while_it_runs() {
    let store = FileStore::new();
    let url = store.url();
    let ready = store.path("ready");
    let script = format!("echo $TENURE_TOKEN > '{}'; exec sleep 60", ready.display());
    let before = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_millis();
    let mut holder = lock(&url, "x", &["--ttl", "30d"], &["sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn holder");
    wait_lines(&ready, 1, LIMIT);

    // The stored grant lasts 30 days, not a wrapped remainder of it.
    let json = status_json(&url, "x");
    let ttl = json[0]["holders"][0]["ttl_ms"].as_u64();
    assert_eq!(ttl, Some(30 * 24 * 3600 * 1000), "{json}");
    let deadline = u128::from(json[0]["holders"][0]["deadline_ms"].as_u64().expect("deadline"));
    assert!(deadline >= before + 29 * 24 * 3600 * 1000, "{json}");

    for _ in 0..3 {
        let out = run(&mut lock(&url, "x", &["--no-wait", "--max-skew", "0s"], &["true"]), LIMIT);
        assert_eq!(out.status.code(), Some(75), "a second holder: {}", stderr(&out));
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(holder.try_wait().expect("try_wait").is_none(), "the holder is still running");
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn a_ttl_whose_milliseconds_overflow_is_refused_and_creates_nothing() {
    // A ttl whose milliseconds overflow u64 (about 584 million years) must be
    // refused, not stored wrapped: nothing is written at all.
    let store = FileStore::new();
    let url = store.url();
    assert_refused(&store, &["lock", &url, "x", "--ttl", "18446744073709552s", "--", "true"]);
    assert!(!Path::new(&url).join("x").exists(), "the lease directory was created");
}

#[test]
fn serve_refuses_a_secret_file_that_never_ends_instead_of_reading_it_all() {
    // `--auth-token-file /dev/zero`, a FIFO nobody writes, or a log file given by
    // mistake must be a clear error at once: not a read until memory runs out,
    // not a startup blocked for good.
    let dir = tempfile::tempdir().expect("dir");
    let fifo = dir.path().join("fifo");
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::RUSR, 0).expect("mkfifo");
    let big = dir.path().join("big");
    std::fs::write(&big, vec![b'a'; 65 * 1024]).expect("big file");
    let cases = [
        ("/dev/zero".to_string(), "not a regular file"),
        (fifo.display().to_string(), "not a regular file"),
        (big.display().to_string(), "longer than"),
    ];
    for flag in ["--auth-token-file", "--key"] {
        for (path, why) in &cases {
            let out = run(tenure().args(["serve", "--listen", "127.0.0.1:0", flag, path]), LIMIT);
            assert_eq!(out.status.code(), Some(64), "{flag} {path}: {}", stderr(&out));
            assert!(
                stderr(&out).contains(path.as_str()) && stderr(&out).contains(why),
                "{flag} {path}: {}",
                stderr(&out)
            );
            assert_no_panic(&out);
        }
    }
}
