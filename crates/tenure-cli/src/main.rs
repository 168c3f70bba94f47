//! The `tenure` command.

// The guard needs a few system calls with no safe wrapper (pre_exec, signal
// dispositions, inherited descriptors): each is allowed where it is, with its SAFETY.
#![deny(unsafe_code)]

mod args;
#[cfg(feature = "bag")]
mod bag;
#[cfg(feature = "bench")]
mod bench;
mod durations;
mod exit;
mod generate;
mod guard;
mod lock;
#[cfg(feature = "server")]
mod serve;
mod status;
mod status_slots;
mod stores;
mod supervise;
mod tree;
mod waiting;
mod watch;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    let orphaned = std::env::args_os().nth(1).is_some_and(|a| a == guard::BREAK_ORPHANED);
    let parsed = if orphaned {
        // Started by the guard, which ignores these (they are `tenure`'s to
        // forward): this release may be stopped like any command.
        for sig in guard::GUARD_IGNORES {
            supervise::set_disposition(sig, false);
        }
        match guard::orphaned_break_args() {
            Ok(args) => Cli::try_parse_from(args),
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "tenure: {}: {e}", guard::BREAK_ORPHANED);
                return exit::code(exit::USAGE);
            }
        }
    } else {
        Cli::try_parse()
    };
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            if let Some(hint) = args::missing_separator(&e, std::env::args_os()) {
                let _ = writeln!(std::io::stderr(), "tenure: {hint}");
                return exit::code(exit::USAGE);
            }
            let usage_error = e.use_stderr();
            let _ = e.print();
            return exit::code(if usage_error { exit::USAGE } else { 0 });
        }
    };
    init_logging(cli.verbose);
    // The guard must not start a runtime: it is a small synchronous supervisor.
    match &cli.command {
        Command::Guard(args) => return guard::guard_main(args),
        Command::Completions(args) => return generate::completions(args),
        Command::Man(args) => return generate::man(args),
        _ => {}
    }
    // The server uses every core and the benchmark as many as it is told;
    // everything else is one thread, which also keeps the child process of `lock`
    // tied to a thread that lives as long as the process.
    let mut builder = match &cli.command {
        #[cfg(feature = "bench")]
        Command::Bench(_) => tokio::runtime::Builder::new_multi_thread(),
        #[cfg(feature = "server")]
        Command::Serve(_) => tokio::runtime::Builder::new_multi_thread(),
        _ => tokio::runtime::Builder::new_current_thread(),
    };
    #[cfg(feature = "bench")]
    if let Command::Bench(args) = &cli.command {
        builder.worker_threads(args.threads.into());
    }
    let runtime = builder.enable_all().build();
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tenure: cannot start the async runtime: {e}");
            return exit::code(exit::INTERNAL);
        }
    };
    let result = runtime.block_on(run(cli.command, cli.verbose));
    // Dropping a runtime waits for its blocking threads, and one stuck in a system
    // call on a hung mount never returns: abandon them. What they would have
    // done no longer matters once `run` has decided the outcome.
    runtime.shutdown_background();
    match result {
        Ok(code) => code,
        Err(e) => {
            // One line, naming the store and lease; no backtrace for user errors.
            let _ = writeln!(std::io::stderr(), "tenure: {}", one_line(&e));
            exit::code(exit::code_for(&e))
        }
    }
}

async fn run(command: Command, verbose: u8) -> anyhow::Result<ExitCode> {
    match command {
        Command::Lock(args) => lock::flock::run(args, verbose).await,
        Command::Status(args) => status::status(args).await,
        Command::Break(args) => status::break_lease(args).await,
        Command::Watch(args) => watch::run(args).await,
        #[cfg(feature = "server")]
        Command::Serve(args) => serve::run(args).await,
        #[cfg(feature = "bag")]
        Command::Bag(args) => bag::run(args).await,
        #[cfg(feature = "bench")]
        Command::Bench(args) => bench::run(args).await,
        #[cfg(not(feature = "bench"))]
        Command::Bench(_) => Err(exit::Fail::usage(
            "this tenure was built without benchmarks: install it with \
             `cargo install --path crates/tenure-cli --features bench`",
        )
        .into()),
        Command::Guard(_) | Command::Completions(_) | Command::Man(_) => {
            unreachable!("handled before the runtime starts")
        }
    }
}

/// `context: cause: cause`, without repeating a cause already in the message.
pub(crate) fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("TENURE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colours only on a terminal: escape codes in a CI log or a file are noise.
    let ansi = rustix::termios::isatty(rustix::stdio::stderr()) && std::env::var_os("NO_COLOR").is_none();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(ansi)
        .try_init();
}
