//! Opening a store, and the client that takes leases and inspects them.

use std::collections::BTreeMap;
use std::sync::Arc;

use pyo3::prelude::*;
use tenure::{BreakNote, LeaseStore, OpenOptions};

use crate::convert::*;
use crate::errors::*;
use crate::lease::*;
use crate::runtime::*;

/// An opened lease store: a directory, `s3://`, `gs://`, `az://`,
/// `tenure://`, `etcd://` or `memory://`, as the command takes it.
#[pyclass(module = "tenure", frozen)]
pub(crate) struct Store {
    inner: Arc<dyn LeaseStore>,
    pid: u32,
}

#[pymethods]
impl Store {
    /// The store's URL (without secrets).
    #[getter]
    fn url(&self) -> String {
        self.inner.url().to_string()
    }

    fn __repr__(&self) -> String {
        format!("<tenure.Store {}>", self.inner.url())
    }
}

pub(crate) fn open_options(create: bool, read_only: bool, options: Option<BTreeMap<String, String>>) -> OpenOptions {
    OpenOptions { create, read_only, params: options.unwrap_or_default(), ..OpenOptions::default() }
}

/// Opens the store `url` names (a path without a scheme is a directory).
/// `options` are the store's settings, as in the URL's query (they win key
/// by key); `create` makes a directory store's root.
#[pyfunction]
#[pyo3(signature = (url, *, create=false, read_only=false, options=None))]
pub(crate) fn open(
    py: Python<'_>,
    url: String,
    create: bool,
    read_only: bool,
    options: Option<BTreeMap<String, String>>,
) -> PyResult<Store> {
    let opts = open_options(create, read_only, options);
    let store = block_on(py, async move { tenure::open(&url, &opts).await })?.map_err(to_py)?;
    Ok(Store { inner: store, pid: std::process::id() })
}

/// Like `open`, awaitable.
#[pyfunction]
#[pyo3(signature = (url, *, create=false, read_only=false, options=None))]
pub(crate) fn open_async(
    py: Python<'_>,
    url: String,
    create: bool,
    read_only: bool,
    options: Option<BTreeMap<String, String>>,
) -> PyResult<Bound<'_, PyAny>> {
    let opts = open_options(create, read_only, options);
    awaitable(py, async move {
        let store = tenure::open(&url, &opts).await.map_err(to_py)?;
        Ok(Store { inner: store, pid: std::process::id() })
    })
}

/// A holder's handle on a store: one holder identity, many leases.
#[pyclass(module = "tenure", frozen)]
pub(crate) struct Client {
    inner: tenure::Client,
    store: Py<Store>,
    pid: u32,
}

#[pymethods]
impl Client {
    /// A client of `store`, with this process's identity (host, pid, user) and
    /// a fresh nonce; `label` is shown to other holders (e.g. a CI job URL).
    #[new]
    #[pyo3(signature = (store, *, label=None))]
    fn new(store: Bound<'_, Store>, label: Option<String>) -> PyResult<Self> {
        let s = store.get();
        same_process(s.pid, "store")?;
        let mut holder = tenure::Holder::current();
        if let Some(label) = label {
            holder = holder.with_label(label);
        }
        let inner = tenure::Client::with_holder(s.inner.clone(), holder);
        Ok(Self { inner, store: store.unbind(), pid: std::process::id() })
    }

    /// The store.
    #[getter]
    fn store(&self, py: Python<'_>) -> Py<Store> {
        self.store.clone_ref(py)
    }

    /// This client's holder identity, as other holders see it.
    #[getter]
    fn holder(&self) -> String {
        self.inner.holder().to_string()
    }

    /// Acquires `name` once, without waiting: raises `Busy` if it is held.
    #[pyo3(signature = (name, *, ttl=None, shared=false, renew_every=None, meta=None, slots=None))]
    #[allow(clippy::too_many_arguments)]
    fn try_acquire(
        &self,
        py: Python<'_>,
        name: String,
        ttl: Option<&Bound<'_, PyAny>>,
        shared: bool,
        renew_every: Option<&Bound<'_, PyAny>>,
        meta: Option<String>,
        slots: Option<u32>,
    ) -> PyResult<Lease> {
        same_process(self.pid, "client")?;
        let opts = lease_options(ttl, None, shared, renew_every, meta, slots)?.no_wait();
        let client = self.inner.clone();
        let clock = client.store().clock().clone();
        let lease = block_on(py, async move { client.try_acquire(&name, &opts).await })?.map_err(to_py)?;
        Ok(Lease::new(lease, clock))
    }

