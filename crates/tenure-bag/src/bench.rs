//! `tenure bag bench`: appends, closes and reads on a directory, each beside the
//! raw file-system floor of the same operations on the same directory, in one run.
//!
//! - **append**: each writer thread appends one-message batches stamped now
//!   (the fast path), against the raw floor `open(O_APPEND)` + `write` (+
//!   `fsync`) + `close` of a frame-sized record to a file of its own;
//! - **close**: closing buckets of 100 writer files each, against the raw floor
//!   `readdir` + `open`/`fstat` of each file (+ `fsync`) + write and `link(2)` a
//!   list file;
//! - **read**: reading and merging closed buckets, then the same messages from a
//!   compacted snapshot.
//!
//! Figures only: nothing here passes or fails on a timing.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::executor::block_on;
use serde::Serialize;
use tenure_core::{Clock, Error, ManualClock, Result, SystemClock};

use crate::fs::FsStorage;
use crate::layout::LogConfig;
use crate::protocol::{self, Batch, Ctx, Storage, WriterState};
use crate::read::{ReadOptions, read_range};
use crate::snapshot;

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// An empty (or new) directory to work in.
    pub dir: PathBuf,
    /// Writer counts to measure appends with.
    pub writers: Vec<usize>,
    /// Measured time per append run.
    pub seconds: Duration,
    /// Payload size (bytes).
    pub payload: usize,
    /// fsync as the file store does by default.
    pub fsync: bool,
    /// Buckets closed for the close-latency figure.
    pub close_buckets: usize,
    /// Messages written, compacted and read for the read figures.
    pub read_messages: usize,
}

/// One append run.
#[derive(Clone, Debug, Serialize)]
pub struct AppendFigures {
    /// Concurrent writers.
    pub writers: usize,
    /// Raw floor, per writer (ops/s).
    pub raw_per_writer: f64,
    /// Raw floor, total (ops/s).
    pub raw_total: f64,
    /// Bag appends, per writer (appends/s).
    pub bag_per_writer: f64,
    /// Bag appends, total (appends/s).
    pub bag_total: f64,
    /// bag_total / raw_total.
    pub ratio: f64,
    /// Appends decided by the fast path.
    pub fast_path: u64,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// `/proc/loadavg` before and after.
    pub loadavg: (String, String),
    /// fsync on.
    pub fsync: bool,
    /// Payload bytes.
    pub payload: usize,
    /// Append runs.
    pub append: Vec<AppendFigures>,
    /// Files per closed bucket.
    pub close_files: usize,
    /// Close latency (ms): p50, p99, max.
    pub close_ms: Spread,
    /// Raw close floor (ms): p50, p99, max.
    pub raw_close_ms: Spread,
    /// Messages read.
    pub read_messages: usize,
    /// Read + merge from closed buckets (messages/s).
    pub read_buckets_per_s: f64,
    /// Read + merge from a compacted snapshot (messages/s).
    pub read_snapshot_per_s: f64,
}

fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg").map(|s| s.trim().to_string()).unwrap_or_default()
}

fn io_err(path: &Path, e: std::io::Error) -> Error {
    Error::store(format!("file://{}", path.display()), "benchmark", e)
}

fn ctx(cfg: LogConfig, clock: Arc<dyn Clock>, fsync: bool) -> Ctx {
    Ctx { cfg, clock, read_only_hint: false, fsync }
}

fn fresh_log(dir: &Path, fsync: bool, cfg: &LogConfig) -> Result<FsStorage> {
    let _ = fs::remove_dir_all(dir);
    // Driven from plain threads without a runtime: no deadline thread.
    let fs = FsStorage::new(dir, fsync).with_inline_io(true);
    block_on(fs.create_config(cfg))?;
    Ok(fs)
}

/// Runs `op` on `n` threads for `secs`; returns per-thread counts.
fn run_threads<T: Send>(
    n: usize,
    secs: Duration,
    setup: impl Fn(usize) -> T + Sync,
    op: impl Fn(&mut T) -> Result<bool> + Sync,
) -> Result<(Vec<u64>, Vec<u64>, Duration)> {
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (stop, setup, op) = (&stop, &setup, &op);
                scope.spawn(move || -> Result<(u64, u64)> {
                    let mut state = setup(i);
                    let (mut ops, mut flagged) = (0u64, 0u64);
                    while !stop.load(Ordering::Relaxed) {
                        flagged += u64::from(op(&mut state)?);
                        ops += 1;
                    }
                    Ok((ops, flagged))
                })
            })
            .collect();
        std::thread::sleep(secs);
        stop.store(true, Ordering::Relaxed);
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Ok((0, 0)))).collect::<Result<Vec<_>>>()
    })?;
    let elapsed = start.elapsed();
    Ok((results.iter().map(|r| r.0).collect(), results.iter().map(|r| r.1).collect(), elapsed))
}

