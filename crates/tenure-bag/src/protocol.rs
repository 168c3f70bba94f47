//! The bag protocol, written once over a small storage trait that the file
//! system ([`crate::fs`]) and object stores ([`crate::object`]) implement.
//!
//! # Append (one batch, one bucket)
//!
//! 1. Write the batch's frame: on a file system, appended to this writer's own
//!    data file in the bucket (created with `O_EXCL`; a *new* file is first checked
//!    against the prelock, and the batch is rejected unwritten if a close has
//!    begun); on an object store, a new object created if absent.
//! 2. Read the clock. If `now + max_skew < bucket end + grace`, no closer can yet
//!    have judged the bucket closable (closers wait for `now >= end + grace` on
//!    their own clocks, and clocks differ by at most `max_skew`), so no prelock can
//!    predate the write: **accepted** (the fast path). This is the only step that
//!    rests on clocks, and only on the documented bound.
//! 3. Otherwise look for the prelock. None: any close begins later and lists the
//!    write, which completed before the look: **accepted**.
//! 4. A prelock: a close has begun and the write may or may not be in its
//!    listing. The writer does not wait for the closer: it *helps* — runs the
//!    close itself (below), which either publishes its own manifest or finds the
//!    winner's — and is **accepted** iff the manifest covers the frame's end.
//!
//! # Close (any process, any bucket older than now − grace, any number at once)
//!
//! 1. A manifest exists: done (idempotent).
//! 2. Ensure the prelock exists (create-if-absent; losing the race is fine).
//! 3. List the bucket's items and their sizes — after the prelock, so every
//!    writer that missed the prelock in its step 3 is listed. Only regular files
//!    (objects) named like items are listed: a directory, symlink, FIFO or
//!    device named like one, or a file larger than any writer makes, is skipped
//!    and reported — no writer's frame can be in it.
//! 4. Publish the manifest create-if-absent; first wins. A loser reads the winner.
//! 5. Optionally mark the bucket read-only, as a hint only (root ignores it).
//!
//! No step waits for another process, so closing is wait-free: a closer killed at
//! any point leaves a state the next closer or a late writer finishes.
//!
//! # Sweeps: closing missing buckets at once
//!
//! Closing a bucket that nobody wrote to would otherwise cost its directory, a
//! prelock and a manifest: an idle log with 1 ms buckets would gain thousands of
//! entries a second of idleness. So a closer closes every bucket of a range
//! `[lo, hi)` (within one group of buckets, all past their grace) that has no
//! bucket stored with one **sweep**, in two steps mirroring a bucket's close:
//!
//! 1. Ensure the sweep's intent exists (create-if-absent, like a prelock).
//! 2. List the buckets of `[lo, hi)` that exist — after the intent — and publish
//!    the result create-if-absent, first one wins: the runs of buckets that did
//!    not exist, now **closed empty for good**. Every bucket that existed is then
//!    closed on its own (prelock, manifest), as before.
//!
//! A bucket is closed empty iff some published sweep covering it says so,
//! whatever exists there later; if a sweep covering it has no result yet,
//! nothing about it is final (readers report it provisional). Otherwise its own
//! manifest decides. A writer that is not on the fast path, after its write,
//! looks for the sweeps covering its bucket and publishes the result of any
//! that has none (helping, never waiting); then it is **rejected** if one
//! emptied the bucket, and goes on with step 3 of the append otherwise.
//!
//! Why readers and writers agree, for certain:
//! - A sweep can only empty a bucket that did not exist at its listing, which
//!   comes after its intent. Every write into a bucket comes after the bucket
//!   was made. So a sweep that empties a bucket had its intent before any write
//!   there: a writer's look after its write finds the intent, and so the sweep's
//!   result (published by the writer itself if need be) — a late writer to an
//!   emptied bucket learns REJECTED, for certain.
//! - A sweep whose intent the writer does not find was made after the writer's
//!   look, so its listing sees the bucket (made before the write): it cannot
//!   empty it. A writer on the fast path wrote before any closer could judge
//!   the bucket closable, so before any intent covering it: same.
//! - Results are immutable and first-wins, and one emptying sweep settles a
//!   bucket whatever other sweeps say, so once every sweep covering a bucket is
//!   published, all readers and writers see the same answer, for ever.
//!
//! An idle close thus costs the intent and the result of one sweep per group of
//! buckets (4096 of them), however many buckets it closes, on a file system
//! and on an object store alike.
//!
//! # The clock-skew bound of the fast path
//!
//! `max_skew` (in the log's configuration, default 500 ms) is the largest
//! difference between the wall clocks of any two processes using the log,
//! *including* jumps. The fast path (append step 2) is taken only when the
//! writer's clock, read after its write completed, satisfies
//! `now + max_skew < end + grace`. Any closer's clock then reads less than
//! `end + grace`, so no closer has decided to close (closers decide on
//! `now >= end + grace`, and [`crate::Log::close`] refuses earlier closes), so
//! any prelock — and the listing after it — comes after the write. With the
//! defaults (1 s buckets, 2 s grace) a write stamped "now" takes the fast path
//! unless it took more than ~1.5 s. If the bound can be violated, configure a
//! larger `max_skew`: with `max_skew >= width + grace` the fast path is never
//! taken and every append checks the prelock. Nothing else in the protocol
//! depends on clocks: late and early writers alike are decided by the manifest.
//!
//! # Read (never writes)
//!
//! A bucket with a manifest is *closed*: exactly the frames within the recorded
//! sizes. A bucket without one is *open* (or *absent*): everything currently
//! readable, reported as provisional. Entries a manifest lists that are not
//! regular files (manifests written before closers skipped them) are skipped and
//! reported; an odd entry holding the manifest's name leaves the bucket open
//! (nobody can close it) and is reported; a garbage manifest is an error naming
//! it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use tenure_core::limits::MAX_TIME_MS;
use tenure_core::{Clock, Error, Result};

