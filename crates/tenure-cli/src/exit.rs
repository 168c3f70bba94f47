//! Exit codes. `tenure lock` exits with its command's own status; these are
//! tenure's own outcomes, chosen from sysexits.h so they stay apart from the
//! 0–2 and 126–255 that commands and shells commonly use.

use std::process::ExitCode;

/// Bad arguments, an invalid lease name, store URL or option.
pub(crate) const USAGE: u8 = 64;
/// Stored data is corrupt (reported, not repaired).
pub(crate) const DATA: u8 = 65;
/// The store cannot be reached, failed, or was refused as unsafe.
pub(crate) const STORE: u8 = 69;
/// A bug in tenure.
pub(crate) const INTERNAL: u8 = 70;
/// The system failed tenure: its guard process could not be started, was
/// killed from outside, or fell silent with the command's end unknown. Not a
/// bug in tenure (that is [`INTERNAL`]); the command did not run, or how it
/// ended cannot be known.
pub(crate) const OS_ERROR: u8 = 71;
/// An output file cannot be created (`tenure man --dir`).
pub(crate) const CANT_CREATE: u8 = 73;
/// Writing the output failed.
pub(crate) const IO: u8 = 74;
/// Timed out waiting for the lease, or it was busy with `--no-wait`; also a
/// `break` that found the lease changed since it was read, or nothing to break.
pub(crate) const TIMEOUT: u8 = 75;
/// The command ran, and was stopped: the lease was lost, or tenure could no
/// longer vouch for it (its guard killed or silent). Never said of a command
/// that did not run.
pub(crate) const LOST: u8 = 76;

/// An error of the command line itself, with the exit code it ends `tenure` with
/// (anything not a [`tenure::Error`] or an I/O error would otherwise count as a
/// bug, 70).
#[derive(Debug)]
pub(crate) struct Fail {
    code: u8,
    message: String,
}

impl Fail {
    /// Bad arguments (64).
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self { code: USAGE, message: message.into() }
    }

    /// An error ending `tenure` with `code`.
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Fail {}

/// The exit code for an error.
pub(crate) fn code_for(err: &anyhow::Error) -> u8 {
    if let Some(fail) = err.chain().find_map(|e| e.downcast_ref::<Fail>()) {
        return fail.code;
    }
    match err.chain().find_map(|e| e.downcast_ref::<tenure::Error>()) {
        Some(e) => match e {
            tenure::Error::InvalidName { .. }
            | tenure::Error::InvalidStore { .. }
            | tenure::Error::InvalidOptions { .. } => USAGE,
            tenure::Error::Busy { .. } | tenure::Error::Timeout { .. } | tenure::Error::Changed { .. } => TIMEOUT,
            tenure::Error::Lost { .. } | tenure::Error::Fenced { .. } => LOST,
            tenure::Error::Corrupt { .. } | tenure::Error::TokensExhausted { .. } => DATA,
            _ => STORE,
        },
        None if err.chain().any(|e| e.downcast_ref::<std::io::Error>().is_some()) => STORE,
        None => INTERNAL,
    }
}

pub(crate) fn code(c: u8) -> ExitCode {
    ExitCode::from(c)
}
