//! `tenure bag`: closable bags of timestamped messages and the lease-guarded
//! journal, on a directory or an object store (see the `tenure_bag` crate).
//!
//! Exit codes besides tenure's own: `1` when an append was rejected (its bucket
//! was closed) or an audit found violations.

use std::collections::HashSet;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::{Args, Subcommand};
use serde::Serialize;
use tenure::limits::{MAX_DURATION, MAX_TIME_MS, MAX_TTL, check_duration, millis};
use tenure::{Client, Holder, LeaseOptions, OpenOptions};
use tenure_bag::{
    BagOptions, Batch, Decision, Journal, Log, LogSettings, Message, Outcome, ReadOptions, ReadResult, ViolationKind,
    Writer,
};

use crate::durations::duration;
use crate::exit::{DATA, Fail};

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

/// How `--from` and `--to` are given (shown after `tenure bag read --help`).
const WHEN_HELP: &str = "WHEN (--from, --to) is one of:
  2026-11-24T10:00:00Z       a date-time; UTC unless it ends in an offset (+01:00);
                             a space may replace the T, seconds and fractions are optional
  2026-11-24                 a date: midnight UTC
  -10m, 10m, -2h, -1d30m     a time ago (with or without the minus sign)
  1764000000000              unix milliseconds
Times before 1970 or after the year 9999 are refused (exit 64).";

/// What `--from` and `--to` accept, for error messages.
const WHEN_FORMS: &str = "a date-time (2026-11-24T10:00:00Z), a date (2026-11-24), a time ago (-10m, -2h, -1d) \
     or unix milliseconds, from 1970 to the year 9999";

/// `--from`/`--to` as clap parses them: [`parse_when`] against the wall clock.
fn when(s: &str) -> Result<u64, String> {
    parse_when(s, now_ms())
}

/// Parses a point in time (unix ms) given as an RFC 3339 date-time (UTC unless it
/// has an offset), a date (midnight UTC), a time ago (`-10m` or `10m`: both mean
/// ten minutes before `now_ms`) or unix milliseconds. Anything before 1970 or past
/// the year 9999 ([`MAX_TIME_MS`]) is an error saying what was given and what is
/// accepted; no input panics.
pub(crate) fn parse_when(s: &str, now_ms: u64) -> Result<u64, String> {
    let refuse = |why: &str| Err(format!("{s:?} {why}; give {WHEN_FORMS}"));
    let t = s.trim();
    if t.is_empty() {
        return refuse("is empty");
    }
    if t.bytes().all(|b| b.is_ascii_digit()) {
        return match t.parse::<u64>() {
            Ok(ms) if ms <= MAX_TIME_MS => Ok(ms),
            _ => refuse("is past the year 9999 as unix milliseconds"),
        };
    }
    if looks_like_date(t) {
        return match parse_date(t) {
            Ok(ms) => Ok(ms),
            Err(why) => refuse(why),
        };
    }
    let ago = t.strip_prefix('-').unwrap_or(t);
    if looks_like_date(ago) {
        return refuse("is before 1970");
    }
    if t.starts_with('+') {
        return refuse("is in the future; a time ago is written -10m or 10m");
    }
    if ago.parse::<f64>().is_ok() {
        return refuse(
            "is a negative or fractional number: unix milliseconds are whole and not negative, and a time ago needs a unit (-30s, -10m)",
        );
    }
    let d = match humantime::parse_duration(ago) {
        Ok(d) => d,
        Err(e) => return refuse(&format!("is not a time ({e})")),
    };
    match u64::try_from(d.as_millis()).ok().and_then(|ms| now_ms.checked_sub(ms)) {
        Some(ms) if ms <= MAX_TIME_MS => Ok(ms),
        Some(_) => refuse("is past the year 9999"),
        None => refuse("is before 1970"),
    }
}

/// `YYYY-…`: four digits and a dash.
fn looks_like_date(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() >= 5 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-'
}

