use std::fs;
use std::os::unix::fs::symlink;

use super::*;
use std::collections::BTreeMap;

/// The backend of a directory URL.
fn open(url: &str) -> Result<FileBackend> {
    open_with(url, &BTreeMap::new())
}

/// The backend of a directory URL with settings given apart.
fn open_with(url: &str, params: &BTreeMap<String, String>) -> Result<FileBackend> {
    Ok(FileBackend::from_dir_url(&DirUrl::parse(url, params)?))
}

fn store() -> (tempfile::TempDir, FileBackend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = FileBackend::new(dir.path()).with_fsync(false);
    (dir, b)
}

fn done(p: Put) -> Version {
    match p {
        Put::Done(v) => v,
        Put::Conflict => panic!("unexpected conflict"),
    }
}

#[test]
fn versions_are_sequential_and_conditional() {
    let (_d, b) = store();
    assert_eq!(b.get_blocking("k").expect("get"), None);
    let v1 = done(b.put_blocking("k", b"one", &PutMode::Create).expect("create"));
    assert_eq!(v1, Version::seq(1));
    assert_eq!(b.put_blocking("k", b"again", &PutMode::Create).expect("create"), Put::Conflict);
    let v2 = done(b.put_blocking("k", b"two", &PutMode::Update(v1.clone())).expect("update"));
    assert_eq!(b.put_blocking("k", b"stale", &PutMode::Update(v1)).expect("stale"), Put::Conflict);
    let got = b.get_blocking("k").expect("get").expect("present");
    assert_eq!((got.value.as_ref(), got.version), (&b"two"[..], v2));
    assert!(got.modified_ms.is_some());
}

#[test]
fn old_versions_are_collected_but_the_newest_stays() {
    let (d, b) = store();
    let mut v = done(b.put_blocking("k", b"0", &PutMode::Create).expect("create"));
    for i in 1..20 {
        v = done(b.put_blocking("k", format!("{i}").as_bytes(), &PutMode::Update(v)).expect("update"));
    }
    let mut left: Vec<u64> = fs::read_dir(d.path().join("k"))
        .expect("dir")
        .flatten()
        .filter_map(|e| parse_version(&e.file_name()))
        .collect();
    left.sort();
    assert_eq!(left, (20 - KEEP..=20).collect::<Vec<_>>());
    assert_eq!(b.get_blocking("k").expect("get").map(|s| s.value), Some(Bytes::from_static(b"19")));
}

#[test]
fn a_stale_writer_cannot_resurrect_a_collected_slot() {
    let (d, b) = store();
    let v1 = done(b.put_blocking("k", b"a", &PutMode::Create).expect("create"));
    let mut v = v1.clone();
    for _ in 0..(KEEP + 10) {
        v = done(b.put_blocking("k", b"b", &PutMode::Update(v)).expect("update"));
    }
    // Slot 2 was collected; a writer that read version 1 long ago tries again.
    assert!(!d.path().join("k").join(version_file(2)).exists());
    match b.put_blocking("k", b"stale", &PutMode::Update(v1)) {
        Err(Error::Store { source, .. }) => assert!(source.to_string().contains("outcome unknown"), "{source}"),
        other => panic!("a re-created slot must be reported with an unknown outcome, got {other:?}"),
    }
    assert!(!d.path().join("k").join(version_file(2)).exists(), "the stray version must be removed");
    assert_eq!(b.get_blocking("k").expect("get").map(|s| s.version), Some(v));
}

#[test]
fn a_write_with_fewer_than_keep_versions_on_top_is_done() {
    let (_d, b) = store();
    let v1 = done(b.put_blocking("k", b"a", &PutMode::Create).expect("create"));
    let v2 = done(b.put_blocking("k", b"b", &PutMode::Update(v1.clone())).expect("update"));
    // A conflicting write from an old version is a plain conflict while its
    // slot still exists.
    assert_eq!(b.put_blocking("k", b"c", &PutMode::Update(v1)).expect("stale"), Put::Conflict);
    assert_eq!(b.get_blocking("k").expect("get").map(|s| s.version), Some(v2));
}

#[test]
fn no_temp_files_are_left_behind() {
    let (d, b) = store();
    let v = done(b.put_blocking("a/b", b"x", &PutMode::Create).expect("create"));
    assert_eq!(b.put_blocking("a/b", b"y", &PutMode::Create).expect("conflict"), Put::Conflict);
    done(b.put_blocking("a/b", b"z", &PutMode::Update(v)).expect("update"));
    let names: Vec<String> = fs::read_dir(d.path().join("a/b"))
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.starts_with("~tmp-")), "{names:?}");
}

