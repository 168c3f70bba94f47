//! [`ObjectBackend`]: tenure's versioned register per key, on an object store.
//!
//! See the crate docs for the layout, the requests per operation and the caveats.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::{Path, PathPart};
use object_store::{
    Attribute, Attributes, GetOptions, ObjectStore, ObjectStoreExt, PutMode as OsPutMode, PutOptions as OsPutOptions,
    PutPayload, PutResult, UpdateVersion,
};
use tenure_core::backend::{Key, check_key};
use tenure_core::limits::MAX_RECORD_BYTES;
use tenure_core::{Backend, BoxError, Error, Put, PutMode, PutOptions, Result, Stored, Version};

use crate::config::{Context, Provider};
use crate::counts::{Counters, RequestCounts};
use crate::explain::{self, Problem};
use crate::ops::{Objects, modified_ms};

/// Name of the object that holds a key's value, inside the key's "directory".
pub const RECORD_OBJECT: &str = "~lease";

/// Most keys whose last read is remembered for conditional GETs.
const CACHE_LIMIT: usize = 1024;

/// The last value read or written at a key: what a `304 Not Modified` stands for.
#[derive(Clone, Debug)]
struct Cached {
    /// The ETag exactly as the store sent it (quotes included).
    etag: String,
    stored: Stored,
}

/// A [`Backend`] over any `object_store` store, under a key prefix.
#[derive(Debug)]
pub struct ObjectBackend {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    provider: Provider,
    url: String,
    counts: Counters,
    cache: Mutex<HashMap<String, Cached>>,
    conditional_get: AtomicBool,
    quoted_if_match: AtomicBool,
    /// The instance metadata endpoint, when it is the only source of
    /// credentials left (none were configured): its failures mean "no
    /// credentials", and say so.
    metadata_only: Option<String>,
    /// The bucket, region and credentials' source, for messages.
    context: Context,
}

/// The ETag as a version tag: without the quotes HTTP puts around it, so that
/// the same version reads the same whatever form a store sends.
fn unquote(etag: &str) -> &str {
    etag.strip_prefix('"').and_then(|e| e.strip_suffix('"')).unwrap_or(etag)
}

impl ObjectBackend {
    /// A backend keeping its objects under `prefix` in `store`. `url` names the
    /// store in messages (give no secrets).
    pub fn new(store: Arc<dyn ObjectStore>, prefix: Path, provider: Provider, url: impl Into<String>) -> Self {
        Self {
            store,
            prefix,
            provider,
            url: url.into(),
            counts: Counters::default(),
            cache: Mutex::default(),
            conditional_get: AtomicBool::new(true),
            quoted_if_match: AtomicBool::new(false),
            metadata_only: None,
            context: Context::default(),
        }
    }

    /// Says what error messages name: the bucket, region and source of
    /// credentials (set by [`crate::open`] from the URL and configuration).
    #[must_use]
    pub(crate) fn with_context(mut self, context: Context) -> Self {
        self.context = context;
        self
    }

    /// Says that no credentials were configured, so that `endpoint` (the
    /// instance metadata service) is asked for them: a failure to reach it is
    /// then reported as missing credentials, not as the metadata request.
    #[must_use]
    pub fn with_metadata_only_credentials(mut self, endpoint: impl Into<String>) -> Self {
        self.metadata_only = Some(endpoint.into());
        self
    }

    /// The bucket (container) as messages name it.
    fn bucket(&self) -> String {
        if self.context.bucket.is_empty() { self.url.clone() } else { format!("{:?}", self.context.bucket) }
    }

