//! tenure-file's integration tests, one binary: each module was a test file of
//! its own (one link instead of one per file). Shared helpers are modules here.

#[path = "../../../tenure-core/tests/fuzz_support/mod.rs"]
mod fuzz_support;

mod conformance_file;
mod fuzz_dir_url;
mod fuzz_file_store;
mod hostile_file_store;
mod model_file_store;
mod wait_queue;
