//! Bags on a real directory: the shared behaviours, then what only files have
//! (torn tails, damaged files, readers that must not touch anything).

use crate::common;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::{Harness, T0, options, tree};
use tenure_bag::fs::FsStorage;
use tenure_bag::{Batch, Decision, Log, ReadOptions};
use tenure_core::{Clock, ManualClock};

struct Dir {
    _tmp: tempfile::TempDir,
    path: PathBuf,
}

impl Dir {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("log");
        Self { _tmp: tmp, path }
    }
    fn storage(&self) -> FsStorage {
        FsStorage::new(&self.path, false).with_create(true)
    }
}

impl Harness for Dir {
    fn log(&self, clock: Arc<dyn Clock>) -> Log {
        Log::on_fs(self.storage(), options(clock))
    }
    async fn leave_prelock(&self, log: &Log, bucket: u64) {
        log.config_or_create().await.expect("config");
        let dir = self.storage().bucket_dir(bucket).expect("dir");
        fs::create_dir_all(&dir).expect("mkdir");
        fs::write(dir.join("prelock"), b"").expect("prelock");
    }
}

macro_rules! shared {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            common::$name(&Dir::new()).await;
        }
    )*};
}

common::every_behaviour!(shared);

fn data_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .expect("bucket")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "data"))
        .collect();
    out.sort();
    out
}

async fn written_and_closed(d: &Dir, clock: &ManualClock) -> (Log, PathBuf) {
    let log = d.log(clock.shared());
    let w = log.writer("w").expect("writer");
    w.append(Batch::one(T0 + 1, "one")).await.expect("append");
    w.append(Batch::one(T0 + 2, "two")).await.expect("append");
    (log, d.storage().bucket_dir(T0).expect("dir"))
}

#[tokio::test]
async fn a_torn_tail_from_a_killed_writer_is_ignored_the_same_way_before_and_after_the_close() {
    let d = Dir::new();
    let clock = ManualClock::starting_at(T0);
    let (log, dir) = written_and_closed(&d, &clock).await;
    let file = &data_files(&dir)[0];
    // A writer killed mid-write leaves part of a frame.
    let frame = tenure_bag::frame::encode("w", 9, &[], &[(T0 + 3, "three".into())]).expect("encode");
    fs::OpenOptions::new().append(true).open(file).expect("open").write_all(&frame[..frame.len() / 2]).expect("write");
    let open = log.read(&ReadOptions::default()).await.expect("read");
    assert_eq!(open.messages.len(), 2);
    assert_eq!(open.ignored_bytes, (frame.len() / 2) as u64);
    clock.advance(Duration::from_secs(3));
    log.close(T0).await.expect("close");
    let closed = log.read(&ReadOptions { to_ms: Some(T0 + 1_000), ..Default::default() }).await.expect("read");
    assert_eq!(closed.messages, open.messages);
    assert!(closed.open.is_empty());
}

#[tokio::test]
async fn a_damaged_manifest_or_a_shrunken_data_file_is_a_clear_error() {
    let d = Dir::new();
    let clock = ManualClock::starting_at(T0);
    let (log, dir) = written_and_closed(&d, &clock).await;
    clock.advance(Duration::from_secs(3));
    log.close(T0).await.expect("close");
    let file = data_files(&dir)[0].clone();
    let full = fs::read(&file).expect("read");
    fs::write(&file, &full[..full.len() - 1]).expect("shrink");
    let err = log.read(&ReadOptions::default()).await.expect_err("a file shorter than its manifest");
    assert!(matches!(err, tenure_core::Error::Corrupt { .. }), "{err}");
    fs::write(&file, &full).expect("restore");
    let manifest = dir.join("manifest");
    let mut text = fs::read(&manifest).expect("manifest");
    text[25] ^= 0x01;
    fs::write(&manifest, &text).expect("damage");
    let err = log.read(&ReadOptions::default()).await.expect_err("a damaged manifest");
    assert!(err.to_string().contains("manifest"), "{err}");
    fs::write(&manifest, b"").expect("empty");
    assert!(matches!(log.read(&ReadOptions::default()).await, Err(tenure_core::Error::Corrupt { .. })));
}

