//! The conformance suite over `tenure://`: a lease server on 127.0.0.1 running on
//! the suite's manual clock, clients over real TCP sockets.

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure::{Backend, LeaseStore, ManualClock};
use tenure_conformance::{Harness, Time, conformance_tests};
use tenure_server::server::RunningServer;

struct Served {
    clock: ManualClock,
    server: RunningServer,
}

#[async_trait]
impl Harness for Served {
    async fn store(&self) -> Arc<dyn LeaseStore> {
        Arc::new(common::store(&[&self.server], &self.clock))
    }
    fn time(&self) -> Time {
        Time::Manual(self.clock.clone())
    }
    fn backend(&self) -> Option<Arc<dyn Backend>> {
        None
    }
    /// The server keeps records in RAM only: nothing can damage them.
    async fn corrupt(&self, _name: &str, _bytes: &[u8]) -> bool {
        false
    }
    fn settle(&self) -> Duration {
        Duration::from_millis(10)
    }
}

async fn served() -> Option<Served> {
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    Some(Served { clock, server })
}

conformance_tests!(served);
