//! Behaviour of the object store beyond the conformance suite, on real servers:
//! where records and fences live, listing among foreign objects, corrupt records
//! judged by the store's own timestamp, and errors that name what went wrong.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::Server;
use common::open;
use tenure_conformance::{CORRUPT_TTL, MAX_SKEW, cas_options};
use tenure_core::{
    Backend, CasStore, Client, EndedHow, Error, FencedRecord, LeaseOptions, LeaseStore, ManualClock, OpenOptions,
    SystemClock,
};
use tenure_object::object_store::path::Path;
use tenure_object::object_store::{ObjectStoreExt, PutPayload};

fn no_wait() -> LeaseOptions {
    LeaseOptions::exclusive().no_wait()
}

/// A lease record is one JSON object at `<prefix>/<name>/~lease`, kept (marked
/// released) after release; a fenced record lives next to it at `~fence`.
async fn records_live_at_documented_keys(server: Server) {
    let url = server.url();
    let backend = common::trusted_backend(&server, &url).await;
    let store = Arc::new(CasStore::new(backend.clone(), SystemClock::shared(), cas_options()));
    let lease = Client::new(store).try_acquire("deploy/prod", &no_wait()).await.expect("acquire");
    let token = lease.token();
    FencedRecord::new(backend.clone(), "deploy/prod")
        .expect("fence")
        .write(token, Bytes::from_static(b"state v1"))
        .await
        .expect("fenced write");
    lease.release().await.expect("release");

    let prefix = backend.prefix().to_string();
    let mut objects = common::objects(&backend).await;
    objects.sort();
    let expected = [format!("{prefix}/deploy/prod/~fence"), format!("{prefix}/deploy/prod/~lease")];
    assert_eq!(objects, expected);

    let store = backend.object_store();
    let record = store.get(&backend.object_path("deploy/prod").expect("path")).await.expect("get").bytes().await;
    let record: serde_json::Value = serde_json::from_slice(&record.expect("body")).expect("the record is JSON");
    assert_eq!(record["last_token"], token);
    assert_eq!(record["last"]["how"], "released");
    let fence = store.get(&backend.object_path("deploy/prod~fence").expect("path")).await.expect("get");
    let fence = fence.bytes().await.expect("body");
    assert_eq!(fence, Bytes::from(format!("tenure-fence/1 {token}\nstate v1")));
}

/// `list` finds leases at any depth under the prefix and ignores other objects.
async fn listing_skips_objects_that_are_not_leases(server: Server) {
    let url = server.url();
    let backend = common::trusted_backend(&server, &url).await;
    let store: Arc<dyn LeaseStore> = Arc::new(CasStore::new(backend.clone(), SystemClock::shared(), cas_options()));
    let client = Client::new(store.clone());
    for name in ["a", "a/b", "c@host:1"] {
        client.try_acquire(name, &no_wait()).await.expect("acquire").release().await.expect("release");
    }
    FencedRecord::new(backend.clone(), "a").expect("fence").write(1, Bytes::new()).await.expect("fence");
    for foreign in ["a/data.json", "a/b/c/d", "README"] {
        let path = Path::parse(format!("{}/{foreign}", backend.prefix())).expect("path");
        backend.object_store().put(&path, PutPayload::from_static(b"not a lease")).await.expect("put foreign");
    }
    let names = |v: Vec<tenure_core::LeaseName>| v.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    assert_eq!(names(store.list("").await.expect("list")), ["a", "a/b", "c@host:1"]);
    assert_eq!(names(store.list("a").await.expect("list")), ["a", "a/b"]);
    assert_eq!(names(store.list("a/b").await.expect("list")), ["a/b"]);
}

