//! `tenure bag`: closable bags of timestamped messages and the lease-guarded
//! journal, on a directory or an object store (see the `tenure_bag` crate).
//!
//! Exit codes besides tenure's own: `1` when an append was rejected (its bucket
//! was closed) or an audit found violations.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use tenure::limits::MAX_TIME_MS;
use tenure_bag::{BagOptions, Log, LogSettings};

use crate::durations::duration;
use crate::exit::Fail;

mod append;
mod audit;
mod bench;
mod close;
mod compact;
mod format;
mod read;
#[cfg(test)]
mod tests;
mod when;

use append::append;
use audit::audit;
use bench::bench;
use close::close;
use compact::compact;
use read::read;
use when::{WHEN_HELP, when};

/// Rejected appends, audit violations.
const REJECTED: u8 = 1;

/// `tenure bag`.
#[derive(Debug, Args)]
pub(crate) struct BagArgs {
    #[command(subcommand)]
    cmd: BagCmd,
}

#[derive(Debug, Subcommand)]
enum BagCmd {
    /// Append messages; say for each batch whether it was accepted.
    Append(AppendArgs),
    /// Read messages in (timestamp, writer, sequence) order (never writes).
    ///
    /// Each message is printed as `<time> <writer>#<seq> <body>` on standard
    /// output (the body as written, last on the line), then a summary on standard
    /// error that says whether the answer is final and, if buckets are still
    /// open, which command seals them or keeps reading. `--json` prints one object
    /// per message, then a summary object.
    Read(ReadArgs),
    /// Close buckets past their grace (once, or continuously with --loop).
    Close(CloseArgs),
    /// Check every message against the grant it claims.
    Audit(AuditArgs),
    /// Fold closed buckets into snapshots (idempotent).
    Compact(CompactArgs),
    /// Measure appends, closes and reads beside the raw file-system floor.
    Bench(BenchArgs),
}

/// The log and how to reach and (if new) create it.
#[derive(Debug, Args)]
struct LogArgs {
    /// The log: a directory, `file:///dir[?fsync=false&timeout=10s]`, or
    /// `s3://bucket/prefix`.
    #[arg(value_name = "LOG")]
    log: String,
    /// Store setting, repeatable: `--store-opt aws_endpoint=http://…` for object
    /// stores, `--store-opt timeout=30s` (each file-system operation's deadline,
    /// default 10s) or `fsync=false` for a directory.
    #[arg(long = "store-opt", value_name = "KEY=VALUE", value_parser = key_value)]
    store_opts: Vec<(String, String)>,
    /// Bucket width, if this command creates the log.
    #[arg(long, value_parser = duration, default_value = "1s")]
    bucket_width: Duration,
    /// Grace before a bucket may be closed, if this command creates the log.
    #[arg(long, value_parser = duration, default_value = "2s")]
    grace: Duration,
    /// Largest clock difference between processes using the log (the writers'
    /// fast path keeps this far from the grace), if this command creates the log.
    #[arg(long, value_parser = duration, default_value = "500ms")]
    max_skew: Duration,
    /// Buckets per snapshot, if this command creates the log.
    #[arg(long, default_value_t = 3600)]
    chunk_buckets: u64,
    /// Print one JSON object a line, each with `"schema_version": 1` and every
    /// time twice: `<name>_ms` (unix ms) and `<name>_at` (RFC 3339, UTC).
    /// Without it, output is for people: outcomes in words, times as UTC dates
    /// with milliseconds (`2026-11-24T10:32:05.123Z`).
    #[arg(long)]
    json: bool,
    /// Skip the check that an object store enforces conditional writes before the
    /// first write or close. Only for stores you know are safe.
    #[arg(long)]
    trust_store: bool,
    /// Create the log's directory (and its parents) if it does not exist.
    /// Without it, writing or closing a directory log that is missing is
    /// refused (exit 64): a mount that is not there, or a typo, must not get a
    /// log nobody reads. Object stores ignore it.
    #[arg(long)]
    create: bool,
}

fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
}

/// Refuses a time (unix ms) past the year 9999: nothing is stored there.
fn check_time(flag: &str, ms: Option<u64>) -> Result<()> {
    match ms {
        Some(ms) if ms > MAX_TIME_MS => {
            Err(Fail::usage(format!("{flag} {ms} is past the year 9999 (at most {MAX_TIME_MS} ms)")).into())
        }
        _ => Ok(()),
    }
}

/// Refuses a count outside `1..=max`.
fn check_count(flag: &str, n: usize, max: usize) -> Result<()> {
    if (1..=max).contains(&n) {
        Ok(())
    } else {
        Err(Fail::usage(format!("{flag} must be from 1 to {max}, not {n}")).into())
    }
}

impl LogArgs {
    fn open(&self, read_only_hint: bool) -> Result<Log> {
        let mut opts = BagOptions::default().with_settings(LogSettings {
            width: self.bucket_width,
            grace: self.grace,
            max_skew: self.max_skew,
            chunk_buckets: self.chunk_buckets,
        });
        opts.params.extend(self.store_opts.iter().cloned());
        opts.read_only_hint = read_only_hint;
        opts.trust_store = self.trust_store;
        opts.create = self.create;
        // Named without its query, which may hold a secret.
        let url = tenure::StoreUrl::parse(&self.log, &opts.params)?;
        Log::open_url(&url, opts).with_context(|| format!("opening log {url}"))
    }
}

