//! Bytes and numbers tenure did not write: garbage, truncated or absurd
//! configurations, manifests, frames and snapshots, and absurd numbers from
//! callers. Each is a clear error naming the file, or skipped and reported —
//! never a panic, a hang, an overflow or a read without bound.

use crate::common;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use common::{T0, options};
use proptest::prelude::*;
use tenure_bag::fs::FsStorage;
use tenure_bag::{Batch, LogConfig, LogSettings, Manifest, ReadOptions};
use tenure_bag::{Log, frame, snapshot};
use tenure_core::limits::MAX_TIME_MS;
use tenure_core::{Error, ManualClock};

const HUNG: Duration = Duration::from_secs(60);

fn log_in(dir: &Path, clock: &ManualClock) -> Log {
    Log::on_fs(FsStorage::new(dir, false).with_timeout(Duration::from_secs(10)), options(clock.shared()))
}

fn valid_config() -> String {
    "tenure-bag-config 1\nwidth_ms 1000\ngrace_ms 2000\nmax_skew_ms 500\nchunk_buckets 4\nfirst_bucket_ms 0\n".into()
}

/// Puts `make(path)` where the configuration belongs, then checks that reading,
/// appending and closing each fail with a corrupt-data error naming bag.conf,
/// in bounded time.
async fn refused_config(what: &str, make: impl FnOnce(&Path, &Path)) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, outside) = (tmp.path().join("log"), tmp.path().join("outside"));
    fs::create_dir_all(&dir).expect("mkdir");
    fs::create_dir_all(&outside).expect("mkdir");
    make(&dir.join("bag.conf"), &outside);
    let clock = ManualClock::starting_at(T0);
    let log = log_in(&dir, &clock);
    let read = tokio::time::timeout(HUNG, log.read(&ReadOptions::default())).await.expect("hung");
    let append = tokio::time::timeout(HUNG, log.writer("w").expect("writer").append_now("x")).await.expect("hung");
    let close = tokio::time::timeout(HUNG, log.close(T0)).await.expect("hung");
    for (op, err) in [("read", read.err()), ("append", append.err()), ("close", close.err())] {
        match err {
            Some(e @ Error::Corrupt { .. }) => assert!(e.to_string().contains("bag.conf"), "{what}, {op}: {e}"),
            other => panic!("{what}, {op}: expected a corrupt configuration, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_tenure_did_not_write_is_an_error_naming_it() {
    let config = |text: String| move |p: &Path, _: &Path| fs::write(p, text).expect("write");
    type Plant = Box<dyn FnOnce(&Path, &Path)>;
    let cases: Vec<(&str, Plant)> = vec![
        ("a directory", Box::new(|p, _| fs::create_dir(p).expect("mkdir"))),
        (
            "a link to a valid configuration outside",
            Box::new(|p, out| {
                fs::write(out.join("bag.conf"), valid_config()).expect("write");
                symlink(out.join("bag.conf"), p).expect("symlink");
            }),
        ),
        ("a dangling link", Box::new(|p, out| symlink(out.join("nothing"), p).expect("symlink"))),
        ("a link to /dev/zero", Box::new(|p, _| symlink("/dev/zero", p).expect("symlink"))),
        (
            "a FIFO",
            Box::new(|p, _| {
                rustix::fs::mknodat(rustix::fs::CWD, p, rustix::fs::FileType::Fifo, 0o644.into(), 0).expect("mkfifo")
            }),
        ),
        ("a huge sparse file", Box::new(|p, _| fs::File::create(p).expect("create").set_len(1 << 40).expect("len"))),
        ("an empty file", Box::new(config(String::new()))),
        ("garbage", Box::new(|p, _| fs::write(p, b"\xff\xfe\x00garbage").expect("write"))),
        ("width 0", Box::new(config(valid_config().replace("width_ms 1000", "width_ms 0")))),
        ("width beyond u64", Box::new(config(valid_config().replace("1000", "99999999999999999999")))),
        ("width of 100 years", Box::new(config(valid_config().replace("1000", "3155760000000")))),
        ("grace 0", Box::new(config(valid_config().replace("grace_ms 2000", "grace_ms 0")))),
        ("no chunk", Box::new(config(valid_config().replace("chunk_buckets 4", "chunk_buckets 0")))),
        ("first bucket unaligned", Box::new(config(valid_config().replace("first_bucket_ms 0", "first_bucket_ms 7")))),
        (
            "first bucket past 9999",
            Box::new(config(valid_config().replace("first_bucket_ms 0", "first_bucket_ms 300000000000000000"))),
        ),
        ("a key twice", Box::new(config(valid_config() + "width_ms 1000\n"))),
        ("a missing key", Box::new(config(valid_config().replace("grace_ms 2000\n", "")))),
    ];
    for (what, make) in cases {
        refused_config(what, make).await;
    }
}

/// A manifest body with a valid checksum, so only its content is wrong.
fn signed(body: &str) -> Vec<u8> {
    format!("{body}end {:08x}\n", crc32c::crc32c(body.as_bytes())).into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_or_absurd_manifest_is_an_error_naming_it() {
    let head = format!("tenure-bag-manifest 1\nbucket {T0} 1000\n");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("an item past the size cap", signed(&format!("{head}item w.0.data 9223372036854775808\n"))),
        ("a size beyond u64", signed(&format!("{head}item w.0.data 99999999999999999999\n"))),
        ("a path for a name", signed(&format!("{head}item ../../outside/frames.0.data 10\n"))),
        ("an absolute path", signed(&format!("{head}item /etc/passwd 10\n"))),
        ("an item twice", signed(&format!("{head}item w.0.data 1\nitem w.0.data 2\n"))),
        ("width 0", signed(&format!("tenure-bag-manifest 1\nbucket {T0} 0\n"))),
        ("another width", signed(&format!("tenure-bag-manifest 1\nbucket {T0} 2000\n"))),
        ("another bucket", signed(&format!("tenure-bag-manifest 1\nbucket {} 1000\n", T0 + 1_000))),
        ("garbage", b"\x00\x01garbage\n".to_vec()),
        ("truncated", signed(&head)[..20].to_vec()),
    ];
    for (what, bytes) in cases {
        let tmp = tempfile::tempdir().expect("tempdir");
        let clock = ManualClock::starting_at(T0);
        let log = log_in(tmp.path(), &clock);
        log.writer("w").expect("writer").append(Batch::one(T0, "x")).await.expect("append");
        let manifest = FsStorage::new(tmp.path(), false).bucket_dir(T0).expect("dir").join("manifest");
        fs::write(&manifest, bytes).expect("write");
        let err = log.read(&ReadOptions::default()).await.expect_err(what);
        assert!(matches!(err, Error::Corrupt { .. }) && err.to_string().contains("manifest"), "{what}: {err}");
        clock.advance(Duration::from_secs(5));
        assert!(matches!(log.close(T0).await, Err(Error::Corrupt { .. })), "{what}: closers refuse it too");
    }
    // A regular manifest larger than any tenure writes is not read at all.
    let tmp = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::starting_at(T0);
    let log = log_in(tmp.path(), &clock);
    log.writer("w").expect("writer").append(Batch::one(T0, "x")).await.expect("append");
    let manifest = FsStorage::new(tmp.path(), false).bucket_dir(T0).expect("dir").join("manifest");
    fs::File::create(&manifest).expect("create").set_len(1 << 40).expect("sparse");
    let err = tokio::time::timeout(HUNG, log.read(&ReadOptions::default())).await.expect("hung").expect_err("huge");
    assert!(err.to_string().contains("more than a manifest may"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_frames_in_data_files_are_torn_tails_never_a_panic() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::starting_at(T0);
    let log = log_in(tmp.path(), &clock);
    let w = log.writer("w").expect("writer");
    assert!(w.append(Batch::one(T0 + 1, "kept")).await.expect("append").accepted);
    let dir = FsStorage::new(tmp.path(), false).bucket_dir(T0).expect("dir");
    let two = [(T0 + 2, Bytes::from_static(b"seq")), (T0 + 2, Bytes::from_static(b"overflow"))];
    let frame = frame::encode("x", u64::MAX, &[], &two).expect("encode");
    let mut huge_count = frame::encode("y", 0, &[], &[]).expect("encode");
    // Claim u32::MAX messages in a frame with none, and fix its checksum.
    let body_start = 8;
    let count_at = body_start + 1 + 1 + 1 + 8;
    huge_count[count_at..count_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let crc = crc32c::crc32c(&huge_count[body_start..]);
    huge_count[4..8].copy_from_slice(&crc.to_le_bytes());
    let plants: [(&str, Vec<u8>); 5] = [
        ("len.0.data", [u32::MAX.to_le_bytes(), [0; 4]].concat()),
        ("count.0.data", huge_count),
        ("seq.0.data", frame),
        ("zeros.0.data", vec![0; 4096]),
        ("future.0.data", frame::encode("z", 0, &[], &[(u64::MAX, Bytes::new())]).expect("encode")),
    ];
    for (name, bytes) in &plants {
        fs::write(dir.join(name), bytes).expect("write");
    }
    let read = log.read(&ReadOptions::default()).await.expect("read");
    let payloads: Vec<_> = read.messages.iter().map(|m| m.payload.clone()).collect();
    assert_eq!(payloads, [Bytes::from_static(b"kept")]);
    assert!(read.ignored_bytes > 0 && read.misplaced == 1, "{read:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_numbers_from_callers_are_refused_or_saturate() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::starting_at(T0);
    let log = log_in(tmp.path(), &clock);
    let w = log.writer("w").expect("writer");
    for ts in [MAX_TIME_MS + 1, u64::MAX] {
        let out = w.append(Batch::one(ts, "far future")).await;
        assert!(matches!(&out, Err(Error::InvalidOptions { reason }) if reason.contains("9999")), "{out:?}");
    }
    assert!(w.append(Batch::one(T0, "now")).await.expect("append").accepted);
    // Settings out of range are refused when the log is opened.
    for bad in [
        LogSettings { width: Duration::ZERO, ..LogSettings::default() },
        LogSettings { width: Duration::from_secs(400 * 365 * 86_400), ..LogSettings::default() },
        LogSettings { grace: Duration::MAX, ..LogSettings::default() },
        LogSettings { max_skew: Duration::MAX, ..LogSettings::default() },
        LogSettings { chunk_buckets: 0, ..LogSettings::default() },
        LogSettings { chunk_buckets: u64::MAX, ..LogSettings::default() },
    ] {
        let opts = options(clock.shared()).with_settings(bad);
        assert!(matches!(Log::open(tmp.path().to_str().expect("utf8"), opts), Err(Error::InvalidOptions { .. })));
    }
    // Names past the year 9999 or past any group are not buckets.
    let group = FsStorage::new(tmp.path(), false).bucket_dir(T0).expect("dir").parent().expect("group").to_path_buf();
    fs::create_dir(group.join("9999999999999999")).expect("mkdir");
    fs::create_dir(tmp.path().join("g999999999999")).expect("mkdir");
    fs::create_dir(tmp.path().join("g999999999999").join("18446744073709551615")).expect("mkdir");
    let far = ReadOptions { from_ms: Some(u64::MAX), to_ms: Some(u64::MAX), ..Default::default() };
    assert!(log.read(&far).await.expect("read").messages.is_empty());
    let all = log.read(&ReadOptions { to_ms: Some(u64::MAX), ..Default::default() }).await.expect("read");
    assert_eq!(all.messages.len(), 1);
    assert_eq!(all.open, [T0]);
    assert!(all.to_ms <= MAX_TIME_MS + 1_000, "reads end at the year 9999: {}", all.to_ms);
    // Lookbacks and timeouts beyond reason saturate.
    assert_eq!(log.close_start(Some(Duration::MAX)).await.expect("start"), T0 - 10_000);
    let url = format!("file://{}?timeout=1000000y", tmp.path().display());
    assert!(matches!(Log::open(&url, options(clock.shared())), Err(Error::InvalidStore { .. })));
    let url = format!("file://{}?timeout=1ms", tmp.path().display());
    assert!(matches!(Log::open(&url, options(clock.shared())), Err(Error::InvalidStore { .. })));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    /// Every parser of outside bytes returns an answer for any bytes.
    #[test]
    fn parsers_of_outside_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let cfg = LogConfig { width_ms: 1000, grace_ms: 2000, max_skew_ms: 500, chunk_buckets: 4, first_bucket_ms: 0 };
        let data = Bytes::from(bytes.clone());
        let decoded = frame::decode_all(&data);
        prop_assert_eq!(decoded.valid_len + decoded.ignored, bytes.len());
        let _ = snapshot::decode(&data, &cfg, 0);
        let _ = Manifest::parse(&bytes, 0);
        if let Ok(c) = LogConfig::parse(&bytes) {
            prop_assert!(c.check().is_ok());
        }
    }

    /// A valid frame, snapshot or manifest with one byte changed or cut short is
    /// refused or read as a torn tail, never a panic.
    #[test]
    fn damaged_valid_encodings_never_panic(at in any::<prop::sample::Index>(), with in any::<u8>(), cut in any::<bool>()) {
        let cfg = LogConfig { width_ms: 1000, grace_ms: 2000, max_skew_ms: 500, chunk_buckets: 4, first_bucket_ms: 0 };
        let f = frame::encode("w", 7, &[], &[(10, Bytes::from_static(b"payload")), (20, Bytes::new())]).expect("encode");
        let msgs = frame::decode_all(&Bytes::from(f.clone())).messages;
        let snap = snapshot::encode(&cfg, 0, &msgs).expect("encode").to_vec();
        let m = Manifest { bucket: 0, width_ms: 1000, items: [("w.0.data".to_string(), 9)].into_iter().collect() };
        for mut bytes in [f, snap, m.encode()] {
            let i = at.index(bytes.len());
            if cut { bytes.truncate(i) } else { bytes[i] ^= with.max(1) }
            let data = Bytes::from(bytes.clone());
            let _ = frame::decode_all(&data);
            let _ = snapshot::decode(&data, &cfg, 0);
            let _ = Manifest::parse(&bytes, 0);
        }
    }
}