use crate::frame::{self, LeaseStamp, Message};
use crate::layout::{LogConfig, Manifest, Sweep};

/// Where a writer's frames go in one bucket (file systems: its data file).
#[derive(Clone, Debug, Default)]
pub(crate) struct Slot {
    /// The item (data file) name, once created.
    pub(crate) item: Option<String>,
    /// Generation of the data file name (advanced after a failed write).
    pub(crate) generation: u32,
    /// Bytes written so far.
    pub(crate) end: u64,
    /// The next write starts a new file: a write failed (its bytes are unknown),
    /// or the file is full.
    pub(crate) poisoned: bool,
}

/// What a write did.
#[derive(Clone, Debug)]
pub(crate) enum Wrote {
    /// The frame is in `item`, ending at byte `end`.
    Landed { item: String, end: u64 },
    /// A close had begun before anything was written.
    ClosedBefore,
}

/// An entry tenure did not write, found where a log keeps its data (a
/// directory, a symlink, a FIFO or a device named like a data file, a bucket or
/// a manifest; a file larger than any tenure writes): never followed or opened,
/// never listed in a manifest, skipped and reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// Where it is (a path, or an object key).
    pub path: String,
    /// What it is, and what was not done with it.
    pub reason: String,
}

/// What looking for one stored thing found.
#[derive(Debug)]
pub(crate) enum Loaded<T> {
    Found(T),
    Absent,
    /// Something tenure did not write holds its name.
    Odd(Skipped),
}

/// What a listing found: the entries, and the odd ones skipped.
#[derive(Debug)]
pub(crate) struct Listed<T> {
    pub(crate) found: Vec<T>,
    pub(crate) skipped: Vec<Skipped>,
}

impl<T> Default for Listed<T> {
    fn default() -> Self {
        Self { found: Vec::new(), skipped: Vec::new() }
    }
}

/// Buckets per group: a sweep covers at most one group (and, on a file
/// system, lives in the group's directory).
pub(crate) const SWEEP_GROUP: u64 = 4096;