    /// A failed request `op` as the user should read it: a configuration
    /// problem (no such bucket, wrong region, access denied, bad credentials)
    /// in one line saying what to do (see the `explain` module), anything else
    /// as [`Error::Store`] with the store's answer summarised, never quoted.
    pub(crate) fn fail(&self, op: &str, e: object_store::Error) -> Error {
        let Some(problem) = explain::problem(&e) else {
            return Error::store(&self.url, op, self.explain(e));
        };
        tracing::debug!(store = %self.url, op, error = %explain::sanitized(&e), "store error");
        let what = match self.provider {
            Provider::Azure => "container",
            Provider::S3 | Provider::Gcs => "bucket",
        };
        let bucket = self.bucket();
        let credentials = &self.context.credentials;
        match problem {
            Problem::NoBucket { code } => self.invalid(format!(
                "{what} {bucket} does not exist ({code}): create it, or fix the URL{}",
                match self.provider {
                    Provider::Azure => " (and the storage account)",
                    _ => "",
                }
            )),
            Problem::WrongRegion { region } => {
                let ours = self.context.region.as_deref().unwrap_or("us-east-1");
                self.invalid(match region.filter(|r| r != ours) {
                    Some(r) => format!("bucket {bucket} is in region {r}, not {ours}: add ?aws_region={r} (or set AWS_REGION={r})"),
                    None => format!(
                        "bucket {bucket} is not in region {ours} (the store redirected the request, as S3 does for another region): \
                         add ?aws_region=REGION with the bucket's region (`aws s3api head-bucket --bucket {}` shows it)",
                        self.context.bucket
                    ),
                })
            }
            Problem::Denied { code } => Error::store(
                &self.url,
                op,
                explain::permanent(format!(
                    "access denied ({code}): the credentials ({credentials}) lack a permission tenure needs on {}: \
                     {}; see docs/object-stores.md#permissions",
                    self.url,
                    self.provider.permissions()
                )),
            ),
            Problem::BadCredentials { code } => Error::store(
                &self.url,
                op,
                explain::permanent(format!(
                    "the store refused the credentials ({credentials}) as invalid ({code}): check the key and secret, \
                     or renew them if they expired"
                )),
            ),
        }
    }

    fn invalid(&self, reason: String) -> Error {
        Error::InvalidStore { url: self.url.clone(), reason }
    }

    /// An object store error as the user should read it (summarised, with
    /// the hint a missing credential needs). No credentials at all is a
    /// configuration error, not retried under `--timeout` (the metadata
    /// service was already asked again by `object_store`'s own retries).
    pub(crate) fn explain(&self, e: object_store::Error) -> BoxError {
        let text = explain::sanitized(&e);
        match &self.metadata_only {
            Some(endpoint) if text.contains(endpoint.trim_end_matches('/')) => explain::permanent(format!(
                "no AWS credentials were found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the store \
                 options aws_access_key_id and aws_secret_access_key), a web identity (AWS_WEB_IDENTITY_TOKEN_FILE \
                 and AWS_ROLE_ARN) or a container role; the instance metadata service at {endpoint}, asked last, \
                 gave none ({text})"
            )),
            _ => text.into(),
        }
    }

    /// Sends ETags in `If-Match` with quotes (`"abc"`, as RFC 9110 spells them)
    /// instead of without (`abc`, the default). Ceph RGW only matches the
    /// unquoted form; moto and Azurite accept both; a strict store, such
    /// as `object_store`'s in-memory one, only the quoted form. The [`crate::probe`]
    /// finds out which form a store takes and sets it.
    pub fn with_quoted_if_match(self, quoted: bool) -> Self {
        self.set_quoted_if_match(quoted);
        self
    }

    /// Whether ETags are sent in `If-Match` with quotes.
    pub fn quoted_if_match(&self) -> bool {
        self.quoted_if_match.load(Ordering::Relaxed)
    }

    pub(crate) fn set_quoted_if_match(&self, quoted: bool) {
        self.quoted_if_match.store(quoted, Ordering::Relaxed);
    }

