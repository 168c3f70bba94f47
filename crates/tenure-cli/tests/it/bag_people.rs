//! `tenure bag` for people: plain words and dates instead of Debug names and unix
//! milliseconds, one JSON shape (schema_version, every time as `_ms` and `_at`),
//! `--from`/`--to` with dates and times ago, `read --follow`, and a read summary
//! that says what to run while buckets are open.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const TENURE: &str = env!("CARGO_BIN_EXE_tenure");

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn bag(args: &[&str]) -> Run {
    let out = Command::new(TENURE).arg("bag").args(args).output().expect("run tenure");
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(!run.stderr.contains("panicked"), "tenure bag {args:?} panicked: {}", run.stderr);
    run
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock after 1970").as_millis() as u64
}

fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// Appends "first" and "second" 4 s ago (past the grace), closes, appends "late"
/// into the closed bucket (rejected), and "fresh" now (an open bucket).
fn a_log_with_every_outcome(log: &str) -> Vec<Run> {
    let at = (now_ms() - 4_000).to_string();
    let runs = vec![
        bag(&["append", log, "--at", &at, "first", "second"]),
        bag(&["close", log]),
        bag(&["append", log, "--at", &at, "late"]),
        bag(&["append", log, "fresh"]),
    ];
    assert_eq!(runs.iter().map(|r| r.code).collect::<Vec<_>>(), [0, 0, 1, 0], "{}", runs[2].stdout);
    runs
}

#[test]
fn human_output_has_words_and_dates_not_debug_names_or_ranges() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    std::fs::create_dir(&log).expect("mkdir log");
    let log = log.to_str().expect("utf8");
    let mut runs = a_log_with_every_outcome(log);
    assert!(runs[0].stdout.starts_with("accepted: 2 messages (seq 0 to 1) from writer "), "{}", runs[0].stdout);
    assert!(runs[2].stdout.starts_with("rejected: 1 message"), "{}", runs[2].stdout);
    assert!(runs[2].stdout.contains("the bucket was closed before the batch could be written"), "{}", runs[2].stdout);
    let read = bag(&["read", log]);
    assert_eq!(read.code, 0);
    // Each message: `<RFC 3339 time> <writer>#<seq> <body>`, the body unchanged and last.
    let bodies: Vec<&str> = read.stdout.lines().map(|l| l.splitn(3, ' ').nth(2).expect("three fields")).collect();
    assert_eq!(bodies, ["first", "second", "fresh"]);
    for line in read.stdout.lines() {
        let time = line.split(' ').next().expect("time");
        assert!(time.len() == 24 && time.starts_with("20") && time.ends_with('Z'), "a UTC date: {line}");
    }
    let bucket = {
        let at = now_ms() - 4_000;
        (at - at % 1_000).to_string()
    };
    runs.push(read);
    runs.push(bag(&["close", log, "--bucket", &bucket]));
    runs.push(bag(&["compact", log]));
    runs.push(bag(&["audit", log]));
    for r in &runs {
        let all = format!("{}{}", r.stdout, r.stderr);
        for bad in ["Some(", "None", "{ ", "..", "Early", "NoCloseBegun", "ClosedBeforeWrite", "REJECTED"] {
            assert!(!all.contains(bad), "{bad:?} in human output:\n{all}");
        }
        // No unix milliseconds where a date belongs (the log's path aside).
        let digits = all.replace(log, "").split(|c: char| !c.is_ascii_digit()).map(str::len).max().unwrap_or(0);
        assert!(digits < 13, "a unix-ms number in human output:\n{all}");
    }
}

