//! A directory store shared with careless and hostile tenants: entries tenure
//! did not write, planted where its files belong, and the real `tenure` binary
//! driven against them.
//!
//! Whatever sits where a lease's newest version belongs — a directory, a
//! symlink (dangling, to a record outside the store, to `/dev/zero`), a FIFO, a
//! device, a huge or empty or truncated file — is corrupt data: `tenure lock
//! --no-wait` says so at once (exit 75) instead of hanging, the lease is judged
//! by age like any corrupt record (guarantee 4: taken over after
//! `--corrupt-ttl`, with a token above every version), `status` reports it and
//! still lists the other leases, `break` replaces it, and nothing outside the
//! store is written or followed. Version names tenure cannot have written are
//! ignored, and a lease directory that is a symlink or a file is refused.

use crate::common;
use crate::hostile;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use hostile::*;

/// Where the planted entry goes: far above the seeded versions (1 and 2), so a
/// token that does not clear it shows that tokens went back.
const PLANTED: u64 = 40;
/// `last_token` of the valid records planted where tenure must not read them: a
/// token above it shows that tenure read one.
const DECOY_TOKEN: u64 = 777;

/// An entry tenure did not write, planted where a version file belongs.
#[derive(Clone, Copy, Debug)]
enum Plant {
    Directory,
    DanglingSymlink,
    SymlinkToRecordOutside,
    Fifo,
    CharDevice,
    SymlinkToDevZero,
    SparseTenGiB,
    GarbageTwoMiB,
    Empty,
    Truncated,
}

impl Plant {
    /// Words of which the error must contain one: what the entry is.
    fn words(self) -> &'static [&'static str] {
        match self {
            Plant::Directory => &["directory"],
            Plant::DanglingSymlink | Plant::SymlinkToRecordOutside | Plant::SymlinkToDevZero => {
                &["symlink", "symbolic link"]
            }
            Plant::Fifo => &["fifo", "named pipe"],
            Plant::CharDevice => &["device"],
            Plant::SparseTenGiB | Plant::GarbageTwoMiB => &["larger than", "more than", "too large", "too big"],
            Plant::Empty => &["empty"],
            Plant::Truncated => &["eof", "truncated", "end of"],
        }
    }

    /// Creates the entry at `path`; `outside` is a directory beside the store and
    /// `record` a valid record that would grant token `DECOY_TOKEN + 1` if read.
    fn plant(self, path: &Path, outside: &Path, record: &[u8]) {
        use rustix::fs::{CWD, FileType, Mode, makedev, mkfifoat, mknodat};
        match self {
            Plant::Directory => {
                std::fs::create_dir(path).expect("mkdir");
                std::fs::write(path.join("inside"), "not a record").expect("write");
            }
            Plant::DanglingSymlink => symlink(outside.join("nothing-here"), path).expect("symlink"),
            Plant::SymlinkToRecordOutside => {
                let target = outside.join("record.json");
                if !target.exists() {
                    std::fs::write(&target, record).expect("write the outside record");
                }
                symlink(target, path).expect("symlink");
            }
            Plant::Fifo => mkfifoat(CWD, path, Mode::from_raw_mode(0o644)).expect("mkfifo"),
            Plant::CharDevice => {
                mknodat(CWD, path, FileType::CharacterDevice, Mode::from_raw_mode(0o644), makedev(1, 5))
                    .expect("mknod c 1 5 (tests run as root)");
            }
            Plant::SymlinkToDevZero => symlink("/dev/zero", path).expect("symlink"),
            Plant::SparseTenGiB => {
                std::fs::File::create(path).and_then(|f| f.set_len(10 << 30)).expect("a sparse 10 GiB file");
            }
            Plant::GarbageTwoMiB => {
                // Starts like a record, so only a size cap stops a reader early.
                let mut bytes = br#"{"tenure":1,"name":""#.to_vec();
                bytes.resize(2 << 20, b'x');
                std::fs::write(path, bytes).expect("write");
            }
            Plant::Empty => std::fs::write(path, "").expect("write"),
            Plant::Truncated => std::fs::write(path, &record[..record.len() / 2]).expect("write"),
        }
    }
}

/// A store with a lease `victim` whose newest version is `plant`, a healthy
/// lease `bystander`, and a directory `outside` beside the store.
struct Planted {
    store: FileStore,
    url: String,
    dir: PathBuf,
    outside: PathBuf,
    decoy: Vec<u8>,
}

