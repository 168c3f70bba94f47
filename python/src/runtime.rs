//! The extension's tokio runtime (one per process, made again after fork),
//! and running futures on it from sync and asyncio callers.

use std::cell::OnceCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3_async_runtimes::TaskLocals;
use pyo3_async_runtimes::generic::{self, ContextExt};
use tokio::runtime::Runtime;

use crate::errors::*;

/// How long a sync call waits with the GIL released before it looks for signals.
pub(crate) const SLICE: Duration = Duration::from_millis(50);

/// This process's runtime: made on first use, and again in a forked child
/// (the parent's copy has no threads there; it is left alone, never dropped).
pub(crate) static RUNTIME: Mutex<Option<(u32, &'static Runtime)>> = Mutex::new(None);

pub(crate) fn runtime() -> PyResult<&'static Runtime> {
    let mut slot = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    if let Some((p, rt)) = *slot
        && p == pid
    {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("tenure")
        .build()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start tenure's async runtime: {e}")))?;
    let rt: &'static Runtime = Box::leak(Box::new(rt));
    *slot = Some((pid, rt));
    Ok(rt)
}

/// The runtime asyncio awaitables run on: this process's (see [`runtime`]).
pub(crate) struct Rt;

tokio::task_local! {
    static LOCALS: OnceCell<TaskLocals>;
}

impl generic::Runtime for Rt {
    type JoinError = tokio::task::JoinError;
    type JoinHandle = tokio::task::JoinHandle<()>;

    fn spawn<F>(fut: F) -> Self::JoinHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        // `awaitable` made the runtime before it came here.
        match runtime() {
            Ok(rt) => rt.spawn(fut),
            Err(_) => tokio::spawn(fut),
        }
    }

    fn spawn_blocking<F>(f: F) -> Self::JoinHandle
    where
        F: FnOnce() + Send + 'static,
    {
        match runtime() {
            Ok(rt) => rt.spawn_blocking(f),
            Err(_) => tokio::task::spawn_blocking(f),
        }
    }
}

impl ContextExt for Rt {
    fn scope<F, R>(locals: TaskLocals, fut: F) -> Pin<Box<dyn Future<Output = R> + Send>>
    where
        F: Future<Output = R> + Send + 'static,
    {
        let cell = OnceCell::new();
        let _ = cell.set(locals);
        Box::pin(LOCALS.scope(cell, fut))
    }

    fn get_task_locals() -> Option<TaskLocals> {
        LOCALS.try_with(|c| c.get().cloned()).unwrap_or_default()
    }
}

/// `fut` as an asyncio awaitable; cancelling it drops `fut`.
pub(crate) fn awaitable<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    runtime()?;
    generic::future_into_py::<Rt, _, T>(py, fut)
}

/// Runs `fut` to completion on the calling thread, in the runtime (its
/// tasks, such as a lease's keep-alive, go to the runtime's threads), with the
/// GIL released; every [`SLICE`] it takes the GIL back to look for signals: a
/// signal handler's exception (Ctrl-C's `KeyboardInterrupt`) drops the future
/// and is raised. Polling on the calling thread saves two thread hand-overs a
/// call against spawning the future and waiting for its answer.
pub(crate) fn block_on<T, F>(py: Python<'_>, fut: F) -> PyResult<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let rt = runtime()?;
    let mut fut = Box::pin(fut);
    loop {
        let (out, back) = py.detach(move || {
            let out = rt.block_on(async { tokio::time::timeout(SLICE, fut.as_mut()).await.ok() });
            (out, fut)
        });
        fut = back;
        if let Some(out) = out {
            return Ok(out);
        }
        if let Err(e) = py.check_signals() {
            // Dropped in the runtime: what it held is given back by tasks.
            let _in_runtime = rt.enter();
            drop(fut);
            return Err(e);
        }
    }
}

/// Refuses an object made in another process (before a fork).
pub(crate) fn same_process(pid: u32, what: &str) -> PyResult<()> {
    let now = std::process::id();
    if now == pid {
        return Ok(());
    }
    Err(ForkedError::new_err(format!(
        "this {what} was made in process {pid}, not in this one ({now}): a lease is not inherited across fork(); \
         open the store and acquire again in the child"
    )))
}
