//! Compaction: folding closed buckets into snapshots so reads stay fast.
//!
//! A snapshot covers one *chunk*: a fixed, aligned run of `chunk_buckets`
//! buckets (in the log's configuration, so every compactor cuts the same
//! chunks). Compacting a chunk closes each of its buckets (idempotent), reads
//! them — all closed, so exactly the accepted messages, including those stamped
//! after their lease's deadline, which readers drop from snapshots as they do
//! from buckets and audits must still see — and encodes them canonically. Its bytes therefore
//! depend only on the closed buckets, which never change: two compactors, or one
//! running twice, produce identical snapshots, and publishing is create-if-absent
//! (`link(2)` of a complete temp file, or `PutMode::Create`), so a snapshot is
//! never seen half-written. A compactor that loses the race compares the winner
//! with its own bytes and reports any difference. Buckets are kept: a damaged
//! snapshot is skipped by readers, who fall back to the buckets.
//!
//! Buckets before the log's first bucket hold nothing (writers refuse them).
//!
//! # Format (version 1, little-endian)
//!
//! ```text
//! magic "TBAGSNP1" chunk:u64 from_ms:u64 to_ms:u64 width_ms:u64
//! writers:u32 (len:u8 id)*               ids in order of first appearance
//! lease_sets:u32 (count:u8 lease*)*      as in frames, in order of first appearance
//! messages:u64 (ts_ms:u64 writer:u32 seq:u64 lease_set:u32 len:u32 payload)*
//! crc:u32                                CRC32C of everything before it
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use tenure_core::{Error, Result};

use crate::frame::{self, Cursor, LeaseStamp, Message};
use crate::layout::{LogConfig, MAX_SNAPSHOT_BYTES};
use crate::protocol::{self, BucketState, Ctx, Loaded, Storage};

const MAGIC: &[u8; 8] = b"TBAGSNP1";

/// What a compaction did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CompactReport {
    /// Chunks that already had a snapshot.
    pub existing: u64,
    /// Snapshots this run published.
    pub published: u64,
    /// Snapshots another compactor published first (identical to ours).
    pub raced: u64,
    /// Chunks whose existing snapshot differs from what we computed (a bug or damage).
    pub mismatched: Vec<u64>,
    /// Messages in the snapshots this run built.
    pub messages: u64,
    /// Chunks left to their buckets because their snapshot would be larger than
    /// readers read ([`MAX_SNAPSHOT_BYTES`]).
    pub too_large: Vec<u64>,
}

/// Encodes the sorted messages of chunk `chunk`.
pub fn encode(cfg: &LogConfig, chunk: u64, messages: &[Message]) -> Result<Bytes, String> {
    let (from, to) = cfg.chunk_range(chunk);
    let mut out = Vec::with_capacity(64 + messages.iter().map(|m| 32 + m.payload.len()).sum::<usize>());
    out.extend_from_slice(MAGIC);
    for v in [chunk, from, to, cfg.width_ms] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    let mut writers: HashMap<&str, u32> = HashMap::new();
    let mut writer_list: Vec<&str> = Vec::new();
    let mut sets: HashMap<&[LeaseStamp], u32> = HashMap::new();
    let mut set_list: Vec<&[LeaseStamp]> = Vec::new();
    for m in messages {
        writers.entry(&m.writer).or_insert_with(|| {
            writer_list.push(&m.writer);
            writer_list.len() as u32 - 1
        });
        sets.entry(&m.leases).or_insert_with(|| {
            set_list.push(&m.leases);
            set_list.len() as u32 - 1
        });
    }
    out.extend_from_slice(&(writer_list.len() as u32).to_le_bytes());
    for w in &writer_list {
        out.push(w.len() as u8);
        out.extend_from_slice(w.as_bytes());
    }
    out.extend_from_slice(&(set_list.len() as u32).to_le_bytes());
    for set in &set_list {
        out.push(u8::try_from(set.len()).map_err(|_| "too many leases")?);
        for l in set.iter() {
            frame::put_lease(&mut out, l)?;
        }
    }
    out.extend_from_slice(&(messages.len() as u64).to_le_bytes());
    for m in messages {
        out.extend_from_slice(&m.ts_ms.to_le_bytes());
        out.extend_from_slice(&writers[&*m.writer].to_le_bytes());
        out.extend_from_slice(&m.seq.to_le_bytes());
        out.extend_from_slice(&sets[&*m.leases].to_le_bytes());
        out.extend_from_slice(&u32::try_from(m.payload.len()).map_err(|_| "payload too long")?.to_le_bytes());
        out.extend_from_slice(&m.payload);
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out.into())
}

