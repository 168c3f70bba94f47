//! `tenure lock`: run a command while holding a lease.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use tenure::{Client, Holder, LeaseOptions, Mode};

use crate::args::duration;
use crate::stores::StoreArgs;

/// `tenure lock`.
#[derive(Debug, Args)]
pub(crate) struct LockArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// The lease name, e.g. `deploy/prod`.
    pub(crate) name: String,
    /// Lease duration: how long the lease outlives a `tenure` that died.
    #[arg(long, value_parser = duration, default_value = "30s")]
    pub(crate) ttl: Duration,
    /// Give up waiting after this long (exit 75).
    #[arg(long, value_parser = duration, conflicts_with = "no_wait")]
    pub(crate) timeout: Option<Duration>,
    /// Do not wait: exit 75 at once if the lease is held.
    #[arg(long)]
    pub(crate) no_wait: bool,
    /// Take a shared lease (many shared holders at once, no exclusive one).
    #[arg(long)]
    pub(crate) shared: bool,
    /// A label stored with the grant, shown to others (e.g. a CI job URL).
    #[arg(long)]
    pub(crate) label: Option<String>,
    /// A stable holder id: a restarted run with the same id re-takes its own
    /// abandoned lease at once instead of waiting for it to expire.
    #[arg(long, value_name = "ID")]
    pub(crate) holder_id: Option<String>,
    /// Time between SIGTERM and SIGKILL when the command must stop.
    #[arg(long, value_parser = duration, default_value = "5s")]
    pub(crate) kill_grace: Duration,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

pub(crate) async fn run(args: LockArgs) -> Result<ExitCode> {
    let store = args.store.open().await?;
    let mut holder = Holder::current();
    if let Some(label) = &args.label {
        holder = holder.with_label(label);
    }
    if let Some(id) = &args.holder_id {
        holder = holder.with_nonce(id);
    }
    let client = Client::with_holder(store, holder);
    let mut opts =
        LeaseOptions::default().with_mode(if args.shared { Mode::Shared } else { Mode::Exclusive }).with_ttl(args.ttl);
    opts.timeout = if args.no_wait { Some(Duration::ZERO) } else { args.timeout };
    let lease = client.acquire(&args.name, &opts).await?;
    let grant = lease.grant();
    let status = crate::supervise::run_under(&lease, &args).await.context("running the command")?;
    let lost = lease.health().is_lost();
    let released = lease.release().await;
    if let Err(e) = released {
        tracing::warn!(error = %e, "releasing the lease failed; it will expire after its ttl");
    }
    let _ = grant;
    Ok(if lost { crate::exit::code(crate::exit::LOST) } else { status })
}
