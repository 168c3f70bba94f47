//! Closable bags: writers, readers, closing.

use std::collections::BTreeMap;

use pyo3::prelude::*;

use crate::errors::*;
use crate::runtime::*;

/// A closable bag of timestamped messages on a directory or an object store
/// (`tenure bag`): many writers append, anyone closes a bucket once past its
/// grace, and every reader agrees on which messages count.
#[pyclass(module = "tenure", frozen)]
pub(crate) struct Bag {
    log: tenure_bag::Log,
    pid: u32,
}

/// One message of a bag, as `Bag.read` returns it.
#[pyclass(module = "tenure", frozen, get_all)]
pub(crate) struct BagMessage {
    /// Timestamp (ms since the epoch): its place in the order.
    ts_ms: u64,
    /// The writer's id.
    writer: String,
    /// Sequence number within the writer.
    seq: u64,
    /// The payload.
    payload: Vec<u8>,
}

#[pymethods]
impl BagMessage {
    fn __repr__(&self) -> String {
        format!("<tenure.BagMessage {} {}#{} ({} bytes)>", self.ts_ms, self.writer, self.seq, self.payload.len())
    }
}

/// A writer of a bag (`Bag.writer`): its appends are numbered in order.
#[pyclass(module = "tenure", frozen)]
pub(crate) struct BagWriter {
    writer: tenure_bag::Writer,
    pid: u32,
}

#[pymethods]
impl BagWriter {
    /// Appends `payload` stamped now: True if it was accepted (durably in its
    /// bucket, and counted by the bucket's close), False if rejected (the
    /// bucket was closed first). Either answer is certain.
    fn append(&self, py: Python<'_>, payload: Vec<u8>) -> PyResult<bool> {
        same_process(self.pid, "bag writer")?;
        let writer = self.writer.clone();
        let outcome = block_on(py, async move { writer.append_now(payload).await })?.map_err(to_py)?;
        Ok(outcome.accepted)
    }
}

#[pymethods]
impl Bag {
    /// The bag at `url` (a directory or `s3://`, `gs://`, `az://`), with the
    /// store's settings in `options`.
    #[new]
    #[pyo3(signature = (url, *, options=None))]
    fn new(url: String, options: Option<BTreeMap<String, String>>) -> PyResult<Self> {
        let opts = tenure_bag::BagOptions { params: options.unwrap_or_default(), ..Default::default() };
        let log = tenure_bag::Log::open(&url, opts).map_err(to_py)?;
        Ok(Self { log, pid: std::process::id() })
    }

    /// A writer named `id` (letters, digits, `_`, `-`; unique among live
    /// writers); None makes a unique one.
    #[pyo3(signature = (id=None))]
    fn writer(&self, id: Option<String>) -> PyResult<BagWriter> {
        same_process(self.pid, "bag")?;
        let id = id.unwrap_or_else(|| tenure_bag::Writer::unique_id("py"));
        Ok(BagWriter { writer: self.log.writer(id).map_err(to_py)?, pid: std::process::id() })
    }

    /// The messages between `from_ms` and `to_ms` (ms since the epoch; default
    /// the whole bag), in (timestamp, writer, sequence) order. Messages of
    /// buckets not closed yet are provisional.
    #[pyo3(signature = (from_ms=None, to_ms=None))]
    fn read(&self, py: Python<'_>, from_ms: Option<u64>, to_ms: Option<u64>) -> PyResult<Vec<BagMessage>> {
        same_process(self.pid, "bag")?;
        let log = self.log.clone();
        let opts = tenure_bag::ReadOptions { from_ms, to_ms, ..Default::default() };
        let rt = runtime()?;
        // Made on this thread (the read's future is not `Send`); every storage
        // operation of a read has a deadline, so it is waited for whole.
        let read = py.detach(move || rt.block_on(async move { log.read(&opts).await })).map_err(to_py)?;
        Ok(read
            .messages
            .into_iter()
            .map(|m| BagMessage {
                ts_ms: m.ts_ms,
                writer: m.writer.to_string(),
                seq: m.seq,
                payload: m.payload.to_vec(),
            })
            .collect())
    }

    /// Closes the bucket that starts at `bucket_ms` (once it is past its
    /// grace; idempotent): True if this call published its manifest.
    fn close(&self, py: Python<'_>, bucket_ms: u64) -> PyResult<bool> {
        same_process(self.pid, "bag")?;
        let log = self.log.clone();
        let report = block_on(py, async move { log.close(bucket_ms).await })?.map_err(to_py)?;
        Ok(report.published)
    }

    fn __repr__(&self) -> String {
        format!("<tenure.Bag {}>", self.log.url())
    }
}
