//! `tenure serve` as a process with more leases than one frame can list:
//! `tenure status tenure://…` lists every one of them; pointed at the server's
//! HTTP port instead, it says so; and the server's limit flags are
//! range-checked at start.
#![cfg(feature = "server")]

use crate::serve_common;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serve_common::serve;
use tenure::{AcquireRequest, AllAttempt, Holder, LeaseName, LeaseStore, Mode, OpenOptions};

/// Bytes in each lease's name: 251, near the longest a name may be (255), so
/// that fewer leases make a listing too long for one frame.
const NAME_LEN: usize = 251;
/// Leases made: their names alone are more than the largest frame a client
/// takes (8 MiB).
const LEASES: usize = tenure_server::wire::MAX_RESPONSE / NAME_LEN + 1;

fn name(i: usize) -> String {
    let segment = |c: &str| c.repeat(59);
    format!("many/{i:06}/{}/{}/{}/{}", segment("n"), segment("m"), segment("o"), segment("p"))
}

/// Fills the server: batches of 512 leases, retried through its quarantine.
async fn fill(store: &dyn LeaseStore) {
    let holder = Arc::new(Holder::current());
    let names: Vec<String> = (0..LEASES).map(name).collect();
    assert!(names.iter().all(|n| n.len() == NAME_LEN), "every name is {NAME_LEN} bytes");
    let deadline = Instant::now() + Duration::from_secs(120);
    for chunk in names.chunks(512) {
        let reqs: Vec<AcquireRequest> = chunk
            .iter()
            .map(|n| AcquireRequest {
                name: LeaseName::new(n.as_str()).expect("name"),
                mode: Mode::Exclusive,
                ttl: Duration::from_secs(2),
                holder: holder.clone(),
                retake: false,
                meta: None,
            })
            .collect();
        loop {
            assert!(Instant::now() < deadline, "could not fill the server within two minutes");
            match store.try_acquire_all(&reqs).await {
                Ok(AllAttempt::Granted(_)) => break,
                // The restart quarantine looks like a busy lease; the server may still be starting.
                Ok(AllAttempt::Busy(_)) | Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenure_status_lists_more_leases_than_one_frame_can_hold() {
    // Retired records are kept, so every lease stays listed after its grant expires.
    let server =
        serve(&["--listen", "127.0.0.1:0", "--max-lease", "2s", "--connection-threads", "1", "--retain", "200000"]);
    let url = format!("tenure://{}", server.addr);
    let store = tenure_server::TenureStore::new(&url, &OpenOptions::default()).expect("store");
    fill(&store).await;
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["status", &url, "--json"])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(600), out).await.expect("status finishes").expect("run");
    assert!(out.status.success(), "tenure status failed: {}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(doc["schema_version"], 1);
    let rows = doc["leases"].as_array().expect("an array of leases");
    assert_eq!(rows.len(), LEASES, "every lease is listed");
    assert_eq!(rows[0]["name"], name(0));
    assert_eq!(rows[LEASES - 1]["name"], name(LEASES - 1));
}

/// `tenure status tenure://…` shows how many wait in a lease's queue on the
/// server (protocol 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenure_status_shows_the_servers_queue() {
    // A short restart quarantine (--max-lease), and a holder that renews.
    let server = serve(&["--listen", "127.0.0.1:0", "--max-lease", "3s"]);
    let url = format!("tenure://{}", server.addr);
    let ask = |label: &str| AcquireRequest {
        name: LeaseName::new("queued").expect("name"),
        mode: Mode::Exclusive,
        ttl: Duration::from_secs(3),
        holder: Arc::new(Holder::current().with_label(label)),
        retake: false,
        meta: None,
    };
    let store = Arc::new(tenure_server::TenureStore::new(&url, &OpenOptions::default()).expect("store"));
    let deadline = Instant::now() + Duration::from_secs(60);
    let opts = tenure::LeaseOptions::exclusive().with_ttl(Duration::from_secs(3)).with_timeout(Duration::from_secs(30));
    let held = tenure::Client::new(store.clone()).acquire("queued", &opts).await.expect("the holder");
    let waiters: Vec<_> = (0..3)
        .map(|i| {
            let (store, req) = (store.clone(), ask(&format!("w{i}")));
            tokio::spawn(async move { store.acquire_queued(&req, Duration::from_secs(600)).await })
        })
        .collect();
    let status = || async {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
            .args(["status", &url, "queued", "--json"])
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(60), out).await.expect("status finishes").expect("run");
        assert!(out.status.success(), "tenure status failed: {}", String::from_utf8_lossy(&out.stderr));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        doc["leases"][0]["waiters"].as_u64()
    };
    let mut seen = None;
    while Instant::now() < deadline {
        seen = status().await;
        if seen == Some(3) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen, Some(3), "three wait in the server's queue");
    for w in waiters {
        w.abort();
    }
    drop(held);
}

/// `tenure status` at the `--http` port (a mix-up of the two ports): the
/// server's HTTP side answers the binary hello with a 400, and the client says
/// that the address answered in HTTP and is no lease server, at once.
#[test]
fn tenure_status_at_the_http_port_says_it_is_not_a_lease_server() {
    let server = serve(&["--listen", "127.0.0.1:0", "--max-lease", "2s", "--http", "127.0.0.1:0"]);
    let http = server.http.clone().expect("tenure serve names its status page");
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["status", &format!("tenure://{http}")])
        .output()
        .expect("run tenure status");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&http)
            && stderr.contains("answered in HTTP: not a tenure lease server")
            && stderr.contains("--http"),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}: {stderr}", started.elapsed());
}

#[test]
fn tenure_serve_refuses_limits_no_server_can_work_with() {
    for (flag, value, says) in [
        ("--hello-timeout", "0", "--hello-timeout"),
        ("--io-timeout", "0", "--io-timeout"),
        ("--max-pre-hello", "0", "--max-pre-hello"),
        ("--max-connections", "0", "--max-connections"),
        ("--http-max-connections", "0", "--http-max-connections"),
        ("--max-lease", "31d", "--max-lease"),
        ("--idle-timeout", "20y", "--idle-timeout"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
            .args(["serve", "--listen", "127.0.0.1:0", flag, value])
            .output()
            .expect("run tenure serve");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag} {value} was accepted");
        assert!(stderr.contains(says), "{flag} {value}: {stderr}");
    }
    let help = Command::new(env!("CARGO_BIN_EXE_tenure")).args(["serve", "--help"]).output().expect("help");
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in
        ["--hello-timeout", "--max-pre-hello", "--http-max-connections", "--http-idle-timeout", "--http-timeout"]
    {
        assert!(help.contains(flag), "--help documents {flag}");
    }
}
