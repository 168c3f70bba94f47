//! tenure-bag's integration tests, one binary: each module was a test file of
//! its own (one link instead of one per file). Shared helpers are modules here.

mod common;
#[path = "../../../tenure-core/tests/fuzz_support/mod.rs"]
mod fuzz_support;

mod fs_bag;
mod fuzz_parsers;
mod fuzz_store_names;
mod hostile;
mod hostile_data;
mod journal;
mod model;
mod object_bag;
mod property;
