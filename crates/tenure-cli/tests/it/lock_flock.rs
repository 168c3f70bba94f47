//! flock(1)'s habits on `tenure lock`: `-w`, `-n`, `-s`, `-x`, `-E`, `-c`, the
//! flock flags tenure refuses with a reason, and the `-v` summary line. Real
//! processes: on a directory store, and `-n`/`-E` also on the lease server
//! and on S3 (moto).

use crate::common;

use std::process::{Child, Stdio};
use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(30);

/// Starts `tenure lock URL NAME EXTRA FLAGS -- sh -c …` that holds the lease
/// until killed, and waits until its command runs; returns it and its token.
fn hold(url: &str, name: &str, extra: &[String], flags: &[&str], ready: &std::path::Path) -> (Child, u64) {
    let script = format!("echo $TENURE_TOKEN > '{}'; exec sleep 60", ready.display());
    let child = tenure()
        .args(["lock", url, name])
        .args(extra)
        .args(flags)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn holder");
    let token = wait_lines(ready, 1, LIMIT)[0].trim().parse().expect("a token");
    (child, token)
}

/// `tenure lock URL NAME EXTRA FLAGS -- sh -c 'touch RAN'`: its exit code,
/// stderr, and whether the command ran.
fn try_lock(
    url: &str,
    name: &str,
    extra: &[String],
    flags: &[&str],
    ran: &std::path::Path,
) -> (Option<i32>, String, bool) {
    let _ = std::fs::remove_file(ran);
    let touch = format!("touch '{}'", ran.display());
    let out = run(tenure().args(["lock", url, name]).args(extra).args(flags).args(["--", "sh", "-c", &touch]), LIMIT);
    (out.status.code(), stderr(&out), ran.exists())
}

