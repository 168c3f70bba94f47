//! The directory store's line (`NAME~line`, a file per waiter) against what
//! can be found in it or done to it: the order it keeps, files no live waiter
//! wrote (crashed or ended waiters, forged, foreign, oversized, numbered at the
//! top of the range), odd nonces, a file where the line belongs, and the line
//! directory moved away. None keeps a waiter from a free lease.

use std::sync::Arc;
use std::time::Duration;

use tenure_core::{Attempt, Holder, ReleaseRequest};

use super::{
    TTL, WAIT, directory, granted, held, line, no_line_but_granted_once_free, queued, req, store, until_queued, waiter,
};

/// Files in a directory's line that no live waiter wrote: a waiter that
/// crashed long ago (its file untouched), a file dated in the future, files
/// that are not entries, a symlink, a directory, a FIFO and an oversized file
/// with an entry's name, and a leftover temp file. None holds up a waiter; the crashed, the future-dated
/// and the old leftover are removed by the next waiter to enter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_waiter_or_a_forged_file_in_a_directory_line_holds_up_nobody() {
    use std::time::SystemTime;
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}?fsync=false", dir.path().display());
    let name = "crash";
    let line_dir = dir.path().join(format!("{name}~line"));
    std::fs::create_dir_all(&line_dir).expect("mkdir");
    let dated = |file: &str, bytes: &[u8], at: SystemTime| {
        std::fs::write(line_dir.join(file), bytes).expect("write");
        let f = std::fs::File::options().write(true).open(line_dir.join(file)).expect("open");
        f.set_modified(at).expect("set mtime");
    };
    let hour = Duration::from_secs(3600);
    dated("00000000000000000001", b"x\ncrashed", SystemTime::now() - hour);
    dated("00000000000000000002", b"x\nfuture", SystemTime::now() + hour);
    dated("00000000000000000003", b"not an entry", SystemTime::now());
    dated("00000000000000000004.tmp-0123", b"x\nhalf", SystemTime::now() - hour);
    dated("notes.txt", b"x\nnotes", SystemTime::now());
    std::os::unix::fs::symlink("/etc/passwd", line_dir.join("00000000000000000005")).expect("symlink");
    std::fs::create_dir(line_dir.join("00000000000000000006")).expect("mkdir");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        line_dir.join("00000000000000000007"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .expect("mkfifo");
    dated("00000000000000000008", format!("x\n{}", "n".repeat(4096)).as_bytes(), SystemTime::now());
    assert_eq!(line(&url, name).await, Vec::<String>::new(), "nobody alive waits");

    let holder = store(&url);
    let first = held(holder.try_acquire(&req(name, "first")).await.expect("acquire"));
    let r = req(name, "next");
    let next_nonce = r.holder.nonce.clone();
    let next = waiter(&url, r);
    until_queued(&url, name, 1).await;
    assert_eq!(line(&url, name).await, [next_nonce]);
    // (Their numbers are free again: the waiter may have taken one.)
    for (gone, was) in [("00000000000000000001", "crashed"), ("00000000000000000002", "future")] {
        let now = std::fs::read(line_dir.join(gone)).unwrap_or_default();
        assert!(!now.ends_with(was.as_bytes()), "{gone} was removed");
    }
    assert!(!line_dir.join("00000000000000000004.tmp-0123").exists(), "the leftover was removed");
    for kept in ["notes.txt", "00000000000000000007", "00000000000000000008"] {
        assert!(line_dir.join(kept).exists(), "{kept}, fresh and not an entry, is left alone");
    }
    holder.release(&first, &ReleaseRequest::default()).await.expect("release");
    assert_eq!(granted(next).await.holder.label.as_deref(), Some("next"));
}

