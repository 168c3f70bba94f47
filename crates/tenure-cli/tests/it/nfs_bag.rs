//! Bags on real NFS, across two client kernels (see `nfs_harness`): appenders and
//! closers on both clients, SIGKILLed at random; the "not in manifest" outcome
//! made to happen; then every accepted message is read back, no rejected one is,
//! and both clients read byte-identical logs.

use crate::nfs_harness;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use nfs_harness::*;

/// Bucket width, grace, skew bound, for every command that may create the log.
const COMMON: &str = "--bucket-width 500ms --grace 700ms --max-skew 100ms --chunk-buckets 10";

/// One guest's share of the race: appenders (one per lag in `$5`, space
/// separated) and one closer, run for `$4` seconds, SIGKILLing one of them at
/// random every 1–3 s and starting it again. Each appender incarnation
/// records what it sent (`sent-<id>`) and the verdicts it printed (`verdicts-<id>`),
/// in order.
const CHAOS: &str = r#"
log=$1 work=$2 g=$3 secs=$4; lags=($5)
common=(COMMON)
append() { # slot incarnation
  local id="$g$1-i$2"
  for k in $(seq 1 100000); do echo "$id-m$k"; sleep 0.02; done \
    | tee "$work/sent-$id" \
    | "$TENURE" bag append "$log" --stdin --json --writer "$g$1" --lag "${lags[$1]}" "${common[@]}" \
      > "$work/verdicts-$id" 2>> "$work/err-$g" &
  pids[$1]=$!
}
close() { "$TENURE" bag close "$log" --loop --interval 50ms --lookback 10s "${common[@]}" > /dev/null 2>> "$work/err-$g" & closer=$!; }
inc=0
for s in "${!lags[@]}"; do inc=$((inc + 1)); append "$s" "$inc"; done
close
kills=0 closer_kills=0
end=$((SECONDS + secs))
while [ "$SECONDS" -lt "$end" ]; do
  # 1.0 to 2.9 s between kills: a guest starts `tenure` slowly, and processes
  # killed sooner appended and closed almost nothing (a run with nothing
  # rejected proves nothing about rejection).
  sleep "$((RANDOM % 2 + 1)).$((RANDOM % 10))"
  s=$((RANDOM % (${#lags[@]} + 1)))
  if [ "$s" -eq "${#lags[@]}" ]; then
    kill -9 "$closer"; closer_kills=$((closer_kills + 1)); close
  else
    kill -9 "${pids[$s]}"; kills=$((kills + 1)); inc=$((inc + 1)); append "$s" "$inc"
  fi
done
kill -9 "${pids[@]}" "$closer"
wait
echo "$kills $closer_kills"
"#;

/// Verdicts of every appender incarnation: (accepted, rejected, unknown) payloads,
/// and how many rejections were "not_in_manifest".
fn verdicts(work: &Path) -> (BTreeSet<String>, BTreeSet<String>, BTreeSet<String>, usize) {
    let (mut acc, mut rej, mut unk, mut nim) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new(), 0);
    for entry in std::fs::read_dir(work).expect("work dir").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_prefix("sent-") else { continue };
        let sent = lines(&entry.path());
        let told = lines(&work.join(format!("verdicts-{id}")));
        for (i, payload) in sent.into_iter().enumerate() {
            match told.get(i) {
                Some(line) => {
                    let v: serde_json::Value =
                        serde_json::from_str(line).unwrap_or_else(|e| panic!("verdict {line:?} of {id}: {e}"));
                    if v["accepted"] == true {
                        acc.insert(payload);
                    } else {
                        nim += usize::from(v["decision"] == "not_in_manifest");
                        rej.insert(payload);
                    }
                }
                None => {
                    unk.insert(payload);
                }
            }
        }
    }
    (acc, rej, unk, nim)
}

/// Reads the log from both guests: the payloads in order, and the raw outputs
/// (which must be identical).
fn read_from_both(c: &Cluster, log: &str) -> Vec<String> {
    let read = |g: &str| c.ok(g, &format!("\"$TENURE\" bag read \"$1\" --json {COMMON}"), &[log]);
    let (a, b) = (read("a"), read("b"));
    assert_eq!(a, b, "the two clients read different logs");
    let mut payloads = Vec::new();
    let mut exact = false;
    for line in a.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("read JSON");
        if let Some(summary) = v.get("summary") {
            exact = summary["exact"] == true;
            continue;
        }
        payloads.push(v["payload"].as_str().expect("payload").to_string());
    }
    assert!(exact, "every bucket of the log is closed after the final close: {a}");
    payloads
}

/// Makes "not in manifest" happen: a writer (on a) appends into a bucket, the
/// bucket is closed from b, then the same writer appends into it again: its
/// second message lands in its file, and the manifest does not list it.
fn not_in_manifest(c: &Cluster, log: &str) -> (String, String) {
    let work = c.work();
    let go = work.join("nim-go");
    let script = format!(
        r#"at=$(($(date +%s%3N)))
           {{ echo nim-first; while [ ! -e "$2" ]; do sleep 0.05; done; echo nim-second; }} \
             | "$TENURE" bag append "$1" --stdin --json --writer nim --at "$at" {COMMON} | tee "$3""#
    );
    let verdicts = work.join("nim-verdicts");
    let writer = c.spawn(
        "a",
        Duration::from_secs(120),
        &script,
        &[log, &go.display().to_string(), &verdicts.display().to_string()],
    );
    assert!(eventually(Duration::from_secs(60), || lines(&verdicts).len() == 1), "the first append was not decided");
    // Past the bucket's end and grace (500 + 700 ms, with room), b closes it.
    std::thread::sleep(Duration::from_secs(2));
    c.ok("b", &format!("\"$TENURE\" bag close \"$1\" --lookback 30s {COMMON}"), &[log]);
    std::fs::write(&go, "").expect("go");
    let out = writer.wait_with_output().expect("nim writer");
    assert!(out.status.success(), "nim writer: {}", String::from_utf8_lossy(&out.stderr));
    let told = lines(&verdicts);
    assert_eq!(told.len(), 2, "both appends were decided: {told:?}");
    (told[0].clone(), told[1].clone())
}

#[test]
fn nfs_bag_appends_and_closes_from_two_clients_accepted_is_read_rejected_is_not() {
    let Some(c) = Cluster::up(&[]) else { return };
    c.made("bag");
    let log = c.mnt().join("bag").display().to_string();
    let work = c.work().display().to_string();
    let chaos = CHAOS.replace("(COMMON)", &format!("({COMMON})"));
    let started = unix_now();
    // On a: on time, and around the grace; on b: around the grace, and well past it.
    let a = c.spawn("a", Duration::from_secs(300), &chaos, &[&log, &work, "a", "25", "0ms 650ms"]);
    let b = c.spawn("b", Duration::from_secs(300), &chaos, &[&log, &work, "b", "25", "800ms 1500ms"]);
    let mut kills = Vec::new();
    for (g, job) in [("a", a), ("b", b)] {
        let out = job.wait_with_output().expect("chaos");
        assert!(out.status.success(), "chaos on {g}: {}", String::from_utf8_lossy(&out.stderr));
        kills.push(format!("{g}: {}", String::from_utf8_lossy(&out.stdout).trim()));
    }
    let (first, second) = not_in_manifest(&c, &log);
    assert!(first.contains("\"accepted\":true"), "the first nim append was accepted: {first}");
    assert!(second.contains("\"decision\":\"not_in_manifest\""), "the second nim append: {second}");

    // Everything closes after the last grace; then both clients read.
    std::thread::sleep(Duration::from_secs(2));
    c.ok("b", &format!("\"$TENURE\" bag close \"$1\" --lookback 600s {COMMON}"), &[&log]);
    let read = read_from_both(&c, &log);
    let set: BTreeSet<&str> = read.iter().map(String::as_str).collect();
    assert_eq!(set.len(), read.len(), "a payload was read twice");
    assert!(
        set.contains("nim-first") && !set.contains("nim-second"),
        "nim: the accepted one is read, the rejected one not"
    );

    let (acc, rej, unk, nim) = verdicts(c.work().as_path());
    let missing: Vec<_> = acc.iter().filter(|p| !set.contains(p.as_str())).collect();
    assert!(missing.is_empty(), "accepted but not read: {missing:?}");
    let resurrected: Vec<_> = rej.iter().filter(|p| set.contains(p.as_str())).collect();
    assert!(resurrected.is_empty(), "rejected but read: {resurrected:?}");
    let unknown_read = unk.iter().filter(|p| set.contains(p.as_str())).count();
    assert!(
        !acc.is_empty() && !rej.is_empty(),
        "the run must exercise both verdicts: accepted {}, rejected {}, undecided {} (kills {:?})",
        acc.len(),
        rej.len(),
        unk.len(),
        kills
    );
    println!(
        "NFS bag race: accepted {}, rejected {} ({nim} of them not in manifest in the race, plus 1 made on purpose), \
         unknown {} ({unknown_read} of them read), {} read, identical on both clients; kills (writers closers) [{}]; {:.0}s",
        acc.len(),
        rej.len(),
        unk.len(),
        read.len(),
        kills.join(", "),
        unix_now() - started
    );
}

/// One appender, `$3` its id: a message every 50 ms until `$2/stop-gen` exists,
/// what it sent in `sent-<id>`, its verdicts in `verdicts-<id>`, its exit status last.
const APPENDER: &str = r#"
log=$1 work=$2 id=$3
common=(COMMON)
i=0
while [ ! -e "$work/stop-gen" ]; do i=$((i + 1)); echo "$id-m$i"; sleep 0.05; done \
  | tee "$work/sent-$id" \
  | "$TENURE" bag append "$log" --stdin --json --writer "$id" "${common[@]}" > "$work/verdicts-$id" 2> "$work/err-$id"
echo "$?"
"#;

#[test]
fn nfs_bag_appends_in_flight_while_the_server_hangs_and_restarts_lose_nothing_accepted() {
    let Some(c) = Cluster::up(&[]) else { return };
    c.made("bag");
    let log = c.mnt().join("bag").display().to_string();
    let work = c.work().display().to_string();
    let appender = APPENDER.replace("(COMMON)", &format!("({COMMON})"));
    let closer = format!(
        r#""$TENURE" bag close "$1" --loop --interval 100ms --lookback 60s {COMMON} > /dev/null 2>&1 & echo $! > "$2/closer.pid"; wait"#
    );
    let writers: Vec<_> = ["a", "b"]
        .iter()
        .map(|g| c.spawn(g, Duration::from_secs(300), &appender, &[&log, &work, &format!("{g}0")]))
        .collect();
    let closer = c.spawn("b", Duration::from_secs(300), &closer, &[&log, &work]);
    std::thread::sleep(Duration::from_secs(4));
    c.server("stop");
    std::thread::sleep(Duration::from_secs(8));
    let in_flight = ["a0", "b0"].map(|id| {
        let sent = lines(&c.work().join(format!("sent-{id}"))).len();
        let told = lines(&c.work().join(format!("verdicts-{id}"))).len();
        sent.saturating_sub(told)
    });
    c.server("cont");
    std::thread::sleep(Duration::from_secs(4));
    c.server("restart");
    std::thread::sleep(Duration::from_secs(4));
    std::fs::write(c.work().join("stop-gen"), "").expect("stop-gen");
    let mut statuses = Vec::new();
    for (g, w) in ["a", "b"].iter().zip(writers) {
        let out = w.wait_with_output().expect("appender");
        assert!(out.status.success(), "appender on {g}: {}", String::from_utf8_lossy(&out.stderr));
        statuses.push(format!("{g}: exit {}", String::from_utf8_lossy(&out.stdout).trim()));
    }
    let pid = std::fs::read_to_string(c.work().join("closer.pid")).expect("closer pid");
    c.ok("b", "kill \"$1\"", &[pid.trim()]);
    let _ = closer.wait_with_output();

    std::thread::sleep(Duration::from_secs(2));
    c.ok("b", &format!("\"$TENURE\" bag close \"$1\" --lookback 600s {COMMON}"), &[&log]);
    let read = read_from_both(&c, &log);
    let set: BTreeSet<&str> = read.iter().map(String::as_str).collect();
    let (acc, rej, unk, _) = verdicts(c.work().as_path());
    let missing: Vec<_> = acc.iter().filter(|p| !set.contains(p.as_str())).collect();
    assert!(missing.is_empty(), "accepted but not read: {missing:?}");
    let resurrected: Vec<_> = rej.iter().filter(|p| set.contains(p.as_str())).collect();
    assert!(resurrected.is_empty(), "rejected but read: {resurrected:?}");
    assert!(acc.len() > 20, "too few accepted appends: {}", acc.len());
    let errors: Vec<String> = ["a0", "b0"].iter().flat_map(|id| lines(&c.work().join(format!("err-{id}")))).collect();
    println!(
        "NFS bag appends across an 8 s server hang and a restart: accepted {}, rejected {}, unknown {}, {} read, \
         identical on both clients; messages waiting for a verdict during the hang (a, b): {in_flight:?}; \
         appenders {statuses:?}; what they said: {errors:?}",
        acc.len(),
        rej.len(),
        unk.len(),
        read.len()
    );
}
