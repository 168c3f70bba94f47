//! A directory store's URL: `file:///dir?…` or a plain path, and its settings,
//! as the lease store and the bags both read them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tenure_core::limits::MAX_DURATION;
use tenure_core::{Error, Result, StoreUrl};

use crate::offload::DEFAULT_TIMEOUT;

/// The error for a write to a directory store (or a bag) whose root `path`
/// does not exist and may not be created: it names the directory and both ways
/// to create it.
pub fn missing_root(url: &str, path: &Path) -> Error {
    let shown = path.display().to_string();
    let plain = shown.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-+,:@%=".contains(&b));
    let quoted = if plain { shown.clone() } else { format!("'{}'", shown.replace('\'', "'\\''")) };
    // A symlink to nothing: say where it points.
    let why = match std::fs::read_link(path) {
        Ok(to) => format!("it is a symbolic link to {}, which does not exist", to.display()),
        Err(_) => "a file system that is not mounted, or a typo?".to_string(),
    };
    Error::InvalidStore {
        url: url.into(),
        reason: format!(
            "the directory {shown} does not exist ({why}); tenure \
             creates it only when asked, so that a missing mount never grants leases that exclude nobody: \
             create it with `mkdir -p {quoted}`, or pass --create (`?create=true` in a URL)"
        ),
    }
}

/// A directory store's URL (`file:///dir?…` or a plain path) and its settings,
/// as the lease store and the bags both take them: `fsync=true|false` (default
/// true), `io=pool|inline` (default pool), `timeout=DURATION` (10 ms to 10
/// years, default 10 s), `create=true|false` (default false: a directory that
/// does not exist is an error, not created). Settings given apart from the URL override the query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirUrl {
    /// The directory.
    pub path: PathBuf,
    /// Whether to fsync files and directories.
    pub fsync: bool,
    /// Whether to run file operations on the calling task (no deadline).
    pub inline: bool,
    /// The deadline of one file-system operation.
    pub timeout: Duration,
    /// Whether the first write may create the directory if it does not exist.
    pub create: bool,
}

impl DirUrl {
    /// Parses `url` with `params` (see [`DirUrl::from_url`]).
    ///
    /// # Errors
    /// As [`DirUrl::from_url`], and for a malformed URL.
    pub fn parse(url: &str, params: &BTreeMap<String, String>) -> Result<Self> {
        Self::from_url(&StoreUrl::parse(url, params)?)
    }

    /// The directory and settings of a parsed `file://` URL or plain path;
    /// refuses unknown settings, and a directory on an NFS mount without
    /// close-to-open consistency.
    ///
    /// # Errors
    /// [`Error::InvalidStore`] saying what is wrong.
    pub fn from_url(url: &StoreUrl) -> Result<Self> {
        if url.scheme() != "file" {
            return Err(url.invalid("expected a directory: a path or file:///dir"));
        }
        if !url.hosts().is_empty() || url.user().is_some() {
            return Err(url.invalid("a file:// URL names no host: write file:///var/lib/locks"));
        }
        if url.path().as_os_str().is_empty() {
            return Err(url.invalid("the directory is empty"));
        }
        let inline = match url.string("io") {
            None | Some("pool") => false,
            Some("inline") => true,
            Some(v) => return Err(url.invalid(format!("io={v:?} is not one of pool, inline"))),
        };
        let d = DirUrl {
            path: url.path().to_path_buf(),
            fsync: url.flag("fsync")?.unwrap_or(true),
            inline,
            timeout: url.duration("timeout", Duration::from_millis(10)..=MAX_DURATION)?.unwrap_or(DEFAULT_TIMEOUT),
            create: url.flag("create")?.unwrap_or(false),
        };
        url.finish()?;
        check_mount(url.display(), &d.path)?;
        Ok(d)
    }
}

/// Refuses a store on an NFS mount without close-to-open consistency, and
/// warns about a soft mount (see [`crate::mounts`]).
fn check_mount(url: &str, path: &Path) -> Result<()> {
    let Some(mount) = crate::mounts::mount_of(path) else { return Ok(()) };
    if !mount.is_nfs() {
        return Ok(());
    }
    if mount.has("nocto") {
        return Err(Error::InvalidStore {
            url: url.into(),
            reason: format!(
                "{} is an NFS mount with `nocto`: without close-to-open consistency a client may read stale                  versions of a lease; remount it without nocto",
                mount.point.display()
            ),
        });
    }
    if mount.has("soft") {
        tracing::warn!(
            mount = %mount.point.display(),
            "the store is on a soft NFS mount: a slow server turns into I/O errors (renewals fail, the lease may be lost);              a hard mount is recommended"
        );
    }
    Ok(())
}
