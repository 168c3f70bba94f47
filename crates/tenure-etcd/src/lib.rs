//! Not implemented yet: this crate is being written.

use std::sync::Arc;

use tenure::{Error, LeaseStore, OpenOptions, Result};

/// Opens a store by URL.
pub async fn open(url: &str, opts: &OpenOptions) -> Result<Arc<dyn LeaseStore>> {
    let _ = opts;
    Err(Error::unsupported(url, "this store is not implemented yet"))
}
