//! `tenure bag`: closable bags of timestamped messages and the lease-guarded
//! journal, on a directory or an object store (see the `tenure_bag` crate).
//!
//! Exit codes besides tenure's own: `1` when an append was rejected (its bucket
//! was closed) or an audit found violations.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::{Args, Subcommand};
use serde::Serialize;
use tenure::limits::{MAX_DURATION, MAX_TIME_MS, MAX_TTL, check_duration, millis};
use tenure::{Client, Holder, LeaseOptions, OpenOptions};
use tenure_bag::{BagOptions, Batch, Journal, Log, LogSettings, Message, Outcome, ReadOptions, ReadResult, Writer};

use crate::args::duration;
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
    /// Print JSON lines.
    #[arg(long)]
    json: bool,
    /// Skip the check that an object store enforces conditional writes before the
    /// first write or close. Only for stores you know are safe.
    #[arg(long)]
    trust_store: bool,
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
        Log::open(&self.log, opts).with_context(|| format!("opening log {}", self.log))
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
struct ReadArgs {
    #[command(flatten)]
    log: LogArgs,
    /// From this time (unix ms); default: the log's first bucket.
    #[arg(long)]
    from: Option<u64>,
    /// Up to this time (unix ms, exclusive); default: the newest bucket.
    #[arg(long)]
    to: Option<u64>,
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
    check_time("--at", a.at)?;
    let lag = millis(check_duration("--lag", a.lag.unwrap_or_default(), MAX_DURATION)?);
    check_duration("--ttl", a.ttl, MAX_TTL)?;
    let log = a.log.open(a.read_only_hint)?;
    let writer = log.writer(Writer::unique_id(&writer_prefix(a.writer.as_deref())))?;
    let journal = match &a.lease_store {
        Some(url) => {
            let store = crate::stores::open(url, &OpenOptions::default())
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
        if a.messages.is_empty() {
            bail!("nothing to append: give messages or --stdin");
        }
        one(a.messages.into_iter().map(Bytes::from).collect()).await?;
    }
    Ok(ExitCode::from(if rejected { REJECTED } else { 0 }))
}

fn report(o: &Outcome, json: bool) -> Result<()> {
    if json {
        return out(&serde_json::to_string(o)?);
    }
    let verdict = if o.accepted { "accepted" } else { "REJECTED" };
    out(&format!(
        "{verdict} ({:?}): bucket {} writer {} seq {}..{}",
        o.decision,
        o.bucket_ms,
        o.writer,
        o.first_seq,
        o.first_seq.saturating_add(o.count)
    ))
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
    Ok(serde_json::to_string(&JsonMessage {
        ts_ms: m.ts_ms,
        writer: &m.writer,
        seq: m.seq,
        payload: text,
        payload_hex: hex,
        leases: &m.leases,
    })?)
}

async fn read(a: ReadArgs) -> Result<ExitCode> {
    check_time("--from", a.from)?;
    check_time("--to", a.to)?;
    let log = a.log.open(false)?;
    let opts =
        ReadOptions { from_ms: a.from, to_ms: a.to, include_late: a.include_late, skip_snapshots: a.no_snapshots };
    let result = log.read(&opts).await?;
    for m in &result.messages {
        if a.log.json {
            out(&message_json(m)?)?;
        } else {
            out(&format!("{} {}#{} {}", m.ts_ms, m.writer, m.seq, String::from_utf8_lossy(&m.payload)))?;
        }
    }
    if a.log.json {
        out(&serde_json::json!({ "summary": result }).to_string())?;
    } else {
        eprintln!(
            "{} messages; {} buckets closed, {} open, {} absent{}; {} late dropped",
            result.messages.len(),
            result.closed,
            result.open.len(),
            result.absent,
            if result.exact { " (final)" } else { " (provisional)" },
            result.late
        );
        report_skipped(&result);
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
            serde_json::to_string(&r)?
        } else {
            format!("bucket {bucket} closed ({} items)", r.items)
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
                        serde_json::json!({ "round": round, "next_bucket_ms": cursor }).to_string()
                    } else {
                        format!("closed {} buckets ({} manifests published here)", round.closed, round.published)
                    })?;
                }
                for s in &round.skipped {
                    eprintln!("not listed: {}: {}", s.path, s.reason);
                }
                for u in &round.unclosable {
                    eprintln!("cannot close bucket {}: {}", u.bucket_ms, u.error);
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
            out(&serde_json::to_string(v)?)?;
        }
        let mut summary = serde_json::to_value(&report)?;
        if let Some(obj) = summary.as_object_mut() {
            obj.remove("violations");
            obj.insert("violation_count".into(), report.violations.len().into());
            obj.insert("skipped".into(), serde_json::to_value(&read.skipped)?);
            obj.insert("skipped_total".into(), read.skipped_total.into());
        }
        out(&serde_json::json!({ "summary": summary }).to_string())?;
    } else {
        for v in &report.violations {
            out(&format!(
                "{:?}: message {} {}#{} {:?} under {}@{} (deadline {}, watermark {:?}): {}",
                v.kind,
                v.message.ts_ms,
                v.message.writer,
                v.message.seq,
                v.message.payload,
                v.grant.name,
                v.grant.token,
                v.grant.deadline_ms,
                v.grant.watermark_ms,
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
    out(&if a.log.json {
        serde_json::to_string(&report)?
    } else {
        format!(
            "{} snapshots published ({} messages), {} existed, {} raced{}",
            report.published,
            report.messages,
            report.existing,
            report.raced,
            if report.mismatched.is_empty() { String::new() } else { format!("; MISMATCHED: {:?}", report.mismatched) }
        )
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
        out(&serde_json::to_string(&report)?)?;
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