/// Every `<name>_ms` integer at any depth has its `<name>_at` RFC 3339 string.
fn check_times(v: &serde_json::Value, found: &mut usize) {
    match v {
        serde_json::Value::Object(obj) => {
            for (k, t) in obj {
                if let (Some(name), Some(ms)) = (k.strip_suffix("_ms"), t.as_u64()) {
                    assert_eq!(obj[&format!("{name}_at")], rfc3339(ms), "{k} in {v}");
                    *found += 1;
                }
                check_times(t, found);
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|i| check_times(i, found)),
        _ => {}
    }
}

#[test]
fn every_json_line_has_schema_version_1_and_both_time_forms() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (log, leases) = (dir.path().join("log"), dir.path().join("leases"));
    for d in [&log, &leases] {
        std::fs::create_dir(d).expect("mkdir");
    }
    let (log, leases) = (log.to_str().expect("utf8"), leases.to_str().expect("utf8"));
    let at = (now_ms() - 4_000).to_string();
    let bucket = {
        let at: u64 = at.parse().expect("number");
        (at - at % 1_000).to_string()
    };
    let runs = [
        bag(&["append", log, "--json", "--at", &at, "first"]),
        bag(&["append", log, "--json", "--lease", "acct/1", "--lease-store", leases, "guarded"]),
        bag(&["close", log, "--json"]),
        bag(&["close", log, "--json", "--bucket", &bucket]),
        bag(&["append", log, "--json", "--at", &at, "late"]),
        bag(&["read", log, "--json"]),
        bag(&["audit", log, "--json"]),
        bag(&["compact", log, "--json"]),
    ];
    let mut times = 0;
    for r in &runs {
        assert!(!r.stdout.trim().is_empty(), "{}", r.stderr);
        for line in r.stdout.lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("one JSON object a line");
            assert_eq!(v["schema_version"], 1, "{line}");
            check_times(&v, &mut times);
        }
    }
    assert!(times >= 12, "times were checked ({times})");
    let outcome =
        |r: &Run| serde_json::from_str::<serde_json::Value>(r.stdout.lines().next().expect("line")).expect("json");
    assert_eq!(outcome(&runs[0])["outcome"], "accepted");
    assert_eq!(outcome(&runs[4])["outcome"], "rejected");
    assert_eq!(outcome(&runs[4])["decision"], "closed_before_write");
    let summary =
        serde_json::from_str::<serde_json::Value>(runs[5].stdout.lines().last().expect("summary")).expect("json");
    assert!(["final", "provisional"].contains(&summary["summary"]["state"].as_str().expect("state")), "{summary}");
    let guarded = runs[5].stdout.lines().find(|l| l.contains("guarded")).expect("the journal's message");
    assert!(guarded.contains("\"deadline_at\":\"") && guarded.contains("\"ts_at\":\""), "{guarded}");
}

#[test]
fn from_takes_times_ago_and_dates_and_refuses_absurd_times() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    std::fs::create_dir(&log).expect("mkdir log");
    let log = log.to_str().expect("utf8");
    // Hour-wide buckets: a new log starts hours back, so a 3-hour-old stamp fits.
    let old = now_ms() - 3 * 3_600_000;
    assert_eq!(bag(&["append", log, "--bucket-width", "1h", "--at", &old.to_string(), "old"]).code, 0);
    assert_eq!(bag(&["append", log, "recent"]).code, 0);
    let bodies = |args: &[&str]| -> Vec<String> {
        let r = bag(args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        r.stdout.lines().map(|l| l.splitn(3, ' ').nth(2).expect("body").to_string()).collect()
    };
    assert_eq!(bodies(&["read", log]), ["old", "recent"]);
    assert_eq!(bodies(&["read", log, "--from", "-10m"]), ["recent"]);
    assert_eq!(bodies(&["read", log, "--from", "10m"]), ["recent"], "10m also means ten minutes ago");
    assert_eq!(bodies(&["read", log, "--from=-10m"]), ["recent"]);
    assert_eq!(bodies(&["read", log, "--to", "-2h"]), ["old"]);
    let today = rfc3339(old - 3_600_000)[..19].to_string() + "Z";
    assert_eq!(bodies(&["read", log, "--from", &today, "--to", "-1h"]), ["old"]);
    assert_eq!(bodies(&["read", log, "--from", "2999-01-01"]), Vec::<String>::new());
    for bad in ["1969-01-01", "99999999999999999999", "10000-01-01", "-100y", "+5m", "soon", "253402300800000"] {
        for flag in ["--from", "--to"] {
            let r = bag(&["read", log, flag, bad]);
            assert_eq!(r.code, 64, "{flag} {bad}: {}", r.stderr);
            assert!(r.stderr.contains(bad) && r.stderr.contains("a time ago (-10m"), "{flag} {bad}: {}", r.stderr);
        }
    }
    let help = Command::new(TENURE).args(["bag", "read", "--help"]).output().expect("help");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("2026-11-24") && help.contains("-10m") && help.contains("UTC"), "{help}");
}

