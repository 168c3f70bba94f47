//! `tenure bench`: lease cycles per second and latency, next to raw anchors, in
//! one run on one machine.
//!
//! A target is a store URL (a *cycle* is `try_acquire` + `release` of a lease of
//! the worker's own, through the store API: the cost of the lease protocol) or an
//! anchor that does the nearest raw equivalent. A `file://` target is always
//! followed by the raw `link(2)` + `unlink(2)` pair on the same directory (and,
//! when the store fsyncs, the same pair with an fsync of the directory).
//!
//! `--op handover` measures the other case: N clients queued on *one* lease,
//! passing it on (see [`handover`]); a `file://` target is then followed by the
//! `flock(2)` anchor on the same directory. An anchor whose server does not
//! answer (`redis://`, `etcd-lock://`, `etcd-raw://`) is skipped with a line
//! saying so; the other targets still run.
//!
//! CPU per cycle ([`cpu`]): each line shows the CPU the load generator (this
//! process) used per operation, and for a target on a server the server's
//! (`tenure://` with `--server-metrics`, `redis://`, `etcd…://`); an anchor's
//! line compares the store's server CPU, and the pair's (server + load
//! generator: the two processes that share the machine), with its own.
//! `--op handover` also measures a loopback TCP round trip ([`rtt`]) in each
//! round, and compares each target's hand-over gap with it.

#[cfg(feature = "server")]
mod core;
mod cpu;
#[cfg(feature = "etcd")]
mod etcd_lock;
#[cfg(feature = "etcd")]
mod etcd_raw;
mod figures;
mod fs_raw;
mod handover;
mod redis;
mod rtt;
mod store;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use async_trait::async_trait;
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::durations::duration;
use crate::exit::Fail;
use crate::stores::StoreArgs;
use figures::{CpuPerOp, CpuReading, Ratios, median, median_round, show};
pub(crate) use figures::{Figures, Retakes};
use store::StoreTarget;

/// Most clients one run may have (each is a task, and a lease or a connection).
const MAX_CLIENTS: usize = 10_000;

/// A `--clients` count: at least one, at most [`MAX_CLIENTS`].
fn client_count(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_CLIENTS).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is not a number of clients from 1 to {MAX_CLIENTS}")),
    }
}

/// A `--seconds` duration: something to measure, so more than zero.
fn measured(s: &str) -> Result<Duration, String> {
    match duration(s)? {
        d if d.is_zero() => Err("a measurement of no time measures nothing: give more than zero".into()),
        d => Ok(d),
    }
}

/// `tenure bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// What to measure (repeatable): a store URL, or an anchor (`fs-raw:///dir`,
    /// `redis://host:port`, `etcd-raw://host:port`).
    #[arg(long = "target", required = true, value_name = "URL")]
    pub(crate) targets: Vec<String>,
    /// Concurrent clients, each on a lease of its own (comma-separated list runs
    /// each in turn).
    #[arg(long, value_delimiter = ',', default_value = "1", value_parser = client_count)]
    pub(crate) clients: Vec<usize>,
    /// Measured seconds per target and client count (after a short warm-up).
    #[arg(long, value_parser = measured, default_value = "3s", value_name = "DURATION")]
    pub(crate) seconds: Duration,
    /// Measure every target this many times, in turn (A B A B …), and report
    /// the median round: on a shared machine, whose speed drifts from second
    /// to second, an anchor's ratio is then taken within each round.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub(crate) rounds: u16,
    /// What one measured operation is. `handover`: `--clients` clients contend
    /// for one lease, each holding it for `--hold`; reports hand-overs per
    /// second (grants to another client than the releaser) and the gap from a
    /// release to the next client's grant, and the releaser's re-takes apart.
    #[arg(long, value_enum, default_value_t = Op::Cycle)]
    pub(crate) op: Op,
    /// With `--op handover`: how long each client holds the lease before it
    /// releases it and queues again.
    #[arg(long, value_parser = duration, default_value = "1ms", value_name = "DURATION")]
    pub(crate) hold: Duration,
    /// Lease TTL used by the benchmark.
    #[arg(long, value_parser = duration, default_value = "30s", value_name = "DURATION")]
    pub(crate) ttl: Duration,
    /// Do not add the raw anchor after `file://` targets.
    #[arg(long)]
    pub(crate) no_anchor: bool,
    /// One JSON object per line per target and client count.
    #[arg(long)]
    pub(crate) json: bool,
    /// Threads of the load generator. One leaves the other cores to a server on
    /// the same machine; the in-process `core://` wants one per core.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(crate) threads: u16,
    /// The Prometheus metrics of the `tenure serve` behind the `tenure://`
    /// targets (`http://HOST:PORT/metrics`, its `--http` address): the bench
    /// reads its `process_cpu_seconds_total` before and after each measured
    /// phase and shows the server's CPU per operation. Without it, a
    /// `tenure://` target's server CPU is not shown.
    #[arg(long, value_name = "URL", value_parser = cpu::metrics_url)]
    pub(crate) server_metrics: Option<String>,
    /// Store flags (the URL given here is ignored; targets name the stores).
    #[command(flatten)]
    pub(crate) store: BenchStoreFlags,
}

