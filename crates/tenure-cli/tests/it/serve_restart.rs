//! `tenure serve` as a process: kill -9 and restart on the same port. No grant
//! comes inside the restart quarantine, and every token after it is above every
//! token handed out before the crash; `/readyz` says not ready until then. Also
//! `tenure lock` over `tenure://`.
#![cfg(feature = "server")]

use crate::serve_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serve_common::{http_get, serve};
use tenure::{AcquireRequest, Attempt, Error, Holder, LeaseName, LeaseStore, LossReason, Mode, OpenOptions};

/// `--max-lease` of the test servers; the quarantine is this plus 1 s.
const MAX_LEASE: Duration = Duration::from_secs(2);
const QUARANTINE: Duration = Duration::from_secs(3);

fn req(name: &str, holder: &Arc<Holder>) -> AcquireRequest {
    AcquireRequest {
        name: LeaseName::new(name).expect("name"),
        mode: Mode::Exclusive,
        ttl: MAX_LEASE,
        holder: holder.clone(),
        retake: false,
        meta: None,
    }
}

/// Asks until granted; asserts every refusal is the quarantine and that no grant
/// comes before `not_before`.
async fn first_grant(store: &dyn LeaseStore, r: &AcquireRequest, not_before: Instant) -> tenure::Grant {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match store.try_acquire(r).await {
            Ok(Attempt::Granted(g)) => {
                assert!(Instant::now() >= not_before, "granted token {} inside the restart quarantine", g.token);
                return g;
            }
            Ok(Attempt::Busy(b)) => assert_eq!(b.holders[0].holder.nonce, "quarantine", "{}", b.describe()),
            // The server is still starting: connection refused.
            Err(e) => assert!(e.is_transient(), "{e}"),
        }
        assert!(Instant::now() < deadline, "no grant within a minute");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn kill_9_and_restart_keeps_tokens_above_every_earlier_one() {
    let started = Instant::now();
    let first = serve(&["--listen", "127.0.0.1:0", "--max-lease", "2s"]);
    let url = format!("tenure://{}", first.addr);
    let store = tenure_server::TenureStore::new(&url, &OpenOptions::default()).expect("store");
    let me = Arc::new(Holder::current());
    first_grant(&store, &req("crash/warmup", &me), started + QUARANTINE).await;
    let mut before = Vec::new();
    let mut held = None;
    for i in 0..30 {
        match store.try_acquire(&req(&format!("crash/{}", i % 3), &me)).await.expect("acquire") {
            Attempt::Granted(g) => {
                before.push(g.token);
                if i == 29 {
                    held = Some(g);
                } else {
                    store.release(&g, &Default::default()).await.expect("release");
                }
            }
            Attempt::Busy(b) => panic!("busy: {}", b.describe()),
        }
    }
    let addr = first.addr.clone();
    drop(first); // SIGKILL

    let restarted = Instant::now();
    // A state file of its own: the default one would be under $HOME.
    let state = tempfile::tempdir().expect("tempdir");
    let state = state.path().join("serve.state");
    let _second = serve(&["--listen", &addr, "--max-lease", "2s", "--state", state.to_str().expect("utf-8")]);
    let top = before.iter().copied().max().expect("tokens");
    let g = first_grant(&store, &req("crash/0", &Arc::new(Holder::current())), restarted + QUARANTINE).await;
    assert!(g.token > top, "token {} after the restart must exceed every earlier token ({top})", g.token);
    for i in 1..3 {
        let g = first_grant(&store, &req(&format!("crash/{i}"), &me), restarted + QUARANTINE).await;
        assert!(g.token > top);
    }
    match store.renew(&held.expect("held at the crash")).await {
        Err(Error::Lost { .. }) => {}
        other => panic!("a grant from before the crash must be lost, got {other:?}"),
    }
}

#[test]
fn readyz_is_503_until_the_restart_quarantine_ends_and_healthz_is_200_throughout() {
    let started = Instant::now();
    let server = serve(&["--listen", "127.0.0.1:0", "--max-lease", "2s", "--http", "127.0.0.1:0"]);
    let http = server.http.clone().expect("tenure serve names its status page");
    let mut refused = 0;
    loop {
        let asked = Instant::now();
        let (code, body) = http_get(&http, "/readyz");
        assert_eq!(http_get(&http, "/healthz"), (200, "ok\n".to_string()));
        if code == 200 {
            assert_eq!(body, "ok\n");
            // The server started after `started`, so its quarantine ends after this.
            assert!(Instant::now() >= started + QUARANTINE, "ready {:?} after start", started.elapsed());
            break;
        }
        assert_eq!(code, 503, "{body}");
        assert!(body.starts_with("not ready: restart quarantine"), "{body}");
        if asked < started + QUARANTINE {
            refused += 1;
        }
        assert!(started.elapsed() < QUARANTINE + Duration::from_secs(20), "still not ready: {body}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(refused > 0, "the first answers came inside the quarantine and said not ready");
}

#[tokio::test]
async fn tenure_lock_runs_a_command_under_a_lease_from_the_server() {
    let server = serve(&["--listen", "127.0.0.1:0", "--max-lease", "2s"]);
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["lock", &format!("tenure://{}", server.addr), "jobs/nightly", "--ttl", "2s", "--timeout", "60s", "--"])
        .args(["sh", "-c", "echo token=$TENURE_TOKEN"])
        .output()
        .await
        .expect("run tenure lock");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "tenure lock failed: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    let token: u64 = stdout.trim().strip_prefix("token=").and_then(|t| t.parse().ok()).expect("a token");
    assert!(token > 1_577_836_800_000_000, "tokens embed the server time in µs: {token}");
}

#[test]
fn a_ttl_above_the_servers_max_lease_is_refused_at_once_in_the_users_terms() {
    // Inside the restart quarantine a valid request would wait for seconds; this
    // one must be refused before any waiting.
    let server = serve(&["--listen", "127.0.0.1:0", "--max-lease", "2s"]);
    let asked = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["lock", &format!("tenure://{}", server.addr), "jobs/long", "--ttl", "1m", "--timeout", "60s", "--"])
        .arg("true")
        .output()
        .expect("run tenure lock");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(asked.elapsed() < QUARANTINE, "refused only after {:?}: {err}", asked.elapsed());
    assert!(err.contains("a TTL of 1m is longer than the server's --max-lease of 2s"), "{err}");
    assert!(!err.contains("..=") && !err.contains("ttl_ms"), "wire field names or range syntax: {err}");
}

/// Restarted with a lower `--max-lease` (6 s, then 1 s) while a 6 s lease is
/// held: the quarantine covers the longest lease granted before the restart
/// (kept in the state file), not the new flag's, so the name is granted again
/// only after the old lease's deadline, with a higher token; the holder's
/// renewal, refused for its 6 s duration, is reported as lost at once (not
/// retried as an outage); and once that quarantine is over, the recorded bound
/// comes down to the new flag.
#[tokio::test]
async fn a_restart_with_a_lower_max_lease_waits_out_the_leases_granted_before_it() {
    const LONG: Duration = Duration::from_secs(6);
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("serve.state");
    let state_arg = state.to_str().expect("a UTF-8 path");
    let started = Instant::now();
    let first = serve(&["--listen", "127.0.0.1:0", "--max-lease", "6s", "--state", state_arg]);
    let url = format!("tenure://{}", first.addr);
    let store = Arc::new(tenure_server::TenureStore::new(&url, &OpenOptions::default()).expect("store"));
    let me = Arc::new(Holder::current());
    let ask = |name: &str, ttl: Duration, holder: &Arc<Holder>| AcquireRequest { ttl, ..req(name, holder) };
    first_grant(&*store, &ask("lower/warmup", LONG, &me), started + LONG + Duration::from_secs(1)).await;
    // The holder's deadline, on its clock, is at least this (its request went out after it).
    let sent = Instant::now();
    // Failures to reach the server while it restarts do not end the lease.
    let opts = tenure::LeaseOptions::exclusive().with_ttl(LONG).with_max_failures(10);
    let held = tenure::Client::new(store.clone()).try_acquire("lower/held", &opts).await.expect("granted");
    let old_token = held.token();
    let addr = first.addr.clone();
    drop(first); // SIGKILL

    let _second = serve(&["--listen", &addr, "--max-lease", "1s", "--state", state_arg]);
    let reason = tokio::time::timeout(Duration::from_secs(60), held.lost()).await.expect("the holder learns");
    assert!(matches!(reason, LossReason::Stolen { .. }), "lost as refused, not after retries: {reason}");
    let other = Arc::new(Holder::current().with_label("after the restart"));
    let g = first_grant(&*store, &ask("lower/held", Duration::from_secs(1), &other), sent + LONG).await;
    assert!(g.token > old_token, "token {} after the restart, {old_token} before it", g.token);

    let lowered = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&state).expect("the state file").contains("\nmax_lease_ms 1000\n") {
        assert!(Instant::now() < lowered, "the recorded bound stays at 6 s: {:?}", std::fs::read_to_string(&state));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A state file that says something else stops the start, naming the file.
#[test]
fn a_garbage_state_file_stops_the_start_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("serve.state");
    std::fs::write(&state, "max_lease: sixty seconds\n").expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["serve", "--listen", "127.0.0.1:0", "--max-lease", "1s", "--state"])
        .arg(&state)
        .output()
        .expect("run tenure serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains(&format!("state file {}", state.display())), "{err}");
    assert_eq!(std::fs::read_to_string(&state).expect("read"), "max_lease: sixty seconds\n", "left as it was");
}

/// A server restarted on its state file keeps its identity, so a client of
/// several servers places names as before and goes on using it; a new state
/// file is a new identity, which that client refuses (its names may have
/// moved), and `--server-id` gives one outright.
#[tokio::test]
async fn a_restarted_server_keeps_its_identity_and_a_changed_one_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (state, other_state) = (dir.path().join("a.state"), dir.path().join("b.state"));
    let arg = |p: &std::path::Path| p.to_str().expect("a UTF-8 path").to_string();
    let started = Instant::now();
    let a = serve(&["--listen", "127.0.0.1:0", "--max-lease", "1s", "--state", &arg(&state)]);
    let b = serve(&["--listen", "127.0.0.1:0", "--max-lease", "1s", "--server-id", "locks-b"]);
    assert_eq!(b.id, "locks-b");
    let url = format!("tenure://{},{}", a.addr, b.addr);
    let store = tenure_server::TenureStore::new(&url, &OpenOptions::default()).expect("store");
    let me = Arc::new(Holder::current());
    let on_a = (0..).map(|i| format!("kept/{i}")).find(|n| tenure_server::client::place(&[&a.id, &b.id], n) == 0);
    let on_a = on_a.expect("a name on a");
    let ask = AcquireRequest { ttl: Duration::from_secs(1), ..req(&on_a, &me) };
    first_grant(&store, &ask, started + Duration::from_secs(2)).await;
    assert_eq!(store.server_for(&on_a), Some(0));
    let (addr, id) = (a.addr.clone(), a.id.clone());
    drop(a);

    let restarted = Instant::now();
    let a = serve(&["--listen", &addr, "--max-lease", "1s", "--state", &arg(&state)]);
    assert_eq!(a.id, id, "the identity is kept in the state file");
    let g = first_grant(&store, &ask, restarted + Duration::from_secs(2)).await;
    assert!(g.token > 0);
    drop(a);

    let _a = serve(&["--listen", &addr, "--max-lease", "1s", "--state", &arg(&other_state)]);
    // The first call may still find the old connection, closed under it.
    let name = LeaseName::new(on_a.as_str()).expect("name");
    for attempt in 0.. {
        let err = store.inspect(&name).await.expect_err("another server");
        if err.to_string().contains(&format!("and was {id}")) {
            assert!(!err.is_transient(), "a changed identity is no passing failure: {err}");
            break;
        }
        assert!(attempt < 50 && err.is_transient(), "{err}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