/// A date or date-time (see [`parse_when`]) as unix ms.
fn parse_date(t: &str) -> Result<u64, &'static str> {
    let b = t.as_bytes();
    if &b[..4] < b"1970".as_slice() {
        return Err("is before 1970");
    }
    // The zone: `Z`, an offset `±HH:MM` (its sign and colon are ASCII, so the
    // slices below fall on character boundaries), or none (UTC).
    let (body, offset_ms): (&str, i64) = if let Some(body) = t.strip_suffix(['Z', 'z']) {
        (body, 0)
    } else if b.len() > 16
        && matches!(b[b.len() - 6], b'+' | b'-')
        && b[b.len() - 3] == b':'
        && [1, 2, 4, 5].iter().all(|&i| b[b.len() - 6 + i].is_ascii_digit())
    {
        let z = &b[b.len() - 6..];
        let (h, m) = (
            i64::from(z[1] - b'0') * 10 + i64::from(z[2] - b'0'),
            i64::from(z[4] - b'0') * 10 + i64::from(z[5] - b'0'),
        );
        if h > 23 || m > 59 {
            return Err("has an offset out of range (at most ±23:59)");
        }
        let sign = if z[0] == b'-' { -1 } else { 1 };
        (&t[..t.len() - 6], sign * (h * 60 + m) * 60_000)
    } else {
        (t, 0)
    };
    let full = match body.len() {
        10 => format!("{body}T00:00:00"),
        16 => format!("{body}:00"),
        _ => body.to_string(),
    };
    let time = humantime::parse_rfc3339_weak(&full).map_err(|e| match e {
        humantime::TimestampError::OutOfRange => "is not a valid date or is past the year 9999",
        _ => "is not a date-time",
    })?;
    let ms = time.duration_since(UNIX_EPOCH).map_or(0, millis);
    // An offset moves the time to UTC: local time minus the offset.
    let utc = i128::from(ms) - i128::from(offset_ms);
    match u64::try_from(utc) {
        Ok(ms) if ms <= MAX_TIME_MS => Ok(ms),
        Ok(_) => Err("is past the year 9999"),
        Err(_) => Err("is before 1970"),
    }
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

/// Prints a line; a closed pipe ends the command quietly.
fn out(line: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{line}").and_then(|()| stdout.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => Ok(other?),
    }
}

fn writer_prefix(explicit: Option<&str>) -> String {
    let raw = explicit.map_or_else(|| Holder::current().host, str::to_string);
    let clean: String =
        raw.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).take(40).collect();
    if clean.is_empty() { "w".into() } else { clean }
}

async fn append(a: AppendArgs) -> Result<ExitCode> {
    if !a.stdin && a.messages.is_empty() {
        bail!(Fail::usage("nothing to append: give messages (tenure bag append LOG MESSAGE…) or --stdin"));
    }
    check_time("--at", a.at)?;
    let lag = millis(check_duration("--lag", a.lag.unwrap_or_default(), MAX_DURATION)?);
    check_duration("--ttl", a.ttl, MAX_TTL)?;
    let log = a.log.open(a.read_only_hint)?;
    let writer = log.writer(Writer::unique_id(&writer_prefix(a.writer.as_deref())))?;
    let journal = match &a.lease_store {
        Some(url) => {
            let store = tenure::open(url, &OpenOptions::default())
                .await
                .with_context(|| format!("opening lease store {url}"))?;
            let opts = LeaseOptions::exclusive().with_ttl(a.ttl);
            Some(Journal::new(writer.clone(), Client::new(store), opts))
        }
        None => None,
    };
    let stamp = || a.at.unwrap_or_else(|| log.clock().wall_ms().saturating_sub(lag));
    let mut rejected = false;
    let mut one = async |payloads: Vec<Bytes>| -> Result<()> {
        let outcome = match &journal {
            Some(j) => {
                let mut txn = j.begin(&a.leases).await?;
                let outcome = txn.append(payloads).await;
                txn.commit().await?;
                outcome?
            }
            None => {
                // One stamp per batch: a batch must fit in one bucket, and a clock
                // read per message could cross a bucket boundary mid-batch.
                let ts = stamp();
                writer
                    .append(Batch { messages: payloads.into_iter().map(|p| (ts, p)).collect(), leases: vec![] })
                    .await?
            }
        };
        rejected |= !outcome.accepted;
        report(&outcome, a.log.json)
    };
    if a.stdin {
        // Standard input is read on a thread of its own (blocking reads), one line
        // at a time, so each outcome is printed as soon as it is known.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<String>>(1);
        std::thread::spawn(move || {
            for line in std::io::stdin().lines() {
                if tx.blocking_send(line).is_err() {
                    return;
                }
            }
        });
        while let Some(line) = rx.recv().await {
            one(vec![Bytes::from(line?)]).await?;
        }
    } else {
        one(a.messages.into_iter().map(Bytes::from).collect()).await?;
    }
    Ok(ExitCode::from(if rejected { REJECTED } else { 0 }))
}

fn report(o: &Outcome, json: bool) -> Result<()> {
    if json {
        let mut v = serde_json::to_value(o)?;
        if let Some(obj) = v.as_object_mut() {
            obj.insert("outcome".into(), if o.accepted { "accepted" } else { "rejected" }.into());
        }
        return out(&json_line(v));
    }
    let messages = match o.count {
        1 => format!("1 message (seq {})", o.first_seq),
        n => format!("{n} messages (seq {} to {})", o.first_seq, o.first_seq.saturating_add(n - 1)),
    };
    out(&format!(
        "{}: {messages} from writer {} in the bucket of {}: {}",
        if o.accepted { "accepted" } else { "rejected" },
        o.writer,
        at(o.bucket_ms),
        decision_words(o.decision)
    ))
}

