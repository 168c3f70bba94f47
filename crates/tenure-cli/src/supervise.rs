//! Running the command under the lease.

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use tenure::Lease;

use crate::lock::LockArgs;

/// Arguments of the hidden guard process.
#[derive(Debug, Args)]
pub(crate) struct GuardArgs {
    /// The command.
    #[arg(last = true)]
    pub(crate) command: Vec<std::ffi::OsString>,
}

/// Runs the command with the lease's environment and waits for it.
pub(crate) async fn run_under(lease: &Lease, args: &LockArgs) -> Result<ExitCode> {
    let grant = lease.grant();
    let (program, rest) = args.command.split_first().context("no command")?;
    let mut child = tokio::process::Command::new(program)
        .args(rest)
        .env("TENURE_LEASE", grant.name.as_str())
        .env("TENURE_TOKEN", grant.token.to_string())
        .env("TENURE_DEADLINE", grant.deadline_ms.to_string())
        .spawn()
        .with_context(|| format!("starting {program:?}"))?;
    let status = child.wait().await?;
    Ok(ExitCode::from(status.code().unwrap_or(1).clamp(0, 255) as u8))
}

pub(crate) fn guard_main(_args: &GuardArgs) -> ExitCode {
    ExitCode::from(crate::exit::INTERNAL)
}
