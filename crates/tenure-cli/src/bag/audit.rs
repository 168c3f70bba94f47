//! `tenure bag audit`: checks a bag's journal and buckets against each other
//! (and the lease server's witnesses, with its public key) and lists violations.

use std::process::ExitCode;

use anyhow::Result;
use tenure::limits::{MAX_DURATION, check_duration, millis};
use tenure_bag::{ReadOptions, ViolationKind};

use super::format::{at, json_line, out};
use super::read::report_skipped;
use super::{AuditArgs, REJECTED};

pub(super) async fn audit(a: AuditArgs) -> Result<ExitCode> {
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
        anyhow::bail!("this build has no lease-server support (feature `server`), so it cannot verify witnesses")
    }
}
