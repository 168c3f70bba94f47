//! [`Log`]: a bag log on a directory or an object store, and its [`Writer`]s.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;
use object_store::path::Path;
use serde::Serialize;
use tenure_core::limits::millis;
use tenure_core::{Clock, ClockExt, Error, Result, StoreUrl, SystemClock};
use tenure_file::DirUrl;
use tokio::sync::{Mutex, OnceCell, watch};
use tokio::task::JoinHandle;

use crate::fs::FsStorage;
use crate::layout::{LogConfig, LogSettings};
use crate::object::ObjectStorage;
use crate::protocol::{self, Batch, Ctx, Outcome, Skipped, WriterState};
use crate::read::{self, ReadOptions, ReadResult};
use crate::snapshot::{self, CompactReport};

/// How to open a log.
#[derive(Clone, Debug)]
pub struct BagOptions {
    /// Settings used if this process creates the log (ignored otherwise: the
    /// log's own configuration wins).
    pub settings: LogSettings,
    /// The clock (tests inject a manual one).
    pub clock: Arc<dyn Clock>,
    /// After a close, `chmod` the bucket read-only (a hint; never relied upon).
    pub read_only_hint: bool,
    /// Store settings: for object stores `aws_endpoint`, `aws_access_key_id`,
    /// `timeout` (each request's) …; for a directory `timeout` (each file-system
    /// operation's deadline, default 10 s), `fsync`, `io`.
    pub params: BTreeMap<String, String>,
    /// Skip the check, before the first write or close on an object store, that
    /// it really enforces create-if-absent. Without it two closers could both
    /// publish a manifest and writers would be told wrong verdicts.
    pub trust_store: bool,
    /// A log in a directory may create the directory if it does not exist (as
    /// `?create=true` does). Off by default: a missing directory is most likely
    /// a mount that is not there or a typo. Object stores ignore it.
    pub create: bool,
}

impl Default for BagOptions {
    fn default() -> Self {
        Self {
            settings: LogSettings::default(),
            clock: SystemClock::shared(),
            read_only_hint: false,
            params: BTreeMap::new(),
            trust_store: false,
            create: false,
        }
    }
}

impl BagOptions {
    /// With a clock.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
    /// With creation settings.
    pub fn with_settings(mut self, settings: LogSettings) -> Self {
        self.settings = settings;
        self
    }
    /// With a store setting.
    pub fn with_param(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.params.insert(key.into(), value.into());
        self
    }
}

#[derive(Debug)]
pub(crate) enum Backend {
    Fs(FsStorage),
    Object(ObjectStorage),
}

#[derive(Debug)]
struct Inner {
    backend: Backend,
    opts: BagOptions,
    fsync: bool,
    cfg: OnceCell<LogConfig>,
    /// Set once the object store passed the conditional-write probe.
    probed: OnceCell<()>,
}

/// A log: time buckets of messages on a directory or under an object-store prefix.
///
/// Cheap to clone. Opening never writes; the configuration is created by the first
/// write or close.
#[derive(Clone, Debug)]
pub struct Log {
    inner: Arc<Inner>,
}

/// Runs `body` with the storage. Every storage operation has its own deadline
/// (file systems run theirs on an abandonable thread), so nothing here blocks.
macro_rules! with_storage {
    ($log:expr, |$s:ident| $body:expr) => {
        match &$log.inner.backend {
            Backend::Fs($s) => $body,
            Backend::Object($s) => $body,
        }
    };
}

impl Log {
    /// Opens `file:///dir[?fsync=false&timeout=10s]`, a plain path, or
    /// `s3://bucket/prefix` (with `opts.params`: `aws_endpoint`,
    /// `aws_access_key_id`, …; for a directory `fsync`, `timeout`, `io`).
    pub fn open(url: &str, opts: BagOptions) -> Result<Log> {
        let url = StoreUrl::parse(url, &opts.params)?;
        Self::open_url(&url, opts)
    }

