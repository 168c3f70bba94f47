//! `tenure status` and `tenure break`.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::Args;
use futures::StreamExt;
use tenure::{Clock, HolderView, LeaseName, LeaseState, LeaseStore, SystemClock, report};
use tenure_core::human_duration;

use crate::exit::{self, Fail};
use crate::stores::StoreArgs;
use crate::waiting::{held_for, short_holder, short_holder_without_label};

/// `tenure status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// One lease, or a prefix of names; all leases if omitted.
    pub(crate) name: Option<String>,
    /// Also show leases nobody holds (released or never taken).
    #[arg(long)]
    pub(crate) all: bool,
    /// Print JSON instead of a table: the versioned document the README
    /// describes, with every lease, held or not.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `tenure break`.
#[derive(Debug, Args)]
pub(crate) struct BreakArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// The lease to break.
    pub(crate) name: String,
    /// Only break the grant with this fencing token (and only if it is still there).
    #[arg(long)]
    pub(crate) token: Option<u64>,
    /// Why, kept in the record with who broke it (user, host, pid): `status`
    /// and the next holder show it.
    #[arg(long, value_parser = reason, value_name = "TEXT")]
    pub(crate) reason: Option<String>,
}

/// A break reason: at most [`tenure::limits::MAX_REASON_BYTES`] bytes of text
/// on one line.
fn reason(s: &str) -> Result<String, String> {
    let max = tenure::limits::MAX_REASON_BYTES;
    if s.len() > max {
        return Err(format!("{} bytes is too long for a reason (at most {max})", s.len()));
    }
    if s.chars().any(char::is_control) {
        return Err("a reason is one line of text, without control characters".into());
    }
    Ok(s.to_string())
}

fn state_word(s: &LeaseState) -> &'static str {
    tenure::report::state_word(s.corrupt.is_some(), !s.holders.is_empty(), !s.expired.is_empty())
}

/// One lease as `status` shows it: its state, or why it could not be read. One
/// unreadable lease never hides the others.
enum Found {
    /// Its state, and how many wait in line for it (if the store keeps a line).
    State(LeaseState, Option<usize>),
    Failed(LeaseName, tenure::Error),
}

/// Inspections `status` runs at once.
const INSPECTIONS: usize = 8;

