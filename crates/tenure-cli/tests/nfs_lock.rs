//! `tenure lock` on real NFS, across two client kernels (see `nfs_harness` and
//! scripts/nfs.sh): a counter under random SIGKILLs, `status` from the other
//! client during hand-overs, and what mount options do to both.
//!
//! Every hold logs its start and end (with its token and client) to host files;
//! the checks run here, on the host: the guests read the host's clock (UML's
//! clocksource `timer`), so the times of both clients compare directly, within the
//! offset [`Cluster::clock_offset_ms`] measures.

mod nfs_harness;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

use nfs_harness::*;

/// A worker in a guest: `runs` times, `tenure lock <store> counter -- increment.sh`.
/// The PID of the running `tenure` is in `pid-<id>` (for the killer), each run's
/// exit status is appended to `outcome-<id>`.
const WORKER: &str = r#"
store=$1 work=$2 id=$3 runs=$4 ttl=$5
for r in $(seq 1 "$runs"); do
  "$TENURE" lock "$store" counter --ttl "$ttl" --max-skew 200ms --poll 100ms -- "$work/increment.sh" "$work" "$id-r$r" "$id" 2>> "$work/err-$id" &
  echo $! > "$work/pid-$id"
  wait $!
  echo "$id-r$r $?" >> "$work/outcome-$id"
done
"#;

/// Under the lease: read the counter on NFS, write it back plus one (a new file
/// renamed over it), append `token n run client` to a log on NFS. A victim (the
/// run that finds `victim-wanted` first) says so and sleeps until killed.
const INCREMENT: &str = r#"#!/bin/bash
work=$1 run=$2 id=$3 log=$1/holds-$3
echo "start $(date +%s.%N) $TENURE_TOKEN $(hostname) $TENURE_DEADLINE $run" >> "$log"
trap 'echo "term $(date +%s.%N) $TENURE_TOKEN" >> "$log"; exit 143' TERM
n=$(cat "$NFS_MNT/counter" 2>/dev/null || echo 0)
if rm "$work/victim-wanted" 2>/dev/null; then
  echo "$TENURE_TOKEN $id $run" > "$work/victim.tmp" && mv "$work/victim.tmp" "$work/victim"
  sleep 60 & wait
fi
sleep 0.05 & wait
echo $((n + 1)) > "$NFS_MNT/counter.$run" && mv "$NFS_MNT/counter.$run" "$NFS_MNT/counter"
echo "$TENURE_TOKEN $((n + 1)) $run $(hostname)" >> "$NFS_MNT/log"
echo "end $(date +%s.%N) $TENURE_TOKEN" >> "$log"
"#;

