//! `tenure bag audit --witness-key` checks witnesses signed in the lease server's
//! format with its key: a valid one verifies, a forged or tampered one, or one
//! that does not match the grant the message claims, is a violation.

#![cfg(all(feature = "bag", feature = "server"))]

use std::process::Command;

use tenure::{EndedHow, Mode};
use tenure_bag::{BagOptions, Batch, LeaseStamp, Log};
use tenure_server::witness::{Signer, Witness, WitnessKind, WitnessPredecessor};

const TENURE: &str = env!("CARGO_BIN_EXE_tenure");

fn witness(signer: &Signer, token: u64, deadline_ms: u64, server_time_ms: u64) -> Vec<u8> {
    let w = Witness {
        kind: WitnessKind::Grant,
        name: "acct/1".into(),
        mode: Mode::Exclusive,
        token,
        deadline_ms,
        server_time_us: server_time_ms * 1_000,
        holder_nonce: format!("holder{token}"),
        predecessor: Some(WitnessPredecessor {
            token: token - 1,
            nonce: None,
            how: EndedHow::Released,
            at_ms: server_time_ms,
            watermark_ms: Some(server_time_ms - 1),
        }),
    };
    let mut body = Vec::new();
    w.encode_body(&mut body);
    signer.sign_batch(&[body]).expect("a witness body fits").remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_verifies_lease_server_witnesses_and_names_bad_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log");
    std::fs::create_dir(&path).expect("mkdir log");
    let log = Log::open(path.to_str().expect("utf8"), BagOptions::default()).expect("log");
    let now = log.clock().wall_ms();
    let signer = Signer::from_seed(&[7; 32]);
    let deadline = now + 30_000;
    let good = witness(&signer, 5, deadline, now - 10);
    let mut tampered = good.clone();
    let at = tampered.len() / 3;
    tampered[at] ^= 1;
    let cases: [(&str, u64, Vec<u8>); 4] = [
        ("valid", 5, good.clone()),
        ("tampered", 5, tampered),
        ("forged", 5, witness(&Signer::from_seed(&[8; 32]), 5, deadline, now - 10)),
        ("other-grant", 6, good),
    ];
    for (writer, token, bytes) in cases {
        let lease = LeaseStamp {
            name: "acct/1".into(),
            token,
            deadline_ms: deadline,
            watermark_ms: Some(now - 11),
            holder: format!("holder{token}"),
            witness: Some(bytes),
        };
        // Token 6 writes after token 5, so the tokens themselves are in order.
        let ts = now + 10 * (token - 5);
        let batch = Batch { messages: vec![(ts, writer.into())], leases: vec![lease] };
        let out = log.writer(writer).expect("writer").append(batch).await.expect("append");
        assert!(out.accepted);
    }
    let audit = Command::new(TENURE)
        .args(["bag", "audit", path.to_str().expect("utf8"), "--json", "--witness-key", &signer.public_key_hex()])
        .output()
        .expect("audit");
    assert_eq!(audit.status.code(), Some(1), "violations exit 1");
    let lines: Vec<serde_json::Value> =
        String::from_utf8_lossy(&audit.stdout).lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    let mut flagged: Vec<&str> = lines.iter().filter_map(|l| l["message"]["writer"].as_str()).collect();
    flagged.sort();
    assert_eq!(flagged, ["forged", "other-grant", "tampered"]);
    assert!(lines.iter().filter(|l| l.get("kind").is_some()).all(|l| l["kind"] == "witness"));
    let summary = &lines.last().expect("summary")["summary"];
    assert_eq!(summary["witnesses_verified"].as_u64(), Some(2), "the valid one, and the one for another grant");
    let unverified =
        Command::new(TENURE).args(["bag", "audit", path.to_str().expect("utf8"), "--json"]).output().expect("audit");
    assert_eq!(unverified.status.code(), Some(0), "without a key nothing can be judged");
}
