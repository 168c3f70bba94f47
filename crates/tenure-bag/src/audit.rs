//! Audit: does every accepted message run under a grant that allowed it?
//!
//! For every message of the log (closed buckets give exactly the accepted ones;
//! open buckets are audited too and reported as provisional), and every lease it
//! carries:
//!
//! - **after deadline**: stamped at or after the grant's deadline (readers drop
//!   these; the audit reports them);
//! - **not above watermark**: stamped at or below the watermark its grant learned
//!   from its predecessors;
//! - **overlap**: under one lease name, a message of a *lower* token stamped at or
//!   after a message of a higher token — two grants' writes interleave, which the
//!   watermarks exist to prevent (e.g. a holder that kept writing after losing
//!   its lease);
//! - **witness**: when the message carries a witness and a [`WitnessVerifier`] is
//!   given, the signature must verify, the witness must name the same lease,
//!   token, deadline and watermark, authorise writes, and not have been signed
//!   after the message's timestamp by more than the skew bound (backdating).
//!   Without a verifier, witnesses are counted as unverified.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::frame::{LeaseStamp, Message};
use crate::read::ReadResult;

/// What a witness says, once its signature is verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedWitness {
    /// Lease name.
    pub name: String,
    /// Fencing token.
    pub token: u64,
    /// Deadline (server wall ms).
    pub deadline_ms: u64,
    /// The server's signed time (wall ms).
    pub server_time_ms: u64,
    /// The predecessors' watermark the grant carried.
    pub watermark_ms: Option<u64>,
    /// Whether the witness authorises writes (not a tentative grant).
    pub authorizes_writes: bool,
}

/// Checks witness signatures (the lease server's public key lives here).
pub trait WitnessVerifier: Send + Sync + fmt::Debug {
    /// Verifies `witness` and returns what it says, or why it is invalid.
    fn verify(&self, witness: &[u8]) -> Result<VerifiedWitness, String>;
}

/// A reference to a message, for reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MessageRef {
    /// Timestamp.
    pub ts_ms: u64,
    /// Writer.
    pub writer: String,
    /// Sequence.
    pub seq: u64,
    /// Payload (lossy UTF-8, at most 80 bytes).
    pub payload: String,
}

impl From<&Message> for MessageRef {
    fn from(m: &Message) -> Self {
        let p = &m.payload[..m.payload.len().min(80)];
        Self { ts_ms: m.ts_ms, writer: m.writer.to_string(), seq: m.seq, payload: String::from_utf8_lossy(p).into() }
    }
}

/// What is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ViolationKind {
    /// Stamped at or after the grant's deadline.
    AfterDeadline,
    /// Stamped at or below the predecessors' watermark.
    NotAboveWatermark,
    /// A lower token's message stamped at or after a higher token's.
    Overlap,
    /// The witness does not verify or does not match the stamp.
    Witness,
}

/// One violation: the message, the grant it claims, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// What is wrong.
    pub kind: ViolationKind,
    /// The message.
    pub message: MessageRef,
    /// The grant it was written under.
    pub grant: LeaseStamp,
    /// For overlaps: the higher token's message it collides with.
    pub other: Option<MessageRef>,
    /// For humans.
    pub detail: String,
}

/// The audit's findings.
#[derive(Clone, Debug, Default, Serialize)]
pub struct AuditReport {
    /// Messages checked.
    pub messages: u64,
    /// Messages that carry no lease (plain bag messages: nothing to check).
    pub unguarded: u64,
    /// Witnesses verified.
    pub witnesses_verified: u64,
    /// Witnesses present but not verified (no verifier given).
    pub witnesses_unverified: u64,
    /// Whether every bucket was closed (otherwise the findings are provisional).
    pub exact: bool,
    /// The violations.
    pub violations: Vec<Violation>,
}