/// Why an append was accepted or rejected, in words.
fn decision_words(d: Decision) -> &'static str {
    match d {
        Decision::Early => "written well before anyone may close the bucket",
        Decision::NoCloseBegun => "no close of the bucket had begun when it was written",
        Decision::InManifest => "the bucket was being closed and its manifest lists the batch",
        Decision::ClosedBeforeWrite => "the bucket was closed before the batch could be written",
        Decision::NotInManifest => "the bucket was closed and its manifest does not list the batch",
        Decision::BeforeFirstBucket => "the stamp is before the log's first bucket",
    }
}

/// The version of every JSON object `tenure bag … --json` prints.
const SCHEMA_VERSION: u64 = 1;

/// A time for people and for JSON `_at` fields: UTC, RFC 3339 with milliseconds
/// (`2026-11-24T10:32:05.123Z`). A time past the year 9999 (only a damaged or
/// hostile record holds one) is shown as its number.
fn at(ms: u64) -> String {
    match at_json(ms) {
        serde_json::Value::String(s) => s,
        _ => format!("{ms} ms (past the year 9999)"),
    }
}

/// [`at`] for JSON: `null` past the year 9999.
fn at_json(ms: u64) -> serde_json::Value {
    tenure::report::rfc3339_ms(ms).map_or(serde_json::Value::Null, Into::into)
}

/// One JSON line as tenure prints it: `"schema_version": 1` at the top, and
/// beside every time `<name>_ms` (unix ms) its `<name>_at` (RFC 3339, UTC, ms),
/// at any depth (a `null` time gets a `null` string).
fn json_line(value: serde_json::Value) -> String {
    let mut value = value;
    add_times(&mut value);
    if let Some(obj) = value.as_object_mut() {
        obj.insert("schema_version".into(), SCHEMA_VERSION.into());
    }
    value.to_string()
}

fn add_times(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(obj) => {
            let stamps: Vec<(String, serde_json::Value)> = obj
                .iter()
                .filter_map(|(k, t)| {
                    let name = k.strip_suffix("_ms")?;
                    let when = match t {
                        serde_json::Value::Null => serde_json::Value::Null,
                        t => at_json(t.as_u64()?),
                    };
                    Some((format!("{name}_at"), when))
                })
                .collect();
            for (k, t) in stamps {
                obj.entry(k).or_insert(t);
            }
            obj.values_mut().for_each(add_times);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(add_times),
        _ => {}
    }
}

#[derive(Serialize)]
struct JsonMessage<'a> {
    ts_ms: u64,
    writer: &'a str,
    seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_hex: Option<String>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    leases: &'a [tenure_bag::LeaseStamp],
}

fn message_json(m: &Message) -> Result<String> {
    let text = std::str::from_utf8(&m.payload).ok();
    let hex = text.is_none().then(|| m.payload.iter().map(|b| format!("{b:02x}")).collect());
    Ok(json_line(serde_json::to_value(JsonMessage {
        ts_ms: m.ts_ms,
        writer: &m.writer,
        seq: m.seq,
        payload: text,
        payload_hex: hex,
        leases: &m.leases,
    })?))
}

/// Prints one message: a JSON line, or `<time> <writer>#<seq> <body>` (the body
/// as written, last on the line, so `cut -d' ' -f3-` gives it back).
fn print_message(m: &Message, json: bool) -> Result<()> {
    if json {
        out(&message_json(m)?)
    } else {
        out(&format!("{} {}#{} {}", at(m.ts_ms), m.writer, m.seq, String::from_utf8_lossy(&m.payload)))
    }
}

/// `n thing` or `n things`.
fn count(n: u64, thing: &str) -> String {
    if n == 1 { format!("1 {thing}") } else { format!("{n} {thing}s") }
}

/// A word of a command line, quoted for a POSIX shell where it needs it.
fn shell_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-:=@%+,".contains(c);
    if !s.is_empty() && s.chars().all(plain) { s.to_string() } else { format!("'{}'", s.replace('\'', r"'\''")) }
}

impl LogArgs {
    /// The log and its store settings as a command line takes them.
    fn command_words(&self) -> String {
        let mut words = shell_word(&self.log);
        for (k, v) in &self.store_opts {
            words.push_str(&format!(" --store-opt {}", shell_word(&format!("{k}={v}"))));
        }
        words
    }
}

