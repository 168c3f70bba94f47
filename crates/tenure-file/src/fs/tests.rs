use std::os::unix::fs::symlink;
use std::time::{Duration, Instant};

use super::*;

fn root() -> (tempfile::TempDir, Dir) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = Dir::open_root(tmp.path(), false).expect("open").expect("exists");
    (tmp, dir)
}

fn mkfifo(path: &Path) {
    rustix::fs::mkfifoat(rustix::fs::CWD, path, Mode::from(0o644)).expect("mkfifo");
}

#[test]
fn a_fifo_is_reported_not_opened_so_nothing_blocks() {
    let (tmp, dir) = root();
    mkfifo(&tmp.path().join("f"));
    let started = Instant::now();
    assert!(matches!(dir.read("f", 1024).expect("read"), Read::Foreign { kind: Kind::Fifo, .. }));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(dir.open_file("f", OFlags::WRONLY | OFlags::APPEND).is_err(), "a FIFO is not a file to append to");
}

/// A published, locked file is locked while its descriptor is open and free
/// once it is closed; a file tenure did not publish where one is expected (a
/// FIFO, a symlink, a directory) is never followed, opened to block or taken
/// for a free lock: trying its lock, or holding it, is an error at once.
#[test]
fn a_locked_file_is_free_once_closed_and_odd_entries_are_errors_never_waits() {
    let (tmp, dir) = root();
    let held = dir.publish_locked("w", b"X\nn").expect("publish").expect("first");
    assert!(dir.publish_locked("w", b"X\nm").expect("publish").is_none(), "one writer wins the name");
    assert_eq!(dir.unlocked("w").expect("try"), Some(false), "locked while its descriptor is open");
    drop(held);
    assert_eq!(dir.unlocked("w").expect("try"), Some(true), "free once closed");
    assert_eq!(dir.unlocked("absent").expect("try"), None);
    let held = dir.hold("w").expect("hold again");
    assert_eq!(dir.unlocked("w").expect("try"), Some(false));
    drop(held);

    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("target"), b"X\nn").expect("write");
    symlink(outside.path().join("target"), tmp.path().join("link")).expect("symlink");
    mkfifo(&tmp.path().join("fifo"));
    std::fs::create_dir(tmp.path().join("dir")).expect("mkdir");
    let started = Instant::now();
    for name in ["link", "fifo", "dir"] {
        assert!(dir.unlocked(name).is_err(), "{name}: its lock is not tried");
        assert!(dir.hold(name).is_err(), "{name}: not held");
    }
    assert!(started.elapsed() < Duration::from_secs(5), "nothing blocked");
    let names: Vec<_> = std::fs::read_dir(tmp.path()).expect("list").map(|e| e.expect("entry").file_name()).collect();
    assert_eq!(names.len(), 4, "no temp file left: {names:?}");
}

#[test]
fn symlinks_are_reported_never_followed() {
    let (tmp, dir) = root();
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("secret"), b"{}").expect("write");
    symlink(outside.path().join("secret"), tmp.path().join("link")).expect("symlink");
    symlink(tmp.path().join("nowhere"), tmp.path().join("dangling")).expect("symlink");
    symlink("/dev/zero", tmp.path().join("zero")).expect("symlink");
    for name in ["link", "dangling", "zero"] {
        assert!(matches!(dir.read(name, 1024).expect("read"), Read::Foreign { kind: Kind::Symlink, .. }), "{name}");
    }
    // A symlinked directory on the way is not entered, and not created through.
    symlink(outside.path(), tmp.path().join("a")).expect("symlink");
    match dir.open_dir("a/b", true, false).expect("open") {
        Opened::Foreign { path, kind: Kind::Symlink } => assert_eq!(path, tmp.path().join("a")),
        other => panic!("expected a foreign symlink, got {other:?}"),
    }
    assert!(!outside.path().join("b").exists(), "nothing may be created through the link");
    // O_EXCL never creates a file through a dangling symlink.
    assert!(dir.create_new("dangling", b"x", false).is_err());
    assert!(!tmp.path().join("nowhere").exists());
}

#[test]
fn files_above_the_cap_are_not_read() {
    let (tmp, dir) = root();
    let f = std::fs::File::create(tmp.path().join("huge")).expect("create");
    f.set_len(10 << 30).expect("sparse 10 GiB");
    let started = Instant::now();
    assert!(matches!(dir.read("huge", 1 << 20).expect("read"), Read::TooLarge { size, .. } if size == 10 << 30));
    assert!(started.elapsed() < Duration::from_secs(5));
    std::fs::write(tmp.path().join("small"), b"hello").expect("write");
    assert!(matches!(dir.read("small", 5).expect("read"), Read::File { bytes, .. } if bytes == b"hello"));
    assert!(matches!(dir.read("small", 4).expect("read"), Read::TooLarge { .. }));
    assert_eq!(dir.read("absent", 4).expect("read"), Read::Absent);
}