impl Planted {
    fn new(plant: Plant) -> Self {
        let store = FileStore::new();
        let url = store.url();
        let dir = seed(&store, "victim");
        seed(&store, "bystander");
        let outside = store.path("outside");
        std::fs::create_dir(&outside).expect("mkdir outside");
        let mut decoy = record(&dir, 2);
        decoy["last_token"] = DECOY_TOKEN.into();
        let decoy = serde_json::to_vec(&decoy).expect("json");
        plant.plant(&version_path(&dir, PLANTED), &outside, &decoy);
        Self { store, url, dir, outside, decoy }
    }

    /// Plants `plant` again above the newest version; returns its version.
    fn plant_again(&self, plant: Plant) -> u64 {
        let next = versions(&self.dir).last().copied().unwrap_or(0) + 1;
        plant.plant(&version_path(&self.dir, next), &self.outside, &self.decoy);
        next
    }

    /// Everything beside the store (the store's directory itself excluded).
    fn outside_snapshot(&self) -> std::collections::BTreeMap<PathBuf, Node> {
        snapshot(self.store.dir.path(), Path::new(&self.url))
    }
}

/// The whole story for one kind of planted entry (see the module doc).
fn planted_entry_is_corrupt_data_judged_by_age(plant: Plant) {
    let p = Planted::new(plant);
    let before = p.outside_snapshot();

    // Busy at once, saying what is in the way; not a hang, not a store failure.
    let (out, took) = timed(&mut lock(&p.url, "victim", &["--no-wait"], &["true"]));
    assert_no_panic(&out);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(75), "{plant:?}: --no-wait on an unreadable record: {err}");
    assert!(took < Duration::from_secs(5), "{plant:?}: --no-wait took {took:?}");
    assert!(mentions(&err, &["unreadable"]) && mentions(&err, plant.words()), "{plant:?}: {err}");

    // Status names it and its reason, and still lists the other lease.
    let table = status_table(&p.url);
    let victim = row(&table, "victim");
    assert!(mentions(victim, &["corrupt", "unreadable"]) && mentions(victim, plant.words()), "{plant:?}: {victim}");
    row(&table, "bystander");

    // Judged by age: taken over after --corrupt-ttl, with a token above every
    // version (never a small one, never one read through a symlink).
    let flags = ["--corrupt-ttl", "1s", "--max-skew", "0s", "--timeout", "20s"];
    let (out, took) = timed(&mut lock(&p.url, "victim", &flags, &["sh", "-c", "echo $TENURE_TOKEN"]));
    assert_no_panic(&out);
    let taken = token(&out);
    assert!(taken > PLANTED && taken < DECOY_TOKEN, "{plant:?}: token {taken} after version {PLANTED}");
    assert!(took < Duration::from_secs(15), "{plant:?}: took {took:?} with --corrupt-ttl 1s");

    // `break` replaces it at once, and the next token is higher still.
    let again = p.plant_again(plant);
    let (out, took) = timed(tenure().args(["break", &p.url, "victim"]));
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(0), "{plant:?}: break of an unreadable record: {}", stderr(&out));
    assert!(took < Duration::from_secs(5), "{plant:?}: break took {took:?}");
    let next = token(&lock_token(&p.url, "victim", &["--no-wait"]));
    assert!(next > again && next > taken && next < DECOY_TOKEN, "{plant:?}: token {next} after version {again}");

    // The other lease was never in the way; nothing beside the store changed.
    token(&lock_token(&p.url, "bystander", &["--no-wait"]));
    assert_eq!(p.outside_snapshot(), before, "{plant:?}: something outside the store changed");
    // Never read in full (a 10 GiB read would not fit): every tenure stayed small.
    let rss = max_child_rss_kib();
    assert!(rss < 256 << 10, "{plant:?}: a tenure process grew to {rss} KiB");
}

#[test]
fn a_directory_where_the_record_belongs_is_corrupt_data_judged_by_age() {
    planted_entry_is_corrupt_data_judged_by_age(Plant::Directory);
}

#[test]
fn a_dangling_symlink_where_the_record_belongs_is_corrupt_data_judged_by_age() {
    planted_entry_is_corrupt_data_judged_by_age(Plant::DanglingSymlink);
}

