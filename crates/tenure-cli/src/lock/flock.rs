//! flock(1)'s habits on `tenure lock`: its short flags (`-w`, `-n`, `-s`,
//! `-x`, `-E`, `-c`) mean what they mean to flock, and its flags that have no
//! sense for a lease (`-u`, `-o`, `-F`, `--fcntl`) are refused naming what
//! tenure does instead, rather than being taken for the command.
//!
//! The flags that are synonyms of tenure's own (`-w`/`--wait` for
//! `--timeout`, `-n`/`--nonblock`/`--nb` for `--no-wait`, `-s` for
//! `--shared`) are declared on [`LockArgs`] itself; the rest live here.

use std::ffi::OsString;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use super::LockArgs;
use crate::exit::{self, Fail};

/// The flags of `tenure lock` that come from flock(1).
#[derive(Debug, Args)]
pub(crate) struct FlockArgs {
    /// Take an exclusive lease: the default, accepted as flock(1) accepts it.
    #[arg(short = 'x', short_alias = 'e', long, conflicts_with = "shared")]
    pub(crate) exclusive: bool,
    /// The exit status when the lease is busy (-n) or the wait times out (-w),
    /// instead of 75: 0–255, except tenure's other codes (64, 65, 69, 70, 71,
    /// 76, 126, 127). `-E 0 -n` skips a busy run quietly, as for cron.
    #[arg(short = 'E', long, value_parser = conflict_exit_code, allow_negative_numbers = true, value_name = "CODE")]
    pub(crate) conflict_exit_code: Option<u8>,
    /// Run this shell command (`sh -c COMMAND`), as `flock -c`; instead of `-- COMMAND`.
    #[arg(short = 'c', long = "command", value_name = "SHELL COMMAND", conflicts_with = "command")]
    pub(crate) shell_command: Option<OsString>,
    // flock(1)'s flags without a meaning here: refused with the reason.
    #[arg(short = 'u', long, hide = true)]
    unlock: bool,
    #[arg(short = 'o', long, hide = true)]
    close: bool,
    #[arg(short = 'F', long, hide = true)]
    no_fork: bool,
    #[arg(long, hide = true)]
    fcntl: bool,
    /// `-v` given to `tenure` (set by [`run`], not parsed here).
    #[arg(skip)]
    pub(crate) verbose: u8,
}

/// The codes `tenure lock` gives other outcomes: a busy lease reported as one
/// of them would be read as that outcome (75 is the default, 0 and the rest
/// are the user's to choose, as with flock).
const TAKEN: [u8; 8] = [exit::USAGE, exit::DATA, exit::STORE, exit::INTERNAL, exit::OS_ERROR, exit::LOST, 126, 127];

fn conflict_exit_code(s: &str) -> Result<u8, String> {
    let code: u8 = s.trim().parse().map_err(|_| format!("{s:?} is not an exit status (a number from 0 to 255)"))?;
    if TAKEN.contains(&code) {
        return Err(format!(
            "{code} is the exit status tenure lock gives another outcome (see `tenure lock --help`); \
             choose another, such as 75 (the default), 0 or 1"
        ));
    }
    Ok(code)
}

/// `tenure lock` with flock(1)'s flags applied: refuses the ones tenure has
/// no use for, turns `-c` into the command, and gives a busy lease or a wait
/// that timed out the `-E` exit status.
pub(crate) async fn run(mut args: LockArgs, verbose: u8) -> Result<ExitCode> {
    let f = &mut args.flock;
    f.verbose = verbose;
    if let Some(why) = refused(f) {
        return Err(Fail::usage(why).into());
    }
    if let Some(shell) = f.shell_command.take() {
        args.command = vec!["sh".into(), "-c".into(), shell];
    }
    let conflict = args.flock.conflict_exit_code;
    let out = super::run(args).await;
    match (out, conflict) {
        (Err(e), Some(code)) if exit::code_for(&e) == exit::TIMEOUT => Err(Fail::new(code, crate::one_line(&e)).into()),
        (out, _) => out,
    }
}

/// Why a flock(1) flag given is refused, if one is.
fn refused(f: &FlockArgs) -> Option<&'static str> {
    if f.unlock {
        Some(
            "tenure lock has no -u/--unlock: the lease is released when the command and everything it \
             started have ended; to end someone else's grant, use `tenure break STORE NAME`",
        )
    } else if f.close {
        Some(
            "tenure lock has no -o/--close: the command never holds the lease through a file descriptor, \
             and tenure keeps the lease until everything the command started has ended (what is left \
             running is stopped first); start a daemon that must outlive the lease outside tenure lock",
        )
    } else if f.no_fork {
        Some(
            "tenure lock has no -F/--no-fork: tenure must stay beside the command to renew the lease \
             and to stop the command if the lease is lost",
        )
    } else if f.fcntl {
        Some(
            "tenure lock has no --fcntl: it takes no kernel lock (neither flock(2) nor fcntl), the lease \
             lives in the store, so there is no kind of lock to choose",
        )
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::conflict_exit_code;

    #[test]
    fn conflict_exit_codes_are_0_to_255_except_tenures_own() {
        assert_eq!(conflict_exit_code("0"), Ok(0));
        assert_eq!(conflict_exit_code("1"), Ok(1));
        assert_eq!(conflict_exit_code("255"), Ok(255));
        for bad in ["256", "-1", "x", "", "1.5"] {
            assert!(conflict_exit_code(bad).is_err_and(|e| e.contains("0 to 255")), "{bad}");
        }
        for taken in ["64", "69", "76", "127"] {
            assert!(conflict_exit_code(taken).is_err_and(|e| e.contains("another outcome")), "{taken}");
        }
    }
}
