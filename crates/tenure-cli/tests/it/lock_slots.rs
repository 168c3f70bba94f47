//! `tenure lock --slots N` as real processes on the directory store, the lease
//! server and S3 (moto): never more than N commands at once (by the intervals
//! each records on this machine's clock), both slots used, each slot's tokens
//! growing from one holder to the next; `status` shows `k/2 slots`; another
//! count is refused (64) while a slot is held; a busy `--no-wait` exits 75.

use crate::common;
use crate::serve_common::serve;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::*;

/// Records `<slot> <token> <lease> start|end <time>` around a pause; waits for
/// `$1/go` to exist first if `$2` is `hold`.
const HOLDER: &str = r#"
printf '%s %s %s start %s\n' "$TENURE_SLOT" "$TENURE_TOKEN" "$TENURE_LEASE" "$EPOCHREALTIME" >> "$1/log"
if [ "$2" = hold ]; then while [ ! -e "$1/go" ]; do sleep 0.02; done; else sleep 0.2; fi
printf '%s %s %s end %s\n' "$TENURE_SLOT" "$TENURE_TOKEN" "$TENURE_LEASE" "$EPOCHREALTIME" >> "$1/log"
"#;

fn holder(url: &str, extra: &[String], dir: &Path, how: &str) -> Child {
    let dir = dir.to_str().expect("utf-8");
    let mut flags: Vec<&str> = vec!["--slots", "2", "--ttl", "5s", "--timeout", "120s"];
    flags.extend(extra.iter().map(String::as_str));
    lock(url, "jobs", &flags, &["bash", "-c", HOLDER, "holder", dir, how])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tenure lock")
}

fn slots_on(url: &str, extra: &[String]) {
    let scratch = tempfile::tempdir().expect("scratch");
    let dir = scratch.path();
    std::fs::write(dir.join("log"), "").expect("log");
    let with =
        |args: &[&str]| -> Vec<String> { args.iter().map(|s| s.to_string()).chain(extra.iter().cloned()).collect() };

    // Two holders hold until told: both slots are held at once.
    let mut first: Vec<Child> = (0..2).map(|_| holder(url, extra, dir, "hold")).collect();
    let started = wait_lines(&dir.join("log"), 2, LIMIT);
    assert_eq!(started.len(), 2, "{started:?}");
    let status = run(tenure().arg("status").arg(url).arg("jobs").args(extra), LIMIT);
    assert_eq!(status.status.code(), Some(0), "a name with a slot held is held: {}", stderr(&status));
    let table = stdout(&status);
    assert!(table.contains("2/2 slots"), "{table}");
    assert!(table.contains("jobs/+slots/0") && table.contains("jobs/+slots/1"), "each holder: {table}");
    let busy = run(
        &mut lock(
            url,
            "jobs",
            &with(&["--slots", "2", "--no-wait", "--ttl", "5s"]).iter().map(String::as_str).collect::<Vec<_>>(),
            &["true"],
        ),
        LIMIT,
    );
    assert_eq!(busy.status.code(), Some(75), "a third holder of two slots: {}", stderr(&busy));
    let other = run(
        &mut lock(
            url,
            "jobs",
            &with(&["--slots", "3", "--no-wait", "--ttl", "5s"]).iter().map(String::as_str).collect::<Vec<_>>(),
            &["true"],
        ),
        LIMIT,
    );
    assert_eq!(other.status.code(), Some(64), "another count while slots are held: {}", stderr(&other));
    assert!(stderr(&other).contains("in use with 2 slots"), "{}", stderr(&other));

    // Six more queue behind them, then all run.
    let mut rest: Vec<Child> = (0..6).map(|_| holder(url, extra, dir, "run")).collect();
    std::fs::write(dir.join("go"), "").expect("go");
    for c in first.iter_mut().chain(rest.iter_mut()) {
        let code = wait_status(c, Duration::from_secs(180)).code();
        let mut said = String::new();
        if let Some(mut err) = c.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut err, &mut said);
        }
        assert_eq!(code, Some(0), "a holder failed: {said}");
    }
    let status = run(tenure().arg("status").arg(url).arg("jobs").args(extra), LIMIT);
    assert_eq!(status.status.code(), Some(1), "no slot held: {}", stdout(&status));
    assert!(stdout(&status).contains("0/2 slots"), "{}", stdout(&status));

    // The intervals, on this machine's clock: never more than two at once.
    let lines = lines(&dir.join("log"));
    assert_eq!(lines.len(), 16, "{lines:?}");
    let mut events: Vec<(f64, i32)> = Vec::new();
    let mut by_slot: Vec<Vec<(f64, u64, &str)>> = vec![Vec::new(), Vec::new()];
    for l in &lines {
        let f: Vec<&str> = l.split(' ').collect();
        let [slot, token, lease, what, at] = f.as_slice() else { panic!("{l:?}") };
        let slot: usize = slot.parse().expect("TENURE_SLOT is 0 or 1");
        assert!(slot < 2, "{l}");
        assert_eq!(*lease, format!("jobs/+slots/{slot}"), "TENURE_LEASE names the slot's lease");
        let at: f64 = at.parse().expect("time");
        events.push((at, if *what == "start" { 1 } else { -1 }));
        by_slot[slot].push((at, token.parse().expect("token"), what));
    }
    // An end and a start at the same instant: the end first.
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut now = 0;
    for (_, step) in events {
        now += step;
        assert!(now <= 2, "more than two commands at once: {lines:#?}");
    }
    for (slot, events) in by_slot.iter_mut().enumerate() {
        assert!(!events.is_empty(), "slot {slot} never used");
        events.sort_by(|a, b| a.0.total_cmp(&b.0));
        // One holder at a time per slot, each with a higher token than the last.
        for pair in events.chunks(2) {
            assert!(matches!(pair, [(_, t1, "start"), (_, t2, "end")] if t1 == t2), "slot {slot}: {events:?}");
        }
        let tokens: Vec<u64> = events.iter().step_by(2).map(|e| e.1).collect();
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "slot {slot}'s tokens: {tokens:?}");
    }
}

#[test]
fn slots_on_the_directory_store() {
    let store = FileStore::new();
    slots_on(&store.url(), &[]);
}

#[test]
fn slots_on_the_lease_server() {
    let server = serve(&["--listen", "127.0.0.1:0", "--max-lease", "10s"]);
    slots_on(&server.url, &[]);
}

#[cfg(feature = "object")]
#[test]
fn slots_on_s3_moto() {
    let Some((url, extra)) = moto_store("lock-slots") else { return };
    slots_on(&url, &extra);
}