#[test]
fn the_summary_names_the_commands_to_run_while_buckets_are_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("a log");
    std::fs::create_dir(&log).expect("mkdir log");
    let log = log.to_str().expect("utf8");
    assert_eq!(bag(&["append", log, "now"]).code, 0);
    let r = bag(&["read", log]);
    assert_eq!(r.code, 0);
    let quoted = format!("'{log}'");
    assert!(r.stderr.contains("provisional: "), "{}", r.stderr);
    assert!(r.stderr.contains(&format!("`tenure bag close {quoted}`")), "{}", r.stderr);
    assert!(r.stderr.contains(&format!("`tenure bag read {quoted} --follow`")), "{}", r.stderr);
    // The suggested close seals what is due; once every bucket is closed the read is final.
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    std::fs::create_dir(&log).expect("mkdir log");
    let log = log.to_str().expect("utf8");
    assert_eq!(bag(&["append", log, "--at", &(now_ms() - 4_000).to_string(), "then"]).code, 0);
    assert_eq!(bag(&["close", log]).code, 0);
    let r = bag(&["read", log]);
    assert!(r.stderr.contains("read 1 message from ") && r.stderr.contains("final: "), "{}", r.stderr);
    assert!(!r.stderr.contains("tenure bag close"), "{}", r.stderr);
}

/// Lines of a child's pipe, as they come.
fn lines(pipe: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

fn wait_for(rx: &mpsc::Receiver<String>, what: &str, within: Duration) -> Vec<String> {
    let end = Instant::now() + within;
    let mut got = Vec::new();
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) => {
                let done = line.contains(what);
                got.push(line);
                if done {
                    return got;
                }
            }
            Err(_) => break,
        }
    }
    panic!("{what:?} did not come within {within:?}; got {got:?}");
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn read_follow_prints_new_messages_once_and_ends_on_sigterm_with_0() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    std::fs::create_dir(&log).expect("mkdir log");
    let log = log.to_str().expect("utf8");
    assert_eq!(bag(&["append", log, "before"]).code, 0);
    let mut follower = Killed(
        Command::new(TENURE)
            .args(["bag", "read", log, "--follow"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    let out = lines(follower.0.stdout.take().expect("stdout"));
    let err = lines(follower.0.stderr.take().expect("stderr"));
    assert!(wait_for(&out, " before", Duration::from_secs(20)).len() == 1, "what was there is printed first");
    wait_for(&err, "following:", Duration::from_secs(20));
    assert_eq!(bag(&["append", log, "one"]).code, 0);
    wait_for(&out, " one", Duration::from_secs(10));
    assert_eq!(bag(&["append", log, "two"]).code, 0);
    assert_eq!(wait_for(&out, " two", Duration::from_secs(10)).len(), 1, "nothing printed twice");
    // Several more polls: nothing is printed again.
    std::thread::sleep(Duration::from_millis(2_500));
    let again: Vec<String> = out.try_iter().collect();
    assert!(again.is_empty(), "printed again: {again:?}");
    let pid = rustix::process::Pid::from_raw(i32::try_from(follower.0.id()).expect("pid")).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM to the follower");
    let end = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = follower.0.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < end, "--follow did not end on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "SIGTERM ends --follow normally: {status:?}");
    let rest = wait_for(&err, "stopped following after 3 messages", Duration::from_secs(5));
    assert!(rest.iter().all(|l| !l.contains("panicked")), "{rest:?}");
}