#[test]
fn devices_and_directories_are_foreign() {
    let (tmp, dir) = root();
    std::fs::create_dir(tmp.path().join("d")).expect("mkdir");
    assert!(matches!(dir.read("d", 10).expect("read"), Read::Foreign { kind: Kind::Dir, .. }));
    // Making a device node needs root; the check is skipped (with a note) elsewhere.
    let dev = rustix::fs::mknodat(
        rustix::fs::CWD,
        tmp.path().join("zero"),
        FileType::CharacterDevice,
        Mode::from(0o644),
        rustix::fs::makedev(1, 5),
    );
    match dev {
        Ok(()) => {
            assert!(matches!(dir.read("zero", 10).expect("read"), Read::Foreign { kind: Kind::CharDevice, .. }))
        }
        Err(e) => eprintln!("skipping the device case: mknod failed ({e}); it needs root"),
    }
}

#[test]
fn read_prefix_reads_exactly_what_is_covered() {
    let (tmp, dir) = root();
    std::fs::write(tmp.path().join("data"), b"0123456789").expect("write");
    assert!(
        matches!(dir.read_prefix("data", 100, Some(4)).expect("read"), Read::File { bytes, .. } if bytes == b"0123")
    );
    assert!(dir.read_prefix("data", 100, Some(20)).is_err(), "a file shorter than covered is an error");
    assert!(matches!(dir.read_prefix("data", 3, Some(4)).expect("read"), Read::TooLarge { size: 4, .. }));
}

#[test]
fn publish_lets_exactly_one_writer_win_and_leaves_no_temp_files() {
    let (tmp, dir) = root();
    assert!(dir.publish("manifest", b"one", false).expect("first"));
    assert!(!dir.publish("manifest", b"two", true).expect("second"));
    assert_eq!(std::fs::read(tmp.path().join("manifest")).expect("read"), b"one");
    let names: Vec<_> = dir.entries(100).expect("list").into_iter().map(|e| e.name).collect();
    assert_eq!(names, [OsString::from("manifest")]);
}

#[test]
fn listings_say_what_each_entry_is_and_stop_at_the_cap() {
    let (tmp, dir) = root();
    std::fs::write(tmp.path().join("f"), b"").expect("write");
    std::fs::create_dir(tmp.path().join("d")).expect("mkdir");
    symlink("d", tmp.path().join("l")).expect("symlink");
    mkfifo(&tmp.path().join("p"));
    let mut got: Vec<(String, Kind)> =
        dir.entries(10).expect("list").into_iter().map(|e| (e.name.to_string_lossy().into_owned(), e.kind)).collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        [("d".into(), Kind::Dir), ("f".into(), Kind::File), ("l".into(), Kind::Symlink), ("p".into(), Kind::Fifo)]
    );
    assert!(dir.entries(3).is_err(), "more entries than the cap is an error, not an unbounded listing");
}

#[test]
fn directories_are_created_component_by_component() {
    let (tmp, dir) = root();
    assert!(matches!(dir.open_dir("a/b", false, false).expect("open"), Opened::Absent));
    let Opened::Dir(ab) = dir.open_dir("a/b", true, true).expect("create") else { panic!("not created") };
    assert_eq!(ab.path(), tmp.path().join("a/b"));
    ab.create_new("x", b"1", true).expect("write");
    assert_eq!(std::fs::read(tmp.path().join("a/b/x")).expect("read"), b"1");
    std::fs::write(tmp.path().join("file"), b"").expect("write");
    assert!(matches!(dir.open_dir("file/c", true, false).expect("open"), Opened::Foreign { kind: Kind::File, .. }));
    assert!(dir.open_dir("../x", true, false).is_err());
}

/// A directory that refuses to have directories made in it although it is
/// there (`/proc/self`: `mkdir` says ENOENT) is an error, not "gone": gone
/// sends the caller round again, for ever.
#[test]
fn a_directory_where_mkdir_says_enoent_is_an_error_not_gone() {
    let proc_self = Dir::open_root(Path::new("/proc/self"), false).expect("open").expect("exists");
    match proc_self.open_dir("tenure-lease", true, false) {
        Err(e) => {
            assert!(!is_gone(&e), "{e}");
            assert!(e.to_string().contains("/proc/self"), "{e}");
        }
        Ok(_) => panic!("made a directory in /proc/self"),
    }
}

/// A directory removed while it is open (a racing collector) is gone: the
/// caller looks again.
#[test]
fn a_directory_removed_while_open_is_gone() {
    let (tmp, dir) = root();
    let Ok(Opened::Dir(sub)) = dir.open_dir("a", true, false) else { panic!("made a") };
    std::fs::remove_dir(tmp.path().join("a")).expect("remove");
    match sub.open_dir("b", true, false) {
        Err(e) => assert!(is_gone(&e), "{e}"),
        Ok(Opened::Absent) => {}
        Ok(_) => panic!("made a directory in a removed one"),
    }
}
