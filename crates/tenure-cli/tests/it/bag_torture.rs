//! Torture: real `tenure` processes appending to one log while several closers
//! run, with writers SIGKILLed mid-append and closers mid-close, on a directory
//! and on the S3-compatible server. Afterwards every append that returned
//! accepted is read by every reader, nothing that returned rejected is, and all
//! readers agree on the set and the order.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const TENURE: &str = env!("CARGO_BIN_EXE_tenure");
const CLOSERS: usize = 3;
const READERS: usize = 3;

/// The server's endpoint, or `None` with the reason printed (a panic in CI).
fn server(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if std::env::var("TENURE_REQUIRE_SERVERS").is_ok_and(|v| v == "1") => {
            panic!("{var} is not set but TENURE_REQUIRE_SERVERS=1: start the servers with scripts/servers.sh")
        }
        _ => {
            eprintln!("skipping: {var} is not set (eval \"$(scripts/servers.sh env)\" to run against the server)");
            None
        }
    }
}

fn wall_ms() -> u64 {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock after 1970");
    u64::try_from(since_epoch.as_millis()).expect("ms fit u64")
}

/// A tiny deterministic generator (the seed is printed, so a run can be replayed).
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[derive(Default)]
struct Verdicts {
    accepted: BTreeSet<String>,
    rejected: BTreeSet<String>,
    unknown: BTreeSet<String>,
}

/// Timing of one torture run.
#[derive(Clone, Copy)]
struct Pace {
    width_ms: u64,
    grace_ms: u64,
    /// Stamping lags of the writer slots: on time (fast path), around the grace
    /// (racing the closers), and well past it (mostly rejected).
    lags_ms: [u64; 4],
    /// Pause between kills: at least this, plus up to as much again.
    kill_every_ms: u64,
}

const FS_PACE: Pace = Pace { width_ms: 200, grace_ms: 300, lags_ms: [0, 250, 400, 700], kill_every_ms: 50 };
/// Object-store round trips are slower: wider buckets, fewer kills.
const S3_PACE: Pace = Pace { width_ms: 500, grace_ms: 500, lags_ms: [0, 700, 1_000, 3_000], kill_every_ms: 200 };

struct Torture {
    log: String,
    pace: Pace,
    common: Vec<String>,
    verdicts: Arc<Mutex<Verdicts>>,
}

impl Torture {
    fn new(log: String, pace: Pace, store_opts: &[(&str, String)]) -> Self {
        let mut common = vec![
            "--bucket-width".into(),
            format!("{}ms", pace.width_ms),
            "--grace".into(),
            format!("{}ms", pace.grace_ms),
            "--max-skew".into(),
            "50ms".into(),
            "--chunk-buckets".into(),
            "10".into(),
        ];
        for (k, v) in store_opts {
            common.extend(["--store-opt".into(), format!("{k}={v}")]);
        }
        Self { log, pace, common, verdicts: Arc::default() }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(TENURE);
        c.arg("bag").arg(args[0]).arg(&self.log).args(&args[1..]).args(&self.common);
        c
    }

