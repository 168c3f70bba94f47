//! One store as the test sees it: what it answered and what `inspect` shows,
//! with its tokens replaced by the grants they belong to (the two stores
//! number tokens differently), and the checks that its tokens only grow.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tenure_core::{
    EndedHow, Error, Grant, Holder, HolderView, LeaseName, LeaseState, LeaseStore, ManualClock, Mode, Mono,
    Predecessor, Released,
};

use super::{HOLDERS, NAMES};

/// A token, as the grant of this test it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok {
    /// No token (a name never granted).
    Zero,
    /// The token of the test's grant number `n`.
    Grant(usize),
    /// A token of no grant this test made.
    Other,
}

#[derive(Debug, PartialEq, Eq)]
pub(super) struct View {
    token: Tok,
    holder: usize,
    mode: Mode,
    deadline_ms: u64,
    ttl_ms: u64,
    acquired_ms: Option<u64>,
    expires_in_ms: u64,
}

#[derive(Debug, PartialEq, Eq)]
pub(super) struct Pred {
    token: Tok,
    holder: Option<usize>,
    how: EndedHow,
    at_ms: u64,
    acquired_ms: Option<u64>,
    watermark_ms: Option<u64>,
    meta: Option<String>,
    broken: Option<(usize, Option<String>)>,
}

#[derive(Debug, PartialEq, Eq)]
pub(super) struct GrantView {
    name: String,
    holder: usize,
    mode: Mode,
    deadline_ms: u64,
    local_deadline: Mono,
    ttl: Duration,
    predecessor: Option<Pred>,
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Answer {
    Granted(Vec<GrantView>),
    Busy {
        name: String,
        holders: Vec<View>,
    },
    Renewed {
        deadline_ms: u64,
        local_deadline: Mono,
    },
    Released(Released),
    Broken,
    Refused(&'static str),
    /// Nothing to do (no grant to renew or release yet).
    Skipped,
}

#[derive(Debug, PartialEq, Eq)]
pub(super) struct State {
    exists: bool,
    holders: Vec<View>,
    expired: Vec<View>,
    last_token: Tok,
    watermark_ms: Option<u64>,
    last: Option<Pred>,
    pub(super) modified_ms: Option<u64>,
}

fn kind(e: &Error) -> &'static str {
    match e {
        Error::InvalidName { .. } => "InvalidName",
        Error::InvalidStore { .. } => "InvalidStore",
        Error::InvalidOptions { .. } => "InvalidOptions",
        Error::Busy { .. } => "Busy",
        Error::Timeout { .. } => "Timeout",
        Error::Lost { .. } => "Lost",
        Error::Fenced { .. } => "Fenced",
        Error::Changed { .. } => "Changed",
        Error::Corrupt { .. } => "Corrupt",
        Error::TokensExhausted { .. } => "TokensExhausted",
        Error::Unsupported { .. } => "Unsupported",
        Error::Store { .. } => "Store",
        Error::Closed { .. } => "Closed",
        _ => "other",
    }
}

fn holder_index(h: &Holder) -> usize {
    HOLDERS.iter().position(|n| *n == h.nonce).unwrap_or(usize::MAX)
}
/// One store, with what the test knows of its tokens.
pub(super) struct Side {
    pub(super) what: &'static str,
    pub(super) store: Arc<dyn LeaseStore>,
    pub(super) clock: ManualClock,
    /// The grant each token of each name belongs to.
    pub(super) grants: HashMap<(String, u64), usize>,
    /// Highest token seen under each name (granted, or `last_token` inspected).
    pub(super) high: HashMap<String, u64>,
    /// Each name's state after each step (the first: before any).
    pub(super) states: Vec<HashMap<&'static str, LeaseState>>,
}

impl Side {
    fn tok(&self, name: &str, token: u64) -> Tok {
        if token == 0 {
            return Tok::Zero;
        }
        self.grants.get(&(name.to_string(), token)).map_or(Tok::Other, |&n| Tok::Grant(n))
    }

    fn view(&self, name: &str, v: &HolderView) -> View {
        View {
            token: self.tok(name, v.token),
            holder: holder_index(&v.holder),
            mode: v.mode,
            deadline_ms: v.deadline_ms,
            ttl_ms: v.ttl_ms,
            acquired_ms: v.acquired_ms,
            expires_in_ms: v.expires_in_ms,
        }
    }

