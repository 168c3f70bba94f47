//! tenure-etcd's integration tests, one binary: each module was a test file of
//! its own (one link instead of one per file). Shared helpers are modules here.

mod common;
#[path = "../../../tenure-core/tests/fuzz_support/mod.rs"]
mod fuzz_support;

mod conformance_etcd;
mod etcd_store;
mod failover;
mod fuzz_url;
mod generated_code;
mod line_cost;
mod line_hostile;
mod tls;
