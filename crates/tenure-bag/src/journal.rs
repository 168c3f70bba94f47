//! The lease-guarded journal (`docs/design/closable-bags.md#the-journal`): leases
//! give a consistent order to
//! writes from many processes, with no log server.
//!
//! One operation ([`Journal::begin`] … [`Txn::commit`]):
//!
//! 1. **Acquire** every lease the operation needs (any store: a directory, a
//!    bucket, the lease server, etcd), all or nothing, in canonical order.
//! 2. **Learn the predecessors' watermarks**: each grant says up to when its
//!    predecessors wrote. If a predecessor did not end gracefully (expired,
//!    dropped, broken), its messages may still be in flight: the journal *helps*
//!    close the buckets it may have stamped into (waiting for their grace, at
//!    most width + grace), so that every late message of the predecessor is
//!    decided — accepted or rejected, for certain — before this operation reads
//!    or writes on top of it. The predecessor stamped by its clock, at or after
//!    its acquisition (`Predecessor::acquired_ms`, on its own clock) and at or
//!    below the watermark, so the window is every bucket from `acquired_ms −
//!    max_skew` (the log's skew bound) to the watermark, however long it held the
//!    lease and whatever its TTL:
//!    - every bucket of that window that **exists** is closed (listed first, so a
//!      predecessor that held for hours costs a listing, not thousands of closes
//!      of empty buckets);
//!    - every bucket of the last TTL (this grant's) before the watermark is
//!      closed whether it exists or not, so that a write still on its way to a
//!      bucket nobody has created yet is refused when it gets there (the
//!      missing ones by a sweep per group of buckets, see [`crate::protocol`]).
//!
//!    What remains undecided is a predecessor's write that stalled for more than
//!    a TTL *before creating* a bucket nobody else wrote to (a write hung on a
//!    hard-mounted NFS while its keep-alive went on renewing): it keeps its older
//!    timestamp, so the order holds, but this operation did not see it. A
//!    metronome (`tenure bag close --loop`) closes every bucket within its grace
//!    and so bounds that too. When `acquired_ms` is unknown (records written
//!    before it was kept, stores that do not keep it), the window is the last
//!    TTL before the watermark only, as above.
//! 3. **Stamp** every message with a timestamp strictly above all those
//!    watermarks and strictly below every lease's deadline; never on a lease the
//!    keep-alive reports lost. A stamp more than [`MAX_AHEAD`] ahead of the clock
//!    (a predecessor whose clock ran fast) waits for the clock instead; a
//!    watermark at or past the grant's deadline fails the append at once.
//! 4. **Append** the batch, carrying the lease names, fencing tokens, deadlines,
//!    the watermark each grant learned, the holder's correlation id and, from the
//!    lease server, the signed witness.
//! 5. **Release** every lease with the highest timestamp stamped (accepted or
//!    not) as the new watermark.
//!
//! Two operations that conflict share a lease, so the later one's timestamps are
//! above everything the earlier one stamped: readers ordering by timestamp see
//! them in order. Readers drop messages stamped at or after their lease's
//! deadline, and [`mod@crate::audit`] checks the rest.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tenure_core::limits::{MAX_TIME_MS, millis};
use tenure_core::{
    Client, ClockExt, Error, Grant, LeaseOptions, LeaseSet, LossReason, ReleaseRequest, Released, Result,
};

use crate::frame::LeaseStamp;
use crate::log::Writer;
use crate::protocol::{Batch, Outcome};

/// Longest a stamp may run ahead of the local clock before the journal waits.
pub const MAX_AHEAD: Duration = Duration::from_secs(1);

/// Appends under leases.
#[derive(Clone, Debug)]
pub struct Journal {
    writer: Writer,
    client: Client,
    opts: LeaseOptions,
}

impl Journal {
    /// A journal appending with `writer` under leases of `client`'s store.
    pub fn new(writer: Writer, client: Client, opts: LeaseOptions) -> Self {
        Self { writer, client, opts }
    }

    /// The writer.
    pub fn writer(&self) -> &Writer {
        &self.writer
    }

    /// Acquires `names` (all or nothing) and prepares to stamp above their
    /// predecessors' watermarks.
    pub async fn begin<S: AsRef<str>>(&self, names: &[S]) -> Result<Txn> {
        let set = self.client.acquire_all(names, &self.opts).await?;
        let grants = set.grants();
        let mut floor = 0u64;
        for g in grants.iter() {
            let Some(p) = &g.predecessor else { continue };
            if let Some(w) = p.watermark_ms {
                floor = floor.max(w.saturating_add(1));
                if !p.how.graceful() {
                    self.settle(w, p.acquired_ms, g).await?;
                }
            }
        }
        Ok(Txn {
            writer: self.writer.clone(),
            store: self.client.store().url().to_string(),
            set,
            floor_ms: floor,
            max_stamped: None,
            safety: self.opts.safety(),
        })
    }

