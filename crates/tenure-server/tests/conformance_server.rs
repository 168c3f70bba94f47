//! The conformance suite over `tenure://`: a lease server on 127.0.0.1 running on
//! the suite's manual clock, clients over real TCP sockets.

mod common;

use tenure_core::ManualClock;
use tenure_conformance::conformance_tests;

async fn served() -> Option<common::Served> {
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    Some(common::Served { clock, server, query: "" })
}

conformance_tests!(served);
