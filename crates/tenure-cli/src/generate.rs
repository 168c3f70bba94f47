//! `tenure completions` and `tenure man`: shell completions and man pages,
//! generated from the clap definitions so that they never fall behind them.

use std::io::Write;
use std::process::ExitCode;

use clap::CommandFactory;

use crate::args::{Cli, CompletionsArgs, ManArgs};
use crate::exit;

/// Prints the completion script for `args.shell`.
pub(crate) fn completions(args: &CompletionsArgs) -> ExitCode {
    let mut cmd = without_hidden_subcommands(Cli::command());
    // Rendered in memory: clap_complete panics on a failed write (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "tenure", &mut script);
    print(&script)
}

/// `cmd` without its hidden subcommands (the internal `__guard`), which
/// clap_complete would otherwise offer; clap has no way to remove one, so the
/// top level is rebuilt around the visible ones.
fn without_hidden_subcommands(cmd: clap::Command) -> clap::Command {
    let visible: Vec<clap::Command> = cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned().collect();
    let mut top = clap::Command::new("tenure")
        .version(env!("CARGO_PKG_VERSION"))
        .args(cmd.get_arguments().cloned())
        .subcommands(visible)
        .subcommand_required(true)
        .propagate_version(cmd.is_propagate_version_set());
    if let Some(about) = cmd.get_about() {
        top = top.about(about.clone());
    }
    top
}

/// Prints tenure.1, or writes every page into `args.dir`.
pub(crate) fn man(args: &ManArgs) -> ExitCode {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    if let Some(dir) = &args.dir {
        return match write_pages(&cmd, dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "tenure: cannot write man pages to {}: {e}", dir.display());
                exit::code(exit::CANT_CREATE)
            }
        };
    }
    let mut page = Vec::new();
    match render_page(&cmd, &mut page) {
        Ok(()) => print(&page),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "tenure: cannot render the man page: {e}");
            exit::code(exit::INTERNAL)
        }
    }
}

/// Writes the page of `cmd` and of each visible subcommand, recursively, into `dir`.
fn write_pages(cmd: &clap::Command, dir: &std::path::Path) -> std::io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir)?;
    }
    let mut page = Vec::new();
    render_page(cmd, &mut page)?;
    let name = clap_mangen::Man::new(cmd.clone()).get_filename();
    std::fs::write(dir.join(name), page)
}

/// Exit codes every command shares; `tenure lock` and `tenure status` state their own.
const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "success"),
    ("64", "bad arguments, lease name, store URL or option"),
    ("65", "stored data is corrupt (reported, not repaired)"),
    ("69", "the store is unreachable, failing, or refused as unsafe"),
    ("70", "a bug in tenure"),
    ("73", "an output file cannot be created"),
    ("74", "writing the output failed"),
    ("75", "the lease is busy or the wait timed out; a break found the lease changed"),
];

/// Variables every command reads.
const ENVIRONMENT: &[(&str, &str)] = &[
    ("TENURE_LOG", "a tracing filter for the log on stderr (e.g. tenure=debug); -v and -vv set one"),
    ("NO_COLOR", "when set, the log on stderr is not coloured"),
];

