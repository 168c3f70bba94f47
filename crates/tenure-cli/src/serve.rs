//! `tenure serve` (being written).

use std::process::ExitCode;

use clap::Args;

/// `tenure serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {}

pub(crate) async fn run(_args: ServeArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("tenure serve is not implemented yet")
}
