//! Fuzzing the directory store's URL options: `file://` URLs and
//! `--store-opt` settings are refused with a reason or name the directory given.

use crate::fuzz_support;

use std::collections::BTreeMap;
use std::path::Path;

use fuzz_support::config;
use proptest::prelude::*;
use tenure_file::DirUrl;

proptest! {
    #![proptest_config(config(3000))]

    /// `file://` URLs and `--store-opt` settings: refused with a reason, or a
    /// store rooted at the absolute path given.
    #[test]
    fn file_store_urls_and_options_never_panic(
        url in file_url(),
        params in proptest::collection::btree_map("[a-z_]{0,8}|fsync|io", "[a-z0-9]{0,6}|true|false|inline|pool|0|1", 0..3),
    ) {
        match DirUrl::parse(&url, &params) {
            Ok(b) => {
                let path = url.strip_prefix("file://").map_or(url.as_str(), |r| r.split_once('?').map_or(r, |(p, _)| p));
                prop_assert_eq!(b.path.as_path(), Path::new(path));
                prop_assert!(!path.is_empty());
            }
            Err(tenure_core::Error::InvalidStore { reason, .. }) => prop_assert!(!reason.is_empty()),
            Err(other) => prop_assert!(false, "unexpected error kind: {other:?}"),
        }
    }
}

fn file_url() -> impl Strategy<Value = String> {
    let query = proptest::collection::vec("fsync=(true|false|0|1|yes)|io=(inline|pool|x)|[a-z=&?]{0,6}", 0..4)
        .prop_map(|q| q.join("&"));
    prop_oneof![
        3 => ("(file://)?", "/?[a-z/.~ ]{0,16}", proptest::option::of(query))
            .prop_map(|(scheme, path, q)| format!("{scheme}{path}{}", q.map(|q| format!("?{q}")).unwrap_or_default())),
        1 => any::<String>(),
    ]
}

#[test]
fn file_store_options_given_twice_take_the_last_and_params_win() {
    let params = BTreeMap::from([("fsync".to_string(), "true".to_string())]);
    assert!(DirUrl::parse("file:///tmp/x?fsync=false&fsync=false", &params).is_ok());
    assert!(DirUrl::parse("file://", &BTreeMap::new()).is_err());
    assert!(DirUrl::parse("", &BTreeMap::new()).is_err());
}

/// The directory store reads its settings with the one spelling every store
/// uses: flags are `true|false`, durations carry a unit, and an unknown key is
/// refused with the known ones.
#[test]
fn file_store_settings_have_the_one_spelling_of_every_store() {
    let reason = |url: &str| match DirUrl::parse(url, &BTreeMap::new()) {
        Err(tenure_core::Error::InvalidStore { reason, .. }) => reason,
        other => panic!("{url}: expected a refusal, got {other:?}"),
    };
    let d = DirUrl::parse("file:///tmp/x?fsync=false&create=true&io=inline&timeout=250ms", &BTreeMap::new())
        .expect("the one spelling");
    assert!(!d.fsync && d.create && d.inline);
    assert_eq!(d.timeout, std::time::Duration::from_millis(250));
    assert!(reason("file:///tmp/x?fsync=1").contains("write fsync=true or fsync=false"));
    assert!(reason("file:///tmp/x?create=yes").contains("write create=true or create=false"));
    assert!(reason("file:///tmp/x?timeout=5").contains("write timeout=5ms or timeout=5s"));
    assert!(reason("file:///tmp/x?timeout=1ms").contains("out of range"));
    assert!(reason("file:///tmp/x?io=fast").contains("pool, inline"));
    let unknown = reason("file:///tmp/x?fsinc=false");
    assert!(unknown.contains("fsinc") && unknown.contains("fsync"), "{unknown}");
}
