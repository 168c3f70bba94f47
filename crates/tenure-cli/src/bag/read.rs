//! `tenure bag read`: the messages of a time range in order, once or followed
//! until a signal, and the summary of what was read and what was skipped.

use std::collections::HashSet;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use tenure_bag::{Message, ReadOptions, ReadResult};

use super::format::{at, at_json, count, json_line, out, print_message, shell_word};
use super::when::now_ms;
use super::{LogArgs, ReadArgs};

pub(super) async fn read(a: ReadArgs) -> Result<ExitCode> {
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

/// Tells (on standard error) which entries tenure did not write a read skipped.
pub(super) fn report_skipped(result: &ReadResult) {
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