    /// [`Log::open`] for a parsed URL; `opts.params` go over its
    /// settings.
    ///
    /// # Errors
    /// As [`Log::open`].
    pub fn open_url(url: &StoreUrl, opts: BagOptions) -> Result<Log> {
        let url = &url.with_params(&opts.params);
        opts.settings.check().map_err(|reason| Error::InvalidOptions { reason })?;
        if url.scheme() == "file" {
            let mut dir = DirUrl::from_url(url)?;
            dir.create |= opts.create;
            let fs = crate::fs::from_dir_url(&dir);
            return Ok(Self::on_fs(fs, opts));
        }
        let backend = tenure_object::backend_from_url(url)?;
        Ok(Self::with_backend(Backend::Object(ObjectStorage::on_backend(backend)), opts, true))
    }

    /// A log in a directory.
    pub fn on_fs(fs: FsStorage, opts: BagOptions) -> Log {
        let fsync = fs.fsync();
        Self::with_backend(Backend::Fs(fs), opts, fsync)
    }

    /// A log under `prefix` of an object store.
    pub fn on_object_store(url: &str, store: Arc<dyn ObjectStore>, prefix: Path, opts: BagOptions) -> Log {
        Self::with_backend(Backend::Object(ObjectStorage::new(url, store, prefix)), opts, true)
    }

    fn with_backend(backend: Backend, opts: BagOptions, fsync: bool) -> Log {
        Log { inner: Arc::new(Inner { backend, opts, fsync, cfg: OnceCell::new(), probed: OnceCell::new() }) }
    }

    /// Before the first write or close on an object store, checks (once per
    /// handle) that the store enforces create-if-absent: the protocol rests on it.
    /// Readers never get here, so they never write.
    async fn ensure_conditional_writes(&self) -> Result<()> {
        let Backend::Object(storage) = &self.inner.backend else { return Ok(()) };
        if self.inner.opts.trust_store {
            return Ok(());
        }
        self.inner.probed.get_or_try_init(|| storage.check_create_if_absent()).await.map(|_| ())
    }

    /// The log's URL.
    pub fn url(&self) -> &str {
        match &self.inner.backend {
            Backend::Fs(s) => protocol::Storage::url(s),
            Backend::Object(s) => protocol::Storage::url(s),
        }
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.opts.clock
    }

    /// The configuration, or `None` for a log nobody has written yet. Never writes.
    pub async fn config(&self) -> Result<Option<LogConfig>> {
        if let Some(cfg) = self.inner.cfg.get() {
            return Ok(Some(*cfg));
        }
        let cfg = with_storage!(self, |s| protocol::Storage::load_config(s).await)?;
        if let Some(cfg) = cfg {
            let _ = self.inner.cfg.set(cfg);
        }
        Ok(cfg)
    }

    /// The configuration, creating the log if it is new (writers and closers).
    pub async fn config_or_create(&self) -> Result<LogConfig> {
        self.ensure_conditional_writes().await?;
        if let Some(cfg) = self.config().await? {
            return Ok(cfg);
        }
        let fresh = self
            .inner
            .opts
            .settings
            .config_at(self.clock().wall_ms())
            .map_err(|reason| Error::InvalidOptions { reason })?;
        let cfg = with_storage!(self, |s| protocol::config_or_create(s, fresh).await)?;
        let _ = self.inner.cfg.set(cfg);
        Ok(cfg)
    }

    async fn ctx(&self) -> Result<Ctx> {
        Ok(Ctx {
            cfg: self.config_or_create().await?,
            clock: self.inner.opts.clock.clone(),
            read_only_hint: self.inner.opts.read_only_hint,
            fsync: self.inner.fsync,
        })
    }

    /// A writer named `id` (`[A-Za-z0-9_-]`, at most 64). Ids must be unique among
    /// live writers: [`Writer::unique_id`] makes one.
    pub fn writer(&self, id: impl Into<String>) -> Result<Writer> {
        let id = id.into();
        crate::frame::check_writer(&id).map_err(|reason| Error::InvalidOptions { reason })?;
        Ok(Writer {
            log: self.clone(),
            state: Arc::new(Mutex::new(WriterState { id, next_seq: 0, slots: Default::default() })),
        })
    }

