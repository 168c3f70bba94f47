//! The lines of the guard's report pipe, read by `tenure`: what each says
//! ([`Event`], how the command ended as a [`Status`]), and the parser that
//! drops what no guard writes. The protocol itself is drawn in the
//! [module above](super).

use std::time::Duration;

/// Longest line either side sends or accepts: far below `PIPE_BUF`, so that a
/// write of one line is all or nothing, also on a non-blocking pipe.
pub(crate) const MAX_LINE: usize = 1024;
/// Longest `orphan` line `tenure` sends and the guard accepts: still below
/// `PIPE_BUF` (4096 on Linux). A store's URL and options that do not fit leave
/// the lease of a `tenure` that died to expire.
pub(crate) const MAX_ORPHAN_LINE: usize = 4000;

/// How the command ended, as the guard reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
}

impl Status {
    /// The exit code a shell would report: the code, or 128 + the signal.
    pub(crate) fn exit_code(self) -> u8 {
        match self {
            Status::Code(c) => (c & 0xff) as u8,
            Status::Signal(s) => u8::try_from(i64::from(s).saturating_add(128)).unwrap_or(255),
        }
    }

    /// A raw `waitpid` status, as `/proc/<pid>/stat` shows a zombie's.
    pub(super) fn from_wait(raw: i32) -> Self {
        match raw & 0x7f {
            0 => Status::Code((raw >> 8) & 0xff),
            sig => Status::Signal(sig),
        }
    }

    /// The report line: `<exited> <code>` or `<killed> <signal>`.
    pub(crate) fn report(self, exited: &str, killed: &str) -> String {
        match self {
            Status::Code(c) => format!("{exited} {c}"),
            Status::Signal(s) => format!("{killed} {s}"),
        }
    }
}

/// What the guard reports.
#[derive(Debug)]
pub(crate) enum Event {
    /// The command runs, as the leader of process group `pid`.
    Started(i32),
    /// The guard began stopping the command: `deadline` (no renewal in time),
    /// `lost` (tenure said so), `signal` (tenure got a second signal), `parent`,
    /// or `leftovers` (the leader exited, processes it started remain).
    Stopping(String),
    /// The command could not be started.
    Failed {
        /// 127 (not found) or 126 (cannot execute).
        code: u8,
        /// Why, for humans.
        message: String,
    },
    /// The command and every process it started are gone.
    Exited(Status),
    /// The guard ended without a final report (it was killed).
    GuardLost(String),
    /// The guard said nothing for the silence limit: it is stopped or hung.
    Silent(Duration),
}

/// Where the command stood when `tenure` took over from a silent guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leader {
    /// It still ran: `tenure` stopped it.
    Running,
    /// It had ended by itself, with this status.
    Ended(Status),
    /// It had ended, and its status cannot be known.
    Unknown,
    /// It never started: nothing of it ran.
    NotStarted,
}

/// One line of the guard's report.
pub(super) enum Report {
    Event(Event),
    Leader(Status),
    Alive,
}

pub(super) fn parse(line: &str) -> Option<Report> {
    let (verb, rest) = line.split_once(' ').unwrap_or((line, ""));
    let status = |verb: &str, n: &str| match verb {
        "exited" => n.parse().ok().map(Status::Code),
        "killed" => n.parse().ok().map(Status::Signal),
        _ => None,
    };
    let event = match verb {
        "alive" => return Some(Report::Alive),
        "leader" => {
            let (how, n) = rest.split_once(' ')?;
            return status(how, n).map(Report::Leader);
        }
        "started" => rest.parse().ok().filter(|&pid: &i32| pid > 0).map(Event::Started),
        "stopping" => Some(Event::Stopping(rest.to_string())),
        "failed" => {
            let (code, message) = rest.split_once(' ').unwrap_or((rest, ""));
            Some(Event::Failed { code: code.parse().unwrap_or(126), message: message.to_string() })
        }
        "exited" | "killed" => status(verb, rest).map(Event::Exited),
        _ => None,
    };
    event.map(Report::Event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lines_parse_and_absurd_numbers_are_dropped() {
        assert!(matches!(parse("started 42"), Some(Report::Event(Event::Started(42)))));
        assert!(parse("started -1").is_none() && parse("started 0").is_none());
        assert!(parse("started 99999999999999").is_none());
        assert!(matches!(parse("leader killed 9"), Some(Report::Leader(Status::Signal(9)))));
        assert!(matches!(parse("killed 2147483647"), Some(Report::Event(Event::Exited(Status::Signal(i32::MAX))))));
        assert!(matches!(parse("failed 999 no"), Some(Report::Event(Event::Failed { code: 126, .. }))));
        assert!(matches!(parse("alive"), Some(Report::Alive)));
        assert!(parse("leader").is_none() && parse("exited x").is_none() && parse("").is_none());
    }

    #[test]
    fn statuses_map_to_shell_exit_codes_without_overflow() {
        assert_eq!(Status::Signal(i32::MAX).exit_code(), 255);
        assert_eq!(Status::Signal(i32::MIN).exit_code(), 255);
        assert_eq!(Status::Signal(9).exit_code(), 137);
        assert_eq!(Status::Code(256 + 3).exit_code(), 3);
        assert_eq!(Status::from_wait(3 << 8), Status::Code(3));
        assert_eq!(Status::from_wait(9), Status::Signal(9));
        assert_eq!(Status::from_wait(0x80 | 11), Status::Signal(11), "a core dump");
    }
}
