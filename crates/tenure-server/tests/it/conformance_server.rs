//! The conformance suite over `tenure://`: a lease server on 127.0.0.1 running on
//! the suite's manual clock, clients over real TCP sockets; and the same suite
//! again over TLS, with a CA made for the run.

use crate::common;

use std::time::Duration;

use tenure_conformance::conformance_tests;
use tenure_core::ManualClock;
use tenure_server::{CoreOptions, ServerOptions};

async fn served() -> Option<common::Served> {
    let clock = ManualClock::new();
    let server = common::start_open(&clock).await;
    Some(common::Served { clock, server, query: String::new(), ca: None })
}

conformance_tests!(served);

/// The suite over TLS: the server's certificate is for 127.0.0.1, signed by a
/// CA that only the clients' `ca_file` trusts.
mod over_tls {
    use super::*;

    async fn served() -> Option<common::Served> {
        let clock = ManualClock::new();
        let ca = common::tls::TestCa::new();
        let opts = ServerOptions { tls: Some(ca.loopback()), ..ServerOptions::default() };
        let server = common::start(clock.shared(), CoreOptions::new(common::MAX_LEASE), opts).await;
        clock.advance(common::MAX_LEASE + Duration::from_secs(1));
        Some(common::Served { clock, server, query: ca.query(), ca: Some(ca) })
    }

    conformance_tests!(served);
}
