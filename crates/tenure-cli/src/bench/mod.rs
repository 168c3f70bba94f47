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
mod fs_raw;
mod handover;
mod redis;
mod rtt;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use async_trait::async_trait;
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use serde::Serialize;
use tenure::{
    AcquireRequest, Attempt, Client, Grant, Holder, Lease, LeaseName, LeaseOptions, LeaseStore, Mode, ReleaseRequest,
};
use tokio::sync::Mutex;

use crate::durations::duration;
use crate::exit::Fail;
use crate::stores::StoreArgs;

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

/// CPU per measured operation, in µs.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct CpuPerOp {
    /// The target's server, when it has one the bench can ask.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) server_us: Option<f64>,
    /// The load generator: this process, every thread.
    pub(crate) bench_us: f64,
}

/// CPU readings at one moment: the server's (if any) and this process's.
struct CpuReading {
    server: Option<f64>,
    own: f64,
}

impl CpuReading {
    async fn take(target: &dyn Target) -> Self {
        let server = match target.server_cpu().await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{}: server CPU not read: {e:#}", target.label());
                None
            }
        };
        Self { server, own: cpu::own_seconds() }
    }

    /// Per operation from `self` to `later`, over `ops` operations.
    fn per_op(&self, later: &Self, ops: u64) -> Option<CpuPerOp> {
        let n = ops as f64;
        let us = |a: f64, b: f64| (b >= a && ops > 0).then(|| (b - a) * 1e6 / n);
        let server_us = match (self.server, later.server) {
            (Some(a), Some(b)) => us(a, b),
            _ => None,
        };
        Some(CpuPerOp { server_us, bench_us: us(self.own, later.own)? })
    }
}

/// Figures for one target at one client count.
#[derive(Debug, Serialize)]
pub(crate) struct Figures {
    pub(crate) target: String,
    pub(crate) anchor: bool,
    pub(crate) op: Op,
    pub(crate) clients: usize,
    /// Threads of the load generator.
    pub(crate) threads: u16,
    pub(crate) ops: u64,
    pub(crate) seconds: f64,
    pub(crate) cycles_per_sec: f64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) max_us: f64,
    /// Hand-overs: the grants back to the client that had just released,
    /// which are not hand-overs (`cycles_per_sec` counts grants to another
    /// client, and p50/p99/max are their release-to-grant gaps; with one
    /// client, its re-takes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) retakes: Option<Retakes>,
    /// With `--rounds`: each round's rate, in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rounds: Option<Vec<f64>>,
    /// An anchor's store rate ÷ its rate: the median of the rounds' ratios.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) store_ratio: Option<f64>,
    /// CPU per operation (cycles and renewals).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cpu: Option<CpuPerOp>,
    /// An anchor's store server CPU per operation ÷ its own (median of rounds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) store_server_cpu_ratio: Option<f64>,
    /// The same for server + load generator, the pair sharing the machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) store_pair_cpu_ratio: Option<f64>,
    /// Hand-overs: gap p50 ÷ the loopback round trip p50 of the same round
    /// (median of rounds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) gap_rtt_ratio: Option<f64>,
}

impl Figures {
    /// The figures of `hist` (latencies in µs), measured over `secs`; the
    /// comparisons with other targets are filled in later.
    fn of(
        target: String,
        anchor: bool,
        clients: usize,
        args: &BenchArgs,
        hist: &Histogram<u64>,
        secs: f64,
        cpu: Option<CpuPerOp>,
    ) -> Self {
        Figures {
            target,
            anchor,
            op: args.op,
            clients,
            threads: args.threads,
            ops: hist.len(),
            seconds: secs,
            cycles_per_sec: hist.len() as f64 / secs,
            p50_us: hist.value_at_quantile(0.5) as f64,
            p99_us: hist.value_at_quantile(0.99) as f64,
            max_us: hist.max() as f64,
            retakes: None,
            rounds: None,
            store_ratio: None,
            cpu,
            store_server_cpu_ratio: None,
            store_pair_cpu_ratio: None,
            gap_rtt_ratio: None,
        }
    }
}

/// Per round, an anchor's comparisons with the store measured before it.
#[derive(Default)]
struct Ratios {
    rate: Vec<f64>,
    server_cpu: Vec<f64>,
    pair_cpu: Vec<f64>,
    gap_rtt: Vec<f64>,
}

