//! `tenure status` and `tenure break`.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, bail};
use serde::Serialize;
use tenure::{Clock, HolderView, LeaseName, LeaseState, LeaseStore, SystemClock, human_duration};

use crate::args::{BreakArgs, StatusArgs};
use crate::exit::{self, Fail};

#[derive(Serialize)]
struct StatusJson<'a> {
    name: &'a str,
    state: &'static str,
    holders: &'a [HolderView],
    expired: &'a [HolderView],
    last_token: u64,
    watermark_ms: Option<u64>,
    last: Option<&'a tenure::Predecessor>,
    corrupt: Option<&'a str>,
    modified_ms: Option<u64>,
}

/// A lease that could not be inspected, in `--json`.
#[derive(Serialize)]
struct ErrorJson<'a> {
    name: &'a str,
    state: &'static str,
    error: &'a str,
}

fn state_word(s: &LeaseState) -> &'static str {
    if s.corrupt.is_some() {
        "corrupt"
    } else if !s.holders.is_empty() {
        "held"
    } else if !s.expired.is_empty() {
        "expired"
    } else {
        "free"
    }
}

/// One lease as `status` shows it: its state, or why it could not be read. One
/// unreadable lease never hides the others.
enum Found {
    State(LeaseState),
    Failed(LeaseName, tenure::Error),
}

/// The leases to show: `name` itself if it exists, and every lease under it.
async fn collect(store: &dyn LeaseStore, name: Option<&str>) -> Result<Vec<Found>> {
    let prefix = match name {
        Some(n) => LeaseName::new(n)?.to_string(),
        None => String::new(),
    };
    let mut names = store.list(&prefix).await?;
    if let Some(n) = name
        && !names.iter().any(|x| x.as_str() == n)
    {
        names.insert(0, LeaseName::new(n)?);
    }
    let mut found = Vec::with_capacity(names.len());
    for n in names {
        match store.inspect(&n).await {
            Ok(state) => found.push(Found::State(state)),
            Err(e) => found.push(Found::Failed(n, e)),
        }
    }
    // Asked about one lease alone, its error is the answer (and the exit code).
    if let [Found::Failed(n, _)] = found.as_slice()
        && Some(n.as_str()) == name
        && let Some(Found::Failed(n, e)) = found.pop()
    {
        return Err(anyhow::Error::new(e).context(format!("inspecting lease {n}")));
    }
    Ok(found)
}

pub(crate) async fn status(args: StatusArgs) -> Result<ExitCode> {
    let store = args.store.open_read_only().await?;
    let found = collect(&*store, args.name.as_deref()).await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let rows: Vec<serde_json::Value> = found
            .iter()
            .map(|f| match f {
                Found::State(s) => serde_json::to_value(StatusJson {
                    name: s.name.as_str(),
                    state: state_word(s),
                    holders: &s.holders,
                    expired: &s.expired,
                    last_token: s.last_token,
                    watermark_ms: s.watermark_ms,
                    last: s.last.as_ref(),
                    corrupt: s.corrupt.as_deref(),
                    modified_ms: s.modified_ms,
                }),
                Found::Failed(name, error) => {
                    serde_json::to_value(ErrorJson { name: name.as_str(), state: "error", error: &error.to_string() })
                }
            })
            .collect::<Result<_, _>>()?;
        ignore_broken_pipe(writeln!(out, "{}", serde_json::to_string_pretty(&rows)?))?;
        return Ok(ExitCode::SUCCESS);
    }
    if found.is_empty() {
        // A mistyped directory reads as an empty store: say so.
        let url = &args.store.url;
        let is_file = url.starts_with("file://") || !url.contains("://");
        let missing = is_file && tenure::store::file::open(url).is_ok_and(|b| !b.root().exists());
        let note = if missing { " (the directory does not exist)" } else { "" };
        ignore_broken_pipe(writeln!(out, "no leases in {}{note}", store.url()))?;
        return Ok(ExitCode::SUCCESS);
    }
    let now = SystemClock::new().wall_ms();
    let rows: Vec<[String; 6]> = found
        .iter()
        .map(|f| match f {
            Found::State(s) => row(s, now),
            Found::Failed(name, e) => {
                [name.to_string(), "error".into(), "-".into(), "-".into(), format!("cannot read: {e}"), "-".into()]
            }
        })
        .collect();
    let header = ["LEASE", "STATE", "MODE", "TOKEN", "HOLDER", "EXPIRES"].map(String::from);
    let mut widths = [0usize; 6];
    for r in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for r in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = r.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        ignore_broken_pipe(writeln!(out, "{}", line.join("  ").trim_end()))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn row(s: &LeaseState, now_ms: u64) -> [String; 6] {
    let name = s.name.to_string();
    let state = state_word(s).to_string();
    if let Some(c) = &s.corrupt {
        return [name, state, "-".into(), "-".into(), format!("unreadable record: {c}"), "-".into()];
    }
    let live = if s.holders.is_empty() { &s.expired } else { &s.holders };
    match live.as_slice() {
        [] => {
            let last = s.last.as_ref().map_or_else(
                || "never held".to_string(),
                |l| {
                    format!(
                        "last {} {} ago",
                        l.how,
                        human_duration(Duration::from_millis(now_ms.saturating_sub(l.at_ms)))
                    )
                },
            );
            [name, state, "-".into(), s.last_token.to_string(), last, "-".into()]
        }
        holders => {
            let mode = holders[0].mode.to_string();
            let tokens: Vec<String> = holders.iter().map(|h| h.token.to_string()).collect();
            let who = match holders {
                [one] => one.holder.to_string(),
                many => format!("{} holders", many.len()),
            };
            let soonest = holders.iter().map(|h| h.expires_in_ms).min().unwrap_or(0);
            let expires = if s.holders.is_empty() {
                "now (expired)".to_string()
            } else {
                format!("in {}", human_duration(Duration::from_millis(soonest)))
            };
            [name, state, mode, tokens.join(","), who, expires]
        }
    }
}

pub(crate) async fn break_lease(args: BreakArgs) -> Result<ExitCode> {
    let store = args.store.open().await?;
    let name = LeaseName::new(&args.name)?;
    let seen = store.inspect(&name).await?;
    let targets: Vec<&HolderView> =
        seen.holders.iter().chain(&seen.expired).filter(|h| args.token.is_none_or(|t| t == h.token)).collect();
    if targets.is_empty() && seen.corrupt.is_none() {
        let what = match args.token {
            Some(t) => format!("has no grant with token {t}"),
            None => "is not held".to_string(),
        };
        bail!(Fail::new(exit::TIMEOUT, format!("{}: lease {name:?} {what}; nothing was broken", store.url())));
    }
    store.break_lease(&seen, args.token).await?;
    let mut out = std::io::stdout().lock();
    if let Some(c) = &seen.corrupt {
        ignore_broken_pipe(writeln!(out, "replaced the unreadable record of {name} ({c})"))?;
    }
    for h in targets {
        ignore_broken_pipe(writeln!(
            out,
            "broke {name}: {} grant with token {} held by {}",
            h.mode, h.token, h.holder
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Writing to a closed pipe (`tenure status | head`) is not an error.
pub(crate) fn ignore_broken_pipe(r: std::io::Result<()>) -> std::io::Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}
