//! Reading a range of buckets: snapshots where they exist, buckets elsewhere,
//! merged in (timestamp, writer, sequence) order. Never writes.
//!
//! Buckets are disjoint time ranges and each bucket's messages are sorted, so the
//! merge is a concatenation in bucket order. A closed bucket (or a snapshot, which
//! is made only of closed buckets) gives exactly the accepted messages; open and
//! absent buckets are counted so callers can tell a final answer (`exact`) from a
//! provisional one.
//!
//! Messages written under a lease and stamped at or after that lease's deadline
//! are dropped (they are reported in `late`): their writer may have acted after
//! losing the lease. A snapshot that fails its checksum is skipped with a warning
//! and its buckets are read instead (they are never deleted).
//!
//! Entries tenure did not write (a symlink, directory, FIFO or device named like
//! a data file, bucket, manifest or snapshot; a file larger than any tenure
//! writes) are never followed or opened: they are skipped and listed in
//! [`ReadResult::skipped`], and the read goes on. A bucket whose manifest's name
//! is held by such an entry cannot be closed, so it is read as open (provisional).

use futures::StreamExt;
use serde::Serialize;
use tenure_core::Result;
use tenure_core::limits::MAX_TIME_MS;

use crate::frame::Message;
use crate::layout::{LogConfig, Sweep};
use crate::protocol::{self, BucketState, Loaded, Skipped, Storage};
use crate::snapshot;

/// Which messages to read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// First timestamp (ms) of interest; default: the log's first bucket.
    pub from_ms: Option<u64>,
    /// End (exclusive); default: the end of the newest existing bucket.
    pub to_ms: Option<u64>,
    /// Keep messages stamped after their lease's deadline (for audits).
    pub include_late: bool,
    /// Ignore snapshots and read every bucket.
    pub skip_snapshots: bool,
}

/// What a read found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReadResult {
    /// The messages, in (timestamp, writer, sequence) order.
    #[serde(skip)]
    pub messages: Vec<Message>,
    /// Range read (bucket-aligned `[from, to)`).
    pub from_ms: u64,
    /// End of the range.
    pub to_ms: u64,
    /// Buckets read that are closed (or come from snapshots): final.
    pub closed: u64,
    /// Buckets that exist but are not closed yet: provisional.
    pub open: Vec<u64>,
    /// Buckets in the range with nothing stored and no close: provisional.
    pub absent: u64,
    /// Snapshots used.
    pub snapshots: u64,
    /// Snapshots skipped because they were damaged.
    pub bad_snapshots: Vec<String>,
    /// Messages dropped because they were stamped after their lease's deadline.
    pub late: u64,
    /// Bytes ignored as torn tails.
    pub ignored_bytes: u64,
    /// Messages dropped for a timestamp outside their bucket.
    pub misplaced: u64,
    /// Entries tenure did not write, skipped (the first [`MAX_SKIPPED_LISTED`]).
    pub skipped: Vec<Skipped>,
    /// How many entries were skipped in all.
    pub skipped_total: u64,
    /// Every bucket in the range is closed: this answer is final.
    pub exact: bool,
    /// The first bucket in the range that is not closed (open, or with nothing
    /// stored yet): everything before it is final. `None` when `exact`. A reader
    /// that keeps reading (`tenure bag read --follow`) starts its next read here.
    pub first_provisional_ms: Option<u64>,
}

/// Skipped entries a read lists (it counts them all).
pub const MAX_SKIPPED_LISTED: usize = 1000;

impl ReadResult {
    fn skip(&mut self, odd: Vec<Skipped>) {
        for odd in odd {
            tracing::warn!(path = odd.path, reason = odd.reason, "reading: skipped an entry tenure did not write");
            self.skipped_total += 1;
            if self.skipped.len() < MAX_SKIPPED_LISTED {
                self.skipped.push(odd);
            }
        }
    }
}

/// Buckets read concurrently from object stores.
const CONCURRENCY: usize = 16;