    /// Acquires `name`, waiting up to `timeout` (None: for ever): raises
    /// `Timeout` if it is still held then. Ctrl-C while waiting raises
    /// `KeyboardInterrupt` and leaves no grant behind.
    #[pyo3(signature = (name, *, ttl=None, timeout=None, shared=false, renew_every=None, meta=None, slots=None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &self,
        py: Python<'_>,
        name: String,
        ttl: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        shared: bool,
        renew_every: Option<&Bound<'_, PyAny>>,
        meta: Option<String>,
        slots: Option<u32>,
    ) -> PyResult<Lease> {
        same_process(self.pid, "client")?;
        let opts = lease_options(ttl, timeout, shared, renew_every, meta, slots)?;
        let client = self.inner.clone();
        let clock = client.store().clock().clone();
        let lease = block_on(py, async move { client.acquire(&name, &opts).await })?.map_err(to_py)?;
        Ok(Lease::new(lease, clock))
    }

    /// Like `acquire`, awaitable; cancelling it withdraws the wait.
    #[pyo3(signature = (name, *, ttl=None, timeout=None, shared=false, renew_every=None, meta=None, slots=None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire_async<'py>(
        &self,
        py: Python<'py>,
        name: String,
        ttl: Option<&Bound<'py, PyAny>>,
        timeout: Option<&Bound<'py, PyAny>>,
        shared: bool,
        renew_every: Option<&Bound<'py, PyAny>>,
        meta: Option<String>,
        slots: Option<u32>,
    ) -> PyResult<Bound<'py, PyAny>> {
        same_process(self.pid, "client")?;
        let opts = lease_options(ttl, timeout, shared, renew_every, meta, slots)?;
        let client = self.inner.clone();
        let clock = client.store().clock().clone();
        awaitable(py, async move {
            let lease = client.acquire(&name, &opts).await.map_err(to_py)?;
            Ok(Lease::new(lease, clock))
        })
    }

    /// Acquires every one of `names`, all or nothing, under one timeout (in
    /// canonical order, so sets never wait on each other in a circle).
    #[pyo3(signature = (names, *, ttl=None, timeout=None, shared=false, renew_every=None, meta=None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire_all(
        &self,
        py: Python<'_>,
        names: Vec<String>,
        ttl: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        shared: bool,
        renew_every: Option<&Bound<'_, PyAny>>,
        meta: Option<String>,
    ) -> PyResult<LeaseSet> {
        same_process(self.pid, "client")?;
        let opts = lease_options(ttl, timeout, shared, renew_every, meta, None)?;
        let client = self.inner.clone();
        let clock = client.store().clock().clone();
        let set = block_on(py, async move { client.acquire_all(&names, &opts).await })?.map_err(to_py)?;
        Ok(LeaseSet::new(set, clock))
    }

    /// Like `acquire_all`, awaitable.
    #[pyo3(signature = (names, *, ttl=None, timeout=None, shared=false, renew_every=None, meta=None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire_all_async<'py>(
        &self,
        py: Python<'py>,
        names: Vec<String>,
        ttl: Option<&Bound<'py, PyAny>>,
        timeout: Option<&Bound<'py, PyAny>>,
        shared: bool,
        renew_every: Option<&Bound<'py, PyAny>>,
        meta: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        same_process(self.pid, "client")?;
        let opts = lease_options(ttl, timeout, shared, renew_every, meta, None)?;
        let client = self.inner.clone();
        let clock = client.store().clock().clone();
        awaitable(py, async move {
            let set = client.acquire_all(&names, &opts).await.map_err(to_py)?;
            Ok(LeaseSet::new(set, clock))
        })
    }

    /// Watches `name`: an iterator of its changes, the first its state now
    /// (`tenure watch`). Pushed where the store watches keys (a directory,
    /// etcd), read every `poll` elsewhere.
    #[pyo3(signature = (name, *, poll=None))]
    fn watch(&self, name: String, poll: Option<&Bound<'_, PyAny>>) -> PyResult<crate::watch::Watch> {
        same_process(self.pid, "client")?;
        let poll = crate::convert::opt_duration(poll, "poll")?.unwrap_or(std::time::Duration::from_secs(1));
        if poll.is_zero() {
            return Err(ConfigError::new_err("poll must be longer than zero"));
        }
        let changes = self.inner.watch(&name, poll).map_err(to_py)?;
        Ok(crate::watch::Watch::new(Box::pin(changes)))
    }

    /// What the store holds for `name` now, read without writing (`tenure status`).
    fn inspect(&self, py: Python<'_>, name: String) -> PyResult<LeaseState> {
        same_process(self.pid, "client")?;
        let client = self.inner.clone();
        let state = block_on(py, async move { client.inspect(&name).await })?.map_err(to_py)?;
        Ok(LeaseState::from(state))
    }

    /// Names of the leases under `prefix`.
    #[pyo3(signature = (prefix=String::new()))]
    fn list(&self, py: Python<'_>, prefix: String) -> PyResult<Vec<String>> {
        same_process(self.pid, "client")?;
        let client = self.inner.clone();
        let names = block_on(py, async move { client.list(&prefix).await })?.map_err(to_py)?;
        Ok(names.iter().map(|n| n.to_string()).collect())
    }

    /// Breaks `name` as it is now (every grant, or only `token`'s), noting
    /// `reason` for `status` and the next holder (`tenure break`). Returns the
    /// tokens it broke.
    #[pyo3(signature = (name, *, token=None, reason=None))]
    fn break_(&self, py: Python<'_>, name: String, token: Option<u64>, reason: Option<String>) -> PyResult<Vec<u64>> {
        same_process(self.pid, "client")?;
        let client = self.inner.clone();
        let note = BreakNote { by: client.holder().clone(), reason };
        let broke = block_on(py, async move {
            let seen = client.inspect(&name).await?;
            let tokens: Vec<u64> =
                seen.holders.iter().map(|h| h.token).filter(|t| token.is_none_or(|only| only == *t)).collect();
            if tokens.is_empty() {
                return Ok(tokens);
            }
            // A renewal by the holder in between is looked past (see `break_as_seen`).
            tenure::store::break_as_seen(&**client.store(), seen, token, Some(&note)).await.map(|_| tokens)
        })?;
        broke.map_err(to_py)
    }

    fn __repr__(&self) -> String {
        format!("<tenure.Client {} as {}>", self.inner.store().url(), self.inner.holder())
    }
}