/// A holder with an empty nonce waits in line like any other and gets the
/// lease; one whose nonce is too long for a line's file (over 1 KiB) is told
/// at once that there is no line for it (its caller polls), and leaves no file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_nonce_waits_in_line_an_overlong_one_is_told_to_poll() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}?fsync=false", dir.path().display());
    let with_nonce = |name: &str, nonce: String| {
        let mut r = req(name, "odd");
        r.holder = Arc::new(Holder { nonce, ..(*r.holder).clone() });
        r
    };

    let holder = store(&url);
    let first = held(holder.try_acquire(&req("empty", "first")).await.expect("acquire"));
    let next = waiter(&url, with_nonce("empty", String::new()));
    until_queued(&url, "empty", 1).await;
    assert_eq!(line(&url, "empty").await, [String::new()]);
    let files = std::fs::read_dir(dir.path().join("empty~line")).expect("the line").count();
    assert_eq!(files, 1, "one file for the one waiter");
    holder.release(&first, &ReleaseRequest::default()).await.expect("release");
    assert_eq!(granted(next).await.holder.nonce, "");

    let first = held(holder.try_acquire(&req("long", "first")).await.expect("acquire"));
    let long = with_nonce("long", "n".repeat(2000));
    let answer = tokio::time::timeout(Duration::from_secs(5), store(&url).acquire_queued(&long, WAIT))
        .await
        .expect("answered at once");
    assert!(answer.is_none(), "no line for it: its caller polls (as LeaseClient does)");
    holder.release(&first, &ReleaseRequest::default()).await.expect("release");
    let files = std::fs::read_dir(dir.path().join("long~line")).map_or(0, |d| d.count());
    assert_eq!(files, 0, "no file left in the line");
}

/// A directory's line, as the store keeps it, lists its waiters in the order
/// they entered; the lease passes down it one by one, and the line is empty
/// once the last holder has released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_line_passes_the_lease_down_the_line_one_by_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}?fsync=false", dir.path().display());
    let name = "chain";
    let first = held(store(&url).try_acquire(&req(name, "first")).await.expect("acquire"));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut nonces = Vec::new();
    for i in 0..3 {
        let (s, tx, r) = (store(&url), tx.clone(), req(name, &format!("w{i}")));
        nonces.push(r.holder.nonce.clone());
        tokio::spawn(async move {
            let g = held(s.acquire_queued(&r, WAIT).await.expect("a queue").expect("wait"));
            let _ = tx.send((i, g, s));
        });
        until_queued(&url, name, i + 1).await;
    }
    assert_eq!(line(&url, name).await, nonces);
    let (mut last, mut last_store) = (first, store(&url));
    for i in 0..2 {
        last_store.release(&last, &ReleaseRequest::default()).await.expect("release");
        let (got, g, s) = tokio::time::timeout(WAIT, rx.recv()).await.expect("a grant").expect("open");
        assert_eq!(got, i, "granted out of order");
        (last, last_store) = (g, s);
    }
    last_store.release(&last, &ReleaseRequest::default()).await.expect("release");
    let (got, g, s) = tokio::time::timeout(WAIT, rx.recv()).await.expect("a grant").expect("open");
    assert_eq!(got, 2);
    s.release(&g, &ReleaseRequest::default()).await.expect("release");
    assert_eq!(line(&url, name).await, Vec::<String>::new(), "everyone left");
}

/// Entries no waiter wrote, named by the highest sequence numbers (u64::MAX,
/// and one below the 19 digits a waiter's number keeps to): a directory, which
/// no waiter can remove, and a fresh file, which no waiter removes before it
/// ages. Neither may keep a waiter from entering the line: they are not
/// waiters, and tenure never numbers an entry that high.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_numbered_at_the_top_of_the_range_do_not_shut_the_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}?fsync=false", dir.path().display());
    let name = "top";
    let line_dir = dir.path().join(format!("{name}~line"));
    std::fs::create_dir_all(&line_dir).expect("mkdir");
    std::fs::create_dir(line_dir.join(u64::MAX.to_string())).expect("mkdir");
    std::fs::write(line_dir.join("09999999999999999999"), b"not an entry").expect("write");

    let holder = store(&url);
    let first = held(holder.try_acquire(&req(name, "first")).await.expect("acquire"));
    let r = req(name, "next");
    let next_nonce = r.holder.nonce.clone();
    let next = {
        let url = url.clone();
        tokio::spawn(async move { store(&url).acquire_queued(&r, WAIT).await })
    };
    for _ in 0..500 {
        if next.is_finished() || queued(&url, name).await >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!next.is_finished(), "the waiter gave up: {:?}", next.await);
    assert_eq!(line(&url, name).await, [next_nonce]);
    holder.release(&first, &ReleaseRequest::default()).await.expect("release");
    let g = match tokio::time::timeout(Duration::from_secs(10), next).await.expect("granted in time").expect("task") {
        Some(Ok(a)) => held(a),
        other => panic!("expected a grant, got {other:?}"),
    };
    assert_eq!(g.holder.label.as_deref(), Some("next"));
}

