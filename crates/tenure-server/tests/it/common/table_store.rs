//! [`LeaseStore`] straight over the lease table ([`Core`]), in process: what a
//! `tenure://` client would answer, without the wire, the connection tasks or the
//! server's periodic sweep (call [`Core::sweep`] to have one).
//!
//! Answers go through the same translations as on the wire (the server's
//! dispatch, then the client): a refusal becomes the error, or for the
//! quarantine the busy answer, that `TenureStore` returns for it; grants and
//! states become `Grant` and `LeaseState` as the client builds them, without
//! witnesses (nothing is signed here).

use std::sync::Arc;

use async_trait::async_trait;
use tenure_core::limits::millis;
use tenure_core::{
    AcquireRequest, AllAttempt, Attempt, BreakNote, Busy, Clock, Error, Grant, Holder, HolderView, LeaseName,
    LeaseState, LeaseStore, LossReason, Mode, ReleaseRequest, Released, Result, Version,
};
use tenure_server::Core;
use tenure_server::leases::{Acquired, Ask, Granted, Refusal};

/// The table as a [`LeaseStore`].
#[derive(Debug)]
pub struct TableStore {
    core: Arc<Core>,
    url: String,
}

impl TableStore {
    /// A store over `core`, judged by the core's clock.
    pub fn new(core: Arc<Core>) -> Self {
        Self { core, url: "tenure://table".into() }
    }

    /// The table.
    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// An error answer, as the client turns each error code into an error.
    fn refused(&self, op: &str, name: &str, r: Refusal) -> Error {
        match r {
            Refusal::Invalid(reason) => Error::InvalidOptions { reason },
            Refusal::Changed => Error::Changed { store: self.url.clone(), name: name.to_string() },
            Refusal::Nothing(m) => Error::unsupported(&self.url, format!("{op}: {m}")),
            Refusal::Exhausted { last_token, .. } => {
                Error::TokensExhausted { store: self.url.clone(), name: name.to_string(), last_token }
            }
            Refusal::Quarantine(left) => Error::store(&self.url, op, format!("quarantine for {left:?}")),
            Refusal::Overloaded(m) => Error::store(&self.url, op, m),
        }
    }

    fn acquire(&self, reqs: &[&AcquireRequest]) -> Result<std::result::Result<Vec<Grant>, Busy>> {
        let asks: Vec<Ask<'_>> = reqs
            .iter()
            .map(|r| Ask {
                name: r.name.as_str(),
                mode: r.mode,
                ttl_ms: millis(r.ttl),
                holder: &r.holder,
                retake: r.retake,
                meta: r.meta.as_deref(),
            })
            .collect();
        let sent = self.core.clock().mono();
        match self.core.acquire(&asks, false) {
            Ok(Acquired::Granted(gs)) => Ok(Ok(gs
                .into_iter()
                .zip(reqs)
                .map(|(g, r)| {
                    let Granted { token, deadline_ms, version, predecessor, .. } = g;
                    Grant {
                        name: r.name.clone(),
                        mode: r.mode,
                        token,
                        ttl: r.ttl,
                        deadline_ms,
                        local_deadline: sent + r.ttl,
                        holder: r.holder.clone(),
                        predecessor,
                        version: Version::seq(version),
                        witness: None,
                    }
                })
                .collect())),
            Ok(Acquired::Busy { index, holders, version }) => Ok(Err(Busy {
                name: reqs[index].name.clone(),
                holders,
                corrupt: None,
                version: Some(Version::seq(version)),
                failure: None,
            })),
            // The client shows the quarantine as a holder that blocks every name.
            Err(Refusal::Quarantine(left)) => {
                let holder = Holder {
                    nonce: "quarantine".into(),
                    pid: 0,
                    host: "table".into(),
                    user: "tenure-serve".into(),
                    version: String::new(),
                    label: Some("restart quarantine".into()),
                };
                let left_ms = millis(left).saturating_add(1);
                let view = HolderView {
                    holder: Arc::new(holder),
                    mode: Mode::Exclusive,
                    token: 0,
                    deadline_ms: self.core.clock().wall_ms().saturating_add(left_ms),
                    ttl_ms: left_ms,
                    acquired_ms: None,
                    expires_in_ms: left_ms,
                };
                Ok(Err(Busy {
                    name: reqs[0].name.clone(),
                    holders: vec![view],
                    corrupt: None,
                    version: None,
                    failure: None,
                }))
            }
            Err(r) => {
                let index = match r {
                    Refusal::Exhausted { index, .. } => index,
                    _ => 0,
                };
                Err(self.refused("acquiring", reqs[index.min(reqs.len() - 1)].name.as_str(), r))
            }
        }
    }
}

