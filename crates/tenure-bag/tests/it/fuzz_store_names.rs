//! Fuzzing what a directory bag reads from names and files it did not write:
//! group, bucket and snapshot directory entries, and the configuration file.
//!
//! Any tenant of the directory may create entries whose names parse as numbers
//! (`g0`, `+1767225600000`, `1.snap`), and a log's `bag.conf` may hold any
//! values that parse. Reading must neither panic nor count anything twice:
//! every reader sees each accepted message exactly once.
//!
//! `PROPTEST_CASES=2000 cargo nextest run -p tenure-bag --test it fuzz_store_names`
//! for a long run.

use crate::fuzz_support;

use std::fs;
use std::path::Path;
use std::time::Duration;

use fuzz_support::config;
use proptest::prelude::*;
use tenure_bag::fs::FsStorage;
use tenure_bag::{BagOptions, Batch, Log, LogConfig, ReadOptions};
use tenure_core::ManualClock;

const T0: u64 = 1_767_225_600_000;

/// A log in a fresh directory with three accepted messages in bucket `T0`,
/// closed; returns the directory, the log and its clock.
async fn closed_log() -> (tempfile::TempDir, Log, ManualClock) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::starting_at(T0);
    let log = Log::on_fs(
        FsStorage::new(tmp.path().join("log"), false).with_create(true),
        BagOptions::default().with_clock(clock.shared()),
    );
    let writer = log.writer("w").expect("writer");
    for i in 0..3u64 {
        let out = writer.append(Batch::one(T0 + i, format!("m{i}"))).await.expect("append");
        assert!(out.accepted, "{out:?}");
    }
    clock.advance(Duration::from_secs(10));
    log.close(T0).await.expect("close");
    (tmp, log, clock)
}

async fn read_all(log: &Log) -> Vec<String> {
    let read = log.read(&ReadOptions::default()).await.expect("read");
    read.messages.iter().map(|m| String::from_utf8_lossy(&m.payload).into_owned()).collect()
}

/// Bug (fuzz/FINDINGS.md, F3): a directory entry whose name parses to the same
/// number as a real bucket (`+1767225600000`, `01767225600000`) makes
/// `list_buckets` return that bucket twice, and the reader reads it twice.
#[tokio::test]
async fn a_bucket_name_alias_does_not_duplicate_messages() {
    let (tmp, log, _clock) = closed_log().await;
    assert_eq!(read_all(&log).await, ["m0", "m1", "m2"]);
    let root = tmp.path().join("log");
    let group = root.join(only_entry_with(&root, 'g'));
    fs::create_dir(group.join(format!("+{T0}"))).expect("plant an alias of the bucket");
    assert_eq!(read_all(&log).await, ["m0", "m1", "m2"], "each accepted message once");
}

/// Bug (fuzz/FINDINGS.md, F3): the same through the group directory (`g0` for
/// `g000000000000`).
#[tokio::test]
async fn a_group_name_alias_does_not_duplicate_messages() {
    let (tmp, log, _clock) = closed_log().await;
    let root = tmp.path().join("log");
    let group = only_entry_with(&root, 'g');
    let number: u64 = group[1..].parse().expect("group number");
    fs::create_dir(root.join(format!("g{number}"))).expect("plant an alias of the group");
    assert_eq!(read_all(&log).await, ["m0", "m1", "m2"], "each accepted message once");
}

/// Bug (fuzz/FINDINGS.md, F3): the same for snapshots (`1.snap` next to
/// `000000000000001.snap`).
#[tokio::test]
async fn a_snapshot_name_alias_does_not_duplicate_messages() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::starting_at(T0);
    let settings = tenure_bag::LogSettings { chunk_buckets: 1, ..Default::default() };
    let opts = BagOptions::default().with_clock(clock.shared()).with_settings(settings);
    let log = Log::on_fs(FsStorage::new(tmp.path().join("log"), false).with_create(true), opts);
    compact_one_message(&log, &clock).await;
    // One bucket per chunk: the chunk of T0 is its bucket number.
    let chunk = T0 / 1000;
    let snaps = tmp.path().join("log/snapshots");
    assert!(snaps.join(format!("{chunk:015}.snap")).exists());
    fs::write(snaps.join(format!("{chunk}.snap")), b"anything").expect("plant an alias");
    assert_eq!(read_all(&log).await, ["once"], "each accepted message once");
}