    /// The object store underneath.
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The key prefix (the URL's path).
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// Which service this is.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// Requests sent so far, by kind.
    pub fn requests(&self) -> RequestCounts {
        self.counts.snapshot()
    }

    /// Whether a `304 Not Modified` answer to a conditional GET is trusted (the
    /// probe turns this off on a store that answered 304 for a foreign ETag).
    ///
    /// Never on GCS: its versions are generations, but `If-None-Match` compares
    /// the ETag, which is the MD5 of the content. An object rewritten with the
    /// same bytes (a fenced record written twice with one token and value) has a
    /// new generation and the same ETag, so a 304 would hand back the old
    /// generation, and every replace conditional on it would fail.
    pub fn uses_conditional_get(&self) -> bool {
        self.provider != Provider::Gcs && self.conditional_get.load(Ordering::Relaxed)
    }

    pub(crate) fn set_conditional_get(&self, on: bool) {
        self.conditional_get.store(on, Ordering::Relaxed);
        if !on {
            self.cache.lock().clear();
        }
    }

    /// The object that holds backend key `key`: `<prefix>/<key>/~lease` for a
    /// lease record, `<prefix>/<base>/~<suffix>` for a key `<base>~<suffix>`.
    ///
    /// # Errors
    /// [`Error::InvalidName`] for a key that is not a lease name with an optional
    /// `~suffix`, or whose suffix is the reserved `lease`.
    pub fn object_path(&self, key: &str) -> Result<Path> {
        self.path_of(&Key::new(key)?)
    }

    /// [`ObjectBackend::object_path`] of a key already checked.
    fn path_of(&self, key: &Key) -> Result<Path> {
        let key = key.as_str();
        let (base, object) = match key.split_once('~') {
            Some((_, reserved @ ("lease" | "line"))) => {
                return Err(Error::InvalidName {
                    name: key.into(),
                    reason: format!(
                        "the suffix '~{reserved}' is reserved on object stores (for lease records and wait lines)"
                    ),
                });
            }
            Some((base, suffix)) => (base, format!("~{suffix}")),
            None => (key, RECORD_OBJECT.to_string()),
        };
        self.child(base.split('/').chain([object.as_str()]))
    }

    /// The prefix joined with `parts`, each taken as is (`Path::join` would
    /// percent-encode `~` into the object name).
    pub(crate) fn child<'a>(&self, parts: impl IntoIterator<Item = &'a str>) -> Result<Path> {
        let mut path = self.prefix.clone();
        for part in parts {
            let part = PathPart::parse(part).map_err(|e| Error::InvalidName {
                name: part.to_string(),
                reason: format!("cannot be part of an object key: {e}"),
            })?;
            path = path.join(part);
        }
        Ok(path)
    }

    /// The backend key an object under the prefix holds, if it is one of ours.
    fn key_of(&self, path: &Path) -> Option<String> {
        let mut parts: Vec<String> = path.prefix_match(&self.prefix)?.map(|p| p.as_ref().to_string()).collect();
        let object = parts.pop()?;
        let suffix = object.strip_prefix('~')?;
        if parts.is_empty() {
            return None;
        }
        let base = parts.join("/");
        let key = if object == RECORD_OBJECT { base } else { format!("{base}~{suffix}") };
        check_key(&key).ok().map(|()| key)
    }

    /// The version a write or read left, from its ETag and generation.
    fn version(&self, path: &Path, e_tag: Option<&str>, generation: Option<&str>) -> Result<Version> {
        let missing = |what: &str| {
            Error::store(&self.url, format!("reading the version of {path}"), format!("the store sent no {what}"))
        };
        match self.provider {
            // GCS conditions are on the generation, which grows with every write.
            Provider::Gcs => {
                let generation = generation.ok_or_else(|| missing("generation (x-goog-generation)"))?;
                Ok(Version { tag: generation.to_string(), seq: generation.parse().ok() })
            }
            Provider::S3 | Provider::Azure => {
                let etag = e_tag.ok_or_else(|| missing("ETag"))?;
                Ok(Version { tag: unquote(etag).to_string(), seq: None })
            }
        }
    }

