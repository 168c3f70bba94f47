//! What `tenure lock` says while it waits for a busy lease.
//!
//! On a terminal (stderr is a tty) one status line is redrawn in place after each
//! poll, cut to the terminal's width: the lease, who holds it, how long they have
//! held it and when it could be taken over, then how long we have waited. It is
//! erased when the wait ends, so the command's output starts on a clean line.
//!
//! Elsewhere (a CI log, cron, a file) nothing can be redrawn, so it prints whole
//! lines: one when the wait starts, a reminder after 30 s, then at doubling
//! intervals up to every 5 minutes, and "acquired … after …" when the wait ends
//! with the lease. A change of holder is logged at `info` (`-v`).

use std::io::Write;
use std::time::{Duration, Instant};

use tenure::{Busy, Clock, Holder, HolderView, SystemClock};
use tenure_core::human_duration;

/// The first reminder off a terminal comes this long after the wait starts.
const FIRST_REMINDER: Duration = Duration::from_secs(30);
/// Reminders double up to this interval.
const MAX_REMINDER: Duration = Duration::from_secs(300);
/// The longest label shown in a short holder.
const SHORT_LABEL: usize = 24;

/// The waiting line for one lease.
#[derive(Debug)]
pub(crate) struct WaitLine {
    tty: bool,
    shown: bool,
    started: Instant,
    store: String,
    name: String,
    last_holders: Option<String>,
    /// Off a terminal: when the next reminder is due (since `started`), and the
    /// interval after it. `None` until the first line is printed.
    reminder: Option<(Duration, Duration)>,
}

impl WaitLine {
    pub(crate) fn new(store: &str, name: &str) -> Self {
        Self {
            tty: rustix::termios::isatty(rustix::stdio::stderr()),
            shown: false,
            started: Instant::now(),
            store: store.to_string(),
            name: name.to_string(),
            last_holders: None,
            reminder: None,
        }
    }

    /// Shows that the lease is busy, as `busy` says.
    pub(crate) fn update(&mut self, busy: &Busy) {
        let waited = self.started.elapsed();
        let now_ms = SystemClock::new().wall_ms();
        if self.tty {
            let width = rustix::termios::tcgetwinsize(rustix::stdio::stderr())
                .map(|w| usize::from(w.ws_col))
                .ok()
                .filter(|&w| w > 10)
                .unwrap_or(80);
            // One character short of the width: a full line would wrap, and the
            // carriage return would then redraw only its last row.
            let text = tty_line(&self.name, &self.store, busy, waited, now_ms, width - 1);
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K{text}");
            let _ = err.flush();
            self.shown = true;
            return;
        }
        let holders: Vec<String> = busy.holders.iter().map(|h| format!("{}:{}", h.holder.nonce, h.token)).collect();
        let key = format!("{holders:?} {:?} {}", busy.corrupt, busy.failure.is_some());
        if self.last_holders.as_ref() != Some(&key) {
            tracing::info!("waiting for lease {} in {}: held by {}", self.name, self.store, busy.describe());
            self.last_holders = Some(key);
        }
        let line = match self.reminder {
            None => {
                self.reminder = Some((FIRST_REMINDER, FIRST_REMINDER));
                format!("waiting for lease {} in {}: {}", self.name, self.store, held_by(busy, now_ms))
            }
            Some((due, every)) if waited >= due => {
                let next = next_reminder(every);
                // Past several due times at once (a slow store): the next one
                // counts from now, not from the missed ones.
                self.reminder = Some((waited.saturating_add(next), next));
                format!(
                    "still waiting for lease {} after {}: {}",
                    self.name,
                    whole_seconds(waited),
                    held_by(busy, now_ms)
                )
            }
            Some(_) => return,
        };
        let _ = writeln!(std::io::stderr(), "tenure: {line}");
    }

    /// The wait ended with the lease: erases the line on a terminal, or says how
    /// long the wait took elsewhere (if a waiting line was printed).
    pub(crate) fn acquired(&mut self) {
        self.clear();
        if self.reminder.take().is_some() {
            let waited = whole_seconds(self.started.elapsed());
            let _ = writeln!(std::io::stderr(), "tenure: acquired lease {} after {waited}", self.name);
        }
    }

