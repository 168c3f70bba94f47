//! `tenure bag append`: messages from the arguments or standard input, appended
//! as one batch by a writer, and the outcome (accepted, or why the bucket refused it).

use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use tenure::limits::{MAX_DURATION, MAX_TTL, check_duration, millis};
use tenure::{Client, Holder, LeaseOptions, OpenOptions};
use tenure_bag::{Batch, Decision, Journal, Outcome, Writer};

use crate::exit::Fail;

use super::format::{at, json_line, out};
use super::{AppendArgs, REJECTED, check_time};

pub(super) async fn append(a: AppendArgs) -> Result<ExitCode> {
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

fn writer_prefix(explicit: Option<&str>) -> String {
    let raw = explicit.map_or_else(|| Holder::current().host, str::to_string);
    let clean: String =
        raw.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).take(40).collect();
    if clean.is_empty() { "w".into() } else { clean }
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
pub(super) fn decision_words(d: Decision) -> &'static str {
    match d {
        Decision::Early => "written well before anyone may close the bucket",
        Decision::NoCloseBegun => "no close of the bucket had begun when it was written",
        Decision::InManifest => "the bucket was being closed and its manifest lists the batch",
        Decision::ClosedBeforeWrite => "the bucket was closed before the batch could be written",
        Decision::NotInManifest => "the bucket was closed and its manifest does not list the batch",
        Decision::BeforeFirstBucket => "the stamp is before the log's first bucket",
    }
}
