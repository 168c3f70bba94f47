//! Fuzzing the file store's reading of names and bytes it did not write.
//!
//! A lease directory is shared with every tenant of the store: any file name
//! may appear next to the versions `~NNNNNNNNNNNNNNNNNNNN`, and any bytes may be
//! in them. Planted names and contents must be ignored or judged corrupt: never
//! a panic, and reading and writing through the lease API keeps working.
//!
//! `PROPTEST_CASES=20000 cargo nextest run -p tenure-file --test it fuzz_file_store`
//! for a long run.

use crate::fuzz_support;

use std::fs;

use fuzz_support::config;
use proptest::prelude::*;
use tenure_core::backend::{Put, PutMode};
use tenure_core::{Version, limits::MAX_TOKEN};
use tenure_file::FileBackend;

/// The highest version planted: all of them (versions near `u64::MAX` once
/// overflowed the store, F2).
const HIGHEST: u64 = u64::MAX;

/// Names as a careless or hostile tenant writes them: version-like names of
/// every length, numbers beyond `u64`, temp-file look-alikes, other names.
fn planted_name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (0u32..=21, any::<u64>()).prop_map(|(width, n)| format!("~{n:0width$}", width = width as usize)),
        2 => prop_oneof![Just(HIGHEST), Just(HIGHEST - 1), Just(MAX_TOKEN), Just(MAX_TOKEN + 1), Just(0)]
            .prop_map(|n| format!("~{n:020}")),
        1 => Just("~99999999999999999999".to_string()),
        1 => Just("~18446744073709551616".to_string()),
        1 => "~[0-9+ -]{18,22}",
        1 => "~tmp-[0-9a-f]{0,16}",
        1 => "~[a-z]{0,8}",
        1 => "[a-z.][a-z0-9.]{0,8}",
    ]
}

fn store() -> (tempfile::TempDir, FileBackend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = FileBackend::new(dir.path()).with_fsync(false);
    (dir, b)
}

proptest! {
    #![proptest_config(config(600))]

    /// Planted files with planted contents next to (or instead of) real
    /// versions: reads, writes and listings return, never panic, and a write on
    /// top of what was read either lands one version higher or conflicts.
    #[test]
    fn planted_version_names_never_panic_the_store(
        names in proptest::collection::vec(planted_name(), 1..5),
        contents in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..5),
        written_first in any::<bool>(),
    ) {
        let (dir, b) = store();
        if written_first {
            prop_assert!(matches!(b.put_blocking("k", b"mine", &PutMode::Create), Ok(Put::Done(_))));
        }
        let key_dir = dir.path().join("k");
        fs::create_dir_all(&key_dir).expect("mkdir");
        for (i, name) in names.iter().enumerate() {
            let _ = fs::write(key_dir.join(name), &contents[i % contents.len()]);
        }
        let read = b.get_blocking("k");
        let list = b.list_blocking("");
        prop_assert!(list.is_ok(), "{list:?}");
        if let Ok(Some(stored)) = read {
            let seq = stored.version.seq.expect("a file-store version has a sequence");
            match b.put_blocking("k", b"next", &PutMode::Update(stored.version.clone())) {
                Ok(Put::Done(v)) => prop_assert_eq!(v, Version::seq(seq + 1)),
                Ok(Put::Conflict) | Err(_) => {}
            }
        }
    }
}

/// Bug (fuzz/FINDINGS.md, F2): a version file named for `u64::MAX` (or within
/// `KEEP` of it) makes `get_blocking` add `KEEP` to it: an overflow panic in
/// debug builds; in release the sum wraps, every read lists "a version above
/// v + KEEP", retries 8 times and fails, so the lease is unreadable for good.
#[test]
fn a_version_file_at_the_top_of_u64_is_read_or_refused_without_overflow() {
    let (dir, b) = store();
    fs::create_dir_all(dir.path().join("k")).expect("mkdir");
    fs::write(dir.path().join("k").join(format!("~{}", u64::MAX)), b"{}").expect("plant");
    let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.get_blocking("k")));
    assert!(read.is_ok(), "reading a planted version must not panic");
}

/// Bug (fuzz/FINDINGS.md, F2): writing on top of a planted version `u64::MAX`
/// computes `seq + 1`.
#[test]
fn an_update_from_the_top_version_is_refused_without_overflow() {
    let (_dir, b) = store();
    let put = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        b.put_blocking("k", b"x", &PutMode::Update(Version::seq(u64::MAX)))
    }));
    assert!(put.is_ok(), "an update from version u64::MAX must be an error, not a panic");
}
