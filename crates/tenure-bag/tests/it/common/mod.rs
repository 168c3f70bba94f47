//! The bag behaviours every storage must show, as plain async functions that
//! each storage's test file calls (object_store's `integration.rs` style).

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tenure_bag::{BagOptions, Batch, BucketState, Decision, Log, LogSettings, ReadOptions};
use tenure_core::{Clock, ManualClock};

/// Calls `$m!` with the name of every behaviour below, so that each storage's
/// test file runs them all (a new behaviour is added here once).
#[allow(unused_macros)] // not every test file that shares this module runs them
macro_rules! every_behaviour {
    ($m:ident) => {
        $m!(
            an_early_append_is_accepted_on_the_fast_path,
            a_late_append_before_any_close_is_accepted_and_the_close_lists_it,
            an_append_into_a_closed_bucket_is_rejected_and_never_read,
            a_late_writer_that_finds_a_prelock_helps_finish_the_close,
            closing_twice_or_from_two_processes_gives_one_manifest,
            open_buckets_are_provisional_and_closed_ones_exact,
            readers_merge_by_timestamp_then_writer_then_sequence,
            timestamps_outside_the_log_or_across_buckets_are_refused,
            compaction_twice_or_concurrently_gives_the_same_snapshots,
            a_metronome_closes_due_buckets_until_shut_down,
            closing_before_the_grace_is_refused,
        );
    };
}
#[allow(unused_imports)]
pub(crate) use every_behaviour;

/// Wall time the tests start at (a bucket boundary).
pub const T0: u64 = 1_767_225_600_000;

/// One fresh log, reachable by several "processes" with their own clocks.
pub trait Harness: Send + Sync {
    /// A handle on the same log with `clock`.
    fn log(&self, clock: Arc<dyn Clock>) -> Log;
    /// Leaves a prelock in `bucket` without a manifest (a closer killed mid-close).
    fn leave_prelock(&self, log: &Log, bucket: u64) -> impl std::future::Future<Output = ()> + Send;
}

pub fn settings() -> LogSettings {
    LogSettings {
        width: Duration::from_secs(1),
        grace: Duration::from_secs(2),
        max_skew: Duration::from_millis(500),
        chunk_buckets: 4,
    }
}

pub fn options(clock: Arc<dyn Clock>) -> BagOptions {
    BagOptions::default().with_clock(clock).with_settings(settings())
}

fn clock() -> ManualClock {
    ManualClock::starting_at(T0)
}

async fn payloads(log: &Log) -> Vec<String> {
    let read = log.read(&ReadOptions::default()).await.expect("read");
    read.messages.iter().map(|m| String::from_utf8_lossy(&m.payload).into_owned()).collect()
}

pub async fn an_early_append_is_accepted_on_the_fast_path(h: &impl Harness) {
    let c = clock();
    let log = h.log(c.shared());
    let w = log.writer("w1").expect("writer");
    let out = w.append(Batch::one(T0 + 10, "hello")).await.expect("append");
    assert!(out.accepted);
    assert_eq!(out.decision, Decision::Early);
    assert_eq!(payloads(&log).await, ["hello"]);
}

pub async fn a_late_append_before_any_close_is_accepted_and_the_close_lists_it(h: &impl Harness) {
    let c = clock();
    let log = h.log(c.shared());
    let w = log.writer("w1").expect("writer");
    // Inside max_skew of end + grace: no fast path, so the writer looks for a prelock.
    c.advance(Duration::from_millis(2_600));
    let out = w.append(Batch::one(T0 + 1, "late but fine")).await.expect("append");
    assert_eq!(out.decision, Decision::NoCloseBegun);
    c.advance(Duration::from_secs(1));
    let closed = log.close(T0).await.expect("close");
    assert!(closed.published && closed.items == 1);
    assert_eq!(payloads(&log).await, ["late but fine"]);
}

