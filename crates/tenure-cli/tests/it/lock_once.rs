//! `tenure lock --once-per`, `--count-failures` and `--hold-at-least`, as real
//! processes: 8 `tenure lock`s started together stand for the cron of 8
//! machines, on the file store, the lease server and S3 (moto).

use crate::common;
use crate::serve_common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;

/// The period of the fleet tests: long enough that 8 processes started at
/// most a fifth into it all stamp it, however loaded the machine.
const PERIOD: Duration = Duration::from_secs(10);
/// A period no test straddles (about 8 years): every run of a test is in one.
const LONG: &str = "3000d";

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Waits for the start of a period of [`PERIOD`] after `after` (any, if
/// `None`) and returns its index, once at least 200 ms into it and at most a
/// fifth: processes started then all fall in it. This chooses when the test
/// starts its processes; nothing asserts how fast anything is.
fn fresh_period(after: Option<u64>) -> u64 {
    let every = u64::try_from(PERIOD.as_millis()).expect("ms");
    loop {
        let now = unix_ms();
        let (k, into) = (now / every, now % every);
        if (200..every / 5).contains(&into) && after.is_none_or(|a| k > a) {
            return k;
        }
        let to_next = every - into + 200;
        std::thread::sleep(Duration::from_millis(if into < 200 { 200 - into } else { to_next }));
    }
}

/// `tenure lock <url> <name> <store args> <rest>` (`rest`: flags, then `--`
/// and the command), 8 at once; their outputs, once all have ended.
fn fleet(url: &str, store_args: &[String], name: &str, rest: &[&str]) -> Vec<std::process::Output> {
    let children: Vec<Child> = (0..8)
        .map(|_| {
            tenure()
                .args(["lock", url, name])
                .args(store_args)
                .args(rest)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn tenure lock")
        })
        .collect();
    children.into_iter().map(|c| wait_output(c, Duration::from_secs(120))).collect()
}

/// 8 machines' cron in one period: exactly one runs the job; the 7 others exit
/// 0 saying it ran. Then again in the next period: exactly one more.
fn eight_machines_two_periods(url: &str, store_args: &[String]) {
    let scratch = tempfile::tempdir().expect("scratch");
    let runs = scratch.path().join("runs");
    let script = format!("echo \"$TENURE_PERIOD_START $TENURE_TOKEN\" >> '{}'", runs.display());
    let every = format!("{}s", PERIOD.as_secs());
    let flags = ["--once-per", every.as_str(), "--ttl", "2s", "--", "sh", "-c", script.as_str()];
    let mut period = None;
    for round in 1..=2 {
        let k = fresh_period(period);
        period = Some(k);
        let outs = fleet(url, store_args, "nightly", &flags);
        for out in &outs {
            assert_eq!(out.status.code(), Some(0), "round {round}: {}", stderr(out));
        }
        let said_ran = outs.iter().filter(|o| stderr(o).contains("already ran for the period")).count();
        let lines = lines(&runs);
        assert_eq!(lines.len(), round, "round {round}: exactly one more run: {lines:?}");
        assert_eq!(said_ran, 7, "round {round}: the 7 others say it ran");
        let started: Vec<&str> = lines.iter().map(|l| l.split(' ').next().unwrap_or("")).collect();
        if round == 2 {
            assert_ne!(started[0], started[1], "two runs, two periods: {lines:?}");
        }
    }
}

#[test]
fn eight_machines_run_a_job_once_per_period_on_the_file_store() {
    let store = FileStore::new();
    eight_machines_two_periods(&store.url(), &[]);
}

#[test]
fn eight_machines_run_a_job_once_per_period_on_the_lease_server() {
    let server = serve_common::serve(&["--listen", "127.0.0.1:0", "--max-lease", "2s"]);
    // Past the quarantine of a fresh server, so that the fleet's wait is short.
    let warm =
        run(tenure().args(["lock", &server.url, "warm-up", "--ttl", "2s", "--timeout", "30s", "--", "true"]), LIMIT);
    assert_eq!(warm.status.code(), Some(0), "{}", stderr(&warm));
    eight_machines_two_periods(&server.url, &[]);
}

#[cfg(feature = "object")]
#[test]
fn eight_machines_run_a_job_once_per_period_on_s3_moto() {
    let Some((url, args)) = moto_store("lock-once") else { return };
    eight_machines_two_periods(&url, &args);
}

/// `tenure lock <store> <name> --once-per LONG <flags> -- sh -c <script>` to its end.
fn once(store: &FileStore, name: &str, flags: &[&str], script: &str) -> std::process::Output {
    let mut all = vec!["--once-per", LONG];
    all.extend_from_slice(flags);
    run(&mut lock(&store.url(), name, &all, &["sh", "-c", script]), LIMIT)
}

#[test]
fn a_failed_run_does_not_count_and_the_next_machine_runs_the_job() {
    let store = FileStore::new();
    let runs = store.path("runs");
    let job = |status: u8| format!("echo run >> '{}'; exit {status}", runs.display());
    let failed = once(&store, "job", &[], &job(3));
    assert_eq!(failed.status.code(), Some(3), "the command's own status: {}", stderr(&failed));
    assert!(stderr(&failed).contains("does not count"), "{}", stderr(&failed));
    let ok = once(&store, "job", &[], &job(0));
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    let skipped = once(&store, "job", &[], &job(0));
    assert_eq!(skipped.status.code(), Some(0), "{}", stderr(&skipped));
    assert!(stderr(&skipped).contains("already ran for the period"), "{}", stderr(&skipped));
    assert_eq!(lines(&runs).len(), 2, "the failed run and the one that counted");
}

#[test]
fn with_count_failures_a_failed_run_counts() {
    let store = FileStore::new();
    let runs = store.path("runs");
    let job = format!("echo run >> '{}'; exit 3", runs.display());
    let failed = once(&store, "job", &["--count-failures"], &job);
    assert_eq!(failed.status.code(), Some(3), "{}", stderr(&failed));
    let skipped = once(&store, "job", &["--count-failures"], &job);
    assert_eq!(skipped.status.code(), Some(0), "{}", stderr(&skipped));
    assert_eq!(lines(&runs).len(), 1, "the failed run counted");
}

#[test]
fn a_run_whose_tenure_was_killed_does_not_count() {
    let store = FileStore::new();
    let runs = store.path("runs");
    let mut first = lock(
        &store.url(),
        "job",
        &["--once-per", LONG],
        &["sh", "-c", &format!("echo run >> '{}'; sleep 300", runs.display())],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .expect("spawn");
    wait_lines(&runs, 1, LIMIT);
    // Its guard stops the command, then breaks the grant: the run was cut short.
    first.kill().expect("SIGKILL tenure");
    first.wait().expect("reap");
    let next = once(&store, "job", &["--timeout", "60s"], &format!("echo run >> '{}'", runs.display()));
    assert_eq!(next.status.code(), Some(0), "{}", stderr(&next));
    assert_eq!(lines(&runs).len(), 2, "the killed run did not count; the next one ran");
}

#[test]
fn hold_at_least_keeps_the_lease_after_the_command_ended_until_a_signal() {
    let store = FileStore::new();
    let mut first = start(&store, "held", &["--hold-at-least", "10m"], "true");
    let mut err = BufReader::new(first.stderr.take().expect("stderr"));
    let mut line = String::new();
    while !line.contains("holding lease") {
        line.clear();
        assert!(err.read_line(&mut line).expect("read stderr") > 0, "tenure ended without holding the lease");
    }
    // The command ended; the lease is still held.
    let busy = run(&mut lock(&store.url(), "held", &["--no-wait"], &["true"]), LIMIT);
    assert_eq!(busy.status.code(), Some(75), "{}", stderr(&busy));
    // A signal ends the hold: released at once, the command's status.
    signal(first.id(), rustix::process::Signal::TERM);
    let status = wait_status(&mut first, LIMIT);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).expect("read stderr");
    assert_eq!(status.code(), Some(0), "{rest}");
    assert!(rest.contains("ending --hold-at-least early"), "{rest}");
    let free = run(&mut lock(&store.url(), "held", &["--no-wait"], &["true"]), LIMIT);
    assert_eq!(free.status.code(), Some(0), "released after the hold: {}", stderr(&free));
}

#[test]
fn once_per_refuses_a_shared_lease_and_periods_out_of_range() {
    let store = FileStore::new();
    let flags: [&[&str]; 6] = [
        &["--once-per", "1h", "--shared"],
        &["--once-per", "10ms"],
        &["--once-per", "0"],
        &["--once-per", "11y"],
        &["--hold-at-least", "11y"],
        &["--count-failures"],
    ];
    for flags in flags {
        let out = run(&mut lock(&store.url(), "job", flags, &["true"]), LIMIT);
        assert_eq!(out.status.code(), Some(64), "{flags:?}: {}", stderr(&out));
    }
}
