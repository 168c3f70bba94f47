//! Command-line arguments.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tenure::human_duration;
use tenure::limits::{MAX_DURATION, MAX_TTL};

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
    /// Show held leases and their holders (read-only).
    ///
    /// Lists the leases held now (or blocked by an unreadable record, or expired
    /// and not yet taken over); `--all` adds those nobody holds. HELD is how long
    /// the holder has had it, by the holder's clock.
    #[command(after_help = STATUS_AFTER_HELP)]
    Status(StatusArgs),
    /// Break a lease: end its grants now, so that others may take it at once.
    ///
    /// The record is read, then rewritten only if it has not changed since: a
    /// holder that renewed or released in between is left alone (exit 75, as when
    /// there is nothing to break). A holder running `tenure lock` learns of the
    /// break at its next renewal, stops its command and exits 76.
    Break(BreakArgs),
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

const LOCK_AFTER_HELP: &str = "\
COMMAND's environment:
  TENURE_LEASE     the lease name
  TENURE_TOKEN     the fencing token, higher for every grant of the lease: pass it to what
                   COMMAND writes, so that writes from a stale holder can be refused
  TENURE_DEADLINE  the grant's deadline at start, in unix ms (renewals extend it)
  TENURE_STORE     the store

Exit status: COMMAND's own (128 + n if signal n ended it), or
  64   bad arguments, lease name, store URL or option; a nested `tenure lock` on
       the lease it already runs under (TENURE_LEASE and TENURE_STORE)
  65   stored data tenure will not overwrite is corrupt (a corrupt lease record
       instead blocks until --corrupt-ttl, then is replaced with a warning)
  69   the store is unreachable, failing, or refused as unsafe
  70   a bug in tenure
  75   the lease is busy (--no-wait) or the wait timed out (--timeout)
  76   the lease was lost while COMMAND ran; COMMAND was stopped
  126  COMMAND cannot be run, 127 COMMAND not found (the lease is not taken)

Example:
  tenure lock /mnt/shared/locks deploy/prod --timeout 10m -- ./deploy.sh --prod";

const STATUS_AFTER_HELP: &str = "\
Exit status:
  0    listed; with NAME: the lease NAME is held (or an unreadable record blocks it)
  1    with NAME: the lease NAME is not held (free, expired, or never taken)
  64   bad arguments, lease name or store URL, or STORE is a file, not a store
  65   NAME's stored data is corrupt beyond reading
  69   the store is unreachable or failing

Example:
  if tenure status /mnt/shared/locks deploy/prod; then echo \"a deploy is running\"; fi";

/// `tenure status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// One lease, or a prefix of names; all leases if omitted.
    pub(crate) name: Option<String>,
    /// Also show leases nobody holds (released or never taken).
    #[arg(long)]
    pub(crate) all: bool,
    /// Print JSON (one array, every lease held or not) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

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
    /// Why, kept in the record with who broke it (user, host, pid): `status`
    /// and the next holder show it.
    #[arg(long, value_parser = reason, value_name = "TEXT")]
    pub(crate) reason: Option<String>,
}

/// A break reason: at most [`tenure::limits::MAX_REASON_BYTES`] bytes of text
/// on one line.
fn reason(s: &str) -> Result<String, String> {
    let max = tenure::limits::MAX_REASON_BYTES;
    if s.len() > max {
        return Err(format!("{} bytes is too long for a reason (at most {max})", s.len()));
    }
    if s.chars().any(char::is_control) {
        return Err("a reason is one line of text, without control characters".into());
    }
    Ok(s.to_string())
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

/// Parses `30s`, `5m`, `1h30m`, `250ms`, or a bare number of seconds (`5`, `0.5`),
/// at most [`MAX_DURATION`]: every duration flag (and `TENURE_MAX_SKEW`,
/// `TENURE_CORRUPT_TTL`) goes through here, so an absurd value is refused with
/// exit 64 before anything happens, never wrapped later.
pub(crate) fn duration(s: &str) -> Result<Duration, String> {
    bounded(s, Duration::ZERO, MAX_DURATION)
}

/// The shortest `--ttl` the lease's timing works with (renewals and the safety
/// margin are fractions of it).
const MIN_TTL: Duration = Duration::from_millis(10);

/// Like [`duration`], at most [`MAX_TTL`]: for `--ttl`. A longer lease would only
/// delay takeover after a crash, and its milliseconds must fit the record.
pub(crate) fn ttl(s: &str) -> Result<Duration, String> {
    bounded(s, MIN_TTL, MAX_TTL)
}

fn bounded(s: &str, min: Duration, max: Duration) -> Result<Duration, String> {
    let bare = s.trim().parse::<f64>().ok();
    // A bare number is seconds: say so when it is out of range, it may have been
    // meant as milliseconds.
    let unit = if bare.is_some() { "; a bare number is seconds" } else { "" };
    let d = if let Some(secs) = bare {
        // NaN, infinities, negative numbers and values past `Duration::MAX` fail here.
        Duration::try_from_secs_f64(secs)
            .map_err(|_| format!("{s:?} is not a valid number of seconds (it must be finite and not negative)"))?
    } else {
        humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 250ms, 30s, 5m, 1h30m, or 5 for seconds)"))?
    };
    if d > max {
        return Err(format!("{s:?} is too long (at most {}{unit})", in_days(max)));
    }
    if d < min {
        return Err(format!("{s:?} is too short (from {} to {}{unit})", human_duration(min), in_days(max)));
    }
    Ok(d)
}