pub async fn an_append_into_a_closed_bucket_is_rejected_and_never_read(h: &impl Harness) {
    let c = clock();
    let log = h.log(c.shared());
    let early = log.writer("early").expect("writer");
    assert!(early.append(Batch::one(T0, "in time")).await.expect("append").accepted);
    c.advance(Duration::from_secs(3));
    log.close(T0).await.expect("close");
    // A writer with no file in the bucket yet is stopped before it writes.
    let fresh = log.writer("fresh").expect("writer");
    let out = fresh.append(Batch::one(T0 + 5, "too late")).await.expect("append");
    assert!(!out.accepted);
    assert!(matches!(out.decision, Decision::ClosedBeforeWrite | Decision::NotInManifest));
    // A writer that already has a file there writes, then learns from the manifest.
    let out = early.append(Batch::one(T0 + 6, "also too late")).await.expect("append");
    assert_eq!(out.decision, Decision::NotInManifest);
    assert!(out.clone().into_result(log.url()).is_err());
    assert_eq!(payloads(&log).await, ["in time"]);
}

pub async fn a_late_writer_that_finds_a_prelock_helps_finish_the_close(h: &impl Harness) {
    let c = clock();
    let log = h.log(c.shared());
    let w = log.writer("w1").expect("writer");
    assert!(w.append(Batch::one(T0, "first")).await.expect("append").accepted);
    c.advance(Duration::from_secs(3));
    // A closer died after its prelock: nobody else is around to finish.
    h.leave_prelock(&log, T0).await;
    let out = w.append(Batch::one(T0 + 1, "second")).await.expect("append");
    assert_eq!(out.decision, Decision::InManifest, "the writer finished the close itself and is in it");
    let read = log.read(&ReadOptions::default()).await.expect("read");
    assert_eq!(read.messages.len(), 2);
    let bucket_closed = log.close(T0).await.expect("close");
    assert!(!bucket_closed.published, "the writer already published the manifest");
}

pub async fn closing_twice_or_from_two_processes_gives_one_manifest(h: &impl Harness) {
    let c = clock();
    let (a, b) = (h.log(c.shared()), h.log(c.skewed(300).shared()));
    for i in 0..3 {
        let w = a.writer(format!("w{i}")).expect("writer");
        assert!(w.append(Batch::one(T0 + i, format!("m{i}"))).await.expect("append").accepted);
    }
    c.advance(Duration::from_secs(4));
    let (x, y) = tokio::join!(a.close(T0), b.close(T0));
    let (x, y) = (x.expect("close"), y.expect("close"));
    assert_eq!(u8::from(x.published) + u8::from(y.published), 1, "exactly one manifest is published");
    assert_eq!((x.items, y.items), (3, 3));
    assert!(!a.close(T0).await.expect("again").published);
    assert_eq!(payloads(&a).await, payloads(&b).await);
}

pub async fn open_buckets_are_provisional_and_closed_ones_exact(h: &impl Harness) {
    let c = clock();
    let log = h.log(c.shared());
    let w = log.writer("w").expect("writer");
    w.append(Batch::one(T0, "a")).await.expect("append");
    w.append(Batch::one(T0 + 2_000, "b")).await.expect("append");
    let read = log.read(&ReadOptions::default()).await.expect("read");
    assert!(!read.exact);
    assert_eq!(read.open, [T0, T0 + 2_000]);
    assert_eq!(read.absent, 1 + 10, "the empty bucket between, and those since the first bucket");
    c.advance(Duration::from_secs(10));
    let mut cursor = log.close_start(None).await.expect("start");
    let round = log.close_due(&mut cursor).await.expect("close");
    assert!(round.closed >= 13, "every due bucket, empty ones too: {round:?}");
    let read = log.read(&ReadOptions { to_ms: Some(T0 + 3_000), ..Default::default() }).await.expect("read");
    assert!(read.exact, "{read:?}");
    assert_eq!(read.messages.len(), 2);
}

pub async fn readers_merge_by_timestamp_then_writer_then_sequence(h: &impl Harness) {
    let c = clock();
    let log = h.log(c.shared());
    let (a, b) = (log.writer("a").expect("writer"), log.writer("b").expect("writer"));
    b.append(Batch { messages: vec![(T0 + 5, "b0".into()), (T0 + 5, "b1".into())], leases: vec![] })
        .await
        .expect("append");
    a.append(Batch::one(T0 + 5, "a0")).await.expect("append");
    a.append(Batch::one(T0 + 1_500, "a1")).await.expect("append");
    b.append(Batch::one(T0 + 3, "b2")).await.expect("append");
    assert_eq!(payloads(&log).await, ["b2", "a0", "b0", "b1", "a1"]);
}