/// Invariant 4 by the store's clock: an unreadable record is replaced at first
/// sight once its `Last-Modified` is older than corrupt_ttl + max_skew on the
/// contender's clock, and blocks while it is not.
async fn corrupt_record_is_judged_by_the_stores_timestamp(server: Server) {
    let url = server.url();
    let backend = common::trusted_backend(&server, &url).await;
    let path = backend.object_path("damaged").expect("path");
    backend.object_store().put(&path, PutPayload::from_static(b"{\"tenure\":1,\"na")).await.expect("damage");

    // A contender whose clock agrees with the store: the record is recent.
    let now = ManualClock::new();
    let store = CasStore::new(common::trusted_backend(&server, &url).await, now.shared(), cas_options());
    match Client::new(Arc::new(store)).try_acquire("damaged", &no_wait()).await {
        Err(Error::Busy { holder, .. }) => assert!(holder.contains("unreadable"), "{holder}"),
        other => panic!("a recent corrupt record must block, got {other:?}"),
    }
    // A contender (who never watched it) whose clock is past the record's age
    // limit, with a second to spare for Last-Modified's whole seconds.
    let later = now.skewed((CORRUPT_TTL + MAX_SKEW + Duration::from_secs(2)).as_millis() as i64);
    let store = CasStore::new(common::trusted_backend(&server, &url).await, later.shared(), cas_options());
    let lease = Client::new(Arc::new(store)).try_acquire("damaged", &no_wait()).await.expect("stale corrupt record");
    assert_eq!(lease.grant().predecessor.map(|p| p.how), Some(EndedHow::Corrupt));
    // No version sequence on S3/Azure: the token is floored on the store's Last-Modified (µs).
    assert!(lease.token() > 1_000_000_000_000_000, "token {}", lease.token());
    lease.release().await.expect("release");
}

/// A token after a corrupt record comes from the store's `Last-Modified`, not
/// from the replacing client's clock: a client an hour behind that replaces a
/// corrupt record after a grant with a higher token still grants above it.
async fn a_token_after_a_corrupt_record_never_moves_back_with_a_slow_client(server: Server) {
    let url = server.url();
    let backend = common::trusted_backend(&server, &url).await;
    let path = backend.object_path("damaged").expect("path");
    let damage = async || {
        backend.object_store().put(&path, PutPayload::from_static(b"{\"tenure\":1,\"na")).await.expect("damage");
    };
    damage().await;
    // A client whose clock agrees with the store's, once the record is stale by age.
    let now = ManualClock::new();
    let later = now.skewed((CORRUPT_TTL + MAX_SKEW + Duration::from_secs(2)).as_millis() as i64);
    let store = CasStore::new(common::trusted_backend(&server, &url).await, later.shared(), cas_options());
    let first = Client::new(Arc::new(store)).try_acquire("damaged", &no_wait()).await.expect("stale corrupt record");
    let first_token = first.token();
    first.release().await.expect("release");
    // Damaged again, in a later second of the store's clock (a corrupt record is
    // replaced only once older than the corrupt ttl: the next is written later).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    damage().await;
    // A client an hour behind replaces it once it watched it for the corrupt ttl.
    let slow = now.skewed(-3_600_000);
    let store = CasStore::new(common::trusted_backend(&server, &url).await, slow.shared(), cas_options());
    let slow_client = Client::new(Arc::new(store));
    assert!(slow_client.try_acquire("damaged", &no_wait()).await.is_err(), "a fresh corrupt record blocks");
    now.advance(CORRUPT_TTL);
    let second = slow_client.try_acquire("damaged", &no_wait()).await.expect("watched for the corrupt ttl");
    assert_eq!(second.grant().predecessor.as_ref().map(|p| p.how), Some(EndedHow::Corrupt));
    assert!(second.token() > first_token, "token {} after token {first_token}: moved back", second.token());
    second.release().await.expect("release");
}

