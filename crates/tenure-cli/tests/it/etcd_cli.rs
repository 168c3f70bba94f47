//! `tenure lock` / `status` on an `etcd://` store, as a user runs them: real
//! processes against the test etcd (`TENURE_TEST_ETCD`; skipped with a reason
//! when unset, required when `TENURE_REQUIRE_SERVERS=1`). Built only with the
//! `etcd` feature.
#![cfg(feature = "etcd")]

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

const LIMIT: Duration = Duration::from_secs(60);

/// A fresh key prefix on the test etcd, deleted afterwards.
struct Etcd {
    endpoint: String,
    url: String,
    prefix: String,
}

impl Etcd {
    fn new(what: &str) -> Option<Self> {
        let endpoint = match std::env::var("TENURE_TEST_ETCD") {
            Ok(v) if !v.is_empty() => v,
            _ if std::env::var("TENURE_REQUIRE_SERVERS").is_ok_and(|v| v == "1") => {
                panic!("TENURE_TEST_ETCD is not set but TENURE_REQUIRE_SERVERS=1: start the servers")
            }
            _ => {
                eprintln!("skipped: TENURE_TEST_ETCD is not set (scripts/servers.sh start etcd, then eval its env)");
                return None;
            }
        };
        let prefix = format!("tenure-test/cli-{what}-{}", tenure_core::random_nonce());
        let url = format!("etcd://{}/{prefix}", endpoint.trim_start_matches("http://"));
        Some(Self { endpoint, url, prefix })
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        use tenure_etcd::proto::etcdserverpb::DeleteRangeRequest;
        use tenure_etcd::rpc::{Connect, Etcd, prefix_end};
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        let (endpoint, prefix) = (self.endpoint.clone(), format!("{}/", self.prefix));
        rt.block_on(async move {
            let how = Connect { connect_timeout: std::time::Duration::from_secs(3), ..Connect::default() };
            if let Ok(c) = Etcd::connect(&[endpoint], &how).await {
                let range_end = prefix_end(prefix.as_bytes());
                let req = DeleteRangeRequest { key: prefix.into_bytes(), range_end, ..DeleteRangeRequest::default() };
                let _ = c.kv().delete_range(req).await;
            }
        });
    }
}

fn token_of(out: &std::process::Output) -> u64 {
    stdout(out).trim().parse().unwrap_or_else(|_| panic!("a token on stdout: {} / {}", stdout(out), stderr(out)))
}

#[test]
fn lock_on_etcd_hands_the_command_a_token_that_grows_with_each_run() {
    let Some(etcd) = Etcd::new("token") else { return };
    let echo = ["sh", "-c", "echo $TENURE_TOKEN"];
    let first = run(&mut lock(&etcd.url, "deploy", &["--ttl", "5s"], &echo), LIMIT);
    assert!(first.status.success(), "{}", stderr(&first));
    let second = run(&mut lock(&etcd.url, "deploy", &["--ttl", "5s"], &echo), LIMIT);
    assert!(second.status.success(), "{}", stderr(&second));
    assert!(token_of(&second) > token_of(&first));
}

#[test]
fn a_killed_holder_on_etcd_is_taken_over_by_a_waiter_and_no_wait_reports_it_busy_meanwhile() {
    let Some(etcd) = Etcd::new("kill") else { return };
    let ready = tempfile::NamedTempFile::new().expect("temp file");
    let script = format!("echo $TENURE_TOKEN > '{}'; exec sleep 60", ready.path().display());
    let mut holder = lock(&etcd.url, "job", &["--ttl", "2s"], &["sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn holder");
    wait_lines(ready.path(), 1, LIMIT);
    let held: u64 = std::fs::read_to_string(ready.path()).expect("token").trim().parse().expect("number");

    let busy = run(&mut lock(&etcd.url, "job", &["--no-wait"], &["true"]), LIMIT);
    assert_eq!(busy.status.code(), Some(75), "busy with --no-wait exits 75: {}", stderr(&busy));
    assert!(stderr(&busy).contains(&etcd.url), "the message names the store: {}", stderr(&busy));

    let status = run(tenure().args(["status", &etcd.url, "job"]), LIMIT);
    assert!(status.status.success() && stdout(&status).contains(&held.to_string()), "{}", stdout(&status));

    holder.kill().expect("kill -9 the holder");
    let _ = holder.wait();
    let killed = Instant::now();
    let echo = ["sh", "-c", "echo $TENURE_TOKEN"];
    let next = run(&mut lock(&etcd.url, "job", &["--ttl", "2s", "--timeout", "50s"], &echo), LIMIT);
    assert!(next.status.success(), "a waiter takes over a killed holder's lease: {}", stderr(&next));
    assert!(token_of(&next) > held);
    eprintln!("taken over {:?} after the holder was killed", killed.elapsed());
}

#[test]
fn an_unreachable_etcd_exits_69_naming_the_store() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let url = format!("etcd://127.0.0.1:{port}/locks");
    let out = run(
        &mut lock(&url, "x", &["--store-opt", "connect_timeout=1s", "--store-opt", "timeout=1s"], &["true"]),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    assert!(stderr(&out).contains(&url) && stderr(&out).contains(&format!("127.0.0.1:{port}")), "{}", stderr(&out));
}

#[test]
fn a_malformed_etcd_url_exits_64_saying_what_is_wrong() {
    for (url, why) in [
        ("etcd://127.0.0.1:2379", "no key prefix"),
        ("etcd://127.0.0.1:2379/x?tlz=1", "unknown option"),
        ("etcd://127.0.0.1:2379/x?ca_file=/ca.pem", "add tls=true"),
    ] {
        let out = run(&mut lock(url, "x", &[], &["true"]), LIMIT);
        assert_eq!(out.status.code(), Some(64), "{url}: {}", stderr(&out));
        assert!(stderr(&out).contains(why), "{url}: {}", stderr(&out));
    }
}