pub async fn timestamps_outside_the_log_or_across_buckets_are_refused(h: &impl Harness) {
    let c = clock();
    let log = h.log(c.shared());
    let w = log.writer("w").expect("writer");
    w.append(Batch::one(T0, "creates the log")).await.expect("append");
    let out = w.append(Batch::one(T0 - 3_600_000, "an hour before the log")).await.expect("append");
    assert_eq!(out.decision, Decision::BeforeFirstBucket);
    let across = Batch { messages: vec![(T0 + 999, Bytes::new()), (T0 + 1_000, Bytes::new())], leases: vec![] };
    assert!(matches!(w.append(across).await, Err(tenure_core::Error::InvalidOptions { .. })));
    assert!(log.writer("bad/id").is_err());
}

pub async fn compaction_twice_or_concurrently_gives_the_same_snapshots(h: &impl Harness) {
    let c = clock();
    let (a, b) = (h.log(c.shared()), h.log(c.shared()));
    let w = a.writer("w").expect("writer");
    for i in 0..12u64 {
        w.append(Batch::one(T0 + i * 700, format!("m{i}"))).await.expect("append");
    }
    let before = payloads(&a).await;
    c.advance(Duration::from_secs(30));
    let (x, y) = tokio::join!(a.compact(), b.compact());
    let (x, y) = (x.expect("compact"), y.expect("compact"));
    assert!(x.published + y.published > 0);
    assert!(x.mismatched.is_empty() && y.mismatched.is_empty());
    let again = a.compact().await.expect("compact");
    assert_eq!((again.published, again.raced), (0, 0));
    assert!(again.existing > 0);
    let read = a.read(&ReadOptions::default()).await.expect("read");
    assert!(read.snapshots > 0 && read.exact);
    let after: Vec<_> = read.messages.iter().map(|m| String::from_utf8_lossy(&m.payload).into_owned()).collect();
    assert_eq!(after, before);
    let plain = a.read(&ReadOptions { skip_snapshots: true, ..Default::default() }).await.expect("read");
    assert_eq!(plain.messages, read.messages);
}

pub async fn a_metronome_closes_due_buckets_until_shut_down(h: &impl Harness) {
    let c = clock();
    let log = h.log(c.shared());
    log.writer("w").expect("writer").append(Batch::one(T0, "x")).await.expect("append");
    let start = log.close_start(Some(Duration::from_secs(5))).await.expect("start");
    let metronome = tenure_bag::Metronome::start(log.clone(), start, Duration::from_millis(100));
    // Time moves on while we wait (bounded) for a background round to close the
    // bucket: the loop ends on the state, not on a timing.
    let mut state = BucketState::Open;
    for _ in 0..600 {
        c.advance(Duration::from_millis(100));
        tokio::time::sleep(Duration::from_millis(5)).await;
        let opts = ReadOptions { from_ms: Some(T0), to_ms: Some(T0 + 1_000), ..Default::default() };
        if log.read(&opts).await.expect("read").exact {
            state = BucketState::Closed;
            break;
        }
    }
    metronome.shutdown().await.expect("shutdown");
    assert_eq!(state, BucketState::Closed);
}

pub async fn closing_before_the_grace_is_refused(h: &impl Harness) {
    let c = clock();
    let log = h.log(c.shared());
    let w = log.writer("w").expect("writer");
    let out = w.append(Batch::one(T0, "early")).await.expect("append");
    assert_eq!(out.decision, Decision::Early);
    // The writer skipped its check: a close now could drop an accepted append.
    assert!(matches!(log.close(T0).await, Err(tenure_core::Error::InvalidOptions { .. })));
    c.advance(Duration::from_secs(3));
    assert!(log.close(T0).await.expect("close after the grace").items == 1);
}

/// Names, sizes, modes and modification times of everything under `root`
/// (never following a symlink), to show that nothing there changed.
pub fn tree(
    root: &std::path::Path,
) -> std::collections::BTreeMap<std::path::PathBuf, (u64, u32, Option<std::time::SystemTime>)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let meta = std::fs::symlink_metadata(entry.path()).expect("meta");
            if meta.is_dir() {
                stack.push(entry.path());
            }
            out.insert(entry.path(), (meta.len(), meta.permissions().mode(), meta.modified().ok()));
        }
    }
    out
}