/// An object at a lease key larger than any record (another tenant's upload, or
/// a hostile one) is never read whole: the lease counts as corrupt, judged by
/// age, and is then replaced.
async fn an_oversized_object_is_judged_like_a_corrupt_record_without_being_read(server: Server) {
    let url = server.url();
    let backend = common::trusted_backend(&server, &url).await;
    let path = backend.object_path("big").expect("path");
    let huge = vec![b'x'; tenure_core::limits::MAX_RECORD_BYTES + 1];
    backend.object_store().put(&path, PutPayload::from(huge)).await.expect("plant");
    let now = ManualClock::new();
    let store = CasStore::new(common::trusted_backend(&server, &url).await, now.shared(), cas_options());
    let state = store.inspect(&tenure_core::LeaseName::new("big").expect("name")).await.expect("inspect");
    assert!(state.corrupt.as_deref().is_some_and(|c| c.contains("larger than a record")), "{:?}", state.corrupt);
    match Client::new(Arc::new(store)).try_acquire("big", &no_wait()).await {
        Err(Error::Busy { holder, .. }) => assert!(holder.contains("unreadable"), "{holder}"),
        other => panic!("a recent oversized object must block, got {other:?}"),
    }
    let later = now.skewed((CORRUPT_TTL + MAX_SKEW + Duration::from_secs(2)).as_millis() as i64);
    let store = CasStore::new(common::trusted_backend(&server, &url).await, later.shared(), cas_options());
    let lease = Client::new(Arc::new(store)).try_acquire("big", &no_wait()).await.expect("replaced once stale");
    assert_eq!(lease.grant().predecessor.map(|p| p.how), Some(EndedHow::Corrupt));
    lease.release().await.expect("release");
}

/// S3's ETag is the MD5 of the body, so If-Match compares contents. A fenced
/// record carries its token in the body (never in metadata, which the ETag
/// ignores): a stale writer's replace fails even when the newer holder wrote the
/// very same value.
async fn stale_fenced_write_fails_even_after_a_newer_write_of_the_same_value(server: Server) {
    let url = server.url();
    let backend = common::trusted_backend(&server, &url).await;
    let fence = FencedRecord::new(backend.clone(), "state").expect("fence");
    let old = fence.write(5, Bytes::from_static(b"same")).await.expect("token 5 writes");
    fence.write(7, Bytes::from_static(b"same")).await.expect("token 7 writes the same value");
    // The paused holder of token 5 replaces from the version it saw.
    let stale_body = Bytes::from_static(b"tenure-fence/1 5\nsame");
    let put = backend
        .put(
            &tenure_core::Key::new("state~fence").expect("key"),
            stale_body,
            tenure_core::PutOptions::update(old.version),
        )
        .await;
    assert_eq!(put.expect("put"), tenure_core::Put::Conflict, "a replace from a superseded version must fail");
    match fence.write(5, Bytes::from_static(b"same")).await {
        Err(Error::Fenced { ours: 5, current: 7, .. }) => {}
        other => panic!("token 5 must be fenced by token 7, got {other:?}"),
    }
}

macro_rules! per_server {
    ($($server:ident),*) => {
        $(
            mod $server {
                #[tokio::test]
                async fn records_live_at_documented_keys() {
                    if let Some(s) = super::common::$server() {
                        super::records_live_at_documented_keys(s).await;
                    }
                }
                #[tokio::test]
                async fn listing_skips_objects_that_are_not_leases() {
                    if let Some(s) = super::common::$server() {
                        super::listing_skips_objects_that_are_not_leases(s).await;
                    }
                }
                #[tokio::test]
                async fn stale_fenced_write_fails_even_after_a_newer_write_of_the_same_value() {
                    if let Some(s) = super::common::$server() {
                        super::stale_fenced_write_fails_even_after_a_newer_write_of_the_same_value(s).await;
                    }
                }
                #[tokio::test]
                async fn an_oversized_object_is_judged_like_a_corrupt_record_without_being_read() {
                    if let Some(s) = super::common::$server() {
                        super::an_oversized_object_is_judged_like_a_corrupt_record_without_being_read(s).await;
                    }
                }
                #[tokio::test]
                async fn a_token_after_a_corrupt_record_never_moves_back_with_a_slow_client() {
                    if let Some(s) = super::common::$server() {
                        super::a_token_after_a_corrupt_record_never_moves_back_with_a_slow_client(s).await;
                    }
                }
                #[tokio::test]
                async fn corrupt_record_is_judged_by_the_stores_timestamp() {
                    if let Some(s) = super::common::$server() {
                        super::corrupt_record_is_judged_by_the_stores_timestamp(s).await;
                    }
                }
            }
        )*
    };
}

