//! A connection's answer to one request before it is encoded: the reply (grants
//! kept as the table decided them, their witnesses signed in place later) and,
//! for a grant to a waiter, the way back that gives the grant back if it is
//! never written to the client.

use std::sync::Arc;

use crate::leases::Granted;
use crate::wire::{self, AcquireReply, ErrorCode, Response};

/// A handled request whose witnesses may still need signing.
pub(super) struct Answer {
    pub(super) id: u32,
    pub(super) resp: Reply,
    pub(super) close: bool,
    /// The way back of a grant to a wait this answer carries (see [`Unsent`]).
    pub(super) unsent: Option<Unsent>,
}

impl Answer {
    pub(super) fn new(id: u32, resp: Reply) -> Self {
        Self { id, resp, close: false, unsent: None }
    }
}

/// An answer before encoding. Grants stay as the table decided them (their
/// witnesses are signed in place, then encoded straight from them).
pub(super) enum Reply {
    Wire(Response),
    /// `Response::Acquired(AcquireReply::Granted(..))`.
    Acquired(Vec<Granted>),
    /// `Response::Granted(..)`: renewals and upgrades.
    Outcomes(Vec<Result<Granted, String>>),
}

/// Encoded size of a holder at most: five strings of up to 256 bytes and a pid.
const HOLDER_BYTES: usize = 5 * (wire::MAX_HOLDER_FIELD + 2) + 16;
/// A witness's signature and Merkle path (a batch holds up to 2^19 witnesses).
const SIGNATURE_BYTES: usize = 64 + 1 + 19 * 33;

impl Reply {
    /// About how many bytes the answer takes once encoded (an upper bound for
    /// what matters: holders, names, grants), without encoding it.
    pub(super) fn size_hint(&self) -> usize {
        let grant = |g: &Granted| {
            let pred = g
                .predecessor
                .as_ref()
                .map_or(0, |p| p.holder.as_ref().map_or(0, |_| HOLDER_BYTES) + p.meta.as_ref().map_or(0, String::len));
            g.witness.len() + SIGNATURE_BYTES + pred + 64
        };
        let views = |n: usize| n.saturating_mul(HOLDER_BYTES + 48);
        match self {
            Reply::Acquired(gs) => gs.iter().map(grant).sum(),
            Reply::Outcomes(os) => os.iter().map(|o| o.as_ref().map_or(64, grant)).sum(),
            Reply::Wire(r) => match r {
                Response::State(s) => views(s.holders.len() + s.expired.len()) + 2 * HOLDER_BYTES,
                Response::Names { names, .. } => names.iter().map(|n| n.len() + 2).sum::<usize>() + 16,
                Response::Acquired(AcquireReply::Busy { holders, .. }) => views(holders.len()) + 16,
                Response::Released(v) => v.len() + 16,
                Response::Error { message, .. } => message.len() + 16,
                _ => 128,
            },
        }
    }
}

pub(super) fn error(id: u32, code: ErrorCode, message: String, close: bool) -> Answer {
    Answer { close, ..Answer::new(id, Reply::Wire(Response::Error { code, message })) }
}

impl From<Response> for Reply {
    fn from(r: Response) -> Self {
        Reply::Wire(r)
    }
}

/// The token of the grant an answer to a wait carries, if it is one.
pub(super) fn granted_token(answer: &Answer) -> Option<u64> {
    match &answer.resp {
        Reply::Acquired(gs) => gs.first().map(|g| g.token),
        _ => None,
    }
}

/// A grant to a waiter that is not yet written to its connection: dropped
/// before [`Unsent::sent`] (the connection failed or closed first, the wait
/// was withdrawn, its task's answer was never collected), it gives the grant
/// back at once, so that a waiter that is gone never holds the lease for its
/// TTL. Nothing was written under it: it ends as released, not dropped (no
/// watermark raised to its deadline). Once the whole frame of its answer is
/// written it is the client's, even if the connection fails after.
pub(super) struct Unsent {
    core: Arc<crate::Core>,
    name: Box<str>,
    nonce: Box<str>,
    token: u64,
    armed: bool,
}

impl Unsent {
    /// Arms `answer` with the way back of the grant it carries, if it carries one.
    pub(super) fn arm(core: &Arc<crate::Core>, mut answer: Answer, name: &str, nonce: &str) -> Answer {
        if let Some(token) = granted_token(&answer) {
            answer.unsent =
                Some(Self { core: core.clone(), name: name.into(), nonce: nonce.into(), token, armed: true });
        }
        answer
    }

    /// The grant was written to the client: it is the client's now.
    pub(super) fn sent(mut self) {
        self.armed = false;
    }
}

impl Drop for Unsent {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.core.release(&self.name, self.token, None, &self.nonce, false, None, None);
        }
    }
}