/// The read summary (standard error): what was read, whether it is final, and
/// if it is not, the commands that seal the open buckets or keep reading.
fn read_summary(r: &ReadResult, log: &LogArgs, now_ms: u64, following: bool) -> Vec<String> {
    let mut lines = Vec::new();
    let read = format!("read {}", count(r.messages.len() as u64, "message"));
    if r.to_ms <= r.from_ms {
        lines.push(format!("{read}: no buckets in the range yet (nothing was appended there)"));
    } else {
        let open = r.open.len() as u64;
        let mut parts = vec![format!("{} closed", count(r.closed, "bucket"))];
        if open > 0 {
            parts.push(format!("{open} open"));
        }
        if r.absent > 0 {
            parts.push(format!("{} with nothing stored yet", r.absent));
        }
        lines.push(format!("{read} from {} up to {}: {}", at(r.from_ms), at(r.to_ms), parts.join(", ")));
        if r.exact {
            lines.push("final: every bucket read is closed, no append can land in them any more".into());
        } else {
            let pending = open.saturating_add(r.absent);
            let (it, them) = if pending == 1 { ("is", "it") } else { ("are", "them") };
            let since = r.first_provisional_ms.map_or_else(String::new, |b| format!(" (from {})", at(b)));
            // `close` looks back 1 h by default; older buckets need `--all`.
            let all = r.first_provisional_ms.is_some_and(|b| b < now_ms.saturating_sub(3_600_000));
            let words = log.command_words();
            let close = format!("tenure bag close {words}{}", if all { " --all" } else { "" });
            let mut line = format!(
                "provisional: {} {it} not closed yet{since}, so appends may still land in {them}: run `{close}` to seal {them} once past the grace",
                count(pending, "bucket"),
            );
            if !following {
                line.push_str(&format!(", or `tenure bag read {words} --follow` to keep reading"));
            }
            lines.push(line);
        }
    }
    if r.snapshots > 0 {
        lines.push(format!("{} came from {}", count(r.snapshots, "chunk"), count(r.snapshots, "snapshot")));
    }
    for bad in &r.bad_snapshots {
        lines.push(format!("a damaged snapshot was skipped and its buckets read instead: {bad}"));
    }
    if r.late > 0 {
        lines.push(format!(
            "{} stamped after their lease's deadline left out (--include-late keeps them)",
            count(r.late, "message")
        ));
    }
    if r.misplaced > 0 {
        lines.push(format!("{} stamped outside their bucket left out", count(r.misplaced, "message")));
    }
    if r.ignored_bytes > 0 {
        lines.push(format!("{} ignored as torn tails (a writer stopped mid-write)", count(r.ignored_bytes, "byte")));
    }
    lines
}

/// The read summary as one JSON line.
fn read_summary_json(r: &ReadResult) -> Result<String> {
    let mut summary = serde_json::to_value(r)?;
    if let Some(obj) = summary.as_object_mut() {
        obj.insert("messages".into(), r.messages.len().into());
        obj.insert("state".into(), if r.exact { "final" } else { "provisional" }.into());
        obj.insert("open_at".into(), r.open.iter().map(|&b| at_json(b)).collect());
    }
    Ok(json_line(serde_json::json!({ "summary": summary })))
}

/// SIGINT and SIGTERM, registered at once (so a signal that comes before the
/// first wait is not lost, and does not kill the process).
struct Stop {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Stop {
    fn new() -> Result<Stop> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Stop { int: signal(SignalKind::interrupt())?, term: signal(SignalKind::terminate())? })
    }

    async fn wait(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
    }
}

/// Shortest and longest pause between two reads of `--follow`.
const FOLLOW_POLL: (Duration, Duration) = (Duration::from_millis(200), Duration::from_secs(1));

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, millis)
}