/// One holder in `LeaseState.holders`.
#[pyclass(module = "tenure", frozen, get_all)]
pub(crate) struct HolderInfo {
    /// Who, as humans read it.
    holder: String,
    /// `"exclusive"` or `"shared"`.
    mode: String,
    /// Its fencing token.
    token: u64,
    /// Its deadline (ms since the epoch, as written).
    deadline_ms: u64,
    /// Longest it may take to be taken over if never renewed (seconds).
    expires_in: f64,
}

#[pymethods]
impl HolderInfo {
    fn __repr__(&self) -> String {
        format!("<tenure.HolderInfo {} {} token {}>", self.holder, self.mode, self.token)
    }
}

/// A lease record as it is now (`Client.inspect`).
#[pyclass(module = "tenure", frozen, get_all)]
pub(crate) struct LeaseState {
    /// The lease name.
    name: String,
    /// Live holders.
    holders: Vec<Py<HolderInfo>>,
    /// Highest token granted so far.
    last_token: u64,
    /// Highest published watermark (ms since the epoch), if any.
    watermark_ms: Option<u64>,
    /// What is wrong with an unreadable record.
    corrupt: Option<String>,
    /// How the last grant ended (`"released"`, `"expired"`, …), if known.
    last_ended: Option<String>,
}

impl From<tenure::LeaseState> for LeaseState {
    fn from(s: tenure::LeaseState) -> Self {
        Python::attach(|py| Self {
            name: s.name.to_string(),
            holders: s
                .holders
                .iter()
                .filter_map(|h| {
                    Py::new(
                        py,
                        HolderInfo {
                            holder: h.holder.to_string(),
                            mode: h.mode.to_string(),
                            token: h.token,
                            deadline_ms: h.deadline_ms,
                            expires_in: h.expires_in_ms as f64 / 1000.0,
                        },
                    )
                    .ok()
                })
                .collect(),
            last_token: s.last_token,
            watermark_ms: s.watermark_ms,
            corrupt: s.corrupt,
            last_ended: s.last.map(|p| p.how.to_string()),
        })
    }
}

#[pymethods]
impl LeaseState {
    fn __repr__(&self) -> String {
        format!("<tenure.LeaseState {:?}: {} holder(s), last token {}>", self.name, self.holders.len(), self.last_token)
    }
}