#[derive(Debug, Args)]
struct AppendArgs {
    #[command(flatten)]
    log: LogArgs,
    /// Messages, appended as one batch.
    messages: Vec<String>,
    /// Read messages from standard input instead, one per line, each its own batch.
    #[arg(long, conflicts_with = "messages")]
    stdin: bool,
    /// Writer id prefix (a random suffix keeps ids unique); default: host name.
    #[arg(long)]
    writer: Option<String>,
    /// Stamp with this time (unix ms) instead of now.
    #[arg(long, conflicts_with_all = ["lag", "leases"])]
    at: Option<u64>,
    /// Stamp this long before now (late writers, backfills).
    #[arg(long, value_parser = duration, conflicts_with = "leases")]
    lag: Option<Duration>,
    /// Append under this lease (repeatable): the lease-guarded journal, which
    /// stamps each batch itself (above the predecessors' watermarks).
    #[arg(long = "lease", value_name = "NAME", requires = "lease_store")]
    leases: Vec<String>,
    /// Where the leases live (any store URL `tenure lock` takes).
    #[arg(long, value_name = "STORE", requires = "leases")]
    lease_store: Option<String>,
    /// Lease TTL for the journal.
    #[arg(long, value_parser = duration, default_value = "30s")]
    ttl: Duration,
    /// After closing a bucket this append helped close, chmod it read-only (a hint).
    #[arg(long)]
    read_only_hint: bool,
}

#[derive(Debug, Args)]
#[command(after_help = WHEN_HELP)]
struct ReadArgs {
    #[command(flatten)]
    log: LogArgs,
    /// From this time (see WHEN below); default: the log's first bucket.
    #[arg(long, value_name = "WHEN", allow_hyphen_values = true, value_parser = when)]
    from: Option<u64>,
    /// Up to this time (exclusive; see WHEN below); default: the newest bucket.
    #[arg(long, value_name = "WHEN", allow_hyphen_values = true, value_parser = when, conflicts_with = "follow")]
    to: Option<u64>,
    /// After reading what is there, keep reading messages as they are appended
    /// (polling every 200 ms, backing off to 1 s while nothing comes), printing
    /// each once. Messages of buckets that are not closed yet are printed as soon
    /// as they can be read, as a plain read does. Ends on Ctrl-C or SIGTERM, with
    /// exit status 0.
    #[arg(long, short = 'f')]
    follow: bool,
    /// Keep messages stamped after their lease's deadline.
    #[arg(long)]
    include_late: bool,
    /// Read buckets even where snapshots exist.
    #[arg(long)]
    no_snapshots: bool,
}

#[derive(Debug, Args)]
struct CloseArgs {
    #[command(flatten)]
    log: LogArgs,
    /// Close only this bucket (its start, unix ms).
    #[arg(long, conflicts_with = "run_loop")]
    bucket: Option<u64>,
    /// Keep closing due buckets (the metronome) until interrupted.
    #[arg(long = "loop")]
    run_loop: bool,
    /// Pause between rounds of --loop.
    #[arg(long, value_parser = duration, default_value = "250ms")]
    interval: Duration,
    /// Start this far back (default 1h); `--all` starts at the log's first bucket.
    #[arg(long, value_parser = duration, default_value = "1h")]
    lookback: Duration,
    /// Close every due bucket since the log began.
    #[arg(long)]
    all: bool,
    /// chmod closed buckets read-only (a hint; correctness never depends on it).
    #[arg(long)]
    read_only_hint: bool,
}

#[derive(Debug, Args)]
struct AuditArgs {
    #[command(flatten)]
    log: LogArgs,
    /// The lease server's public key (64 hex digits, from `GET /pubkey`): verify
    /// witnesses. Without it, witnesses are reported as unverified.
    #[arg(long, value_name = "HEX")]
    witness_key: Option<String>,
    /// Clock skew tolerated between a message's stamp and its witness's signed time.
    #[arg(long, value_parser = duration, default_value = "1s")]
    witness_skew: Duration,
}

#[derive(Debug, Args)]
struct CompactArgs {
    #[command(flatten)]
    log: LogArgs,
}

#[derive(Debug, Args)]
struct BenchArgs {
    /// A scratch directory (its contents are replaced).
    dir: std::path::PathBuf,
    /// Writer counts (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    writers: Vec<usize>,
    /// Measured time per append run.
    #[arg(long, value_parser = duration, default_value = "3s")]
    seconds: Duration,
    /// Payload bytes.
    #[arg(long, default_value_t = 100)]
    payload: usize,
    /// Do not fsync (both the bag and its raw floor).
    #[arg(long)]
    no_fsync: bool,
    /// Buckets of 100 writer files closed for the latency figure.
    #[arg(long, default_value_t = 20)]
    close_buckets: usize,
    /// Messages written, compacted and read for the read figures.
    #[arg(long, default_value_t = 1_000_000)]
    read_messages: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(args: BagArgs) -> Result<ExitCode> {
    match args.cmd {
        BagCmd::Append(a) => append(a).await,
        BagCmd::Read(a) => read(a).await,
        BagCmd::Close(a) => close(a).await,
        BagCmd::Audit(a) => audit(a).await,
        BagCmd::Compact(a) => compact(a).await,
        BagCmd::Bench(a) => bench(a).await,
    }
}
