//! The conditional-write probe: does this store really enforce the conditions
//! leases rest on?
//!
//! Several S3 look-alikes accept `If-None-Match` and `If-Match` and silently
//! ignore them (Backblaze B2, some gateways and emulators: s3rver ignores both,
//! localbucket honours create but not replace). On such a store every contender
//! "wins" and leases exclude nobody, so tenure checks before first use, on a probe
//! object of its own, `<prefix>/~probe-<random>`:
//!
//! | step | request | a conforming store | otherwise |
//! |---|---|---|---|
//! | 1 | PUT `If-None-Match: *` (new object) | creates it | error |
//! | 2 | PUT `If-None-Match: *` again | 412/409: exists | **refuse**: ignores create-if-absent |
//! | 3 | GET `If-None-Match: "<never an ETag>"` | 200, the first body, its ETag | a false 304: conditional GETs are not used |
//! | 4 | PUT `If-Match: <that ETag>`, unquoted | replaces it | retry with the ETag quoted; if that is refused too, **refuse**: leases could never be renewed |
//! | 5 | PUT `If-Match: <that ETag>` again (now stale) | 412 | **refuse**: ignores `If-Match` |
//! | 6 | DELETE | deletes the probe object | logged, left behind |
//!
//! (GCS: generation match instead of ETags.) Six requests (seven on a store that
//! only takes quoted ETags), once per [`crate::open`];
//! [`tenure_core::OpenOptions::trust_store`] (`--trust-store`) skips them.
//!
//! The probe object is deleted unconditionally: `object_store` has no conditional
//! DELETE, and none is needed, since only this process ever writes that random
//! name. A process killed mid-probe leaves its `~probe-*` object behind; it is no
//! lease record (listing skips it) and may be deleted by hand.
//!
//! A store that refuses the probe's first write for lack of permission (403) but
//! lets it read (404 for the probe object) is not refused: read-only credentials
//! can still inspect leases (`tenure status`), and any attempt to take a lease
//! fails with the same 403. If the read is refused too, the credentials are wrong
//! (or lack list permission, which S3 needs to answer 404): that is an error.

use std::fmt;

use bytes::Bytes;
use object_store::PutMode;
use object_store::path::Path;
use tenure_core::{Error, Result};

use crate::backend::ObjectBackend;

/// What the probe established.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Probe {
    /// Create-if-absent and replace-if-match are both enforced.
    Enforced {
        /// Whether conditional GETs answer honestly (a 304 only for a matching ETag).
        conditional_get: bool,
        /// Whether `If-Match` needs the ETag in quotes (see
        /// [`ObjectBackend::with_quoted_if_match`]).
        quoted_if_match: bool,
    },
    /// These credentials may not write, so nothing was checked; leases cannot be
    /// taken with them either.
    ReadOnly {
        /// The store's answer.
        detail: String,
    },
}

impl fmt::Display for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Probe::Enforced { conditional_get, quoted_if_match } => {
                f.write_str("conditional writes are enforced (create-if-absent and replace-if-match checked)")?;
                if *quoted_if_match {
                    f.write_str("; If-Match takes quoted ETags")?;
                }
                if !conditional_get {
                    f.write_str("; conditional GETs are not used (the store answered 304 for a foreign ETag)")?;
                }
                Ok(())
            }
            Probe::ReadOnly { detail } => write!(f, "not checked: these credentials cannot write ({detail})"),
        }
    }
}

fn refuse(url: &str, why: &str) -> Error {
    Error::unsupported(
        url,
        format!(
            "this store does not enforce conditional writes: {why}. Leases on it would not exclude anyone, and two closers of a \
             bag could both publish its manifest, so tenure refuses to use it. \
             If you are certain the store is safe (for example the probe was misled by a proxy in between), pass --trust-store \
             (OpenOptions::trust_store) to skip this check"
        ),
    )
}

/// Checks that `backend`'s store enforces create-if-absent and replace-if-match,
/// on a probe object under its prefix that is deleted afterwards. Also decides
/// whether the backend may use conditional GETs.
///
/// # Errors
/// [`Error::Unsupported`] (saying which condition is ignored and how to override)
/// if the store ignores a condition; [`Error::Store`] if it cannot be reached.
pub async fn probe(backend: &ObjectBackend) -> Result<Probe> {
    let name = format!("~probe-{}", tenure_core::random_nonce());
    let path = backend.child([name.as_str()])?;
    let mut created = false;
    let outcome = run(backend, &path, &mut created).await;
    if created && let Err(e) = backend.delete_object(&path).await {
        tracing::warn!(store = backend_url(backend), object = %path, error = %e, "could not delete the probe object");
    }
    if let Ok(Probe::Enforced { conditional_get, .. }) = &outcome {
        backend.set_conditional_get(*conditional_get);
    }
    outcome
}