    /// A writer process fed one payload at a time; its thread records each verdict
    /// as soon as the process prints it.
    fn writer(&self, slot: usize, incarnation: u64) -> (Child, JoinHandle<()>) {
        let lag = format!("{}ms", self.pace.lags_ms[slot]);
        let mut child = self
            .cmd(&["append", "--stdin", "--json", "--writer", &format!("t{slot}"), "--lag", &lag])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn writer");
        let (mut stdin, stdout) = (child.stdin.take().expect("stdin"), child.stdout.take().expect("stdout"));
        let verdicts = self.verdicts.clone();
        let thread = std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            for k in 0u64.. {
                let payload = format!("s{slot}-i{incarnation}-m{k}");
                if writeln!(stdin, "{payload}").and_then(|()| stdin.flush()).is_err() {
                    return;
                }
                let Some(Ok(line)) = lines.next() else {
                    // Killed mid-append: the outcome was never told.
                    verdicts.lock().expect("lock").unknown.insert(payload);
                    return;
                };
                let v: serde_json::Value = serde_json::from_str(&line).expect("outcome JSON");
                let mut verdicts = verdicts.lock().expect("lock");
                if v["accepted"] == true { &mut verdicts.accepted } else { &mut verdicts.rejected }.insert(payload);
            }
        });
        (child, thread)
    }

    fn closer(&self) -> Child {
        self.cmd(&["close", "--loop", "--interval", "20ms", "--lookback", "5s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn closer")
    }

    /// Runs the torture for `seconds`; returns the wall-clock time (unix ms) at
    /// which the last process was killed.
    fn run(&self, seconds: u64) -> u64 {
        let seed =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1;
        println!("seed {seed}");
        let mut rng = Rng(seed);
        let mut incarnation = 0u64;
        let mut writers: Vec<(Child, JoinHandle<()>)> = (0..self.pace.lags_ms.len())
            .map(|s| {
                incarnation += 1;
                self.writer(s, incarnation)
            })
            .collect();
        let mut closers: Vec<Child> = (0..CLOSERS).map(|_| self.closer()).collect();
        let (mut writer_kills, mut closer_kills) = (0, 0);
        let end = Instant::now() + Duration::from_secs(seconds);
        while Instant::now() < end {
            std::thread::sleep(Duration::from_millis(self.pace.kill_every_ms + rng.below(self.pace.kill_every_ms * 2)));
            if rng.below(2) == 0 {
                let slot = rng.below(writers.len() as u64) as usize;
                incarnation += 1;
                let (mut child, thread) = std::mem::replace(&mut writers[slot], self.writer(slot, incarnation));
                child.kill().expect("SIGKILL writer");
                let _ = child.wait();
                thread.join().expect("writer thread");
                writer_kills += 1;
            } else {
                // Closer 0 is never killed, so buckets are closed however slow
                // the store is, and late appends race real closes.
                let i = 1 + rng.below(CLOSERS as u64 - 1) as usize;
                let mut old = std::mem::replace(&mut closers[i], self.closer());
                old.kill().expect("SIGKILL closer");
                let _ = old.wait();
                closer_kills += 1;
            }
        }
        for (mut child, thread) in writers {
            child.kill().expect("kill");
            let _ = child.wait();
            thread.join().expect("writer thread");
        }
        for mut c in closers {
            c.kill().expect("kill");
            let _ = c.wait();
        }
        println!("killed {writer_kills} writers and {closer_kills} closers");
        wall_ms()
    }

    /// Closes everything (after the last bucket's grace), then reads with several
    /// concurrent readers. `ended_ms` is when [`Torture::run`] ended.
    fn settle_and_read(&self, ended_ms: u64) -> Vec<Vec<(u64, String, u64, String)>> {
        std::thread::sleep(Duration::from_millis(self.pace.width_ms + self.pace.grace_ms + 200));
        let status = self.cmd(&["close", "--lookback", "60s"]).stdout(Stdio::null()).status().expect("close");
        assert!(status.success());
        self.append_into_a_closed_bucket(ended_ms.saturating_sub(1_000));
        let readers: Vec<_> = (0..READERS)
            .map(|_| self.cmd(&["read", "--json"]).stdout(Stdio::piped()).spawn().expect("reader"))
            .collect();
        readers
            .into_iter()
            .map(|r| {
                let out = r.wait_with_output().expect("read");
                assert!(out.status.success());
                let mut msgs = Vec::new();
                let mut exact = false;
                for line in String::from_utf8(out.stdout).expect("utf8").lines() {
                    let v: serde_json::Value = serde_json::from_str(line).expect("json");
                    if let Some(summary) = v.get("summary") {
                        exact = summary["exact"] == true;
                        continue;
                    }
                    let field = |k: &str| v[k].as_str().expect("field").to_string();
                    msgs.push((
                        v["ts_ms"].as_u64().expect("ts"),
                        field("writer"),
                        v["seq"].as_u64().expect("seq"),
                        field("payload"),
                    ));
                }
                assert!(exact, "every bucket of the log is closed after the final close");
                msgs
            })
            .collect()
    }

    /// Whether the races above rejected anything depends on timing (a slow
    /// store may close nothing before a late writer is killed), so one rejection
    /// is made for certain: an append stamped `at` (unix ms), a moment of the
    /// run whose bucket the final close has closed. (A stamp relative to the
    /// append's own start is not certain: on a slow store, the append may start
    /// later than the lag after the close began, and stamp into an open bucket.)
    fn append_into_a_closed_bucket(&self, at: u64) {
        let payload = "sL-into-closed";
        let at = at.to_string();
        let mut late = self
            .cmd(&["append", "--stdin", "--json", "--writer", "late", "--at", &at])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn late writer");
        writeln!(late.stdin.take().expect("stdin"), "{payload}").expect("write payload");
        let out = late.wait_with_output().expect("late writer");
        let told = String::from_utf8_lossy(&out.stdout);
        let v: serde_json::Value = serde_json::from_str(told.trim()).unwrap_or_else(|e| panic!("{e}: {told:?}"));
        assert_eq!(v["accepted"], false, "an append into a closed bucket is rejected: {told}");
        self.verdicts.lock().expect("lock").rejected.insert(payload.to_string());
    }

    fn check(&self, reads: &[Vec<(u64, String, u64, String)>]) {
        for r in &reads[1..] {
            assert_eq!(r, &reads[0], "readers disagree on the set or the order");
        }
        let read: BTreeSet<&str> = reads[0].iter().map(|m| m.3.as_str()).collect();
        assert_eq!(read.len(), reads[0].len(), "a payload was read twice");
        let v = self.verdicts.lock().expect("lock");
        let missing: Vec<_> = v.accepted.iter().filter(|p| !read.contains(p.as_str())).collect();
        assert!(missing.is_empty(), "accepted but not read: {missing:?}");
        let resurrected: Vec<_> = v.rejected.iter().filter(|p| read.contains(p.as_str())).collect();
        assert!(resurrected.is_empty(), "rejected but read: {resurrected:?}");
        let unknown_read = v.unknown.iter().filter(|p| read.contains(p.as_str())).count();
        let per_slot: BTreeMap<char, usize> =
            v.rejected.iter().filter_map(|p| p.chars().nth(1)).fold(BTreeMap::new(), |mut m, s| {
                *m.entry(s).or_default() += 1;
                m
            });
        println!(
            "accepted {}, rejected {} (per slot {per_slot:?}, one of them on purpose), unknown {} ({unknown_read} of them read), {} messages read",
            v.accepted.len(),
            v.rejected.len(),
            v.unknown.len(),
            reads[0].len()
        );
        assert!(!v.accepted.is_empty(), "the run must accept appends");
    }
}

#[test]
fn torture_on_a_directory_accepted_is_read_rejected_is_not_and_readers_agree() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log");
    std::fs::create_dir(&log).expect("mkdir log");
    let t = Torture::new(log.display().to_string(), FS_PACE, &[]);
    let ended = t.run(6);
    t.check(&t.settle_and_read(ended));
}

#[test]
fn torture_on_s3_moto_accepted_is_read_rejected_is_not_and_readers_agree() {
    let Some(endpoint) = server("TENURE_TEST_S3_MOTO") else { return };
    let log = format!(
        "s3://tenure/bag-torture/{:x}",
        std::process::id() as u64 * 1_000_003 + Instant::now().elapsed().as_nanos() as u64
    );
    let opts = [
        ("aws_endpoint", endpoint),
        ("aws_access_key_id", "test".to_string()),
        ("aws_secret_access_key", "test".to_string()),
        ("aws_region", "us-east-1".to_string()),
        ("aws_allow_http", "true".to_string()),
    ];
    let t = Torture::new(log, S3_PACE, &opts);
    let ended = t.run(10);
    t.check(&t.settle_and_read(ended));
}
