//! Opening any store by URL, with the flags every command shares.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use tenure::{CasOptions, LeaseStore, OpenOptions, StoreUrl};

use crate::durations::duration;

/// The heading the store's options are listed under, after the command's own.
const STORE_OPTIONS: &str = "Store options";

/// A store's deadline for one operation when its `timeout` option is not given.
pub(crate) const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(10);

/// The store and how to talk to it.
#[derive(Debug, Args, Clone)]
pub(crate) struct StoreArgs {
    /// Where leases live: a directory or `file://` URL, `s3://`, `gs://`, `az://`,
    /// `tenure://host:port`, `etcd://host:port/prefix`, `memory://`.
    #[arg(value_name = "STORE")]
    pub(crate) url: String,

    /// Largest clock difference between machines sharing the store; takeover by
    /// wall-clock deadline waits this much longer.
    #[arg(long, value_parser = duration, default_value = "2s", env = "TENURE_MAX_SKEW", hide_env_values = true,
          value_name = "DURATION", help_heading = STORE_OPTIONS)]
    pub(crate) max_skew: Duration,

    /// Age after which an unreadable lease record may be replaced.
    #[arg(long, value_parser = duration, default_value = "60s", env = "TENURE_CORRUPT_TTL", hide_env_values = true,
          value_name = "DURATION", help_heading = STORE_OPTIONS)]
    pub(crate) corrupt_ttl: Duration,

    /// Store-specific setting, repeatable: `--store-opt aws_endpoint=http://…`.
    #[arg(long = "store-opt", value_name = "KEY=VALUE", value_parser = key_value, help_heading = STORE_OPTIONS)]
    pub(crate) store_opts: Vec<(String, String)>,

    /// Skip the check that the store really enforces conditional writes. Only for
    /// stores you know are safe: on one that ignores them, leases do not exclude.
    #[arg(long, help_heading = STORE_OPTIONS)]
    pub(crate) trust_store: bool,

    /// Create the store's directory (and its parents) if it does not exist.
    /// Without it, a directory store that is missing is refused (exit 64): a
    /// mount that is not there, or a typo, must not get leases of its own that
    /// exclude nobody. Other stores ignore it.
    #[arg(long, help_heading = STORE_OPTIONS)]
    pub(crate) create: bool,
}

pub(crate) fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
}

impl StoreArgs {
    pub(crate) fn open_options(&self) -> OpenOptions {
        let mut opts = OpenOptions::default()
            .with_cas(CasOptions::default().with_max_skew(self.max_skew).with_corrupt_ttl(self.corrupt_ttl));
        opts.params.extend(self.store_opts.iter().cloned());
        opts.trust_store = self.trust_store;
        opts.create = self.create;
        opts
    }

    /// The store's deadline for one operation: its `timeout` option
    /// (`--store-opt timeout=5s`, or `?timeout=5s` in the URL), read in the
    /// spelling every store reads it, else [`DEFAULT_OP_TIMEOUT`]. Every store
    /// takes this one key (a `tenure://` server, etcd, object stores, a
    /// directory, `memory://`), enforces it and checks its range; the command
    /// bounds its own steps by it too, so that a store that ignores it cannot
    /// hang `tenure`. A value that does not parse is left to the store to
    /// refuse.
    pub(crate) fn op_timeout(&self) -> Duration {
        let url = StoreUrl::parse(&self.url, &self.open_options().params);
        url.ok()
            .and_then(|u| u.duration("timeout", Duration::ZERO..=Duration::MAX).ok().flatten())
            .unwrap_or(DEFAULT_OP_TIMEOUT)
    }

    /// Opens the store (its errors name it already).
    pub(crate) async fn open(&self) -> Result<Arc<dyn LeaseStore>> {
        Ok(tenure::open(&self.url, &self.open_options()).await?)
    }

    /// Opens the store for reading only: nothing is written, not even a probe.
    pub(crate) async fn open_read_only(&self) -> Result<Arc<dyn LeaseStore>> {
        Ok(tenure::open(&self.url, &self.open_options().read_only()).await?)
    }
}
