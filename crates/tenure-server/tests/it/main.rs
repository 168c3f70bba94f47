//! tenure-server's integration tests, one binary: each module was a test file of
//! its own (one link instead of one per file). Shared helpers are modules here.

mod common;
#[path = "../../../tenure-core/tests/fuzz_support/mod.rs"]
mod fuzz_support;

mod abuse;
mod abuse_http;
mod conformance_server;
mod conformance_server_threads;
mod core_table;
mod fuzz_wire;
mod fuzz_witness_url;
mod http_status;
mod listing;
mod malformed_input;
mod queue;
mod restart;
mod sharding;
mod table_vs_cas;
mod tls;
mod wire_ranges;
mod witness_and_tentative;
