//! The server's state on disk: the longest lease it may have granted, and its
//! identity, kept across restarts.
//!
//! The restart rule (see the crate docs) makes a starting server grant nothing
//! until every grant of its previous incarnation has ended, and keeps its
//! tokens above every token of that incarnation. Both rest on a bound on those
//! grants: the previous `--max-lease`. The flags of this run cannot tell it (a
//! server restarted with a lower `--max-lease` would otherwise grant a name
//! that a holder from before the restart still holds), so the bound is written
//! down, durably, before the first grant: the greater of the recorded value and
//! this run's `--max-lease`. It is lowered to this run's `--max-lease` only
//! once a whole quarantine of the recorded value has passed under this run's
//! flags ([`StateFile::lower`]): by then every grant made under the old bound
//! has ended.
//!
//! It also keeps the server's identity (random, made at the first start): a
//! client of several servers places names by the identities they say, so one
//! must stay the same across restarts, or names would move between servers
//! under their holders. `tenure serve --server-id` gives one instead.
//!
//! The file is a few lines of text:
//!
//! ```text
//! tenure serve state 1
//! max_lease_ms 60000
//! server_id 5f0c2a9e81d34b7c9a0e6f1d2c3b4a59
//! ```
//!
//! A file that says anything else stops the start with an error naming it. The
//! other choice, assuming the worst bound there is (30 days), would leave the
//! server granting nothing for a month; the operator knows the longest
//! `--max-lease` this server ran with, and can write it, or remove the file once
//! that long has passed.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tenure_core::limits::{MAX_TTL, millis};

use crate::wire::MIN_TTL_MS;

/// The first line of a state file: what it is, and its format's version.
const HEADER: &str = "tenure serve state 1";

/// The largest state file read (one is a few dozen bytes).
const MAX_STATE_FILE: u64 = 4096;

/// Why a state file cannot be used: its path, and what is wrong.
#[derive(Debug)]
pub struct StateError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub why: String,
}

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "state file {}: {}", self.path.display(), self.why)
    }
}

impl std::error::Error for StateError {}

/// What a state file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    /// The longest lease the server may have granted.
    pub longest: Duration,
    /// The server's identity, if one was made (a file without one gets one at
    /// the next start).
    pub server_id: Option<String>,
}

/// Where a server keeps the longest lease it may have granted.
#[derive(Clone, Debug)]
pub struct StateFile {
    path: PathBuf,
}

