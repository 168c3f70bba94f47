//! `tenure._tenure`: the Python extension of tenure, over the same Rust core
//! as the `tenure` crate and command (its facade's public API only).
//!
//! The extension owns one multi-thread tokio runtime per process, made on
//! first use (and made again in a forked child, whose copy of the parent's has
//! no threads). Sync calls run their future on it and wait with the GIL
//! released, in slices, checking for signals between slices: Ctrl-C raises
//! `KeyboardInterrupt` within a slice and drops the future (a wait in a
//! store's queue is withdrawn). Async calls return asyncio awaitables through
//! `pyo3-async-runtimes`; cancelling one drops its future the same way.

mod bag;
mod convert;
mod errors;
mod lease;
mod runtime;
mod store;
mod watch;
mod witness;

use pyo3::prelude::*;

use crate::bag::*;
use crate::convert::*;
use crate::errors::*;
use crate::lease::*;
use crate::store::*;
use crate::witness::*;

/// Parses a duration as every `ttl`/`timeout` argument does: seconds.
#[pyfunction]
fn parse_duration(value: &Bound<'_, PyAny>) -> PyResult<f64> {
    Ok(duration(value, "duration")?.as_secs_f64())
}

/// The store URLs this build opens.
#[pyfunction]
fn schemes() -> Vec<&'static str> {
    tenure::schemes()
}

/// The extension module.
#[pymodule]
fn _tenure(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_function(wrap_pyfunction!(open_async, m)?)?;
    m.add_function(wrap_pyfunction!(parse_duration, m)?)?;
    m.add_function(wrap_pyfunction!(schemes, m)?)?;
    m.add_function(wrap_pyfunction!(verify_witness, m)?)?;
    m.add_class::<Store>()?;
    m.add_class::<Client>()?;
    m.add_class::<Lease>()?;
    m.add_class::<LeaseSet>()?;
    m.add_class::<LeaseState>()?;
    m.add_class::<HolderInfo>()?;
    m.add_class::<Bag>()?;
    m.add_class::<BagWriter>()?;
    m.add_class::<BagMessage>()?;
    m.add_class::<Witness>()?;
    m.add_class::<watch::Watch>()?;
    m.add_class::<watch::LeaseChange>()?;
    for (name, ty) in [
        ("TenureError", py.get_type::<TenureError>()),
        ("ConfigError", py.get_type::<ConfigError>()),
        ("Busy", py.get_type::<Busy>()),
        ("Timeout", py.get_type::<Timeout>()),
        ("Lost", py.get_type::<Lost>()),
        ("Fenced", py.get_type::<Fenced>()),
        ("Changed", py.get_type::<Changed>()),
        ("Corrupt", py.get_type::<Corrupt>()),
        ("TokensExhausted", py.get_type::<TokensExhausted>()),
        ("Unsupported", py.get_type::<Unsupported>()),
        ("StoreUnavailable", py.get_type::<StoreUnavailable>()),
        ("Closed", py.get_type::<Closed>()),
        ("ForkedError", py.get_type::<ForkedError>()),
        ("WitnessError", py.get_type::<WitnessError>()),
    ] {
        m.add(name, ty)?;
    }
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
