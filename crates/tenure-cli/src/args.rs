//! Command-line arguments.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::lock::LockArgs;
use crate::stores::StoreArgs;

/// tenure: leases with fencing tokens on storage you already have.
///
/// Stores: a directory (`/var/lib/locks`, `file:///mnt/nfs/locks`), an object
/// store (`s3://bucket/prefix`, `gs://…`, `az://…`), the lease server
/// (`tenure://host:7777`) or etcd (`etcd://host:2379/prefix`).
#[derive(Debug, Parser)]
#[command(name = "tenure", version, propagate_version = true, max_term_width = 100)]
pub(crate) struct Cli {
    /// Log more (-v: info, -vv: debug). `TENURE_LOG` takes a tracing filter.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub(crate) verbose: u8,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a command while holding a lease (flock for a fleet).
    ///
    /// Waits for the lease, runs COMMAND while keeping the lease alive, and releases
    /// it when COMMAND and every process of its group have ended. If the lease is
    /// lost, or `tenure` itself dies, COMMAND's whole process group is stopped
    /// (SIGTERM, then SIGKILL after --kill-grace) before anyone else can get the
    /// lease.
    #[command(after_help = LOCK_AFTER_HELP)]
    Lock(LockArgs),
    /// Show leases and their holders (read-only).
    Status(StatusArgs),
    /// Break a lease: end its grants now, so that others may take it at once.
    ///
    /// The record is read, then rewritten only if it has not changed since: a
    /// holder that renewed or released in between is left alone (exit 75, as when
    /// there is nothing to break). A holder running `tenure lock` learns of the
    /// break at its next renewal, stops its command and exits 76.
    Break(BreakArgs),
    /// Run the lease server.
    #[cfg(feature = "server")]
    Serve(crate::serve::ServeArgs),
    /// Closable bags of messages and the lease-guarded journal.
    #[cfg(feature = "bag")]
    Bag(crate::bag::BagArgs),
    /// Measure lease cycles per second and latency, next to raw anchors.
    Bench(crate::bench::BenchArgs),
    /// Internal: the guard process that stops a command's process group if `tenure`
    /// dies.
    #[command(hide = true, name = "__guard")]
    Guard(crate::supervise::GuardArgs),
}

const LOCK_AFTER_HELP: &str = "\
COMMAND's environment:
  TENURE_LEASE     the lease name
  TENURE_TOKEN     the fencing token, higher for every grant of the lease: pass it to what
                   COMMAND writes, so that writes from a stale holder can be refused
  TENURE_DEADLINE  the grant's deadline at start, in unix ms (renewals extend it)
  TENURE_STORE     the store

Exit status: COMMAND's own (128 + n if signal n ended it), or
  64   bad arguments, lease name, store URL or option
  65   stored data tenure will not overwrite is corrupt (a corrupt lease record
       instead blocks until --corrupt-ttl, then is replaced with a warning)
  69   the store is unreachable, failing, or refused as unsafe
  70   a bug in tenure
  75   the lease is busy (--no-wait) or the wait timed out (--timeout)
  76   the lease was lost while COMMAND ran; COMMAND was stopped
  126  COMMAND cannot be run, 127 COMMAND not found (the lease is not taken)

Example:
  tenure lock /mnt/shared/locks deploy/prod --timeout 10m -- ./deploy.sh --prod";

/// `tenure status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// One lease, or a prefix of names; all leases if omitted.
    pub(crate) name: Option<String>,
    /// Print JSON (one array) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `tenure break`.
#[derive(Debug, Args)]
pub(crate) struct BreakArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// The lease to break.
    pub(crate) name: String,
    /// Only break the grant with this fencing token (and only if it is still there).
    #[arg(long)]
    pub(crate) token: Option<u64>,
}

/// Parses `30s`, `5m`, `1h30m`, `250ms`, or a bare number of seconds (`5`, `0.5`).
pub(crate) fn duration(s: &str) -> Result<Duration, String> {
    if let Ok(secs) = s.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).map_err(|_| format!("{s:?} is not a valid number of seconds"));
    }
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 250ms, 30s, 5m, 1h30m, or 5 for seconds)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_accept_units_and_bare_seconds() {
        assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(duration("0.5"), Ok(Duration::from_millis(500)));
        assert!(duration("-1").is_err());
        assert!(duration("soon").is_err_and(|e| e.contains("examples")));
    }
}
