//! `tenure status` reports what it can: one unreadable lease is shown as such,
//! never the failure of the whole listing.

use crate::common;

use std::os::unix::fs::symlink;
use std::process::Command;
use std::time::Duration;

use common::{FileStore, lock, run, tenure};

const LIMIT: Duration = Duration::from_secs(30);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn one_unreadable_lease_does_not_hide_the_others() {
    let store = FileStore::new();
    let url = store.url();
    for name in ["a", "c"] {
        let out = run(&mut lock(&url, name, &[], &["true"]), LIMIT);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    // b: a lease directory that is a link out of the store; c: a FIFO as its newest version.
    let outside = tempfile::tempdir().expect("tempdir");
    symlink(outside.path(), store.path("leases/b")).expect("symlink");
    let fifo = store.path("leases/c").join(format!("~{:020}", 99));
    rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from(0o600)).expect("mkfifo");

    let out = run(tenure().args(["status", &url, "--all"]), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let line = |name: &str| table.lines().find(|l| l.starts_with(name)).map(str::to_string).unwrap_or_default();
    assert!(line("a ").contains("free"), "{table}");
    assert!(line("b ").contains("error") && line("b ").contains("symbolic link"), "{table}");
    assert!(line("c ").contains("corrupt") && line("c ").contains("FIFO"), "{table}");

    let out = run(tenure().args(["status", &url, "--json"]), LIMIT);
    let rows = common::leases(&out.stdout);
    let states: Vec<(&str, &str)> = rows
        .as_array()
        .expect("array")
        .iter()
        .map(|r| (r["name"].as_str().unwrap_or(""), r["state"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(states, [("a", "free"), ("b", "error"), ("c", "corrupt")]);

    // Asked about the unreadable one alone, the answer is its error.
    let out = run(tenure().args(["status", &url, "b"]), LIMIT);
    assert_eq!(out.status.code(), Some(65), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("symbolic link"), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_dir(outside.path()).expect("list").count(), 0);

    // A break of one token (as a guard runs for a `tenure lock` that died)
    // does not replace the unreadable record: it cannot show whose it is.
    let out = run(tenure().args(["break", &url, "c", "--token", "1"]), LIMIT);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("unreadable") && err.contains("without --token"), "{err}");
    let out = run(tenure().args(["status", &url, "c", "--json"]), LIMIT);
    assert_eq!(common::leases(&out.stdout)[0]["state"], "corrupt", "{}", text(&out.stdout));
}

/// Starts a holder of `name` that holds until `release` exists, and waits until it holds.
fn hold_until(store: &FileStore, name: &str, release: &std::path::Path) -> std::process::Child {
    let ready = store.path(&format!("{}.ready", name.replace('/', "_")));
    let script =
        format!("echo held > '{}'; while [ ! -e '{}' ]; do sleep 0.05; done", ready.display(), release.display());
    let child = common::start(store, name, &[], &script);
    common::wait_lines(&ready, 1, LIMIT);
    child
}

#[test]
fn status_shows_held_leases_by_default_and_all_shows_released_ones() {
    let store = FileStore::new();
    let url = store.url();
    let out = run(&mut lock(&url, "done", &[], &["true"]), LIMIT);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Only released leases: none shown, and it says how to see them.
    let out = run(tenure().args(["status", &url]), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("no held leases in") && text(&out.stdout).contains("--all"),
        "{}",
        text(&out.stdout)
    );

    let release = store.path("release");
    let mut holder = hold_until(&store, "busy", &release);
    let out = run(tenure().args(["status", &url]), LIMIT);
    let table = text(&out.stdout);
    let header = table.lines().next().unwrap_or_default();
    assert!(header.contains("HOLDER") && header.contains("HELD") && header.contains("EXPIRES"), "{table}");
    let busy = table.lines().find(|l| l.starts_with("busy ")).unwrap_or_else(|| panic!("no busy row: {table}"));
    assert!(busy.contains("held") && busy.contains(&format!("pid {}", holder.id())) && busy.contains(" in "), "{busy}");
    // Short holder: no nonce in brackets.
    assert!(!busy.contains('['), "{busy}");
    assert!(!table.lines().any(|l| l.starts_with("done")), "released lease shown by default: {table}");

    let out = run(tenure().args(["status", &url, "--all"]), LIMIT);
    let table = text(&out.stdout);
    let done = table.lines().find(|l| l.starts_with("done ")).unwrap_or_else(|| panic!("no done row: {table}"));
    assert!(done.contains("free") && done.contains("released"), "{done}");

    // JSON gives the acquisition time.
    let out = run(tenure().args(["status", &url, "busy", "--json"]), LIMIT);
    let json = common::leases(&out.stdout);
    let acquired = json[0]["holders"][0]["acquired_ms"].as_u64().expect("acquired_ms");
    assert!(acquired <= json[0]["holders"][0]["deadline_ms"].as_u64().expect("deadline"), "{json}");

    std::fs::write(&release, b"").expect("release");
    assert_eq!(common::wait_status(&mut holder, LIMIT).code(), Some(0));
}

#[test]
fn status_of_one_lease_exits_0_when_held_and_1_when_not() {
    let store = FileStore::new();
    let url = store.url();
    let release = store.path("release");
    let mut holder = hold_until(&store, "deploy", &release);
    for extra in [&[][..], &["--json"][..]] {
        let out = run(tenure().args(["status", &url, "deploy"]).args(extra), LIMIT);
        assert_eq!(out.status.code(), Some(0), "{extra:?}: {}", text(&out.stderr));
    }
    std::fs::write(&release, b"").expect("release");
    assert_eq!(common::wait_status(&mut holder, LIMIT).code(), Some(0));
    for extra in [&[][..], &["--json"][..]] {
        let out = run(tenure().args(["status", &url, "deploy"]).args(extra), LIMIT);
        assert_eq!(out.status.code(), Some(1), "released, {extra:?}: {}", text(&out.stdout));
    }
    let out = run(tenure().args(["status", &url, "deploy"]), LIMIT);
    assert!(text(&out.stdout).contains("free"), "the released lease is shown: {}", text(&out.stdout));

    // A name that does not exist says so.
    let out = run(tenure().args(["status", &url, "nosuch"]), LIMIT);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("no lease nosuch in"), "{}", text(&out.stdout));
    assert!(!text(&out.stdout).contains("LEASE"), "no made-up row: {}", text(&out.stdout));
}

#[test]
fn status_on_something_that_is_not_a_store_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, b"hello").expect("file");
    let out = run(tenure().args(["status", &file.display().to_string()]), LIMIT);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("is not a tenure store: it is a file"), "{}", text(&out.stderr));

    // A directory of other things: refused, with the reason.
    for sub in ["src", "docs", "target"] {
        std::fs::create_dir(dir.path().join(sub)).expect("mkdir");
    }
    let out = run(tenure().args(["status", &dir.path().display().to_string()]), LIMIT);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("is not a tenure store"), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("4 entries"), "{}", text(&out.stderr));

    // Relative paths are shown as URLs that parse back.
    let out = run(tenure().current_dir(dir.path()).args(["status", "src"]), LIMIT);
    let shown = format!("file://{}/src", dir.path().display());
    assert!(text(&out.stdout).contains(&shown), "{}", text(&out.stdout));
}

