//! The object requests that lease records and wait lines share: the wait line
//! (`line.rs`) makes them through [`Objects`], which the backend implements,
//! so that the line needs nothing else of the backend and the backend only
//! builds the line.

use std::fmt::Debug;
use std::future::Future;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectMeta, PutMode as OsPutMode, PutResult, UpdateVersion};
use tenure_core::{Error, Result, Version};

/// The store's modification time in ms. HTTP dates have whole seconds, truncated:
/// report the end of that second, so a record never looks older than it is.
pub(crate) fn modified_ms(meta: &ObjectMeta) -> Option<u64> {
    round_up_seconds(meta.last_modified.timestamp_millis())
}

pub(crate) fn round_up_seconds(ms: i64) -> Option<u64> {
    if ms <= 0 {
        return None;
    }
    let ms = ms as u64;
    Some(if ms.is_multiple_of(1000) { ms + 999 } else { ms })
}

/// The requests a wait line makes of the store, each counted.
pub(crate) trait Objects: Send + Sync + Debug + 'static {
    /// The store's URL, for messages.
    fn url(&self) -> &str;

    /// The prefix joined with `parts`, each taken as is.
    fn child<'a>(&self, parts: impl IntoIterator<Item = &'a str>) -> Result<Path>;

    /// The objects under `under`, or `None` past `cap` of them.
    fn list_capped(
        &self,
        under: &Path,
        cap: usize,
    ) -> impl Future<Output = std::result::Result<Option<Vec<ObjectMeta>>, object_store::Error>> + Send;

    /// One conditional PUT.
    fn put_object(
        &self,
        path: &Path,
        value: Bytes,
        mode: OsPutMode,
    ) -> impl Future<Output = std::result::Result<PutResult, object_store::Error>> + Send;

    /// One unconditional DELETE.
    fn delete_object(&self, path: &Path) -> impl Future<Output = std::result::Result<(), object_store::Error>> + Send;

    /// The condition of a replace from `v`.
    fn update_version(&self, v: &Version) -> UpdateVersion;

    /// The version a PUT left.
    fn version_of_put(&self, path: &Path, r: &PutResult) -> Result<Version>;

    /// The version of an object listed or read.
    fn version_of_get(&self, meta: &ObjectMeta) -> Result<Version>;

    /// A failed request `op` as the user should read it.
    fn error(&self, op: impl Into<String>, e: object_store::Error) -> Error;
}