    fn pred(&self, name: &str, p: &Predecessor) -> Pred {
        Pred {
            token: self.tok(name, p.token),
            holder: p.holder.as_deref().map(holder_index),
            how: p.how,
            at_ms: p.at_ms,
            acquired_ms: p.acquired_ms,
            watermark_ms: p.watermark_ms,
            meta: p.meta.clone(),
            broken: p.broken.as_ref().map(|b| (holder_index(&b.by), b.reason.clone())),
        }
    }

    /// Checks a new grant's token against everything this store granted before
    /// under its name, and notes it as grant `n`.
    pub(super) fn note_grant(&mut self, g: &Grant, n: usize) -> Result<(), String> {
        let name = g.name.to_string();
        let high = self.high.get(&name).copied().unwrap_or(0);
        if g.token <= high {
            return Err(format!("{}: token {} of {name:?} is not above {high}, an earlier token", self.what, g.token));
        }
        if let Some(p) = g.predecessor.as_ref().filter(|p| p.token >= g.token) {
            return Err(format!(
                "{}: token {} of {name:?} is not above its predecessor's {}",
                self.what, g.token, p.token
            ));
        }
        self.high.insert(name.clone(), g.token);
        self.grants.insert((name, g.token), n);
        Ok(())
    }

    fn grant_view(&self, g: &Grant) -> GrantView {
        GrantView {
            name: g.name.to_string(),
            holder: holder_index(&g.holder),
            mode: g.mode,
            deadline_ms: g.deadline_ms,
            local_deadline: g.local_deadline,
            ttl: g.ttl,
            predecessor: g.predecessor.as_ref().map(|p| self.pred(g.name.as_str(), p)),
        }
    }

    fn busy(&self, b: &tenure_core::Busy) -> Answer {
        let name = b.name.as_str();
        Answer::Busy { name: name.to_string(), holders: b.holders.iter().map(|v| self.view(name, v)).collect() }
    }

    /// Inspects every name, checks that no token went backwards, and keeps the states.
    pub(super) async fn inspect_all(&mut self) -> Result<Vec<State>, String> {
        let mut states = HashMap::new();
        let mut out = Vec::new();
        for name in NAMES {
            let s = self
                .store
                .inspect(&LeaseName::new(name).expect("name"))
                .await
                .map_err(|e| format!("{}: inspect {name:?}: {e}", self.what))?;
            let high = self.high.get(name).copied().unwrap_or(0);
            if s.last_token < high {
                return Err(format!(
                    "{}: last_token {} of {name:?} is below {high}, a token seen before",
                    self.what, s.last_token
                ));
            }
            self.high.insert(name.to_string(), s.last_token);
            out.push(State {
                exists: s.version.is_some(),
                holders: s.holders.iter().map(|v| self.view(name, v)).collect(),
                expired: s.expired.iter().map(|v| self.view(name, v)).collect(),
                last_token: self.tok(name, s.last_token),
                watermark_ms: s.watermark_ms,
                last: s.last.as_ref().map(|p| self.pred(name, p)),
                modified_ms: s.modified_ms,
            });
            states.insert(name, s);
        }
        self.states.push(states);
        Ok(out)
    }
}

/// What one store did.
#[derive(Debug)]
pub(super) enum Raw {
    Granted(Vec<Grant>),
    Busy(tenure_core::Busy),
    /// Grant number `.0`, renewed.
    Renewed(usize, Grant),
    Released(Released),
    Broken,
    Failed(Error),
    Skipped,
}

impl Side {
    pub(super) fn answer(&self, raw: &Raw) -> Answer {
        match raw {
            Raw::Granted(gs) => Answer::Granted(gs.iter().map(|g| self.grant_view(g)).collect()),
            Raw::Busy(b) => self.busy(b),
            Raw::Renewed(_, g) => Answer::Renewed { deadline_ms: g.deadline_ms, local_deadline: g.local_deadline },
            Raw::Released(r) => Answer::Released(*r),
            Raw::Broken => Answer::Broken,
            Raw::Failed(e) => Answer::Refused(kind(e)),
            Raw::Skipped => Answer::Skipped,
        }
    }
}
