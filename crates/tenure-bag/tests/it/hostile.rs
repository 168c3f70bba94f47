//! A log directory shared with careless and hostile tenants: entries tenure did
//! not write — directories, symlinks in and out of the log (to files, to
//! directories, dangling, to /dev/zero), FIFOs, character devices, huge sparse
//! files — planted where data files, buckets, groups, manifests, prelocks and
//! snapshots belong. Nothing hangs, nothing outside the log is read or written,
//! closes never list them, and reads return every accepted message and report
//! them. (Tests run as root, which `mknod` needs.)

use crate::common;

use std::fs;
use std::future::Future;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{T0, options, tree};
use tenure_bag::fs::FsStorage;
use tenure_bag::{Batch, Decision, Log, Manifest, ReadOptions, ReadResult, Skipped};
use tenure_core::{Error, ManualClock};

/// Far above any deadline involved: an operation that takes this long hung.
const HUNG: Duration = Duration::from_secs(60);

async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(HUNG, f).await.unwrap_or_else(|_| panic!("{what} hung"))
}

/// A log, and a directory beside it standing for everything outside the log.
struct Bag {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    outside: PathBuf,
    clock: ManualClock,
}

/// A data file as a writer named `writer` would leave it, one message at `ts`.
fn data_file(writer: &str, ts: u64, payload: &str) -> Vec<u8> {
    tenure_bag::frame::encode(writer, 0, &[], &[(ts, payload.to_string().into())]).expect("encode")
}

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(rustix::fs::CWD, path, rustix::fs::FileType::Fifo, 0o644.into(), 0).expect("mkfifo");
}

/// A character device: /dev/zero's numbers (1, 5).
fn mknod_zero(path: &Path) {
    let dev = rustix::fs::makedev(1, 5);
    rustix::fs::mknodat(rustix::fs::CWD, path, rustix::fs::FileType::CharacterDevice, 0o644.into(), dev)
        .expect("mknod (tests run as root)");
}

fn sparse(path: &Path, size: u64) {
    fs::File::create(path).expect("create").set_len(size).expect("sparse file");
}

impl Bag {
    /// Outside the log: a valid data file and a directory holding one, both
    /// with the payload "outside", which no read may ever return.
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (dir, outside) = (tmp.path().join("log"), tmp.path().join("outside"));
        fs::create_dir_all(outside.join("bucket")).expect("mkdir");
        for at in [outside.join("frames.0.data"), outside.join("bucket/frames.0.data")] {
            fs::write(at, data_file("intruder", T0 + 5, "outside")).expect("write");
        }
        Self { _tmp: tmp, dir, outside, clock: ManualClock::starting_at(T0) }
    }

    fn log(&self, read_only_hint: bool) -> Log {
        let mut opts = options(self.clock.shared());
        opts.read_only_hint = read_only_hint;
        Log::on_fs(FsStorage::new(&self.dir, false).with_create(true).with_timeout(Duration::from_secs(10)), opts)
    }

    fn bucket(&self, bucket: u64) -> PathBuf {
        FsStorage::new(&self.dir, false).with_create(true).bucket_dir(bucket).expect("bucket dir")
    }

    /// Plants every kind of odd entry under `name(kind)` in `dir`; returns the names.
    fn plant_all(&self, dir: &Path, name: impl Fn(&str) -> String) -> Vec<String> {
        let names: Vec<String> = ["dir", "out", "outdir", "dangling", "zero", "fifo", "dev", "huge", "inlog"]
            .iter()
            .map(|k| name(k))
            .collect();
        let at = |i: usize| dir.join(&names[i]);
        fs::create_dir(at(0)).expect("mkdir");
        fs::write(at(0).join("x.0.data"), data_file("inner", T0 + 5, "inside a directory")).expect("write");
        symlink(self.outside.join("frames.0.data"), at(1)).expect("symlink");
        symlink(self.outside.join("bucket"), at(2)).expect("symlink");
        symlink(self.outside.join("created-through-a-link"), at(3)).expect("symlink");
        symlink("/dev/zero", at(4)).expect("symlink");
        mkfifo(&at(5));
        mknod_zero(&at(6));
        sparse(&at(7), 10 << 30);
        symlink(self.dir.join("bag.conf"), at(8)).expect("symlink within the log");
        names
    }
}

fn payloads(read: &ReadResult) -> Vec<String> {
    read.messages.iter().map(|m| String::from_utf8_lossy(&m.payload).into_owned()).collect()
}