#[test]
fn listing_finds_nested_keys_and_ignores_other_files() {
    let (d, b) = store();
    for k in ["a", "a/b", "c/d/e"] {
        done(b.put_blocking(k, b"x", &PutMode::Create).expect("create"));
    }
    fs::write(d.path().join("README"), "not a lease").expect("write");
    fs::create_dir_all(d.path().join(".git/objects")).expect("mkdir");
    let mut keys = b.list_blocking("").expect("list");
    keys.sort();
    assert_eq!(keys, ["a", "a/b", "c/d/e"]);
    assert_eq!(b.list_blocking("c").expect("list"), ["c/d/e"]);
    assert!(b.list_blocking("zzz").expect("list").is_empty());
}

#[test]
fn keys_that_would_escape_the_root_are_refused() {
    let (_d, b) = store();
    for bad in ["../x", "/etc", "a/../../b", "a\0b"] {
        assert!(matches!(b.put_blocking(bad, b"x", &PutMode::Create), Err(Error::InvalidName { .. })), "{bad:?}");
    }
}

#[test]
fn urls_and_paths_open_with_options() {
    let b = open("file:///tmp/x?fsync=false&io=inline").expect("url");
    assert!(!b.fsync && b.inline);
    assert!(open("./relative/dir").expect("path").fsync);
    assert!(matches!(open("file://relative"), Err(Error::InvalidStore { .. })));
    assert!(matches!(open("file:///x?sync=1"), Err(Error::InvalidStore { .. })));
    // A plain path takes no query: refused with the file:// URL to use instead,
    // which parses, rather than taken as a directory with `?` in its name.
    let Err(Error::InvalidStore { reason, .. }) = open("/tmp/d?fsync=false") else { panic!("accepted") };
    assert!(reason.contains("use file:///tmp/d?fsync=false"), "{reason}");
    assert!(open("file:///tmp/d?fsync=false").is_ok());
    let Err(Error::InvalidStore { reason, .. }) = open("d?fsync=false") else { panic!("accepted") };
    assert!(reason.contains("file:///") && reason.contains("/d?fsync=false"), "{reason}");
    // A relative directory is shown as an absolute URL, which parses back.
    let shown = open("relative/dir").expect("path").url.to_string();
    assert!(shown.starts_with("file:///") && open(&shown).is_ok(), "{shown}");
}

#[test]
fn settings_given_apart_from_the_url_apply_and_unknown_ones_are_refused() {
    let params = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let b = open_with("/tmp/x", &params(&[("fsync", "false"), ("io", "inline")])).expect("params");
    assert!(!b.fsync && b.inline);
    let b = open_with("file:///tmp/x?fsync=false", &params(&[("fsync", "true")])).expect("override");
    assert!(b.fsync, "a --store-opt overrides the URL's query");
    let err = open_with("/tmp/x", &params(&[("aws_region", "eu-west-1")])).expect_err("unknown key");
    assert!(err.to_string().contains("aws_region"), "{err}");
}

fn foreign_of(b: &FileBackend, key: &str) -> (u64, String) {
    let got = b.get_blocking(key).expect("read").expect("present");
    assert!(got.value.is_empty(), "a foreign entry is never read");
    (got.version.seq.expect("seq"), got.foreign.expect("reported as foreign"))
}

