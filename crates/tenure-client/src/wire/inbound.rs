//! The client's view of the answers it gets most: [`super::Response`] decoded in place,
//! grants borrowing their witness and predecessor from the frame, so that a
//! grant costs no copy of a holder the client already has. Same variants, same
//! order, same fields as the owned types (a test decodes the owned encoding).

use serde::Deserialize;
use tenure_core::EndedHow;

use super::{ErrorCode, HolderViewWire, HolderWire, MAX_BATCH, MAX_HOLDERS, MAX_LIST_PAGE, StateWire};

/// [`super::Response`], borrowed where it matters.
#[derive(Debug, Deserialize)]
#[allow(dead_code)] // decoded for their place in the enum; the client reads them as `Response`
pub(crate) enum ResponseIn<'a> {
    Hello {
        version: u16,
        public_key: [u8; 32],
        max_lease_ms: u64,
        quarantine_left_ms: u64,
        started_us: u64,
    },
    Acquired(#[serde(borrow)] AcquireReplyIn<'a>),
    Granted(#[serde(borrow, deserialize_with = "super::at_most::<_, _, MAX_BATCH>")] Vec<OutcomeIn<'a>>),
    Released(#[serde(deserialize_with = "super::at_most::<_, _, MAX_BATCH>")] Vec<bool>),
    State(Box<StateWire>),
    Names {
        #[serde(deserialize_with = "super::at_most::<_, _, MAX_LIST_PAGE>")]
        names: Vec<String>,
        more: bool,
    },
    Done,
    Pong,
    Error {
        code: ErrorCode,
        #[serde(deserialize_with = "super::quoted")]
        message: String,
    },
    Waiters(u32),
    Identity(#[serde(deserialize_with = "super::quoted")] String),
}

/// [`super::AcquireReply`].
#[derive(Debug, Deserialize)]
pub(crate) enum AcquireReplyIn<'a> {
    Granted(#[serde(borrow, deserialize_with = "super::at_most::<_, _, MAX_BATCH>")] Vec<GrantIn<'a>>),
    Busy {
        index: u32,
        #[serde(deserialize_with = "super::at_most::<_, _, MAX_HOLDERS>")]
        holders: Vec<HolderViewWire>,
        version: u64,
    },
    Quarantine {
        left_ms: u64,
    },
    Exhausted {
        index: u32,
        last_token: u64,
    },
}

/// [`super::Outcome`].
#[derive(Debug, Deserialize)]
pub(crate) enum OutcomeIn<'a> {
    Ok(#[serde(borrow)] GrantIn<'a>),
    Lost(#[serde(deserialize_with = "super::quoted")] String),
}

/// [`super::GrantWire`].
#[derive(Debug, Deserialize)]
pub(crate) struct GrantIn<'a> {
    pub(crate) token: u64,
    pub(crate) deadline_ms: u64,
    pub(crate) version: u64,
    #[serde(borrow)]
    pub(crate) predecessor: Option<PredIn<'a>>,
    #[serde(borrow)]
    pub(crate) witness: &'a [u8],
}

/// [`super::PredecessorWire`].
#[derive(Debug, Deserialize)]
pub(crate) struct PredIn<'a> {
    pub(crate) token: u64,
    #[serde(borrow)]
    pub(crate) holder: Option<HolderWire<'a>>,
    pub(crate) how: EndedHow,
    pub(crate) at_ms: u64,
    pub(crate) watermark_ms: Option<u64>,
    #[serde(borrow)]
    pub(crate) meta: Option<&'a str>,
    pub(crate) acquired_ms: Option<u64>,
    #[serde(borrow)]
    pub(crate) broken: Option<(HolderWire<'a>, Option<&'a str>)>,
}
