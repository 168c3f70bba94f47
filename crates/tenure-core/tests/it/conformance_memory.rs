//! The conformance suite on `memory://`, on tokio's paused clock.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use tenure_conformance::{Harness, Time, cas_options, conformance_tests};
use tenure_core::{Backend, CasStore, LeaseStore, ManualClock, MemoryBackend};

struct Memory {
    clock: ManualClock,
    backend: Arc<MemoryBackend>,
}

#[async_trait]
impl Harness for Memory {
    async fn store(&self) -> Arc<dyn LeaseStore> {
        Arc::new(CasStore::new(self.backend.clone(), self.clock.shared(), cas_options()))
    }
    fn time(&self) -> Time {
        Time::Manual(self.clock.clone())
    }
    fn backend(&self) -> Option<Arc<dyn Backend>> {
        Some(self.backend.clone())
    }
    async fn corrupt(&self, name: &str, bytes: &[u8]) -> bool {
        self.backend.overwrite(name, Bytes::copy_from_slice(bytes));
        true
    }
}

async fn memory() -> Option<Memory> {
    let clock = ManualClock::new();
    Some(Memory { backend: Arc::new(MemoryBackend::new(clock.shared())), clock })
}

conformance_tests!(paused memory);
