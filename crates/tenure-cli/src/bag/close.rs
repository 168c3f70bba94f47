//! `tenure bag close`: closes the buckets of a bag up to a time, once or on a
//! schedule until a signal, under the journal's lease.

use std::process::ExitCode;

use anyhow::Result;
use tenure::limits::{MAX_DURATION, check_duration};

use crate::exit::{DATA, Fail};

use super::format::{at, count, json_line, out};
use super::{CloseArgs, check_time};

pub(super) async fn close(a: CloseArgs) -> Result<ExitCode> {
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
