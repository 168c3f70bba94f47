//! `tenure lock` on a terminal, through `script(1)`'s pseudo-terminal: the
//! command's group gets the terminal's foreground (so ^C reaches it) and hands it
//! back; the live waiting line names the holder and is erased.

use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(30);

/// `script -qec <shell command> /dev/null`, or `None` (with the reason printed) if
/// `script` is not installed.
fn under_a_terminal(shell_command: &str) -> Option<Command> {
    if Command::new("script").arg("--version").stdout(Stdio::null()).status().is_err() {
        eprintln!("skipped: script(1) from util-linux is not installed");
        return None;
    }
    let mut cmd = Command::new("script");
    cmd.args(["-qec", shell_command, "/dev/null"]).env_remove("TENURE_LOG");
    Some(cmd)
}

/// Process group and terminal foreground group of the shell that runs this.
const GROUPS: &str = "cut -d' ' -f5,8 /proc/$$/stat";

#[test]
fn on_a_terminal_the_command_owns_the_foreground_gets_ctrl_c_and_hands_the_terminal_back() {
    let store = FileStore::new();
    let (inside, ready, after) = (store.path("inside"), store.path("ready"), store.path("after"));
    let command = format!(
        "trap 'echo got-int; exit 7' INT; {GROUPS} > '{}'; echo up > '{}'; while :; do sleep 0.05; done",
        inside.display(),
        ready.display()
    );
    let shell = format!(
        "{} lock '{}' tty -- sh -c \"{}\"; echo status=$?; {GROUPS} > '{}'",
        TENURE,
        store.url(),
        command.replace('"', "\\\"").replace('$', "\\$"),
        after.display()
    );
    let Some(mut cmd) = under_a_terminal(&shell) else { return };
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("script");
    wait_lines(&ready, 1, LIMIT);
    // ^C typed on the terminal: the terminal sends SIGINT to its foreground group.
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"\x03").expect("type ^C");
    stdin.flush().expect("flush");
    let out = wait_output(child, LIMIT);
    drop(stdin);
    let text = stdout(&out);
    assert!(text.contains("got-int") && text.contains("status=7"), "{text}");

    let groups = |p: &std::path::Path| -> (String, String) {
        let line = lines(p).first().cloned().unwrap_or_else(|| panic!("{} is empty", p.display()));
        let (pgrp, fg) = line.split_once(' ').expect("two fields");
        (pgrp.to_string(), fg.to_string())
    };
    let (cmd_group, fg_while_running) = groups(&inside);
    assert_eq!(cmd_group, fg_while_running, "the command's group was in the foreground");
    let (shell_group, fg_after) = groups(&after);
    assert_eq!(shell_group, fg_after, "the terminal was handed back");
    assert_ne!(cmd_group, shell_group, "the command ran in a process group of its own");
}

#[test]
fn on_a_terminal_the_waiting_line_names_the_holder_and_is_erased() {
    let store = FileStore::new();
    let shell = format!("{TENURE} lock '{}' busy --timeout 1500ms -- true; echo status=$?", store.url());
    let Some(mut cmd) = under_a_terminal(&shell) else { return };
    let ready = store.path("ready");
    let script = format!("echo up > '{}'; exec sleep 60", ready.display());
    let mut holder = lock(&store.url(), "busy", &["--label", "the-nightly-job"], &["sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("holder");
    wait_lines(&ready, 1, LIMIT);

    let out = run(cmd.stdin(Stdio::piped()), LIMIT);
    let _ = holder.kill();
    let _ = holder.wait();
    let text = stdout(&out);
    assert!(text.contains("waiting") && text.contains("the-nightly-job") && text.contains("busy"), "{text}");
    assert!(text.contains("\r\x1b[2K"), "the line is redrawn and erased: {text:?}");
    assert!(text.contains("status=75"), "{text}");
}

#[test]
fn without_a_terminal_waiting_prints_whole_lines_not_a_redrawn_one() {
    let store = FileStore::new();
    let ready = store.path("ready");
    let script = format!("echo up > '{}'; exec sleep 60", ready.display());
    let mut holder = lock(&store.url(), "busy", &[], &["sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("holder");
    wait_lines(&ready, 1, LIMIT);
    let out = run(&mut lock(&store.url(), "busy", &["--timeout", "500ms"], &["true"]), LIMIT);
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(out.status.code(), Some(75));
    let err = stderr(&out);
    assert!(!err.contains('\r') && !err.contains('\u{1b}'), "{err:?}");
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        matches!(lines.as_slice(), [wait, end] if wait.starts_with("tenure: waiting for lease busy") && end.contains("timed out")),
        "the wait's first line, then the timeout: {err}"
    );
}