impl StateFile {
    /// The state kept in `path` (created, with its directory, when first written).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, why: impl std::fmt::Display) -> StateError {
        StateError { path: self.path.clone(), why: why.to_string() }
    }

    /// The recorded state: `None` if there is no file (a first start).
    pub fn read(&self) -> Result<Option<State>, StateError> {
        let bytes = match tenure_core::limits::read_small_file(&self.path, MAX_STATE_FILE) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.error(e)),
        };
        let garbage = |what: &str| {
            self.error(format!(
                "{what}; it should read {HEADER:?}, a line `max_lease_ms N` and one `server_id ID`. Write there \
                 the longest --max-lease this server ran with, or remove the file once that long has passed since \
                 it stopped (a new file gives the server a new identity: treat that as a change of the server \
                 list, or give the old one with --server-id)"
            ))
        };
        let text = std::str::from_utf8(&bytes).map_err(|_| garbage("not UTF-8 text"))?;
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        if lines.next() != Some(HEADER) {
            return Err(garbage("its first line is not a tenure serve state header"));
        }
        let (mut longest, mut server_id) = (None, None);
        for line in lines {
            let (key, value) = line.split_once(' ').map_or((line, ""), |(k, v)| (k, v.trim()));
            match key {
                "max_lease_ms" if longest.is_none() => {
                    let max = millis(MAX_TTL);
                    longest = Some(value.parse::<u64>().ok().filter(|ms| (MIN_TTL_MS..=max).contains(ms)).ok_or_else(
                        || {
                            garbage(&format!(
                                "max_lease_ms {value:?} is not a number of ms within {MIN_TTL_MS} to {max}"
                            ))
                        },
                    )?);
                }
                "server_id" if server_id.is_none() => {
                    crate::wire::check_server_id(value).map_err(|m| garbage(&format!("server_id: {m}")))?;
                    server_id = Some(value.to_string());
                }
                _ => return Err(garbage(&format!("the line {:?} is not one it can hold, or a repeated one", line))),
            }
        }
        let longest = longest.ok_or_else(|| garbage("it has no `max_lease_ms` line"))?;
        Ok(Some(State { longest: Duration::from_millis(longest), server_id }))
    }

    /// At start, before anything is granted: the longest lease a grant of an
    /// earlier incarnation or of this one (with `max_lease`) may have, and the
    /// server's identity (made now if the file has none), written down before
    /// they are returned.
    pub fn start(&self, max_lease: Duration) -> Result<(Duration, String), StateError> {
        let recorded = self.read()?;
        let longest = recorded.as_ref().map_or(max_lease, |r| r.longest.max(max_lease));
        let id = recorded.and_then(|r| r.server_id).unwrap_or_else(crate::server::random_server_id);
        self.write(&State { longest, server_id: Some(id.clone()) })?;
        Ok((longest, id))
    }

    /// Once a whole quarantine of the bound [`StateFile::start`] returned has
    /// passed with this run's `max_lease`: every grant under the old bound has
    /// ended, so the bound is this run's (the identity stays).
    pub fn lower(&self, max_lease: Duration, server_id: &str) -> Result<(), StateError> {
        self.write(&State { longest: max_lease, server_id: Some(server_id.to_string()) })
    }

    /// Writes `bound` durably: a temporary file beside it, synced, renamed
    /// over it, and the directory synced, so that a crash leaves the old file
    /// or the new one, never a torn one or none.
    fn write(&self, state: &State) -> Result<(), StateError> {
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        std::fs::create_dir_all(dir).map_err(|e| self.error(format!("creating its directory: {e}")))?;
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(format!(".{}.tmp", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let written = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            writeln!(f, "{HEADER}\nmax_lease_ms {}", millis(state.longest))?;
            if let Some(id) = &state.server_id {
                writeln!(f, "server_id {id}")?;
            }
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
            std::fs::File::open(dir)?.sync_all()
        })();
        written.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            self.error(format!("writing it: {e}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn the_bound_only_grows_at_start_and_is_lowered_when_told() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = StateFile::new(dir.path().join("sub/serve.state"));
        assert_eq!(state.read().expect("no file yet"), None);
        let (longest, id) = state.start(secs(30)).expect("start");
        assert_eq!(longest, secs(30));
        assert_eq!(state.start(secs(5)).expect("restart lower"), (secs(30), id.clone()), "the old bound stays");
        assert_eq!(state.read().expect("read"), Some(State { longest: secs(30), server_id: Some(id.clone()) }));
        assert_eq!(state.start(secs(60)).expect("restart higher"), (secs(60), id.clone()));
        state.lower(secs(5), &id).expect("lower");
        assert_eq!(state.read().expect("read"), Some(State { longest: secs(5), server_id: Some(id.clone()) }));
        // A file from before identities were kept gets one, kept from then on.
        std::fs::write(state.path(), "tenure serve state 1\nmax_lease_ms 7000\n").expect("write");
        let (longest, made) = state.start(secs(1)).expect("start");
        assert_eq!((longest, state.start(secs(1)).expect("again").1), (secs(7), made));
    }

    #[test]
    fn a_garbage_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("serve.state");
        let state = StateFile::new(&path);
        for bad in [
            &b"\xff\xfe"[..],
            b"",
            b"max_lease_ms 5000\n",
            b"tenure serve state 1\n",
            b"tenure serve state 1\nmax_lease_ms five\n",
            b"tenure serve state 1\nmax_lease_ms 0\n",
            b"tenure serve state 1\nmax_lease_ms 99999999999999999999999\n",
            b"tenure serve state 1\nmax_lease_ms 5000\nmax_lease_ms 6000\n",
            b"tenure serve state 1\nmax_lease_ms 5000\nserver_id a b\n",
            b"tenure serve state 1\nserver_id ab\n",
            b"tenure serve state 1\nmax_lease_ms 5000\ncolour blue\n",
            b"tenure serve state 2\nmax_lease_ms 5000\n",
        ] {
            std::fs::write(&path, bad).expect("write");
            let err = state.start(secs(1)).expect_err("garbage is refused");
            assert!(err.to_string().contains(&path.display().to_string()), "{err}");
            assert_eq!(std::fs::read(&path).expect("read"), bad, "a refused file is left as it is");
        }
        std::fs::remove_file(&path).expect("remove");
        std::fs::create_dir(&path).expect("a directory where the file should be");
        assert!(state.start(secs(1)).is_err());
    }
}