/// p50, p99 and max, in ms.
type Spread = (f64, f64, f64);

fn percentiles(mut ms: Vec<f64>) -> Spread {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms.get(((ms.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
    (at(0.5), at(0.99), at(1.0))
}

/// Runs the benchmark.
pub fn run(opts: &BenchOptions) -> Result<BenchReport> {
    let before = loadavg();
    let clock = SystemClock::shared();
    let settings = crate::LogSettings::default();
    let cfg = settings.config_at(clock.wall_ms()).map_err(|reason| Error::InvalidOptions { reason })?;
    let payload = Bytes::from(vec![b'x'; opts.payload]);
    let frame_len = crate::frame::encode("w-0000000000000000", 0, &[], &[(0, payload.clone())])
        .map_err(|reason| Error::InvalidOptions { reason })?
        .len();
    let mut append = Vec::new();
    for &n in &opts.writers {
        // Raw floor.
        let raw_dir = opts.dir.join(format!("raw-append-{n}"));
        let _ = fs::remove_dir_all(&raw_dir);
        fs::create_dir_all(&raw_dir).map_err(|e| io_err(&raw_dir, e))?;
        let record = vec![b'x'; frame_len];
        let (raw, _, raw_t) = run_threads(
            n,
            opts.seconds,
            |i| raw_dir.join(format!("w{i}.data")),
            |path| {
                let mut f = OpenOptions::new().append(true).create(true).open(&*path).map_err(|e| io_err(path, e))?;
                f.write_all(&record).map_err(|e| io_err(path, e))?;
                if opts.fsync {
                    f.sync_data().map_err(|e| io_err(path, e))?;
                }
                Ok(false)
            },
        )?;
        // The bag.
        let log = fresh_log(&opts.dir.join(format!("bag-append-{n}")), opts.fsync, &cfg)?;
        let c = ctx(cfg, clock.clone(), opts.fsync);
        let (bag, fast, bag_t) = run_threads(
            n,
            opts.seconds,
            |i| WriterState { id: format!("w{i}-bench"), next_seq: 0, slots: Default::default() },
            |w| {
                let batch = Batch::one(clock.wall_ms(), payload.clone());
                let out = block_on(protocol::append(&log, &c, w, &batch))?;
                Ok(out.decision == protocol::Decision::Early)
            },
        )?;
        let raw_total = raw.iter().sum::<u64>() as f64 / raw_t.as_secs_f64();
        let bag_total = bag.iter().sum::<u64>() as f64 / bag_t.as_secs_f64();
        append.push(AppendFigures {
            writers: n,
            raw_per_writer: raw_total / n as f64,
            raw_total,
            bag_per_writer: bag_total / n as f64,
            bag_total,
            ratio: bag_total / raw_total.max(f64::MIN_POSITIVE),
            fast_path: fast.iter().sum(),
        });
    }
    let close_files = 100;
    let (close_ms, raw_close_ms) = bench_close(opts, &cfg, close_files, &payload)?;
    let (read_buckets_per_s, read_snapshot_per_s) = bench_read(opts, &payload)?;
    Ok(BenchReport {
        loadavg: (before, loadavg()),
        fsync: opts.fsync,
        payload: opts.payload,
        append,
        close_files,
        close_ms,
        raw_close_ms,
        read_messages: opts.read_messages,
        read_buckets_per_s,
        read_snapshot_per_s,
    })
}

/// Close latency of buckets holding `files` writer files, beside the raw floor.
fn bench_close(opts: &BenchOptions, cfg: &LogConfig, files: usize, payload: &Bytes) -> Result<(Spread, Spread)> {
    let dir = opts.dir.join("bag-close");
    let log = fresh_log(&dir, opts.fsync, cfg)?;
    // Write in the past through a clock an hour behind, then close on one an hour ahead.
    let past = ManualClock::starting_at(cfg.first_bucket_ms + 20 * cfg.width_ms);
    let write_ctx = ctx(*cfg, past.shared(), opts.fsync);
    let mut buckets = Vec::new();
    for k in 0..opts.close_buckets as u64 {
        let bucket = cfg.first_bucket_ms + (20 + k) * cfg.width_ms;
        for w in 0..files {
            let mut state = WriterState { id: format!("w{w}"), next_seq: 0, slots: Default::default() };
            block_on(protocol::append(&log, &write_ctx, &mut state, &Batch::one(bucket, payload.clone())))?;
        }
        buckets.push(bucket);
    }
    let later = ManualClock::starting_at(cfg.first_bucket_ms + 3_600_000);
    let close_ctx = ctx(*cfg, later.shared(), opts.fsync);
    let mut ours = Vec::new();
    let mut raw = Vec::new();
    for &bucket in &buckets {
        let t = Instant::now();
        block_on(protocol::close(&log, &close_ctx, bucket))?;
        ours.push(t.elapsed().as_secs_f64() * 1e3);
        // The raw floor on the same (now closed) bucket directory.
        let bdir = log.bucket_dir(bucket)?;
        let t = Instant::now();
        let mut list = String::new();
        for entry in fs::read_dir(&bdir).map_err(|e| io_err(&bdir, e))? {
            let path = entry.map_err(|e| io_err(&bdir, e))?.path();
            if path.extension().is_some_and(|e| e == "data") {
                let f = File::open(&path).map_err(|e| io_err(&path, e))?;
                let len = f.metadata().map_err(|e| io_err(&path, e))?.len();
                if opts.fsync {
                    f.sync_all().map_err(|e| io_err(&path, e))?;
                }
                list.push_str(&format!("{} {len}\n", path.display()));
            }
        }
        let tmp = bdir.join("raw.tmp");
        let mut f = File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
        f.write_all(list.as_bytes()).map_err(|e| io_err(&tmp, e))?;
        if opts.fsync {
            f.sync_all().map_err(|e| io_err(&tmp, e))?;
        }
        fs::hard_link(&tmp, bdir.join("raw.lock")).map_err(|e| io_err(&tmp, e))?;
        raw.push(t.elapsed().as_secs_f64() * 1e3);
        let _ = fs::remove_file(&tmp);
    }
    Ok((percentiles(ours), percentiles(raw)))
}

/// Read rates from closed buckets and from a snapshot of the same messages.
fn bench_read(opts: &BenchOptions, payload: &Bytes) -> Result<(f64, f64)> {
    let buckets = 100u64;
    let cfg =
        LogConfig { width_ms: 1000, grace_ms: 2000, max_skew_ms: 500, chunk_buckets: buckets, first_bucket_ms: 0 };
    let log = fresh_log(&opts.dir.join("bag-read"), false, &cfg)?;
    let writers = 10usize;
    let per_batch = 1000usize;
    let clock = ManualClock::starting_at(0);
    let c = ctx(cfg, clock.shared(), false);
    let mut states: Vec<WriterState> =
        (0..writers).map(|w| WriterState { id: format!("w{w}"), next_seq: 0, slots: Default::default() }).collect();
    let per_bucket = opts.read_messages.div_ceil(buckets as usize);
    for b in 0..buckets {
        let mut left = per_bucket;
        let mut i = 0;
        while left > 0 {
            let n = left.min(per_batch);
            let messages = (0..n).map(|k| (b * 1000 + (k % 1000) as u64, payload.clone())).collect();
            block_on(protocol::append(&log, &c, &mut states[i % writers], &Batch { messages, leases: vec![] }))?;
            left -= n;
            i += 1;
        }
    }
    clock.advance(Duration::from_secs(buckets + 10));
    for b in 0..buckets {
        block_on(protocol::close(&log, &c, b * 1000))?;
    }
    let read_opts = ReadOptions { skip_snapshots: true, ..ReadOptions::default() };
    let t = Instant::now();
    let n = block_on(read_range(&log, &cfg, &read_opts))?.messages.len();
    let from_buckets = n as f64 / t.elapsed().as_secs_f64();
    block_on(snapshot::compact(&log, &c))?;
    let t = Instant::now();
    let read = block_on(read_range(&log, &cfg, &ReadOptions::default()))?;
    let from_snapshot = read.messages.len() as f64 / t.elapsed().as_secs_f64();
    if read.snapshots == 0 || read.messages.len() != n {
        return Err(Error::store(log.url(), "benchmark", "the snapshot read did not match the bucket read"));
    }
    Ok((from_buckets, from_snapshot))
}
