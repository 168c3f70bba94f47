//! The directory store shared with careless and hostile tenants: entries tenure
//! did not write are judged like corrupt records, never followed, never a hang.

use std::os::unix::fs::symlink;
use std::sync::Arc;
use std::time::Duration;

use tenure_core::{
    AcquireRequest, Attempt, CasOptions, CasStore, EndedHow, Error, Holder, LeaseName, LeaseStore, ManualClock, Mode,
};
use tenure_file::FileBackend;

const CORRUPT_TTL: Duration = Duration::from_secs(60);

fn request(holder: &str) -> AcquireRequest {
    AcquireRequest {
        name: LeaseName::new("l").expect("name"),
        mode: Mode::Exclusive,
        ttl: Duration::from_secs(10),
        holder: Arc::new(Holder::current().with_nonce(holder)),
        retake: false,
        meta: None,
    }
}

fn store(dir: &std::path::Path, clock: &ManualClock) -> CasStore {
    let backend = Arc::new(FileBackend::new(dir).with_fsync(false));
    CasStore::new(backend, clock.shared(), CasOptions::default().with_corrupt_ttl(CORRUPT_TTL))
}

fn version(n: u64) -> String {
    format!("~{n:020}")
}

/// Plants `make` as version 7 of lease `l`, then checks that the lease is busy
/// as corrupt (naming `what`) until it has been watched for the corrupt TTL, and
/// then granted above version 7.
async fn judged_by_age(what: &str, make: impl FnOnce(&std::path::Path)) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let lease = tmp.path().join("l");
    std::fs::create_dir(&lease).expect("mkdir");
    make(&lease.join(version(7)));
    // The planted entry is new: its age by the wall clock does not help.
    let clock = ManualClock::new();
    let s = store(tmp.path(), &clock);
    match s.try_acquire(&request("a")).await.expect("attempt") {
        Attempt::Busy(b) => {
            let detail = b.corrupt.expect("busy as corrupt");
            assert!(detail.contains(what), "{what}: {detail}");
        }
        Attempt::Granted(g) => panic!("{what}: granted at once with token {}", g.token),
    }
    let state = s.inspect(&LeaseName::new("l").expect("name")).await.expect("inspect");
    assert!(state.corrupt.is_some_and(|c| c.contains(what)), "status shows it");
    clock.advance(CORRUPT_TTL);
    match s.try_acquire(&request("a")).await.expect("attempt") {
        Attempt::Granted(g) => {
            assert!(g.token > 7, "{what}: token {} must be above the planted version", g.token);
            assert_eq!(g.predecessor.map(|p| p.how), Some(EndedHow::Corrupt));
        }
        Attempt::Busy(b) => panic!("{what}: still busy after the corrupt ttl: {b:?}"),
    }
}

#[tokio::test]
async fn odd_entries_at_a_version_are_corrupt_records_judged_by_age() {
    judged_by_age("a directory", |p| std::fs::create_dir(p).expect("mkdir")).await;
    judged_by_age("symbolic link", |p| symlink("/nowhere/at/all", p).expect("symlink")).await;
    judged_by_age("symbolic link", |p| symlink("/dev/zero", p).expect("symlink")).await;
    judged_by_age("FIFO", |p| rustix::fs::mkfifoat(rustix::fs::CWD, p, rustix::fs::Mode::from(0o644)).expect("mkfifo"))
        .await;
    judged_by_age("bytes", |p| std::fs::File::create(p).and_then(|f| f.set_len(10 << 30)).expect("sparse")).await;
    judged_by_age("empty record", |p| std::fs::write(p, b"").expect("write")).await;
}

#[tokio::test]
async fn a_record_with_absurd_numbers_is_judged_by_age_and_tokens_keep_growing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::new();
    let s = store(tmp.path(), &clock);
    let first = match s.try_acquire(&request("a")).await.expect("attempt") {
        Attempt::Granted(g) => g,
        other => panic!("{other:?}"),
    };
    let path = tmp.path().join("l").join(version(1));
    let text = std::fs::read_to_string(&path).expect("read");
    let absurd = text.replace(r#""ttl_ms":10000"#, r#""ttl_ms":18446744073709551615"#);
    assert_ne!(absurd, text);
    std::fs::write(tmp.path().join("l").join(version(2)), absurd).expect("plant");
    let other = store(tmp.path(), &clock);
    assert!(
        matches!(other.try_acquire(&request("b")).await.expect("attempt"), Attempt::Busy(b) if b.corrupt.is_some())
    );
    clock.advance(CORRUPT_TTL);
    match other.try_acquire(&request("b")).await.expect("attempt") {
        Attempt::Granted(g) => assert!(g.token > first.token.max(2)),
        busy => panic!("a century-long ttl must not block: {busy:?}"),
    }
}

#[tokio::test]
async fn a_symlinked_lease_directory_is_refused_as_corrupt_and_nothing_is_written_through_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("tempdir");
    symlink(outside.path(), tmp.path().join("l")).expect("symlink");
    let clock = ManualClock::new();
    let s = store(tmp.path(), &clock);
    match s.try_acquire(&request("a")).await {
        Err(Error::Corrupt { detail, .. }) => assert!(detail.contains("symbolic link"), "{detail}"),
        other => panic!("expected a corrupt-store refusal, got {other:?}"),
    }
    assert_eq!(std::fs::read_dir(outside.path()).expect("list").count(), 0);
    assert_eq!(s.list("").await.expect("list"), [LeaseName::new("l").expect("name")], "listed for status");
}
