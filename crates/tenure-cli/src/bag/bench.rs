//! `tenure bag bench`: appends from several writers and closes meanwhile, and
//! reports the rates.

use std::process::ExitCode;

use anyhow::Result;
use tenure::limits::check_duration;

use super::format::{SCHEMA_VERSION, out};
use super::{BenchArgs, check_count};

pub(super) async fn bench(a: BenchArgs) -> Result<ExitCode> {
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