/// Decodes a snapshot of chunk `chunk`, checking everything.
pub fn decode(bytes: &Bytes, cfg: &LogConfig, chunk: u64) -> Result<Vec<Message>, String> {
    let body_len = bytes.len().checked_sub(4).ok_or("truncated")?;
    let crc = u32::from_le_bytes([bytes[body_len], bytes[body_len + 1], bytes[body_len + 2], bytes[body_len + 3]]);
    if crc32c::crc32c(&bytes[..body_len]) != crc {
        return Err("checksum mismatch (truncated or damaged)".into());
    }
    let mut c = Cursor { data: bytes, at: 0, end: body_len };
    if c.array::<8>()? != *MAGIC {
        return Err("not a tenure bag snapshot (version 1)".into());
    }
    let (from, to) = cfg.chunk_range(chunk);
    let head = [c.u64()?, c.u64()?, c.u64()?, c.u64()?];
    if head != [chunk, from, to, cfg.width_ms] {
        return Err(format!("it describes chunk {} [{}, {}) of width {}", head[0], head[1], head[2], head[3]));
    }
    let nwriters = c.u32()? as usize;
    let mut writers: Vec<Arc<str>> = Vec::with_capacity(nwriters.min(1 << 16));
    for _ in 0..nwriters {
        let n = c.u8()? as usize;
        writers.push(c.str(n)?.into());
    }
    let nsets = c.u32()? as usize;
    let mut sets: Vec<Arc<[LeaseStamp]>> = Vec::with_capacity(nsets.min(1 << 16));
    for _ in 0..nsets {
        let n = c.u8()? as usize;
        let set = (0..n).map(|_| c.lease()).collect::<Result<Vec<_>, _>>()?;
        sets.push(set.into());
    }
    let count = c.u64()?;
    if count > (body_len - c.at) as u64 / 28 {
        return Err(format!("message count {count} does not fit"));
    }
    let mut out = Vec::with_capacity(count as usize);
    let mut last: Option<(u64, usize, u64)> = None;
    for _ in 0..count {
        let ts_ms = c.u64()?;
        let w = c.u32()? as usize;
        let writer = writers.get(w).ok_or("bad writer index")?.clone();
        let seq = c.u64()?;
        let leases = sets.get(c.u32()? as usize).ok_or("bad lease set index")?.clone();
        let len = c.u32()? as usize;
        let payload = bytes.slice(c.take(len)?);
        if !(from..to).contains(&ts_ms) {
            return Err(format!("message at {ts_ms} is outside the chunk"));
        }
        if let Some((lts, lw, lseq)) = last
            && (lts, &*writers[lw], lseq) > (ts_ms, &*writer, seq)
        {
            return Err("messages are not in order".into());
        }
        last = Some((ts_ms, w, seq));
        out.push(Message { ts_ms, writer, seq, leases, payload });
    }
    if c.at != body_len {
        return Err("unexplained bytes after the messages".into());
    }
    Ok(out)
}

