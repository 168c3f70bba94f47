//! tenure: leases with fencing tokens over storage you already have.
//!
//! A [`Client`] acquires [`Lease`]s from a [`LeaseStore`], which [`open`] makes
//! from a URL: a directory (a plain path or `file://`), an object store
//! (`s3://`, `gs://`, `az://`), the tenure lease server (`tenure://`), etcd
//! (`etcd://`) or `memory://`. Each grant carries a fencing token that grows
//! strictly per lease name; a held lease keeps itself alive and reports its
//! [`Health`] (Held → AtRisk → Lost).
//!
//! ```no_run
//! # async fn demo() -> tenure::Result<()> {
//! use std::time::Duration;
//! use tenure::{Client, LeaseOptions, OpenOptions};
//!
//! let client = Client::new(tenure::open("/var/lib/locks", &OpenOptions::default()).await?);
//! let opts = LeaseOptions::exclusive().with_ttl(Duration::from_secs(30)).with_timeout(Duration::from_secs(60));
//! let lease = client.acquire("deploy/prod", &opts).await?;
//! tokio::select! {
//!     reason = lease.lost() => eprintln!("lost the lease: {reason}"),
//!     () = async { /* work, writing with lease.token() as a fence */ } => {}
//! }
//! lease.release().await?;
//! # Ok(()) }
//! ```
//!
//! The root holds what a program that takes leases needs; the modules
//! ([`backend`], [`cas`], [`store`], [`record`], …) what a store's
//! implementer needs, re-exported from [`tenure_core`]; [`open`] is this
//! crate's own. The directory store is [`file`](mod@file) (`tenure-file`). Each remote
//! store is a cargo feature, all on by default: `object` (s3, gs, az), `client`
//! (`tenure://`), `etcd`; their crates are re-exported as `object`, `remote`
//! (the `tenure://` client) and `etcd` for what is particular to them. The
//! lease server itself is the `server` feature (off by default), re-exported
//! as `server`.

#![forbid(unsafe_code)]

use std::sync::Arc;

#[cfg(feature = "client")]
pub use tenure_client as remote;
// What a program that takes leases needs, at the root; what a store's
// implementer needs, in the modules below.
pub use tenure_core::{
    AcquireRequest, AllAttempt, Attempt, BoxError, BreakNote, Busy, CasOptions, Change, Client, Clock, EndedHow, Error,
    FINISH_GRACE, Fenced, FencedRecord, Grant, Health, Holder, HolderView, Holding, Lease, LeaseName, LeaseOptions,
    LeaseSet, LeaseState, LeaseStore, LossReason, MAX_NAME_LEN, MAX_SEGMENT_LEN, MAX_SEGMENTS, ManualClock, Mode, Mono,
    Once, OnceLease, OncePer, OpenOptions, Predecessor, ReleaseRequest, Released, Result, StoreUrl, SystemClock,
    Version,
};
/// The storage layer under the lease logic: [`backend::Backend`] and its
/// writes, for a store of your own (run it through [`cas::CasStore`]).
pub use tenure_core::{backend, cas, clock, limits, meter, once, record, report, slots, store, store_url, watch};
#[cfg(feature = "etcd")]
pub use tenure_etcd as etcd;
/// The directory store (`file:///dir` or a plain path).
pub use tenure_file as file;
#[cfg(feature = "object")]
pub use tenure_object as object;
#[cfg(feature = "server")]
pub use tenure_server as server;

/// The object-store schemes (`object` feature).
const OBJECT_SCHEMES: [&str; 9] = ["s3", "s3a", "gs", "gcs", "az", "azure", "abfs", "abfss", "adl"];

/// Opens the store `url` names, with `opts` (its `params` are the store's
/// settings; they override the URL's query, key by key). A URL without a
/// scheme is a directory. The URL is parsed once, by [`StoreUrl::parse`],
/// whose rules (percent-decoding, several hosts, what is refused) hold for
/// every store.
///
/// # Errors
/// [`Error::InvalidStore`] for a malformed URL, an unknown setting, or a
/// scheme this build does not include (saying which feature adds it); the
/// store's own errors when it cannot be reached or refuses.
pub async fn open(url: &str, opts: &OpenOptions) -> Result<Arc<dyn LeaseStore>> {
    open_url(&StoreUrl::parse(url, &opts.params)?, opts).await
}

/// [`open`] for a parsed URL; `opts.params` go over its settings.
///
/// # Errors
/// As [`open`].
pub async fn open_url(url: &StoreUrl, opts: &OpenOptions) -> Result<Arc<dyn LeaseStore>> {
    match url.scheme() {
        "file" => tenure_file::open(url, opts).await,
        "memory" => open_memory(url, opts),
        #[cfg(feature = "object")]
        s if OBJECT_SCHEMES.contains(&s) => tenure_object::open(url, opts).await,
        #[cfg(feature = "client")]
        "tenure" => tenure_client::open(url, opts).await,
        #[cfg(feature = "etcd")]
        "etcd" => tenure_etcd::open(url, opts).await,
        other => Err(url.invalid(unknown(other))),
    }
}

/// A `memory://[NAME]` store: a fresh one, or the one of that name in this
/// process.
fn open_memory(url: &StoreUrl, opts: &OpenOptions) -> Result<Arc<dyn LeaseStore>> {
    let backend = tenure_core::store::memory::open_url(&url.with_params(&opts.params))?;
    Ok(Arc::new(tenure_core::CasStore::new(backend, opts.clock.clone(), opts.cas.clone())))
}

