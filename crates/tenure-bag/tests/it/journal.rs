//! The lease-guarded journal and its audit, on a directory with leases from the
//! in-memory store, all on manual clocks (one of them skewed).

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{T0, options};
use tenure_bag::fs::FsStorage;
use tenure_bag::{
    Batch, Journal, LeaseStamp, Log, ReadOptions, VerifiedWitness, ViolationKind, WitnessVerifier, audit,
};
use tenure_core::{CasOptions, CasStore, Client, Clock, LeaseOptions, LeaseStore, ManualClock, ReleaseRequest};

fn journal(dir: &std::path::Path, store: &str, clock: &ManualClock, id: &str) -> Journal {
    journal_with_ttl(dir, store, clock, id, Duration::from_secs(5))
}

fn journal_with_ttl(dir: &std::path::Path, store: &str, clock: &ManualClock, id: &str, ttl: Duration) -> Journal {
    let log = Log::on_fs(FsStorage::new(dir, false), options(clock.shared()));
    let leases = leases_on(store, clock);
    let opts = LeaseOptions::exclusive().with_ttl(ttl).with_timeout(Duration::from_secs(1));
    Journal::new(log.writer(id).expect("writer"), Client::new(leases), opts)
}

/// The lease store `memory://NAME` names, on `clock`.
fn leases_on(store: &str, clock: &ManualClock) -> Arc<dyn LeaseStore> {
    let memory = tenure_core::store::memory::open(store).expect("lease store");
    Arc::new(CasStore::new(memory, clock.shared(), CasOptions::default()))
}