/// What the protocol needs from storage. Every operation has a deadline: file
/// systems run theirs on an abandonable thread, object stores have request
/// timeouts.
pub(crate) trait Storage: Send + Sync + 'static {
    fn url(&self) -> &str;
    fn load_config(&self) -> impl Future<Output = Result<Option<LogConfig>>> + Send;
    /// Publishes `cfg` unless a configuration exists (first one wins).
    fn create_config(&self, cfg: &LogConfig) -> impl Future<Output = Result<()>> + Send;
    fn write(
        &self,
        bucket: u64,
        slot: &mut Slot,
        writer: &str,
        first_seq: u64,
        frame: Bytes,
    ) -> impl Future<Output = Result<Wrote>> + Send;
    fn prelock_exists(&self, bucket: u64) -> impl Future<Output = Result<bool>> + Send;
    fn ensure_prelock(&self, bucket: u64) -> impl Future<Output = Result<()>> + Send;
    /// Items (regular files only) and sizes; `None` if the bucket does not exist
    /// at all. `durable`: make the listed bytes durable first (closers, when
    /// fsync is on).
    fn list_items(
        &self,
        bucket: u64,
        durable: bool,
    ) -> impl Future<Output = Result<Option<Listed<(String, u64)>>>> + Send;
    fn load_manifest(&self, bucket: u64) -> impl Future<Output = Result<Loaded<Manifest>>> + Send;
    /// Publishes `m` create-if-absent; `false` if another manifest won.
    fn publish_manifest(&self, m: &Manifest) -> impl Future<Output = Result<bool>> + Send;
    /// An item's bytes, the first `covered` of them if given.
    fn read_item(
        &self,
        bucket: u64,
        item: &str,
        covered: Option<u64>,
    ) -> impl Future<Output = Result<Loaded<Bytes>>> + Send;
    /// The optional read-only hint after a close.
    fn hint_closed(&self, m: &Manifest) -> impl Future<Output = ()> + Send;
    /// Existing buckets in `[from, to)`, ascending.
    fn list_buckets(&self, from: u64, to: u64) -> impl Future<Output = Result<Listed<u64>>> + Send;
    fn list_snapshots(&self) -> impl Future<Output = Result<Listed<u64>>> + Send;
    fn load_snapshot(&self, chunk: u64) -> impl Future<Output = Result<Loaded<Bytes>>> + Send;
    /// Publishes a snapshot create-if-absent; `false` if one existed.
    fn publish_snapshot(&self, chunk: u64, bytes: Bytes) -> impl Future<Output = Result<bool>> + Send;
    /// The end of the group of buckets (`width_ms` wide) that `bucket` is in:
    /// one sweep never covers more than one group. `None` where the storage
    /// keeps no sweeps (every bucket is then closed on its own).
    fn group_end(&self, bucket: u64, width_ms: u64) -> impl Future<Output = Result<Option<u64>>> + Send {
        let span = width_ms.saturating_mul(SWEEP_GROUP);
        async move { Ok(Some((bucket / span.max(1)).saturating_add(1).saturating_mul(span))) }
    }
    /// Sweeps meeting `[from, to)`, with their results if published.
    fn sweeps(&self, _from: u64, _to: u64) -> impl Future<Output = Result<Vec<Sweep>>> + Send {
        async { Ok(Vec::new()) }
    }
    /// Ensures the intent of sweep `[lo, hi)` exists (create-if-absent).
    fn ensure_sweep(&self, _lo: u64, _hi: u64) -> impl Future<Output = Result<()>> + Send {
        async { Err(Error::unsupported(self.url(), "sweeps")) }
    }
    /// Publishes a sweep's result create-if-absent; `false` if another won.
    fn publish_sweep(&self, _sweep: &Sweep) -> impl Future<Output = Result<bool>> + Send {
        async { Err(Error::unsupported(self.url(), "sweeps")) }
    }
}

/// What every protocol step needs besides storage.
#[derive(Clone, Debug)]
pub(crate) struct Ctx {
    pub(crate) cfg: LogConfig,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) read_only_hint: bool,
    pub(crate) fsync: bool,
}

/// A batch of messages to append: all in one bucket, written under `leases`.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    /// `(timestamp ms, payload)` pairs.
    pub messages: Vec<(u64, Bytes)>,
    /// The leases the batch is written under (the journal fills these in).
    pub leases: Vec<LeaseStamp>,
}

impl Batch {
    /// One message.
    pub fn one(ts_ms: u64, payload: impl Into<Bytes>) -> Self {
        Self { messages: vec![(ts_ms, payload.into())], leases: Vec::new() }
    }
}

