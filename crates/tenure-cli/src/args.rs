//! Command-line arguments.

use std::ffi::OsString;

use clap::{Args, Parser, Subcommand};

use crate::lock::LockArgs;

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
    #[command(after_help = LOCK_AFTER_HELP, override_usage = LOCK_USAGE)]
    Lock(LockArgs),
    /// Show held leases and their holders (read-only).
    ///
    /// Lists the leases held now (or blocked by an unreadable record, or expired
    /// and not yet taken over); `--all` adds those nobody holds. HELD is how long
    /// the holder has had it, by the holder's clock.
    #[command(after_help = STATUS_AFTER_HELP)]
    Status(crate::status::StatusArgs),
    /// Break a lease: end its grants now, so that others may take it at once.
    ///
    /// The record is read, then rewritten only if it has not changed since: a
    /// holder that renewed or released in between is left alone (exit 75, as when
    /// there is nothing to break). A holder running `tenure lock` learns of the
    /// break at its next renewal, stops its command and exits 76.
    Break(crate::status::BreakArgs),
    /// Watch a lease: who holds it now, then one line per change (read-only).
    ///
    /// Prints the current holder, then a line for each change — acquired,
    /// taken_over, released, broken, expired, renewed_late — until
    /// interrupted (exit 0). Pushed where the store watches keys (a
    /// directory, etcd), read every --poll elsewhere; an expiry is seen when
    /// the deadline passes. With `tenure lock … -- service` on every replica
    /// (the others wait as hot standbys), it shows who leads.
    #[command(after_help = WATCH_AFTER_HELP)]
    Watch(crate::watch::WatchArgs),
    /// Run the lease server.
    ///
    /// With --tls-cert and --tls-key, the lease port and the HTTP port speak TLS
    /// only: clients connect with `tenure://HOST:PORT?tls=true` (and
    /// `&ca_file=CA.pem` for a private CA, `&server_name=NAME` to check another
    /// name than the host's). An auth token (--auth-token-file) travels only over
    /// TLS or within this machine: without TLS, a --listen address that is not
    /// loopback is refused unless --allow-plaintext-auth, and clients likewise
    /// refuse to send it unless `allow_plaintext_auth=true`.
    #[cfg(feature = "server")]
    Serve(crate::serve::ServeArgs),
    /// Closable bags of messages and the lease-guarded journal.
    #[cfg(feature = "bag")]
    Bag(crate::bag::BagArgs),
    /// Measure lease cycles per second and latency, next to raw anchors.
    #[cfg(feature = "bench")]
    Bench(crate::bench::BenchArgs),
    /// Measure lease cycles per second and latency (needs a build with `--features bench`).
    #[cfg(not(feature = "bench"))]
    Bench(NoBench),
    /// Print a shell completion script to stdout.
    #[command(after_help = COMPLETIONS_AFTER_HELP)]
    Completions(CompletionsArgs),
    /// Print the man page (roff) to stdout, or write one page per command to a directory.
    #[command(after_help = MAN_AFTER_HELP)]
    Man(ManArgs),
    /// Internal: the guard process that stops a command's process group if `tenure`
    /// dies.
    #[command(hide = true, name = "__guard")]
    Guard(crate::guard::GuardArgs),
}

const LOCK_USAGE: &str = "\
tenure lock [OPTIONS] <STORE> <NAME> -- <COMMAND>...
       tenure lock [OPTIONS] <STORE> <NAME> -c <SHELL COMMAND>";

const LOCK_AFTER_HELP: &str = "\
COMMAND's environment:
  TENURE_LEASE     the lease name
  TENURE_TOKEN     the fencing token, higher for every grant of the lease: pass it to what
                   COMMAND writes, so that writes from a stale holder can be refused
  TENURE_DEADLINE  the grant's deadline at start, in unix ms (renewals extend it)
  TENURE_STORE     the store

Exit status: COMMAND's own (128 + n if signal n ended it), or
  64   bad arguments, lease name, store URL or option; a store directory that does
       not exist (--create makes it); a nested `tenure lock` on the lease it
       already runs under (TENURE_LEASE and TENURE_STORE)
  65   stored data tenure will not overwrite is corrupt (a corrupt lease record
       instead blocks until --corrupt-ttl, then is replaced with a warning)
  69   the store is unreachable, failing, or refused as unsafe (at once on first
       contact without --timeout; under --timeout it is retried until then)
  70   a bug in tenure
  71   the guard process could not start or was killed before COMMAND started
  75   the lease is busy (--no-wait) or the wait timed out (--timeout); or no
       grant came in time to start COMMAND under (the store answered too slowly);
       -E CODE gives these CODE instead. Also (-E leaves it 75): granted, but
       COMMAND could not start before the grant's last moment to (its guard was
       held up), so it did not run
  76   COMMAND ran and was stopped: the lease was lost, or its guard was killed
  126  COMMAND cannot be run, 127 COMMAND not found (the lease is not taken)