#[test]
fn entries_tenure_did_not_write_are_reported_at_their_version_never_opened() {
    let (d, b) = store();
    let v = done(b.put_blocking("k", b"one", &PutMode::Create).expect("create"));
    let key = d.path().join("k");
    let outside = tempfile::tempdir().expect("tempdir");
    fs::write(outside.path().join("record"), b"{}").expect("write");
    let next = |n: u64| key.join(version_file(n));
    // A directory, a dangling symlink, a symlink out of the store, a FIFO and a
    // huge file, each as the newest version in turn.
    fs::create_dir(next(2)).expect("mkdir");
    assert_eq!(foreign_of(&b, "k").0, 2);
    assert!(foreign_of(&b, "k").1.contains("a directory"));
    symlink(d.path().join("nowhere"), next(3)).expect("symlink");
    assert!(foreign_of(&b, "k").1.contains("symbolic link"));
    symlink(outside.path().join("record"), next(4)).expect("symlink");
    assert!(foreign_of(&b, "k").1.contains("symbolic link"));
    rustix::fs::mkfifoat(rustix::fs::CWD, next(5), rustix::fs::Mode::from(0o644)).expect("mkfifo");
    assert!(foreign_of(&b, "k").1.contains("FIFO"));
    fs::File::create(next(6)).and_then(|f| f.set_len(1 << 40)).expect("sparse 1 TiB");
    let (seq, what) = foreign_of(&b, "k");
    assert_eq!(seq, 6);
    assert!(what.contains("1099511627776 bytes"), "{what}");
    // A conditional write replaces it from its version, like any corrupt record.
    done(b.put_blocking("k", b"fresh", &PutMode::Update(Version::seq(6))).expect("replace"));
    assert_eq!(b.get_blocking("k").expect("get").map(|s| s.value), Some(Bytes::from_static(b"fresh")));
    assert_eq!(fs::read(outside.path().join("record")).expect("read"), b"{}", "the link's target is untouched");
    let _ = v;
}

#[test]
fn version_names_beyond_the_token_space_are_not_tenures_and_cannot_overflow() {
    let (d, b) = store();
    let v = done(b.put_blocking("k", b"one", &PutMode::Create).expect("create"));
    for name in ["~18446744073709551615", "~09223372036854775807", "~99999999999999999999", "~0000000000000000000"] {
        fs::write(d.path().join("k").join(name), b"garbage").expect("plant");
    }
    let got = b.get_blocking("k").expect("get").expect("present");
    assert_eq!((got.value.as_ref(), got.version.clone()), (&b"one"[..], v.clone()));
    done(b.put_blocking("k", b"two", &PutMode::Update(v)).expect("update"));
    let huge = Version::seq(u64::MAX);
    assert!(b.put_blocking("k", b"x", &PutMode::Update(huge)).is_err(), "no version past the token space");
}

#[test]
fn a_lease_directory_that_is_a_link_or_a_file_is_refused_and_never_written_through() {
    let (d, b) = store();
    let outside = tempfile::tempdir().expect("tempdir");
    symlink(outside.path(), d.path().join("linked")).expect("symlink");
    fs::create_dir(d.path().join("a")).expect("mkdir");
    symlink(outside.path(), d.path().join("a/b")).expect("symlink");
    fs::write(d.path().join("plain"), b"").expect("write");
    for key in ["linked", "linked/x", "a/b/c", "plain", "plain/y"] {
        for result in [b.get_blocking(key).map(|_| ()), b.put_blocking(key, b"x", &PutMode::Create).map(|_| ())] {
            match result {
                Err(Error::Corrupt { detail, .. }) => assert!(detail.contains("not a lease directory"), "{detail}"),
                other => panic!("{key}: expected a refusal, got {other:?}"),
            }
        }
    }
    assert_eq!(fs::read_dir(outside.path()).expect("list").count(), 0, "nothing was written through a link");
    // Listing shows the odd entries (so that status can report them), and only once.
    let mut keys = b.list_blocking("").expect("list");
    keys.sort();
    assert_eq!(keys, ["a/b", "linked"]);
}