/// How an append was decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Accepted: written while clearly early (fast path, under the skew bound).
    Early,
    /// Accepted: no close had begun after the write.
    NoCloseBegun,
    /// Accepted: a close had begun and its manifest lists the batch.
    InManifest,
    /// Rejected: a close had begun before anything was written.
    ClosedBeforeWrite,
    /// Rejected: the close that had begun does not list the batch.
    NotInManifest,
    /// Rejected: the timestamp is before the log's first bucket.
    BeforeFirstBucket,
}

impl Decision {
    /// Whether the batch is accepted.
    pub fn accepted(self) -> bool {
        matches!(self, Decision::Early | Decision::NoCloseBegun | Decision::InManifest)
    }
}

/// What an append returned: accepted or rejected, for certain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// Accepted (durably in its bucket, and listed by its close) or rejected.
    pub accepted: bool,
    /// Why.
    pub decision: Decision,
    /// The bucket (start, ms).
    pub bucket_ms: u64,
    /// Writer id.
    pub writer: String,
    /// Sequence of the first message; the others follow.
    pub first_seq: u64,
    /// Messages in the batch.
    pub count: u64,
    /// Largest timestamp in the batch.
    pub max_ts_ms: u64,
}

impl Outcome {
    /// `Ok` if accepted, [`Error::Closed`] if rejected.
    pub fn into_result(self, store: &str) -> Result<Outcome> {
        if self.accepted {
            Ok(self)
        } else {
            Err(Error::Closed { store: store.into(), bucket: self.bucket_ms.to_string() })
        }
    }
}

/// A writer's own state: its id, next sequence number, and data files.
#[derive(Debug)]
pub(crate) struct WriterState {
    pub(crate) id: String,
    pub(crate) next_seq: u64,
    pub(crate) slots: HashMap<u64, Slot>,
}

/// Slots kept per writer (older buckets are forgotten; a late write to one starts
/// a new data file, which is always safe).
const MAX_SLOTS: usize = 64;

pub(crate) async fn append<S: Storage>(s: &S, ctx: &Ctx, w: &mut WriterState, batch: &Batch) -> Result<Outcome> {
    let invalid = |reason: String| Error::InvalidOptions { reason };
    let (Some(min), Some(max)) = (batch.messages.iter().map(|m| m.0).min(), batch.messages.iter().map(|m| m.0).max())
    else {
        return Err(invalid("an empty batch".into()));
    };
    if max > MAX_TIME_MS {
        return Err(invalid(format!("timestamp {max} is past the year 9999")));
    }
    let bucket = ctx.cfg.bucket_of(min);
    if ctx.cfg.bucket_of(max) != bucket {
        return Err(invalid(format!("a batch must fit in one bucket: {min} and {max} do not")));
    }
    let first_seq = w.next_seq;
    let count = batch.messages.len() as u64;
    let next_seq =
        first_seq.checked_add(count).ok_or_else(|| invalid("this writer's sequence numbers ran out".into()))?;
    let outcome = |decision: Decision| Outcome {
        accepted: decision.accepted(),
        decision,
        bucket_ms: bucket,
        writer: w.id.clone(),
        first_seq,
        count,
        max_ts_ms: max,
    };
    if bucket < ctx.cfg.first_bucket_ms {
        return Ok(outcome(Decision::BeforeFirstBucket));
    }
    let frame = frame::encode(&w.id, first_seq, &batch.leases, &batch.messages).map_err(invalid)?;
    // Sequence numbers are spent even if the write fails: never reused.
    w.next_seq = next_seq;
    if w.slots.len() >= MAX_SLOTS && !w.slots.contains_key(&bucket) {
        let oldest = w.slots.keys().copied().min().unwrap_or(bucket);
        w.slots.remove(&oldest);
    }
    let slot = w.slots.entry(bucket).or_default();
    let (item, end) = match s.write(bucket, slot, &w.id, first_seq, frame.into()).await? {
        Wrote::ClosedBefore => return Ok(outcome(Decision::ClosedBeforeWrite)),
        Wrote::Landed { item, end } => (item, end),
    };
    // Read the clock only now, after the write completed (see the module docs).
    if ctx.cfg.clearly_early(bucket, ctx.clock.wall_ms()) {
        return Ok(outcome(Decision::Early));
    }
    // A sweep that found the bucket empty closed it for good; one that listed
    // it leaves the verdict to the bucket's own close, which the writer helps.
    if settled(s, ctx, bucket).await? == Swept::Empty {
        return Ok(outcome(Decision::NotInManifest));
    }
    if !s.prelock_exists(bucket).await? {
        return Ok(outcome(Decision::NoCloseBegun));
    }
    let closed = close(s, ctx, bucket).await?;
    Ok(outcome(if closed.manifest.covers(&item, end) { Decision::InManifest } else { Decision::NotInManifest }))
}