/// On a held lease: `-n` and its long names exit 75, `-E CODE` replaces that
/// code for a busy lease and for a wait that timed out (`-w`, a bare number
/// of seconds), and the command never runs.
fn busy_lease_exits_with_the_conflict_code(url: &str, extra: &[String], scratch: &std::path::Path) {
    let (mut holder, _) = hold(url, "busy", extra, &[], &scratch.join("ready"));
    let ran = scratch.join("ran");
    let cases: [(&[&str], i32); 7] = [
        (&["-n"], 75),
        (&["--nonblock"], 75),
        (&["--nb"], 75),
        (&["-n", "-E", "9"], 9),
        (&["-E", "0", "-n"], 0),
        (&["-w", "0.3", "-E", "9"], 9),
        (&["--wait", "300ms", "--conflict-exit-code", "1"], 1),
    ];
    for (flags, code) in cases {
        let (got, err, did_run) = try_lock(url, "busy", extra, flags, &ran);
        assert_eq!(got, Some(code), "{flags:?}: {err}");
        assert!(!did_run, "{flags:?}: the command ran on a busy lease");
        assert!(err.contains("busy") || err.contains("timed out"), "{flags:?} should say why: {err}");
    }
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn n_w_and_e_give_a_busy_lease_the_conflict_code_on_the_directory_store() {
    let store = FileStore::new();
    busy_lease_exits_with_the_conflict_code(&store.url(), &[], store.dir.path());
}

#[test]
fn e_does_not_touch_the_commands_own_status_nor_tenures_other_codes() {
    let store = FileStore::new();
    let url = store.url();
    // The command's own 75 stays 75; a free lease runs the command.
    let out = run(&mut lock(&url, "x", &["-n", "-E", "3"], &["sh", "-c", "exit 75"]), LIMIT);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    // A bad lease name is still a usage error (64), not the conflict code.
    let out = run(&mut lock(&url, "../x", &["-n", "-E", "3"], &["true"]), LIMIT);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    // Out of range, or one of tenure's own codes: refused before anything happens.
    for code in ["256", "-1", "x", "64", "69", "76", "127"] {
        let out = run(&mut lock(&url, "x", &["-E", code], &["true"]), LIMIT);
        assert_eq!(out.status.code(), Some(64), "-E {code}: {}", stderr(&out));
        assert!(stderr(&out).contains("--conflict-exit-code"), "-E {code}: {}", stderr(&out));
    }
}

#[test]
fn s_shares_the_lease_and_x_is_exclusive_on_the_directory_store() {
    let store = FileStore::new();
    let url = store.url();
    let ran = store.path("ran");
    let (mut shared, _) = hold(&url, "backups", &[], &["-s"], &store.path("ready"));
    let (code, err, did_run) = try_lock(&url, "backups", &[], &["-s", "-n"], &ran);
    assert_eq!((code, did_run), (Some(0), true), "a second shared holder gets in: {err}");
    for flags in [&["-n"][..], &["-x", "-n"], &["-e", "-n"], &["--exclusive", "-n"]] {
        let (code, err, did_run) = try_lock(&url, "backups", &[], flags, &ran);
        assert_eq!((code, did_run), (Some(75), false), "{flags:?} is exclusive: {err}");
    }
    let out = run(&mut lock(&url, "backups", &["-x", "-s"], &["true"]), LIMIT);
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    let _ = shared.kill();
    let _ = shared.wait();
}

#[test]
fn c_runs_a_shell_command_instead_of_one_after_the_separator() {
    let store = FileStore::new();
    let url = store.url();
    let seen = store.path("seen");
    let script = format!("echo \"$TENURE_LEASE $TENURE_TOKEN\" > '{}'; exit 7", seen.display());
    let out = run(tenure().args(["lock", &url, "job", "-c", &script]), LIMIT);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert_eq!(lines(&seen), vec!["job 1".to_string()]);
    let out = run(tenure().args(["lock", &url, "job", "--command", "exit 3"]), LIMIT);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    // Exactly one of -c and `-- COMMAND`.
    for args in [&["lock", &url, "job", "-c", "true", "--", "true"][..], &["lock", &url, "job"]] {
        let out = run(tenure().args(args), LIMIT);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn flock_flags_tenure_has_no_use_for_are_refused_saying_what_it_does_instead() {
    let store = FileStore::new();
    let url = store.url();
    let ran = store.path("ran");
    let cases: [(&str, &str); 7] = [
        ("-u", "tenure break"),
        ("--unlock", "tenure break"),
        ("-o", "everything the command started"),
        ("--close", "everything the command started"),
        ("-F", "renew the lease"),
        ("--no-fork", "renew the lease"),
        ("--fcntl", "no kernel lock"),
    ];
    for (flag, says) in cases {
        let (code, err, did_run) = try_lock(&url, "x", &[], &[flag], &ran);
        assert_eq!(code, Some(64), "{flag}: {err}");
        assert!(!did_run, "{flag}: the command ran");
        assert!(err.contains(says) && err.lines().count() == 1, "{flag} should say {says:?} in one line: {err}");
    }
    // Before: `-w 5` without `--` read `-w` as the command; now it is the timeout.
    let out = run(tenure().args(["lock", &url, "x", "-w", "5", "true"]), LIMIT);
    assert_eq!(out.status.code(), Some(64));
    assert!(stderr(&out).contains("put `--` before the command"), "{}", stderr(&out));
}

/// The `-v` summary: one line at the end with the wait, the hold, the
/// renewals and the token the command saw; none without `-v`.
#[test]
fn verbose_ends_with_one_summary_line_of_wait_hold_renewals_and_token() {
    let store = FileStore::new();
    let url = store.url();
    let token_file = store.path("token");
    // A 4 s TTL renews every 500 ms (an 800 ms one renewed every 100 ms, and a
    // loaded machine's renewal could take longer than that: the lease was then
    // at risk and the command stopped). The command ends once the record shows
    // two renewals: the keep-alive counted the first before it began the second.
    let script = format!(
        "echo $TENURE_TOKEN > '{tf}'; seen=$TENURE_DEADLINE; n=0
         while [ $n -lt 2 ]; do
           d=$('{tenure}' status '{url}' deploy/prod --json | sed -n 's/.*\"deadline_ms\": \\([0-9]*\\).*/\\1/p' | head -n 1)
           if [ -n \"$d\" ] && [ \"$d\" != \"$seen\" ]; then seen=$d; n=$((n + 1)); fi
           sleep 0.02
         done",
        tf = token_file.display(),
        tenure = TENURE,
    );
    let out = run(tenure().args(["-v", "lock", &url, "deploy/prod", "--ttl", "4s", "--", "sh", "-c", &script]), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let token = lines(&token_file)[0].clone();
    let err = stderr(&out);
    let last = err.lines().last().unwrap_or_default();
    let prefix = format!("tenure: lease deploy/prod in file://{url}: waited ");
    let rest = last.strip_prefix(&prefix).unwrap_or_else(|| panic!("{last:?} should start {prefix:?}"));
    let parts: Vec<&str> = rest.split(", ").collect();
    let [waited, held, renewals, tok] = parts.as_slice() else { panic!("four parts: {last}") };
    assert!(waited.ends_with('s') && held.starts_with("held ") && held.ends_with('s'), "{last}");
    assert_eq!(*tok, format!("token {token}"), "{last}");
    let (count, word) = renewals.split_once(' ').unwrap_or_else(|| panic!("{last}"));
    let count: u64 = count.parse().unwrap_or_else(|_| panic!("a count: {last}"));
    assert!(count >= 1 && word == "renewals" || count == 1 && word == "renewal", "{last}");
    assert_eq!(err.matches(" renewal").count(), 1, "one summary line: {err}");
    // Without -v: nothing but the command's own output.
    let out = run(&mut lock(&url, "deploy/prod", &[], &["true"]), LIMIT);
    assert_eq!(stderr(&out), "", "no -v, no summary");
}

#[cfg(feature = "server")]
#[test]
fn n_and_e_give_a_busy_lease_the_conflict_code_on_the_lease_server() {
    // A short --max-lease keeps its start-up quarantine short; leases fit in it.
    let server = crate::serve_common::serve(&["--listen", "127.0.0.1:0", "--max-lease", "2s"]);
    let scratch = tempfile::tempdir().expect("tempdir");
    busy_lease_exits_with_the_conflict_code(&server.url, &["--ttl".into(), "2s".into()], scratch.path());
}

#[cfg(feature = "object")]
#[test]
fn n_and_e_give_a_busy_lease_the_conflict_code_on_s3_moto() {
    let Some((url, extra)) = moto_store("lock-flock") else { return };
    let scratch = tempfile::tempdir().expect("tempdir");
    busy_lease_exits_with_the_conflict_code(&url, &extra, scratch.path());
}