    /// Closes `bucket` (any process may, once it is past its grace); idempotent.
    pub async fn close(&self, bucket: u64) -> Result<CloseReport> {
        let ctx = self.ctx().await?;
        if ctx.cfg.bucket_of(bucket) != bucket {
            return Err(Error::InvalidOptions { reason: format!("{bucket} is not the start of a bucket") });
        }
        // Writers skip their prelock check while a bucket is clearly early: closing
        // one before its grace could drop an append already told it was accepted.
        if !ctx.cfg.closable(bucket, ctx.clock.wall_ms()) {
            return Err(Error::InvalidOptions {
                reason: format!("bucket {bucket} may only be closed {} ms after its end (its grace)", ctx.cfg.grace_ms),
            });
        }
        let closed = with_storage!(self, |s| protocol::close(s, &ctx, bucket).await)?;
        Ok(CloseReport {
            bucket_ms: bucket,
            published: closed.published,
            items: closed.manifest.items.len(),
            skipped: closed.skipped,
        })
    }

    /// Closes every bucket from `*cursor` up to the newest closable one, advancing
    /// the cursor (start it at [`Log::close_start`]). A metronome calls this in a loop.
    pub async fn close_due(&self, cursor: &mut u64) -> Result<CloseRound> {
        let ctx = self.ctx().await?;
        let Some(last) = ctx.cfg.last_closable(ctx.clock.wall_ms()) else { return Ok(CloseRound::default()) };
        let start = (*cursor).max(ctx.cfg.first_bucket_ms);
        let end = ctx.cfg.end_of(last);
        let round = with_storage!(self, |s| {
            let mut round = CloseRound::default();
            let swept = protocol::close_range(s, &ctx, start, end, |bucket, closed| {
                match closed {
                    Ok(closed) => {
                        round.closed += 1;
                        round.published += u64::from(closed.published);
                        round.skipped.extend(closed.skipped.into_iter().take(MAX_REPORTED - round.skipped.len()));
                    }
                    // A bucket that cannot be closed until someone removes what
                    // tenure did not write must not hold up the buckets after it.
                    Err(e @ Error::Corrupt { .. }) => {
                        tracing::warn!(bucket, error = %e, "a bucket cannot be closed; going on with the next");
                        if round.unclosable.len() < MAX_REPORTED {
                            round.unclosable.push(Unclosable { bucket_ms: bucket, error: e.to_string() });
                        }
                    }
                    // Any other failure ends the round; the next round starts again
                    // from `start` (closing is idempotent).
                    Err(e) => return Err(e),
                }
                Ok(())
            })
            .await?;
            round.closed += swept.emptied;
            round.sweeps += swept.sweeps;
            Ok::<_, Error>(round)
        })?;
        let next = end;
        *cursor = next;
        Ok(round)
    }

    /// Closes every bucket of `[from, to)` (all past their grace), whether it
    /// exists or not: the missing ones by sweeps, a few entries per group of
    /// buckets (see [`protocol`]). The first failure ends it.
    pub(crate) async fn close_span(&self, from: u64, to: u64) -> Result<()> {
        let ctx = self.ctx().await?;
        if let Some(late) =
            (from < to).then(|| ctx.cfg.bucket_of(to - 1)).filter(|&b| !ctx.cfg.closable(b, ctx.clock.wall_ms()))
        {
            return Err(Error::InvalidOptions {
                reason: format!("bucket {late} may only be closed {} ms after its end (its grace)", ctx.cfg.grace_ms),
            });
        }
        with_storage!(self, |s| protocol::close_range(s, &ctx, from, to, |_, closed| closed.map(drop)).await).map(drop)
    }

    /// Where a closer starts: `lookback` before the newest closable bucket (all of
    /// the log if `None`), never before the first bucket.
    pub async fn close_start(&self, lookback: Option<Duration>) -> Result<u64> {
        let cfg = self.config_or_create().await?;
        let now = self.clock().wall_ms();
        Ok(match lookback {
            None => cfg.first_bucket_ms,
            Some(d) => {
                cfg.bucket_of(now.saturating_sub(cfg.grace_ms.saturating_add(millis(d)))).max(cfg.first_bucket_ms)
            }
        })
    }

    /// Buckets that exist in `[from, to)` (odd entries named like buckets are
    /// not). Never writes.
    pub(crate) async fn existing_buckets(&self, from: u64, to: u64) -> Result<Vec<u64>> {
        Ok(with_storage!(self, |s| protocol::Storage::list_buckets(s, from, to).await)?.found)
    }