/// One page: clap's name, description, options and subcommands, with a synopsis
/// that shows `--`, and the `after_help` text turned into EXAMPLES, EXIT STATUS and
/// ENVIRONMENT sections that the man reader fills to its width.
fn render_page(cmd: &clap::Command, w: &mut Vec<u8>) -> std::io::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(w)?;
    man.render_name_section(w)?;
    let usage = cmd.clone().render_usage().to_string();
    let usage = usage.trim().strip_prefix("Usage: ").unwrap_or(usage.trim());
    writeln!(w, ".SH SYNOPSIS\n.nf\n{}\n.fi", roff(usage))?;
    man.render_description_section(w)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(w)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(w)?;
    }
    let after = cmd.get_after_help().map(ToString::to_string).unwrap_or_default();
    let mut blocks = after_help_blocks(&after);
    let mut env: Vec<(String, String)> = Vec::new();
    let mut env_intro = String::new();
    if let Some(i) = blocks.iter().position(|b| b.section == "ENVIRONMENT") {
        let b = blocks.remove(i);
        env_intro = b.intro;
        env = b.entries;
    }
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        if let Some(var) = arg.get_env() {
            let long = arg.get_long().unwrap_or_default();
            env.push((var.to_string_lossy().into_owned(), format!("the default of --{long}")));
        }
    }
    env.extend(ENVIRONMENT.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    if let Some(i) = blocks.iter().position(|b| b.section == "EXAMPLES") {
        let b = blocks.remove(i);
        writeln!(w, ".SH EXAMPLES\n.nf")?;
        for line in &b.lines {
            writeln!(w, "{}", roff(line.strip_prefix("  ").unwrap_or(line)))?;
        }
        writeln!(w, ".fi")?;
    }
    match blocks.iter().position(|b| b.section == "EXIT STATUS") {
        Some(i) => {
            let b = blocks.remove(i);
            section(w, "EXIT STATUS", &b.intro, &b.entries)?;
        }
        None => {
            let entries: Vec<(String, String)> =
                EXIT_STATUS.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
            section(w, "EXIT STATUS", "", &entries)?;
        }
    }
    section(w, "ENVIRONMENT", &env_intro, &env)?;
    for b in blocks {
        section(w, &b.section, &b.intro, &b.entries)?;
    }
    man.render_version_section(w)
}

/// One paragraph of an `after_help` text: a heading line ("Exit status: …") and
/// its indented lines.
struct Block {
    section: String,
    intro: String,
    lines: Vec<String>,
    entries: Vec<(String, String)>,
}

/// Splits an `after_help` text into blocks. A line not indented starts a block;
/// an indented line `  TAG  text` starts an entry, a more indented one continues it.
fn after_help_blocks(text: &str) -> Vec<Block> {
    let mut blocks: Vec<Block> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(' ') {
            let (head, rest) = line.split_once(':').unwrap_or((line, ""));
            let lower = head.to_lowercase();
            let section = if lower.contains("exit status") {
                "EXIT STATUS".to_owned()
            } else if lower.starts_with("example") {
                "EXAMPLES".to_owned()
            } else if lower.contains("environment") {
                "ENVIRONMENT".to_owned()
            } else {
                head.to_uppercase()
            };
            let intro = if section == "ENVIRONMENT" { format!("{head}:") } else { rest.trim().to_owned() };
            blocks.push(Block { section, intro, lines: Vec::new(), entries: Vec::new() });
            continue;
        }
        let Some(block) = blocks.last_mut() else { continue };
        block.lines.push(line.to_owned());
        let body = line.trim_start();
        let indent = line.len() - body.len();
        match body.split_once("  ") {
            Some((tag, text)) if indent <= 2 => block.entries.push((tag.to_owned(), text.trim().to_owned())),
            _ if indent <= 2 => block.entries.push((body.to_owned(), String::new())),
            _ => match block.entries.last_mut() {
                Some((_, text)) => {
                    text.push(' ');
                    text.push_str(body);
                }
                None => {
                    block.intro.push(' ');
                    block.intro.push_str(body);
                }
            },
        }
    }
    blocks
}

/// A section of tagged paragraphs, filled by the reader to its width.
fn section(w: &mut Vec<u8>, name: &str, intro: &str, entries: &[(String, String)]) -> std::io::Result<()> {
    writeln!(w, ".SH \"{name}\"")?;
    if !intro.is_empty() {
        writeln!(w, "{}", roff(intro))?;
    }
    for (tag, text) in entries {
        writeln!(w, ".TP\n\\fB{}\\fR\n{}", roff(tag), roff(text))?;
    }
    Ok(())
}

/// `text` as one line of roff: backslashes and hyphens escaped, and no line
/// starting with a control character.
fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with('.') || escaped.starts_with('\'') { format!("\\&{escaped}") } else { escaped }
}

/// Writes `bytes` to stdout; a reader that went away (`| head`) is not an error.
fn print(bytes: &[u8]) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "tenure: cannot write to stdout: {e}");
            exit::code(exit::IO)
        }
    }
}