/// The first bucket of `[from, to)` that neither a snapshot (`covered`) nor a
/// closed bucket (`closed`, ascending) makes final. Walks only what is final
/// before the first gap, so it costs no more than the read itself.
fn first_provisional(cfg: &LogConfig, from: u64, to: u64, covered: &[(u64, u64)], closed: &[u64]) -> Option<u64> {
    let mut b = from;
    while b < to {
        if let Some(&(_, hi)) = covered.iter().find(|&&(lo, hi)| lo <= b && b < hi) {
            b = hi;
        } else if closed.binary_search(&b).is_ok() {
            b = cfg.end_of(b);
        } else {
            return Some(b);
        }
    }
    None
}

/// The runs of buckets in `[from, to)` that published sweeps closed empty,
/// merged and in order.
fn emptied_runs(sweeps: &[Sweep], from: u64, to: u64) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = sweeps
        .iter()
        .flat_map(|w| w.empty.iter().flatten())
        .map(|&(a, b)| (a.max(from), b.min(to)))
        .filter(|&(a, b)| a < b)
        .collect();
    runs.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(runs.len());
    for (a, b) in runs {
        match merged.last_mut() {
            Some((_, end)) if a <= *end => *end = (*end).max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

pub(crate) async fn read_range<S: Storage>(s: &S, cfg: &LogConfig, opts: &ReadOptions) -> Result<ReadResult> {
    // Nothing is stored past the year 9999 (writers refuse it): a range reaching
    // further ends there.
    let end_of_time = cfg.end_of(cfg.bucket_of(MAX_TIME_MS));
    let from = cfg.bucket_of(opts.from_ms.unwrap_or(cfg.first_bucket_ms).max(cfg.first_bucket_ms).min(MAX_TIME_MS));
    let listed = s.list_buckets(from, opts.to_ms.unwrap_or(end_of_time).min(end_of_time)).await?;
    let mut out = ReadResult::default();
    out.skip(listed.skipped);
    // Only bucket-aligned names are buckets (a stray directory is not).
    let mut existing_all = listed.found;
    existing_all.retain(|&b| cfg.bucket_of(b) == b);
    let to = match opts.to_ms {
        Some(t) => cfg.bucket_of(t.min(end_of_time).saturating_add(cfg.width_ms - 1)).max(from),
        None => existing_all.last().map_or(from, |&b| cfg.end_of(b)),
    };
    (out.from_ms, out.to_ms) = (from, to);
    let mut parts: Vec<(u64, Vec<Message>)> = Vec::new();
    let mut covered: Vec<(u64, u64)> = Vec::new();
    let mut snapshot_buckets = 0u64;
    if !opts.skip_snapshots && from < to {
        let listed = s.list_snapshots().await?;
        out.skip(listed.skipped);
        for chunk in listed.found {
            let (start, end) = cfg.chunk_range(chunk);
            if end <= from || start >= to {
                continue;
            }
            let bytes = match s.load_snapshot(chunk).await? {
                Loaded::Found(bytes) => bytes,
                Loaded::Absent => continue,
                Loaded::Odd(odd) => {
                    out.skip(vec![odd]);
                    continue;
                }
            };
            match snapshot::decode(&bytes, cfg, chunk) {
                Ok(msgs) => {
                    out.snapshots += 1;
                    let lo = start.max(from);
                    let hi = end.min(to);
                    snapshot_buckets += (hi - lo) / cfg.width_ms;
                    covered.push((lo, hi));
                    parts.push((lo, msgs.into_iter().filter(|m| (lo..hi).contains(&m.ts_ms)).collect()));
                }
                Err(why) => {
                    tracing::warn!(chunk, why, "skipping a damaged snapshot; reading its buckets");
                    out.bad_snapshots.push(format!("chunk {chunk}: {why}"));
                }
            }
        }
    }
    out.closed += snapshot_buckets;
    let in_snapshot = |b: u64| covered.iter().any(|&(lo, hi)| (lo..hi).contains(&b));
    let buckets: Vec<u64> = existing_all.into_iter().filter(|&b| b < to && !in_snapshot(b)).collect();
    // Counted, not enumerated: a range can hold billions of buckets (`--to` far
    // ahead, 1 ms buckets). Snapshots cover disjoint, bucket-aligned ranges.
    let uncovered = (to - from).div_ceil(cfg.width_ms).saturating_sub(snapshot_buckets);
    out.absent = uncovered.saturating_sub(buckets.len() as u64);
    // Sweeps: runs of buckets closed empty at once. An emptied bucket is final
    // whether or not it exists (a late writer's data there was rejected); one a
    // sweep covers but has not settled yet is provisional whatever its own
    // manifest says.
    let sweeps = if from < to { s.sweeps(from, to).await? } else { Vec::new() };
    let emptied = emptied_runs(&sweeps, from, to);
    let (emptied_buckets, buckets): (Vec<u64>, Vec<u64>) =
        buckets.into_iter().partition(|&b| protocol::swept(&sweeps, b) == protocol::Swept::Empty);
    // The emptied buckets that do not exist were counted absent above.
    let emptied_total: u64 = emptied
        .iter()
        .map(|&(a, b)| {
            let snapshot: u64 = covered.iter().map(|&(lo, hi)| hi.min(b).saturating_sub(lo.max(a))).sum();
            ((b - a).saturating_sub(snapshot)) / cfg.width_ms
        })
        .sum();
    let emptied_absent = emptied_total.saturating_sub(emptied_buckets.len() as u64);
    out.absent = out.absent.saturating_sub(emptied_absent);
    out.closed += emptied_total;
    let mut reads =
        futures::stream::iter(buckets.iter().map(|&b| protocol::read_bucket(s, cfg, b))).buffered(CONCURRENCY);
    let mut i = 0;
    let mut closed_buckets = Vec::new();
    while let Some(read) = reads.next().await {
        let mut read = read?;
        let bucket = buckets[i];
        i += 1;
        if read.state == BucketState::Closed && protocol::swept(&sweeps, bucket) == protocol::Swept::Unsettled {
            read.state = BucketState::Open;
        }
        match read.state {
            BucketState::Closed => {
                out.closed += 1;
                closed_buckets.push(bucket);
            }
            BucketState::Open => out.open.push(bucket),
            BucketState::Absent => out.absent += 1,
        }
        out.ignored_bytes = out.ignored_bytes.saturating_add(read.ignored_bytes);
        out.misplaced += read.misplaced;
        out.skip(read.skipped);
        parts.push((bucket, read.messages));
    }
    parts.sort_by_key(|p| p.0);
    let total = parts.iter().map(|p| p.1.len()).sum();
    out.messages.reserve(total);
    for (_, msgs) in parts {
        for m in msgs {
            if !opts.include_late && m.after_deadline().is_some() {
                out.late += 1;
            } else {
                out.messages.push(m);
            }
        }
    }
    out.exact = out.open.is_empty() && out.absent == 0;
    covered.extend(emptied);
    out.first_provisional_ms = first_provisional(cfg, from, to, &covered, &closed_buckets);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_provisional_bucket_is_the_first_gap_in_what_is_final() {
        let cfg = LogConfig { width_ms: 10, grace_ms: 20, max_skew_ms: 5, chunk_buckets: 3, first_bucket_ms: 0 };
        // Buckets 0..100: a snapshot covers 0, 10, 20; 30 and 40 are closed; 50 is not.
        assert_eq!(first_provisional(&cfg, 0, 100, &[(0, 30)], &[30, 40, 60]), Some(50));
        assert_eq!(first_provisional(&cfg, 0, 50, &[(0, 30)], &[30, 40]), None);
        assert_eq!(first_provisional(&cfg, 0, 50, &[], &[]), Some(0));
        assert_eq!(first_provisional(&cfg, 40, 40, &[], &[]), None);
        // A snapshot reaching past the range ends the walk.
        assert_eq!(first_provisional(&cfg, 10, 20, &[(0, 30)], &[]), None);
    }
}
