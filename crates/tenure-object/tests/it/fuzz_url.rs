//! Fuzzing object-store URLs and options, and object names found under a
//! store's prefix.
//!
//! URLs and `--store-opt` settings come from users and scripts: each must be
//! refused with a reason or give a store whose key prefix is the URL's path,
//! never escaping it. Object names come from anyone who can write to the
//! bucket: listing leases must return only valid lease keys, each naming the
//! object it was found in, and never panic.
//!
//! `PROPTEST_CASES=20000 cargo nextest run -p tenure-object -E 'test(/^fuzz_url::/)'`
//! for a long run.

use crate::fuzz_support;

use std::collections::BTreeMap;
use std::sync::Arc;

use fuzz_support::config;
use object_store::ObjectStoreExt as _;
use object_store::memory::InMemory;
use object_store::path::Path;
use proptest::prelude::*;
use tenure_core::Backend;
use tenure_core::backend::check_key;
use tenure_object::{ObjectBackend, Provider};

/// [`tenure_object::object_store_from_url`] for a URL as written.
fn object_store_from_url(
    url: &str,
    params: &BTreeMap<String, String>,
) -> tenure_core::Result<(Arc<dyn tenure_object::object_store::ObjectStore>, tenure_object::object_store::path::Path)> {
    tenure_object::object_store_from_url(&tenure_core::StoreUrl::parse(url, params)?)
}

fn scheme() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop_oneof![Just("s3"), Just("s3a"), Just("gs"), Just("gcs"), Just("az"), Just("azure"), Just("abfs"), Just("abfss"), Just("adl")]
            .prop_map(str::to_string),
        1 => "[a-z][a-z0-9+.-]{0,6}",
    ]
}

fn option() -> impl Strategy<Value = (String, String)> {
    let key = prop_oneof![
        Just("aws_endpoint"),
        Just("aws_region"),
        Just("aws_allow_http"),
        Just("aws_access_key_id"),
        Just("aws_secret_access_key"),
        Just("aws_virtual_hosted_style_request"),
        Just("aws_skip_signature"),
        Just("google_service_account_key"),
        Just("azure_storage_use_emulator"),
        Just("azure_storage_account_name"),
        Just("azure_allow_http"),
        Just("AWS_REGION"),
        Just("bogus"),
        Just("timeout"),
        Just("connect_timeout"),
    ];
    let value = prop_oneof![
        Just("true".to_string()),
        Just("false".to_string()),
        Just("http://127.0.0.1:1".to_string()),
        Just("https://[::1]:443/x".to_string()),
        Just("HTTP://x".to_string()),
        Just("18446744073709551616s".to_string()),
        Just("{}".to_string()),
        ".{0,12}",
    ];
    (key.prop_map(str::to_string), value)
}

