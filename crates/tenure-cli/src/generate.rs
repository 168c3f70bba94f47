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
    let cmd = Cli::command();
    if let Some(dir) = &args.dir {
        return match clap_mangen::generate_to(cmd, dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "tenure: cannot write man pages to {}: {e}", dir.display());
                exit::code(exit::CANT_CREATE)
            }
        };
    }
    let mut page = Vec::new();
    match clap_mangen::Man::new(cmd).render(&mut page) {
        Ok(()) => print(&page),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "tenure: cannot render the man page: {e}");
            exit::code(exit::INTERNAL)
        }
    }
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
