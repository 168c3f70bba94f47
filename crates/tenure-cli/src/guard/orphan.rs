//! When `tenure` died: the guard releases the orphaned grant once nothing of the
//! command runs, by running `tenure break` for that grant alone (which may fail
//! and leave the lease to expire).

use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::time::Duration;

use crate::exit;
use crate::supervise::{DRAIN_TICK, MAX_ORPHAN_LINE};

/// The hidden command the guard runs to release the lease of a `tenure` that
/// died: `tenure break` with its arguments on standard input (JSON), so that
/// the store's URL and options never show in a process listing.
pub(crate) const BREAK_ORPHANED: &str = "__break-orphaned";

/// Longest the guard waits for that release (a break is a few store
/// operations, each under the store's own deadline, 10 s by default); then it
/// stops it and leaves the lease to expire.
const ORPHAN_WAIT: Duration = Duration::from_secs(60);

/// Longest the guard waits, after the control pipe closed, to see `tenure`
/// gone (see [`died`](super::died)).
pub(super) const ORPHAN_PARENT_WAIT: Duration = Duration::from_secs(2);

/// Longest the guard waits for a release it stopped to end (a process stuck
/// in the kernel on a hung mount does not die at once); then it leaves it.
const ORPHAN_KILL_WAIT: Duration = Duration::from_secs(5);

/// The arguments of [`BREAK_ORPHANED`], read from standard input: a JSON
/// array of strings that starts with `break`, program name first.
pub(crate) fn orphaned_break_args() -> io::Result<Vec<String>> {
    break_args_from(io::stdin())
}

pub(super) fn break_args_from(input: impl Read) -> io::Result<Vec<String>> {
    let mut json = Vec::new();
    input.take(MAX_ORPHAN_LINE as u64 + 1).read_to_end(&mut json)?;
    if json.len() > MAX_ORPHAN_LINE {
        return Err(io::Error::other(format!("more than {MAX_ORPHAN_LINE} bytes of arguments")));
    }
    let args: Vec<String> = serde_json::from_slice(&json).map_err(io::Error::other)?;
    if args.first().map(String::as_str) != Some("break") {
        return Err(io::Error::other("expected the arguments of `tenure break`"));
    }
    Ok(std::iter::once("tenure".to_string()).chain(args).collect())
}

/// Runs `tenure break` with `plan` (the grant with `token` alone, conditional
/// on the record as it reads it) and says what came of it. Bounded by
/// [`ORPHAN_WAIT`].
pub(super) fn release_orphaned(plan: &[String], token: u64) {
    let Ok(json) = serde_json::to_vec(plan) else { return };
    let name = plan.get(2).map_or("?", String::as_str);
    let exe = if std::path::Path::new("/proc/self/exe").exists() {
        std::path::PathBuf::from("/proc/self/exe")
    } else {
        match std::env::current_exe() {
            Ok(exe) => exe,
            Err(_) => return,
        }
    };
    let spawned = std::process::Command::new(exe)
        .arg0("tenure")
        .arg(BREAK_ORPHANED)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let _ =
                writeln!(io::stderr(), "tenure: cannot release lease {name} (token {token}) after tenure died: {e}");
            return;
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(&json);
    }
    let until = std::time::Instant::now() + ORPHAN_WAIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if std::time::Instant::now() < until => std::thread::sleep(DRAIN_TICK),
            _ => {
                let _ = child.kill();
                // Reaped if it dies soon; never waited for without a bound.
                let gone = std::time::Instant::now() + ORPHAN_KILL_WAIT;
                while matches!(child.try_wait(), Ok(None)) && std::time::Instant::now() < gone {
                    std::thread::sleep(DRAIN_TICK);
                }
                break None;
            }
        }
    };
    let said = match status.and_then(|s| s.code()) {
        Some(0) => format!("released lease {name} (token {token}) once its command was stopped"),
        Some(c) if c == i32::from(exit::TIMEOUT) => return,
        _ => format!("could not release lease {name} (token {token}); it expires at its deadline"),
    };
    let _ = writeln!(io::stderr(), "tenure: {said}");
}
