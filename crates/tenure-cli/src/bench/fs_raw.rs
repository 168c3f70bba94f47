//! The file-system anchor: the classic lock file, `link(2)` of a prepared file to
//! the lock name, then `unlink(2)` of it: the cheapest possible acquire+release
//! on a directory. Optionally with an `fsync` of the directory after each call,
//! which is what a durable lock needs.

use std::fs::{self, File};
use std::path::PathBuf;

use anyhow::{Context, Result};
use async_trait::async_trait;

use super::Target;

pub(crate) struct RawFs {
    dir: PathBuf,
    fsync: bool,
    /// On the calling task, like the file store's `io=inline`; else one hop to the
    /// blocking pool, like its default.
    inline: bool,
}

impl RawFs {
    pub(crate) fn new(dir: &str, fsync: bool, inline: bool) -> Result<Self> {
        let dir = PathBuf::from(dir).join(format!(".bench-raw-{}", tenure_core::random_nonce()));
        Ok(Self { dir, fsync, inline })
    }

    fn pair(&self, w: usize) -> Result<()> {
        let (tmp, lock) = self.paths(w);
        fs::hard_link(&tmp, &lock)?;
        if self.fsync {
            File::open(&self.dir)?.sync_all()?;
        }
        fs::remove_file(&lock)?;
        if self.fsync {
            File::open(&self.dir)?.sync_all()?;
        }
        Ok(())
    }

    fn paths(&self, w: usize) -> (PathBuf, PathBuf) {
        (self.dir.join(format!("w{w}.tmp")), self.dir.join(format!("w{w}.lock")))
    }
}

#[async_trait]
impl Target for RawFs {
    fn label(&self) -> String {
        let fsync = if self.fsync { "+fsync(dir)" } else { "" };
        format!("raw link+unlink{fsync}{} (anchor)", if self.inline { "" } else { " via the pool" })
    }

    fn is_anchor(&self) -> bool {
        true
    }

    async fn setup(&self, w: usize) -> Result<()> {
        // Created here, not in `new`: each client count runs setup … teardown,
        // and teardown removes the directory.
        fs::create_dir_all(&self.dir).with_context(|| format!("creating {}", self.dir.display()))?;
        let tmp = self.paths(w).0;
        fs::write(&tmp, b"holder").with_context(|| format!("writing {}", tmp.display()))?;
        Ok(())
    }

    async fn op(&self, w: usize) -> Result<()> {
        if self.inline {
            return self.pair(w);
        }
        let this = Self { dir: self.dir.clone(), fsync: self.fsync, inline: false };
        tokio::task::spawn_blocking(move || this.pair(w)).await?
    }

    async fn teardown(&self) -> Result<()> {
        fs::remove_dir_all(&self.dir).ok();
        Ok(())
    }
}