/// Grants of a hand-over run back to the client that had just released.
#[derive(Debug, Serialize)]
pub(crate) struct Retakes {
    pub(crate) per_sec: f64,
    /// Their share of all grants that followed a release.
    pub(crate) share: f64,
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

/// Writes one target's figures: a JSON object, or a line of the table.
fn show(out: &mut impl Write, f: &Figures, width: usize, json: bool) -> Result<()> {
    if json {
        writeln!(out, "{}", serde_json::to_string(f)?)?;
        return Ok(out.flush()?);
    }
    let mut ratio = f.store_ratio.map(|r| format!("  store: {} this rate", times(r))).unwrap_or_default();
    if let Some(r) = f.store_server_cpu_ratio {
        ratio.push_str(&format!(", {} its server CPU/op", times(r)));
    }
    if let Some(r) = f.store_pair_cpu_ratio {
        ratio.push_str(&format!(", {} the pair's (server + bench)", times(r)));
    }
    if let Some(r) = f.gap_rtt_ratio {
        ratio.push_str(&format!("  gap p50: {} the loopback round trip", times(r)));
    }
    let spread = f.rounds.as_ref().map(|rates| {
        let (lo, hi) = rates.iter().fold((f64::MAX, 0f64), |(lo, hi), &r| (lo.min(r), hi.max(r)));
        format!("  {} rounds: {lo:.0}–{hi:.0}/s", rates.len())
    });
    let same = f
        .retakes
        .as_ref()
        .filter(|_| f.clients > 1)
        .map(|r| format!("  re-takes by the releaser: {:.0}/s ({:.0}% of grants)", r.per_sec, r.share * 100.0));
    // A hand-over run in which nobody else ever got the lease has no gap.
    let us = |v: f64| if v.is_nan() { "-".to_string() } else { format!("{v:.1}") };
    let server_cpu = f.cpu.and_then(|c| c.server_us).map_or("-".into(), us);
    let bench_cpu = f.cpu.map_or("-".into(), |c| us(c.bench_us));
    writeln!(
        out,
        "{:<width$} {:>7} {:>12.0} {:>10} {:>10} {:>10} {:>11} {:>11}{ratio}{}{}",
        f.target,
        f.clients,
        f.cycles_per_sec,
        us(f.p50_us),
        us(f.p99_us),
        us(f.max_us),
        server_cpu,
        bench_cpu,
        spread.unwrap_or_default(),
        same.unwrap_or_default()
    )?;
    Ok(out.flush()?)
}

/// The round with the median rate (the lower middle one of an even count),
/// with every round's rate when there was more than one.
fn median_round(mut figures: Vec<Figures>) -> Option<Figures> {
    let rates: Vec<f64> = figures.iter().map(|f| f.cycles_per_sec).collect();
    let mut order: Vec<usize> = (0..figures.len()).collect();
    order.sort_by(|&a, &b| rates[a].total_cmp(&rates[b]));
    let middle = *order.get(order.len().checked_sub(1)? / 2)?;
    let mut f = figures.swap_remove(middle);
    if rates.len() > 1 {
        f.rounds = Some(rates);
    }
    Some(f)
}

/// The median of `values` (the mean of the middle two of an even count).
fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// A ratio with two significant digits, two decimals below 10 and none from
/// 10 on: `0.0042×`, `0.50×`, `1.73×`, `131×`.
fn times(x: f64) -> String {
    if !x.is_finite() || x <= 0.0 {
        return format!("{x}×");
    }
    let decimals = if x >= 10.0 { 0 } else { (1 - x.log10().floor() as i32).clamp(2, 8) as usize };
    format!("{x:.decimals$}×")
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

/// A hand-over client: its own holder identity, and its lease while it holds it.
type Contender = (Arc<Client>, Option<Lease>);

/// A lease store: acquire+release cycles, or renewals, on one lease per worker.
struct StoreTarget {
    /// The URL as given, options included (the store's own URL drops them).
    url: String,
    store: Arc<dyn LeaseStore>,
    op: Op,
    ttl: Duration,
    holder: Arc<Holder>,
    /// Each worker's request, made in `setup`: the load generator's own cost
    /// stays out of the figures.
    requests: std::sync::RwLock<Vec<Arc<AcquireRequest>>>,
    held: Mutex<Vec<Option<Grant>>>,
    /// Hand-overs: each worker's client (a holder of its own) and lease.
    contenders: std::sync::Mutex<Vec<Option<Contender>>>,
    run: String,
    /// The server's Prometheus metrics, for its CPU (see [`cpu`]).
    metrics: Vec<String>,
}

impl StoreTarget {
    fn new(url: &str, store: Arc<dyn LeaseStore>, op: Op, ttl: Duration) -> Self {
        Self {
            url: url.to_string(),
            store,
            op,
            ttl,
            holder: Arc::new(Holder::current()),
            requests: std::sync::RwLock::new(Vec::new()),
            held: Mutex::new(Vec::new()),
            contenders: std::sync::Mutex::new(Vec::new()),
            run: tenure_core::random_nonce()[..6].to_string(),
            metrics: Vec::new(),
        }
    }

    fn request(&self, w: usize) -> Result<Arc<AcquireRequest>> {
        let requests = self.requests.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        requests.get(w).cloned().context("bench worker without a request")
    }

    fn contenders(&self) -> std::sync::MutexGuard<'_, Vec<Option<Contender>>> {
        self.contenders.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn handover_name(&self) -> String {
        format!("bench-{}/handover", self.run)
    }

    async fn acquire(&self, w: usize) -> Result<Grant> {
        match self.store.try_acquire(&*self.request(w)?).await? {
            Attempt::Granted(g) => Ok(g),
            Attempt::Busy(b) => bail!("bench lease unexpectedly busy: {}", b.describe()),
        }
    }
}

#[async_trait]
impl Target for StoreTarget {
    fn label(&self) -> String {
        let what = match self.op {
            Op::Cycle => "acquire+release",
            Op::Renew => "renew",
            Op::Handover => "waiting acquire, release",
        };
        format!("{} {what}", self.url)
    }

    fn contends(&self) -> bool {
        true
    }

    async fn server_cpu(&self) -> Result<Option<f64>> {
        if self.metrics.is_empty() {
            return Ok(None);
        }
        cpu::prometheus_seconds(&self.metrics).await.map(Some)
    }

    async fn hold(&self, w: usize) -> Result<()> {
        let client = self.contenders().get(w).and_then(|c| c.as_ref()).map(|(c, _)| c.clone());
        let client = client.context("no bench client")?;
        // The waiting path users take: tenure's default backoff, and the
        // store's watch where it has one.
        let opts = LeaseOptions::exclusive().with_ttl(self.ttl);
        let lease = client.acquire(&self.handover_name(), &opts).await?;
        if let Some(Some((_, held))) = self.contenders().get_mut(w) {
            *held = Some(lease);
        }
        Ok(())
    }

    async fn unhold(&self, w: usize) -> Result<()> {
        let lease = self.contenders().get_mut(w).and_then(|c| c.as_mut()).and_then(|(_, l)| l.take());
        lease.context("releasing a lease the bench client does not hold")?.release().await?;
        Ok(())
    }

    async fn setup(&self, w: usize) -> Result<()> {
        {
            let mut requests = self.requests.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            while requests.len() <= w {
                let name = LeaseName::new(format!("bench-{}/w{}", self.run, requests.len()))?;
                requests.push(Arc::new(AcquireRequest {
                    name,
                    mode: Mode::Exclusive,
                    ttl: self.ttl,
                    holder: self.holder.clone(),
                    retake: true,
                    meta: None,
                }));
            }
        }
        if self.op == Op::Handover {
            let mut contenders = self.contenders();
            if contenders.len() <= w {
                contenders.resize_with(w + 1, || None);
            }
            contenders[w] = Some((Arc::new(Client::new(self.store.clone())), None));
            return Ok(());
        }
        let mut held = self.held.lock().await;
        if held.len() <= w {
            held.resize(w + 1, None);
        }
        if self.op == Op::Renew {
            held[w] = Some(self.acquire(w).await?);
        }
        Ok(())
    }

    async fn op(&self, w: usize) -> Result<()> {
        match self.op {
            Op::Cycle => {
                let g = self.acquire(w).await?;
                self.store.release(&g, &ReleaseRequest::default()).await?;
            }
            Op::Renew => {
                let g = self.held.lock().await[w].take().context("no held lease")?;
                let g = self.store.renew(&g).await?;
                self.held.lock().await[w] = Some(g);
            }
            Op::Handover => bail!("hand-overs are measured with hold and unhold"),
        }
        Ok(())
    }

    async fn teardown(&self) -> Result<()> {
        let leases: Vec<Lease> = self.contenders().drain(..).flatten().filter_map(|(_, l)| l).collect();
        for l in leases {
            l.release().await?;
        }
        let grants: Vec<Grant> = self.held.lock().await.drain(..).flatten().collect();
        for g in grants {
            self.store.release(&g, &ReleaseRequest::default()).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ratios_keep_two_significant_digits() {
        let shown: Vec<String> = [0.0042, 0.5, 1.734, 9.99, 131.4, 0.0].into_iter().map(super::times).collect();
        assert_eq!(shown, ["0.0042×", "0.50×", "1.73×", "9.99×", "131×", "0×"]);
    }

    fn figures(rate: f64) -> super::Figures {
        super::Figures {
            target: format!("t{rate}"),
            anchor: false,
            op: super::Op::Cycle,
            clients: 1,
            threads: 1,
            ops: 1,
            seconds: 1.0,
            cycles_per_sec: rate,
            p50_us: rate,
            p99_us: rate,
            max_us: rate,
            retakes: None,
            rounds: None,
            store_ratio: None,
            cpu: None,
            store_server_cpu_ratio: None,
            store_pair_cpu_ratio: None,
            gap_rtt_ratio: None,
        }
    }

    #[test]
    fn the_median_round_is_reported_with_every_rate() {
        let f = super::median_round([300.0, 100.0, 200.0].map(figures).into()).expect("a round");
        assert_eq!(f.cycles_per_sec, 200.0);
        assert_eq!(f.p99_us, 200.0, "the latencies are the median round's own");
        assert_eq!(f.rounds, Some(vec![300.0, 100.0, 200.0]));
        let one = super::median_round(vec![figures(5.0)]).expect("a round");
        assert_eq!(one.rounds, None, "one round shows no spread");
        assert!(super::median_round(Vec::new()).is_none());
    }

    #[test]
    fn the_median_is_the_middle_value_or_the_mean_of_the_middle_two() {
        assert_eq!(super::median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(super::median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(super::median(Vec::new()), None);
    }
}
