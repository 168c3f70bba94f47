//! tenure leases and fencing tokens on S3, GCS and Azure Blob, through
//! `object_store` — no server of your own.
//!
//! ```no_run
//! # async fn demo() -> tenure_core::Result<()> {
//! let opts = tenure_core::OpenOptions::default()
//!     .with_param("aws_region", "eu-west-1"); // or AWS_REGION in the environment
//! let store = tenure_object::open(&"s3://my-bucket/locks".parse()?, &opts).await?;
//! let lease = tenure_core::Client::new(store).try_acquire("deploy/prod", &tenure_core::LeaseOptions::default()).await?;
//! # Ok(()) }
//! ```
//!
//! # Store URLs and configuration
//!
//! `s3://bucket/prefix` (also `s3a://`), `gs://bucket/prefix` (also `gcs://`),
//! `az://container/prefix` (also `azure://`, `adl://`,
//! `abfs[s]://container@account.dfs.core.windows.net/prefix`). Credentials,
//! endpoint and region come from the usual environment variables (`AWS_*`,
//! `GOOGLE_*`, `AZURE_*`), the URL's query and [`tenure_core::OpenOptions::params`]
//! (`--store-opt key=value`), as `object_store` config keys; see
//! [`object_store_from_url`]. For an S3-compatible server on plain HTTP:
//! `aws_endpoint=http://host:port`, `aws_allow_http=true`, `aws_region`,
//! `aws_access_key_id`, `aws_secret_access_key`. For Azurite:
//! `azure_storage_use_emulator=true`.
//!
//! With the `aws-profiles` feature (off by default here, on in the CLI), S3
//! also takes credentials and region from the AWS shared config and
//! credentials files (`profile=NAME`, `AWS_PROFILE`), as the AWS SDKs do. On
//! AWS itself (no `aws_endpoint`) a store without a region is refused,
//! naming where it was looked for, rather than sent to `us-east-1`.
//!
//! # Errors the store answers
//!
//! A missing bucket or container, a wrong region, denied access and refused
//! credentials are each one line naming the bucket and what to do
//! ([`tenure_core::Error::InvalidStore`] for the first two, a
//! non-transient [`tenure_core::Error::Store`] for the others); the store's
//! XML or JSON is never shown, only its error code (see `src/explain.rs`).
//! A read of a lease in a bucket that does not exist is that error, never
//! "no such lease".
//!
//! # Layout
//!
//! A backend key (a lease name, optionally with a `~suffix`) is a "directory"
//! under the prefix, and its value is one object in it whose name starts with
//! `~`, which no lease-name segment can:
//!
//! ```text
//! <prefix>/deploy/prod/~lease     the record of lease "deploy/prod" (JSON)
//! <prefix>/deploy/prod/~fence     tenure_core::FencedRecord "deploy/prod"
//! <prefix>/deploy/prod/~line/…    its waiters, an object each (see the `line` module)
//! <prefix>/~probe-9f2c4e1ab3d07c55 a probe object (deleted after the probe)
//! ```
//!
//! Other objects under the prefix are never read, written or listed as leases, so
//! data may share the prefix; but listing leases (`tenure status`) pages through
//! every object under it, so bulk data is better kept elsewhere. Lease records are
//! never deleted (release marks the record released, keeping the token counter):
//! do not delete them by hand or with a lifecycle rule, or the tokens of that name
//! restart from 1 (on GCS they do not: tokens are floored on the generation; and
//! a handle never grants below a token it has seen for the name).
//!
//! # Operations
//!
//! | operation | requests |
//! |---|---|
//! | read | GET; on S3 and Azure `If-None-Match: <ETag>` when this handle has read the key before, so an unchanged record costs a body-less 304 |
//! | create | PUT `If-None-Match: *` (GCS `x-goog-if-generation-match: 0`) |
//! | replace | PUT `If-Match: <ETag>` (GCS `x-goog-if-generation-match: <generation>`) |
//! | list | LIST under the prefix, 1 request per 1000 objects |
//!
//! A failed condition (412, Azurite's 409, S3's 404 for a replaced key that is
//! gone) is a conflict; everything else is [`tenure_core::Error::Store`] naming the
//! store, the key and the object. `object_store` retries 5xx answers and
//! connection errors (at most [`MAX_RETRIES`] times within [`RETRY_TIMEOUT`]). A
//! conditional PUT that landed although its answer was an error comes back as a
//! conflict on the retry; the lease logic then re-reads the record and finds its
//! own write there: a renewal succeeds on the re-read, an acquisition re-takes its
//! own grant with the next token, a release reports "not held". Safety never
//! depends on it.
//!
//! **Versions.** S3 and Azure: the ETag, kept without the quotes HTTP puts around
//! it, and sent unquoted in `If-Match` because Ceph RGW only matches that form
//! (the probe switches to quoted ETags on a store that only takes those; with
//! `--trust-store` nothing finds out). S3's ETag of a
//! plain PUT is the MD5 of the body, so `If-Match` compares contents: that is a
//! sound compare-and-swap here because no lease record ever repeats an earlier
//! one (tokens and renewal counts only grow). For the same reason a fencing token
//! must live in the body, never in object metadata, which S3's ETag ignores. GCS:
//! the generation, which grows with every write and also floors fencing tokens,
//! so they stay monotonic even past a corrupt record. S3 and Azure have no such
//! sequence: after a corrupt record tokens jump to the record's `Last-Modified`
//! in µs, the store's clock, never the replacing client's (and never below the
//! highest token that handle has seen for the name; see [`tenure_core::cas`]).
//!
//! **Times.** The record's modification time (`Last-Modified`, whole seconds,
//! rounded up here) only judges the age of an unreadable record and floors the
//! token that replaces it; grants are judged
//! by the clock discipline of [`tenure_core::cas`], never by the store's clock.
//!
//! # Requests per lease operation, against the simple GCS lock
//!
//! The simple GCS lock (gcslock with a TTL, see `docs/design/object-store-lock.md`:
//! create with `if-generation-match: 0`,
//! on conflict GET the metadata and DELETE a stale object, then retry) keeps no
//! record after release. tenure keeps one (it carries the token counter, the
//! watermark and the predecessor), so taking a free lease reads it first, unless
//! this handle wrote it last ([`tenure_core::cas`] then decides from its own copy and
//! lets the conditional write validate it):
//!
//! | lease operation | tenure | simple GCS lock |
//! |---|---|---|
//! | acquire a lease never used | 2: GET (404) + PUT `If-None-Match: *` | 1: PUT create |
//! | acquire a lease someone else released | 2: GET + PUT `If-Match` | 1: PUT create |
//! | acquire a lease this handle released | 1: PUT `If-Match` | 1: PUT create |
//! | poll a held lease | 1: GET (S3, Azure: a 304 without body while unchanged) | 2: PUT create (412) + GET |
//! | take over an expired lease | 2: GET + PUT `If-Match` | 4: PUT (412) + GET + DELETE + PUT |
//! | renew | 1: PUT `If-Match` (the holder knows its record) | 1: PATCH |
//! | release | 1: PUT `If-Match` (record kept, marked released) | 1: DELETE |
//! | open the store | 6 (the [`probe`]), skipped with `--trust-store` | 0 |
//!
//! On S3 and Azure, a GET of a record this handle has read or written before
//! carries `If-None-Match`, so an unchanged record costs a 304 without body (not
//! on GCS, see [`ObjectBackend::uses_conditional_get`]). A handle that wrote the
//! record last and finds it taken by someone else pays one rejected PUT before its
//! first read ([`tenure_core::cas`] tries its own copy first, then drops it); later
//! polls are one GET each. These counts are asserted against every server by
//! `tests/it/requests.rs`.
//!
//! A HEAD would not make polling cheaper: the contender needs the record whenever
//! it changed, so HEAD-then-GET costs two requests where a conditional GET costs
//! one, and S3, GCS and Azure bill HEAD like GET.
//!
//! # What object stores lack
//!
//! - **Watching**: none of them can notify a waiter, so waiters poll with capped,
//!   jittered backoff (25 ms up to 1 s): they wait in a line of objects (one per
//!   waiter, listed in order), the head of the line polling the lease with one
//!   GET per poll, the others the line with one LIST.
//! - **Conditional DELETE** in `object_store`: not needed. Lease records are
//!   never deleted; a waiter deletes its own entry in a line, or one that has
//!   not been written for longer than any live waiter leaves it.
//! - **Server-side expiry**: a dead holder's record stays until a contender takes
//!   it over; there is no TTL on objects.
//! - **Conditions at all**, on some S3 look-alikes: hence the [`probe`].
//! - **Multi-object delete** (`POST ?delete`), on some S3 look-alikes, which
//!   `object_store` uses even for one object: only the probe deletes (its probe
//!   object), so set `aws_disable_bulk_delete=true` there, or the probe object is
//!   left behind with a warning.
//!
//! # Fenced writes of your data
//!
//! [`tenure_core::FencedRecord`] works on this backend as it is: a value together with
//! the highest fencing token that wrote it, in one object
//! (`<prefix>/<name>/~fence`, body `tenure-fence/1 <token>\n<value>`) replaced by
//! `If-Match`, so a write with token `t` fails once a write with a higher token
//! has landed (2 requests: GET + PUT). The token has to be in the body: S3's ETag
//! ignores metadata, so a token kept in metadata could be overwritten by a stale
//! writer whose value happened to match.
//!
//! ```no_run
//! # async fn demo(lease: tenure_core::Lease) -> tenure_core::Result<()> {
//! let backend = tenure_object::open_backend(&"s3://my-bucket/locks".parse()?, &tenure_core::OpenOptions::default()).await?;
//! let state = tenure_core::FencedRecord::new(backend, "deploy/prod")?;
//! state.write(lease.token(), bytes::Bytes::from_static(b"{\"version\": 42}")).await?;
//! # Ok(()) }
//! ```
//!
//! # Tested against
//!
//! moto and Ceph RGW (S3), Azurite (Azure), `object_store`'s in-memory store;
//! s3rver and localbucket as stores the probe must refuse. GCS only with real
//! credentials: set `TENURE_TEST_GCS_BUCKET` and `GOOGLE_SERVICE_ACCOUNT` (a key
//! file) or `GOOGLE_SERVICE_ACCOUNT_KEY`; no emulator supports `object_store`'s
//! GCS preconditions. Not checked: AWS S3 and Azure themselves.