/// What a close found.
#[derive(Clone, Debug)]
pub(crate) struct Closed {
    pub(crate) manifest: Manifest,
    /// This call published the manifest (rather than finding one).
    pub(crate) published: bool,
    /// Odd entries this call's listing skipped.
    pub(crate) skipped: Vec<Skipped>,
}

/// The manifest of `bucket`, checked against the log's bucket width.
async fn manifest<S: Storage>(s: &S, cfg: &LogConfig, bucket: u64) -> Result<Loaded<Manifest>> {
    let loaded = s.load_manifest(bucket).await?;
    if let Loaded::Found(m) = &loaded
        && m.width_ms != cfg.width_ms
    {
        return Err(Error::corrupt(
            s.url(),
            format!("the manifest of bucket {bucket}"),
            format!("it is for buckets {} ms wide; the log's are {} ms", m.width_ms, cfg.width_ms),
        ));
    }
    Ok(loaded)
}

/// Something tenure did not write holds the manifest's name: nobody can close
/// the bucket until it is removed.
fn unclosable(url: &str, bucket: u64, odd: Skipped) -> Error {
    Error::corrupt(url, odd.path, format!("bucket {bucket} cannot be closed: {}", odd.reason))
}

pub(crate) async fn close<S: Storage>(s: &S, ctx: &Ctx, bucket: u64) -> Result<Closed> {
    match manifest(s, &ctx.cfg, bucket).await? {
        Loaded::Found(manifest) => return Ok(Closed { manifest, published: false, skipped: Vec::new() }),
        Loaded::Odd(odd) => return Err(unclosable(s.url(), bucket, odd)),
        Loaded::Absent => {}
    }
    s.ensure_prelock(bucket).await?;
    let listed = s.list_items(bucket, ctx.fsync).await?.unwrap_or_default();
    for odd in &listed.skipped {
        tracing::warn!(bucket, path = odd.path, reason = odd.reason, "closing: skipped an entry tenure did not write");
    }
    let manifest = Manifest { bucket, width_ms: ctx.cfg.width_ms, items: listed.found.into_iter().collect() };
    if s.publish_manifest(&manifest).await? {
        if ctx.read_only_hint {
            s.hint_closed(&manifest).await;
        }
        return Ok(Closed { manifest, published: true, skipped: listed.skipped });
    }
    match self::manifest(s, &ctx.cfg, bucket).await? {
        Loaded::Found(winner) => Ok(Closed { manifest: winner, published: false, skipped: listed.skipped }),
        Loaded::Odd(odd) => Err(unclosable(s.url(), bucket, odd)),
        Loaded::Absent => Err(Error::store(
            s.url(),
            format!("closing bucket {bucket}"),
            "a manifest was published but cannot be read back",
        )),
    }
}

/// What the sweeps covering one bucket say of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Swept {
    /// No sweep covers it: its own prelock and manifest decide.
    No,
    /// A sweep covers it whose result is not published yet: nothing about the
    /// bucket is final.
    Unsettled,
    /// A published sweep found it empty: closed, with no message, for good.
    Empty,
    /// Every sweep covering it is published and listed it: its own close
    /// decides.
    Listed,
}

/// What `sweeps` say of `bucket`. An emptying sweep settles it whatever the
/// others say (see the module docs, "Sweeps").
pub(crate) fn swept(sweeps: &[Sweep], bucket: u64) -> Swept {
    let mut out = Swept::No;
    for sweep in sweeps.iter().filter(|w| w.covers(bucket)) {
        if sweep.emptied(bucket) {
            return Swept::Empty;
        }
        out = match (out, &sweep.empty) {
            (_, None) | (Swept::Unsettled, _) => Swept::Unsettled,
            _ => Swept::Listed,
        };
    }
    out
}

