//! `--timeout` bounds every passing store failure, first contact included: a
//! lease server that is not up yet (connection refused) is tried again until
//! the timeout, and the command runs once it answers; without `--timeout`, a
//! store that cannot be reached on first contact is misconfigured (69, at once).

use crate::common;
use crate::serve_common;

use std::time::{Duration, Instant};

use common::{lock, run, stderr};
use serve_common::serve;

const LIMIT: Duration = Duration::from_secs(60);

/// A loopback port nobody listens on (as of now).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

#[test]
fn without_timeout_an_unreachable_store_is_said_at_once() {
    let url = format!("tenure://127.0.0.1:{}", free_port());
    let out = run(&mut lock(&url, "job", &["--ttl", "1s"], &["true"]), LIMIT);
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
}

#[test]
fn under_timeout_an_unreachable_store_is_retried_until_the_timeout() {
    let url = format!("tenure://127.0.0.1:{}", free_port());
    let began = Instant::now();
    let out = run(&mut lock(&url, "job", &["--ttl", "1s", "--timeout", "2s"], &["true"]), LIMIT);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(began.elapsed() >= Duration::from_secs(2), "gave up after {:?}, before --timeout", began.elapsed());
}

#[test]
fn under_timeout_a_server_that_comes_up_late_runs_the_command() {
    let port = free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("ran");
    let url = format!("tenure://127.0.0.1:{port}");
    let script = format!("echo ran > '{}'", marker.display());
    let waiter = lock(&url, "job", &["--ttl", "1s", "--timeout", "30s"], &["sh", "-c", &script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start tenure lock");
    std::thread::sleep(Duration::from_millis(1_500));
    let listen = format!("127.0.0.1:{port}");
    let state = dir.path().join("serve.state");
    let server = serve(&["--listen", &listen, "--max-lease", "1s", "--state", state.to_str().expect("utf-8")]);
    assert_eq!(server.addr, listen);
    let out = common::wait_output(waiter, LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(marker.exists(), "the command did not run");
}