fn url() -> impl Strategy<Value = String> {
    let path = "(/([a-z0-9~._-]{0,6}|\\.\\.|\\.|%2e%2e|%2F|%00|//|é)){0,4}/?";
    let bucket = "[a-z0-9._-]{0,10}|[a-z]+@[a-z.]+|[^/?#]{0,8}|[a-z]+:[0-9]{1,5}|u:p@b";
    let query = proptest::collection::vec(option(), 0..3)
        .prop_map(|kv| kv.into_iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&"));
    prop_oneof![
        5 => (scheme(), bucket, path, proptest::option::of(query), proptest::option::of("[a-z]{0,4}"))
            .prop_map(|(s, b, p, q, f)| {
                let q = q.map(|q| format!("?{q}")).unwrap_or_default();
                let f = f.map(|f| format!("#{f}")).unwrap_or_default();
                format!("{s}://{b}{p}{q}{f}")
            }),
        1 => ".{0,40}",
    ]
}

proptest! {
    #![proptest_config(config(1500))]

    #[test]
    fn store_urls_open_under_their_path_or_are_refused(
        url in url(),
        params in proptest::collection::btree_map(option().prop_map(|(k, _)| k), ".{0,12}", 0..3),
    ) {
        match object_store_from_url(&url, &params) {
            Ok((_, prefix)) => {
                for part in prefix.parts() {
                    let part = part.as_ref();
                    prop_assert!(!part.is_empty() && part != "." && part != "..", "{url:?} gave prefix {prefix:?}");
                }
            }
            Err(tenure_core::Error::InvalidStore { url: shown, reason }) => {
                prop_assert!(!reason.is_empty());
                // An error never repeats the value of a secret. (Other values are
                // repeated by object_store's parse errors: F8.)
                let secrets = ["aws_secret_access_key=", "aws_access_key_id=", "google_service_account_key="];
                if let Some((_, q)) = url.split_once('?') {
                    let values = q.split('&').filter(|kv| secrets.iter().any(|s| kv.starts_with(s)));
                    for value in values.filter_map(|kv| kv.split_once('=').map(|(_, v)| v)).filter(|v| v.len() >= 6) {
                        prop_assert!(!reason.contains(value) && !shown.contains(value), "{value:?} shown in {reason:?}");
                    }
                }
            }
            Err(other) => prop_assert!(false, "unexpected error kind for {url:?}: {other:?}"),
        }
    }
}

fn object_name() -> impl Strategy<Value = String> {
    let segment = prop_oneof![
        4 => "[a-z0-9._-]{1,8}",
        1 => prop_oneof![Just("~lease"), Just("~fence"), Just("~"), Just("~~x"), Just("~lease~x"), Just(".."), Just("."), Just("~probe-1")]
            .prop_map(str::to_string),
        1 => "[^/]{1,6}",
    ];
    proptest::collection::vec(segment, 1..5).prop_map(|s| s.join("/"))
}

proptest! {
    #![proptest_config(config(300))]

    /// Objects planted under (and next to) the prefix: listing returns only
    /// valid lease keys, and each names an object that was planted.
    #[test]
    fn listing_planted_objects_returns_only_valid_keys_of_them(names in proptest::collection::vec(object_name(), 1..8)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async {
            let store = Arc::new(InMemory::new());
            let mut planted = Vec::new();
            for (i, name) in names.iter().enumerate() {
                let full = if i % 4 == 3 { name.clone() } else { format!("locks/{name}") };
                let Ok(path) = Path::parse(&full) else { continue };
                store.put(&path, bytes::Bytes::from_static(b"{}").into()).await.expect("put");
                planted.push(path);
            }
            let backend = ObjectBackend::new(store, Path::from("locks"), Provider::S3, "s3://fuzz/locks");
            let keys = backend.list("").await.map_err(|e| TestCaseError::fail(e.to_string()))?;
            for key in keys {
                prop_assert!(check_key(&key).is_ok(), "{key:?}");
                let object = backend.object_path(&key).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert!(planted.contains(&object), "{key:?} names {object:?}, which nobody planted");
            }
            Ok(())
        })?;
    }
}

#[test]
fn urls_naming_no_bucket_or_with_a_password_are_refused() {
    let none = BTreeMap::new();
    for url in ["s3://", "s3:///x", "s3://u:secret@b/x", "s3://b:9000/x", "s3://b/x#frag", "ftp://b/x", ""] {
        match object_store_from_url(url, &none) {
            Err(tenure_core::Error::InvalidStore { reason, .. }) => assert!(!reason.contains("secret"), "{reason}"),
            other => panic!("{url:?}: {:?}", other.map(|(_, p)| p)),
        }
    }
}

/// Bug (fuzz/FINDINGS.md, F8): the module promises "values never appear in error
/// messages (they may be secrets)", but object_store's own parse errors quote
/// the value, and `config::build` passes them on.
#[test]
fn a_value_that_does_not_parse_is_not_repeated_in_the_error() {
    let params = BTreeMap::from([("aws_skip_signature".to_string(), "hunter2-not-a-bool".to_string())]);
    match object_store_from_url("s3://bucket/x", &params) {
        Err(e) => assert!(!e.to_string().contains("hunter2"), "{e}"),
        Ok(_) => panic!("a value that is not a boolean must be refused"),
    }
}