pub(crate) async fn compact<S: Storage>(s: &S, ctx: &Ctx) -> Result<CompactReport> {
    let cfg = ctx.cfg;
    let mut report = CompactReport::default();
    let Some(last) = cfg.last_closable(ctx.clock.wall_ms()) else { return Ok(report) };
    // An odd entry named like a snapshot is not one: compacting that chunk
    // loses the race to it and reports a mismatch.
    let existing = s.list_snapshots().await?.found;
    let mut chunk = cfg.chunk_of(cfg.first_bucket_ms);
    loop {
        let (start, end) = cfg.chunk_range(chunk);
        if end - cfg.width_ms > last {
            break;
        }
        if existing.contains(&chunk) {
            report.existing += 1;
            chunk += 1;
            continue;
        }
        let mut messages = Vec::new();
        let mut bucket = start.max(cfg.first_bucket_ms);
        // Closed as a range: a sweep closes the missing buckets at once.
        protocol::close_range(s, ctx, bucket, end, |_, closed| closed.map(drop)).await?;
        let sweeps = s.sweeps(bucket, end).await?;
        while bucket < end {
            match protocol::swept(&sweeps, bucket) {
                protocol::Swept::Empty => {
                    bucket = cfg.end_of(bucket);
                    continue;
                }
                protocol::Swept::Unsettled => {
                    return Err(Error::store(
                        s.url(),
                        format!("compacting bucket {bucket}"),
                        "a sweep covering it is not settled after a close",
                    ));
                }
                protocol::Swept::No | protocol::Swept::Listed => protocol::close(s, ctx, bucket).await.map(drop)?,
            }
            let read = protocol::read_bucket(s, &cfg, bucket).await?;
            if read.state != BucketState::Closed {
                return Err(Error::store(
                    s.url(),
                    format!("compacting bucket {bucket}"),
                    "it is not closed after a close",
                ));
            }
            messages.extend(read.messages);
            bucket = cfg.end_of(bucket);
        }
        let bytes = encode(&cfg, chunk, &messages).map_err(|d| Error::InvalidOptions { reason: d })?;
        if bytes.len() > MAX_SNAPSHOT_BYTES {
            tracing::warn!(
                chunk,
                size = bytes.len(),
                "a snapshot would be too large to read back: leaving the buckets"
            );
            report.too_large.push(chunk);
            chunk += 1;
            continue;
        }
        report.messages += messages.len() as u64;
        if s.publish_snapshot(chunk, bytes.clone()).await? {
            report.published += 1;
        } else {
            report.raced += 1;
            if !matches!(s.load_snapshot(chunk).await?, Loaded::Found(existing) if existing == bytes) {
                tracing::warn!(chunk, "an existing snapshot differs from the one computed from the closed buckets");
                report.mismatched.push(chunk);
            }
        }
        chunk += 1;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::sort_messages;

    fn cfg() -> LogConfig {
        LogConfig { width_ms: 1000, grace_ms: 2000, max_skew_ms: 500, chunk_buckets: 4, first_bucket_ms: 0 }
    }

    fn messages() -> Vec<Message> {
        let lease: Arc<[LeaseStamp]> = vec![LeaseStamp {
            name: "a".into(),
            token: 3,
            deadline_ms: 9_000,
            watermark_ms: Some(10),
            holder: "h".into(),
            witness: Some(vec![7; 5]),
        }]
        .into();
        let mut out: Vec<Message> = (0..50u64)
            .map(|i| Message {
                ts_ms: 4_000 + (i * 97) % 4_000,
                writer: if i % 3 == 0 { "x".into() } else { "y".into() },
                seq: i,
                leases: if i % 2 == 0 { lease.clone() } else { Arc::from(Vec::new()) },
                payload: Bytes::from(format!("m{i}")),
            })
            .collect();
        sort_messages(&mut out);
        out
    }

    #[test]
    fn snapshots_round_trip_and_encode_deterministically() {
        let msgs = messages();
        let a = encode(&cfg(), 1, &msgs).expect("encode");
        assert_eq!(a, encode(&cfg(), 1, &msgs).expect("encode"), "same messages, same bytes");
        assert_eq!(decode(&a, &cfg(), 1).expect("decode"), msgs);
        assert!(decode(&a, &cfg(), 2).is_err(), "a snapshot of another chunk");
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_detected() {
        let bytes = encode(&cfg(), 1, &messages()[..5]).expect("encode");
        for cut in 0..bytes.len() {
            assert!(decode(&bytes.slice(..cut), &cfg(), 1).is_err(), "truncated at {cut}");
        }
        for i in 0..bytes.len() {
            let mut bad = bytes.to_vec();
            bad[i] ^= 0x40;
            assert!(decode(&Bytes::from(bad), &cfg(), 1).is_err(), "flip at {i}");
        }
    }
}