/// What a measured operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Op {
    /// Acquire then release a lease.
    Cycle,
    /// Renew a held lease.
    Renew,
    /// Pass one lease from client to client.
    Handover,
}

/// The shared store flags, without the positional URL.
#[derive(Debug, Args)]
pub(crate) struct BenchStoreFlags {
    /// Store-specific setting, repeatable.
    #[arg(long = "store-opt", value_name = "KEY=VALUE", value_parser = crate::stores::key_value)]
    pub(crate) store_opts: Vec<(String, String)>,
    /// Skip the conditional-write probe of object stores.
    #[arg(long)]
    pub(crate) trust_store: bool,
}

impl BenchStoreFlags {
    fn store_args(&self, url: &str) -> Result<StoreArgs> {
        let mut args = vec!["tenure".to_string(), url.to_string()];
        for (k, v) in &self.store_opts {
            args.extend(["--store-opt".to_string(), format!("{k}={v}")]);
        }
        if self.trust_store {
            args.push("--trust-store".into());
        }
        // A benchmark's directories are scratch: made if missing.
        args.push("--create".into());
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            store: StoreArgs,
        }
        use clap::Parser;
        // Only the environment (TENURE_MAX_SKEW, …) can be wrong here.
        Wrap::try_parse_from(args).map(|w| w.store).map_err(|e| {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            Fail::usage(first.trim_start_matches("error: ")).into()
        })
    }
}

/// One thing to measure.
#[async_trait]
pub(crate) trait Target: Send + Sync {
    /// How the target is shown.
    fn label(&self) -> String;
    /// Whether this is a raw anchor, compared with the store measured before it.
    fn is_anchor(&self) -> bool {
        false
    }
    /// Prepares worker `w` (untimed).
    async fn setup(&self, w: usize) -> Result<()> {
        let _ = w;
        Ok(())
    }
    /// One measured operation by worker `w`.
    async fn op(&self, w: usize) -> Result<()>;
    /// Whether it can measure hand-overs ([`Target::hold`], [`Target::unhold`]).
    fn contends(&self) -> bool {
        false
    }
    /// Hand-overs: waits until worker `w` holds the one contended lease.
    async fn hold(&self, w: usize) -> Result<()> {
        let _ = w;
        bail!("{} does not measure hand-overs", self.label())
    }
    /// Hand-overs: worker `w` lets the lease go.
    async fn unhold(&self, w: usize) -> Result<()> {
        let _ = w;
        bail!("{} does not measure hand-overs", self.label())
    }
    /// Cleans up after all workers (untimed).
    async fn teardown(&self) -> Result<()> {
        Ok(())
    }
    /// The CPU seconds the target's server has used so far (see [`cpu`]);
    /// `None` when it has no server, or none the bench can ask.
    async fn server_cpu(&self) -> Result<Option<f64>> {
        Ok(None)
    }
}