/// A limit in words: `30 days`, `3660 days (about 10 years)`.
fn in_days(d: Duration) -> String {
    let days = d.as_secs() / 86_400;
    match days {
        0 => human_duration(d),
        1..365 => format!("{days} days"),
        _ => format!("{days} days (about {} years)", days / 365),
    }
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

    #[test]
    fn absurd_durations_are_refused_not_wrapped() {
        for s in ["NaN", "nan", "inf", "-inf", "infinity", "-0.5", "1e300", "18446744073709551616", "600000000y"] {
            assert!(duration(s).is_err(), "{s} was accepted");
        }
        assert!(duration("11y").is_err_and(|e| e.contains("too long")));
        assert!(duration("9y").is_ok());
        // `--ttl` stops at 30 days: the value that overflowed the record's milliseconds is refused.
        assert_eq!(ttl("30days"), Ok(MAX_TTL));
        assert!(
            ttl("31days").is_err_and(|e| e.contains("too long") && e.contains("at most 30 days")),
            "{:?}",
            ttl("31days")
        );
        assert!(ttl("18446744073709551").is_err());
        // Too short: the range is given, and a bare number is said to be seconds.
        for s in ["0", "0.001", "1ms"] {
            assert!(ttl(s).is_err_and(|e| e.contains("from 10ms to 30 days")), "{s}: {:?}", ttl(s));
        }
        assert!(ttl("0").is_err_and(|e| e.contains("bare number is seconds")));
        assert!(ttl("1ms").is_err_and(|e| !e.contains("bare number")));
        assert!(ttl("99999999").is_err_and(|e| e.contains("at most 30 days; a bare number is seconds")));
    }

    proptest::proptest! {
        #![proptest_config(config())]

        /// Arbitrary text: never a panic, never more than the limit.
        #[test]
        fn any_text_parses_within_the_limits_or_is_refused(s in "\\PC{0,40}") {
            if let Ok(d) = duration(&s) {
                proptest::prop_assert!(d <= MAX_DURATION, "{s:?} gave {d:?}");
            }
            if let Ok(d) = ttl(&s) {
                proptest::prop_assert!(d <= MAX_TTL, "{s:?} gave {d:?}");
            }
        }

        /// Text shaped like durations (numbers with units, big exponents, signs),
        /// which random text rarely is.
        #[test]
        fn duration_shaped_text_parses_within_the_limits_or_is_refused(
            s in "[-+ ]?[0-9]{0,25}(\\.[0-9]{0,12})?(e[-+]?[0-9]{1,4})?(ns|us|ms|s|m|h|d|w|M|y|days|years)?( ?[0-9]{1,20}(ms|s|h|y))?"
        ) {
            if let Ok(d) = duration(&s) {
                proptest::prop_assert!(d <= MAX_DURATION, "{s:?} gave {d:?}");
            }
            if let Ok(d) = ttl(&s) {
                proptest::prop_assert!(d <= MAX_TTL, "{s:?} gave {d:?}");
            }
        }
    }

    /// 4096 cases per property, or `PROPTEST_CASES` for a longer run.
    fn config() -> proptest::prelude::ProptestConfig {
        match std::env::var_os("PROPTEST_CASES") {
            Some(_) => proptest::prelude::ProptestConfig::default(),
            None => proptest::prelude::ProptestConfig::with_cases(4096),
        }
    }
}