/// A waiter keeps its entry locked while it waits; when its process ends,
/// however it ends, the kernel closes the entry and frees the lock. Here a
/// "process" is an entry the test wrote and locked itself: while the test
/// holds the lock the waiter behind it waits, however long the lease is free;
/// once the test closes it (what the kernel does for a killed process) the
/// waiter behind gets the lease at once, not when the entry ages out
/// (`ENTRY_TTL` and a margin, 8 s). An entry in the locked format that nobody
/// holds locked is no waiter at all; one in the older unlocked format counts
/// by its age alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_process_ended_holds_up_nobody() {
    use rustix::fs::{FlockOperation, flock};
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}?fsync=false", dir.path().display());
    let name = "ended";
    let line_dir = dir.path().join(format!("{name}~line"));
    std::fs::create_dir_all(&line_dir).expect("mkdir");
    let entry = |seq: u64, bytes: &[u8]| {
        let path = line_dir.join(format!("{seq:020}"));
        std::fs::write(&path, bytes).expect("write");
        std::fs::File::options().write(true).open(&path).expect("open")
    };

    let unheld = entry(1, b"X\nunheld");
    drop(unheld);
    let _old = entry(2, b"x\nold-format");
    assert_eq!(line(&url, name).await, ["old-format"], "a locked-format entry nobody holds is no waiter");
    std::fs::remove_file(line_dir.join(format!("{:020}", 2))).expect("remove");

    let ghost = entry(3, b"X\nghost");
    flock(&ghost, FlockOperation::LockShared).expect("flock");
    assert_eq!(line(&url, name).await, ["ghost"]);
    let holder = store(&url);
    let first = held(holder.try_acquire(&req(name, "first")).await.expect("acquire"));
    let r = req(name, "next");
    let next_nonce = r.holder.nonce.clone();
    let next = waiter(&url, r);
    until_queued(&url, name, 2).await;
    assert_eq!(line(&url, name).await, ["ghost".to_string(), next_nonce]);
    holder.release(&first, &ReleaseRequest::default()).await.expect("release");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!next.is_finished(), "granted while the waiter ahead of it was alive");

    // The ghost's process ends: its entry is closed, written as it was.
    ghost.set_modified(std::time::SystemTime::now()).expect("touch");
    drop(ghost);
    assert_eq!(granted(next).await.holder.label.as_deref(), Some("next"));
    assert!(line_dir.join(format!("{:020}", 3)).exists(), "the ended waiter's entry is skipped, not removed");
}