flock(1)'s flags:
  -w SECS      --timeout (--wait); a bare number is seconds: -w 5, -w 0.5
  -n           --no-wait (--nonblock, --nb)
  -s, -x       --shared; --exclusive (-e), the default
  -E CODE      exit CODE instead of 75 (0-255; not 64, 65, 69, 70, 71, 76, 126, 127)
  -c CMD       run `sh -c CMD`, instead of -- COMMAND
  -v           a last line: waited, held, renewals, token
  -u, -o, -F and --fcntl are refused, saying what tenure does instead.

Example:
  tenure lock /mnt/shared/locks deploy/prod --timeout 10m -- ./deploy.sh --prod
  tenure lock /mnt/shared/locks nightly -n -E 0 -c 'make backup'    (skip if one runs)";

const STATUS_AFTER_HELP: &str = "\
Exit status:
  0    listed; with NAME: the lease NAME is held (or an unreadable record blocks it)
  1    with NAME: the lease NAME is not held (free, expired, or never taken)
  64   bad arguments, lease name or store URL; STORE is a file, a directory that does
       not exist, or one that holds entries but not one lease record (not a store)
  65   NAME's stored data is corrupt beyond reading
  69   the store is unreachable or failing

Example:
  if tenure status /mnt/shared/locks deploy/prod; then echo \"a deploy is running\"; fi";

const WATCH_AFTER_HELP: &str = "\
Exit status:
  0    interrupted (SIGINT, SIGTERM) or stdout closed
  64   bad arguments, lease name or store URL; STORE is not a store
  65   the lease's stored data is corrupt beyond reading
  69   the store is unreachable on the first read, or has failed for --give-up since

Example:
  tenure watch /mnt/shared/locks service/leader --json";

const COMPLETIONS_AFTER_HELP: &str = "\
Install:
  bash  tenure completions bash > ~/.local/share/bash-completion/completions/tenure
  zsh   tenure completions zsh > ~/.zfunc/_tenure   (with fpath+=~/.zfunc before compinit)
  fish  tenure completions fish > ~/.config/fish/completions/tenure.fish";

const MAN_AFTER_HELP: &str = "\
Install:
  tenure man > ~/.local/share/man/man1/tenure.1
  tenure man --dir ~/.local/share/man/man1     (also tenure-lock.1, tenure-status.1, …)";

/// `tenure bench` in a build without benchmarks: takes any arguments, to say so.
#[cfg(not(feature = "bench"))]
#[derive(Debug, clap::Args)]
pub(crate) struct NoBench {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    rest: Vec<String>,
}

/// `tenure completions`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete in.
    pub(crate) shell: clap_complete::Shell,
}

/// `tenure man`.
#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// Write tenure.1 and a page per subcommand (tenure-lock.1, …) into this
    /// existing directory instead of printing tenure.1.
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: Option<std::path::PathBuf>,
}

/// The message for `tenure lock STORE NAME cmd args` without `--`, which clap
/// reports as an unexpected argument: say to put `--` before the command.
pub(crate) fn missing_separator(e: &clap::Error, argv: impl IntoIterator<Item = OsString>) -> Option<String> {
    if e.kind() != clap::error::ErrorKind::UnknownArgument {
        return None;
    }
    let argv: Vec<OsString> = argv.into_iter().skip(1).collect();
    if argv.iter().any(|a| a == "--") {
        return None;
    }
    // The subcommand: the first word that is not an option (only -v comes before it).
    let mut words = argv.iter().filter(|a| !a.as_encoded_bytes().starts_with(b"-"));
    if words.next().is_none_or(|w| w != "lock") {
        return None;
    }
    let unexpected = match e.get(clap::error::ContextKind::InvalidArg) {
        Some(clap::error::ContextValue::String(s)) => s.clone(),
        _ => return None,
    };
    if unexpected.starts_with('-') {
        // A misspelt option, not the command: clap's own message says it best.
        return None;
    }
    Some(format!(
        "unexpected argument {unexpected:?}: put `--` before the command, as in \
         tenure lock STORE NAME [OPTIONS] -- {unexpected} [ARGS…]"
    ))
}