/// One lease's state, and how many wait in line for it.
async fn inspect(store: &dyn LeaseStore, n: LeaseName) -> Found {
    match store.inspect(&n).await {
        Ok(state) => {
            // Only a taken lease has a line (a free one is taken by the first to
            // look); the line is extra: a store that cannot show it still shows
            // the lease.
            let taken = !state.holders.is_empty() || !state.expired.is_empty();
            let waiting = if taken { store.waiting(&n).await.unwrap_or_default() } else { None };
            Found::State(state, waiting)
        }
        Err(e) => Found::Failed(n, e),
    }
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
    // A few inspections at a time, in the listing's order: enough to hide a
    // network store's latency, few enough that any number of leases costs a
    // fixed number of open files (or connections).
    let mut found: Vec<Found> =
        futures::stream::iter(names).map(|n| inspect(store, n)).buffered(INSPECTIONS).collect().await;
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
    if args.store.create {
        bail!(Fail::usage("status never writes: --create is for lock, break and bag"));
    }
    refuse_non_store(&args.store.url, args.store.op_timeout()).await?;
    let store = args.store.open_read_only().await?;
    let found = collect(&*store, args.name.as_deref()).await?;
    if args.name.is_none() {
        refuse_foreign_dir(&args.store.url, args.store.op_timeout(), &found).await?;
    }
    // Asked about one lease: exit 0 if it is busy (held, or blocked by an
    // unreadable record), 1 if it can be taken (free, expired or absent).
    let asked = args.name.as_deref().and_then(|n| {
        found.iter().find_map(|f| match f {
            Found::State(s, _) if s.name.as_str() == n => Some(s),
            _ => None,
        })
    });
    let slots = crate::status_slots::summarize(found.iter().filter_map(|f| match f {
        Found::State(s, _) => Some(s),
        Found::Failed(..) => None,
    }));
    // A name with slots (`tenure lock --slots`) is held while any slot is.
    let asked_slots = args.name.as_deref().and_then(|n| slots.iter().find(|x| x.base == n));
    let code = match asked {
        _ if asked_slots.is_some_and(|x| x.held > 0) => ExitCode::SUCCESS,
        Some(s) if !s.holders.is_empty() || s.corrupt.is_some() => ExitCode::SUCCESS,
        Some(_) => exit::code(NOT_HELD),
        None => ExitCode::SUCCESS,
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        let now = SystemClock::new().wall_ms();
        let rows: Vec<serde_json::Value> = found
            .iter()
            .map(|f| match f {
                Found::State(s, waiting) => serde_json::to_value(report::LeaseJson::of(s, now).with_waiting(*waiting)),
                Found::Failed(name, error) => {
                    serde_json::to_value(report::LeaseErrorJson::new(name.as_str(), &error.to_string()))
                }
            })
            .collect::<Result<_, _>>()?;
        let doc = serde_json::json!({
            "schema_version": report::SCHEMA_VERSION,
            "store": store.url(),
            "now_ms": now,
            "now_at": report::rfc3339_ms(now),
            "leases": rows,
        });
        ignore_broken_pipe(writeln!(out, "{}", serde_json::to_string_pretty(&doc)?))?;
        return Ok(code);
    }
    let url = store.url();
    // A name that was never written: say so, rather than show a made-up row.
    let absent = |s: &LeaseState| s.version.is_none() && s.corrupt.is_none() && s.last_token == 0;
    if let Some(s) = asked
        && absent(s)
        && asked_slots.is_none()
    {
        ignore_broken_pipe(writeln!(out, "no lease {} in {url} (it has never been taken)", s.name))?;
    }
    let shown: Vec<&Found> = found
        .iter()
        .filter(|f| match f {
            Found::State(s, _) if asked.is_some_and(|a| a.name == s.name) => !absent(s),
            Found::State(s, waiting) => args.all || state_word(s) != "free" || waiting.is_some_and(|n| n > 0),
            Found::Failed(..) => true,
        })
        .collect();
    // Names with slots, shown like leases: held, asked for, or with --all.
    let slots: Vec<&crate::status_slots::Slots> =
        slots.iter().filter(|x| args.all || x.held > 0 || args.name.as_deref() == Some(x.base.as_str())).collect();
    if shown.is_empty() && slots.is_empty() {
        if asked.is_some() {
            return Ok(code);
        }
        let line = match found.len() {
            0 => format!("no leases in {url}"),
            n => format!("no held leases in {url} ({n} not held; --all shows them)"),
        };
        ignore_broken_pipe(writeln!(out, "{line}"))?;
        return Ok(code);
    }
    let now = SystemClock::new().wall_ms();
    // A column for the lines only when someone waits in one.
    let lines = shown.iter().any(|f| matches!(f, Found::State(_, Some(n)) if *n > 0));
    let mut rows: Vec<Vec<String>> = shown
        .iter()
        .map(|f| {
            let (r, waiting) = match f {
                Found::State(s, waiting) => (row(s, now), waiting.map_or_else(|| "-".to_string(), |n| n.to_string())),
                Found::Failed(name, e) => {
                    let mut r =
                        ["-".to_string(), "-".into(), "-".into(), "-".into(), "-".into(), "-".into(), "-".into()];
                    r[0] = name.to_string();
                    r[1] = "error".into();
                    r[4] = format!("cannot read: {e}");
                    (r, "-".to_string())
                }
            };
            if lines {
                // After HOLDER: who holds it, then who waits for it.
                let mut v = r.to_vec();
                v.insert(5, waiting);
                return v;
            }
            r.to_vec()
        })
        .collect();
    // Each name with slots: `k/N slots`, above its slots' rows.
    for x in slots {
        let mut r = crate::status_slots::row(x).to_vec();
        if lines {
            r.insert(5, "-".into());
        }
        let first = format!("{}/{}/", x.base, tenure_core::SLOTS_SEGMENT);
        let at = rows.iter().position(|r| r[0].starts_with(&first)).unwrap_or(rows.len());
        rows.insert(at, r);
    }
    let mut header: Vec<String> =
        ["LEASE", "STATE", "MODE", "TOKEN", "HOLDER", "HELD", "EXPIRES"].map(String::from).to_vec();
    if lines {
        header.insert(5, "WAITING".into());
    }
    let mut widths = vec![0usize; header.len()];
    for r in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for r in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        ignore_broken_pipe(writeln!(out, "{}", line.join("  ").trim_end()))?;
    }
    Ok(code)
}

