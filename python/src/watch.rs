//! `Client.watch`: who holds a lease now, then one change at a time — a
//! blocking iterator over the same stream as `tenure watch` and the Rust
//! `Client::watch`.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;

use crate::errors::to_py;
use crate::runtime::{block_on, same_process};
use crate::store::LeaseState;

type Changes = Pin<Box<dyn Stream<Item = tenure::Result<tenure::Holding>> + Send>>;

/// An iterator of a lease's changes: the first is `"current"` (its state
/// when the watch began), then `"acquired"`, `"taken_over"`, `"released"`,
/// `"broken"`, `"expired"`, `"renewed_late"`, `"ended"`, `"corrupt"`. Each
/// `next()` waits for the next change with the GIL released (Ctrl-C raises
/// `KeyboardInterrupt`); a failed read of the store raises its error, and
/// the iterator may be used again after it.
#[pyclass(module = "tenure", frozen)]
pub(crate) struct Watch {
    changes: Arc<tokio::sync::Mutex<Changes>>,
    pid: u32,
}

impl Watch {
    pub(crate) fn new(changes: Changes) -> Self {
        Self { changes: Arc::new(tokio::sync::Mutex::new(changes)), pid: std::process::id() }
    }
}

#[pymethods]
impl Watch {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<LeaseChange> {
        same_process(self.pid, "watch")?;
        let changes = self.changes.clone();
        let next = block_on(py, async move { changes.lock().await.next().await })?;
        match next {
            Some(Ok(h)) => LeaseChange::new(py, h),
            Some(Err(e)) => Err(to_py(e)),
            None => Err(PyStopIteration::new_err(())),
        }
    }
}

/// One change of a watched lease.
#[pyclass(module = "tenure", frozen, get_all)]
pub(crate) struct LeaseChange {
    /// What changed: "current", "acquired", "taken_over", "released", "broken",
    /// "expired", "renewed_late", "ended" or "corrupt".
    change: &'static str,
    /// The token of the grant it is about (None for "current" and "corrupt").
    token: Option<u64>,
    /// That grant's holder, if the watcher saw it in the record.
    holder: Option<String>,
    /// Who broke it, and why, for "broken".
    broken_by: Option<String>,
    /// The lease's state as read.
    state: Py<LeaseState>,
    /// When it was seen, in unix ms (this machine's clock).
    seen_ms: u64,
}

impl LeaseChange {
    fn new(py: Python<'_>, h: tenure::Holding) -> PyResult<Self> {
        let broken_by = h.ended.as_ref().and_then(|p| p.broken.as_ref()).map(|b| match &b.reason {
            Some(r) => format!("{} ({r})", b.by),
            None => b.by.to_string(),
        });
        let holder = h.grant.as_ref().map(|g| g.holder.to_string());
        let state = Py::new(py, LeaseState::from(h.state))?;
        Ok(Self { change: h.change.as_str(), token: h.token, holder, broken_by, state, seen_ms: h.seen_ms })
    }
}

#[pymethods]
impl LeaseChange {
    fn __repr__(&self) -> String {
        format!("LeaseChange(change={:?}, token={:?}, holder={:?})", self.change, self.token, self.holder)
    }
}
