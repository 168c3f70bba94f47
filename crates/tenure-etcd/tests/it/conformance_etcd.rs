//! The conformance suite on a real single-member etcd (`TENURE_TEST_ETCD`).
//!
//! Real time: etcd's leases expire on etcd's clock, so the suite's TTLs are
//! real sleeps, and a crashed holder's record may vanish (etcd deletes it)
//! while the suite waits — which the store must handle like any other expiry.

use crate::common;

use std::sync::Arc;

use async_trait::async_trait;
use tenure_conformance::{Harness, Time, conformance_tests, server_from_env};
use tenure_core::{Backend, LeaseStore};

use common::{Scratch, open_options};

struct Etcd {
    scratch: Scratch,
    backend: Arc<dyn Backend>,
}

#[async_trait]
impl Harness for Etcd {
    async fn store(&self) -> Arc<dyn LeaseStore> {
        common::open(&self.scratch.url, &open_options()).await.expect("open the etcd store")
    }
    fn time(&self) -> Time {
        Time::Real
    }
    fn backend(&self) -> Option<Arc<dyn Backend>> {
        Some(self.backend.clone())
    }
    /// Overwrites the record with a plain put, as a foreign writer would.
    async fn corrupt(&self, name: &str, bytes: &[u8]) -> bool {
        self.scratch.raw.put(self.scratch.key(name), bytes).await.expect("raw put");
        true
    }
}

async fn etcd() -> Option<Etcd> {
    let endpoints = server_from_env("TENURE_TEST_ETCD")?;
    let scratch = Scratch::new(&endpoints, "conformance").await;
    let backend = scratch.dyn_backend().await;
    Some(Etcd { scratch, backend })
}

conformance_tests!(etcd);
