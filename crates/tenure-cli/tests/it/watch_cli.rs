//! `tenure watch` as a real process: it sees a lease acquired, released, its
//! `tenure lock` killed with SIGKILL (the guard breaks the grant) and the
//! lease taken by a waiter, in that order, on the directory store, the lease
//! server and S3 (moto). A holder that dies with nobody to end its grant is
//! seen to expire and be taken over by the conformance suite
//! (`watch_sees_each_change_in_order`), on every store.

use crate::common;
use crate::serve_common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::*;

/// A running `tenure watch --json`, its lines arriving on a channel.
struct Watch {
    child: Child,
    lines: mpsc::Receiver<serde_json::Value>,
}

impl Watch {
    fn start(url: &str, name: &str, store_args: &[String]) -> Self {
        let mut child = tenure()
            .args(["watch", url, name, "--json", "--poll", "200ms"])
            .args(store_args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn tenure watch");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        Self { child, lines }
    }

    /// The next event's name and grant token.
    fn next(&self, what: &str) -> (String, Option<u64>) {
        let v = self.lines.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|e| panic!("no line for {what}: {e}"));
        (v["event"].as_str().unwrap_or_default().to_string(), v["token"].as_u64())
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        signal(self.child.id(), rustix::process::Signal::INT);
        let status = wait_status(&mut self.child, LIMIT);
        if !std::thread::panicking() {
            assert_eq!(status.code(), Some(0), "tenure watch ends with 0 on SIGINT");
        }
    }
}

fn held_token(url: &str, name: &str, store_args: &[String]) -> u64 {
    let mut token = None;
    assert!(
        eventually(LIMIT, || {
            token = holders_with(url, name, store_args).first().map(|h| h.1);
            token.is_some()
        }),
        "the lease was never held"
    );
    token.unwrap_or_default()
}

fn acquire_release_kill_takeover(url: &str, store_args: &[String]) {
    let name = "service/leader";
    let w = Watch::start(url, name, store_args);
    assert_eq!(w.next("the state now").0, "current");

    let once = run(tenure().args(["lock", url, name, "--ttl", "2s"]).args(store_args).args(["--", "true"]), LIMIT);
    assert_eq!(once.status.code(), Some(0), "{}", stderr(&once));
    let (event, t1) = w.next("the first acquire");
    assert_eq!(event, "acquired");
    assert_eq!(w.next("the release"), ("released".to_string(), t1));

    // A leader that is SIGKILLed: its guard stops the service and ends the grant.
    let mut leader = tenure()
        .args(["lock", url, name, "--ttl", "2s"])
        .args(store_args)
        .args(["--", "sleep", "300"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the leader");
    let t2 = held_token(url, name, store_args);
    assert_eq!(w.next("the leader's acquire"), ("acquired".to_string(), Some(t2)));
    // A hot standby waits; it then holds the lease a while, so that a store
    // read every --poll sees its grant in the record (a grant taken and
    // ended between two reads is told by its ending only, and the leader's
    // ending would then be known only as "ended").
    let standby = tenure()
        .args(["lock", url, name, "--ttl", "2s", "--timeout", "60s"])
        .args(store_args)
        .args(["--", "sleep", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the standby");
    leader.kill().expect("SIGKILL the leader's tenure");
    leader.wait().expect("reap");
    // Its guard ends the grant ("broken"); on a machine slow enough that the
    // grant's deadline passes first, the standby takes it over ("expired").
    let (ended, token) = w.next("the leader's end");
    assert!(ended == "broken" || ended == "expired", "the leader's grant ended as {ended:?}");
    assert_eq!(token, Some(t2));
    let (event, t3) = w.next("the standby's takeover");
    assert_eq!(event, "acquired");
    assert!(t3 > Some(t2), "the standby's token {t3:?} is above the leader's {t2}");
    let out = wait_output(standby, LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(w.next("the standby's release"), ("released".to_string(), t3));
}

#[test]
fn watch_sees_acquire_release_and_a_takeover_after_sigkill_on_the_file_store() {
    let store = FileStore::new();
    acquire_release_kill_takeover(&store.url(), &[]);
}

#[test]
fn watch_sees_acquire_release_and_a_takeover_after_sigkill_on_the_lease_server() {
    let server = serve_common::serve(&["--listen", "127.0.0.1:0", "--max-lease", "2s"]);
    let warm =
        run(tenure().args(["lock", &server.url, "warm-up", "--ttl", "2s", "--timeout", "30s", "--", "true"]), LIMIT);
    assert_eq!(warm.status.code(), Some(0), "{}", stderr(&warm));
    acquire_release_kill_takeover(&server.url, &[]);
}

#[cfg(feature = "object")]
#[test]
fn watch_sees_acquire_release_and_a_takeover_after_sigkill_on_s3_moto() {
    let Some((url, args)) = moto_store("watch") else { return };
    acquire_release_kill_takeover(&url, &args);
}

#[test]
fn watch_of_a_missing_directory_a_bad_name_or_a_zero_poll_fails_at_once() {
    let store = FileStore::new();
    let out = run(tenure().args(["watch", &store.path("nope").display().to_string(), "x"]), LIMIT);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    let out = run(tenure().args(["watch", &store.url(), "../x"]), LIMIT);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert_one_line_error(&out);
    // A poll of zero would read the store in a tight loop: refused.
    let out = run(tenure().args(["watch", &store.url(), "x", "--poll", "0s"]), LIMIT);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
}
