//! The live "waiting for …" line of `tenure lock`.
//!
//! On a terminal (stderr is a tty) one status line is redrawn in place after each
//! poll of the busy lease: who holds it and when it could be taken over, and how
//! long we have waited. It is erased when the wait ends, so the command's output
//! starts on a clean line. Elsewhere nothing is printed, except an `info` log line
//! (shown with `-v`) each time the holder changes.

use std::io::Write;
use std::time::{Duration, Instant};

use tenure::{Busy, human_duration};

/// The waiting line for one lease.
#[derive(Debug)]
pub(crate) struct WaitLine {
    tty: bool,
    shown: bool,
    started: Instant,
    store: String,
    name: String,
    last_holders: Option<String>,
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
        }
    }

    /// Shows that the lease is busy, as `busy` says.
    pub(crate) fn update(&mut self, busy: &Busy) {
        let waited = self.started.elapsed();
        if self.tty {
            let text = format!(
                "tenure: waiting {} for lease {} in {}: held by {}",
                human_duration(Duration::from_secs(waited.as_secs())),
                self.name,
                self.store,
                busy.describe()
            );
            let width = rustix::termios::tcgetwinsize(rustix::stdio::stderr())
                .map(|w| usize::from(w.ws_col))
                .ok()
                .filter(|&w| w > 10)
                .unwrap_or(80);
            // One character short of the width: a full line would wrap, and the
            // carriage return would then redraw only its last row.
            let text: String = text.chars().take(width - 1).collect();
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K{text}");
            let _ = err.flush();
            self.shown = true;
        } else {
            let holders: Vec<String> = busy.holders.iter().map(|h| format!("{}:{}", h.holder.nonce, h.token)).collect();
            let key = format!("{holders:?} {:?} {}", busy.corrupt, busy.failure.is_some());
            if self.last_holders.as_ref() != Some(&key) {
                tracing::info!("waiting for lease {} in {}: held by {}", self.name, self.store, busy.describe());
                self.last_holders = Some(key);
            }
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