/// A directory's line cluttered past its limit (another tenant's files, more
/// names than any line holds) is no line, never a reason to keep anyone from a
/// free lease: a store that waited in that line before gets the free lease at
/// once, and a waiter polls instead of failing, and gets the lease once it is
/// free. (Before, every look at such a line failed, and so did every
/// acquisition of a store that had waited in it, however free the lease.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_foreign_files_in_a_directory_line_keep_nobody_from_the_lease() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}?fsync=false", dir.path().display());
    let name = "cluttered";
    let (holder, waiting) = (store(&url), store(&url));
    // `waiting` waits in the line once, while it is fine.
    let first = held(holder.try_acquire(&req(name, "first")).await.expect("acquire"));
    let queued = {
        let waiting = waiting.clone();
        tokio::spawn(async move {
            held(waiting.acquire_queued(&req(name, "w"), WAIT).await.expect("a queue").expect("wait"))
        })
    };
    until_queued(&url, name, 1).await;
    holder.release(&first, &ReleaseRequest::default()).await.expect("release");
    let g = granted(queued).await;
    waiting.release(&g, &ReleaseRequest::default()).await.expect("release");

    let line_dir = dir.path().join(format!("{name}~line"));
    for i in 0..5_000 {
        std::fs::write(line_dir.join(format!("junk-{i}")), b"").expect("write");
    }
    let g = held(waiting.try_acquire(&req(name, "w")).await.expect("the lease is free, whatever its line holds"));
    waiting.release(&g, &ReleaseRequest::default()).await.expect("release");
    // What `status` asks: no line to show, and no error.
    let lease = tenure_core::LeaseName::new(name).expect("name");
    assert_eq!(waiting.waiting(&lease).await.expect("a cluttered line is no error"), None);

    no_line_but_granted_once_free(&url, &holder, name).await;
    // A client polls when there is no line.
    let first = held(holder.try_acquire(&req(name, "first")).await.expect("acquire"));
    let client = tenure_core::Client::new(store(&url));
    let opts = tenure_core::LeaseOptions::exclusive().with_ttl(TTL).with_timeout(Duration::from_secs(20));
    let polled = tokio::spawn(async move { client.acquire(name, &opts).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    holder.release(&first, &ReleaseRequest::default()).await.expect("release");
    let lease = tokio::time::timeout(WAIT, polled).await.expect("in time").expect("task").expect("granted once free");
    lease.release().await.expect("release");
}

/// Entries in a waiter's format numbered at the top of the range (the last
/// number a waiter takes, and u64::MAX). One that crashed long ago is removed
/// by the next waiter to enter, which takes a number in the same pass (it
/// failed, "ran out", until the next pass); a fresh one (a hostile tenant's,
/// or a waiter that somehow got there) leaves no number after it: waiters
/// poll instead of failing, and get the lease once it is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_at_the_top_of_the_numbers_never_shuts_the_line() {
    use std::time::SystemTime;
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}?fsync=false", dir.path().display());
    let planted = |name: &str, file: &str, at: SystemTime| {
        let line_dir = dir.path().join(format!("{name}~line"));
        std::fs::create_dir_all(&line_dir).expect("mkdir");
        std::fs::write(line_dir.join(file), b"x\nplanted").expect("write");
        let f = std::fs::File::options().write(true).open(line_dir.join(file)).expect("open");
        f.set_modified(at).expect("set mtime");
        line_dir.join(file)
    };
    let holder = store(&url);

    let crashed = planted("stale", "09999999999999999999", SystemTime::now() - Duration::from_secs(3600));
    let first = held(holder.try_acquire(&req("stale", "first")).await.expect("acquire"));
    let r = req("stale", "next");
    let next_nonce = r.holder.nonce.clone();
    let next = waiter(&url, r);
    until_queued(&url, "stale", 1).await;
    assert_eq!(line(&url, "stale").await, [next_nonce]);
    assert!(!crashed.exists(), "the crashed entry was removed");
    holder.release(&first, &ReleaseRequest::default()).await.expect("release");
    assert_eq!(granted(next).await.holder.label.as_deref(), Some("next"));

    for (name, file) in [("fresh", "09999999999999999999"), ("max", &u64::MAX.to_string())] {
        planted(name, file, SystemTime::now());
        no_line_but_granted_once_free(&url, &holder, name).await;
    }
}

/// A file or a symlink where a lease's line directory belongs (another
/// tenant's) is no line: waiters poll and get the lease once it is free, and
/// tenure neither follows nor replaces it. (Before, every queued acquisition
/// failed on it, for good.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_where_a_directory_line_belongs_keeps_nobody_from_the_lease() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}?fsync=false", dir.path().display());
    let elsewhere = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("file~line"), b"not a line").expect("write");
    std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("link~line")).expect("symlink");
    let holder = store(&url);
    for name in ["file", "link"] {
        no_line_but_granted_once_free(&url, &holder, name).await;
    }
    assert_eq!(std::fs::read(dir.path().join("file~line")).expect("read"), b"not a line");
    assert_eq!(std::fs::read_dir(elsewhere.path()).expect("list").count(), 0, "nothing written through the link");
}

/// The line's directory is moved away (with the waiter's entry, still linked
/// in it) while a waiter waits, then the lease is released: the waiter gets
/// the free lease (in a new line, or by polling) within seconds, not spinning
/// on an entry that is no place in the line any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gets_the_free_lease_after_its_line_directory_was_moved_away() {
    let (tmp, url) = directory();
    let holder = store(&url);
    let first = held(holder.try_acquire(&req("l", "first")).await.expect("acquire"));
    let w = store(&url);
    let r = req("l", "w");
    let waiting = tokio::spawn(async move { w.acquire_queued(&r, WAIT).await });
    until_queued(&url, "l", 1).await;
    std::fs::rename(tmp.path().join("l~line"), tmp.path().join("moved-away")).expect("rename");
    tokio::time::sleep(Duration::from_millis(300)).await;
    holder.release(&first, &ReleaseRequest::default()).await.expect("release");
    match tokio::time::timeout(Duration::from_secs(10), waiting).await {
        Ok(Ok(Some(Ok(Attempt::Granted(g))))) => assert!(g.token > first.token),
        // No line any more: the caller polls, and takes the free lease.
        Ok(Ok(None)) => {}
        Ok(other) => panic!("unexpected answer {other:?}"),
        Err(_) => panic!("the waiter neither got the free lease nor fell back to polling within 10 s"),
    }
}