/// Audits `read` (read with `include_late`, so late messages are seen).
pub fn audit(read: &ReadResult, verifier: Option<&dyn WitnessVerifier>, max_skew_ms: u64) -> AuditReport {
    let mut report = AuditReport { exact: read.exact, ..AuditReport::default() };
    // Per lease name and token: the earliest and latest message.
    let mut spans: BTreeMap<&str, BTreeMap<u64, (&Message, &Message, &LeaseStamp)>> = BTreeMap::new();
    for m in &read.messages {
        report.messages += 1;
        if m.leases.is_empty() {
            report.unguarded += 1;
        }
        for l in m.leases.iter() {
            let mut flag = |kind, detail: String| {
                report.violations.push(Violation { kind, message: m.into(), grant: l.clone(), other: None, detail })
            };
            if m.ts_ms >= l.deadline_ms {
                flag(
                    ViolationKind::AfterDeadline,
                    format!("stamped {} ms after the deadline", m.ts_ms - l.deadline_ms),
                );
            }
            if let Some(w) = l.watermark_ms
                && m.ts_ms <= w
            {
                flag(ViolationKind::NotAboveWatermark, format!("stamped at {} but the watermark is {w}", m.ts_ms));
            }
            match (&l.witness, verifier) {
                (None, _) => {}
                (Some(_), None) => report.witnesses_unverified += 1,
                (Some(bytes), Some(v)) => match v.verify(bytes) {
                    Err(why) => flag(ViolationKind::Witness, format!("the witness does not verify: {why}")),
                    Ok(w) => {
                        report.witnesses_verified += 1;
                        if let Some(why) = witness_mismatch(&w, l, m.ts_ms, max_skew_ms) {
                            flag(ViolationKind::Witness, why);
                        }
                    }
                },
            }
            let span = spans.entry(&l.name).or_default().entry(l.token).or_insert((m, m, l));
            if m.ts_ms < span.0.ts_ms {
                span.0 = m;
            }
            if m.ts_ms >= span.1.ts_ms {
                span.1 = m;
            }
        }
    }
    for tokens in spans.values() {
        // Walking tokens upwards, the latest message of every lower token must be
        // stamped strictly before the earliest message of each higher token.
        let mut latest: Option<(&Message, &LeaseStamp)> = None;
        for (first, last, stamp) in tokens.values() {
            if let Some((prev, prev_stamp)) = latest
                && prev.ts_ms >= first.ts_ms
            {
                report.violations.push(Violation {
                    kind: ViolationKind::Overlap,
                    message: prev.into(),
                    grant: prev_stamp.clone(),
                    other: Some((*first).into()),
                    detail: format!(
                        "token {} wrote at {} but token {} had already written at {}",
                        prev_stamp.token, prev.ts_ms, stamp.token, first.ts_ms
                    ),
                });
            }
            if latest.is_none_or(|(p, _)| last.ts_ms > p.ts_ms) {
                latest = Some((last, stamp));
            }
        }
    }
    report
}

fn witness_mismatch(w: &VerifiedWitness, l: &LeaseStamp, ts_ms: u64, max_skew_ms: u64) -> Option<String> {
    if !w.authorizes_writes {
        return Some("the witness is of a tentative grant, which does not authorise writes".into());
    }
    if w.name != l.name || w.token != l.token {
        return Some(format!("the witness is for {}@{}, not {}@{}", w.name, w.token, l.name, l.token));
    }
    if w.deadline_ms != l.deadline_ms {
        return Some(format!("the witness's deadline is {}, the message claims {}", w.deadline_ms, l.deadline_ms));
    }
    if w.watermark_ms != l.watermark_ms {
        return Some(format!(
            "the witness's watermark is {:?}, the message claims {:?}",
            w.watermark_ms, l.watermark_ms
        ));
    }
    if ts_ms.saturating_add(max_skew_ms) < w.server_time_ms {
        return Some(format!("stamped at {ts_ms}, before the grant was signed at {}", w.server_time_ms));
    }
    None
}
