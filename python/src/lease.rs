//! Held leases: one (`Lease`) or several together (`LeaseSet`).

use std::future::Future;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use tenure::{Health, Mode, Released};

use crate::convert::*;
use crate::errors::*;
use crate::runtime::*;

/// What a held lease shows and how it ends, shared by `Lease` and `LeaseSet`.
pub(crate) enum Handle {
    One(tenure::Lease),
    Set(tenure::LeaseSet),
}

impl Handle {
    fn health(&self) -> Health {
        match self {
            Handle::One(l) => l.health(),
            Handle::Set(s) => s.health(),
        }
    }
    fn health_watch(&self) -> tokio::sync::watch::Receiver<Health> {
        match self {
            Handle::One(l) => l.health_watch(),
            Handle::Set(s) => s.health_watch(),
        }
    }
    async fn release(self) -> tenure::Result<Released> {
        match self {
            Handle::One(l) => l.release().await,
            Handle::Set(s) => s.release().await,
        }
    }
}

/// The state a Python lease object keeps: the handle until released.
pub(crate) struct Held {
    handle: Mutex<Option<Handle>>,
    health: tokio::sync::watch::Receiver<Health>,
    clock: Arc<dyn tenure::Clock>,
    pid: u32,
}

impl Held {
    fn new(handle: Handle, clock: Arc<dyn tenure::Clock>) -> Self {
        let health = handle.health_watch();
        Self { handle: Mutex::new(Some(handle)), health, clock, pid: std::process::id() }
    }

    fn take(&self) -> Option<Handle> {
        self.handle.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn health(&self) -> Health {
        match &*self.handle.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(h) => h.health(),
            None => Health::Lost(tenure::LossReason::Released),
        }
    }

    fn reason(&self) -> Option<String> {
        match self.health() {
            Health::Lost(reason) => Some(reason.to_string()),
            _ => None,
        }
    }

    fn time_left(&self) -> f64 {
        match self.health() {
            Health::Held { stop_by } | Health::AtRisk { stop_by, .. } => {
                stop_by.saturating_since(self.clock.mono()).as_secs_f64()
            }
            Health::Lost(_) => 0.0,
        }
    }

    fn health_name(&self) -> &'static str {
        match self.health() {
            Health::Held { .. } => "held",
            Health::AtRisk { .. } => "at_risk",
            Health::Lost(_) => "lost",
        }
    }

    /// Waits until lost: the reason (a released lease counts as lost).
    fn lost_future(&self) -> impl Future<Output = String> + Send + 'static {
        let lost = self.loss();
        async move { lost.await.to_string() }
    }

    fn loss(&self) -> impl Future<Output = tenure::LossReason> + Send + 'static {
        let mut rx = self.health.clone();
        async move {
            loop {
                if let Health::Lost(reason) = &*rx.borrow_and_update() {
                    return reason.clone();
                }
                if rx.changed().await.is_err() {
                    return match &*rx.borrow() {
                        Health::Lost(reason) => reason.clone(),
                        _ => tenure::LossReason::Released,
                    };
                }
            }
        }
    }

    fn wait_lost(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
        same_process(self.pid, "lease")?;
        let timeout = opt_duration(timeout, "timeout")?;
        let lost = self.lost_future();
        block_on(py, async move {
            match timeout {
                Some(t) => tokio::time::timeout(t, lost).await.ok(),
                None => Some(lost.await),
            }
        })
    }

    fn on_lost(&self, callback: Py<PyAny>) -> PyResult<()> {
        same_process(self.pid, "lease")?;
        let lost = self.loss();
        runtime()?.spawn(async move {
            let reason = lost.await;
            // A release is the holder's own doing, not a loss to be told of.
            if reason == tenure::LossReason::Released {
                return;
            }
            let reason = reason.to_string();
            // On a thread of its own, outside the runtime: the callback may
            // call tenure's blocking methods.
            std::thread::spawn(move || {
                Python::attach(|py| {
                    if let Err(e) = callback.call1(py, (reason,)) {
                        e.write_unraisable(py, Some(callback.bind(py)));
                    }
                })
            });
        });
        Ok(())
    }

    fn release(&self, py: Python<'_>) -> PyResult<bool> {
        same_process(self.pid, "lease")?;
        let Some(handle) = self.take() else { return Ok(false) };
        let out = block_on(py, handle.release())?.map_err(to_py)?;
        Ok(out == Released::Released)
    }

    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        same_process(self.pid, "lease")?;
        let handle = self.take();
        awaitable(py, async move {
            match handle {
                Some(h) => Ok(h.release().await.map_err(to_py)? == Released::Released),
                None => Ok(false),
            }
        })
    }
}

/// A held lease. Use it as a context manager (`with client.acquire(...) as
/// lease:`) or call `release()`; it keeps itself alive (renewing in the
/// background) until then. Pass `token` to the storage you protect as a
/// fence, and stop acting when `lost` turns true.
#[pyclass(module = "tenure", frozen)]
pub(crate) struct Lease {
    held: Held,
    grant: tenure::Grant,
}

impl Lease {
    pub(crate) fn new(lease: tenure::Lease, clock: Arc<dyn tenure::Clock>) -> Self {
        let grant = lease.grant();
        Self { held: Held::new(Handle::One(lease), clock), grant }
    }
}