fn unique_store() -> String {
    format!("memory://journal-{:016x}", rand::random::<u64>())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_operations_are_ordered_by_the_shared_lease_even_with_a_slow_clock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = unique_store();
    let fast = ManualClock::starting_at(T0);
    let slow = fast.skewed(-400);
    let a = journal(dir.path(), &store, &fast, "a");
    let b = journal(dir.path(), &store, &slow, "b");

    let mut txn = a.begin(&["acct/1"]).await.expect("begin");
    assert!(txn.append(vec!["a: debit 10".into()]).await.expect("append").accepted);
    txn.commit().await.expect("commit");
    // b's clock is 400 ms behind, but the watermark puts its stamp above a's.
    let mut txn = b.begin(&["acct/1", "acct/2"]).await.expect("begin");
    assert!(txn.floor_ms() > T0);
    assert!(txn.append(vec!["b: credit 10".into()]).await.expect("append").accepted);
    txn.commit().await.expect("commit");

    let read = a.writer().log().read(&ReadOptions::default()).await.expect("read");
    let order: Vec<_> = read.messages.iter().map(|m| String::from_utf8_lossy(&m.payload).into_owned()).collect();
    assert_eq!(order, ["a: debit 10", "b: credit 10"]);
    let leases: Vec<_> = read.messages[1].leases.iter().map(|l| (l.name.as_str(), l.token)).collect();
    assert_eq!(leases, [("acct/1", 2), ("acct/2", 1)]);
    let report = audit(&read, None, 1_000);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!((report.messages, report.unguarded), (2, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_expired_predecessor_the_next_holder_first_closes_its_buckets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = unique_store();
    let clock = ManualClock::starting_at(T0);
    let a = journal(dir.path(), &store, &clock, "a");
    let mut txn = a.begin(&["acct/9"]).await.expect("begin");
    txn.append(vec!["a: before vanishing".into()]).await.expect("append");
    drop(txn); // dropped, not committed: its deadline becomes the watermark
    released(&store, &clock, "acct/9").await;
    // b's lease outlives the wait for the predecessor's buckets by far, so it
    // needs no renewal while this test runs the clock ahead of real time.
    let b = journal_with_ttl(dir.path(), &store, &clock, "b", Duration::from_secs(600));
    let (mut txn, b) = begin_while_time_passes(b, &clock, "acct/9").await;
    let predecessor = txn.grants()[0].predecessor.clone().expect("predecessor");
    assert!(!predecessor.how.graceful(), "{:?}", predecessor.how);
    let watermark = predecessor.watermark_ms.expect("watermark");
    let log = b.writer().log();
    // The predecessor's last TTL before its watermark (older buckets are the
    // metronome's: they were past their grace long ago).
    let range = ReadOptions { from_ms: Some(watermark - 5_000), to_ms: Some(watermark + 1), ..Default::default() };
    let settled = log.read(&range).await.expect("read");
    assert!(settled.exact, "every bucket up to the watermark is closed before b writes: {settled:?}");
    assert_eq!(settled.messages.len(), 1);
    let out = txn.append(vec!["b: after".into()]).await.expect("append");
    assert!(out.max_ts_ms > watermark);
    txn.commit().await.expect("commit");
}

/// Waits (bounded, in real time) until `leases` shows no holder of `name`: a
/// dropped grant is released in the background.
async fn released(store: &str, clock: &ManualClock, name: &str) {
    let leases = leases_on(store, clock);
    let leases = Client::new(leases);
    for _ in 0..6_000 {
        if leases.inspect(name).await.expect("inspect").holders.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{name} was never released");
}

/// `b.begin(name)` while time moves on, until it has waited out the
/// predecessor's buckets (a bounded loop).
async fn begin_while_time_passes(b: Journal, clock: &ManualClock, name: &'static str) -> (tenure_bag::Txn, Journal) {
    let begin = tokio::spawn(async move { b.begin(&[name]).await.map(|t| (t, b)) });
    for _ in 0..2_000 {
        if begin.is_finished() {
            break;
        }
        clock.advance(Duration::from_millis(100));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    begin.await.expect("join").expect("begin")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_decides_a_late_message_from_early_in_a_long_held_lease_before_it_stamps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = unique_store();
    let clock = ManualClock::starting_at(T0);
    let ttl = Duration::from_secs(5);
    let a = journal_with_ttl(dir.path(), &store, &clock, "a", ttl);
    let mut txn = a.begin(&["acct/5"]).await.expect("begin");
    assert!(txn.append(vec!["a: first".into()]).await.expect("append").accepted);
    // It holds the lease for 20 TTLs, renewing (each step waits, in real time
    // and bounded, for the keep-alive to have renewed recently).
    while clock.wall_ms() < T0 + 20 * 5_000 {
        clock.advance(Duration::from_millis(500));
        let mut renewed = false;
        for _ in 0..2_000 {
            if txn.grants()[0].deadline_ms >= clock.wall_ms() + 3_000 {
                renewed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(renewed, "the keep-alive stopped renewing at {}", clock.wall_ms());
    }
    // It crashed with a batch in flight that it had stamped early on: in its own
    // (fresh) data file of an early bucket, written but not yet decided.
    let early = T0 + 2_000;
    let grant = txn.grants()[0].clone();
    let lease = LeaseStamp {
        name: grant.name.to_string(),
        token: grant.token,
        deadline_ms: T0 + 2_000 + 5_000,
        watermark_ms: None,
        holder: grant.holder.nonce.clone(),
        witness: None,
    };
    let frame = tenure_bag::frame::encode("a", 100, &[lease], &[(early + 1, "a: in flight".into())]).expect("encode");
    let bucket_dir = FsStorage::new(dir.path(), false).bucket_dir(early).expect("dir");
    std::fs::create_dir_all(&bucket_dir).expect("mkdir");
    std::fs::write(bucket_dir.join("a.1.data"), frame).expect("write");
    drop(txn);
    released(&store, &clock, "acct/5").await;

    let b = journal_with_ttl(dir.path(), &store, &clock, "b", ttl);
    let (txn, b) = begin_while_time_passes(b, &clock, "acct/5").await;
    let p = txn.grants()[0].predecessor.clone().expect("predecessor");
    assert!(!p.how.graceful(), "{:?}", p.how);
    assert_eq!(p.acquired_ms, Some(T0), "the grant says where the predecessor's stamps began");
    let watermark = p.watermark_ms.expect("watermark");
    assert!(early + 1_000 < watermark - 5_000, "the bucket is older than one TTL before the watermark");
    // Before b stamps anything, the early bucket is closed: the message is
    // accepted (its manifest covers it), for certain, and every reader sees it.
    let log = b.writer().log();
    let range = ReadOptions { from_ms: Some(early), to_ms: Some(early + 1_000), ..Default::default() };
    let read = log.read(&range).await.expect("read");
    assert!(read.exact, "{read:?}");
    let payloads: Vec<_> = read.messages.iter().map(|m| m.payload.clone()).collect();
    assert_eq!(payloads, ["a: in flight"]);
    // Anything else the predecessor still had on its way there is rejected.
    let late = a.writer().append(Batch::one(early + 2, "a: later still")).await.expect("append");
    assert!(!late.accepted, "{late:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watermark_past_the_deadline_fails_the_append_at_once_instead_of_waiting_for_the_clock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = unique_store();
    let clock = ManualClock::starting_at(T0);
    // A predecessor whose clock read ten years ahead released with its stamps.
    let leases = leases_on(&store, &clock);
    let lease = Client::new(leases).acquire("acct/3", &LeaseOptions::exclusive()).await.expect("acquire");
    let far = T0 + 10 * 365 * 86_400_000;
    lease.release_with(ReleaseRequest { watermark_ms: Some(far), ..Default::default() }).await.expect("release");
    let j = journal(dir.path(), &store, &clock, "j");
    let mut txn = j.begin(&["acct/3"]).await.expect("begin");
    assert_eq!(txn.floor_ms(), far + 1);
    // The manual clock never moves here: waiting for it would never end.
    let out = tokio::time::timeout(Duration::from_secs(30), txn.append(vec!["x".into()])).await.expect("no wait");
    assert!(matches!(out, Err(tenure_core::Error::Lost { reason: tenure_core::LossReason::Expired, .. })), "{out:?}");
}

fn stamp(token: u64, deadline_ms: u64, watermark_ms: Option<u64>, witness: Option<&[u8]>) -> LeaseStamp {
    LeaseStamp {
        name: "acct/1".into(),
        token,
        deadline_ms,
        watermark_ms,
        holder: format!("h{token}"),
        witness: witness.map(<[u8]>::to_vec),
    }
}

async fn write(log: &Log, writer: &str, ts: u64, lease: LeaseStamp) {
    let w = log.writer(writer).expect("writer");
    let batch = Batch { messages: vec![(ts, format!("{writer}@{ts}").into())], leases: vec![lease] };
    assert!(w.append(batch).await.expect("append").accepted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_drop_messages_after_their_deadline_and_the_audit_names_every_violation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::starting_at(T0);
    let log = Log::on_fs(FsStorage::new(dir.path(), false), options(clock.shared()));
    write(&log, "ok", T0 + 100, stamp(1, T0 + 1_000, None, None)).await;
    write(&log, "late", T0 + 1_200, stamp(1, T0 + 1_000, None, None)).await;
    write(&log, "next", T0 + 1_100, stamp(2, T0 + 5_000, Some(T0 + 1_000), None)).await;
    write(&log, "below", T0 + 1_500, stamp(3, T0 + 9_000, Some(T0 + 2_000), None)).await;

    let plain = log.read(&ReadOptions::default()).await.expect("read");
    assert_eq!(plain.late, 1);
    assert!(plain.messages.iter().all(|m| &*m.writer != "late"));

    let all = log.read(&ReadOptions { include_late: true, ..Default::default() }).await.expect("read");
    let report = audit(&all, None, 1_000);
    let mut kinds: Vec<_> = report.violations.iter().map(|v| (v.kind, v.message.writer.clone())).collect();
    kinds.sort_by_key(|k| format!("{k:?}"));
    assert_eq!(
        kinds,
        [
            (ViolationKind::AfterDeadline, "late".to_string()),
            (ViolationKind::NotAboveWatermark, "below".to_string()),
            (ViolationKind::Overlap, "late".to_string()),
        ]
    );
    let overlap = report.violations.iter().find(|v| v.kind == ViolationKind::Overlap).expect("overlap");
    assert_eq!(overlap.other.as_ref().map(|o| o.writer.as_str()), Some("next"));
    assert_eq!(overlap.grant.token, 1);

    // Compaction changes neither what readers drop nor what the audit sees.
    clock.advance(Duration::from_secs(30));
    assert!(log.compact().await.expect("compact").published > 0);
    let compacted = log.read(&ReadOptions::default()).await.expect("read");
    assert!(compacted.snapshots > 0);
    assert_eq!((compacted.late, &compacted.messages), (1, &plain.messages));
    let compacted = log.read(&ReadOptions { include_late: true, ..Default::default() }).await.expect("read");
    assert!(compacted.snapshots > 0);
    assert_eq!(compacted.messages, all.messages, "a snapshot keeps the late message for the audit");
    assert_eq!(audit(&compacted, None, 1_000).violations, report.violations);
}

/// Accepts witnesses whose bytes are `good:<token>`, as a signature check would.
#[derive(Debug)]
struct FakeKey;

impl WitnessVerifier for FakeKey {
    fn verify(&self, witness: &[u8]) -> Result<VerifiedWitness, String> {
        let text = std::str::from_utf8(witness).map_err(|_| "not text")?;
        let token = text.strip_prefix("good:").ok_or("bad signature")?.parse().map_err(|_| "bad token")?;
        Ok(VerifiedWitness {
            name: "acct/1".into(),
            token,
            deadline_ms: T0 + 1_000,
            server_time_ms: T0,
            watermark_ms: None,
            authorizes_writes: true,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn witnesses_are_verified_when_a_key_is_given_and_counted_otherwise() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::starting_at(T0);
    let log = Log::on_fs(FsStorage::new(dir.path(), false), options(clock.shared()));
    write(&log, "signed", T0 + 10, stamp(1, T0 + 1_000, None, Some(b"good:1"))).await;
    write(&log, "forged", T0 + 20, stamp(1, T0 + 1_000, None, Some(b"forged"))).await;
    write(&log, "other", T0 + 30, stamp(1, T0 + 1_000, None, Some(b"good:7"))).await;
    let read = log.read(&ReadOptions { include_late: true, ..Default::default() }).await.expect("read");

    let unverified = audit(&read, None, 1_000);
    assert_eq!((unverified.witnesses_unverified, unverified.violations.len()), (3, 0));

    let key: Arc<dyn WitnessVerifier> = Arc::new(FakeKey);
    let verified = audit(&read, Some(key.as_ref()), 1_000);
    assert_eq!(verified.witnesses_verified, 2);
    let bad: Vec<_> = verified.violations.iter().map(|v| (v.kind, v.message.writer.as_str())).collect();
    assert_eq!(bad, [(ViolationKind::Witness, "forged"), (ViolationKind::Witness, "other")]);
}
