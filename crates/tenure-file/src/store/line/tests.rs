use super::entry::parse_seq;
use super::*;
use tenure_core::cas::ENTRY_TTL;

#[test]
fn entries_are_twenty_digits_and_their_content_a_kind_and_a_nonce() {
    assert_eq!(parse_seq(OsStr::new(&entry_file(42))), Some(42));
    for bad in ["42", "0000000000000000004x", "00000000000000000042.tmp-ab", "99999999999999999999", ""] {
        assert_eq!(parse_seq(OsStr::new(bad)), None, "{bad}");
    }
    let w = Waiter { nonce: "n\u{1b}1".into(), shared: true };
    assert_eq!(parse_entry(&entry_bytes(&w, true)), Some((w.clone(), true)));
    assert_eq!(parse_entry(&entry_bytes(&w, false)), Some((w, false)));
    let empty = Waiter { nonce: String::new(), shared: false };
    assert_eq!(parse_entry(&entry_bytes(&empty, true)), Some((empty, true)));
    assert_eq!(entry_bytes(&Waiter { nonce: "n".into(), shared: false }, true), b"X\nn");
    for bad in [&b"x"[..], b"y\nn", b"\xff\nn", b"", b"xs\nn"] {
        assert_eq!(parse_entry(bad), None, "{bad:?}");
    }
}

/// A waiter's entry is locked while its store holds it: another store (a
/// process of its own) sees it in line; once the lock is gone (what the
/// kernel does for an ended process) it does not; entering again, as a
/// waiter does every few seconds, holds the same entry again; leaving
/// removes it and lets it go.
#[test]
fn an_entry_is_in_line_while_its_store_holds_its_lock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mine, other) = (FileBackend::new(dir.path()), FileBackend::new(dir.path()));
    let w = Waiter { nonce: "n1".into(), shared: false };
    let line = |b: &FileBackend| -> Vec<String> {
        b.waiters_blocking("l").expect("read").into_iter().map(|w| w.nonce).collect()
    };
    mine.enter_blocking("l", &w, std::time::Instant::now()).expect("enter");
    assert_eq!(line(&other), ["n1"]);
    mine.held.book.lock().mine.clear();
    assert!(line(&other).is_empty(), "its lock is free: ended");
    mine.enter_blocking("l", &w, std::time::Instant::now()).expect("enter again");
    assert_eq!(line(&other), ["n1"], "held again, the same entry");
    let files = std::fs::read_dir(dir.path().join("l~line")).expect("line").count();
    assert_eq!(files, 1, "one entry");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(mine.leave("l", "n1")).expect("leave");
    assert!(line(&other).is_empty());
    assert_eq!(mine.held.len(), 0, "let go");
}

/// On a directory other machines share (NFS), a waiter's entry is not
/// locked and no entry's lock is tried: a lock there is the server's, or
/// (`nolock`) this machine's alone, and no sign of a process either way.
/// Entries are judged by their age, as before locks.
#[test]
fn on_a_network_mount_entries_are_not_locked_and_locks_are_not_tried() {
    let dir = tempfile::tempdir().expect("tempdir");
    let local = FileBackend::new(dir.path());
    let nfs = FileBackend::new(dir.path()).pretending_network("a test's NFS");
    let line = |b: &FileBackend| -> Vec<String> {
        b.waiters_blocking("l").expect("read").into_iter().map(|w| w.nonce).collect()
    };
    // A locked entry whose lock is gone (its process ended, as seen here).
    local.enter_blocking("l", &Waiter { nonce: "n1".into(), shared: false }, std::time::Instant::now()).expect("enter");
    local.held.book.lock().mine.clear();
    nfs.enter_blocking("l", &Waiter { nonce: "n2".into(), shared: false }, std::time::Instant::now())
        .expect("enter on NFS");
    let line_dir = Dir::open_root(&dir.path().join("l~line"), false).expect("open").expect("there");
    assert_eq!(line_dir.unlocked(&entry_file(2)).expect("lock"), Some(true), "not locked on NFS");
    let entry = std::fs::read(dir.path().join("l~line").join(entry_file(2))).expect("entry");
    assert_eq!(entry, b"x\nn2", "an entry judged by age");
    assert_eq!(line(&nfs), ["n1", "n2"], "by age alone on NFS");
    assert_eq!(line(&local), ["n2"], "the lock tried where it means something");
}

