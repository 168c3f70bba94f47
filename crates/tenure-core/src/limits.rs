//! The bounds tenure holds every outside number to.
//!
//! Durations, tokens, times and sizes reach tenure from users (flags, options),
//! from records other processes wrote, from wire frames and from file names. Each
//! is range-checked where it enters, against the limits below, and refused with a
//! clear error when it is out of range; arithmetic on values that passed is then
//! checked or saturating. None of these limits is near what a real deployment
//! needs, and all of them are far enough from `u64::MAX` that sums of two of them
//! cannot overflow.

use std::time::Duration;

use crate::duration::human_duration;
use crate::error::{Error, Result};

/// Longest lease duration (TTL) tenure grants or accepts in a record: 30 days.
/// A holder renews every TTL/8, so a longer lease only delays takeover after a
/// crash.
pub const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// Longest duration tenure accepts anywhere else (a wait, a grace, a skew bound):
/// 10 years. A longer one is a typo, and its milliseconds would not fit the
/// arithmetic it takes part in.
pub const MAX_DURATION: Duration = Duration::from_secs(10 * 366 * 24 * 3600);

/// Tokens stay below this. At the top of the token space tenure refuses to grant
/// ([`Error::TokensExhausted`]) rather than wrap or start again.
pub const MAX_TOKEN: u64 = u64::MAX / 2;

/// Latest wall-clock time (unix ms) a record may carry: the year 9999. A record
/// with a later deadline or watermark was not written by a working clock.
pub const MAX_TIME_MS: u64 = 253_402_300_799_999;

/// Longest reason a `break` may record (`tenure break --reason`), in bytes.
pub const MAX_REASON_BYTES: usize = 1024;

/// Largest lease record tenure reads or writes: 1 MiB (a record holds one line
/// per shared holder, about 300 bytes each). A larger stored value is judged
/// corrupt without being read in full.
pub const MAX_RECORD_BYTES: usize = 1 << 20;

// Where the clock, which needs it, can have it without depending on the limits.
pub use crate::clock::millis;

/// `d` in whole microseconds, saturating at `u64::MAX`.
pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Checks a user-given duration: at most `max`, and `what` names it in the error.
///
/// # Errors
/// [`Error::InvalidOptions`] naming the value and the limit.
pub fn check_duration(what: &str, d: Duration, max: Duration) -> Result<Duration> {
    if d > max {
        return Err(Error::InvalidOptions {
            reason: format!("{what} of {} is too long (at most {})", human_duration(d), human_duration(max)),
        });
    }
    Ok(d)
}

/// Reads a small file a user named (a token, a key, a certificate): whole, at
/// most `max` bytes, and only if it is a regular file once opened. Opened
/// without blocking and without becoming a controlling terminal, so that a
/// FIFO, `/dev/zero` or a terminal given by mistake is refused instead of
/// hanging or filling memory. Symlinks are followed: secrets are often mounted
/// as links (Kubernetes does so).
///
/// # Errors
/// The open's or read's error; `InvalidInput` for anything but a regular file;
/// `InvalidData` for a file larger than `max`. Callers name the file.
pub fn read_small_file(path: &std::path::Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32 | rustix::fs::OFlags::NOCTTY.bits() as i32)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("larger than {max} bytes")));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_leave_room_for_sums() {
        assert!(MAX_TIME_MS.checked_add(millis(MAX_DURATION)).is_some_and(|t| t < MAX_TOKEN));
        assert_eq!(millis(Duration::MAX), u64::MAX);
        assert_eq!(millis(MAX_TTL), 2_592_000_000);
    }

    #[test]
    fn durations_above_their_limit_are_refused_by_name() {
        assert!(check_duration("ttl", MAX_TTL, MAX_TTL).is_ok());
        let err = check_duration("ttl", MAX_TTL + Duration::from_millis(1), MAX_TTL).expect_err("too long");
        assert!(err.to_string().contains("ttl of"), "{err}");
    }

    #[test]
    fn small_files_are_read_whole_and_anything_else_is_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (small, big, fifo) = (dir.path().join("token"), dir.path().join("big"), dir.path().join("fifo"));
        std::fs::write(&small, b"s3cret\n").expect("write");
        std::fs::write(&big, vec![b'x'; 65]).expect("write");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from(0o600)).expect("mkfifo");
        assert_eq!(read_small_file(&small, 64).expect("read"), b"s3cret\n");
        let kind = |p: &std::path::Path| read_small_file(p, 64).map(drop).map_err(|e| e.kind());
        assert_eq!(kind(&big), Err(std::io::ErrorKind::InvalidData));
        assert_eq!(kind(&fifo), Err(std::io::ErrorKind::InvalidInput), "a FIFO is refused, not waited on");
        assert_eq!(kind(std::path::Path::new("/dev/zero")), Err(std::io::ErrorKind::InvalidInput));
        assert_eq!(kind(dir.path()), Err(std::io::ErrorKind::InvalidInput));
    }
}