/// Publishes the result of sweep `[lo, hi)` unless it is published, and
/// returns the one published (and whether this call published it). The result
/// is the listing of buckets made now, after the intent exists.
async fn settle<S: Storage>(s: &S, ctx: &Ctx, lo: u64, hi: u64) -> Result<(Sweep, bool)> {
    let published = |all: Vec<Sweep>| all.into_iter().find(|w| (w.lo, w.hi) == (lo, hi) && w.empty.is_some());
    if let Some(done) = published(s.sweeps(lo, hi).await?) {
        return Ok((done, false));
    }
    let existing = s.list_buckets(lo, hi).await?.found;
    let mut empty: Vec<(u64, u64)> = Vec::new();
    let mut bucket = lo;
    while bucket < hi {
        let next = ctx.cfg.end_of(bucket);
        if existing.binary_search(&bucket).is_err() {
            match empty.last_mut() {
                Some((_, end)) if *end == bucket => *end = next,
                _ => empty.push((bucket, next)),
            }
        }
        bucket = next;
    }
    let sweep = Sweep { lo, hi, empty: Some(empty) };
    if s.publish_sweep(&sweep).await? {
        return Ok((sweep, true));
    }
    published(s.sweeps(lo, hi).await?).map(|done| (done, false)).ok_or_else(|| {
        Error::store(s.url(), format!("sweeping buckets {lo} to {hi}"), "a sweep was published but cannot be read back")
    })
}

/// What the sweeps covering `bucket` say of it, once each is published
/// (publishing those that are not: a writer helps, as it does a close).
async fn settled<S: Storage>(s: &S, ctx: &Ctx, bucket: u64) -> Result<Swept> {
    let mut sweeps = s.sweeps(bucket, ctx.cfg.end_of(bucket)).await?;
    for sweep in &mut sweeps {
        if sweep.empty.is_none() {
            *sweep = settle(s, ctx, sweep.lo, sweep.hi).await?.0;
        }
    }
    Ok(swept(&sweeps, bucket))
}

/// What [`close_range`] did.
#[derive(Debug, Default)]
pub(crate) struct RangeClosed {
    /// Buckets closed empty by sweeps (published now or before).
    pub(crate) emptied: u64,
    /// Sweeps this call published.
    pub(crate) sweeps: u64,
}

/// Closes every bucket in `[from, to)` (all past their grace): where buckets
/// are missing, one sweep per group of buckets closes them all; every bucket
/// that exists is closed on its own, its result handed to `each` (which may
/// end the range with an error).
pub(crate) async fn close_range<S: Storage>(
    s: &S,
    ctx: &Ctx,
    from: u64,
    to: u64,
    mut each: impl FnMut(u64, Result<Closed>) -> Result<()>,
) -> Result<RangeClosed> {
    let mut done = RangeClosed::default();
    let mut lo = from;
    while lo < to {
        let Some(group_end) = s.group_end(lo, ctx.cfg.width_ms).await? else {
            // No sweeps here: each bucket on its own.
            while lo < to {
                each(lo, close(s, ctx, lo).await)?;
                lo = ctx.cfg.end_of(lo);
            }
            break;
        };
        let hi = group_end.min(to);
        // Finish sweeps a closer left half done: until then, nothing they
        // cover is final.
        let mut sweeps = s.sweeps(lo, hi).await?;
        for sweep in &mut sweeps {
            if sweep.empty.is_none() {
                let (settled, published) = settle(s, ctx, sweep.lo, sweep.hi).await?;
                *sweep = settled;
                done.sweeps += u64::from(published);
            }
        }
        let existing = s.list_buckets(lo, hi).await?.found;
        let mut missing = false;
        let mut bucket = lo;
        while bucket < hi && !missing {
            missing = existing.binary_search(&bucket).is_err() && swept(&sweeps, bucket) != Swept::Empty;
            bucket = ctx.cfg.end_of(bucket);
        }
        if missing {
            s.ensure_sweep(lo, hi).await?;
            let (sweep, published) = settle(s, ctx, lo, hi).await?;
            done.sweeps += u64::from(published);
            sweeps.push(sweep);
        }
        // Listed after the sweep: a bucket made since is either emptied by it
        // or listed, and closed here.
        let existing = if missing { s.list_buckets(lo, hi).await?.found } else { existing };
        let mut bucket = lo;
        while bucket < hi {
            if swept(&sweeps, bucket) == Swept::Empty {
                done.emptied += 1;
            } else if existing.binary_search(&bucket).is_ok() {
                each(bucket, close(s, ctx, bucket).await)?;
            }
            bucket = ctx.cfg.end_of(bucket);
        }
        lo = hi;
    }
    Ok(done)
}