#[test]
fn a_fifo_where_a_version_belongs_costs_no_wait() {
    let (d, b) = store();
    fs::create_dir(d.path().join("k")).expect("mkdir");
    rustix::fs::mkfifoat(rustix::fs::CWD, d.path().join("k").join(version_file(1)), rustix::fs::Mode::from(0o600))
        .expect("mkfifo");
    let started = std::time::Instant::now();
    assert!(foreign_of(&b, "k").1.contains("FIFO"));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_hung_file_system_call_ends_at_the_store_deadline() {
    // The stand-in for a call stuck in a hung mount: an operation that sleeps
    // far past the deadline, run the way every backend operation is.
    let (_d, b) = store();
    let b = b.with_timeout(Duration::from_millis(100));
    let err = b
        .run("waiting".into(), |_| {
            std::thread::sleep(Duration::from_secs(2));
            Ok(())
        })
        .await
        .expect_err("deadline");
    assert!(err.to_string().contains("no answer from the file system within 100ms"), "{err}");
    assert!(err.is_transient());
}

#[test]
fn the_operation_deadline_is_a_store_option() {
    assert_eq!(open("file:///tmp/x?timeout=2s").expect("url").offload.timeout(), Duration::from_secs(2));
    assert_eq!(open("/tmp/x").expect("path").offload.timeout(), DEFAULT_TIMEOUT);
    for bad in ["file:///tmp/x?timeout=0s", "file:///tmp/x?timeout=soon", "file:///tmp/x?timeout=20years"] {
        assert!(matches!(open(bad), Err(Error::InvalidStore { .. })), "{bad}");
    }
}

// Waiters woken by inotify (see `watch`).

fn client_on(b: &FileBackend) -> tenure_core::Client {
    let store = tenure_core::CasStore::new(
        Arc::new(b.clone()),
        tenure_core::SystemClock::shared(),
        tenure_core::CasOptions::default(),
    );
    tenure_core::Client::new(Arc::new(store))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_waiter_gets_a_released_lease_at_once_despite_a_long_backoff() {
    let (_d, b) = store();
    let opts = tenure_core::LeaseOptions::exclusive().with_ttl(Duration::from_secs(60));
    let holder = client_on(&b).acquire("deploy", &opts).await.expect("first holder");
    // A waiter that would poll only every 5–10 s.
    let mut opts = opts.with_timeout(Duration::from_secs(30)).with_backoff_max(Duration::from_secs(10));
    opts.backoff_initial = Duration::from_secs(10);
    let waiter = client_on(&b);
    let parked = Arc::new(tokio::sync::Notify::new());
    let told = parked.clone();
    let wait = tokio::spawn(async move {
        let lease = waiter.acquire_watching("deploy", &opts, |_| told.notify_one()).await.expect("waiter");
        (std::time::Instant::now(), lease)
    });
    parked.notified().await;
    // Let it get past its first attempt and into its wait.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = std::time::Instant::now();
    holder.release().await.expect("release");
    let (granted, lease) = tokio::time::timeout(Duration::from_secs(20), wait).await.expect("granted").expect("join");
    let gap = granted.saturating_duration_since(released);
    assert!(gap < Duration::from_secs(2), "the waiter took {gap:?} after the release (its backoff is 5-10 s)");
    lease.release().await.expect("release");
}

/// On a mount other machines share (NFS), nothing is watched and nobody waits
/// in a line: waiters poll. The store learns it even from a probe with no time
/// to set a watch up (how it asks whether it can keep lines at all), so a
/// waiter never enters a line it could not wait in; its entries' locks would be
/// the NFS server's, refused on a file open for writing only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_network_mount_waiters_poll_and_enter_no_line() {
    let (d, b) = store();
    let b = b.pretending_network("a test's NFS");
    for _ in 0..20 {
        let e = b
            .watch(&tenure_core::Key::new("deploy").expect("key"), None, Duration::ZERO)
            .await
            .expect_err("a watch on NFS");
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    }
    let opts = tenure_core::LeaseOptions::exclusive().with_ttl(Duration::from_secs(60));
    let holder = client_on(&b).acquire("deploy", &opts).await.expect("holder");
    for _ in 0..5 {
        let waiter = client_on(&b).acquire("deploy", &opts.clone().with_timeout(Duration::from_millis(300))).await;
        assert!(waiter.is_err(), "the lease is held");
        assert!(!d.path().join("deploy~line").exists(), "a waiter entered a line on NFS");
    }
    holder.release().await.expect("release");
}

#[tokio::test]
async fn a_watch_returns_at_its_timeout_when_nothing_changes() {
    let (_d, b) = store();
    let v = done(b.put_blocking("k", b"one", &PutMode::Create).expect("create"));
    // A temp file, as a writer makes before it links, is not a new version.
    let started = std::time::Instant::now();
    let b2 = b.clone();
    let noise = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        fs::write(b2.root().join("k/~tmp-0000000000000001"), b"x").expect("tmp");
    });
    let changed = b
        .watch(&tenure_core::Key::new("k").expect("key"), Some(&v), Duration::from_millis(300))
        .await
        .expect("watch works on a local directory");
    let took = started.elapsed();
    noise.await.expect("join");
    assert!(!changed, "nothing changed");
    assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(2), "returned after {took:?}");
}

