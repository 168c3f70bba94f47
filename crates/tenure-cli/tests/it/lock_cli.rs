//! `tenure lock` as a user sees it: environment, exit codes, waiting, signals,
//! errors; and `tenure status` / `tenure break` end to end. Real processes on a
//! file store in a temporary directory.

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use rustix::process::Signal;

const LIMIT: Duration = Duration::from_secs(30);

/// Starts a holder of `name` that runs until killed, and waits until it holds.
fn hold(store: &FileStore, name: &str, flags: &[&str]) -> std::process::Child {
    let ready = store.path(&format!("{}.ready", name.replace('/', "_")));
    let script = format!("echo $TENURE_TOKEN > '{}'; exec sleep 60", ready.display());
    let child = lock(&store.url(), name, flags, &["sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn holder");
    wait_lines(&ready, 1, LIMIT);
    child
}

#[test]
fn command_sees_lease_token_deadline_and_store_in_its_environment() {
    let store = FileStore::new();
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis();
    let out =
        run(&mut lock(&store.url(), "env/demo", &["--ttl", "10s"], &["sh", "-c", "env | grep ^TENURE_ | sort"]), LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let env = stdout(&out);
    let get = |k: &str| {
        env.lines().find_map(|l| l.strip_prefix(&format!("{k}="))).unwrap_or_else(|| panic!("{k} missing in {env}"))
    };
    assert_eq!(get("TENURE_LEASE"), "env/demo");
    assert_eq!(get("TENURE_TOKEN"), "1");
    assert_eq!(get("TENURE_STORE"), store.url());
    let deadline: u128 = get("TENURE_DEADLINE").parse().expect("unix ms");
    assert!(deadline >= before + 9_000 && deadline <= before + 10_000 + 60_000, "deadline {deadline} vs {before}");

    // The next grant's token is higher.
    let out = run(&mut lock(&store.url(), "env/demo", &[], &["sh", "-c", "echo $TENURE_TOKEN"]), LIMIT);
    assert_eq!(stdout(&out).trim(), "2");
}

#[test]
fn the_commands_exit_status_is_tenures() {
    let store = FileStore::new();
    let out = run(&mut lock(&store.url(), "x", &[], &["sh", "-c", "exit 3"]), LIMIT);
    assert_eq!(out.status.code(), Some(3));
    let out = run(&mut lock(&store.url(), "x", &[], &["true"]), LIMIT);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_command_killed_by_a_signal_exits_128_plus_the_signal() {
    let store = FileStore::new();
    let out = run(&mut lock(&store.url(), "x", &[], &["sh", "-c", "kill -9 $$"]), LIMIT);
    assert_eq!(out.status.code(), Some(128 + 9));
    let out = run(&mut lock(&store.url(), "x", &[], &["sh", "-c", "kill -TERM $$"]), LIMIT);
    assert_eq!(out.status.code(), Some(128 + 15));
}

#[test]
fn a_missing_command_exits_127_without_taking_the_lease() {
    let store = FileStore::new();
    let out = run(&mut lock(&store.url(), "x", &[], &["no-such-command-for-tenure"]), LIMIT);
    assert_eq!(out.status.code(), Some(127));
    assert_one_line_error(&out);
    assert!(stderr(&out).contains("no-such-command-for-tenure"), "{}", stderr(&out));
    // Not even created: nothing was acquired.
    let out = run(tenure().args(["status", &store.url()]), LIMIT);
    assert!(stdout(&out).contains("no leases"), "{}", stdout(&out));
}

#[test]
fn a_command_that_is_not_executable_exits_126() {
    let store = FileStore::new();
    let script = store.path("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").expect("write");
    let out = run(&mut lock(&store.url(), "x", &[], &[script.to_str().expect("utf-8")]), LIMIT);
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    assert_one_line_error(&out);
}

#[test]
fn no_wait_on_a_held_lease_exits_75_naming_store_lease_and_holder() {
    let store = FileStore::new();
    let mut holder = hold(&store, "busy", &["--label", "nightly-build"]);
    let out = run(&mut lock(&store.url(), "busy", &["--no-wait"], &["true"]), LIMIT);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert_one_line_error(&out);
    let err = stderr(&out);
    assert!(err.contains("busy") && err.contains(&store.url()), "{err}");
    assert!(err.contains("nightly-build") && err.contains(&format!("pid {}", holder.id())), "{err}");
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn waiting_longer_than_the_timeout_exits_75() {
    let store = FileStore::new();
    let mut holder = hold(&store, "busy", &[]);
    let start = Instant::now();
    let out = run(&mut lock(&store.url(), "busy", &["--timeout", "300ms"], &["true"]), LIMIT);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(start.elapsed() >= Duration::from_millis(300));
    // A line when the wait starts (stderr is not a terminal), then the error.
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        matches!(lines.as_slice(), [wait, end] if wait.starts_with("tenure: waiting for lease busy")
        && end.starts_with("tenure: ") && end.contains("timed out")),
        "{err}"
    );
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn bad_input_is_a_usage_error_in_one_line() {
    let store = FileStore::new();
    let url = store.url();
    let cases: [&[&str]; 8] = [
        &["lock", &url, "../escape", "--", "true"],
        &["lock", &url, "x", "--store-opt", "aws_region=eu-west-1", "--", "true"],
        &["lock", &url, "a//b", "--", "true"],
        &["lock", &url, "x", "--ttl", "soon", "--", "true"],
        &["lock", &url, "x"],
        &["lock", &url, "x", "--ttl", "1ms", "--", "true"],
        &["lock", &url, "x", "--poll", "0", "--", "true"],
        &["lock", "nosuch://x", "x", "--", "true"],
    ];
    for args in cases {
        let out = run(tenure().args(args), LIMIT);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {}", stderr(&out));
        assert_one_line_error(&out);
    }
}

#[test]
fn directory_settings_may_come_as_store_opts_and_are_checked_there() {
    let store = FileStore::new();
    let out = run(tenure().args(["lock", &store.url(), "x", "--store-opt", "fsync=false", "--", "true"]), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Read, not ignored: a value the file store does not know is refused.
    let out = run(tenure().args(["lock", &store.url(), "x", "--store-opt", "fsync=maybe", "--", "true"]), LIMIT);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert!(stderr(&out).contains("fsync"), "{}", stderr(&out));
}

#[test]
fn a_store_that_cannot_be_written_exits_69() {
    let store = FileStore::new();
    // Root ignores permission bits, so use a path through a regular file.
    let file = store.path("a-file");
    std::fs::write(&file, "not a directory").expect("write");
    let url = file.join("leases").display().to_string();
    let out = run(&mut lock(&url, "x", &[], &["true"]), LIMIT);
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    assert_one_line_error(&out);
    assert!(stderr(&out).contains(&url) && stderr(&out).contains('x'), "{}", stderr(&out));
}

#[test]
fn a_store_that_is_a_symlink_to_nothing_exits_64_saying_so() {
    let store = FileStore::new();
    let link = store.path("dangling");
    std::os::unix::fs::symlink(store.path("missing"), &link).expect("symlink");
    let out = run(&mut lock(&link.display().to_string(), "x", &[], &["true"]), LIMIT);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert_one_line_error(&out);
    assert!(stderr(&out).contains("symbolic link to") && stderr(&out).contains("missing"), "{}", stderr(&out));
}

/// A store on a file system where `mkdir` says ENOENT in a directory that is
/// there (`/proc/self`) is refused at once, not waited on for ever as a lease
/// "just freed".
#[test]
fn a_store_where_no_directory_can_be_made_exits_69() {
    let out = run(&mut lock("/proc/self", "x", &[], &["true"]), LIMIT);
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    assert_one_line_error(&out);
    assert!(stderr(&out).contains("cannot hold a store"), "{}", stderr(&out));
}

#[test]
fn sigterm_to_tenure_reaches_the_command_and_the_lease_is_released_after_it() {
    let store = FileStore::new();
    let ready = store.path("ready");
    let script =
        format!("trap 'echo got-term; exit 42' TERM; echo up > '{}'; while :; do sleep 0.05; done", ready.display());
    let child = lock(&store.url(), "sig", &["--ttl", "20s"], &["sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_lines(&ready, 1, LIMIT);
    signal(child.id(), Signal::TERM);
    let out = wait_output(child, LIMIT);
    assert_eq!(out.status.code(), Some(42), "the command's own status: {}", stderr(&out));
    assert!(stdout(&out).contains("got-term"));
    // Released, not left to expire: the next holder gets it at once.
    let start = Instant::now();
    let out = run(&mut lock(&store.url(), "sig", &["--no-wait"], &["true"]), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(start.elapsed() < Duration::from_secs(20), "it did not wait for the 20s TTL");
}

#[test]
fn sigint_to_tenure_ends_a_default_command_with_130() {
    let store = FileStore::new();
    let ready = store.path("ready");
    let script = format!("echo up > '{}'; exec sleep 30", ready.display());
    let child = lock(&store.url(), "int", &[], &["sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_lines(&ready, 1, LIMIT);
    signal(child.id(), Signal::INT);
    let out = wait_output(child, LIMIT);
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(holders(&store.url(), "int").is_empty(), "released");
}

#[test]
fn status_shows_the_holder_and_break_is_conditional() {
    let store = FileStore::new();
    let url = store.url();
    let mut holder = hold(&store, "jobs/nightly", &["--ttl", "30s", "--label", "ci-42"]);

    let out = run(tenure().args(["status", &url]), LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    let row = table.lines().find(|l| l.starts_with("jobs/nightly")).unwrap_or_else(|| panic!("no row: {table}"));
    assert!(row.contains("held") && row.contains("exclusive") && row.contains("ci-42"), "{row}");
    assert!(row.contains(&format!("pid {}", holder.id())) && row.contains(" in "), "{row}");

    let json = status_json(&url, "jobs/nightly");
    assert_eq!(json[0]["state"], "held");
    let token = json[0]["holders"][0]["token"].as_u64().expect("token");
    assert_eq!(json[0]["holders"][0]["holder"]["pid"].as_u64(), Some(u64::from(holder.id())));
    assert!(json[0]["holders"][0]["deadline_ms"].as_u64().is_some());

    // A break aimed at another grant changes nothing.
    let out = run(tenure().args(["break", &url, "jobs/nightly", "--token", &(token + 7).to_string()]), LIMIT);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert_one_line_error(&out);
    assert_eq!(holders(&url, "jobs/nightly").len(), 1);

    // The right one ends it; the holder stops its command and reports the loss.
    let out = run(tenure().args(["break", &url, "jobs/nightly", "--token", &token.to_string()]), LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(&format!("token {token}")), "{}", stdout(&out));
    let status = wait_status(&mut holder, LIMIT);
    assert_eq!(status.code(), Some(76));
    let json = status_json(&url, "jobs/nightly");
    assert_ne!(json[0]["state"], "held", "{json}");

    // Nothing left to break: said in one line, exit 75 (not 70, a bug).
    let out = run(tenure().args(["break", &url, "jobs/nightly"]), LIMIT);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert_one_line_error(&out);
    assert!(stderr(&out).contains("not held"), "{}", stderr(&out));
}

#[test]
fn a_signal_ignored_when_tenure_starts_stays_ignored_in_the_command_as_under_nohup() {
    let store = FileStore::new();
    let (mask, go) = (store.path("mask"), store.path("go"));
    let command = format!(
        "grep SigIgn /proc/$$/status > '{}'; while [ ! -e '{}' ]; do sleep 0.05; done",
        mask.display(),
        go.display()
    );
    // `trap '' HUP` then exec: tenure starts with SIGHUP ignored, as under nohup(1).
    let shell = "trap '' HUP; exec \"$0\" lock \"$1\" nohup -- sh -c \"$2\"";
    let child = std::process::Command::new("sh")
        .args(["-c", shell, TENURE, &store.url(), &command])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let line = wait_lines(&mask, 1, LIMIT)[0].clone();
    let ignored = u64::from_str_radix(line.trim_start_matches("SigIgn:").trim(), 16).expect("hex mask");
    assert_ne!(ignored & (1 << (libc::SIGHUP - 1)), 0, "SIGHUP stays ignored: {line}");
    assert_eq!(ignored & (1 << (libc::SIGINT - 1)), 0, "SIGINT is back to default: {line}");
    // A hang-up does not end tenure or reach the command.
    signal(child.id(), Signal::HUP);
    std::fs::write(&go, "").expect("go");
    let out = wait_output(child, LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_signal_while_waiting_ends_tenure_with_128_plus_the_signal_holding_nothing() {
    use std::io::BufRead;
    let store = FileStore::new();
    let mut holder = hold(&store, "queue", &[]);
    let mut waiter = lock(&store.url(), "queue", &["-v"], &["true"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn waiter");
    // With -v, a waiter off the terminal logs who it waits for: it is waiting now.
    let mut err = std::io::BufReader::new(waiter.stderr.take().expect("stderr"));
    let mut line = String::new();
    while !line.contains("waiting for lease queue") {
        line.clear();
        assert_ne!(err.read_line(&mut line).expect("read"), 0, "the waiter ended before waiting");
    }
    signal(waiter.id(), Signal::TERM);
    assert_eq!(wait_status(&mut waiter, LIMIT).code(), Some(128 + 15));
    let held = holders(&store.url(), "queue");
    assert_eq!(held, vec![(u64::from(holder.id()), 1)], "only the first holder's grant is in the record");
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn a_second_sigterm_stops_a_command_that_ignored_the_first_within_the_grace() {
    let store = FileStore::new();
    let marks = store.path("marks");
    // The command notes each SIGTERM and carries on.
    let mut holder = start(&store, "stubborn", &["--ttl", "20s", "--kill-grace", "1s"], &stubborn(&marks));
    wait_lines(&marks, 1, LIMIT);
    signal(holder.id(), Signal::TERM);
    wait_lines(&marks, 2, LIMIT);
    let asked = Instant::now();
    signal(holder.id(), Signal::TERM);
    let (code, err) = finish(&mut holder);
    // It ignored the SIGTERM the guard sent as well: SIGKILL after the 1s grace.
    assert_eq!(code, Some(128 + 9), "{err}");
    assert!(asked.elapsed() < Duration::from_secs(10), "took {:?}", asked.elapsed());
    assert!(err.contains("asked twice"), "{err}");
    assert!(holders(&store.url(), "stubborn").is_empty(), "released");
}

#[test]
fn a_ttl_too_long_for_the_record_is_refused_before_anything_is_taken() {
    let store = FileStore::new();
    let ran = store.path("ran");
    let command = format!("touch '{}'; sleep 5", ran.display());
    // u64::MAX / 1000 seconds: its milliseconds overflow, and a wrapped, tiny TTL
    // once let a contender take the lease while this command still ran.
    for ttl in ["18446744073709551", "31days", "1e19", "inf", "NaN", "-5"] {
        let out = run(&mut lock(&store.url(), "huge", &[&format!("--ttl={ttl}")], &["sh", "-c", &command]), LIMIT);
        assert_eq!(out.status.code(), Some(64), "--ttl {ttl}: {}", stderr(&out));
        assert!(stderr(&out).contains("--ttl"), "names the flag: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    }
    assert!(!ran.exists(), "the command ran");
    let out = run(tenure().args(["status", &store.url()]), LIMIT);
    assert!(stdout(&out).contains("no leases"), "nothing was acquired: {}", stdout(&out));
    // The longest TTL tenure grants still works, and a contender cannot get in.
    let mut holder = start(&store, "huge", &["--ttl", "30days"], &command);
    assert!(eventually(LIMIT, || ran.exists()), "the 30-day holder never ran");
    let out = run(&mut lock(&store.url(), "huge", &["--no-wait"], &["true"]), LIMIT);
    assert_eq!(out.status.code(), Some(75), "a contender got in beside a 30-day holder: {}", stderr(&out));
    let (code, err) = finish(&mut holder);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn every_duration_flag_and_variable_is_range_checked_at_parse() {
    let store = FileStore::new();
    let url = store.url();
    for (flag, value) in [
        ("--poll", "11y"),
        ("--kill-grace", "NaN"),
        ("--timeout", "inf"),
        ("--max-skew", "-1"),
        ("--corrupt-ttl", "1e300"),
        ("--timeout", "99999999999999999999years"),
    ] {
        let out = run(tenure().args(["lock", &url, "x", &format!("{flag}={value}"), "--", "true"]), LIMIT);
        assert_eq!(out.status.code(), Some(64), "{flag} {value}: {}", stderr(&out));
        assert!(stderr(&out).contains(flag), "names {flag}: {}", stderr(&out));
    }
    for (var, value) in [("TENURE_MAX_SKEW", "inf"), ("TENURE_CORRUPT_TTL", "99999y")] {
        let out = run(tenure().env(var, value).args(["lock", &url, "x", "--", "true"]), LIMIT);
        assert_eq!(out.status.code(), Some(64), "{var}={value}: {}", stderr(&out));
    }
    let out = run(tenure().args(["status", &url]), LIMIT);
    assert!(stdout(&out).contains("no leases"), "nothing was acquired: {}", stdout(&out));
}

/// Reads `child`'s stderr line by line until a line contains `needle`; returns
/// every line read so far. Fails if the pipe closes first.
fn read_until(err: &mut impl std::io::BufRead, needle: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let mut line = String::new();
        let n = err.read_line(&mut line).expect("read stderr");
        assert!(n > 0, "stderr closed before {needle:?}; saw: {seen:?}");
        let found = line.contains(needle);
        seen.push(line.trim_end().to_string());
        if found {
            return seen;
        }
    }
}

#[test]
fn waiting_off_a_terminal_says_who_holds_it_at_once_and_how_long_the_wait_took() {
    let store = FileStore::new();
    let (ready, release) = (store.path("ready"), store.path("release"));
    let script =
        format!("echo held > '{}'; while [ ! -e '{}' ]; do sleep 0.05; done", ready.display(), release.display());
    let mut holder = start(&store, "ci/deploy", &["--label", "job-7"], &script);
    wait_lines(&ready, 1, LIMIT);

    // stderr is a pipe here, as in a CI log: whole lines, the first one at once.
    let mut waiter = lock(&store.url(), "ci/deploy", &["--poll", "100ms"], &["true"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn waiter");
    let mut err = std::io::BufReader::new(waiter.stderr.take().expect("stderr"));
    let first = read_until(&mut err, "waiting for lease");
    let line = first.last().expect("a line");
    assert!(line.contains("ci/deploy") && line.contains(&store.url()), "{line}");
    assert!(line.contains(&format!("pid {}", holder.id())) && line.contains("job-7"), "{line}");
    assert!(line.contains("held by") && line.contains(" for ") && line.contains("expires in"), "{line}");
    assert!(!line.contains('\r') && !line.contains('\u{1b}'), "no terminal codes in a log: {line:?}");

    std::fs::write(&release, b"").expect("release");
    let (code, holder_err) = finish(&mut holder);
    assert_eq!(code, Some(0), "{holder_err}");
    let rest = read_until(&mut err, "acquired lease");
    let done = rest.last().expect("a line");
    assert!(done.starts_with("tenure: acquired lease ci/deploy after "), "{done}");
    assert_eq!(wait_status(&mut waiter, LIMIT).code(), Some(0));
}

#[test]
fn a_lease_taken_at_once_prints_nothing_off_a_terminal() {
    let store = FileStore::new();
    let out = run(&mut lock(&store.url(), "quiet", &[], &["true"]), LIMIT);
    assert!(out.status.success() && stderr(&out).is_empty(), "{}", stderr(&out));
}

#[test]
fn a_nested_lock_on_the_parents_own_lease_is_refused_at_once() {
    let store = FileStore::new();
    let url = store.url();
    let abs = format!("file://{url}");
    // The inner `tenure lock` would wait for its own parent: refused (64), not a
    // deadlock. --timeout bounds the test if the refusal were missing (75).
    for inner_store in [url.as_str(), abs.as_str()] {
        let inner = [TENURE, "lock", inner_store, "outer", "--timeout", "3s", "--", "true"];
        let start = Instant::now();
        let out = run(&mut lock(&url, "outer", &[], &inner), LIMIT);
        assert_eq!(out.status.code(), Some(64), "{inner_store}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("already held by the `tenure lock` that runs this command"), "{err}");
        assert!(start.elapsed() < Duration::from_secs(3), "it waited: {err}");
    }
    // Another lease in the same store is fine.
    let inner = [TENURE, "lock", &url, "inner", "--", "sh", "-c", "echo $TENURE_LEASE"];
    let out = run(&mut lock(&url, "outer", &[], &inner), LIMIT);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "inner");
}

#[test]
fn common_mistakes_say_what_to_do() {
    let store = FileStore::new();
    let url = store.url();
    let cwd = tempfile::tempdir().expect("tempdir");
    let mut cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["lock", &url, "x", "sleep", "1"], "put `--` before the command"),
        (vec!["lock", &url, "x", "--ttl", "5s", "ls", "-l"], "put `--` before the command"),
        (vec!["lock", &url, "x", "--ttl", "0", "--", "true"], "from 10ms to 30 days; a bare number is seconds"),
        (vec!["lock", &url, "x", "--ttl", "30000000", "--", "true"], "at most 30 days; a bare number is seconds"),
        (vec!["lock", "./d?fsync=false", "x", "--", "true"], "use file:///"),
    ];
    if !cfg!(feature = "etcd") {
        cases.push((vec!["lock", "etcd://127.0.0.1:1/p", "x", "--", "true"], "`etcd` feature"));
    }
    for (args, says) in cases {
        let out = run(tenure().current_dir(cwd.path()).args(&args), LIMIT);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?} should say {says:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    }
    // The URL it suggests is the directory asked for, and parses.
    let out = run(tenure().current_dir(cwd.path()).args(["lock", "./d?fsync=false", "x", "--", "true"]), LIMIT);
    let suggested = format!("file://{}/d?fsync=false", cwd.path().display());
    assert!(stderr(&out).contains(&suggested), "{}", stderr(&out));
    let ok = run(&mut lock(&suggested, "x", &["--create"], &["true"]), LIMIT);
    assert!(ok.status.success(), "{suggested}: {}", stderr(&ok));
    // Nothing was created under the mistaken name.
    let names: Vec<_> = std::fs::read_dir(cwd.path()).expect("list").map(|e| e.expect("entry").file_name()).collect();
    assert!(names.iter().all(|n| !n.to_string_lossy().contains('?')), "{names:?}");
    // A misspelt option is still clap's own message.
    let out = run(tenure().args(["lock", &url, "x", "--ttll", "5s", "--", "true"]), LIMIT);
    assert_eq!(out.status.code(), Some(64));
    assert!(!stderr(&out).contains("put `--`") && stderr(&out).contains("--ttll"), "{}", stderr(&out));
}

#[cfg(feature = "object")]
#[test]
fn s3_without_credentials_says_none_were_found_not_the_metadata_request() {
    // No keys anywhere, so the instance metadata service is the last resort; it
    // is pointed at a closed local port so that the test needs no network.
    let metadata = "http://127.0.0.1:1";
    let mut cmd = tenure();
    for var in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_WEB_IDENTITY_TOKEN_FILE"] {
        cmd.env_remove(var);
    }
    cmd.env_remove("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").env_remove("AWS_CONTAINER_CREDENTIALS_FULL_URI");
    let store_opt = format!("aws_metadata_endpoint={metadata}");
    // A region is given: on AWS itself, a missing one is refused before credentials are looked for.
    let out = run(
        // Under --timeout too: no credentials is said at once, not retried until the timeout.
        cmd.args(["lock", "s3://tenure-no-such-bucket/locks", "x", "--timeout", "1m", "--store-opt", &store_opt])
            .args(["--store-opt", "aws_region=us-east-1", "--", "true"]),
        LIMIT,
    );
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("no AWS credentials were found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"), "{err}");
    assert!(err.contains(&format!("the instance metadata service at {metadata}")), "{err}");
    // With keys given, the same store fails for another reason (no such server), never "no credentials".
    let out = run(
        tenure()
            .env("AWS_ACCESS_KEY_ID", "k")
            .env("AWS_SECRET_ACCESS_KEY", "s")
            .args(["lock", "s3://tenure-no-such-bucket/locks", "x", "--timeout", "5s", "--store-opt", &store_opt])
            .args([
                "--store-opt",
                "aws_endpoint=http://127.0.0.1:1",
                "--store-opt",
                "aws_allow_http=true",
                "--",
                "true",
            ]),
        LIMIT,
    );
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("no AWS credentials"), "{}", stderr(&out));
}

/// A waiter killed with SIGKILL while it waits in a directory's line holds up
/// nobody: the waiter behind it runs its command as soon as the holder is
/// done, while the killed waiter's entry is still young enough to count as
/// alive by its age (a waiter refreshes it every 2 s; 8 s untouched is a
/// crash). The kernel closed the killed waiter's entry, and that is what the
/// waiter behind it goes by.
#[test]
fn a_waiter_killed_while_it_waits_holds_up_nobody() {
    let store = FileStore::new();
    let mut holder = hold(&store, "line", &[]);
    let line_dir = std::path::Path::new(&store.url()).join("line~line");
    let entries = || -> Vec<std::path::PathBuf> {
        let Ok(dir) = std::fs::read_dir(&line_dir) else { return Vec::new() };
        let mut v: Vec<_> = dir
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.len() == 20))
            .collect();
        v.sort();
        v
    };
    let mut killed = lock(&store.url(), "line", &[], &["true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the waiter to kill");
    assert!(eventually(LIMIT, || entries().len() == 1), "the first waiter is in line");
    let done = store.path("done");
    let script = format!("echo ok > '{}'", done.display());
    let mut next = lock(&store.url(), "line", &[], &["sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the waiter behind");
    assert!(eventually(LIMIT, || entries().len() == 2), "the second waiter is in line behind it");
    let killed_entry = entries()[0].clone();
    signal(killed.id(), Signal::KILL);
    let _ = killed.wait();
    signal(holder.id(), Signal::TERM);
    let _ = wait_status(&mut holder, LIMIT);
    assert_eq!(wait_status(&mut next, LIMIT).code(), Some(0), "the waiter behind ran");
    let mtime = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).expect("mtime");
    let age = mtime(&done).duration_since(mtime(&killed_entry)).unwrap_or_default();
    assert!(
        age < Duration::from_secs(8),
        "the waiter behind ran {age:?} after the killed waiter's last sign of life: it waited for its entry to age out"
    );
}

#[test]
fn timeout_zero_takes_a_free_lease_like_flock_w_0() {
    let store = FileStore::new();
    let out = run(&mut lock(&store.url(), "free", &["--timeout", "0"], &["echo", "ran"]), LIMIT);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "ran");
}

/// A `tenure lock` whose `--timeout` runs out while an attempt is under way
/// lets the attempt finish (briefly): exit 75 never leaves a grant behind
/// that nobody holds, keeping the lease for its TTL. (Without `fsync`, so
/// that an attempt takes far less than its 250 ms of grace on a busy machine.)
#[test]
fn a_lock_that_times_out_leaves_no_grant_behind() {
    let store = FileStore::new();
    let url = format!("file://{}?fsync=false", store.url());
    for i in 0..30 {
        let name = format!("n{i}");
        let t = format!("{}ms", 2 + i % 6);
        let out = run(&mut lock(&url, &name, &["--timeout", &t], &["true"]), LIMIT);
        if out.status.code() == Some(75) {
            // `status` of one lease exits 1 when nothing holds it.
            let st = run(tenure().args(["status", &url, &name]), LIMIT);
            assert_ne!(st.status.code(), Some(0), "exit 75 with {t}, yet {name} is held: {}", stdout(&st).trim());
        }
    }
}
