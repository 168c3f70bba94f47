//! tenure-core's integration tests, one binary: each module was a test file of
//! its own (one link instead of one per file). Shared helpers are modules here.

#[path = "../fuzz_support/mod.rs"]
mod fuzz_support;

mod break_renewed;
mod client_turns;
mod clock_discipline;
mod conformance_memory;
mod durability;
mod fuzz_record;
mod hung_store;
mod keepalive;
mod late_grant;
mod metrics;
mod model_lease;
