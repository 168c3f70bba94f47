//! Owned forms of what a response carries about holders, predecessors and
//! lease state, converted to and from tenure's own types.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tenure_core::{EndedHow, Holder, HolderView, Mode, Predecessor};

use super::*;

/// An owned holder (postcard cannot skip absent fields, so tenure's serde
/// attributes on [`Holder`] are not used on the wire).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HolderOwned {
    /// Correlation id.
    pub nonce: String,
    /// Process id.
    pub pid: u32,
    /// Host.
    pub host: String,
    /// User.
    pub user: String,
    /// Version.
    pub version: String,
    /// Label.
    pub label: Option<String>,
}

impl From<&Holder> for HolderOwned {
    fn from(h: &Holder) -> Self {
        Self {
            nonce: h.nonce.clone(),
            pid: h.pid,
            host: h.host.clone(),
            user: h.user.clone(),
            version: h.version.clone(),
            label: h.label.clone(),
        }
    }
}

impl From<HolderOwned> for Holder {
    fn from(h: HolderOwned) -> Self {
        Holder { nonce: h.nonce, pid: h.pid, host: h.host, user: h.user, version: h.version, label: h.label }
    }
}

impl From<HolderOwned> for Arc<Holder> {
    fn from(h: HolderOwned) -> Self {
        Arc::new(h.into())
    }
}

/// [`Predecessor`] on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PredecessorWire {
    /// Token.
    pub token: u64,
    /// Holder.
    pub holder: Option<HolderOwned>,
    /// How it ended.
    pub how: EndedHow,
    /// When.
    pub at_ms: u64,
    /// Watermark.
    pub watermark_ms: Option<u64>,
    /// Metadata.
    pub meta: Option<String>,
    /// When its grant began, on its holder's clock (version 2).
    pub acquired_ms: Option<u64>,
    /// Who broke it and why (version 2).
    pub broken: Option<(HolderOwned, Option<String>)>,
}

impl From<&Predecessor> for PredecessorWire {
    fn from(p: &Predecessor) -> Self {
        Self {
            token: p.token,
            holder: p.holder.as_deref().map(HolderOwned::from),
            how: p.how,
            at_ms: p.at_ms,
            watermark_ms: p.watermark_ms,
            meta: p.meta.clone(),
            acquired_ms: p.acquired_ms,
            broken: p.broken.as_ref().map(|b| (HolderOwned::from(&*b.by), b.reason.clone())),
        }
    }
}

impl From<PredecessorWire> for Predecessor {
    fn from(p: PredecessorWire) -> Self {
        Predecessor {
            token: p.token,
            holder: p.holder.map(Arc::from),
            how: p.how,
            at_ms: p.at_ms,
            acquired_ms: p.acquired_ms,
            watermark_ms: p.watermark_ms,
            meta: p.meta,
            broken: p.broken.map(|(by, reason)| BreakNote { by: Arc::from(by), reason }),
        }
    }
}

/// [`HolderView`] on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HolderViewWire {
    /// Holder.
    pub holder: HolderOwned,
    /// Mode.
    pub mode: Mode,
    /// Token.
    pub token: u64,
    /// Deadline.
    pub deadline_ms: u64,
    /// TTL.
    pub ttl_ms: u64,
    /// Time left, by the server's clock.
    pub expires_in_ms: u64,
    /// When the grant was made (holder's wall clock, unix ms), if known.
    pub acquired_ms: Option<u64>,
}

impl From<&HolderView> for HolderViewWire {
    fn from(v: &HolderView) -> Self {
        Self {
            holder: HolderOwned::from(&*v.holder),
            mode: v.mode,
            token: v.token,
            deadline_ms: v.deadline_ms,
            ttl_ms: v.ttl_ms,
            expires_in_ms: v.expires_in_ms,
            acquired_ms: v.acquired_ms,
        }
    }
}

impl From<HolderViewWire> for HolderView {
    fn from(v: HolderViewWire) -> Self {
        HolderView {
            holder: v.holder.into(),
            mode: v.mode,
            token: v.token,
            deadline_ms: v.deadline_ms,
            ttl_ms: v.ttl_ms,
            acquired_ms: v.acquired_ms,
            expires_in_ms: v.expires_in_ms,
        }
    }
}

/// A lease's state on the wire.
#[derive(Debug, Serialize, Deserialize)]
pub struct StateWire {
    /// Record version, if the server has a record.
    pub version: Option<u64>,
    /// Last change.
    pub modified_ms: Option<u64>,
    /// Live grants.
    #[serde(deserialize_with = "at_most::<_, _, MAX_HOLDERS>")]
    pub holders: Vec<HolderViewWire>,
    /// Expired grants not yet taken over.
    #[serde(deserialize_with = "at_most::<_, _, MAX_HOLDERS>")]
    pub expired: Vec<HolderViewWire>,
    /// Highest token.
    pub last_token: u64,
    /// Highest watermark.
    pub watermark_ms: Option<u64>,
    /// How the last grant ended.
    pub last: Option<PredecessorWire>,
}