    /// Closes the buckets in which a predecessor that did not end gracefully may
    /// still have messages in flight, so their fate is decided (see the module
    /// docs for the window).
    async fn settle(&self, watermark_ms: u64, acquired_ms: Option<u64>, grant: &Grant) -> Result<()> {
        let log = self.writer.log();
        let cfg = log.config_or_create().await?;
        // Nothing was stamped past the year 9999: a watermark beyond is no bucket.
        let last = cfg.bucket_of(watermark_ms.min(MAX_TIME_MS));
        let ready = cfg.end_of(last).saturating_add(cfg.grace_ms);
        let clock = log.clock().clone();
        let now = clock.wall_ms();
        if now < ready {
            clock.sleep(Duration::from_millis(ready - now)).await;
        }
        let recent = cfg.bucket_of(watermark_ms.saturating_sub(millis(grant.ttl))).max(cfg.first_bucket_ms);
        if let Some(acquired) = acquired_ms {
            let first = cfg.bucket_of(acquired.saturating_sub(cfg.max_skew_ms)).max(cfg.first_bucket_ms);
            if first < recent {
                for bucket in log.existing_buckets(first, recent).await? {
                    log.close(bucket).await?;
                }
            }
        }
        // Missing buckets by sweeps: a few entries per group of buckets, not
        // three per empty bucket of the TTL.
        log.close_span(recent, cfg.end_of(last)).await
    }
}

/// An operation in progress: leases held, stamping above their watermarks.
#[derive(Debug)]
pub struct Txn {
    writer: Writer,
    store: String,
    set: LeaseSet,
    floor_ms: u64,
    max_stamped: Option<u64>,
    safety: Duration,
}

impl Txn {
    /// The grants held (renewals update them).
    pub fn grants(&self) -> Arc<Vec<Grant>> {
        self.set.grants()
    }

    /// The lowest timestamp this operation may still stamp.
    pub fn floor_ms(&self) -> u64 {
        self.floor_ms
    }

    /// Stamps `payloads` (one batch) and appends them under the leases.
    pub async fn append(&mut self, payloads: Vec<Bytes>) -> Result<Outcome> {
        let log = self.writer.log().clone();
        let clock = log.clock().clone();
        let lost = |g: &Grant, reason: LossReason| Error::Lost {
            store: self.store.clone(),
            name: g.name.to_string(),
            token: g.token,
            reason,
        };
        // A floor at or past a deadline (a watermark from a clock years ahead)
        // leaves nothing to stamp: say so now rather than wait for the clock.
        if let Some(g) = self.set.grants().iter().find(|g| self.floor_ms >= g.deadline_ms) {
            return Err(lost(g, LossReason::Expired));
        }
        let mut now = clock.wall_ms();
        let ahead = self.floor_ms.saturating_sub(now);
        if ahead > millis(MAX_AHEAD) {
            clock.sleep(Duration::from_millis(ahead - millis(MAX_AHEAD))).await;
            now = clock.wall_ms();
        }
        let ts = now.max(self.floor_ms);
        let grants = self.set.grants();
        if let tenure_core::Health::Lost(reason) = self.set.health() {
            let g = grants.first().ok_or_else(|| Error::InvalidOptions { reason: "no grants".into() })?;
            return Err(lost(g, reason));
        }
        for g in grants.iter() {
            // Stop on the local monotonic deadline (minus the safety margin) and never
            // stamp at or past the recorded deadline, which readers check.
            if clock.mono() >= g.local_deadline - self.safety || ts >= g.deadline_ms {
                return Err(lost(g, LossReason::Expired));
            }
        }
        let leases = grants
            .iter()
            .map(|g| LeaseStamp {
                name: g.name.to_string(),
                token: g.token,
                deadline_ms: g.deadline_ms,
                watermark_ms: g.predecessor.as_ref().and_then(|p| p.watermark_ms),
                holder: g.holder.nonce.clone(),
                witness: g.witness.clone(),
            })
            .collect();
        self.max_stamped = Some(self.max_stamped.map_or(ts, |m| m.max(ts)));
        self.floor_ms = self.floor_ms.max(ts);
        let batch = Batch { messages: payloads.into_iter().map(|p| (ts, p)).collect(), leases };
        self.writer.append(batch).await
    }

    /// Releases every lease, publishing the highest timestamp stamped.
    pub async fn commit(self) -> Result<Released> {
        let req = ReleaseRequest { watermark_ms: self.max_stamped, ..ReleaseRequest::default() };
        self.set.release_with(req).await
    }
}
