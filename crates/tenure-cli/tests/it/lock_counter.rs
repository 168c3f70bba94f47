//! The issue's counter test: 8 workers each run `tenure lock <store> counter --
//! <increment>` 50 times while holders are SIGKILLed now and then.
//!
//! The increment exposes any overlap: it reads the shared log, sleeps, then
//! appends `<TENURE_TOKEN> <n+1> <run> <start time>` (O_APPEND). Two holders at once
//! would append the same `n+1`; a stale holder would append out of token order.
//! A victim — a holder chosen to be killed — sleeps 10 s (several TTLs) between its
//! read and its append, so if its command outlived its `tenure`, its late append
//! would break the sequence.
//!
//! Runs on the file store always, and on S3 (moto, Ceph RGW) when the servers are
//! up (`eval "$(scripts/servers.sh env)"`) and the `object` feature is built.

use crate::common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use rustix::process::Signal;

/// One line per run: read the log, sleep, append the next number.
const INCREMENT: &str = r#"
log=$1 run=$2 dir=$3
mapfile -t lines < "$log"; n=${#lines[@]}; t0=$EPOCHREALTIME
if rm "$dir/victim-wanted" 2>/dev/null; then
  echo "$TENURE_TOKEN" > "$dir/victim.tmp" && mv "$dir/victim.tmp" "$dir/victim"
  sleep 10
else
  sleep 0.01
fi
printf '%s %s %s %s\n' "$TENURE_TOKEN" $((n + 1)) "$run" "$t0" >> "$log"
"#;

/// Where and how hard to race.
struct Race {
    url: String,
    args: Vec<String>,
    workers: usize,
    runs: usize,
    kills: usize,
    ttl: Duration,
}

/// A run: its id, exit code, and the signal that killed it.
type Outcome = (String, Option<i32>, Option<i32>);

#[derive(Debug)]
struct Kill {
    token: u64,
    run: String,
    at_unix: f64,
    /// The deadline its record showed just before the kill. Renewals only move
    /// it later, so no one may take the lease over before it.
    deadline_unix: f64,
    /// `tenure` and its guard killed together (a crashed machine: the lease
    /// expires), or `tenure` alone (its guard stops the command, then releases).
    crash: bool,
}

/// The live holder of `counter` with `token`, as its pid and its record's
/// deadline (Unix milliseconds), by `tenure status --json`.
fn live_holder(url: &str, args: &[String], token: u64) -> Option<(u32, u64)> {
    let leases = status_json_with(url, "counter", args);
    let holders = leases[0]["holders"].as_array()?;
    let h = holders.iter().find(|h| h["token"].as_u64() == Some(token))?;
    Some((u32::try_from(h["holder"]["pid"].as_u64()?).ok()?, h["deadline_ms"].as_u64()?))
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

fn race(r: &Race) {
    let scratch = tempfile::tempdir().expect("scratch dir");
    let dir = scratch.path().to_path_buf();
    let log = dir.join("log");
    std::fs::write(&log, "").expect("log");
    let ttl = format!("{}ms", r.ttl.as_millis());
    let live: Arc<Mutex<HashMap<u32, String>>> = Arc::default();
    let outcomes: Arc<Mutex<Vec<Outcome>>> = Arc::default();
    let started = Instant::now();

    let workers: Vec<_> = (0..r.workers)
        .map(|w| {
            let (live, outcomes, dir, log) = (live.clone(), outcomes.clone(), dir.clone(), log.clone());
            let (url, args, ttl, runs) = (r.url.clone(), r.args.clone(), ttl.clone(), r.runs);
            std::thread::spawn(move || {
                for i in 0..runs {
                    let run = format!("w{w}r{i}");
                    let mut cmd = tenure();
                    cmd.args(["lock", &url, "counter", "--ttl", &ttl, "--max-skew", "200ms", "--poll", "50ms"])
                        .args(&args)
                        .args(["--", "bash", "-c", INCREMENT, "bash"])
                        .arg(&log)
                        .arg(&run)
                        .arg(&dir)
                        .stdout(Stdio::null())
                        .stderr(Stdio::piped());
                    let child = cmd.spawn().expect("spawn tenure lock");
                    live.lock().expect("live").insert(child.id(), run.clone());
                    let pid = child.id();
                    let out = wait_output(child, Duration::from_secs(120));
                    live.lock().expect("live").remove(&pid);
                    use std::os::unix::process::ExitStatusExt;
                    let (code, sig) = (out.status.code(), out.status.signal());
                    if code != Some(0) {
                        eprintln!("run {run}: {:?} {}", out.status, stderr(&out).trim());
                    }
                    outcomes.lock().expect("outcomes").push((run, code, sig));
                }
            })
        })
        .collect();

    // The killer: now and then, ask for a victim, and SIGKILL its `tenure` while it
    // holds: every other time with its guard, first frozen so that it cannot act
    // on `tenure`'s end (a crashed machine), else alone (its guard releases).
    let mut kills: Vec<Kill> = Vec::new();
    let per_kill = r.workers * r.runs / (r.kills + 1);
    for k in 0..r.kills {
        let progress = |n: usize| eventually(Duration::from_secs(120), || lines(&log).len() >= n);
        if !progress((k + 1) * per_kill) {
            break;
        }
        std::fs::write(dir.join("victim-wanted"), "").expect("flag");
        if !eventually(Duration::from_secs(60), || dir.join("victim").exists()) {
            break;
        }
        let token: u64 = std::fs::read_to_string(dir.join("victim")).expect("victim").trim().parse().expect("token");
        std::fs::remove_file(dir.join("victim")).expect("rm victim");
        // The victim sleeps for several TTLs, so it is normally still holding. On a
        // machine loaded enough to make it lose its lease (it then exits 76, which
        // the tally accepts), there is nobody to kill this time.
        let Some((pid, deadline_ms)) = live_holder(&r.url, &r.args, token) else {
            eprintln!("the victim holding token {token} had already lost its lease; no kill this round");
            continue;
        };
        let run = live.lock().expect("live").get(&pid).cloned();
        let crash = k % 2 == 0;
        let killed = run.filter(|_| {
            let guard = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
            let guard = guard.split_whitespace().next().and_then(|g| g.parse::<i32>().ok());
            let guard = guard.and_then(rustix::process::Pid::from_raw).filter(|_| crash);
            if let Some(g) = guard {
                let _ = rustix::process::kill_process(g, Signal::STOP);
            }
            let pid = rustix::process::Pid::from_raw(pid as i32).expect("pid");
            let killed = rustix::process::kill_process(pid, Signal::KILL).is_ok();
            if let Some(g) = guard {
                let _ = rustix::process::kill_process(g, Signal::KILL);
            }
            killed
        });
        let Some(run) = killed else {
            eprintln!("the victim holding token {token} (pid {pid}) had already exited; no kill this round");
            continue;
        };
        kills.push(Kill { token, run, at_unix: unix_now(), deadline_unix: deadline_ms as f64 / 1000.0, crash });
    }
    for w in workers {
        w.join().expect("worker");
    }
    let elapsed = started.elapsed();

    // The log: exactly 1, 2, 3, … with strictly increasing tokens.
    let entries: Vec<(u64, u64, String, f64)> = lines(&log)
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 4, "malformed line {l:?}");
            (f[0].parse().expect("token"), f[1].parse().expect("n"), f[2].to_string(), f[3].parse().expect("time"))
        })
        .collect();
    for (i, (_, n, run, _)) in entries.iter().enumerate() {
        assert_eq!(*n, i as u64 + 1, "line {} of run {run}: an increment was lost or doubled", i + 1);
    }
    for pair in entries.windows(2) {
        assert!(pair[0].0 < pair[1].0, "fencing order broken: token {} then {}", pair[0].0, pair[1].0);
    }
    let logged: HashSet<&str> = entries.iter().map(|e| e.2.as_str()).collect();
    assert_eq!(logged.len(), entries.len(), "a run appended twice");

    let outcomes = outcomes.lock().expect("outcomes");
    let victims: HashSet<&str> = kills.iter().map(|k| k.run.as_str()).collect();
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    for (run, code, sig) in outcomes.iter() {
        let what = match (code, sig) {
            (Some(0), _) => {
                assert!(logged.contains(run.as_str()), "run {run} exited 0 but its increment is missing");
                "exit 0".to_string()
            }
            (Some(76), _) => "exit 76 (lease lost under load; stopped)".to_string(),
            (None, Some(9)) => {
                assert!(victims.contains(run.as_str()), "run {run} was SIGKILLed but not by the test");
                "killed by the test".to_string()
            }
            other => panic!("run {run} ended unexpectedly: {other:?}"),
        };
        *tally.entry(what).or_default() += 1;
    }
    assert_eq!(outcomes.len(), r.workers * r.runs);

    // Every killed holder's lease was taken over. After a crash, only once the
    // deadline its record showed before the kill had passed: nothing released it,
    // and its last renewal may have moved the deadline later, never earlier. (A
    // renewal is due every TTL/8, so that is normally most of a TTL after the
    // kill; on a loaded machine whose renewals ran late, it can be much sooner:
    // the holder was about to lose the lease anyway.) Released by the guard,
    // whenever (the victim's command, stopped first, never appended: checked
    // above and here). Both times are this machine's wall clock.
    let mut delays = Vec::new();
    for k in &kills {
        assert!(!logged.contains(k.run.as_str()), "victim {} appended after being killed", k.run);
        let next = entries.iter().find(|e| e.0 > k.token).expect("the killed holder's lease was taken over");
        let delay = next.3 - k.at_unix;
        // The record's deadline is in whole milliseconds.
        let early = k.deadline_unix - 0.001 - next.3;
        assert!(
            !k.crash || early <= 0.0,
            "the lease of crashed run {} was taken over {delay:.3}s after the kill, {early:.3}s before \
             the deadline its record showed",
            k.run
        );
        delays.push(format!("{delay:.2}s{}", if k.crash { "" } else { " (released)" }));
    }
    assert!(!kills.is_empty(), "no holder was killed");
    println!(
        "counter race on {}: {} runs ({:?}), {} increments, {} kills, takeover after kill: [{}] (ttl {:?}, max skew 200ms), wall time {:.1}s",
        r.url,
        outcomes.len(),
        tally,
        entries.len(),
        kills.len(),
        delays.join(", "),
        r.ttl,
        elapsed.as_secs_f64()
    );
}