/// Why `scheme` cannot be opened here: left out of this build, or unknown.
fn unknown(scheme: &str) -> String {
    let feature = match scheme {
        s if OBJECT_SCHEMES.contains(&s) => Some("object"),
        "tenure" => Some("client"),
        "etcd" => Some("etcd"),
        _ => None,
    };
    match feature {
        Some(f) => format!(
            "{scheme}:// stores are not in this build: enable tenure's `{f}` feature (on by default; \
             for the command, `cargo install --path crates/tenure-cli` builds every store)"
        ),
        None => format!("unknown store scheme {scheme:?} (known here: {})", schemes().join(", ")),
    }
}

/// The store URLs this build opens, as a user writes them.
pub fn schemes() -> Vec<&'static str> {
    let mut known = vec!["a directory path", "file://", "memory://"];
    if cfg!(feature = "object") {
        known.extend(["s3://", "gs://", "az://"]);
    }
    if cfg!(feature = "client") {
        known.push("tenure://");
    }
    if cfg!(feature = "etcd") {
        known.push("etcd://");
    }
    known
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(url: &str) -> String {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        match rt.block_on(open(url, &OpenOptions::default())) {
            Err(Error::InvalidStore { reason, .. }) => reason,
            Err(other) => panic!("{url}: expected InvalidStore, got {other}"),
            Ok(_) => panic!("{url}: opened"),
        }
    }

    #[test]
    fn directories_and_memory_open_and_unknown_schemes_name_the_known_ones() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        for url in [dir.path().to_string_lossy().into_owned(), "memory://".to_string()] {
            rt.block_on(open(&url, &OpenOptions::default())).unwrap_or_else(|e| panic!("{url}: {e}"));
        }
        let why = reason("ftp://host/locks");
        assert!(why.contains("unknown store scheme \"ftp\"") && why.contains("file://"), "{why}");
    }

    /// A URL of every store, `dir` for the directory; none is reached, since
    /// every test here is refused before that.
    fn every_store(dir: &str) -> [String; 7] {
        [
            dir,
            "memory://",
            "s3://bucket/locks",
            "gs://bucket/locks",
            "az://container/locks",
            "tenure://127.0.0.1:1",
            "etcd://127.0.0.1:1/locks",
        ]
        .map(String::from)
    }

    #[cfg(all(feature = "object", feature = "client", feature = "etcd"))]
    #[test]
    fn every_store_refuses_an_unknown_option_in_the_same_words_without_its_value() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        for url in every_store(&dir.path().to_string_lossy()) {
            let opts = OpenOptions::default().with_param("bogus_key", "s3cret-value");
            let reason = match rt.block_on(open(&url, &opts)) {
                Err(Error::InvalidStore { reason, .. }) => reason,
                Err(other) => panic!("{url}: expected InvalidStore, got {other}"),
                Ok(_) => panic!("{url}: opened with an unknown option"),
            };
            assert!(reason.contains("unknown option \"bogus_key\" (known: "), "{url}: {reason}");
            assert!(!reason.contains("s3cret"), "{url}: the value shows: {reason}");
        }
    }

    #[cfg(all(feature = "object", feature = "client", feature = "etcd"))]
    #[test]
    fn every_store_reads_its_query_by_the_same_rules() {
        let dir = tempfile::tempdir().expect("tempdir");
        for url in every_store(&format!("file://{}", dir.path().display())) {
            // Percent-decoded before the store sees the key.
            let why = reason(&format!("{url}?bogus%5Fkey=s3cret"));
            assert!(why.contains("unknown option \"bogus_key\""), "{url}: {why}");
            let why = reason(&format!("{url}?bogus_key"));
            assert!(why.contains("setting 1 of the query is not KEY=VALUE"), "{url}: {why}");
            let why = reason(&format!("{url}#frag"));
            assert!(why.contains("fragment"), "{url}: {why}");
        }
    }

    #[cfg(all(feature = "object", feature = "client", feature = "etcd"))]
    #[test]
    fn options_given_to_open_url_are_never_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        for text in every_store(&dir.path().to_string_lossy()) {
            // Parsed without the options, opened with them: they still count.
            let url = StoreUrl::parse(&text, &Default::default()).expect("parses");
            let opts = OpenOptions::default().with_param("bogus_key", "x");
            match rt.block_on(open_url(&url, &opts)) {
                Err(Error::InvalidStore { reason, .. }) => {
                    assert!(reason.contains("\"bogus_key\""), "{text}: {reason}")
                }
                Err(other) => panic!("{text}: expected InvalidStore, got {other}"),
                Ok(_) => panic!("{text}: opened with an unknown option"),
            }
        }
    }

    #[cfg(feature = "client")]
    #[test]
    fn a_token_file_that_never_ends_is_refused_at_once() {
        for path in ["/dev/zero", "/"] {
            let why = reason(&format!("tenure://127.0.0.1:1?auth_token_file={path}"));
            assert!(why.contains("auth_token_file=") && why.contains("not a regular file"), "{why}");
        }
    }

    #[cfg(not(feature = "etcd"))]
    #[test]
    fn a_store_left_out_of_the_build_names_its_feature() {
        let why = reason("etcd://127.0.0.1:2379/locks");
        assert!(why.contains("`etcd` feature"), "{why}");
    }
}