#[async_trait]
impl LeaseStore for TableStore {
    fn url(&self) -> &str {
        &self.url
    }

    fn clock(&self) -> &Arc<dyn Clock> {
        self.core.clock()
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Attempt> {
        Ok(match self.acquire(&[req])? {
            Ok(mut grants) => Attempt::Granted(grants.pop().expect("one grant for one ask")),
            Err(busy) => Attempt::Busy(busy),
        })
    }

    async fn try_acquire_all(&self, reqs: &[AcquireRequest]) -> Result<AllAttempt> {
        let reqs: Vec<&AcquireRequest> = reqs.iter().collect();
        Ok(match self.acquire(&reqs)? {
            Ok(grants) => AllAttempt::Granted(grants),
            Err(busy) => AllAttempt::Busy(busy),
        })
    }

    async fn renew(&self, grant: &Grant) -> Result<Grant> {
        let sent = self.core.clock().mono();
        let name = grant.name.as_str();
        // The client reports any error answer to a renewal as a store error.
        match self.core.renew(name, grant.token, None, &grant.holder.nonce, millis(grant.ttl)) {
            Ok(Ok(g)) => Ok(Grant {
                deadline_ms: g.deadline_ms,
                local_deadline: sent + grant.ttl,
                version: Version::seq(g.version),
                witness: None,
                ..grant.clone()
            }),
            Ok(Err(detail)) => Err(Error::Lost {
                store: self.url.clone(),
                name: name.to_string(),
                token: grant.token,
                reason: LossReason::Stolen { detail },
            }),
            Err(r) => Err(Error::store(&self.url, "renewing", self.refused("renewing", name, r).to_string())),
        }
    }

    async fn release(&self, grant: &Grant, req: &ReleaseRequest) -> Result<Released> {
        let name = grant.name.as_str();
        let out = self.core.release(
            name,
            grant.token,
            None,
            &grant.holder.nonce,
            req.dropped,
            req.watermark_ms,
            req.meta.as_deref(),
        );
        // As for renewals, any error answer is a store error to the client.
        match out {
            Ok(true) => Ok(Released::Released),
            Ok(false) => Ok(Released::NotHeld),
            Err(r) => Err(Error::store(&self.url, "releasing", self.refused("releasing", name, r).to_string())),
        }
    }

    async fn inspect(&self, name: &LeaseName) -> Result<LeaseState> {
        Ok(self.core.inspect(name))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LeaseName>> {
        let (names, _) = self.core.list(prefix, None, usize::MAX, usize::MAX);
        names.into_iter().map(LeaseName::new).collect()
    }

    async fn break_lease(&self, seen: &LeaseState, only_token: Option<u64>, note: Option<&BreakNote>) -> Result<()> {
        let name = seen.name.as_str();
        let Some(version) = seen.version.as_ref().and_then(|v| v.seq) else {
            return Err(Error::unsupported(
                &self.url,
                format!("lease {name:?} does not exist; there is nothing to break"),
            ));
        };
        self.core.break_lease(name, version, only_token, note).map_err(|r| self.refused("breaking", name, r))
    }
}