#[tokio::test]
async fn garbage_data_files_are_skipped_not_fatal() {
    let d = Dir::new();
    let clock = ManualClock::starting_at(T0);
    let (log, dir) = written_and_closed(&d, &clock).await;
    fs::write(dir.join("intruder.0.data"), b"\xff\xff\xff\x7fnot a frame at all").expect("garbage");
    fs::write(dir.join("empty.0.data"), b"").expect("empty");
    fs::write(dir.join("notes.txt"), b"ignored: not a data file").expect("other");
    fs::write(dir.join("a stray name.data"), b"not a writer's file").expect("stray");
    fs::create_dir(dir.parent().expect("group").join(format!("{:016}", T0 + 1))).expect("an unaligned stray bucket");
    let read = log.read(&ReadOptions::default()).await.expect("read");
    assert_eq!(read.messages.len(), 2);
    assert!(read.ignored_bytes > 0);
    clock.advance(Duration::from_secs(3));
    assert_eq!(log.close(T0).await.expect("close").items, 3, "the writer's, the intruder's and the empty file");
    let closed = log.read(&ReadOptions { to_ms: Some(T0 + 1_000), ..Default::default() }).await.expect("read");
    assert_eq!(closed.messages, read.messages);
    assert!(closed.open.is_empty(), "a stray directory is not a bucket: {:?}", closed.open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_to_the_end_of_time_counts_absent_buckets_without_visiting_them() {
    let d = Dir::new();
    let clock = ManualClock::starting_at(T0);
    let (log, _) = written_and_closed(&d, &clock).await;
    // About 1.8e16 one-second buckets: enumerating them would never end.
    let read = log.read(&ReadOptions { to_ms: Some(u64::MAX), ..Default::default() }).await.expect("read");
    assert_eq!(read.messages.len(), 2);
    assert_eq!(read.open, [T0]);
    let buckets = (read.to_ms - read.from_ms) / 1_000;
    assert_eq!(read.absent, buckets - 1, "every bucket but the open one");
    assert!(!read.exact);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_never_write_not_even_to_a_log_that_does_not_exist() {
    let d = Dir::new();
    let clock = ManualClock::starting_at(T0);
    let nothing = d.log(clock.shared()).read(&ReadOptions::default()).await.expect("read");
    assert!(nothing.messages.is_empty());
    assert!(!d.path.exists(), "reading a missing log created it");
    let (log, _) = written_and_closed(&d, &clock).await;
    clock.advance(Duration::from_secs(3));
    let before = tree(&d.path);
    for opts in [ReadOptions::default(), ReadOptions { include_late: true, skip_snapshots: true, ..Default::default() }]
    {
        d.log(clock.shared()).read(&opts).await.expect("read");
    }
    tenure_bag::audit(&log.read(&ReadOptions::default()).await.expect("read"), None, 1_000);
    assert_eq!(tree(&d.path), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_snapshot_is_skipped_and_its_buckets_are_read_instead() {
    let d = Dir::new();
    let clock = ManualClock::starting_at(T0);
    let (log, _) = written_and_closed(&d, &clock).await;
    clock.advance(Duration::from_secs(30));
    assert!(log.compact().await.expect("compact").published > 0);
    let good = log.read(&ReadOptions::default()).await.expect("read");
    let snaps: Vec<PathBuf> =
        fs::read_dir(d.path.join("snapshots")).expect("dir").flatten().map(|e| e.path()).collect();
    for snap in &snaps {
        let bytes = fs::read(snap).expect("read");
        fs::write(snap, &bytes[..bytes.len() - 3]).expect("truncate");
    }
    // To now: the chunks compacted reach past the newest bucket with data.
    let all = ReadOptions { to_ms: Some(clock.wall_ms()), ..ReadOptions::default() };
    let fallback = log.read(&all).await.expect("read");
    assert_eq!(fallback.bad_snapshots.len(), snaps.len());
    assert_eq!(fallback.messages, good.messages);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_only_hint_is_only_a_hint() {
    let d = Dir::new();
    let clock = ManualClock::starting_at(T0);
    let mut opts = options(clock.shared());
    opts.read_only_hint = true;
    let log = Log::on_fs(d.storage(), opts);
    let w = log.writer("w").expect("writer");
    w.append(Batch::one(T0, "kept")).await.expect("append");
    clock.advance(Duration::from_secs(3));
    log.close(T0).await.expect("close");
    // Whether or not chmod stops this writer (root ignores it), the manifest
    // decides, and the writer is told rejected, never a store error.
    let out = w.append(Batch::one(T0 + 1, "late")).await.expect("a verdict, not an error");
    assert!(matches!(out.decision, Decision::NotInManifest | Decision::ClosedBeforeWrite), "{out:?}");
    let read = log.read(&ReadOptions::default()).await.expect("read");
    assert_eq!(read.messages.len(), 1);
    use std::os::unix::fs::PermissionsExt;
    let dir = d.storage().bucket_dir(T0).expect("dir");
    let _ = fs::set_permissions(&dir, fs::Permissions::from_mode(0o755));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_log_directory_is_refused_naming_it_and_made_only_when_asked() {
    let d = Dir::new();
    let clock = ManualClock::starting_at(T0);
    let strict = Log::on_fs(FsStorage::new(&d.path, false), options(clock.shared()));
    let writer = strict.writer("w").expect("writer");
    match writer.append(Batch::one(T0, "x")).await {
        Err(tenure_core::Error::InvalidStore { reason, .. }) => {
            assert!(
                reason.contains(&format!("mkdir -p {}", d.path.display())) && reason.contains("--create"),
                "{reason}"
            )
        }
        other => panic!("an append to a missing log must be refused, got {other:?}"),
    }
    assert!(strict.close(T0).await.is_err(), "a close must be refused too");
    assert!(!d.path.exists(), "nothing may be created");

    // Asked to, the first write makes it; an existing one needs no asking.
    let made = Log::on_fs(FsStorage::new(&d.path, false).with_create(true), options(clock.shared()));
    let w = made.writer("w").expect("writer");
    assert!(w.append(Batch::one(T0, "x")).await.expect("append").accepted);
    assert!(writer.append(Batch::one(T0 + 1, "y")).await.expect("append").accepted);
}

/// A log of 1 ms buckets in `d`.
fn millisecond_log(d: &Dir, clock: &ManualClock) -> Log {
    let settings = tenure_bag::LogSettings {
        width: Duration::from_millis(1),
        grace: Duration::from_millis(10),
        max_skew: Duration::from_millis(5),
        chunk_buckets: 1000,
    };
    Log::on_fs(d.storage(), options(clock.shared()).with_settings(settings))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_twenty_idle_seconds_of_1ms_buckets_adds_a_bounded_number_of_entries() {
    let d = Dir::new();
    let clock = ManualClock::starting_at(T0);
    let log = millisecond_log(&d, &clock);
    assert!(log.writer("w").expect("writer").append(Batch::one(T0, "only")).await.expect("append").accepted);
    clock.advance(Duration::from_secs(20));
    let mut cursor = log.close_start(None).await.expect("start");
    let round = log.close_due(&mut cursor).await.expect("round");
    assert!(round.closed >= 20_000, "{round:?}");
    // Per group of 4096 buckets: the group, a sweep's intent and its result;
    // and the one bucket with data: its directory, data file, prelock, manifest.
    let entries = tree(&d.path).len();
    assert!(entries < 40, "{entries} entries after an idle close of {} buckets", round.closed);
    // Every bucket is final, and the one message is read.
    let read = log.read(&ReadOptions { to_ms: Some(T0 + 19_000), ..ReadOptions::default() }).await.expect("read");
    assert!(read.exact && read.open.is_empty() && read.absent == 0, "{read:?}");
    assert_eq!(read.messages.len(), 1);
    // A second round adds nothing.
    let mut again = log.close_start(None).await.expect("start");
    log.close_due(&mut again).await.expect("round");
    assert_eq!(tree(&d.path).len(), entries);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_writer_into_a_bucket_a_sweep_closed_empty_is_rejected_and_never_read() {
    let d = Dir::new();
    let clock = ManualClock::starting_at(T0);
    let log = d.log(clock.shared());
    let w = log.writer("w").expect("writer");
    assert!(w.append(Batch::one(T0 + 1, "kept")).await.expect("append").accepted);
    clock.advance(Duration::from_secs(10));
    let mut cursor = log.close_start(None).await.expect("start");
    let round = log.close_due(&mut cursor).await.expect("round");
    assert_eq!(round.sweeps, 1, "{round:?}");
    let before = log.read(&ReadOptions { to_ms: Some(T0 + 5_000), ..ReadOptions::default() }).await.expect("read");
    assert!(before.exact, "{before:?}");

    // Into a bucket nobody wrote before the sweep: rejected, for certain, though
    // the write made the bucket and its data file.
    let late = log.writer("late").expect("writer");
    let out = late.append(Batch::one(T0 + 2_000, "late")).await.expect("a verdict");
    assert_eq!(out.decision, Decision::NotInManifest);
    assert!(d.storage().bucket_dir(T0 + 2_000).expect("dir").is_dir(), "the late write did land");
    // Readers, and later closes, still say what they said.
    let mut cursor = log.close_start(None).await.expect("start");
    log.close_due(&mut cursor).await.expect("round");
    let after = log.read(&ReadOptions { to_ms: Some(T0 + 5_000), ..ReadOptions::default() }).await.expect("read");
    assert_eq!(after.messages, before.messages);
    assert!(after.exact, "{after:?}");
    assert_eq!(after.messages.iter().map(|m| &m.payload[..]).collect::<Vec<_>>(), [&b"kept"[..]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_a_closer_left_unfinished_keeps_its_buckets_provisional_and_a_writer_finishes_it() {
    let d = Dir::new();
    let clock = ManualClock::starting_at(T0);
    let log = d.log(clock.shared());
    let w = log.writer("w").expect("writer");
    assert!(w.append(Batch::one(T0 + 1, "kept")).await.expect("append").accepted);
    clock.advance(Duration::from_secs(10));
    // A closer made the intent of a sweep of [T0, T0 + 4 s) and died.
    let group = d.storage().bucket_dir(T0).expect("dir").parent().expect("group").to_path_buf();
    fs::write(group.join(format!("sweep.{T0:016}.{:016}", T0 + 4_000)), b"").expect("intent");
    let to = ReadOptions { to_ms: Some(T0 + 4_000), ..ReadOptions::default() };
    let read = log.read(&to).await.expect("read");
    assert!(!read.exact, "nothing the unfinished sweep covers is final: {read:?}");

    // A late writer finds it, finishes it (its listing shows the writer's own
    // bucket), and, no close of that bucket having begun, is accepted.
    let late = log.writer("late").expect("writer");
    let out = late.append(Batch::one(T0 + 2_000, "late")).await.expect("a verdict");
    assert_eq!(out.decision, Decision::NoCloseBegun);
    let mut cursor = log.close_start(None).await.expect("start");
    log.close_due(&mut cursor).await.expect("round");
    let read = log.read(&to).await.expect("read");
    assert!(read.exact, "{read:?}");
    assert_eq!(read.messages.iter().map(|m| &m.payload[..]).collect::<Vec<_>>(), [&b"kept"[..], &b"late"[..]]);
}