    /// Reads messages in (timestamp, writer, sequence) order. Never writes.
    pub async fn read(&self, opts: &ReadOptions) -> Result<ReadResult> {
        let Some(cfg) = self.config().await? else { return Ok(ReadResult::default()) };
        let opts = opts.clone();
        with_storage!(self, |s| read::read_range(s, &cfg, &opts).await)
    }

    /// Folds every closable chunk without a snapshot into one (closing its buckets
    /// first). Idempotent: twice, or two at once, give the same snapshots.
    pub async fn compact(&self) -> Result<CompactReport> {
        let ctx = self.ctx().await?;
        with_storage!(self, |s| snapshot::compact(s, &ctx).await)
    }
}

/// What closing one bucket did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CloseReport {
    /// The bucket.
    pub bucket_ms: u64,
    /// This call published the manifest (rather than finding one).
    pub published: bool,
    /// Items the manifest lists.
    pub items: usize,
    /// Entries tenure did not write that this close found and did not list.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
}

/// Skipped entries and unclosable buckets one round lists.
const MAX_REPORTED: usize = 1000;

/// What one metronome round did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CloseRound {
    /// Buckets now closed (by us or someone else).
    pub closed: u64,
    /// Manifests this round published.
    pub published: u64,
    /// Sweeps this round published: each closed every missing bucket of a
    /// group of buckets at once (see [`crate::protocol`], "Sweeps").
    #[serde(skip_serializing_if = "is_zero")]
    pub sweeps: u64,
    /// Entries tenure did not write that this round's closes did not list.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
    /// Buckets this round could not close and went past (their data is
    /// corrupt, or something tenure did not write is in the way).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unclosable: Vec<Unclosable>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A bucket a round could not close.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unclosable {
    /// The bucket.
    pub bucket_ms: u64,
    /// Why.
    pub error: String,
}

/// Appends batches as one writer: one data file per bucket on a file system.
///
/// Appends through one `Writer` are serialised; use one writer per concurrent
/// appender.
#[derive(Clone, Debug)]
pub struct Writer {
    log: Log,
    state: Arc<Mutex<WriterState>>,
}

impl Writer {
    /// `prefix-<16 random hex digits>`: unique among live writers.
    pub fn unique_id(prefix: &str) -> String {
        format!("{prefix}-{:016x}", rand::random::<u64>())
    }

    /// The writer's id.
    pub async fn id(&self) -> String {
        self.state.lock().await.id.clone()
    }

    /// The log.
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// Appends one batch (all in one bucket) and says for certain whether it is
    /// accepted. An `Err` means storage failed mid-way: the outcome is unknown.
    pub async fn append(&self, batch: Batch) -> Result<Outcome> {
        let ctx = self.log.ctx().await?;
        let mut state = self.state.clone().lock_owned().await;
        with_storage!(self.log, |s| protocol::append(s, &ctx, &mut state, &batch).await)
    }

    /// Appends `payload` stamped with the current time.
    pub async fn append_now(&self, payload: impl Into<bytes::Bytes>) -> Result<Outcome> {
        self.append(Batch::one(self.log.clock().wall_ms(), payload)).await
    }
}

/// A metronome: closes due buckets every `interval` in an owned background task,
/// stopped by [`Metronome::shutdown`] or on drop.
#[derive(Debug)]
pub struct Metronome {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<Result<()>>>,
}

impl Metronome {
    /// Starts closing due buckets of `log` from `cursor`, every `interval`. Errors
    /// are logged and retried next round; the task ends only when stopped.
    pub fn start(log: Log, mut cursor: u64, interval: Duration) -> Metronome {
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            loop {
                if let Err(e) = log.close_due(&mut cursor).await {
                    tracing::warn!(error = %e, log = log.url(), "closing due buckets failed; retrying");
                }
                let sleep = log.clock().sleep(interval);
                tokio::select! {
                    () = sleep => {}
                    _ = stopped.wait_for(|s| *s) => return Ok(()),
                }
            }
        });
        Metronome { stop, task: Some(task) }
    }

    /// Stops the task and waits for it (a round in progress finishes first).
    pub async fn shutdown(mut self) -> Result<()> {
        let _ = self.stop.send(true);
        match self.task.take() {
            Some(task) => task.await.map_err(|e| Error::store("metronome", "stopping", e))?,
            None => Ok(()),
        }
    }
}

impl Drop for Metronome {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