/// Bug (fuzz/FINDINGS.md, F3): on object stores too, `s/1767225600.snap` next to
/// `s/000001767225600.snap` lists the chunk twice and its messages are read twice.
#[tokio::test]
async fn an_object_store_snapshot_name_alias_does_not_duplicate_messages() {
    use object_store::ObjectStoreExt as _;
    let clock = ManualClock::starting_at(T0);
    let settings = tenure_bag::LogSettings { chunk_buckets: 1, ..Default::default() };
    let mut opts = BagOptions::default().with_clock(clock.shared()).with_settings(settings);
    opts.trust_store = true;
    let store = std::sync::Arc::new(object_store::memory::InMemory::new());
    let log = Log::on_object_store("memory:///bag", store.clone(), "bag".into(), opts);
    compact_one_message(&log, &clock).await;
    let chunk = T0 / 1000;
    let alias = object_store::path::Path::from(format!("bag/s/{chunk}.snap"));
    store.put(&alias, bytes::Bytes::from_static(b"anything").into()).await.expect("plant an alias");
    assert_eq!(read_all(&log).await, ["once"], "each accepted message once");
}

/// Bug (fuzz/FINDINGS.md, F10): a regular file (or anything not a directory) in
/// the log's root named like a group directory, `g000001000000`, makes
/// `list_buckets` fail with "Not a directory", so every read of the log fails.
#[tokio::test]
async fn a_file_named_like_a_group_is_ignored() {
    let (tmp, log, _clock) = closed_log().await;
    fs::write(tmp.path().join("log/g000001000000"), b"not a group").expect("plant");
    let read = log.read(&ReadOptions::default()).await;
    let payloads: Vec<String> = read
        .expect("a stray file must not fail the read")
        .messages
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect();
    assert_eq!(payloads, ["m0", "m1", "m2"]);
}

/// Appends "once" at `T0` to a log of one-bucket chunks and compacts it.
async fn compact_one_message(log: &Log, clock: &ManualClock) {
    let out = log.writer("w").expect("writer").append(Batch::one(T0, "once")).await.expect("append");
    assert!(out.accepted);
    clock.advance(Duration::from_secs(10));
    log.compact().await.expect("compact");
    assert_eq!(read_all(log).await, ["once"]);
}

fn only_entry_with(dir: &Path, first: char) -> String {
    let names: Vec<String> = fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(first))
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    names[0].clone()
}

fn number_name() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u32..=20, any::<u64>()).prop_map(|(w, n)| format!("{n:0w$}", w = w as usize)),
        Just(u64::MAX.to_string()),
        Just("18446744073709551616".to_string()),
        "[+-]?[0-9]{0,22}",
        "[a-z.]{1,6}",
    ]
}

proptest! {
    #![proptest_config(config(150))]

    /// Planted names that are not aliases of a real bucket (they parse to no
    /// bucket, or to other numbers): the reader reads every message once and
    /// never panics. (Aliases are F3 and tested above.)
    #[test]
    fn planted_group_bucket_and_snapshot_names_never_panic_a_reader(
        groups in proptest::collection::vec(number_name(), 0..3),
        buckets in proptest::collection::vec(number_name(), 0..3),
        snaps in proptest::collection::vec(number_name(), 0..3),
        as_files in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async {
            let (tmp, log, _clock) = closed_log().await;
            let root = tmp.path().join("log");
            let group = root.join(only_entry_with(&root, 'g'));
            let real_group: u64 = group.file_name().and_then(|n| n.to_str()).and_then(|n| n[1..].parse().ok()).expect("group");
            let plant = |dir: &Path, name: &str| {
                let _ = fs::create_dir_all(dir);
                let _ = if as_files { fs::write(dir.join(name), b"x") } else { fs::create_dir(dir.join(name)) };
            };
            for g in &groups {
                if g.trim_start_matches('+').parse::<u64>().ok() != Some(real_group) {
                    // A file named like a group fails every read (F10): groups are
                    // planted as directories here until that is fixed.
                    let _ = fs::create_dir(root.join(format!("g{g}")));
                }
            }
            for b in &buckets {
                if b.trim_start_matches('+').parse::<u64>().ok() != Some(T0) {
                    plant(&group, b);
                }
            }
            for s in &snaps {
                plant(&root.join("snapshots"), &format!("{s}.snap"));
            }
            let read = log.read(&ReadOptions::default()).await;
            let read = read.map_err(|e| TestCaseError::fail(format!("read failed: {e}")))?;
            let payloads: Vec<_> = read.messages.iter().map(|m| m.payload.clone()).collect();
            prop_assert_eq!(payloads, vec!["m0", "m1", "m2"]);
            Ok(())
        })?;
    }
}

