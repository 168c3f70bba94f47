//! tenure-object's integration tests, one binary: each module was a test file of
//! its own (one link instead of one per file). Shared helpers are modules here.

mod common;
#[path = "../../../tenure-core/tests/fuzz_support/mod.rs"]
mod fuzz_support;

mod conformance;
mod errors;
mod fuzz_url;
mod gcs_generations;
mod line;
mod probe;
mod requests;
mod store;
