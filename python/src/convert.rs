//! Python arguments to Rust values: durations, lease options, times.

use std::time::Duration;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use tenure::LeaseOptions;

use crate::errors::*;

/// A duration as Python gives it: `"30s"`, `"1m30s"`, `"250ms"`, a number of
/// seconds, or a `datetime.timedelta`.
pub(crate) fn duration(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Duration> {
    let secs = if let Ok(text) = value.extract::<String>() {
        let t = text.trim();
        match t.parse::<f64>() {
            Ok(s) => s,
            Err(_) => {
                return humantime::parse_duration(t)
                    .map_err(|e| ConfigError::new_err(format!("invalid {what} {text:?}: {e}")));
            }
        }
    } else if let Ok(s) = value.extract::<f64>() {
        s
    } else if value.hasattr("total_seconds")? {
        value.call_method0("total_seconds")?.extract::<f64>()?
    } else {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a duration: \"30s\", a number of seconds or a timedelta"
        )));
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(ConfigError::new_err(format!("invalid {what} {secs}: a duration is finite and not negative")));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| ConfigError::new_err(format!("invalid {what} {secs}: {e}")))
}

pub(crate) fn opt_duration(value: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<Duration>> {
    value.filter(|v| !v.is_none()).map(|v| duration(v, what)).transpose()
}

/// Lease options from the keyword arguments every acquire takes.
pub(crate) fn lease_options(
    ttl: Option<&Bound<'_, PyAny>>,
    timeout: Option<&Bound<'_, PyAny>>,
    shared: bool,
    renew_every: Option<&Bound<'_, PyAny>>,
    meta: Option<String>,
    slots: Option<u32>,
) -> PyResult<LeaseOptions> {
    let mut opts = if shared { LeaseOptions::shared() } else { LeaseOptions::exclusive() };
    if let Some(n) = slots {
        opts = opts.with_slots(n);
    }
    if let Some(ttl) = opt_duration(ttl, "ttl")? {
        opts = opts.with_ttl(ttl);
    }
    opts.timeout = opt_duration(timeout, "timeout")?;
    if let Some(every) = opt_duration(renew_every, "renew_every")? {
        opts = opts.with_renew_every(every);
    }
    if let Some(meta) = meta {
        opts = opts.with_meta(meta);
    }
    opts.validate().map_err(to_py)?;
    Ok(opts)
}

/// Milliseconds since the epoch as a `datetime` in UTC.
pub(crate) fn utc(py: Python<'_>, ms: u64) -> PyResult<Py<PyAny>> {
    let datetime = py.import("datetime")?;
    let utc = datetime.getattr("timezone")?.getattr("utc")?;
    let dt = datetime.getattr("datetime")?.call_method1("fromtimestamp", (ms as f64 / 1000.0, utc))?;
    Ok(dt.unbind())
}
