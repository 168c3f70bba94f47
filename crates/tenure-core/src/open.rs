//! Opening stores by URL.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::cas::{CasOptions, CasStore};
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::store::{self, LeaseStore};

/// What opening a store by URL needs besides the URL.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// The clock grants are measured on.
    pub clock: Arc<dyn Clock>,
    /// Clock discipline for stores built on [`CasStore`].
    pub cas: CasOptions,
    /// Store-specific settings (`--store-opt key=value`, or the URL's query),
    /// e.g. an endpoint or a credential.
    pub params: BTreeMap<String, String>,
    /// Skip safety probes, such as the object stores' check that conditional
    /// writes are really enforced. Only for stores known to be safe.
    pub trust_store: bool,
    /// The caller only reads (status, inspection): opening must not write
    /// anything, so probes that write are skipped. They protect writers; a reader
    /// of a store that ignores conditional writes is harmless.
    pub read_only: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            clock: SystemClock::shared(),
            cas: CasOptions::default(),
            params: BTreeMap::new(),
            trust_store: false,
            read_only: false,
        }
    }
}

impl OpenOptions {
    /// With a clock.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
    /// With clock-discipline options.
    pub fn with_cas(mut self, cas: CasOptions) -> Self {
        self.cas = cas;
        self
    }
    /// For a caller that only reads (see [`OpenOptions::read_only`]).
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// With a store-specific setting.
    pub fn with_param(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.params.insert(key.into(), value.into());
        self
    }
}

/// The one wording, on every store, for a setting the store does not know.
/// The value is never shown: a secret given under the wrong key must not reach
/// a terminal or a log.
pub fn unknown_option(key: &str, known: &str) -> String {
    format!("unknown option {key:?} (known: {known})")
}

/// Opens a `file://`, plain-path or `memory://` store. Other schemes (`s3://`,
/// `tenure://`, `etcd://` …) are opened by the crates that implement them; the
/// `tenure` command knows them all.
pub fn open(url: &str, opts: &OpenOptions) -> Result<Arc<dyn LeaseStore>> {
    let backend: Arc<dyn crate::Backend> = if url.starts_with("memory://") {
        if let Some(key) = opts.params.keys().next() {
            return Err(Error::InvalidStore {
                url: url.into(),
                reason: unknown_option(key, "none: memory:// takes no options"),
            });
        }
        store::memory::open(url)?
    } else if url.starts_with("file://") || !url.contains("://") {
        Arc::new(store::file::open_with(url, &opts.params)?)
    } else {
        return Err(Error::InvalidStore {
            url: url.into(),
            reason: "unknown scheme (this library opens file://, memory:// and plain paths)".into(),
        });
    };
    Ok(Arc::new(CasStore::new(backend, opts.clock.clone(), opts.cas.clone())))
}