    pub(crate) fn update_version(&self, v: &Version) -> UpdateVersion {
        match self.provider {
            Provider::Gcs => UpdateVersion { e_tag: None, version: Some(v.tag.clone()) },
            Provider::S3 | Provider::Azure => {
                let etag = if self.quoted_if_match() { format!("\"{}\"", v.tag) } else { v.tag.clone() };
                UpdateVersion { e_tag: Some(etag), version: None }
            }
        }
    }

    fn failed(&self, op: &str, key: &str, path: &Path, e: object_store::Error) -> Error {
        if let object_store::Error::NotImplemented { .. } = e {
            return Error::unsupported(
                &self.url,
                format!(
                    "{op} {key:?} ({path}) needs conditional writes, which this store's configuration disables ({e}); remove aws_conditional_put=disabled"
                ),
            );
        }
        self.fail(&format!("{op} {key:?} ({path})"), e)
    }

    /// One conditional PUT, counted.
    pub(crate) async fn put_object(
        &self,
        path: &Path,
        value: Bytes,
        mode: OsPutMode,
    ) -> std::result::Result<PutResult, object_store::Error> {
        match mode {
            OsPutMode::Update(_) => self.counts.put_update.fetch_add(1, Ordering::Relaxed),
            _ => self.counts.put_create.fetch_add(1, Ordering::Relaxed),
        };
        // Readers must always see the current record, also through caches in front
        // of public buckets (docs/design/object-store-lock.md#preconditions).
        let attributes = Attributes::from_iter([(Attribute::CacheControl, "no-store")]);
        let opts = OsPutOptions { mode, attributes, ..OsPutOptions::default() };
        self.store.put_opts(path, PutPayload::from(value), opts).await
    }

    /// One GET (conditional on `if_none_match` when given), counted; the body is
    /// read in full, up to a record's size.
    pub(crate) async fn get_object(
        &self,
        path: &Path,
        if_none_match: Option<String>,
    ) -> std::result::Result<(object_store::ObjectMeta, Option<Bytes>), object_store::Error> {
        self.read_capped(path, if_none_match, MAX_RECORD_BYTES).await
    }

    /// One GET of any object of this store (not only a lease record), counted,
    /// whose body is read only while it stays within `cap` bytes: `None` past
    /// that (the object's size then says how large it claims to be), so that
    /// an object tenure did not write is never read whole, whatever its
    /// metadata says.
    ///
    /// # Errors
    /// The store's error ([`ObjectBackend::error`] words it for users).
    pub async fn read_object(
        &self,
        path: &Path,
        cap: usize,
    ) -> std::result::Result<(object_store::ObjectMeta, Option<Bytes>), object_store::Error> {
        self.read_capped(path, None, cap).await
    }

    /// One create-if-absent PUT of any object of this store, counted:
    /// `Ok(false)` if the name was taken.
    ///
    /// # Errors
    /// The store's error ([`ObjectBackend::error`] words it for users).
    pub async fn create_object(&self, path: &Path, value: Bytes) -> std::result::Result<bool, object_store::Error> {
        match self.put_object(path, value, OsPutMode::Create).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// A failed request `op` as the user should read it (with the hint a
    /// missing credential needs).
    pub fn error(&self, op: impl Into<String>, e: object_store::Error) -> Error {
        self.fail(&op.into(), e)
    }

    async fn read_capped(
        &self,
        path: &Path,
        if_none_match: Option<String>,
        cap: usize,
    ) -> std::result::Result<(object_store::ObjectMeta, Option<Bytes>), object_store::Error> {
        self.counts.get.fetch_add(1, Ordering::Relaxed);
        let result = self.store.get_opts(path, GetOptions { if_none_match, ..GetOptions::default() }).await;
        if let Err(object_store::Error::NotModified { .. }) = &result {
            self.counts.get_not_modified.fetch_add(1, Ordering::Relaxed);
        }
        let result = result?;
        let meta = result.meta.clone();
        // A record is small; an object at a lease key that is not (another
        // tenant's, or hostile) is never read whole: past the cap, the body is
        // dropped and the caller sees it as too large.
        if meta.size > cap as u64 {
            return Ok((meta, None));
        }
        let mut body = Vec::new();
        let mut stream = result.into_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            if body.len().saturating_add(chunk.len()) > cap {
                return Ok((meta, None));
            }
            body.extend_from_slice(&chunk);
        }
        Ok((meta, Some(Bytes::from(body))))
    }

