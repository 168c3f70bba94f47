//! Acquire+release cycles straight on the lease table, no runtime, no network:
//! the cost of the core's decisions alone. For profiling (a fixed count of
//! cycles, so instruction counts under `valgrind --tool=callgrind` compare run
//! to run) and for a quick rate on plain threads.
//!
//! `cargo run --release -p tenure-server --example core_cycles -- [cycles] [threads] [names per thread]`
//! (`--profile profiling` instead of `--release` keeps line tables for callgrind).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure_core::{Holder, Mode, SystemClock};
use tenure_server::leases::{Acquired, Ask};
use tenure_server::{Core, CoreOptions};

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().ok());
    let cycles = args.next().flatten().unwrap_or(1_000_000);
    let threads = args.next().flatten().unwrap_or(1).max(1);
    let names = args.next().flatten().unwrap_or(1).max(1);
    let mut opts = CoreOptions::new(Duration::from_secs(60));
    opts.quarantine = Duration::ZERO;
    let core = Arc::new(Core::new(SystemClock::shared(), opts));
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let core = core.clone();
            std::thread::spawn(move || {
                let holder = Arc::new(Holder::current());
                let names: Vec<String> = (0..names).map(|n| format!("bench/t{t}/n{n}")).collect();
                let mut failed = 0u64;
                for i in 0..cycles {
                    let name = &names[i % names.len()];
                    let ask =
                        Ask { name, mode: Mode::Exclusive, ttl_ms: 2_000, holder: &holder, retake: true, meta: None };
                    let token = match core.acquire(std::slice::from_ref(&ask), false) {
                        Ok(Acquired::Granted(g)) => g[0].token,
                        _ => {
                            failed += 1;
                            continue;
                        }
                    };
                    if !matches!(core.release(name, token, None, &holder.nonce, false, None, None), Ok(true)) {
                        failed += 1;
                    }
                }
                failed
            })
        })
        .collect();
    let failed: u64 = workers.into_iter().map(|w| w.join().unwrap_or(u64::MAX)).sum();
    let secs = start.elapsed().as_secs_f64();
    let total = (cycles * threads) as f64;
    println!(
        "{total} cycles on {threads} thread(s) in {secs:.3}s: {:.0} cycles/s, {:.0} ns per cycle per thread ({failed} failed)",
        total / secs,
        secs * 1e9 * threads as f64 / total
    );
}