#[test]
fn break_reason_is_kept_with_who_broke_it_and_shown_by_status_and_to_the_next_holder() {
    let store = FileStore::new();
    let url = store.url();
    let release = store.path("release");
    let mut holder = hold_until(&store, "deploy", &release);
    let reason = "deploy hung since 09:00; see INC-42";
    let out = run(tenure().args(["break", &url, "deploy", "--reason", reason]), LIMIT);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The broken holder's command is stopped: it lost its lease.
    assert_eq!(common::wait_status(&mut holder, LIMIT).code(), Some(76));

    let me = rustix::process::getpid().as_raw_nonzero().get();
    let out = run(tenure().args(["status", &url, "deploy", "--all"]), LIMIT);
    let table = text(&out.stdout);
    assert!(table.contains("last broken") && table.contains(&format!("{reason:?}")), "{table}");
    let json = common::leases(&run(tenure().args(["status", &url, "deploy", "--json"]), LIMIT).stdout);
    let broken = &json[0]["last"]["broken"];
    assert_eq!(broken["reason"], reason, "{json}");
    assert!(broken["by"]["pid"].as_u64().is_some_and(|p| p != 0 && p != me as u64), "the breaking process: {json}");

    let out = run(&mut lock(&url, "deploy", &[], &["true"]), LIMIT);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("its previous grant (token 1) was broken by") && err.contains(reason), "{err}");

    // A reason is one line of bounded text.
    for bad in ["two\nlines".to_string(), "x".repeat(1025)] {
        let out = run(tenure().args(["break", &url, "deploy", "--reason", &bad]), LIMIT);
        assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    }
}