/// `status STORE NAME`'s exit code when NAME is not held.
const NOT_HELD: u8 = 1;

/// Refuses a directory store that does not exist (a mount that is not there,
/// or a typo) or is a regular file (or anything but a directory): it holds no
/// leases, and the user most likely swapped arguments.
pub(crate) async fn refuse_non_store(url: &str, limit: Duration) -> Result<()> {
    let Some(root) = dir_store(url) else { return Ok(()) };
    let path = root.root().display().to_string();
    match look(limit, move || root.root().metadata()).await {
        Some(Ok(m)) if !m.is_dir() => bail!(Fail::usage(format!(
            "{url} is not a tenure store: it is a file, and a directory store is a directory \
             (tenure status STORE [NAME])"
        ))),
        Some(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => bail!(Fail::usage(format!(
            "{url} is not a tenure store: the directory {path} does not exist (a file system that is not \
             mounted, or a typo?)"
        ))),
        _ => Ok(()),
    }
}

/// Refuses a directory that holds things but no lease: the wrong directory
/// (`/usr/share`), whose every odd entry would otherwise be a row of its own.
/// It is told by its listing: a store's lease directories each hold a record
/// (`~NNNNNNNNNNNNNNNNNNNN`), so a listing where not one lease has a record,
/// and every entry shown is one tenure would not have written (a link, a
/// file where a lease directory belongs), is no store — unless the directory
/// is empty: a store nobody has used yet. An entry that could not be read for
/// another reason (permissions, I/O) leaves the question open: rows as usual.
async fn refuse_foreign_dir(url: &str, limit: Duration, found: &[Found]) -> Result<()> {
    let Some(root) = dir_store(url) else { return Ok(()) };
    let foreign = |f: &Found| match f {
        Found::State(s, _) => s.version.is_none() && s.corrupt.is_none() && s.last_token == 0,
        Found::Failed(_, e) => matches!(e, tenure::Error::Corrupt { .. }),
    };
    if !found.iter().all(foreign) {
        return Ok(());
    }
    let path = root.root().display().to_string();
    let counted = look(limit, move || std::fs::read_dir(root.root()).map(|entries| entries.take(1000).count())).await;
    let count = match counted {
        Some(Ok(0)) | Some(Err(_)) | None => return Ok(()),
        Some(Ok(1000)) => "1000 or more entries".to_string(),
        Some(Ok(1)) => "one entry".to_string(),
        Some(Ok(n)) => format!("{n} entries"),
    };
    bail!(Fail::usage(format!(
        "{path} is not a tenure store: it holds {count} and not one lease record (a lease is a directory \
         holding ~NNNNNNNNNNNNNNNNNNNN records); the wrong directory?"
    )))
}

/// Runs `f`, a look at a directory store outside the store's own operations, on
/// a thread of its own that is abandoned after `limit`: the store may be a hung
/// mount, and `status` must still end at the store's deadline.
async fn look<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    tokio::time::timeout(limit, rx).await.ok()?.ok()
}

/// The directory store `url` names, if it names one.
fn dir_store(url: &str) -> Option<tenure::file::FileBackend> {
    tenure::file::DirUrl::parse(url, &Default::default()).ok().map(|d| tenure::file::FileBackend::from_dir_url(&d))
}