    /// The objects under `under`, listed (counted as one request), or `None`
    /// past `cap` of them: the listing stops there.
    pub(crate) async fn list_capped(
        &self,
        under: &Path,
        cap: usize,
    ) -> std::result::Result<Option<Vec<object_store::ObjectMeta>>, object_store::Error> {
        self.counts.list.fetch_add(1, Ordering::Relaxed);
        let mut listing = self.store.list(Some(under));
        let mut metas = Vec::new();
        while let Some(meta) = listing.next().await {
            if metas.len() >= cap {
                return Ok(None);
            }
            metas.push(meta?);
        }
        Ok(Some(metas))
    }

    /// One unconditional DELETE, counted.
    pub(crate) async fn delete_object(&self, path: &Path) -> std::result::Result<(), object_store::Error> {
        self.counts.delete.fetch_add(1, Ordering::Relaxed);
        self.store.delete(path).await
    }

    fn remember(&self, key: &str, entry: Cached) {
        let mut cache = self.cache.lock();
        if cache.len() >= CACHE_LIMIT && !cache.contains_key(key) {
            cache.clear();
        }
        cache.insert(key.to_string(), entry);
    }

    pub(crate) fn version_of_put(&self, path: &Path, r: &PutResult) -> Result<Version> {
        self.version(path, r.e_tag.as_deref(), r.version.as_deref())
    }

    pub(crate) fn version_of_get(&self, meta: &object_store::ObjectMeta) -> Result<Version> {
        self.version(&meta.location, meta.e_tag.as_deref(), meta.version.as_deref())
    }
}

/// The wait line's requests are the backend's own.
impl Objects for ObjectBackend {
    fn url(&self) -> &str {
        &self.url
    }

    fn child<'a>(&self, parts: impl IntoIterator<Item = &'a str>) -> Result<Path> {
        ObjectBackend::child(self, parts)
    }

    fn list_capped(
        &self,
        under: &Path,
        cap: usize,
    ) -> impl Future<Output = std::result::Result<Option<Vec<object_store::ObjectMeta>>, object_store::Error>> + Send
    {
        ObjectBackend::list_capped(self, under, cap)
    }

    fn put_object(
        &self,
        path: &Path,
        value: Bytes,
        mode: OsPutMode,
    ) -> impl Future<Output = std::result::Result<PutResult, object_store::Error>> + Send {
        ObjectBackend::put_object(self, path, value, mode)
    }

    fn delete_object(&self, path: &Path) -> impl Future<Output = std::result::Result<(), object_store::Error>> + Send {
        ObjectBackend::delete_object(self, path)
    }

    fn update_version(&self, v: &Version) -> UpdateVersion {
        ObjectBackend::update_version(self, v)
    }

    fn version_of_put(&self, path: &Path, r: &PutResult) -> Result<Version> {
        ObjectBackend::version_of_put(self, path, r)
    }

    fn version_of_get(&self, meta: &object_store::ObjectMeta) -> Result<Version> {
        ObjectBackend::version_of_get(self, meta)
    }

    fn error(&self, op: impl Into<String>, e: object_store::Error) -> Error {
        ObjectBackend::error(self, op, e)
    }
}

#[async_trait]
impl Backend for ObjectBackend {
    fn url(&self) -> &str {
        &self.url
    }