#[pymethods]
impl Lease {
    /// The lease name.
    #[getter]
    fn name(&self) -> String {
        self.grant.name.to_string()
    }

    /// The fencing token: strictly greater than every earlier grant's of this name.
    #[getter]
    fn token(&self) -> u64 {
        self.grant.token
    }

    /// Whether this is a shared lease.
    #[getter]
    fn shared(&self) -> bool {
        self.grant.mode == Mode::Shared
    }

    /// The deadline written into the store at acquisition (a UTC `datetime`;
    /// the server's clock for `tenure://`). Renewals push it back.
    #[getter]
    fn deadline(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        utc(py, self.grant.deadline_ms)
    }

    /// Who holds it: this client's identity.
    #[getter]
    fn holder(&self) -> String {
        self.grant.holder.to_string()
    }

    /// The signed witness of the grant, from stores that sign (the lease server).
    #[getter]
    fn witness(&self) -> Option<Vec<u8>> {
        self.grant.witness.clone()
    }

    /// The predecessor's token, if there was one.
    #[getter]
    fn predecessor_token(&self) -> Option<u64> {
        self.grant.predecessor.as_ref().map(|p| p.token)
    }

    /// Whether the lease is lost (or released): stop acting on it.
    #[getter]
    fn lost(&self) -> bool {
        self.held.health().is_lost()
    }

    /// Why it was lost, or None while held.
    #[getter]
    fn loss_reason(&self) -> Option<String> {
        self.held.reason()
    }

    /// `"held"`, `"at_risk"` (renewals failing, still ours) or `"lost"`.
    #[getter]
    fn health(&self) -> &'static str {
        self.held.health_name()
    }

    /// Seconds left to act before the deadline less the safety margin (0 when lost).
    #[getter]
    fn time_left(&self) -> f64 {
        self.held.time_left()
    }

    /// Blocks until the lease is lost, up to `timeout`: the reason, or None
    /// if it is still held then. The GIL is released while waiting.
    #[pyo3(signature = (timeout=None))]
    fn wait_lost(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
        self.held.wait_lost(py, timeout)
    }

    /// Awaits the loss of the lease: the reason.
    fn wait_lost_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        same_process(self.held.pid, "lease")?;
        let lost = self.held.lost_future();
        awaitable(py, async move { Ok(lost.await) })
    }

    /// Calls `callback(reason)` once, from a thread of its own, if the lease
    /// is lost (not when it is released).
    fn on_lost(&self, callback: Py<PyAny>) -> PyResult<()> {
        self.held.on_lost(callback)
    }

    /// Releases the lease: True, or False if it had already ended (expired and
    /// taken over, broken, or released before).
    fn release(&self, py: Python<'_>) -> PyResult<bool> {
        self.held.release(py)
    }

    /// Like `release`, awaitable.
    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.held.release_async(py)
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.held.release(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("<tenure.Lease {:?} token {} {}>", self.grant.name.as_str(), self.grant.token, self.held.health_name())
    }
}

/// Several leases held together (`Client.acquire_all`), kept alive by one task.
#[pyclass(module = "tenure", frozen)]
pub(crate) struct LeaseSet {
    held: Held,
    grants: Vec<tenure::Grant>,
}

impl LeaseSet {
    pub(crate) fn new(set: tenure::LeaseSet, clock: Arc<dyn tenure::Clock>) -> Self {
        let grants = set.grants().as_ref().clone();
        Self { held: Held::new(Handle::Set(set), clock), grants }
    }
}

#[pymethods]
impl LeaseSet {
    /// Each lease's fencing token, by name.
    #[getter]
    fn tokens<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for g in &self.grants {
            out.set_item(g.name.as_str(), g.token)?;
        }
        Ok(out)
    }

    /// The names, in canonical order.
    #[getter]
    fn names(&self) -> Vec<String> {
        self.grants.iter().map(|g| g.name.to_string()).collect()
    }

    /// Whether any lease of the set is lost (or the set released).
    #[getter]
    fn lost(&self) -> bool {
        self.held.health().is_lost()
    }

    /// Why it was lost, or None while held.
    #[getter]
    fn loss_reason(&self) -> Option<String> {
        self.held.reason()
    }

    /// `"held"`, `"at_risk"` or `"lost"`.
    #[getter]
    fn health(&self) -> &'static str {
        self.held.health_name()
    }

    /// Seconds left to act (0 when lost).
    #[getter]
    fn time_left(&self) -> f64 {
        self.held.time_left()
    }

    /// Blocks until a lease of the set is lost, up to `timeout`: the reason or None.
    #[pyo3(signature = (timeout=None))]
    fn wait_lost(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
        self.held.wait_lost(py, timeout)
    }

    /// Calls `callback(reason)` once, from a thread of its own, if a lease of
    /// the set is lost (not when the set is released).
    fn on_lost(&self, callback: Py<PyAny>) -> PyResult<()> {
        self.held.on_lost(callback)
    }

    /// Releases every lease of the set: True, or False if one had already ended.
    fn release(&self, py: Python<'_>) -> PyResult<bool> {
        self.held.release(py)
    }

    /// Like `release`, awaitable.
    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.held.release_async(py)
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.held.release(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("<tenure.LeaseSet {:?} {}>", self.names(), self.held.health_name())
    }
}
