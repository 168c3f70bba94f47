//! `tenure completions` and `tenure man`, run as a user would.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::{run, tenure};

const LIMIT: Duration = Duration::from_secs(30);

fn stdout_of(args: &[&str]) -> String {
    let out = run(tenure().args(args), LIMIT);
    assert!(out.status.success(), "tenure {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

#[test]
fn bash_completions_name_every_visible_subcommand() {
    let script = stdout_of(&["completions", "bash"]);
    assert!(script.contains("complete -F"), "a bash completion script: {script}");
    for sub in ["lock", "status", "break", "serve", "bag", "bench", "completions", "man"] {
        assert!(script.contains(sub), "bash completions lack {sub}");
    }
    assert!(script.contains("--ttl") && script.contains("--shared"), "options of `lock` are completed");
}

/// The script loaded into a real bash completes `tenure st` and `tenure lock --sh`.
#[test]
fn bash_completes_subcommands_and_options() {
    if std::process::Command::new("bash").arg("--version").output().is_err() {
        eprintln!("skipped: bash is not installed");
        return;
    }
    let script = stdout_of(&["completions", "bash"]);
    let probe = format!(
        "{script}\n\
         COMP_WORDS=(tenure st); COMP_CWORD=1; _tenure tenure st tenure; echo \"${{COMPREPLY[*]}}\"\n\
         COMP_WORDS=(tenure lock --sh); COMP_CWORD=2; _tenure tenure --sh lock; echo \"${{COMPREPLY[*]}}\"\n"
    );
    let out = run(std::process::Command::new("bash").args(["--norc", "-c", &probe]), LIMIT);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "status\n--shared\n");
}

#[test]
fn completions_exist_for_every_shell_and_unknown_shells_are_usage_errors() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = stdout_of(&["completions", shell]);
        assert!(script.contains("lock") && script.contains("status"), "{shell}: {script}");
        assert!(!script.contains("__guard"), "{shell}: the internal guard is not offered");
    }
    let out = run(tenure().args(["completions", "tcsh"]), LIMIT);
    assert_eq!(out.status.code(), Some(64), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn man_page_is_roff_with_a_title_and_the_subcommands() {
    let page = stdout_of(&["man"]);
    // clap_mangen defines the apostrophe string `Aq` (two lines) before the title.
    let first = page.lines().find(|l| !l.starts_with(".ie ") && !l.starts_with(".el ")).expect("a line");
    assert!(first.starts_with(".TH tenure 1"), "{first}");
    for sub in ["lock", "status", "break", "completions", "man"] {
        assert!(page.contains(&format!("tenure\\-{sub}(1)")), "{sub} is listed in\n{page}");
    }
    assert!(!page.contains("__guard"), "the internal guard is hidden");
}

#[test]
fn man_dir_writes_one_page_per_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_str().expect("UTF-8 temp path");
    stdout_of(&["man", "--dir", path]);
    for page in ["tenure.1", "tenure-lock.1", "tenure-status.1", "tenure-bag.1"] {
        let text = std::fs::read_to_string(dir.path().join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.contains(".TH"), "{page}: {text}");
    }
    assert!(!dir.path().join("tenure-__guard.1").exists());
    let lock = std::fs::read_to_string(dir.path().join("tenure-lock.1")).expect("tenure-lock.1");
    assert!(lock.contains("ttl"), "the options of `lock` are documented: {lock}");
    assert!(lock.contains(".SH SYNOPSIS\n.nf\ntenure lock [OPTIONS] <STORE> <NAME> \\-\\- <COMMAND>"), "{lock}");
    for section in [".SH EXAMPLES", ".SH \"EXIT STATUS\"", ".SH \"ENVIRONMENT\""] {
        assert!(lock.contains(section), "tenure-lock.1 has {section}: {lock}");
    }
    assert!(lock.contains("\\fB76\\fR") && lock.contains("\\fBTENURE_TOKEN\\fR"), "{lock}");
    for entry in std::fs::read_dir(dir.path()).expect("read_dir") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("page");
        for section in [".SH SYNOPSIS", ".SH \"EXIT STATUS\"", ".SH \"ENVIRONMENT\""] {
            assert!(text.contains(section), "{} has {section}", path.display());
        }
    }

    let out = run(tenure().args(["man", "--dir"]).arg(dir.path().join("missing")), LIMIT);
    assert_eq!(out.status.code(), Some(73), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write man pages"));
}

#[test]
fn a_reader_that_goes_away_is_not_a_crash() {
    // `tenure completions bash | head -c1`: stdout closed early.
    let mut child =
        tenure().args(["completions", "bash"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    drop(child.stdout.take());
    let out = common::wait_output(child, LIMIT);
    assert!(out.status.success(), "{:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}