proptest! {
    #![proptest_config(config(150))]

    /// The same on an object store: objects planted under the log's prefix
    /// (bucket-like, batch-like, snapshot-like names with any bytes in them)
    /// that are not aliases of the real bucket or its items.
    #[test]
    fn planted_objects_never_panic_a_reader_of_an_object_store_log(
        planted in proptest::collection::vec(
            prop_oneof![
                (prop_oneof![Just("b/"), Just("s/"), Just("")], "[0-9a-z+./_-]{0,24}".boxed(), fuzz_support::bytes(32)),
                // Items and prelocks of the neighbouring buckets. (A damaged
                // manifest fails the read, loudly: fuzz/FINDINGS.md, N6.)
                (Just("b/"), (1u64..20, "m/[a-z]{1,3}\\.[0-9]{1,3}|prelock")
                    .prop_map(|(k, rest)| format!("{:016}/{rest}", T0 - 10_000 + 1000 * k)).boxed(), fuzz_support::bytes(32)),
            ],
            0..6,
        ),
    ) {
        use object_store::ObjectStoreExt as _;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async {
            let clock = ManualClock::starting_at(T0);
            let mut opts = BagOptions::default().with_clock(clock.shared());
            opts.trust_store = true;
            let store = std::sync::Arc::new(object_store::memory::InMemory::new());
            let log = Log::on_object_store("memory:///bag", store.clone(), "bag".into(), opts);
            let writer = log.writer("w").expect("writer");
            for i in 0..3u64 {
                let out = writer.append(Batch::one(T0 + i, format!("m{i}"))).await.expect("append");
                prop_assert!(out.accepted, "{:?}", out);
            }
            clock.advance(Duration::from_secs(10));
            log.close(T0).await.expect("close");
            for (dir, name, data) in &planted {
                // Not the real bucket under another spelling (F3), nor inside it.
                let bucket = name.split('/').next().and_then(|b| b.parse::<u64>().ok());
                if *dir == "b/" && bucket == Some(T0) {
                    continue;
                }
                let Ok(path) = object_store::path::Path::parse(format!("bag/{dir}{name}")) else { continue };
                store.put(&path, bytes::Bytes::from(data.clone()).into()).await.expect("plant");
            }
            let read = log.read(&ReadOptions::default()).await.map_err(|e| TestCaseError::fail(format!("read: {e}")))?;
            let payloads: Vec<_> = read.messages.iter().map(|m| m.payload.clone()).collect();
            prop_assert_eq!(payloads, vec!["m0", "m1", "m2"]);
            Ok(())
        })?;
    }
}

/// Configurations that parse but hold absurd values, as a foreign or damaged
/// `bag.conf` can: opening, reading and computing where to start closing
/// return or fail, never panic.
fn absurd_config() -> impl Strategy<Value = LogConfig> {
    let big = || prop_oneof![Just(1u64), Just(u64::MAX), Just(u64::MAX / 2), Just(1000), 1u64..];
    (big(), big(), big(), big(), big()).prop_map(|(width_ms, grace_ms, max_skew_ms, chunk_buckets, first)| LogConfig {
        width_ms,
        grace_ms,
        max_skew_ms,
        chunk_buckets,
        first_bucket_ms: first - first % width_ms,
    })
}

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn absurd_configurations_never_panic_a_reader(cfg in absurd_config(), lookback in any::<u64>(), from in any::<u64>(), to in proptest::option::of(any::<u64>())) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async {
            let tmp = tempfile::tempdir().expect("tempdir");
            let root = tmp.path().join("log");
            fs::create_dir_all(&root).expect("mkdir");
            fs::write(root.join("bag.conf"), cfg.encode()).expect("config");
            let clock = ManualClock::starting_at(T0);
            let log = Log::on_fs(FsStorage::new(&root, false).with_create(true), BagOptions::default().with_clock(clock.shared()));
            // Values past the log's bounds are refused when the log is opened.
            let loaded = log.config().await;
            match cfg.check() {
                Ok(()) => prop_assert_eq!(loaded.ok().flatten(), Some(cfg)),
                Err(_) => prop_assert!(loaded.is_err(), "an out-of-range configuration was accepted: {loaded:?}"),
            }
            let _ = log.close_start(Some(Duration::from_millis(lookback))).await;
            let _ = log.read(&ReadOptions { from_ms: Some(from), to_ms: to, ..ReadOptions::default() }).await;
            Ok(())
        })?;
    }
}

/// Bug (fuzz/FINDINGS.md, F4): `Log::close_start` computes `cfg.grace_ms +
/// lookback.as_millis() as u64` unchecked; a `bag.conf` with a huge grace (it
/// parses: only zero is refused) panics it, and in release wraps it.
#[tokio::test]
async fn close_start_with_a_huge_parsed_grace_does_not_overflow() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("log");
    fs::create_dir_all(&root).expect("mkdir");
    let cfg = LogConfig { width_ms: 1000, grace_ms: u64::MAX, max_skew_ms: 500, chunk_buckets: 10, first_bucket_ms: 0 };
    fs::write(root.join("bag.conf"), cfg.encode()).expect("config");
    let log = Log::on_fs(
        FsStorage::new(&root, false).with_create(true),
        BagOptions::default().with_clock(ManualClock::starting_at(T0).shared()),
    );
    let start = tokio::spawn(async move { log.close_start(Some(Duration::from_secs(1))).await });
    assert!(start.await.is_ok(), "close_start must not panic");
}