/// The last path component of each skipped entry, sorted.
fn names(skipped: &[Skipped]) -> Vec<String> {
    let mut out: Vec<String> = skipped
        .iter()
        .map(|s| Path::new(&s.path).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
        .collect();
    out.sort();
    out
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_entries_named_like_data_files_are_never_listed_read_or_followed() {
    let b = Bag::new();
    let log = b.log(true);
    let w = log.writer("w").expect("writer");
    assert!(w.append(Batch::one(T0 + 1, "one")).await.expect("append").accepted);
    let planted = b.plant_all(&b.bucket(T0), |k| format!("{k}.0.data"));
    let outside = tree(&b.outside);

    let open = bounded("reading an open bucket", log.read(&ReadOptions::default())).await.expect("read");
    assert_eq!(payloads(&open), ["one"]);
    assert_eq!(names(&open.skipped), sorted(planted.clone()), "{:?}", open.skipped);
    assert_eq!(open.skipped_total, planted.len() as u64);
    let reason = |name: &str| open.skipped.iter().find(|s| s.path.ends_with(name)).map(|s| s.reason.clone());
    for (name, kind) in [
        ("dir.0.data", "a directory"),
        ("out.0.data", "a symbolic link"),
        ("zero.0.data", "a symbolic link"),
        ("fifo.0.data", "a FIFO"),
        ("dev.0.data", "a character device"),
        ("huge.0.data", "more than a data file holds"),
    ] {
        assert!(reason(name).is_some_and(|r| r.contains(kind)), "{name}: {:?}", reason(name));
    }

    b.clock.advance(Duration::from_secs(3));
    let closed = bounded("closing", log.close(T0)).await.expect("close");
    assert_eq!(closed.items, 1, "only the writer's data file is listed");
    assert_eq!(names(&closed.skipped), sorted(planted));
    let manifest = fs::read(b.bucket(T0).join("manifest")).expect("manifest");
    let manifest = Manifest::parse(&manifest, T0).expect("parse");
    assert_eq!(manifest.items.keys().collect::<Vec<_>>(), ["w.0.data"]);

    let after = bounded("reading a closed bucket", log.read(&ReadOptions::default())).await.expect("read");
    assert_eq!(payloads(&after), ["one"]);
    assert!(after.skipped.is_empty(), "a closed bucket reads what its manifest lists: {:?}", after.skipped);
    // Nothing outside was read (its payload never appears), written, created
    // through the dangling link, or chmodded by the read-only hint.
    assert_eq!(tree(&b.outside), outside);
    assert!(!b.outside.join("created-through-a-link").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_that_lists_a_directory_still_reads_and_reports_it() {
    // What closers wrote before they skipped odd entries: the whole log could
    // never be read again.
    let b = Bag::new();
    let log = b.log(false);
    let w = log.writer("w").expect("writer");
    assert!(w.append(Batch::one(T0 + 1, "one")).await.expect("append").accepted);
    let dir = b.bucket(T0);
    fs::create_dir(dir.join("dir.0.data")).expect("mkdir");
    symlink(b.outside.join("frames.0.data"), dir.join("out.0.data")).expect("symlink");
    let size = |p: &Path| fs::symlink_metadata(p).expect("meta").len();
    let items = [
        ("w.0.data".to_string(), size(&dir.join("w.0.data"))),
        ("dir.0.data".to_string(), size(&dir.join("dir.0.data"))),
        ("out.0.data".to_string(), size(&b.outside.join("frames.0.data"))),
    ];
    let manifest = Manifest { bucket: T0, width_ms: 1000, items: items.into_iter().collect() };
    fs::write(dir.join("manifest"), manifest.encode()).expect("manifest");
    let read = bounded("reading", log.read(&ReadOptions::default())).await.expect("read");
    assert_eq!(payloads(&read), ["one"]);
    assert_eq!(names(&read.skipped), ["dir.0.data", "out.0.data"]);
    assert_eq!(read.open, Vec::<u64>::new(), "the bucket is closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_groups_buckets_and_snapshot_directories_are_skipped_not_followed_or_written_through() {
    let b = Bag::new();
    let log = b.log(false);
    let w = log.writer("w").expect("writer");
    for (ts, payload) in [(T0 + 1, "one"), (T0 + 2_001, "two")] {
        assert!(w.append(Batch::one(ts, payload)).await.expect("append").accepted);
    }
    let group = b.bucket(T0).parent().expect("group").to_path_buf();
    let (link_bucket, fifo_bucket) = (T0 + 1_000, T0 + 3_000);
    symlink(b.outside.join("bucket"), group.join(format!("{link_bucket:016}"))).expect("symlink");
    mkfifo(&group.join(format!("{fifo_bucket:016}")));
    // The next group: a link to a directory holding a bucket of the next group.
    let next_group_bucket = (T0 / 1_000 / 4096 + 1) * 4096 * 1_000;
    fs::create_dir(b.outside.join(format!("{next_group_bucket:016}"))).expect("mkdir");
    let group_name = group.file_name().expect("name").to_string_lossy().into_owned();
    let next_group = format!("g{:012}", group_name[1..].parse::<u64>().expect("group number") + 1);
    symlink(&b.outside, b.dir.join(&next_group)).expect("symlink");
    symlink(&b.outside, b.dir.join("snapshots")).expect("symlink");
    let outside = tree(&b.outside);

    let everything = ReadOptions { to_ms: Some(next_group_bucket + 10_000), ..ReadOptions::default() };
    let read = bounded("reading", log.read(&everything)).await.expect("read");
    assert_eq!(payloads(&read), ["one", "two"]);
    let expected = sorted(vec![
        format!("{link_bucket:016}"),
        format!("{fifo_bucket:016}"),
        next_group.clone(),
        "snapshots".into(),
    ]);
    assert_eq!(names(&read.skipped), expected, "{:?}", read.skipped);

    // Writing where a bucket is a link or a FIFO fails, naming it; nothing is
    // created through the link.
    for bucket in [link_bucket, fifo_bucket] {
        let out = bounded("appending", w.append(Batch::one(bucket + 7, "through"))).await;
        assert!(matches!(&out, Err(Error::Corrupt { location, .. }) if location.ends_with(&format!("{bucket:016}"))));
    }
    // A metronome round closes them all: an entry named like a bucket that is
    // not a directory is no bucket (nobody can write there), so the sweep of
    // the missing buckets closes it empty, without following it.
    b.clock.advance(Duration::from_secs(10));
    let mut cursor = log.close_start(None).await.expect("start");
    let round = bounded("closing", log.close_due(&mut cursor)).await.expect("round");
    assert!(round.unclosable.is_empty(), "{round:?}");
    assert!(round.closed > 10 && round.sweeps == 1, "{round:?}");
    let err = bounded("compacting", log.compact()).await.expect_err("the snapshots directory is a link");
    assert!(err.to_string().contains("snapshots"), "{err}");
    assert_eq!(tree(&b.outside), outside, "nothing outside the log changed");
    let read = log.read(&ReadOptions { to_ms: Some(T0 + 3_000), ..ReadOptions::default() }).await.expect("read");
    assert_eq!(payloads(&read), ["one", "two"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_odd_manifest_leaves_its_bucket_open_and_closers_go_past_it() {
    let b = Bag::new();
    let log = b.log(false);
    let w = log.writer("w").expect("writer");
    for i in 0..3u64 {
        assert!(w.append(Batch::one(T0 + i * 1_000, format!("b{i}"))).await.expect("append").accepted);
    }
    fs::create_dir(b.bucket(T0).join("manifest")).expect("mkdir");
    // If followed, this valid but empty manifest would drop "b1".
    let empty = Manifest { bucket: T0 + 1_000, width_ms: 1000, items: Default::default() };
    fs::write(b.outside.join("manifest"), empty.encode()).expect("write");
    symlink(b.outside.join("manifest"), b.bucket(T0 + 1_000).join("manifest")).expect("symlink");

    let read = bounded("reading", log.read(&ReadOptions::default())).await.expect("read");
    assert_eq!(payloads(&read), ["b0", "b1", "b2"]);
    assert_eq!(read.open, [T0, T0 + 1_000, T0 + 2_000], "an unclosable bucket reads as open");
    assert_eq!(names(&read.skipped), ["manifest", "manifest"]);

    b.clock.advance(Duration::from_secs(5));
    let err = bounded("closing", log.close(T0)).await.expect_err("unclosable");
    assert!(
        matches!(&err, Error::Corrupt { location, .. } if location.ends_with("manifest"))
            && err.to_string().contains("cannot be closed"),
        "{err}"
    );
    let mut cursor = log.close_start(None).await.expect("start");
    let round = bounded("closing", log.close_due(&mut cursor)).await.expect("round");
    let unclosable: Vec<u64> = round.unclosable.iter().map(|u| u.bucket_ms).collect();
    assert_eq!(unclosable, [T0, T0 + 1_000]);
    // No close can begin there, so a late writer is accepted — and read.
    let late = log.writer("late").expect("writer");
    let out = bounded("appending late", late.append(Batch::one(T0 + 9, "late"))).await.expect("append");
    assert_eq!(out.decision, Decision::NoCloseBegun);
    let read = log.read(&ReadOptions { to_ms: Some(T0 + 3_000), ..ReadOptions::default() }).await.expect("read");
    assert_eq!(read.open, [T0, T0 + 1_000]);
    assert_eq!(payloads(&read), ["b0", "late", "b1", "b2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_entry_named_prelock_counts_as_a_begun_close_and_is_never_followed() {
    let b = Bag::new();
    let log = b.log(false);
    let w = log.writer("early").expect("writer");
    for bucket in [T0, T0 + 1_000] {
        assert!(w.append(Batch::one(bucket, "early")).await.expect("append").accepted);
    }
    fs::create_dir(b.bucket(T0).join("prelock")).expect("mkdir");
    symlink(b.outside.join("created-by-a-prelock"), b.bucket(T0 + 1_000).join("prelock")).expect("symlink");
    // Past the fast path: a new writer must look for the prelock, and finds one.
    b.clock.advance(Duration::from_millis(4_600));
    let late = log.writer("late").expect("writer");
    for bucket in [T0, T0 + 1_000] {
        let out = bounded("appending", late.append(Batch::one(bucket + 1, "late"))).await.expect("append");
        assert_eq!(out.decision, Decision::ClosedBeforeWrite, "bucket {bucket}");
    }
    for bucket in [T0, T0 + 1_000] {
        assert!(bounded("closing", log.close(bucket)).await.expect("close").published);
    }
    let read = log.read(&ReadOptions::default()).await.expect("read");
    assert_eq!(payloads(&read), ["early", "early"]);
    assert!(!b.outside.join("created-by-a-prelock").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_snapshots_are_skipped_and_their_buckets_read_instead() {
    let b = Bag::new();
    let log = b.log(false);
    let w = log.writer("w").expect("writer");
    for i in 0..6u64 {
        w.append(Batch::one(T0 + i * 700, format!("m{i}"))).await.expect("append");
    }
    b.clock.advance(Duration::from_secs(30));
    assert!(log.compact().await.expect("compact").published > 0);
    let good = log.read(&ReadOptions::default()).await.expect("read");
    assert!(good.snapshots > 0);
    let snaps = b.dir.join("snapshots");
    let mut files: Vec<PathBuf> = fs::read_dir(&snaps).expect("dir").flatten().map(|e| e.path()).collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    // A copy outside, linked in place of the first: valid, but not the log's.
    fs::copy(&files[0], b.outside.join("copy.snap")).expect("copy");
    type Plant<'a> = Box<dyn Fn(&Path) + 'a>;
    let plants: [(&str, Plant<'_>); 5] = [
        ("a symbolic link", Box::new(|p| symlink(b.outside.join("copy.snap"), p).expect("symlink"))),
        ("a directory", Box::new(|p| fs::create_dir(p).expect("mkdir"))),
        ("a FIFO", Box::new(mkfifo)),
        ("a character device", Box::new(mknod_zero)),
        ("more than a snapshot may hold", Box::new(|p| sparse(p, 2 << 30))),
    ];
    for (what, plant) in &plants {
        for f in &files[..2] {
            let _ = fs::remove_file(f).or_else(|_| fs::remove_dir(f));
        }
        plant(&files[0]);
        fs::write(&files[1], b"TBAGSNP1 garbage").expect("garbage");
        let read = bounded("reading", log.read(&ReadOptions::default())).await.expect("read");
        assert_eq!(read.messages, good.messages, "{what}");
        assert_eq!(read.snapshots, good.snapshots - 2, "{what}: {:?} {:?}", read.skipped, read.bad_snapshots);
        assert!(read.skipped.iter().any(|s| s.reason.contains(what)), "{what}: {:?}", read.skipped);
        assert_eq!(read.bad_snapshots.len(), 1, "the garbage one: {:?}", read.bad_snapshots);
    }
}