#[test]
fn eight_workers_increment_exactly_once_each_while_holders_are_killed_on_the_file_store() {
    let store = FileStore::new();
    race(&Race { url: store.url(), args: Vec::new(), workers: 8, runs: 50, kills: 4, ttl: Duration::from_secs(2) });
}

/// The same race on S3 at `$var` (moto or Ceph RGW), under a fresh prefix.
#[cfg(feature = "object")]
fn s3_race(var: &str) {
    let Ok(endpoint) = std::env::var(var) else {
        assert_ne!(
            std::env::var("TENURE_REQUIRE_SERVERS").as_deref(),
            Ok("1"),
            "{var} is not set and TENURE_REQUIRE_SERVERS=1"
        );
        eprintln!("skipped: {var} is not set (start the servers: eval \"$(scripts/servers.sh env)\")");
        return;
    };
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let args = [
        format!("aws_endpoint={endpoint}"),
        "aws_allow_http=true".into(),
        "aws_access_key_id=test".into(),
        "aws_secret_access_key=test".into(),
        "aws_region=us-east-1".into(),
    ]
    .into_iter()
    .flat_map(|kv| ["--store-opt".to_string(), kv])
    .collect();
    race(&Race {
        url: format!("s3://tenure/lock-counter-{}-{nanos}", std::process::id()),
        args,
        // Each object-store round trip costs milliseconds, not microseconds: fewer
        // runs keep the wall time near the file store's.
        workers: 8,
        runs: 25,
        kills: 2,
        ttl: Duration::from_secs(3),
    });
}

#[cfg(feature = "object")]
#[test]
fn eight_workers_increment_exactly_once_each_while_holders_are_killed_on_s3_moto() {
    s3_race("TENURE_TEST_S3_MOTO");
}

#[cfg(feature = "object")]
#[test]
fn eight_workers_increment_exactly_once_each_while_holders_are_killed_on_s3_ceph_rgw() {
    s3_race("TENURE_TEST_S3_RGW");
}
