//! The journal under leases from a real `tenure serve`: messages carry the
//! server's signed witnesses, and the audit verifies them with the key the
//! server prints.

#![cfg(all(feature = "bag", feature = "server"))]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

const TENURE: &str = env!("CARGO_BIN_EXE_tenure");

/// A `tenure serve` process, killed when dropped.
struct Serve {
    child: Child,
    addr: String,
    key: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve() -> Serve {
    let mut child = Command::new(TENURE)
        .args(["serve", "--listen", "127.0.0.1:0", "--max-lease", "2s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start tenure serve");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let (mut addr, mut key) = (None, None);
    while addr.is_none() || key.is_none() {
        let line = lines.next().expect("tenure serve exited early").expect("read stdout");
        if let Some(a) = line.strip_prefix("tenure serve: listening on tenure://") {
            addr = Some(a.to_string());
        }
        if let Some(k) = line.strip_prefix("tenure serve: witness public key ") {
            key = Some(k.trim().to_string());
        }
    }
    std::thread::spawn(move || lines.for_each(drop));
    Serve { child, addr: addr.unwrap_or_default(), key: key.unwrap_or_default() }
}

fn bag(args: &[&str]) -> (i32, String) {
    let out = Command::new(TENURE).arg("bag").args(args).output().expect("run tenure");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

fn json_lines(out: &str) -> Vec<serde_json::Value> {
    out.lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect()
}

#[test]
fn journal_messages_carry_server_witnesses_that_the_audit_verifies() {
    let server = serve();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    std::fs::create_dir(&log).expect("mkdir log");
    let log = log.to_str().expect("utf8");
    let store = format!("tenure://{}", server.addr);
    // The first acquisition waits out the server's restart quarantine.
    for msg in ["one", "two", "three"] {
        let (code, out) =
            bag(&["append", log, "--json", "--lease", "acct/1", "--lease-store", &store, "--ttl", "2s", msg]);
        assert_eq!(code, 0, "{out}");
    }
    let (_, out) = bag(&["read", log, "--json"]);
    let witnessed = json_lines(&out).iter().filter(|l| l["leases"][0]["witness"].is_string()).count();
    assert_eq!(witnessed, 3, "every message carries the grant's witness: {out}");
    let (code, out) = bag(&["audit", log, "--json", "--witness-key", &server.key]);
    assert_eq!(code, 0, "{out}");
    let lines = json_lines(&out);
    let summary = &lines.last().expect("summary")["summary"];
    assert_eq!(summary["witnesses_verified"].as_u64(), Some(3), "{out}");
    assert_eq!(summary["violation_count"].as_u64(), Some(0), "{out}");
    let other_key = "00".repeat(32);
    let (code, _) = bag(&["audit", log, "--json", "--witness-key", &other_key]);
    assert_eq!(code, 1, "witnesses do not verify with another key");
}
