//! tenure-client's integration tests, one binary: each module was a test file of
//! its own (one link instead of one per file). Shared helpers are modules here.

#[path = "../../../tenure-core/tests/fuzz_support/mod.rs"]
mod fuzz_support;

mod client_failures;
mod hostile_server;
mod wire_golden;
