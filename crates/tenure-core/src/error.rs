//! The one error type, and what each variant tells the caller to do.
//!
//! | variant | what to do |
//! |---|---|
//! | [`Error::InvalidName`], [`Error::InvalidStore`], [`Error::InvalidOptions`] | fix the input; retrying cannot help |
//! | [`Error::Busy`], [`Error::Timeout`] | someone else holds the lease: retry later or wait longer |
//! | [`Error::Lost`] | the lease is gone: **stop acting on it** at once; acquire again to continue |
//! | [`Error::Fenced`] | a newer holder has written: **stop**, your grant is stale |
//! | [`Error::Changed`] | the record moved since you inspected it: inspect again, then decide |
//! | [`Error::Corrupt`] | stored data is damaged: it is reported, never silently repaired |
//! | [`Error::TokensExhausted`] | the lease's tokens reached the top of their range: nothing is granted; an operator must retire the name |
//! | [`Error::Unsupported`] | the store lacks a capability or ignores conditional writes: fix configuration |
//! | [`Error::Store`] | I/O or network trouble: retry (unless [`Error::is_transient`] says it cannot help), or check the store |
//! | [`Error::Closed`] | a bag bucket is closed: the message was not accepted |

use std::time::Duration;

use crate::types::LossReason;

/// A boxed error from a backend, an OS call or a network client.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in tenure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A lease name broke a naming rule (see [`crate::LeaseName`]).
    #[error("invalid lease name {name:?}: {reason}")]
    InvalidName {
        /// The name as given.
        name: String,
        /// Which rule, and where.
        reason: String,
    },

    /// A store URL or option could not be understood.
    #[error("invalid store {url:?}: {reason}")]
    InvalidStore {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// Lease options that cannot work together (e.g. renewing slower than the TTL).
    #[error("invalid lease options: {reason}")]
    InvalidOptions {
        /// What is wrong.
        reason: String,
    },

    /// The lease is held by someone else (from a non-waiting acquire).
    #[error("{store}: lease {name:?} is held by {holder}")]
    Busy {
        /// Store URL.
        store: String,
        /// Lease name.
        name: String,
        /// Who holds it, for humans.
        holder: String,
    },

    /// Waiting for the lease took longer than allowed.
    #[error("{store}: timed out after {} waiting for lease {name:?} (held by {holder})", crate::duration::human_duration(*waited))]
    Timeout {
        /// Store URL.
        store: String,
        /// Lease name.
        name: String,
        /// How long we waited.
        waited: Duration,
        /// Who held it last time we looked, for humans.
        holder: String,
    },

    /// The lease was lost: renewals failed, it expired, or someone broke or took it.
    #[error("{store}: lease {name:?} (token {token}) was lost: {reason}")]
    Lost {
        /// Store URL.
        store: String,
        /// Lease name.
        name: String,
        /// Our fencing token.
        token: u64,
        /// Why.
        reason: LossReason,
    },

    /// A fenced write was refused because a write with a higher token already succeeded.
    #[error("{store}: write to {key:?} fenced: our token {ours} is below the current token {current}")]
    Fenced {
        /// Store URL.
        store: String,
        /// The fenced record's key.
        key: String,
        /// Our token.
        ours: u64,
        /// The token that has already written.
        current: u64,
    },

    /// A conditional admin operation found the record changed since it was inspected.
    #[error("{store}: lease {name:?} changed since it was inspected; inspect it again")]
    Changed {
        /// Store URL.
        store: String,
        /// Lease name.
        name: String,
    },

    /// Stored data could not be understood.
    #[error("{store}: corrupt data at {location}: {detail}")]
    Corrupt {
        /// Store URL.
        store: String,
        /// Key, file or offset.
        location: String,
        /// What is wrong.
        detail: String,
    },

    /// The lease's fencing tokens reached [`crate::limits::MAX_TOKEN`]: granting
    /// again would wrap or reset them, so nothing is granted under this name. Only a
    /// damaged or hostile record gets there; use another lease name.
    #[error(
        "{store}: lease {name:?} has used up its fencing tokens (last token {last_token}); it cannot be granted again without tokens going backwards: use another lease name"
    )]
    TokensExhausted {
        /// Store URL.
        store: String,
        /// Lease name.
        name: String,
        /// The highest token the record claims.
        last_token: u64,
    },

    /// The store cannot do what was asked (or does not honour conditional writes).
    #[error("{store}: {what}")]
    Unsupported {
        /// Store URL.
        store: String,
        /// What is missing, and what to do about it.
        what: String,
    },

    /// An I/O or network operation failed.
    #[error("{store}: {op}: {source}")]
    Store {
        /// Store URL.
        store: String,
        /// The operation and key, e.g. `reading lease "deploy"`.
        op: String,
        /// The underlying error.
        #[source]
        source: BoxError,
    },

    /// A bag bucket was closed before the message was accepted.
    #[error("{store}: bucket {bucket} is closed; the message was not accepted")]
    Closed {
        /// Store URL.
        store: String,
        /// The bucket.
        bucket: String,
    },
}

impl Error {
    /// An [`Error::Store`] for operation `op` on `store`.
    pub fn store(store: impl Into<String>, op: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Store { store: store.into(), op: op.into(), source: source.into() }
    }

    /// An [`Error::Corrupt`].
    pub fn corrupt(store: impl Into<String>, location: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::Corrupt { store: store.into(), location: location.into(), detail: detail.into() }
    }

    /// An [`Error::Unsupported`].
    pub fn unsupported(store: impl Into<String>, what: impl Into<String>) -> Self {
        Self::Unsupported { store: store.into(), what: what.into() }
    }

    /// Whether trying the same thing again later may succeed. Store errors are,
    /// unless the operating system says retrying cannot help (permission denied, a
    /// read-only file system, a path that is not a directory, …).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Busy { .. } | Self::Timeout { .. } => true,
            Self::Store { source, .. } => !is_permanent(&**source),
            _ => false,
        }
    }
}

fn is_permanent(err: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind::*;
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                PermissionDenied
                    | ReadOnlyFilesystem
                    | NotADirectory
                    | IsADirectory
                    | InvalidInput
                    | InvalidFilename
                    | Unsupported
            );
        }
        cur = e.source();
    }
    false
}

/// `Result` with tenure's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn store_errors_are_transient_unless_the_os_says_retrying_cannot_help() {
        let io_err = |kind| Error::store("file:///x", "writing", io::Error::from(kind));
        assert!(io_err(io::ErrorKind::TimedOut).is_transient());
        assert!(io_err(io::ErrorKind::ConnectionRefused).is_transient());
        assert!(!io_err(io::ErrorKind::PermissionDenied).is_transient());
        assert!(!io_err(io::ErrorKind::ReadOnlyFilesystem).is_transient());
        assert!(!io_err(io::ErrorKind::NotADirectory).is_transient());
        // Wrapped inside another error, the cause still counts.
        let wrapped = Error::store(
            "s3://b",
            "reading",
            Box::new(io::Error::other(io::Error::from(io::ErrorKind::PermissionDenied))),
        );
        assert!(wrapped.is_transient(), "io::Error::other hides the kind: treated as transient");
        assert!(Error::Busy { store: "s".into(), name: "n".into(), holder: "h".into() }.is_transient());
        assert!(!Error::InvalidName { name: "x".into(), reason: "r".into() }.is_transient());
    }
}