fn row(s: &LeaseState, now_ms: u64) -> [String; 7] {
    let name = s.name.to_string();
    let state = state_word(s).to_string();
    let none = || "-".to_string();
    if let Some(c) = &s.corrupt {
        return [name, state, none(), none(), format!("unreadable record: {c}"), none(), none()];
    }
    let live = if s.holders.is_empty() { &s.expired } else { &s.holders };
    match live.as_slice() {
        [] => {
            let last = s.last.as_ref().map_or_else(
                || "never held".to_string(),
                |l| {
                    let ago = human_duration(Duration::from_millis(now_ms.saturating_sub(l.at_ms)));
                    match &l.broken {
                        Some(b) => format!("last {} {ago} ago {}", l.how, broken_by(b)),
                        None => format!("last {} {ago} ago", l.how),
                    }
                },
            );
            [name, state, none(), s.last_token.to_string(), last, none(), none()]
        }
        holders => {
            let mode = holders[0].mode.to_string();
            let tokens: Vec<String> = holders.iter().map(|h| h.token.to_string()).collect();
            let who = match holders {
                [one] => short_holder(&one.holder),
                many => format!("{} holders", many.len()),
            };
            // The longest-held grant: how long the lease has been busy.
            let held = holders.iter().filter_map(|h| h.acquired_ms).min().and_then(|acquired| {
                holders.iter().find(|h| h.acquired_ms == Some(acquired)).and_then(|h| held_for(h, now_ms))
            });
            let soonest = holders.iter().map(|h| h.expires_in_ms).min().unwrap_or(0);
            let expires = if s.holders.is_empty() {
                "now (expired)".to_string()
            } else {
                format!("in {}", human_duration(Duration::from_millis(soonest)))
            };
            [name, state, mode, tokens.join(","), who, held.unwrap_or_else(none), expires]
        }
    }
}

pub(crate) async fn break_lease(args: BreakArgs) -> Result<ExitCode> {
    refuse_non_store(&args.store.url, args.store.op_timeout()).await?;
    let store = args.store.open().await?;
    let name = LeaseName::new(&args.name)?;
    let seen = store.inspect(&name).await?;
    let targets: Vec<HolderView> =
        seen.holders.iter().chain(&seen.expired).filter(|h| args.token.is_none_or(|t| t == h.token)).cloned().collect();
    // An unreadable record is replaced by a break of the lease, never by a
    // break of one token (it cannot show whose it is).
    if targets.is_empty() && (seen.corrupt.is_none() || args.token.is_some()) {
        let what = match (args.token, &seen.corrupt) {
            (Some(t), Some(damage)) => format!(
                "has an unreadable record ({damage}), which cannot show whether token {t} holds it; \
                 break the lease without --token to replace it"
            ),
            (Some(t), None) => format!("has no grant with token {t}"),
            (None, _) => "is not held".to_string(),
        };
        bail!(Fail::new(exit::TIMEOUT, format!("{}: lease {name:?} {what}; nothing was broken", store.url())));
    }
    let note = tenure::BreakNote { by: std::sync::Arc::new(tenure::Holder::current()), reason: args.reason };
    // A holder that renews between the look and the break changes nothing
    // about what is broken: the break looks again (see `break_as_seen`).
    let seen = tenure::store::break_as_seen(&*store, seen, args.token, Some(&note)).await?;
    let mut out = std::io::stdout().lock();
    if let Some(c) = seen.corrupt.as_ref().filter(|_| args.token.is_none()) {
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

/// Who broke a grant and why, for people: `by alice@ci-7 pid 42: "stuck"`.
pub(crate) fn broken_by(b: &tenure::BreakNote) -> String {
    let who = format!("by {}", short_holder_without_label(&b.by, false));
    match &b.reason {
        Some(r) => format!("{who}: {:?}", r),
        None => who,
    }
}

/// Writing to a closed pipe (`tenure status | head`) is not an error.
pub(crate) fn ignore_broken_pipe(r: std::io::Result<()>) -> std::io::Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}
