//! What a witness costs the server: one ed25519 signature per batch plus a
//! Merkle tree over the batch, for batches of 1 to 64 grants.
//!
//! `cargo run --release -p tenure-server --example witness_cost`

use std::time::Instant;

use tenure_core::{EndedHow, Mode};
use tenure_server::Signer;
use tenure_server::witness::{Witness, WitnessKind, WitnessPredecessor};

fn main() {
    let signer = Signer::generate();
    let body = |i: u64| {
        let w = Witness {
            kind: WitnessKind::Grant,
            name: format!("bench-0a1b2c/w{i}"),
            mode: Mode::Exclusive,
            token: 1_795_334_446_225_029 + i,
            deadline_ms: 1_795_334_448_225,
            server_time_us: 1_795_334_446_225_000,
            holder_nonce: "9f2c4e1ab3d07c55".into(),
            predecessor: Some(WitnessPredecessor {
                token: 1_795_334_446_225_028,
                nonce: Some("9f2c4e1ab3d07c55".into()),
                how: EndedHow::Released,
                at_ms: 1_795_334_446_224,
                watermark_ms: None,
            }),
        };
        let mut b = Vec::new();
        w.encode_body(&mut b);
        b
    };
    println!("{:>6} {:>14} {:>14}", "batch", "µs per batch", "µs per grant");
    for n in [1usize, 8, 24, 64] {
        let bodies: Vec<Vec<u8>> = (0..n as u64).map(body).collect();
        let rounds = (20_000 / n).max(200);
        let start = Instant::now();
        let mut bytes = 0;
        for _ in 0..rounds {
            bytes += signer.sign_batch(&bodies).unwrap_or_default().iter().map(Vec::len).sum::<usize>();
        }
        let per_batch = start.elapsed().as_secs_f64() * 1e6 / rounds as f64;
        println!(
            "{n:>6} {per_batch:>14.1} {:>14.2}   ({} bytes per witness)",
            per_batch / n as f64,
            bytes / (rounds * n)
        );
    }
}