    /// One GET. When this backend has read or written the key before, the GET
    /// carries `If-None-Match` with that ETag: an unchanged record then costs a
    /// `304` with no body, and the remembered value is returned.
    async fn get(&self, key: &Key) -> Result<Option<Stored>> {
        let path = self.path_of(key)?;
        let key = key.as_str();
        let cached = if self.uses_conditional_get() { self.cache.lock().get(key).cloned() } else { None };
        match self.get_object(&path, cached.as_ref().map(|c| c.etag.clone())).await {
            Ok((meta, value)) => {
                let mut stored = Stored::new(Bytes::new(), self.version_of_get(&meta)?, modified_ms(&meta));
                match value {
                    Some(value) => stored.value = value,
                    None => {
                        stored.foreign = Some(format!(
                            "{path} is an object of {} bytes, larger than a record's {MAX_RECORD_BYTES}",
                            meta.size
                        ));
                        return Ok(Some(stored));
                    }
                }
                if let Some(etag) = meta.e_tag.filter(|_| self.uses_conditional_get()) {
                    self.remember(key, Cached { etag, stored: stored.clone() });
                }
                Ok(Some(stored))
            }
            Err(object_store::Error::NotModified { .. }) => match cached {
                Some(c) => Ok(Some(c.stored)),
                None => Err(Error::store(
                    &self.url,
                    format!("reading {key:?} ({path})"),
                    "the store answered 304 Not Modified to a GET that had no condition",
                )),
            },
            // A missing bucket answers 404 too: that is no absent record.
            Err(e @ object_store::Error::NotFound { .. })
                if !matches!(explain::problem(&e), Some(Problem::NoBucket { .. })) =>
            {
                self.cache.lock().remove(key);
                Ok(None)
            }
            Err(e) => Err(self.failed("reading", key, &path, e)),
        }
    }

