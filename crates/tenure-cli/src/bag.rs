//! `tenure bag` (being written).

use std::process::ExitCode;

use clap::Args;

/// `tenure bag`.
#[derive(Debug, Args)]
pub(crate) struct BagArgs {}

pub(crate) async fn run(_args: BagArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("tenure bag is not implemented yet")
}
