//! The conformance suite against every object store tests can reach: moto and
//! Ceph RGW (S3), Azurite (Azure Blob), real GCS when credentials are given, and
//! `object_store`'s in-memory store (no server needed).

use crate::common;

use std::time::Duration;

use common::Bucket;

async fn in_memory() -> Option<Bucket> {
    Some(Bucket::in_memory().await)
}

async fn moto() -> Option<Bucket> {
    Some(Bucket::new(common::moto()?, Duration::from_millis(40)).await)
}

async fn rgw() -> Option<Bucket> {
    Some(Bucket::new(common::rgw()?, Duration::from_millis(60)).await)
}

async fn azurite() -> Option<Bucket> {
    Some(Bucket::new(common::azurite()?, Duration::from_millis(40)).await)
}

async fn gcs() -> Option<Bucket> {
    Some(Bucket::new(common::gcs()?, Duration::from_millis(100)).await)
}

mod memory {
    tenure_conformance::conformance_tests!(paused super::in_memory);
}

mod s3_moto {
    tenure_conformance::conformance_tests!(super::moto);
}

mod s3_rgw {
    tenure_conformance::conformance_tests!(super::rgw);
}

mod azure_azurite {
    tenure_conformance::conformance_tests!(super::azurite);
}

mod gcs_real {
    tenure_conformance::conformance_tests!(super::gcs);
}