    /// Erases the line, if one is shown.
    pub(crate) fn clear(&mut self) {
        if std::mem::take(&mut self.shown) {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    }
}

impl Drop for WaitLine {
    fn drop(&mut self) {
        self.clear();
    }
}

/// The interval after a reminder that came `every` after the previous one.
fn next_reminder(every: Duration) -> Duration {
    every.saturating_mul(2).min(MAX_REMINDER)
}

/// `d` in whole seconds, in words (`0s`, `3m12s`).
fn whole_seconds(d: Duration) -> String {
    match d.as_secs() {
        0 => "0s".to_string(),
        s => human_duration(Duration::from_secs(s)),
    }
}

/// Who holds it, for how long, and when it expires: in full, for a log line.
fn held_by(busy: &Busy, now_ms: u64) -> String {
    match busy.holders.as_slice() {
        [h] if busy.failure.is_none() && busy.corrupt.is_none() => format!(
            "held by {}{}, {} token {}, expires in {} unless renewed",
            h.holder,
            held_for(h, now_ms).map(|d| format!(" for {d}")).unwrap_or_default(),
            h.mode,
            h.token,
            human_duration(Duration::from_millis(h.expires_in_ms))
        ),
        _ => format!("held by {}", busy.describe()),
    }
}

/// The terminal line, at most `width` characters: what matters first — the
/// lease, who holds it, for how long, when it expires — then how long we have
/// waited and the store, each only if it fits. A holder too long for the line
/// loses its label, then its domain, then is cut.
fn tty_line(name: &str, store: &str, busy: &Busy, waited: Duration, now_ms: u64, width: usize) -> String {
    let (holders, held, expires) = match busy.holders.as_slice() {
        _ if busy.failure.is_some() || busy.corrupt.is_some() => (vec![busy.describe()], String::new(), String::new()),
        [] => (vec![busy.describe()], String::new(), String::new()),
        hs @ [h, ..] => {
            let more = match hs.len() {
                1 => String::new(),
                n => format!(" +{} {}", n - 1, h.mode),
            };
            let shortened = [
                short_holder(&h.holder),
                short_holder_without_label(&h.holder, false),
                short_holder_without_label(&h.holder, true),
            ];
            let held = held_for(h, now_ms).map(|d| format!(" {d}")).unwrap_or_default();
            let soonest = hs.iter().map(|h| h.expires_in_ms).min().unwrap_or(0);
            let expires = format!(", expires in {}", human_duration(Duration::from_millis(soonest)));
            (shortened.into_iter().map(|s| format!("{s}{more}")).collect(), held, expires)
        }
    };
    let line = |holder: &str| format!("waiting for {name}: held{held} by {holder}{expires}");
    let fits = |s: &String| s.chars().count() <= width;
    let mut out = holders.iter().map(|h| line(h)).find(fits).unwrap_or_else(|| {
        // Cut the shortest form of the holder to what is left, keeping a few characters.
        let shortest = holders.last().map_or("", String::as_str);
        let over = line(shortest).chars().count().saturating_sub(width);
        let keep = shortest.chars().count().saturating_sub(over).max(8);
        cut(&line(&cut(shortest, keep)), width)
    });
    for extra in [format!(" · waited {}", whole_seconds(waited)), format!(" · {store}")] {
        if out.chars().count().saturating_add(extra.chars().count()) <= width {
            out.push_str(&extra);
        }
    }
    out
}

/// `text`, at most `max` characters, with `…` where it was cut.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// How long `h` has held the lease, by its own clock against ours (a holder
/// whose clock runs ahead shows 0 s); `None` if the store does not say.
pub(crate) fn held_for(h: &HolderView, now_ms: u64) -> Option<String> {
    let since = h.acquired_ms?;
    Some(whole_seconds(Duration::from_millis(now_ms.saturating_sub(since))))
}

/// `user@host pid N (label)`, the label cut short, without the nonce: enough to
/// tell who it is in a narrow column (`--json` has everything).
pub(crate) fn short_holder(h: &Holder) -> String {
    let mut out = short_holder_without_label(h, false);
    if let Some(label) = &h.label {
        out.push_str(&format!(" ({})", printable(label, SHORT_LABEL)));
    }
    out
}

/// [`short_holder`] without the label, and with the host's domain cut if `bare_host`.
pub(crate) fn short_holder_without_label(h: &Holder, bare_host: bool) -> String {
    let host = if bare_host { h.host.split('.').next().unwrap_or_default() } else { &h.host };
    format!("{}@{} pid {}", printable(&h.user, 32), printable(host, 64), h.pid)
}

/// Text from a record, safe on a terminal (control characters escaped) and at
/// most `max` characters. Escapes only what can be shown, so a hostile label of
/// any size costs `max`, not its length, on every poll.
pub(crate) fn printable(s: &str, max: usize) -> String {
    let escaped: String = s
        .chars()
        .flat_map(|c| {
            let control = c.is_control();
            control.then(|| c.escape_unicode()).into_iter().flatten().chain((!control).then_some(c))
        })
        .take(max.saturating_add(1))
        .collect();
    cut(&escaped, max)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tenure::{LeaseName, Mode};

    use super::*;

    fn busy(label: Option<&str>, acquired_ms: Option<u64>) -> Busy {
        let mut holder = Holder::current().with_nonce("0123456789abcdef");
        holder.user = "ci".into();
        holder.host = "build-7.example.internal".into();
        holder.pid = 4242;
        holder.label = label.map(str::to_string);
        let view = HolderView {
            holder: Arc::new(holder),
            mode: Mode::Exclusive,
            token: 42,
            deadline_ms: 0,
            ttl_ms: 30_000,
            acquired_ms,
            expires_in_ms: 27_000,
        };
        Busy {
            name: LeaseName::new("deploy/prod").expect("name"),
            holders: vec![view],
            corrupt: None,
            version: None,
            failure: None,
        }
    }

    #[test]
    fn the_terminal_line_leads_with_lease_holder_hold_time_and_expiry_and_fits_80_columns() {
        let b = busy(Some("https://ci.example.com/jobs/123456789/attempts/3"), Some(1_000));
        let line = tty_line("deploy/prod", "file:///mnt/shared/locks", &b, Duration::from_secs(65), 193_000, 79);
        assert!(line.chars().count() <= 79, "{line}");
        assert!(line.starts_with("waiting for deploy/prod: held 3m12s by ci@build-7 pid 4242"), "{line}");
        assert!(line.contains("expires in 27s"), "{line}");
        // Wide enough, everything is there: label, domain, how long we waited, the store.
        let line = tty_line("deploy/prod", "file:///mnt/shared/locks", &b, Duration::from_secs(65), 193_000, 200);
        for part in
            ["build-7.example.internal", "(https://ci.example.com/", "waited 1m5s", "· file:///mnt/shared/locks"]
        {
            assert!(line.contains(part), "{part:?} missing: {line}");
        }
        // Absurdly narrow: still cut, never a panic.
        for width in 0..20 {
            assert!(tty_line("deploy/prod", "s", &b, Duration::ZERO, 0, width).chars().count() <= width.max(1));
        }
    }

    #[test]
    fn holders_from_records_are_shortened_and_escaped() {
        let b = busy(Some("\u{1b}[31mred and a very long label indeed, much longer than fits"), None);
        let short = short_holder(&b.holders[0].holder);
        assert!(!short.contains('\u{1b}') && short.contains("ci@build-7.example.internal pid 4242"), "{short}");
        assert!(short.chars().count() < 80 && short.ends_with("…)"), "{short}");
        assert_eq!(held_for(&b.holders[0], 5), None);
        // A holder clock ahead of ours: held for 0 s, not a wrapped number.
        assert_eq!(held_for(&busy(None, Some(u64::MAX)).holders[0], 5).as_deref(), Some("0s"));
        // Escapes show as such, and are cut like any text.
        assert_eq!(printable("a\u{7}b", 20), "a\\u{7}b");
        assert_eq!(printable(&"\u{1}".repeat(1 << 20), 10), "\\u{1}\\u{1…");
        assert_eq!(printable("short", 5), "short");
    }

    #[test]
    fn reminders_double_up_to_five_minutes() {
        let mut every = FIRST_REMINDER;
        let mut seen = vec![every.as_secs()];
        for _ in 0..6 {
            every = next_reminder(every);
            seen.push(every.as_secs());
        }
        assert_eq!(seen, [30, 60, 120, 240, 300, 300, 300]);
    }
}