    /// One PUT: `If-None-Match: *` (GCS: `x-goog-if-generation-match: 0`) to
    /// create, `If-Match: <etag>` (GCS: `x-goog-if-generation-match: <generation>`)
    /// to replace. A failed condition (412; Azurite's 409; S3's 404 for a missing
    /// key) is [`Put::Conflict`].
    async fn put(&self, key: &Key, value: Bytes, opts: PutOptions) -> Result<Put> {
        let path = self.path_of(key)?;
        let key = key.as_str();
        let mode = match &opts.mode {
            PutMode::Create => OsPutMode::Create,
            PutMode::Update(v) => OsPutMode::Update(self.update_version(v)),
        };
        let outcome = self.put_object(&path, value.clone(), mode).await;
        // A failed condition changed nothing: what we last saw stays valid for a
        // conditional GET. Any other outcome changes or clouds it.
        if !matches!(outcome, Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }))
        {
            self.cache.lock().remove(key);
        }
        match outcome {
            Ok(r) => {
                let version = self.version_of_put(&path, &r)?;
                // What we wrote is what the next read will most likely find: remember
                // it, so that read costs a 304 rather than the body. (The write's
                // answer has no modification time.)
                if let Some(etag) = r.e_tag.filter(|_| self.uses_conditional_get()) {
                    let stored = Stored::new(value, version.clone(), None);
                    self.remember(key, Cached { etag, stored });
                }
                Ok(Put::Done(version))
            }
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => {
                Ok(Put::Conflict)
            }
            Err(e) => Err(self.failed("writing", key, &path, e)),
        }
    }

    /// An object per waiter, polled (see the crate docs and `src/line.rs`).
    fn line(
        self: Arc<Self>,
        clock: &Arc<dyn tenure_core::Clock>,
        max_skew: std::time::Duration,
    ) -> Option<Arc<dyn tenure_core::backend::Line>> {
        Some(Arc::new(crate::line::ObjectLine::new(self, clock.clone(), max_skew)))
    }

    /// One LIST request per 1000 objects under `<prefix>/<prefix argument>/`
    /// (the whole store prefix for `""`); objects that are not tenure's are
    /// skipped.
    async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let under = if prefix.is_empty() {
            self.prefix.clone()
        } else {
            tenure_core::LeaseName::new(prefix)?;
            self.child(prefix.split('/'))?
        };
        self.counts.list.fetch_add(1, Ordering::Relaxed);
        let metas: Vec<object_store::ObjectMeta> = self
            .store
            .list(Some(&under))
            .try_collect()
            .await
            .map_err(|e| self.fail(&format!("listing leases under {under}"), e))?;
        let mut keys: Vec<String> = metas.iter().filter_map(|m| self.key_of(&m.location)).collect();
        keys.sort();
        keys.dedup();
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::round_up_seconds;
    use object_store::memory::InMemory;

    fn backend(prefix: &str) -> ObjectBackend {
        ObjectBackend::new(Arc::new(InMemory::new()), Path::from(prefix), Provider::S3, "s3://test/p")
    }

    #[test]
    fn keys_map_to_one_object_each_and_back() {
        let b = backend("ci/locks");
        for (key, object) in [
            ("deploy", "ci/locks/deploy/~lease"),
            ("deploy/prod", "ci/locks/deploy/prod/~lease"),
            ("deploy/prod~fence", "ci/locks/deploy/prod/~fence"),
            ("a@b:c,d=e+f", "ci/locks/a@b:c,d=e+f/~lease"),
        ] {
            let path = b.object_path(key).expect("valid key");
            assert_eq!(path.as_ref(), object);
            assert_eq!(b.key_of(&path).as_deref(), Some(key));
        }
    }

    #[test]
    fn objects_that_are_not_tenures_are_not_keys() {
        let b = backend("ci/locks");
        for foreign in ["ci/locks/deploy", "ci/locks/deploy/state.json", "ci/locks/~probe-1234", "other/x/~lease"] {
            let path = Path::parse(foreign).expect("path");
            assert_eq!(b.key_of(&path), None, "{foreign}");
        }
    }

    #[test]
    fn bad_keys_are_refused_with_the_rule() {
        let b = backend("");
        for bad in ["", "../x", "a//b", "x~lease", "x~line", "x~a~b", ".hidden"] {
            assert!(matches!(b.object_path(bad), Err(Error::InvalidName { .. })), "{bad}");
        }
        assert_eq!(b.object_path("x").expect("valid").as_ref(), "x/~lease");
    }

    #[test]
    fn etags_lose_their_quotes_and_gcs_versions_are_generations() {
        let s3 = backend("p");
        let path = Path::parse("p/x/~lease").expect("path");
        let v = s3.version(&path, Some("\"abc\""), Some("v1")).expect("etag");
        assert_eq!(v, Version { tag: "abc".into(), seq: None });
        assert_eq!(s3.update_version(&v), UpdateVersion { e_tag: Some("abc".into()), version: None });
        let gcs = ObjectBackend::new(Arc::new(InMemory::new()), Path::from("p"), Provider::Gcs, "gs://b/p");
        let v = gcs.version(&path, Some("\"e\""), Some("1700000000123456")).expect("generation");
        assert_eq!(v, Version { tag: "1700000000123456".into(), seq: Some(1_700_000_000_123_456) });
        assert_eq!(gcs.update_version(&v), UpdateVersion { e_tag: None, version: Some("1700000000123456".into()) });
        assert!(matches!(gcs.version(&path, Some("\"e\""), None), Err(Error::Store { .. })));
    }

    #[test]
    fn second_resolution_dates_are_rounded_up() {
        assert_eq!(round_up_seconds(1_700_000_000_000), Some(1_700_000_000_999));
        assert_eq!(round_up_seconds(1_700_000_000_123), Some(1_700_000_000_123));
        assert_eq!(round_up_seconds(0), None);
    }
}