async fn read(a: ReadArgs) -> Result<ExitCode> {
    let mut stop = if a.follow { Some(Stop::new()?) } else { None };
    let json = a.log.json;
    let log = a.log.open(false)?;
    let opts =
        ReadOptions { from_ms: a.from, to_ms: a.to, include_late: a.include_late, skip_snapshots: a.no_snapshots };
    let result = match &mut stop {
        Some(stop) => tokio::select! {
            r = log.read(&opts) => r?,
            () = stop.wait() => return Ok(ExitCode::SUCCESS),
        },
        None => log.read(&opts).await?,
    };
    for m in &result.messages {
        print_message(m, json)?;
    }
    let Some(mut stop) = stop else {
        if json {
            out(&read_summary_json(&result)?)?;
        } else {
            for line in read_summary(&result, &a.log, now_ms(), false) {
                eprintln!("{line}");
            }
            report_skipped(&result);
        }
        return Ok(ExitCode::SUCCESS);
    };
    if !json {
        for line in read_summary(&result, &a.log, now_ms(), true) {
            eprintln!("{line}");
        }
        report_skipped(&result);
        eprintln!("following: new messages are printed as they are appended (Ctrl-C to stop)");
    }
    // Everything before the frontier is final and printed; what was printed at or
    // after it is remembered, so a later read of the same bucket prints only the
    // new messages.
    let frontier_of = |r: &ReadResult| r.first_provisional_ms.unwrap_or(r.to_ms);
    let mut frontier = a.from.unwrap_or(0).max(frontier_of(&result));
    let mut seen: HashSet<(u64, String, u64)> = HashSet::new();
    let remember = |seen: &mut HashSet<_>, m: &Message| seen.insert((m.ts_ms, m.writer.to_string(), m.seq));
    for m in &result.messages {
        remember(&mut seen, m);
    }
    let mut printed = result.messages.len() as u64;
    let mut pause = FOLLOW_POLL.0;
    loop {
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = stop.wait() => break,
        }
        let opts = ReadOptions { from_ms: Some(frontier), to_ms: None, ..opts.clone() };
        // Each read has the store's deadline (every storage operation does), and a
        // signal ends it at once: reading never writes, so nothing is left half-done.
        let read = tokio::select! {
            r = log.read(&opts) => r,
            () = stop.wait() => break,
        };
        let r = match read {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "reading the log failed; trying again");
                pause = FOLLOW_POLL.1;
                continue;
            }
        };
        let mut new = 0u64;
        for m in &r.messages {
            if remember(&mut seen, m) {
                print_message(m, json)?;
                new += 1;
            }
        }
        printed += new;
        frontier = frontier.max(frontier_of(&r));
        seen.retain(|(ts, _, _)| *ts >= frontier);
        pause = if new > 0 { FOLLOW_POLL.0 } else { (pause * 2).min(FOLLOW_POLL.1) };
    }
    if json {
        let summary = serde_json::json!({ "messages": printed, "state": "stopped", "next_from_ms": frontier });
        out(&json_line(serde_json::json!({ "follow": summary })))?;
    } else {
        eprintln!(
            "stopped following after {}; to go on from where it is not final: --from {}",
            count(printed, "message"),
            at(frontier)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Tells (on standard error) which entries tenure did not write a read skipped.
fn report_skipped(result: &ReadResult) {
    if result.skipped_total == 0 {
        return;
    }
    eprintln!(
        "skipped {} entries tenure did not write (never followed, opened or counted as data):",
        result.skipped_total
    );
    for s in &result.skipped {
        eprintln!("  {}: {}", s.path, s.reason);
    }
    if result.skipped_total > result.skipped.len() as u64 {
        eprintln!("  … and {} more", result.skipped_total - result.skipped.len() as u64);
    }
}

async fn close(a: CloseArgs) -> Result<ExitCode> {
    check_time("--bucket", a.bucket)?;
    check_duration("--lookback", a.lookback, MAX_DURATION)?;
    if a.interval.is_zero() {
        return Err(Fail::usage("--interval must be at least 1ms").into());
    }
    check_duration("--interval", a.interval, MAX_DURATION)?;
    let log = a.log.open(a.read_only_hint)?;
    if let Some(bucket) = a.bucket {
        let r = log.close(bucket).await?;
        out(&if a.log.json {
            let mut v = serde_json::to_value(&r)?;
            if let Some(obj) = v.as_object_mut() {
                obj.insert("outcome".into(), if r.published { "closed_here" } else { "already_closed" }.into());
            }
            json_line(v)
        } else {
            format!(
                "the bucket of {} is closed{}: its manifest lists {}",
                at(bucket),
                if r.published { " (by this command)" } else { " (it already was)" },
                count(r.items as u64, "item")
            )
        })?;
        for s in &r.skipped {
            eprintln!("not listed: {}: {}", s.path, s.reason);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut stop = std::pin::pin!(shutdown_signal());
    let lookback = if a.all { None } else { Some(a.lookback) };
    // A metronome waits for its storage to answer, however long that takes.
    let mut cursor = loop {
        match log.close_start(lookback).await {
            Ok(cursor) => break cursor,
            Err(e) if a.run_loop => tracing::warn!(error = %e, "cannot read the log; retrying"),
            Err(e) => return Err(e.into()),
        }
        tokio::select! {
            () = tokio::time::sleep(a.interval) => {}
            () = &mut stop => return Ok(ExitCode::SUCCESS),
        }
    };
    loop {
        let mut unclosable = false;
        match log.close_due(&mut cursor).await {
            Ok(round) => {
                let noteworthy = round.published > 0 || !round.skipped.is_empty() || !round.unclosable.is_empty();
                if noteworthy || !a.run_loop {
                    out(&if a.log.json {
                        json_line(serde_json::json!({ "round": round, "next_bucket_ms": cursor }))
                    } else if round.closed == 0 {
                        "no bucket to close: none is past its grace yet".to_string()
                    } else {
                        format!(
                            "closed {} up to {}: {} by this command, {} already closed",
                            count(round.closed, "bucket"),
                            at(cursor),
                            round.published,
                            round.closed - round.published
                        )
                    })?;
                }
                for s in &round.skipped {
                    eprintln!("not listed: {}: {}", s.path, s.reason);
                }
                for u in &round.unclosable {
                    eprintln!("cannot close bucket {} ({}): {}", u.bucket_ms, at(u.bucket_ms), u.error);
                }
                unclosable = !round.unclosable.is_empty();
            }
            Err(e) if a.run_loop => tracing::warn!(error = %e, "closing failed; retrying next round"),
            Err(e) => return Err(e.into()),
        }
        if !a.run_loop {
            // The others were closed; these need someone to remove what is in the way.
            return Ok(ExitCode::from(if unclosable { DATA } else { 0 }));
        }
        tokio::select! {
            () = tokio::time::sleep(a.interval) => {}
            () = &mut stop => return Ok(ExitCode::SUCCESS),
        }
    }
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

async fn audit(a: AuditArgs) -> Result<ExitCode> {
    let log = a.log.open(false)?;
    let verifier = witness_verifier(a.witness_key.as_deref())?;
    let skew = millis(check_duration("--witness-skew", a.witness_skew, MAX_DURATION)?);
    let read = log.read(&ReadOptions { include_late: true, ..ReadOptions::default() }).await?;
    let report = tenure_bag::audit(&read, verifier.as_deref(), skew);
    if a.log.json {
        for v in &report.violations {
            out(&json_line(serde_json::to_value(v)?))?;
        }
        let mut summary = serde_json::to_value(&report)?;
        if let Some(obj) = summary.as_object_mut() {
            obj.remove("violations");
            obj.insert("outcome".into(), if report.violations.is_empty() { "passed" } else { "failed" }.into());
            obj.insert("state".into(), if report.exact { "final" } else { "provisional" }.into());
            obj.insert("violation_count".into(), report.violations.len().into());
            obj.insert("skipped".into(), serde_json::to_value(&read.skipped)?);
            obj.insert("skipped_total".into(), read.skipped_total.into());
        }
        out(&json_line(serde_json::json!({ "summary": summary })))?;
    } else {
        for v in &report.violations {
            out(&format!(
                "{}: message {} {}#{} \"{}\" under lease {} token {} (deadline {}, watermark {}): {}",
                violation_words(v.kind),
                at(v.message.ts_ms),
                v.message.writer,
                v.message.seq,
                v.message.payload.escape_debug(),
                v.grant.name,
                v.grant.token,
                at(v.grant.deadline_ms),
                v.grant.watermark_ms.map_or_else(|| "none".to_string(), at),
                v.detail
            ))?;
        }
        eprintln!(
            "{} messages audited ({} without leases), {} violations; witnesses: {} verified, {} unverified{}",
            report.messages,
            report.unguarded,
            report.violations.len(),
            report.witnesses_verified,
            report.witnesses_unverified,
            if report.exact { "" } else { "; some buckets are still open (provisional)" }
        );
        report_skipped(&read);
    }
    Ok(ExitCode::from(if report.violations.is_empty() { 0 } else { REJECTED }))
}

/// What an audit found wrong, in words.
fn violation_words(kind: ViolationKind) -> &'static str {
    match kind {
        ViolationKind::AfterDeadline => "stamped after its lease's deadline",
        ViolationKind::NotAboveWatermark => "not above its predecessors' watermark",
        ViolationKind::Overlap => "overlaps a later holder's message",
        ViolationKind::Witness => "its witness does not match",
    }
}

#[cfg(feature = "server")]
#[derive(Debug)]
struct ServerKey([u8; 32]);

#[cfg(feature = "server")]
impl tenure_bag::WitnessVerifier for ServerKey {
    fn verify(&self, witness: &[u8]) -> Result<tenure_bag::VerifiedWitness, String> {
        let w = tenure_server::witness::verify(&self.0, witness).map_err(|e| e.to_string())?;
        Ok(tenure_bag::VerifiedWitness {
            name: w.name,
            token: w.token,
            deadline_ms: w.deadline_ms,
            server_time_ms: w.server_time_us / 1_000,
            watermark_ms: w.predecessor.and_then(|p| p.watermark_ms),
            authorizes_writes: w.kind.authorizes_writes(),
        })
    }
}

fn witness_verifier(key: Option<&str>) -> Result<Option<Box<dyn tenure_bag::WitnessVerifier>>> {
    let Some(key) = key else { return Ok(None) };
    #[cfg(feature = "server")]
    {
        let key =
            tenure_server::witness::public_key_from_hex(key).map_err(|e| anyhow::anyhow!("--witness-key: {e}"))?;
        Ok(Some(Box::new(ServerKey(key))))
    }
    #[cfg(not(feature = "server"))]
    {
        let _ = key;
        bail!("this build has no lease-server support (feature `server`), so it cannot verify witnesses")
    }
}

async fn compact(a: CompactArgs) -> Result<ExitCode> {
    let log = a.log.open(false)?;
    let report = log.compact().await?;
    let chunks = |c: &[u64]| c.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
    out(&if a.log.json {
        let mut v = serde_json::to_value(&report)?;
        if let Some(obj) = v.as_object_mut() {
            obj.insert("state".into(), if report.mismatched.is_empty() { "consistent" } else { "mismatched" }.into());
        }
        json_line(v)
    } else {
        let mut line = format!(
            "published {} ({}); {} already had one, {} published by another compactor first",
            count(report.published, "snapshot"),
            count(report.messages, "message"),
            count(report.existing, "chunk"),
            report.raced
        );
        if !report.too_large.is_empty() {
            line.push_str(&format!(
                "; chunks {} left to their buckets (too large for one snapshot)",
                chunks(&report.too_large)
            ));
        }
        if !report.mismatched.is_empty() {
            line.push_str(&format!(
                "; MISMATCHED: the snapshots of chunks {} differ from their buckets (damage or a bug)",
                chunks(&report.mismatched)
            ));
        }
        line
    })?;
    Ok(ExitCode::SUCCESS)
}

async fn bench(a: BenchArgs) -> Result<ExitCode> {
    for &n in &a.writers {
        check_count("--writers", n, 1024)?;
    }
    check_count("--payload", a.payload.max(1), 16 << 20)?;
    check_count("--close-buckets", a.close_buckets, 100_000)?;
    check_count("--read-messages", a.read_messages, 10_000_000)?;
    check_duration("--seconds", a.seconds, std::time::Duration::from_secs(3600))?;
    let opts = tenure_bag::bench::BenchOptions {
        dir: a.dir,
        writers: a.writers,
        seconds: a.seconds,
        payload: a.payload,
        fsync: !a.no_fsync,
        close_buckets: a.close_buckets,
        read_messages: a.read_messages,
    };
    let report = tokio::task::spawn_blocking(move || tenure_bag::bench::run(&opts)).await??;
    if a.json {
        // No times here: `_ms` figures are latencies, so no `_at` is added.
        let mut v = serde_json::to_value(&report)?;
        if let Some(obj) = v.as_object_mut() {
            obj.insert("schema_version".into(), SCHEMA_VERSION.into());
        }
        out(&v.to_string())?;
        return Ok(ExitCode::SUCCESS);
    }
    out(&format!(
        "tenure bag bench: fsync {}, payload {} B, load average {}",
        report.fsync, report.payload, report.loadavg.0
    ))?;
    out("writers  raw appends/s (per writer)   bag appends/s (per writer)   bag/raw  fast path")?;
    for f in &report.append {
        out(&format!(
            "{:>7}  {:>12.0} ({:>10.0})   {:>12.0} ({:>10.0})   {:>6.0}%  {}",
            f.writers,
            f.raw_total,
            f.raw_per_writer,
            f.bag_total,
            f.bag_per_writer,
            f.ratio * 100.0,
            f.fast_path
        ))?;
    }
    let (c, r) = (report.close_ms, report.raw_close_ms);
    out(&format!(
        "close, {} writer files: p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms   (raw floor p50 {:.2} ms  p99 {:.2} ms)",
        report.close_files, c.0, c.1, c.2, r.0, r.1
    ))?;
    out(&format!(
        "read+merge of {} messages: {:.0} msg/s from buckets, {:.0} msg/s from a snapshot",
        report.read_messages, report.read_buckets_per_s, report.read_snapshot_per_s
    ))?;
    out(&format!("load average after: {}", report.loadavg.1))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-24T10:32:05.123Z.
    const NOW: u64 = 1_795_516_325_123;

    #[test]
    fn times_are_dates_durations_ago_or_unix_milliseconds() {
        let day = 1_795_478_400_000; // 2026-11-24T00:00:00Z
        assert_eq!(parse_when("2026-11-24", NOW), Ok(day));
        assert_eq!(parse_when("2026-11-24T10:32:05.123Z", NOW), Ok(NOW));
        assert_eq!(parse_when("2026-11-24 10:32:05.123", NOW), Ok(NOW));
        assert_eq!(parse_when("2026-11-24T10:32Z", NOW), Ok(day + 37_920_000));
        assert_eq!(parse_when("2026-11-24T11:32:05.123+01:00", NOW), Ok(NOW));
        assert_eq!(parse_when("2026-11-24T05:02:05.123-05:30", NOW), Ok(NOW));
        assert_eq!(parse_when("-10m", NOW), Ok(NOW - 600_000));
        assert_eq!(parse_when("10m", NOW), Ok(NOW - 600_000));
        assert_eq!(parse_when("-1d", NOW), Ok(NOW - 86_400_000));
        assert_eq!(parse_when("-1h30m", NOW), Ok(NOW - 5_400_000));
        assert_eq!(parse_when("1764000000000", NOW), Ok(1_764_000_000_000));
        assert_eq!(parse_when("0", NOW), Ok(0));
        assert_eq!(parse_when("1970-01-01", NOW), Ok(0));
        assert_eq!(parse_when("9999-12-31T23:59:59.999Z", NOW), Ok(MAX_TIME_MS));
        assert_eq!(format!("{}", at(NOW)), "2026-11-24T10:32:05.123Z");
    }

    #[test]
    fn absurd_times_are_refused_saying_what_was_given_and_what_is_accepted() {
        for s in [
            "1969-01-01",
            "1969-12-31T23:59:59Z",
            "1970-01-01T00:30:00+01:00",
            "-1970-01-01",
            "99999999999999999999",
            "253402300800000",
            "10000-01-01",
            "9999-12-31T23:59:59.999-01:00",
            "-100y",
            "-600000000y",
            "+10m",
            "-5",
            "1.5",
            "-inf",
            "NaN",
            "",
            "soon",
            "2026-13-01",
            "2026-02-30",
            "2026-11-24T25:00:00Z",
            "2026-11-24T10:00:00+24:00",
            "2026-11-24Tnonsense",
        ] {
            let e = parse_when(s, NOW).expect_err(s);
            assert!(e.contains(&format!("{s:?}")) && e.contains("a date (2026-11-24)"), "{s}: {e}");
        }
        assert!(parse_when("1969-01-01", NOW).is_err_and(|e| e.contains("before 1970")));
        assert!(parse_when("-100y", NOW).is_err_and(|e| e.contains("before 1970")));
        assert!(parse_when("99999999999999999999", NOW).is_err_and(|e| e.contains("past the year 9999")));
    }

    #[test]
    fn human_output_has_no_debug_names_or_ranges() {
        let o = Outcome {
            accepted: false,
            decision: Decision::NotInManifest,
            bucket_ms: NOW - NOW % 1000,
            writer: "w-1".into(),
            first_seq: 12,
            count: 28,
            max_ts_ms: NOW,
        };
        let words = format!("{} {}", decision_words(o.decision), at(o.bucket_ms));
        for bad in ["Some(", "NotInManifest", ".."] {
            assert!(!words.contains(bad), "{words}");
        }
        assert_eq!(at(MAX_TIME_MS + 1), format!("{} ms (past the year 9999)", MAX_TIME_MS + 1));
        assert_eq!(shell_word("/tmp/a b"), "'/tmp/a b'");
        assert_eq!(shell_word("s3://b/p?x=1"), "'s3://b/p?x=1'");
        assert_eq!(shell_word("file:///srv/log"), "file:///srv/log");
    }

    #[test]
    fn json_times_come_in_both_forms_at_any_depth() {
        let line = json_line(serde_json::json!({ "a_ms": NOW, "inner": [{ "w_ms": null, "b_ms": 0 }] }));
        let v: serde_json::Value = serde_json::from_str(&line).expect("json");
        assert_eq!(v["schema_version"], 1);
        assert_eq!(v["a_at"], "2026-11-24T10:32:05.123Z");
        assert_eq!(v["inner"][0]["w_at"], serde_json::Value::Null);
        assert_eq!(v["inner"][0]["b_at"], "1970-01-01T00:00:00.000Z");
    }

    proptest::proptest! {
        #[test]
        fn any_string_is_a_time_in_range_or_an_error(s in "\\PC*", now in 0..=MAX_TIME_MS) {
            if let Ok(ms) = parse_when(&s, now) {
                proptest::prop_assert!(ms <= MAX_TIME_MS);
            }
        }

        #[test]
        fn time_like_strings_are_a_time_in_range_or_an_error(
            s in "[-+]?([0-9]{1,22}|[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\\.[0-9]{0,12})?)?([Zz]|[-+][0-9]{2}:[0-9]{2})?)?|[0-9]{1,25}(ns|ms|s|m|h|d|w|y))",
            now in 0..=MAX_TIME_MS,
        ) {
            if let Ok(ms) = parse_when(&s, now) {
                proptest::prop_assert!(ms <= MAX_TIME_MS);
            }
        }

        #[test]
        fn every_time_printed_is_read_back(ms in 0..=MAX_TIME_MS) {
            proptest::prop_assert_eq!(parse_when(&at(ms), 0), Ok(ms));
        }
    }
}
