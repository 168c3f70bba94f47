//! The exception hierarchy, mirroring `tenure::Error`, and the one-line
//! message each carries (the command's).

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(tenure, TenureError, PyException, "Base of every error tenure raises.");
create_exception!(
    tenure,
    ConfigError,
    TenureError,
    "A lease name, store URL or option that cannot work: fix the input, retrying cannot help."
);
create_exception!(tenure, Busy, TenureError, "The lease is held by someone else (a try that does not wait).");
create_exception!(tenure, Timeout, TenureError, "Waiting for the lease took longer than the timeout.");
create_exception!(tenure, Lost, TenureError, "The lease is gone: stop acting on it at once.");
create_exception!(tenure, Fenced, TenureError, "A fenced write was refused: a newer holder has written.");
create_exception!(tenure, Changed, TenureError, "The lease changed since it was inspected: inspect it again.");
create_exception!(tenure, Corrupt, TenureError, "Stored data is damaged: reported, never silently repaired.");
create_exception!(tenure, TokensExhausted, TenureError, "The lease's fencing tokens are used up: use another name.");
create_exception!(tenure, Unsupported, TenureError, "The store lacks a capability: fix its configuration.");
create_exception!(
    tenure,
    StoreUnavailable,
    TenureError,
    "I/O or network trouble with the store: retry, or check the store."
);
create_exception!(tenure, Closed, TenureError, "A bag bucket is closed: the message was not accepted.");
create_exception!(
    tenure,
    ForkedError,
    TenureError,
    "A lease, client or store made before fork() was used in the child process."
);

/// The message the command prints for `e` (after `tenure: `): the error and
/// each cause it does not already say.
pub(crate) fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

/// The Python exception for `e`, with the command's message.
pub(crate) fn to_py(e: tenure::Error) -> PyErr {
    use tenure::Error as E;
    let msg = one_line(&e);
    match e {
        E::InvalidName { .. } | E::InvalidStore { .. } | E::InvalidOptions { .. } => ConfigError::new_err(msg),
        E::Busy { .. } => Busy::new_err(msg),
        E::Timeout { .. } => Timeout::new_err(msg),
        E::Lost { .. } => Lost::new_err(msg),
        E::Fenced { .. } => Fenced::new_err(msg),
        E::Changed { .. } => Changed::new_err(msg),
        E::Corrupt { .. } => Corrupt::new_err(msg),
        E::TokensExhausted { .. } => TokensExhausted::new_err(msg),
        E::Unsupported { .. } => Unsupported::new_err(msg),
        E::Store { .. } => StoreUnavailable::new_err(msg),
        E::Closed { .. } => Closed::new_err(msg),
        _ => TenureError::new_err(msg),
    }
}
