//! tenure leases and fencing on S3, GCS and Azure Blob, through `object_store`.
//!
//! [`object_store_from_url`] turns a store URL (`s3://bucket/prefix`,
//! `gs://bucket/prefix`, `az://container/prefix`) and `object_store` config keys
//! into a store and a key prefix. The lease backend is being written.

mod config;

use std::sync::Arc;

use tenure::{Error, LeaseStore, OpenOptions, Result};

pub use config::{MAX_RETRIES, Provider, RETRY_TIMEOUT, object_store_from_url};
pub use object_store;

/// Opens a store by URL.
pub async fn open(url: &str, opts: &OpenOptions) -> Result<Arc<dyn LeaseStore>> {
    let _ = opts;
    Err(Error::unsupported(url, "this store is not implemented yet"))
}