/// The state of a bucket as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BucketState {
    /// It has a manifest: its messages are final.
    Closed,
    /// It exists without a manifest: its messages are provisional.
    Open,
    /// Nothing is stored for it yet (provisional: a late writer could still add).
    Absent,
}

/// One bucket, read.
#[derive(Clone, Debug)]
pub(crate) struct BucketRead {
    pub(crate) state: BucketState,
    pub(crate) messages: Vec<Message>,
    /// Bytes ignored: torn tails (a killed writer, a write cut by a close).
    pub(crate) ignored_bytes: u64,
    /// Messages whose timestamp is outside the bucket (a buggy writer): dropped.
    pub(crate) misplaced: u64,
    /// Entries tenure did not write: not read.
    pub(crate) skipped: Vec<Skipped>,
}

pub(crate) async fn read_bucket<S: Storage>(s: &S, cfg: &LogConfig, bucket: u64) -> Result<BucketRead> {
    let mut skipped = Vec::new();
    let manifest = match manifest(s, cfg, bucket).await? {
        Loaded::Found(m) => Some(m),
        Loaded::Absent => None,
        // Nobody can close this bucket: read it as an open one.
        Loaded::Odd(odd) => {
            skipped.push(odd);
            None
        }
    };
    let (state, items): (BucketState, Vec<(String, Option<u64>)>) = match manifest {
        Some(m) => (BucketState::Closed, m.items.into_iter().map(|(k, v)| (k, Some(v))).collect()),
        None => match s.list_items(bucket, false).await? {
            Some(listed) => {
                skipped.extend(listed.skipped);
                (BucketState::Open, listed.found.into_iter().map(|(k, _)| (k, None)).collect())
            }
            None => (BucketState::Absent, Vec::new()),
        },
    };
    let mut out = BucketRead { state, messages: Vec::new(), ignored_bytes: 0, misplaced: 0, skipped };
    for (item, covered) in items {
        if covered == Some(0) {
            continue;
        }
        let data = match s.read_item(bucket, &item, covered).await? {
            Loaded::Found(data) => data,
            // A manifest written before closers skipped odd entries may list one.
            Loaded::Odd(odd) => {
                out.skipped.push(odd);
                continue;
            }
            // Gone from an open bucket: nothing was decided about it yet.
            Loaded::Absent if covered.is_none() => continue,
            Loaded::Absent => {
                return Err(Error::corrupt(
                    s.url(),
                    format!("bucket {bucket}, item {item}"),
                    "the manifest lists it but it is missing: data was lost after the close",
                ));
            }
        };
        if let Some(size) = covered
            && (data.len() as u64) < size
        {
            return Err(Error::corrupt(
                s.url(),
                format!("bucket {bucket}, item {item}"),
                format!(
                    "the manifest covers {size} bytes but only {} exist: data was lost after the close",
                    data.len()
                ),
            ));
        }
        let decoded = frame::decode_all(&data);
        if let Some(why) = &decoded.stopped {
            tracing::debug!(bucket, item, why, ignored = decoded.ignored, "ignoring a torn tail");
        }
        out.ignored_bytes = out.ignored_bytes.saturating_add(decoded.ignored as u64);
        for m in decoded.messages {
            if cfg.bucket_of(m.ts_ms) == bucket {
                out.messages.push(m);
            } else {
                out.misplaced += 1;
            }
        }
    }
    frame::sort_messages(&mut out.messages);
    Ok(out)
}

/// Gets the configuration, creating it from `settings` if the log is new.
pub(crate) async fn config_or_create<S: Storage>(s: &S, fresh: LogConfig) -> Result<LogConfig> {
    if let Some(cfg) = s.load_config().await? {
        return Ok(cfg);
    }
    s.create_config(&fresh).await?;
    s.load_config()
        .await?
        .ok_or_else(|| Error::store(s.url(), "creating the log", "the configuration cannot be read back"))
}
