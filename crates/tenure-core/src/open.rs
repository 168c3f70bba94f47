//! Opening stores by URL.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::cas::CasOptions;
use crate::clock::{Clock, SystemClock};

/// What opening a store by URL needs besides the URL.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// The clock grants are measured on.
    pub clock: Arc<dyn Clock>,
    /// Clock discipline for stores built on [`crate::CasStore`].
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
    /// A directory store may create its directory if it does not exist (as
    /// `?create=true` does). Off by default: a missing directory is most likely
    /// a mount that is not there or a typo, and leases in a directory made in
    /// its place would exclude nobody. Other stores ignore it.
    pub create: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            clock: SystemClock::shared(),
            cas: CasOptions::default(),
            params: BTreeMap::new(),
            trust_store: false,
            read_only: false,
            create: false,
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

    /// Lets a directory store create its directory (see [`OpenOptions::create`]).
    pub fn create(mut self) -> Self {
        self.create = true;
        self
    }

    /// With a store-specific setting.
    pub fn with_param(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.params.insert(key.into(), value.into());
        self
    }
}
