//! Witnesses: the lease server's signed statements of its grants, verified
//! offline with its public key (what `tenure serve` prints and `GET /pubkey`
//! serves). A party that is handed a witness (the storage a holder writes to,
//! an auditor) checks it without asking the server.

use pyo3::create_exception;
use pyo3::prelude::*;
use tenure::remote::witness::{self, WitnessKind};

use crate::convert::utc;
use crate::errors::TenureError;

create_exception!(
    tenure,
    WitnessError,
    TenureError,
    "Witness bytes that are malformed, or do not verify with the public key given."
);

/// What a verified witness attests: a grant (or renewal, tentative grant,
/// upgrade) of a lease by the lease server, signed with its key.
#[pyclass(module = "tenure", frozen, get_all)]
pub(crate) struct Witness {
    /// What it attests: "grant", "renewal", "tentative" or "upgrade".
    kind: &'static str,
    /// Whether a holder may write under it (a tentative grant may not).
    authorizes_writes: bool,
    /// The lease name.
    name: String,
    /// "exclusive" or "shared".
    mode: String,
    /// The grant's fencing token.
    token: u64,
    /// The deadline after which the grant is void, in unix ms (server clock).
    deadline_ms: u64,
    /// The server's time when it decided, in µs since the unix epoch.
    server_time_us: u64,
    /// The holder's nonce: the grant's correlation id.
    holder_nonce: String,
    /// The predecessor's fencing token, if the name was held before.
    predecessor_token: Option<u64>,
    /// Upper bound of every timestamp written under the name before this grant.
    predecessor_watermark_ms: Option<u64>,
}

#[pymethods]
impl Witness {
    /// The deadline as a UTC `datetime`.
    #[getter]
    fn deadline(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        utc(py, self.deadline_ms)
    }

    fn __repr__(&self) -> String {
        format!(
            "Witness(kind={:?}, name={:?}, mode={:?}, token={}, deadline_ms={})",
            self.kind, self.name, self.mode, self.token, self.deadline_ms
        )
    }
}

/// Verifies `witness` (a lease's `witness` bytes) against the server's
/// ed25519 public key — 32 bytes, or the 64 hex digits `tenure serve` prints —
/// and returns what it attests. Raises `WitnessError` if the key is not a
/// valid key, the bytes are not a witness, or the signature does not verify.
#[pyfunction]
pub(crate) fn verify_witness(public_key: &Bound<'_, PyAny>, witness: &[u8]) -> PyResult<Witness> {
    let key: Vec<u8> = if let Ok(hex) = public_key.extract::<String>() {
        witness::public_key_from_hex(&hex).map_err(err)?.to_vec()
    } else {
        public_key.extract::<Vec<u8>>()?
    };
    let w = witness::verify(&key, witness).map_err(err)?;
    Ok(Witness {
        kind: match w.kind {
            WitnessKind::Grant => "grant",
            WitnessKind::Renewal => "renewal",
            WitnessKind::Tentative => "tentative",
            WitnessKind::Upgrade => "upgrade",
        },
        authorizes_writes: w.kind.authorizes_writes(),
        mode: w.mode.to_string(),
        token: w.token,
        deadline_ms: w.deadline_ms,
        server_time_us: w.server_time_us,
        holder_nonce: w.holder_nonce,
        predecessor_token: w.predecessor.as_ref().map(|p| p.token),
        predecessor_watermark_ms: w.predecessor.as_ref().and_then(|p| p.watermark_ms),
        name: w.name,
    })
}

fn err(e: witness::WitnessError) -> PyErr {
    WitnessError::new_err(e.to_string())
}