per_server!(moto, rgw, azurite, gcs);

fn invalid(r: tenure_core::Result<impl std::fmt::Debug>) -> String {
    match r {
        Err(e @ Error::InvalidStore { .. }) => e.to_string(),
        other => panic!("expected InvalidStore, got {other:?}"),
    }
}

#[tokio::test]
async fn bad_urls_and_options_are_refused_before_any_request() {
    let local = [("aws_access_key_id", "k"), ("aws_secret_access_key", "s"), ("aws_region", "us-east-1")];
    let mut opts = OpenOptions::default();
    for (k, v) in local {
        opts = opts.with_param(k, v);
    }
    let cases = [
        ("s3://", "names no bucket"),
        ("ftp://bucket/x", "unknown scheme \"ftp\""),
        ("s3://bucket:9000/x", "cannot carry a port"),
        ("s3://bucket/x#frag", "no #fragment"),
        ("s3://bucket/a//b", "bad key prefix"),
    ];
    for (url, why) in cases {
        let msg = invalid(open(url, &opts).await);
        assert!(msg.contains(why), "{url}: {msg}");
    }
    let msg = invalid(open("s3://bucket/x", &opts.clone().with_param("aws_endpont", "http://127.0.0.1:1")).await);
    assert!(msg.contains("unknown option \"aws_endpont\""), "{msg}");
    let msg = invalid(open("s3://bucket/x", &opts.clone().with_param("aws_endpoint", "http://127.0.0.1:1")).await);
    assert!(msg.contains("aws_allow_http=true"), "{msg}");
    let msg = invalid(open("az://c/x", &OpenOptions::default().with_param("aws_region", "x")).await);
    assert!(msg.contains("azure_storage_account_name"), "options are per provider: {msg}");
}

/// Nothing listens on port 1: every error names the store URL, and lease errors
/// the lease and the object.
#[tokio::test]
async fn unreachable_store_errors_name_the_store_and_the_lease() {
    let opts = OpenOptions::default()
        .with_param("aws_endpoint", "http://127.0.0.1:1")
        .with_param("aws_allow_http", "true")
        .with_param("aws_access_key_id", "k")
        .with_param("aws_secret_access_key", "s")
        .with_param("aws_region", "us-east-1");
    match open("s3://tenure/unreachable", &opts).await {
        Err(e @ Error::Store { .. }) => {
            let msg = e.to_string();
            assert!(msg.starts_with("s3://tenure/unreachable: probing conditional writes"), "{msg}");
        }
        other => panic!("the probe must fail on an unreachable store, got {other:?}"),
    }
    let trusted = OpenOptions { trust_store: true, ..opts };
    let store = open("s3://tenure/unreachable", &trusted).await.expect("no request before first use");
    match Client::new(store).try_acquire("deploy", &no_wait()).await {
        Err(e @ Error::Store { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.starts_with("s3://tenure/unreachable: reading \"deploy\" (unreachable/deploy/~lease)"),
                "{msg}"
            );
        }
        other => panic!("expected a store error, got {other:?}"),
    }
}

/// Keys that are not lease names never reach the store.
#[tokio::test]
async fn invalid_keys_are_refused_naming_the_rule() {
    let Some(server) = common::moto() else { return };
    let backend = common::trusted_backend(&server, &server.url()).await;
    for key in ["../escape", "a//b", "x~lease"] {
        let read = match tenure_core::Key::new(key) {
            Ok(key) => backend.get(&key).await,
            Err(e) => Err(e),
        };
        match read {
            Err(Error::InvalidName { name, .. }) => assert_eq!(name, key),
            other => panic!("{key}: expected InvalidName, got {other:?}"),
        }
    }
    assert_eq!(backend.requests().total(), 0);
}
