//! `tenure bag compact`: merges the segments of closed buckets.

use std::process::ExitCode;

use anyhow::Result;

use super::CompactArgs;
use super::format::{count, json_line, out};

pub(super) async fn compact(a: CompactArgs) -> Result<ExitCode> {
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