fn backend_url(backend: &ObjectBackend) -> &str {
    tenure_core::Backend::url(backend)
}

async fn run(backend: &ObjectBackend, path: &Path, created: &mut bool) -> Result<Probe> {
    let url = backend_url(backend);
    let failed = |step: &str, e: object_store::Error| {
        if let object_store::Error::NotImplemented { .. } = e {
            return Error::unsupported(
                url,
                format!(
                    "conditional writes are disabled in this store's configuration ({e}); remove aws_conditional_put=disabled"
                ),
            );
        }
        backend.fail(&format!("probing conditional writes: {step} {path}"), e)
    };
    let body = |n: u8| Bytes::from(format!("tenure conditional-write probe, write {n}\n"));

    match backend.put_object(path, body(1), PutMode::Create).await {
        Ok(_) => *created = true,
        Err(denied @ object_store::Error::PermissionDenied { .. }) => {
            // Read-only credentials, or wrong ones? Only the former may read.
            return match backend.get_object(path, None).await {
                Err(e @ object_store::Error::NotFound { .. }) if crate::explain::problem(&e).is_none() => {
                    Ok(Probe::ReadOnly { detail: crate::explain::sanitized(&denied) })
                }
                Ok(_) => Err(refuse(url, "a write was refused, yet the object it would have created exists")),
                Err(e) => Err(backend.fail(
                    &format!(
                        "probing conditional writes: creating and reading {path}, both refused (for read-only use without \
                         permission to list, pass --trust-store to skip the probe)"
                    ),
                    e,
                )),
            };
        }
        Err(e) => return Err(failed("creating", e)),
    }
    match backend.put_object(path, body(2), PutMode::Create).await {
        Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => {}
        Ok(_) => return Err(refuse(url, "a create-if-absent (If-None-Match: *) overwrote an existing object")),
        Err(e) => return Err(failed("creating again", e)),
    }
    // An ETag no store ever issues: the answer must be the body, never a 304.
    let (meta, read) = match backend.get_object(path, Some("\"tenure-probe-no-such-etag\"".into())).await {
        Ok(got) => (Some(got.0), Some(got.1)),
        Err(object_store::Error::NotModified { .. }) => (None, None),
        Err(e) => return Err(failed("reading", e)),
    };
    let conditional_get = meta.is_some();
    let (meta, read) = match (meta, read) {
        (Some(m), Some(r)) => (m, r),
        _ => backend.get_object(path, None).await.map_err(|e| failed("reading", e))?,
    };
    if read != Some(body(1)) {
        return Err(refuse(url, "the object read back is not the one first created"));
    }
    let seen = backend.version_of_get(&meta)?;
    let update = || PutMode::Update(backend.update_version(&seen));
    let mut replaced = backend.put_object(path, body(3), update()).await;
    if is_conflict(&replaced) && backend.provider() != crate::Provider::Gcs {
        // Some stores only match the ETag in one form: try the other one.
        backend.set_quoted_if_match(!backend.quoted_if_match());
        replaced = backend.put_object(path, body(3), update()).await;
        if is_conflict(&replaced) {
            backend.set_quoted_if_match(!backend.quoted_if_match());
        }
    }
    match replaced {
        Ok(_) => {}
        Err(object_store::Error::Precondition { .. } | object_store::Error::AlreadyExists { .. }) => {
            return Err(refuse(
                url,
                &format!(
                    "a replace conditional on the current version ({:?}, as just read; quoted and unquoted) was refused, so leases could never be renewed or released",
                    seen.tag
                ),
            ));
        }
        Err(e) => return Err(failed("replacing", e)),
    }
    match backend.put_object(path, body(4), update()).await {
        Err(object_store::Error::Precondition { .. } | object_store::Error::AlreadyExists { .. }) => {}
        Ok(_) => return Err(refuse(url, "a replace conditional on a stale ETag (If-Match) succeeded")),
        Err(e) => return Err(failed("replacing again", e)),
    }
    if !conditional_get {
        tracing::warn!(store = url, "the store answered 304 for an ETag it never issued; not using conditional GETs");
    }
    Ok(Probe::Enforced { conditional_get, quoted_if_match: backend.quoted_if_match() })
}

fn is_conflict<T>(r: &std::result::Result<T, object_store::Error>) -> bool {
    matches!(r, Err(object_store::Error::Precondition { .. } | object_store::Error::AlreadyExists { .. }))
}