/// Kills the `tenure` with PID `$1` in this guest, waits until it is gone, then
/// prints the kill time and the lease's record as the other holders see it.
const KILL: &str = r#"
kill -9 "$1"; t=$(date +%s.%N)
while [ -e "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; do sleep 0.01; done
echo "$t"
"$TENURE" status --json "$2" counter
"#;

struct Kill {
    token: u64,
    run: String,
    at: f64,
    deadline: f64,
}

/// The counter torture: `per_client` workers on each guest, `runs` each, `kills`
/// holders SIGKILLed while they hold.
fn counter_torture(c: &Cluster, store: &str, per_client: usize, runs: usize, kills: usize, ttl_s: u64) {
    let work = c.work();
    let clock_ms = c.clock_offset_ms();
    assert!(clock_ms < 50.0, "the guests' clocks are {clock_ms:.1} ms off the host's");
    c.script("increment.sh", INCREMENT);
    let started = unix_now();
    let ids: Vec<String> = ["a", "b"].iter().flat_map(|g| (0..per_client).map(move |i| format!("{g}{i}"))).collect();
    let workers: Vec<Child> = ids
        .iter()
        .map(|id| {
            let args = [store.to_string(), work.display().to_string(), id.clone(), runs.to_string(), format!("{ttl_s}s")];
            c.spawn(&id[..1], Duration::from_secs(900), WORKER, &args.each_ref().map(String::as_str))
        })
        .collect();

    let total = ids.len() * runs;
    let log = c.export().join("log");
    let mut done: Vec<Kill> = Vec::new();
    for k in 0..kills {
        let target = (k + 1) * total / (kills + 1);
        if !eventually(Duration::from_secs(300), || lines(&log).len() >= target) {
            break;
        }
        std::fs::write(work.join("victim-wanted"), "").expect("victim-wanted");
        if !eventually(Duration::from_secs(120), || work.join("victim").exists()) {
            break;
        }
        let victim = std::fs::read_to_string(work.join("victim")).expect("victim");
        std::fs::remove_file(work.join("victim")).expect("rm victim");
        let f: Vec<&str> = victim.split_whitespace().collect();
        let (token, id, run): (u64, &str, &str) = (f[0].parse().expect("token"), f[1], f[2]);
        let pid = std::fs::read_to_string(work.join(format!("pid-{id}"))).expect("pid file");
        let out = c.ok(&id[..1], KILL, &[pid.trim(), store]);
        let (at, json) = out.split_once('\n').expect("kill output");
        let status: serde_json::Value = serde_json::from_str(json).expect("status JSON");
        let holder = &status[0]["holders"][0];
        if holder["token"].as_u64() != Some(token) {
            eprintln!("victim {run} (token {token}) no longer held when killed: {holder}");
            continue;
        }
        let deadline = holder["deadline_ms"].as_u64().expect("deadline") as f64 / 1000.0;
        done.push(Kill { token, run: run.to_string(), at: at.trim().parse().expect("kill time"), deadline });
    }
    for w in workers {
        let out = w.wait_with_output().expect("worker");
        assert!(out.status.success(), "worker failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let elapsed = unix_now() - started;

    // The counter and the log on NFS: 1, 2, 3, … with increasing tokens.
    let entries: Vec<(u64, u64, String)> = lines(&log)
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].parse().expect("token"), f[1].parse().expect("n"), f[2].to_string())
        })
        .collect();
    for (i, (_, n, run)) in entries.iter().enumerate() {
        assert_eq!(*n, i as u64 + 1, "line {} of run {run}: an increment was lost or doubled", i + 1);
    }
    for pair in entries.windows(2) {
        assert!(pair[0].0 < pair[1].0, "fencing order broken: token {} then {}", pair[0].0, pair[1].0);
    }
    let counter: u64 = std::fs::read_to_string(c.export().join("counter")).expect("counter").trim().parse().expect("n");
    assert_eq!(counter, entries.len() as u64, "the counter disagrees with the log");

    // Outcomes: 0, or killed by the test (137), or lost under load (76).
    let logged: HashSet<&str> = entries.iter().map(|e| e.2.as_str()).collect();
    let victims: HashSet<&str> = done.iter().map(|k| k.run.as_str()).collect();
    let mut tally: BTreeMap<&str, usize> = BTreeMap::new();
    let mut lost = Vec::new();
    let outcomes: Vec<String> = ids.iter().flat_map(|id| lines(&work.join(format!("outcome-{id}")))).collect();
    assert_eq!(outcomes.len(), total, "every run reported its exit status");
    for o in &outcomes {
        let (run, rc) = o.split_once(' ').expect("outcome");
        let what = match rc {
            "0" => {
                assert!(logged.contains(run), "run {run} exited 0 but its increment is missing");
                "exit 0"
            }
            "137" => {
                assert!(victims.contains(run), "run {run} was SIGKILLed, not by the test");
                assert!(!logged.contains(run), "killed run {run} incremented");
                "killed"
            }
            "76" => {
                lost.push(run.to_string());
                "lost (76)"
            }
            other => panic!("run {run} exited {other}"),
        };
        *tally.entry(what).or_default() += 1;
    }

    if !lost.is_empty() {
        let errs: Vec<String> = ids.iter().flat_map(|id| lines(&work.join(format!("err-{id}")))).collect();
        println!("runs that lost their lease: {lost:?}; what tenure said: {errs:#?}");
    }

    // The holds of both clients never overlap; a killed holder's lease is taken
    // over only after its deadline.
    let holds = holds(&ids.iter().map(|id| work.join(format!("holds-{id}"))).collect::<Vec<PathBuf>>());
    let gap = assert_no_overlap(&holds, clock_ms / 1000.0);
    let mut delays = Vec::new();
    for k in &done {
        let next = holds.iter().find(|h| h.token > k.token).expect("the killed holder's lease was taken over");
        assert!(
            next.start >= k.deadline,
            "token {} ({}) took over at {:.3}, before the killed holder's deadline {:.3}",
            next.token,
            next.client,
            next.start,
            k.deadline
        );
        delays.push(format!("{:.2}s", next.start - k.at));
    }
    assert!(!done.is_empty(), "no holder was killed");
    let clients: BTreeMap<&str, usize> = holds.iter().fold(BTreeMap::new(), |mut m, h| {
        *m.entry(h.client.as_str()).or_default() += 1;
        m
    });
    println!(
        "NFS counter torture on {store}: {} increments, runs {tally:?}, holds per client {clients:?}, {} kills, \
         takeover after kill [{}] (ttl {ttl_s}s, max skew 200ms), overlaps 0 (smallest gap between holds {:.1} ms, \
         clock offset ≤ {clock_ms:.1} ms), {:.0}s",
        entries.len(),
        done.len(),
        delays.join(", "),
        gap * 1000.0,
        elapsed
    );
}

#[test]
fn nfs_counter_is_exact_and_holds_never_overlap_across_two_clients_while_holders_are_killed() {
    let Some(c) = Cluster::up(&[]) else { return };
    counter_torture(&c, &c.store("leases"), 2, 8, 3, 4);
}
