//! What `tenure bench` reports for one target at one client count, and how:
//! the figures, a table line or a JSON object, the median of rounds, and the
//! ratios with the store measured just before an anchor.

use std::io::Write;

use anyhow::Result;
use hdrhistogram::Histogram;
use serde::Serialize;

use super::{BenchArgs, Op, Target, cpu};

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
pub(super) struct CpuReading {
    server: Option<f64>,
    own: f64,
}

impl CpuReading {
    pub(super) async fn take(target: &dyn Target) -> Self {
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
    pub(super) fn per_op(&self, later: &Self, ops: u64) -> Option<CpuPerOp> {
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
    pub(super) fn of(
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
pub(super) struct Ratios {
    pub(super) rate: Vec<f64>,
    pub(super) server_cpu: Vec<f64>,
    pub(super) pair_cpu: Vec<f64>,
    pub(super) gap_rtt: Vec<f64>,
}

/// Grants of a hand-over run back to the client that had just released.
#[derive(Debug, Serialize)]
pub(crate) struct Retakes {
    pub(crate) per_sec: f64,
    /// Their share of all grants that followed a release.
    pub(crate) share: f64,
}

/// Writes one target's figures: a JSON object, or a line of the table.
pub(super) fn show(out: &mut impl Write, f: &Figures, width: usize, json: bool) -> Result<()> {
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
pub(super) fn median_round(mut figures: Vec<Figures>) -> Option<Figures> {
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
pub(super) fn median(mut values: Vec<f64>) -> Option<f64> {
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