#[tokio::test]
async fn a_watch_wakes_on_a_new_version_and_sees_one_that_landed_before_it() {
    let (_d, b) = store();
    let v1 = done(b.put_blocking("k", b"one", &PutMode::Create).expect("create"));
    let b2 = b.clone();
    let v = v1.clone();
    let writer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        b2.put_blocking("k", b"two", &PutMode::Update(v)).expect("update");
    });
    let started = std::time::Instant::now();
    assert!(
        b.watch(&tenure_core::Key::new("k").expect("key"), Some(&v1), Duration::from_secs(20)).await.expect("watch")
    );
    let took = started.elapsed();
    writer.await.expect("join");
    assert!(took < Duration::from_secs(5), "woken {took:?} after the start");
    // Already moved past what the caller saw: at once.
    let started = std::time::Instant::now();
    assert!(
        b.watch(&tenure_core::Key::new("k").expect("key"), Some(&v1), Duration::from_secs(20)).await.expect("watch")
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_watch_never_follows_a_lease_directory_that_is_a_link() {
    let (d, b) = store();
    let outside = tempfile::tempdir().expect("tempdir");
    let other = FileBackend::new(outside.path()).with_fsync(false);
    done(other.put_blocking("k", b"one", &PutMode::Create).expect("create"));
    symlink(outside.path().join("k"), d.path().join("linked")).expect("symlink");
    fs::create_dir(d.path().join("a")).expect("mkdir");
    symlink(outside.path(), d.path().join("a/b")).expect("symlink");
    for key in ["linked", "a/b/k"] {
        let started = std::time::Instant::now();
        match b.watch(&tenure_core::Key::new(key).expect("key"), Some(&Version::seq(1)), Duration::from_secs(20)).await
        {
            Err(Error::Corrupt { detail, .. }) => assert!(detail.contains("not a lease directory"), "{detail}"),
            other => panic!("{key}: a watch through a link must be refused, got {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(5), "{key}: refused at once");
    }
    assert_eq!(fs::read_dir(outside.path().join("k")).expect("list").count(), 1, "nothing written through the link");
}

#[test]
fn a_missing_root_is_refused_naming_it_and_made_only_when_asked() {
    let d = tempfile::tempdir().expect("tempdir");
    let root = d.path().join("mnt/shared/locks");
    let b = FileBackend::new(&root).with_fsync(false);
    assert_eq!(b.get_blocking("k").expect("a read of a missing root"), None);
    match b.put_blocking("k", b"one", &PutMode::Create) {
        Err(Error::InvalidStore { reason, .. }) => {
            assert!(reason.contains(&format!("mkdir -p {}", root.display())), "{reason}");
            assert!(reason.contains("--create") && reason.contains("create=true"), "{reason}");
        }
        other => panic!("a write to a missing root must be refused, got {other:?}"),
    }
    assert!(!d.path().join("mnt").exists(), "nothing may be created");

    // Asked to: the root and its parents are made.
    let made = FileBackend::new(&root).with_fsync(false).with_create(true);
    done(made.put_blocking("k", b"one", &PutMode::Create).expect("create"));
    // An existing root gets lease directories below it as needed, unasked.
    done(b.put_blocking("deploy/prod", b"one", &PutMode::Create).expect("create below an existing root"));
    assert!(root.join("deploy/prod").is_dir());
}

#[tokio::test]
async fn create_is_a_url_setting_and_opening_options_choice_off_by_default() {
    let d = tempfile::tempdir().expect("tempdir");
    let root = d.path().join("new");
    let parse = |url: &str| DirUrl::parse(url, &BTreeMap::new());
    assert!(!parse(&root.display().to_string()).expect("plain").create);
    assert!(parse(&format!("file://{}?create=true", root.display())).expect("create").create);
    let bad = parse(&format!("file://{}?create=yes", root.display())).expect_err("create=yes");
    assert!(bad.to_string().contains("create=yes is not a flag"), "{bad}");

    let opts = tenure_core::LeaseOptions::exclusive();
    let url = tenure_core::StoreUrl::parse(&root.display().to_string(), &BTreeMap::new()).expect("url");
    let open = async |opts| crate::open(&url, &opts).await.expect("open");
    let strict = tenure_core::Client::new(open(tenure_core::OpenOptions::default()).await);
    let err = strict.try_acquire("k", &opts).await.expect_err("missing root");
    assert!(matches!(err, Error::InvalidStore { .. }), "{err:?}");
    assert!(!root.exists());
    let made = tenure_core::Client::new(open(tenure_core::OpenOptions::default().create()).await);
    let lease = made.try_acquire("k", &opts).await.expect("acquired once asked to create");
    lease.release().await.expect("release");
    assert!(root.is_dir());
}
