//! The conditional-write probe on real servers: it refuses s3rver (ignores every
//! condition) and localbucket (honours create-if-absent, ignores If-Match), passes
//! moto, Ceph RGW and Azurite, and `--trust-store` overrides it.

use crate::common;

use common::Server;
use common::{check_store, open, open_backend};
use tenure_core::{Client, Error, LeaseOptions, OpenOptions};
use tenure_object::{Probe, probe};

fn refusal(r: tenure_core::Result<impl std::fmt::Debug>) -> String {
    match r {
        Err(e @ Error::Unsupported { .. }) => e.to_string(),
        other => panic!("the probe must refuse this store, got {other:?}"),
    }
}

#[tokio::test]
async fn probe_refuses_a_store_that_ignores_create_if_absent() {
    let Some(server) = common::s3rver() else { return };
    let url = server.url();
    let msg = refusal(open(&url, &server.options()).await);
    println!("{msg}");
    assert!(msg.starts_with(&format!("{url}: this store does not enforce conditional writes")), "{msg}");
    assert!(msg.contains("create-if-absent (If-None-Match: *) overwrote an existing object"), "{msg}");
    assert!(msg.contains("--trust-store"), "the message says how to override: {msg}");
}

#[tokio::test]
async fn probe_refuses_a_store_that_ignores_if_match() {
    let Some(server) = common::localbucket() else { return };
    let url = server.url();
    let msg = refusal(open(&url, &server.options()).await);
    println!("{msg}");
    assert!(msg.contains("a replace conditional on a stale ETag (If-Match) succeeded"), "{msg}");
    assert!(msg.contains("--trust-store"), "{msg}");
}

#[tokio::test]
async fn probe_cleans_up_even_when_it_refuses() {
    let Some(mut server) = common::localbucket() else { return };
    // localbucket has no multi-object delete, which object_store uses by default.
    server.params.insert("aws_disable_bulk_delete".into(), "true".into());
    let backend = common::trusted_backend(&server, &server.url()).await;
    refusal(probe(&backend).await);
    assert_eq!(backend.requests().delete, 1, "{}", backend.requests());
    let left = common::objects(&backend).await;
    assert!(left.is_empty(), "the probe object must be deleted: {left:?}");
}

#[tokio::test]
async fn check_store_reports_the_verdict_even_when_trusted() {
    let Some(server) = common::s3rver() else { return };
    let trusted = OpenOptions { trust_store: true, ..server.options() };
    refusal(check_store(&server.url(), &trusted).await);
    let Some(server) = common::moto() else { return };
    let verdict = check_store(&server.url(), &server.options()).await.expect("moto passes");
    assert_eq!(verdict, Probe::Enforced { conditional_get: true, quoted_if_match: false });
    assert_eq!(verdict.to_string(), "conditional writes are enforced (create-if-absent and replace-if-match checked)");
}

#[tokio::test]
async fn trust_store_skips_the_probe_on_a_store_that_would_fail_it() {
    let Some(server) = common::s3rver() else { return };
    let opts = OpenOptions { trust_store: true, ..server.options() };
    let backend = open_backend(&server.url(), &opts).await.expect("trusted: opened without a probe");
    assert_eq!(backend.requests().total(), 0, "nothing is sent before first use");
}

#[tokio::test]
async fn a_read_only_open_writes_nothing_not_even_a_probe() {
    // `tenure status` opens read-only: readers never write (invariant 7).
    let Some(server) = common::moto() else { return };
    let opts = server.options().read_only();
    let backend = open_backend(&server.url(), &opts).await.expect("opened without a probe");
    assert_eq!(backend.requests().total(), 0, "{}", backend.requests());
    let store = open(&server.url(), &opts).await.expect("open read-only");
    store.inspect(&tenure_core::LeaseName::new("never-written").expect("name")).await.expect("inspect");
    assert!(common::objects(&backend).await.is_empty(), "a read-only open and an inspection left objects behind");
}

async fn probe_passes(server: Server) {
    let backend = open_backend(&server.url(), &server.options()).await.expect("a conforming store passes");
    assert_eq!(backend.requests().total(), 6, "{}", backend.requests());
    // And leases work on the handle it returns.
    let store = open(&server.url(), &server.options()).await.expect("open");
    let lease = Client::new(store).try_acquire("probe-then-lease", &LeaseOptions::default()).await.expect("acquire");
    lease.release().await.expect("release");
}

#[tokio::test]
async fn probe_passes_moto() {
    if let Some(s) = common::moto() {
        probe_passes(s).await;
    }
}

#[tokio::test]
async fn probe_passes_ceph_rgw_with_unquoted_etags() {
    let Some(server) = common::rgw() else { return };
    let backend = common::trusted_backend(&server, &server.url()).await;
    let outcome = probe(&backend).await.expect("RGW enforces conditions");
    assert_eq!(outcome, Probe::Enforced { conditional_get: true, quoted_if_match: false });
    probe_passes(server).await;
}

#[tokio::test]
async fn probe_passes_azurite() {
    if let Some(s) = common::azurite() {
        probe_passes(s).await;
    }
}

#[tokio::test]
async fn wrong_credentials_are_an_error_not_a_read_only_store() {
    let Some(mut server) = common::rgw() else { return };
    server.params.insert("aws_secret_access_key".into(), "not-the-secret".into());
    let url = server.url();
    match open(&url, &server.options()).await {
        Err(e @ Error::Store { .. }) => {
            let msg = e.to_string();
            assert!(msg.starts_with(&url) && msg.contains("probing conditional writes"), "{msg}");
        }
        other => panic!("bad credentials must fail the open, got {other:?}"),
    }
}