#[test]
fn a_symlink_to_a_valid_record_outside_the_store_is_not_followed() {
    planted_entry_is_corrupt_data_judged_by_age(Plant::SymlinkToRecordOutside);
}

#[test]
fn a_fifo_where_the_record_belongs_does_not_hang_and_is_judged_by_age() {
    planted_entry_is_corrupt_data_judged_by_age(Plant::Fifo);
}

#[test]
fn a_character_device_where_the_record_belongs_is_not_read() {
    planted_entry_is_corrupt_data_judged_by_age(Plant::CharDevice);
}

#[test]
fn a_symlink_to_dev_zero_where_the_record_belongs_is_not_read() {
    planted_entry_is_corrupt_data_judged_by_age(Plant::SymlinkToDevZero);
}

#[test]
fn a_sparse_ten_gib_record_is_never_read_in_full() {
    planted_entry_is_corrupt_data_judged_by_age(Plant::SparseTenGiB);
}

#[test]
fn a_two_mib_garbage_record_is_refused_by_size() {
    planted_entry_is_corrupt_data_judged_by_age(Plant::GarbageTwoMiB);
}

#[test]
fn an_empty_record_is_corrupt_data_judged_by_age() {
    planted_entry_is_corrupt_data_judged_by_age(Plant::Empty);
}

#[test]
fn a_truncated_record_is_corrupt_data_judged_by_age() {
    planted_entry_is_corrupt_data_judged_by_age(Plant::Truncated);
}

// ------------------------------------------------------------ version names ---

#[test]
fn version_names_tenure_cannot_have_written_are_ignored_without_overflow() {
    let store = FileStore::new();
    let url = store.url();
    let dir = seed(&store, "odd");
    let mut decoy = record(&dir, 2);
    decoy["last_token"] = DECOY_TOKEN.into();
    let decoy = serde_json::to_vec(&decoy).expect("json");
    // Each would grant DECOY_TOKEN + 1 if read: above the token space (the
    // largest u64 and one past the top token), too large for a u64, version 0
    // (never written: versions start at 1), one digit short or long.
    let odd = [
        "~18446744073709551615",
        "~09223372036854775808",
        "~99999999999999999999",
        "~00000000000000000000",
        "~9999999999999999999",
        "~000000000000000000099",
    ];
    // The same names in a lease with no real version at all, version 0 aside:
    // tenure never writes it, but reading it as the oldest version is harmless
    // (tokens only grow from it), so either reading is allowed there.
    let fresh = Path::new(&url).join("fresh");
    std::fs::create_dir_all(&fresh).expect("mkdir");
    for name in odd {
        std::fs::write(dir.join(name), &decoy).expect("plant");
        if name != "~00000000000000000000" {
            std::fs::write(fresh.join(name), &decoy).expect("plant");
        }
    }

    // Tokens go on from the real versions: 1 was granted, so 2, then 3.
    for expected in [2, 3] {
        let out = lock_token(&url, "odd", &["--no-wait"]);
        assert_no_panic(&out);
        assert_eq!(token(&out), expected, "the odd names must not count as versions");
    }
    let out = lock_token(&url, "fresh", &["--no-wait"]);
    assert_no_panic(&out);
    assert_eq!(token(&out), 1, "a lease with only odd names is a new lease");

    let table = status_table(&url);
    for name in ["odd", "fresh"] {
        let r = row(&table, name);
        assert!(!mentions(r, &["corrupt", "unreadable", &DECOY_TOKEN.to_string()]), "{r}");
    }
    let out = run(tenure().args(["break", &url, "odd"]), LIMIT);
    assert_no_panic(&out);
    assert_eq!(out.status.code(), Some(75), "nothing to break: {}", stderr(&out));
    for name in odd {
        assert_eq!(std::fs::read(dir.join(name)).expect("still there"), decoy, "{name} was rewritten");
    }
}

// ------------------------------------------------- lease directories elsewhere ---

/// A store with a healthy `bystander`, and `outside`, a directory beside the
/// store holding a lease `elsewhere` with a valid record (version 2).
fn store_with_a_lease_outside() -> (FileStore, String, PathBuf) {
    let store = FileStore::new();
    let url = store.url();
    let source = seed(&store, "bystander");
    let outside = store.path("outside");
    std::fs::create_dir_all(outside.join("b")).expect("mkdir");
    for dir in [outside.clone(), outside.join("b")] {
        std::fs::copy(version_path(&source, 2), version_path(&dir, 2)).expect("copy a record");
    }
    (store, url, outside)
}