pub(crate) async fn run(args: BenchArgs) -> Result<ExitCode> {
    let mut targets: Vec<Arc<dyn Target>> = Vec::new();
    let mut skipped = Vec::new();
    for url in &args.targets {
        match make_targets(url, &args).await.with_context(|| format!("bench target {url}")) {
            Ok(made) => targets.extend(made),
            // An anchor's server that does not answer costs its line, not the run.
            Err(e) if is_anchor_url(url) && e.downcast_ref::<Fail>().is_none() => {
                skipped.push(format!("skipped {url} (anchor): {e:#}"));
            }
            Err(e) => return Err(e),
        }
    }
    if args.op == Op::Handover
        && let Some(t) = targets.iter().find(|t| !t.contends())
    {
        bail!(Fail::usage(format!("{} does not measure hand-overs (--op handover)", t.label())));
    }
    let mut out = std::io::stdout().lock();
    for line in &skipped {
        if args.json {
            eprintln!("{line}");
        } else {
            writeln!(out, "{line}")?;
        }
    }
    // The widest target's label sets the first column.
    let width = targets.iter().map(|t| t.label().chars().count()).max().unwrap_or(0).max(6);
    if !args.json {
        let s = if args.threads == 1 { "" } else { "s" };
        writeln!(out, "load generator: {} thread{s}", args.threads)?;
        if args.op == Op::Handover {
            writeln!(out, "one lease, each client holds it {}", humantime::format_duration(args.hold))?;
        }
        let (rate, p50, p99, max) = match args.op {
            Op::Handover => ("hand-overs/s", "gap p50 µs", "gap p99 µs", "gap max µs"),
            _ => ("ops/s", "p50 µs", "p99 µs", "max µs"),
        };
        writeln!(
            out,
            "{:<width$} {:>7} {:>12} {:>10} {:>10} {:>10} {:>11} {:>11}",
            "target", "clients", rate, p50, p99, max, "srv CPU µs", "bench CPU µs"
        )?;
    }
    let width = width.max(RTT_LABEL.chars().count());
    for &clients in &args.clients {
        // Every round measures every target once; an anchor is compared with
        // the store measured just before it in the same round.
        let mut runs: Vec<Vec<Figures>> = targets.iter().map(|_| Vec::new()).collect();
        let mut ratios: Vec<Ratios> = targets.iter().map(|_| Ratios::default()).collect();
        let mut rtts: Vec<Figures> = Vec::new();
        for _ in 0..args.rounds {
            // Hand-overs: the loopback round trip of this round first.
            let rtt_p50 = if args.op == Op::Handover {
                let f = loopback(clients, &args).await?;
                let p50 = f.p50_us;
                if args.rounds == 1 {
                    show(&mut out, &f, width, args.json)?;
                } else {
                    rtts.push(f);
                }
                Some(p50)
            } else {
                None
            };
            let mut store: Option<(f64, Option<CpuPerOp>)> = None;
            for (i, t) in targets.iter().enumerate() {
                let mut f = match args.op {
                    Op::Handover => handover::measure(t.clone(), clients, &args).await,
                    _ => measure(t.clone(), clients, &args).await,
                }
                .with_context(|| t.label())?;
                let r = &mut ratios[i];
                match (f.anchor, store) {
                    (true, Some((rate, cpu))) => {
                        r.rate.push(rate / f.cycles_per_sec);
                        if let (Some(s), Some(a)) = (cpu, f.cpu)
                            && let (Some(ss), Some(aa)) = (s.server_us, a.server_us)
                        {
                            r.server_cpu.push(ss / aa);
                            r.pair_cpu.push((ss + s.bench_us) / (aa + a.bench_us));
                        }
                    }
                    (false, _) => store = Some((f.cycles_per_sec, f.cpu)),
                    (true, None) => {}
                }
                if let Some(rtt) = rtt_p50.filter(|r| *r > 0.0 && f.p50_us.is_finite()) {
                    r.gap_rtt.push(f.p50_us / rtt);
                }
                if args.rounds == 1 {
                    // One round: each line as soon as it is measured.
                    f.store_ratio = r.rate.pop();
                    f.store_server_cpu_ratio = r.server_cpu.pop();
                    f.store_pair_cpu_ratio = r.pair_cpu.pop();
                    f.gap_rtt_ratio = r.gap_rtt.pop();
                    show(&mut out, &f, width, args.json)?;
                } else {
                    runs[i].push(f);
                }
            }
        }
        if let Some(f) = median_round(rtts) {
            show(&mut out, &f, width, args.json)?;
        }
        for (figures, r) in runs.into_iter().zip(ratios) {
            if let Some(mut f) = median_round(figures) {
                f.store_ratio = median(r.rate);
                f.store_server_cpu_ratio = median(r.server_cpu);
                f.store_pair_cpu_ratio = median(r.pair_cpu);
                f.gap_rtt_ratio = median(r.gap_rtt);
                show(&mut out, &f, width, args.json)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// How the loopback round trip is shown.
const RTT_LABEL: &str = "loopback TCP round trip, 1 byte (anchor)";

/// The loopback round trip as a line of figures (round trips per second).
async fn loopback(clients: usize, args: &BenchArgs) -> Result<Figures> {
    let hist = rtt::measure(args.seconds).await?;
    Ok(Figures::of(RTT_LABEL.into(), true, clients, args, &hist, args.seconds.as_secs_f64(), None))
}

/// Targets that are anchors on a server of their own.
fn is_anchor_url(url: &str) -> bool {
    ["redis://", "etcd-lock://", "etcd-raw://"].iter().any(|s| url.starts_with(s))
}

async fn make_targets(url: &str, args: &BenchArgs) -> Result<Vec<Arc<dyn Target>>> {
    let scheme = tenure::store_url::scheme(url).unwrap_or("file");
    Ok(match scheme {
        "redis" => vec![Arc::new(redis::RedisLock::connect(url, args.op, args.ttl).await?)],
        #[cfg(feature = "etcd")]
        "etcd-raw" => vec![Arc::new(etcd_raw::EtcdRaw::connect(url, args.op, args.ttl).await?)],
        #[cfg(feature = "etcd")]
        "etcd-lock" => vec![Arc::new(etcd_lock::EtcdLock::connect(url, args.op, args.ttl).await?)],
        // An anchor is skipped (see `run`), a store is a usage error.
        #[cfg(not(feature = "etcd"))]
        "etcd-raw" | "etcd-lock" => bail!("{scheme}:// needs a tenure built with the etcd feature (on by default)"),
        #[cfg(not(feature = "etcd"))]
        "etcd" => {
            bail!(Fail::usage(format!("{scheme}:// needs a tenure built with the etcd feature (on by default)")))
        }
        #[cfg(feature = "server")]
        "core" => {
            vec![Arc::new(core::CoreTarget::new(args.clients.iter().copied().max().unwrap_or(1), args.ttl))]
        }
        "flock" => vec![Arc::new(handover::Flock::new(url.trim_start_matches("flock://")))],
        "fs-raw" => vec![Arc::new(fs_raw::RawFs::new(url.trim_start_matches("fs-raw://"), false, false)?)],
        "fs-raw+fsync" => vec![Arc::new(fs_raw::RawFs::new(url.trim_start_matches("fs-raw+fsync://"), true, false)?)],
        _ => {
            let store = args.store.store_args(url)?.open().await?;
            let mut target = StoreTarget::new(url, store, args.op, args.ttl);
            target.metrics = server_metrics(scheme, url, args)?;
            let mut v: Vec<Arc<dyn Target>> = vec![Arc::new(target)];
            if scheme == "file" && !args.no_anchor {
                let params = args.store.store_opts.iter().cloned().collect();
                let dir = tenure::file::DirUrl::parse(url, &params)?;
                let path = &*dir.path.to_string_lossy();
                if args.op == Op::Handover {
                    v.push(Arc::new(handover::Flock::new(path)));
                    return Ok(v);
                }
                v.push(Arc::new(fs_raw::RawFs::new(path, false, dir.inline)?));
                if dir.fsync {
                    v.push(Arc::new(fs_raw::RawFs::new(path, true, dir.inline)?));
                }
            }
            v
        }
    })
}

/// Where a store's server says how much CPU it has used: the `--server-metrics`
/// URL for `tenure://`, every endpoint's `/metrics` for `etcd://`.
fn server_metrics(scheme: &str, url: &str, args: &BenchArgs) -> Result<Vec<String>> {
    Ok(match scheme {
        s if s.starts_with("tenure") => args.server_metrics.iter().cloned().collect(),
        #[cfg(feature = "etcd")]
        "etcd" => {
            let params = args.store.store_opts.iter().cloned().collect();
            let parsed = tenure_etcd::EtcdUrl::parse(url, &params)?;
            parsed.endpoints.iter().filter(|e| e.starts_with("http://")).map(|e| format!("{e}/metrics")).collect()
        }
        _ => Vec::new(),
    })
}

async fn measure(target: Arc<dyn Target>, clients: usize, args: &BenchArgs) -> Result<Figures> {
    let seconds = args.seconds;
    for w in 0..clients {
        target.setup(w).await?;
    }
    let warmup = (seconds / 5).min(Duration::from_secs(1));
    let start = Instant::now();
    let measure_from = start + warmup;
    let end = measure_from + seconds;
    let mut tasks = Vec::with_capacity(clients);
    for w in 0..clients {
        let t = target.clone();
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).context("histogram")?;
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                t.op(w).await?;
                if t0 >= measure_from {
                    hist.saturating_record(t0.elapsed().as_micros() as u64);
                }
            }
            anyhow::Ok(hist)
        }));
    }
    // CPU of the measured phase only: read when it starts and when it ends.
    tokio::time::sleep_until(measure_from.into()).await;
    let before = CpuReading::take(&*target).await;
    tokio::time::sleep_until(end.into()).await;
    let after = CpuReading::take(&*target).await;
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    for t in tasks {
        hist.add(t.await??)?;
    }
    target.teardown().await?;
    let secs = seconds.as_secs_f64();
    if hist.is_empty() {
        bail!("{}: no operation completed in {secs}s", target.label());
    }
    let cpu = before.per_op(&after, hist.len());
    Ok(Figures::of(target.label(), target.is_anchor(), clients, args, &hist, secs, cpu))
}