/// A lease store over `b`, as a process keeps one.
fn lease_store(b: &FileBackend) -> std::sync::Arc<tenure_core::CasStore> {
    let (clock, opts) = (tenure_core::SystemClock::shared(), tenure_core::CasOptions::default());
    std::sync::Arc::new(tenure_core::CasStore::new(std::sync::Arc::new(b.clone()), clock, opts))
}

/// An exclusive request for lease `l` by a holder of its own.
fn request(label: &str) -> tenure_core::AcquireRequest {
    tenure_core::AcquireRequest {
        name: tenure_core::LeaseName::new("l").expect("name"),
        mode: tenure_core::Mode::Exclusive,
        ttl: Duration::from_secs(30),
        holder: std::sync::Arc::new(tenure_core::Holder::current().with_label(label)),
        retake: false,
        meta: None,
    }
}

fn granted(a: tenure_core::Attempt) -> tenure_core::Grant {
    match a {
        tenure_core::Attempt::Granted(g) => g,
        tenure_core::Attempt::Busy(b) => panic!("busy: {}", b.describe()),
    }
}

/// An entry that cannot be read (an I/O error: tests run as root, who
/// can read any file, so a hook fails its read) is skipped and left
/// alone: it is no waiter, and nobody fails on it. Before, every look at
/// the line failed on it: a waiter could not enter, and a store that had
/// waited in the line could not take the lease, however free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_that_cannot_be_read_is_skipped_and_keeps_nobody_from_the_lease() {
    use tenure_core::LeaseStore;
    let dir = tempfile::tempdir().expect("tempdir");
    let line_dir = dir.path().join("l~line");
    std::fs::create_dir_all(&line_dir).expect("mkdir");
    std::fs::write(line_dir.join(entry_file(1)), b"x\nbroken").expect("write");
    let b = FileBackend::new(dir.path()).with_fsync(false);
    b.held.hooks.broken.lock().insert(entry_file(1));
    assert!(b.waiters_blocking("l").expect("read the line").is_empty(), "no waiter");

    let (holder, waiting) = (lease_store(&FileBackend::new(dir.path())), lease_store(&b));
    let first = granted(holder.try_acquire(&request("first")).await.expect("acquire"));
    let queued = {
        let waiting = waiting.clone();
        tokio::spawn(async move { waiting.acquire_queued(&request("w"), Duration::from_secs(60)).await })
    };
    for _ in 0..500 {
        if line_dir.join(entry_file(2)).exists() || queued.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    holder.release(&first, &tenure_core::ReleaseRequest::default()).await.expect("release");
    let answer = tokio::time::timeout(Duration::from_secs(5), queued).await.expect("in time").expect("task");
    let g = granted(answer.expect("a line").expect("waited in line"));
    waiting.release(&g, &tenure_core::ReleaseRequest::default()).await.expect("release");
    let g = granted(waiting.try_acquire(&request("again")).await.expect("the lease is free"));
    waiting.release(&g, &tenure_core::ReleaseRequest::default()).await.expect("release");
    assert!(line_dir.join(entry_file(1)).exists(), "left alone");
}

/// What a line of 200 waiters costs, in entries read: a round of stays
/// (each waiter's every [`tenure_core::cas::REFRESH`]) reads none, and a round
/// of turns (each waiter's look at the line when the entry ahead leaves,
/// and at that same period) reads the one entry just ahead of each. (It
/// was the whole line for each waiter, twice per period: 2 N² entries.)
/// The figures are printed; only the counts are checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_stays_in_line_reading_no_entry_and_looks_only_ahead() {
    use std::sync::atomic::Ordering;
    const N: usize = 200;
    let dir = tempfile::tempdir().expect("tempdir");
    let b = FileBackend::new(dir.path()).with_fsync(false);
    let waiters: Vec<Waiter> = (0..N).map(|i| Waiter { nonce: format!("w{i}"), shared: false }).collect();
    for w in &waiters {
        b.enter_blocking("l", w, std::time::Instant::now()).expect("enter");
    }
    let shared = b.shared().expect("inotify");
    let reads = || b.held.hooks.reads.load(Ordering::Relaxed);
    let (before, started) = (reads(), std::time::Instant::now());
    for w in &waiters {
        b.enter_blocking("l", w, std::time::Instant::now()).expect("stay");
    }
    let (stays, stays_took) = (reads() - before, started.elapsed());
    let (before, started) = (reads(), std::time::Instant::now());
    for (i, w) in waiters.iter().enumerate() {
        let turn = b.turn_blocking("l", w, &shared).expect("turn");
        assert_eq!(matches!(turn, Turn::Mine), i == 0, "only the first waiter's turn");
    }
    let (turns, turns_took) = (reads() - before, started.elapsed());
    eprintln!(
        "{N} waiters: a round of stays read {stays} entries in {stays_took:?}, a round of turns {turns} in {turns_took:?}"
    );
    assert_eq!(stays, 0, "a waiter stays in line without reading it");
    assert_eq!(turns, N - 1, "each waiter reads the entry just ahead of it");
}

