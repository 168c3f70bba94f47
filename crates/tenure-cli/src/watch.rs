//! `tenure watch`: who holds a lease now, and one line per change until
//! interrupted — leader election seen from outside ([`tenure::Client::watch`]).
//!
//! Each line starts with the time it was seen (UTC) and the change: `current`
//! (the first line), `acquired`, `taken_over`, `released`, `broken`,
//! `expired`, `renewed_late`, `ended`, `corrupt`; `--json` prints one object
//! per line instead. Changes are pushed where the store watches keys (a
//! directory, etcd) and read every `--poll` elsewhere; a holder's expiry is
//! seen when its deadline passes. A store that fails on the first read ends
//! the watch (69 when unreachable, 64 for a bad URL or name); later failures
//! print one line and the watch goes on, until they have lasted `--give-up`
//! (exit 69). SIGINT, SIGTERM or a closed stdout end it with 0.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::Args;
use futures::StreamExt;
use tenure::{Change, Client, Holding, report};
use tenure_core::human_duration;

use crate::durations::duration;
use crate::exit::{self, Fail};
use crate::status::ignore_broken_pipe;
use crate::stores::StoreArgs;
use crate::waiting::short_holder;

/// `tenure watch`.
#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// The lease to watch.
    pub(crate) name: String,
    /// One JSON object per line instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// Longest time between two reads on a store that cannot push changes
    /// (object stores, the lease server): a change is seen this late at most.
    #[arg(long, value_parser = duration, default_value = "1s", value_name = "DURATION")]
    pub(crate) poll: Duration,
    /// Exit 69 once the store has failed this long without a good read.
    #[arg(long, value_parser = duration, default_value = "1m", value_name = "DURATION")]
    pub(crate) give_up: Duration,
}

pub(crate) async fn run(args: WatchArgs) -> Result<ExitCode> {
    if args.store.create {
        bail!(Fail::usage("watch never writes: --create is for lock, break and bag"));
    }
    if args.poll.is_zero() {
        bail!(Fail::usage("--poll must be longer than zero"));
    }
    crate::status::refuse_non_store(&args.store.url, args.store.op_timeout()).await?;
    let store = args.store.open_read_only().await?;
    let client = Client::new(store.clone());
    let mut changes = Box::pin(client.watch(&args.name, args.poll)?);
    let mut signals = Signals::new()?;
    let mut failing_since: Option<Instant> = None;
    let mut first = true;
    loop {
        let item = tokio::select! {
            item = changes.next() => item,
            () = signals.recv() => return Ok(ExitCode::SUCCESS),
        };
        let Some(item) = item else { return Ok(ExitCode::SUCCESS) };
        match item {
            Ok(held) => {
                if let Some(since) = failing_since.take() {
                    say(&format!("{}: reading again after {}", store.url(), human_duration(since.elapsed())));
                }
                first = false;
                let line = if args.json { json_line(&held) } else { text_line(&held) };
                let mut out = std::io::stdout().lock();
                match writeln!(out, "{line}").and_then(|()| out.flush()) {
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
                    r => ignore_broken_pipe(r)?,
                }
            }
            Err(e) if first => {
                return Err(anyhow::Error::new(e).context(format!("watching lease {}", args.name)));
            }
            Err(e) => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= args.give_up {
                    bail!(Fail::new(
                        exit::STORE,
                        format!("{}: the store has failed for {}: {e}", store.url(), human_duration(args.give_up))
                    ));
                }
                say(&format!("{}: reading lease {} failed, still watching: {e}", store.url(), args.name));
            }
        }
    }
}

/// One change as text: time, change, token and holder.
fn text_line(h: &Holding) -> String {
    let at = report::rfc3339_ms(h.seen_ms).unwrap_or_default();
    let change = h.change.as_str();
    let about = match (&h.grant, h.change) {
        (Some(g), _) => {
            let mut s = format!("token {} {} ({})", g.token, short_holder(&g.holder), g.mode);
            if let Some(p) = &h.ended
                && let Some(b) = &p.broken
            {
                s.push_str(&format!(", {}", crate::status::broken_by(b)));
            }
            if matches!(h.change, Change::Acquired | Change::TakenOver | Change::RenewedLate) {
                s.push_str(&format!(
                    ", expires in {} unless renewed",
                    human_duration(Duration::from_millis(g.expires_in_ms))
                ));
            }
            s
        }
        (None, Change::Current) => now_held(h),
        (None, Change::Corrupt) => {
            format!("the record cannot be read: {}", h.state.corrupt.as_deref().unwrap_or("unknown"))
        }
        (None, _) => match (&h.token, &h.ended) {
            (Some(t), Some(p)) => format!(
                "token {t}{} (taken and ended between two reads)",
                p.holder.as_deref().map(|x| format!(" {}", short_holder(x))).unwrap_or_default()
            ),
            (Some(t), None) => format!("token {t} (taken and ended between two reads)"),
            _ => String::new(),
        },
    };
    format!("{at} {change:<12} {} {about}", h.state.name)
}

/// Who holds it, for the first line.
fn now_held(h: &Holding) -> String {
    let s = &h.state;
    if let Some(c) = &s.corrupt {
        return format!("blocked by an unreadable record: {c}");
    }
    match s.holders.as_slice() {
        [] if !s.expired.is_empty() => format!("free: expired (token {}), not taken over yet", s.expired[0].token),
        [] => "free".to_string(),
        hs => hs
            .iter()
            .map(|g| {
                format!(
                    "held: token {} {} ({}, expires in {} unless renewed)",
                    g.token,
                    short_holder(&g.holder),
                    g.mode,
                    human_duration(Duration::from_millis(g.expires_in_ms))
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// One change as a JSON object on one line.
fn json_line(h: &Holding) -> String {
    let v = serde_json::json!({
        "event": h.change.as_str(),
        "lease": h.state.name.as_str(),
        "seen_ms": h.seen_ms,
        "seen_at": report::rfc3339_ms(h.seen_ms),
        "token": h.token,
        "grant": h.grant,
        "ended": h.ended,
        "holders": h.state.holders,
        "expired": h.state.expired,
        "last_token": h.state.last_token,
        "corrupt": h.state.corrupt,
    });
    v.to_string()
}

fn say(message: &str) {
    let _ = writeln!(std::io::stderr(), "tenure: {message}");
}

/// SIGINT and SIGTERM: the end of a watch, not a failure.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self { int: signal(SignalKind::interrupt())?, term: signal(SignalKind::terminate())? })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
    }
}