/// `status` shows who waits in line for a lease: a WAITING column in the
/// table (only while someone waits) and `waiters` in the JSON.
#[test]
fn status_shows_how_many_wait_in_line() {
    let store = FileStore::new();
    let url = store.url();
    let release = store.path("release");
    let mut holder = hold_until(&store, "line", &release);
    let table = text(&run(tenure().args(["status", &url]), LIMIT).stdout);
    assert!(!table.contains("WAITING"), "no column while nobody waits: {table}");

    let mut waiters: Vec<_> = (0..2).map(|_| common::start(&store, "line", &[], "true")).collect();
    let waiting = |n: u64| common::status_json(&url, "line")[0]["waiters"].as_u64() == Some(n);
    assert!(common::eventually(LIMIT, || waiting(2)), "{}", common::status_json(&url, "line"));
    let table = text(&run(tenure().args(["status", &url]), LIMIT).stdout);
    let header = table.lines().next().unwrap_or_default();
    let row = table.lines().find(|l| l.starts_with("line ")).unwrap_or_else(|| panic!("no row: {table}"));
    let at = header.find("WAITING").unwrap_or_else(|| panic!("no WAITING column: {table}"));
    assert!(header[..at].trim_end().ends_with("HOLDER"), "right after HOLDER: {table}");
    assert_eq!(row.get(at..).and_then(|c| c.split_whitespace().next()), Some("2"), "{table}");

    std::fs::write(&release, b"").expect("release");
    assert_eq!(common::wait_status(&mut holder, LIMIT).code(), Some(0));
    for w in &mut waiters {
        assert_eq!(common::wait_status(w, LIMIT).code(), Some(0));
    }
    // Free again: a free lease has no line to show (status does not ask).
    let free = common::status_json(&url, "line");
    assert!(free[0]["holders"].as_array().is_some_and(Vec::is_empty), "{free}");
    assert!(free[0].get("waiters").is_none(), "{free}");
}

/// Writes `n` released leases `l00000`… into `store` the cheap way: one taken
/// and released by `tenure lock`, its record copied under each name.
fn released_leases(store: &FileStore, n: usize) {
    let url = store.url();
    let out = run(&mut lock(&url, "seed", &[], &["true"]), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let seed = store.path("leases/seed");
    let newest = std::fs::read_dir(&seed).expect("list").filter_map(|e| e.ok()).map(|e| e.file_name()).max();
    let newest = newest.expect("a record");
    let record = std::fs::read_to_string(seed.join(&newest)).expect("record");
    std::fs::remove_dir_all(&seed).expect("rm seed");
    for i in 0..n {
        let name = format!("l{i:05}");
        let dir = store.path("leases").join(&name);
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::write(dir.join(&newest), record.replace("\"name\":\"seed\"", &format!("\"name\":\"{name}\"")))
            .expect("write");
    }
}

#[test]
fn status_lists_ten_thousand_leases_within_256_open_files() {
    let store = FileStore::new();
    released_leases(&store, 10_000);
    // Into a file: the table is larger than a pipe holds.
    let listed = store.path("listed");
    let script = format!("ulimit -n 256 && exec '{}' status --all \"$1\" > \"$2\"", common::TENURE);
    let out = run(Command::new("sh").args(["-c", &script, "sh", &store.url(), listed.to_str().expect("utf-8")]), LIMIT);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = std::fs::read_to_string(&listed).expect("table");
    let rows: Vec<&str> = table.lines().skip(1).collect();
    assert_eq!(rows.len(), 10_000, "{}", text(&out.stderr));
    assert!(rows.iter().all(|r| r.starts_with('l') && r.contains("free")), "{}", &table[..2000.min(table.len())]);
}

#[test]
fn status_on_a_directory_of_other_things_says_once_that_it_is_not_a_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let other = dir.path().join("share");
    // Files, nested directories, and links (each of which a listing would show
    // as an unreadable lease), as in /usr/share.
    for i in 0..200 {
        let sub = other.join(format!("pkg{i}/doc/examples"));
        std::fs::create_dir_all(&sub).expect("mkdir");
        std::fs::write(sub.join("README"), b"hello").expect("file");
        std::fs::write(other.join(format!("file{i}.txt")), b"text").expect("file");
        symlink(other.join(format!("pkg{i}")), other.join(format!("link{i}"))).expect("symlink");
    }
    let before = snapshot(&other);
    for json in [false, true] {
        let mut cmd = tenure();
        cmd.args(["status", &other.display().to_string()]);
        if json {
            cmd.arg("--json");
        }
        let out = run(&mut cmd, LIMIT);
        assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
        let err = text(&out.stderr);
        assert_eq!(err.matches("is not a tenure store").count(), 1, "{err}");
        assert!(err.contains(&other.display().to_string()) && err.contains("600 entries"), "{err}");
        assert!(out.stdout.is_empty(), "no rows: {}", text(&out.stdout));
    }
    assert_eq!(snapshot(&other), before, "status never writes");

    // A directory that does not exist is no store either.
    let missing = dir.path().join("mnt/locks");
    let out = run(tenure().args(["status", &missing.display().to_string()]), LIMIT);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("does not exist"), "{}", text(&out.stderr));
    assert!(!dir.path().join("mnt").exists());
}

/// Every path under `dir` with its size, for "nothing changed".
fn snapshot(dir: &std::path::Path) -> Vec<(std::path::PathBuf, u64)> {
    let mut all = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("list").filter_map(|e| e.ok()) {
            let meta = std::fs::symlink_metadata(e.path()).expect("stat");
            if meta.is_dir() {
                stack.push(e.path());
            }
            all.push((e.path(), meta.len()));
        }
    }
    all.sort();
    all
}
