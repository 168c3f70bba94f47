//! tenure leases in a directory, local or on NFS: `file:///dir` or a plain path.
//!
//! [`open`] gives the lease store a directory URL names; [`FileBackend`] is its
//! versioned register (a file per version, compare-and-swap by `link(2)`), for
//! those who compose their own [`tenure_core::cas::CasStore`]. A lease's waiters
//! line up in files beside it and are woken by inotify on a local file system.
//!
//! [`fs`] holds the NFS-safe directory and file operations the store is built
//! on (no `rename`, no locks, nothing followed that tenure did not make), which
//! tenure's bags share, and [`offload`] the blocking-thread hand-off with a
//! deadline that keeps a hung mount from hanging the caller.

// One unsafe call, allowed where it is: registering the inotify descriptor
// with tokio (AsyncFd's safe constructors are deprecated as unsound).
#![deny(unsafe_code)]

pub mod fs;
mod mounts;
pub mod offload;
mod store;
mod url;

use std::sync::Arc;

use tenure_core::{Backend, CasStore, LeaseStore, OpenOptions, Result, StoreUrl};

pub use store::{FileBackend, KEEP};
pub use url::{DirUrl, missing_root};

/// Opens the directory store `url` names (`file:///dir?…` or a plain path);
/// `opts.params` go over the URL's settings (see [`DirUrl`]), and
/// `opts.create` lets the first write create the directory unless the caller
/// only reads.
///
/// # Errors
/// [`tenure_core::Error::InvalidStore`] for another scheme, an unknown or
/// malformed setting, or a directory on an NFS mount without close-to-open
/// consistency.
pub async fn open(url: &StoreUrl, opts: &OpenOptions) -> Result<Arc<dyn LeaseStore>> {
    let url = &url.with_params(&opts.params);
    let mut dir = DirUrl::from_url(url)?;
    dir.create |= opts.create && !opts.read_only;
    let backend: Arc<dyn Backend> = Arc::new(FileBackend::from_dir_url(&dir));
    Ok(Arc::new(CasStore::new(backend, opts.clock.clone(), opts.cas.clone())))
}