/// `lock` and `break` of `name` refuse at once (exit 65) naming `culprit` and
/// saying what it is (`words`), write nothing under `outside`; the store's
/// status still lists `bystander`, and `status <name>` says what is wrong.
fn refused_without_following(url: &str, name: &str, culprit: &Path, words: &[&str], outside: &Path) {
    let before = snapshot(outside, Path::new(""));
    let culprit = culprit.display().to_string();
    for args in [vec!["lock", url, name, "--", "true"], vec!["break", url, name]] {
        let (out, took) = timed(tenure().args(&args));
        assert_no_panic(&out);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(65), "{args:?}: {err}");
        assert!(err.contains(&culprit) && mentions(&err, words), "{args:?} must name {culprit}: {err}");
        assert!(took < Duration::from_secs(5), "{args:?} took {took:?}");
    }
    assert_eq!(snapshot(outside, Path::new("")), before, "something was written through {culprit}");
    row(&status_table(url), "bystander");

    // Asked about by name, status says what it is: as a row marked unreadable,
    // or as the error itself (exit 65).
    let out = run(tenure().args(["status", url, name]), LIMIT);
    assert_no_panic(&out);
    let said = match out.status.code() {
        Some(0) => row(&stdout(&out), name).to_string(),
        Some(65) => stderr(&out),
        other => panic!("status {name}: exit {other:?}: {}", stderr(&out)),
    };
    assert!(mentions(&said, UNREADABLE) && mentions(&said, words), "status {name}: {said}");
}

/// Words of which a status row for an unreadable lease must contain one.
const UNREADABLE: &[&str] = &["corrupt", "unreadable", "error"];

#[test]
fn a_lease_directory_that_is_a_symlink_is_refused_not_followed() {
    let (_store, url, outside) = store_with_a_lease_outside();
    let link = Path::new(&url).join("linked");
    symlink(&outside, &link).expect("symlink");
    refused_without_following(&url, "linked", &link, &["symlink", "symbolic link"], &outside);
    // Listed with the other leases, as unreadable, with the reason.
    let table = status_table(&url);
    let r = row(&table, "linked");
    assert!(mentions(r, UNREADABLE) && mentions(r, &["symlink", "symbolic link"]), "{r}");
}

#[test]
fn a_symlink_in_the_middle_of_a_lease_path_is_refused_not_followed() {
    let (_store, url, outside) = store_with_a_lease_outside();
    let link = Path::new(&url).join("a");
    symlink(&outside, &link).expect("symlink");
    refused_without_following(&url, "a/b", &link, &["symlink", "symbolic link"], &outside);
    // Status shows something under `a` as unreadable, never the record behind it.
    let table = status_table(&url);
    let under_a: Vec<&str> = table.lines().filter(|l| l.starts_with("a ") || l.starts_with("a/")).collect();
    assert!(
        !under_a.is_empty() && under_a.iter().all(|r| mentions(r, UNREADABLE)),
        "the symlinked a must show as unreadable:\n{table}"
    );
}

#[test]
fn a_regular_file_where_a_lease_directory_belongs_is_refused() {
    let (_store, url, outside) = store_with_a_lease_outside();
    let file = Path::new(&url).join("plain");
    std::fs::write(&file, "not a lease directory").expect("write");
    refused_without_following(&url, "plain", &file, &["not a directory", "regular file"], &outside);
    assert_eq!(std::fs::read_to_string(&file).expect("read"), "not a lease directory");
}

#[test]
fn a_store_directory_reached_through_a_symlink_the_user_named_works() {
    // The store's own path is the user's choice (`/var/lib/locks -> /mnt/nfs`):
    // refusing symlinks inside the store must not refuse this one.
    let store = FileStore::new();
    let real = store.path("real");
    std::fs::create_dir(&real).expect("mkdir");
    let link = store.path("link");
    symlink(&real, &link).expect("symlink");
    let url = link.display().to_string();
    assert_eq!(token(&lock_token(&url, "x", &["--no-wait"])), 1);
    assert_eq!(token(&lock_token(&url, "x", &["--no-wait"])), 2);
    assert_eq!(versions(&real.join("x")).last(), Some(&4), "written in the real directory");
}