/// A store keeps at most so many entries open, a quarter of the
/// process's limit of open files; past it, a waiter is told that there is
/// no line for it (its acquisition polls, it does not fail) and writes no
/// file, while those in line stay there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_entries_a_store_keeps_open_a_waiter_polls() {
    use tenure_core::LeaseStore;
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    assert_eq!(Some(max_held() as u64), soft.map(|n| n / 4), "a quarter of the limit");
    let dir = tempfile::tempdir().expect("tempdir");
    let b = FileBackend { held: Arc::new(Entries::with_cap(2)), ..FileBackend::new(dir.path()).with_fsync(false) };
    let waiter = |i: usize| Waiter { nonce: format!("w{i}"), shared: false };
    for i in 0..2 {
        b.enter_blocking("l", &waiter(i), std::time::Instant::now()).expect("enter");
    }
    let e = b.enter_blocking("l", &waiter(2), std::time::Instant::now()).expect_err("one too many");
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    b.enter_blocking("l", &waiter(0), std::time::Instant::now()).expect("staying in line is no new entry");

    let holder = lease_store(&FileBackend::new(dir.path()));
    let first = granted(holder.try_acquire(&request("first")).await.expect("acquire"));
    let (waiting, w) = (lease_store(&b), request("w"));
    let queued = waiting.acquire_queued(&w, Duration::from_secs(60));
    let answer = tokio::time::timeout(Duration::from_secs(5), queued).await.expect("answered at once");
    assert!(answer.is_none(), "no line for it: its caller polls");
    holder.release(&first, &tenure_core::ReleaseRequest::default()).await.expect("release");
    assert_eq!(std::fs::read_dir(dir.path().join("l~line")).expect("line").count(), 2, "no third file");
}

#[test]
fn a_file_is_alive_for_the_entry_ttl_and_the_margin_and_never_from_the_future() {
    let ttl = tenure_core::limits::millis(ENTRY_TTL + MARGIN);
    assert!(alive(Some(1_000_000), 1_000_000 + ttl).0);
    assert!(!alive(Some(1_000_000), 1_000_000 + ttl + 1).0, "crashed");
    assert!(alive(Some(1_000_000 + 2_000), 1_000_000).0, "within the margin");
    assert!(!alive(Some(u64::MAX), 1_000_000).0, "dated in the future");
    assert!(!alive(None, 1_000_000).0);
}

/// A wait dropped while its entry is being written (the write goes on, on a
/// blocking thread): its departure finds nothing to remove, so the entry,
/// written after it, is removed as soon as it is written instead of holding
/// up everyone behind it. A wait asked for after the departure enters as usual.
#[test]
fn an_entry_whose_waiter_left_while_it_was_being_written_is_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (b, other) = (FileBackend::new(dir.path()), FileBackend::new(dir.path()));
    let w = Waiter { nonce: "n1".into(), shared: false };
    let line = |b: &FileBackend| -> Vec<String> {
        b.waiters_blocking("l").expect("read").into_iter().map(|w| w.nonce).collect()
    };
    let asked = std::time::Instant::now();
    b.leave_blocking("l", "n1").expect("leave");
    b.enter_blocking("l", &w, asked).expect("enter");
    assert!(line(&other).is_empty(), "the entry of a waiter that left stayed in line");
    assert_eq!(b.held.len(), 0, "its file stayed open");
    b.enter_blocking("l", &w, std::time::Instant::now()).expect("enter");
    assert_eq!(line(&other), ["n1"]);
}
