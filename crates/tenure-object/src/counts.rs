//! Requests sent to the store, by kind: for tests that pin the cost of each lease
//! operation, and for the benchmark.
//!
//! One count per `object_store` call, which is one HTTP request unless
//! `object_store` retried it (timeouts, 5xx) or a LIST needed more than one page
//! (1000 objects each).

use std::fmt;
use std::ops::Sub;
use std::sync::atomic::{AtomicU64, Ordering};

/// Requests by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// GETs (conditional or not, whatever the answer).
    pub get: u64,
    /// Of those, answered `304 Not Modified` (no body sent).
    pub get_not_modified: u64,
    /// Create-if-absent PUTs (`If-None-Match: *`; GCS generation 0).
    pub put_create: u64,
    /// Conditional replace PUTs (`If-Match`; GCS generation match).
    pub put_update: u64,
    /// DELETEs (only the probe deletes: lease records are never deleted).
    pub delete: u64,
    /// LIST calls.
    pub list: u64,
}

impl RequestCounts {
    /// All requests (`get_not_modified` is part of `get`).
    pub fn total(&self) -> u64 {
        self.get + self.put_create + self.put_update + self.delete + self.list
    }
}

impl Sub for RequestCounts {
    type Output = RequestCounts;
    fn sub(self, earlier: RequestCounts) -> RequestCounts {
        RequestCounts {
            get: self.get - earlier.get,
            get_not_modified: self.get_not_modified - earlier.get_not_modified,
            put_create: self.put_create - earlier.put_create,
            put_update: self.put_update - earlier.put_update,
            delete: self.delete - earlier.delete,
            list: self.list - earlier.list,
        }
    }
}

impl fmt::Display for RequestCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} requests: {} GET ({} not modified), {} PUT create, {} PUT if-match, {} DELETE, {} LIST",
            self.total(),
            self.get,
            self.get_not_modified,
            self.put_create,
            self.put_update,
            self.delete,
            self.list
        )
    }
}

/// The live counters behind [`RequestCounts`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) get: AtomicU64,
    pub(crate) get_not_modified: AtomicU64,
    pub(crate) put_create: AtomicU64,
    pub(crate) put_update: AtomicU64,
    pub(crate) delete: AtomicU64,
    pub(crate) list: AtomicU64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> RequestCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RequestCounts {
            get: get(&self.get),
            get_not_modified: get(&self.get_not_modified),
            put_create: get(&self.put_create),
            put_update: get(&self.put_update),
            delete: get(&self.delete),
            list: get(&self.list),
        }
    }
}