#![forbid(unsafe_code)]

mod backend;
mod config;
mod counts;
mod explain;
mod line;
mod ops;
mod probe;
#[cfg(feature = "aws-profiles")]
mod profile;

use std::sync::Arc;

use tenure_core::{CasStore, LeaseStore, OpenOptions, Result, StoreUrl};

pub use backend::{ObjectBackend, RECORD_OBJECT};
pub use config::{MAX_RETRIES, Provider, RETRY_TIMEOUT, object_store_from_url};
pub use counts::RequestCounts;
pub use line::LINE_DIR;
pub use object_store;
pub use probe::{Probe, probe};

/// Opens the lease store a URL names: a [`CasStore`] over [`open_backend`];
/// `opts.params` go over the URL's settings.
///
/// # Errors
/// See [`open_backend`].
pub async fn open(url: &StoreUrl, opts: &OpenOptions) -> Result<Arc<dyn LeaseStore>> {
    let backend = open_backend(url, opts).await?;
    Ok(Arc::new(CasStore::new(backend, opts.clock.clone(), opts.cas.clone())))
}

/// The [`ObjectBackend`] a URL names, for a program that needs the backend
/// itself (fenced records, its request counts): opened as [`open`] opens it,
/// with `opts.params` over the URL's settings, and, unless `opts.trust_store`
/// or `opts.read_only` (readers never write, not even a probe), the
/// conditional-write [`probe`] run on it. [`backend_from_url`] is the same
/// without the probe, and without sending anything.
///
/// # Errors
/// [`tenure_core::Error::InvalidStore`] for a bad URL or option;
/// [`tenure_core::Error::Unsupported`] if the store ignores conditional writes;
/// [`tenure_core::Error::Store`] if it cannot be reached.
pub async fn open_backend(url: &StoreUrl, opts: &OpenOptions) -> Result<Arc<ObjectBackend>> {
    let url = &url.with_params(&opts.params);
    let backend = Arc::new(backend_from_url(url)?);
    if !opts.trust_store && !opts.read_only {
        match probe(&backend).await? {
            Probe::Enforced { .. } => {}
            ro @ Probe::ReadOnly { .. } => {
                tracing::warn!(store = tenure_core::Backend::url(&*backend), "{ro}");
            }
        }
    }
    Ok(backend)
}

/// The [`ObjectBackend`] a parsed URL names, without the probe (nothing is
/// sent to the store): for programs that run [`probe`] themselves, when they
/// first write, or to see whether a store enforces conditional writes
/// whatever `--trust-store` says.
///
/// # Errors
/// [`tenure_core::Error::InvalidStore`] for a bad URL or option.
pub fn backend_from_url(url: &StoreUrl) -> Result<ObjectBackend> {
    Ok(config::build_url(url)?.backend())
}
