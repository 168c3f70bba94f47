//! Two-phase acquisition (`docs/design/all-or-nothing.md#two-phase-acquisition`):
//! reserve every lease tentatively, then upgrade
//! all. A reservation is breakable at any time by a full request for the lease,
//! and its upgrade then fails; it carries token 0 and a tentative witness, so it
//! authorizes no write.

use futures::future::join_all;
use tenure_core::{AcquireRequest, AllAttempt, Busy, Grant, LeaseName, LeaseStore, ReleaseRequest, Result, Version};

use super::{TenureStore, grant_ref};
use crate::wire::{Outcome, RefWire, Request, Response};

/// The outcome of [`TenureStore::upgrade_all`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Upgrade {
    /// Every reservation became a grant, in order.
    Upgraded(Vec<Grant>),
    /// This reservation was broken (by a full request, or it expired); nothing is
    /// held any more.
    Broken {
        /// The lease.
        name: LeaseName,
        /// What the server said.
        detail: String,
    },
}

impl TenureStore {
    /// Reserves every lease of `reqs` tentatively, or none (the first phase).
    /// A reservation carries token 0 and a tentative witness: it allows no write.
    /// Any full request for the lease breaks it; upgrade with
    /// [`TenureStore::upgrade_all`].
    pub async fn try_acquire_tentative_all(&self, reqs: &[AcquireRequest]) -> Result<AllAttempt> {
        self.acquire_all(reqs, true).await
    }

    /// Turns reservations into grants. If one was broken, releases everything
    /// (grants and reservations) and says which.
    pub async fn upgrade_all(&self, reservations: &[Grant]) -> Result<Upgrade> {
        let groups = self.by_server(self.placement().await?, reservations.iter().map(|g| g.name.as_str()));
        let outcomes = join_all(groups.iter().map(|(s, idx)| async move {
            let refs: Vec<RefWire<'_>> = idx.iter().map(|&i| grant_ref(&reservations[i])).collect();
            let sent = self.clock.mono();
            (self.call(*s, "upgrading", &Request::Upgrade(refs)).await, sent)
        }))
        .await;
        let mut upgraded: Vec<Option<Grant>> = vec![None; reservations.len()];
        let mut failure: Option<Result<(LeaseName, String)>> = None;
        for ((_, idx), (out, sent)) in groups.iter().zip(outcomes) {
            match out {
                Ok(Response::Granted(outs)) if outs.len() == idx.len() => {
                    for (&i, o) in idx.iter().zip(outs) {
                        let checked = |g: &crate::wire::GrantWire| {
                            crate::wire::check_grant(
                                g.token,
                                g.deadline_ms,
                                false,
                                g.predecessor.as_ref().map(|p| p.token),
                            )?;
                            g.predecessor.as_ref().map_or(Ok(()), |p| {
                                crate::wire::check_predecessor(p.token, p.at_ms, p.acquired_ms, p.watermark_ms)
                            })
                        };
                        match o {
                            Outcome::Ok(g) if let Err(m) = checked(&g) => {
                                failure.get_or_insert(Err(self.hostile("upgrading", m)));
                            }
                            Outcome::Ok(g) => {
                                let r = &reservations[i];
                                upgraded[i] = Some(Grant {
                                    token: g.token,
                                    deadline_ms: g.deadline_ms,
                                    local_deadline: sent + r.ttl,
                                    version: Version::seq(g.version),
                                    predecessor: g.predecessor.map(Into::into),
                                    witness: Some(g.witness),
                                    ..r.clone()
                                })
                            }
                            Outcome::Lost(detail) => {
                                failure.get_or_insert(Ok((reservations[i].name.clone(), detail)));
                            }
                        }
                    }
                }
                Ok(other) => {
                    failure.get_or_insert(Err(self.unexpected("upgrading", &other)));
                }
                Err(e) => {
                    failure.get_or_insert(Err(e));
                }
            }
        }
        let Some(failure) = failure else {
            return Ok(Upgrade::Upgraded(upgraded.into_iter().flatten().collect()));
        };
        let leftovers: Vec<Grant> =
            upgraded.into_iter().zip(reservations).map(|(u, r)| u.unwrap_or_else(|| r.clone())).collect();
        self.release_all(&leftovers, &ReleaseRequest::default()).await;
        let (name, detail) = failure?;
        Ok(Upgrade::Broken { name, detail })
    }

    /// Two-phase acquisition: reserve all, then upgrade all. Busy if a reservation
    /// was refused or broken before its upgrade; nothing is held then.
    pub async fn acquire_two_phase(&self, reqs: &[AcquireRequest]) -> Result<AllAttempt> {
        let reservations = match self.try_acquire_tentative_all(reqs).await? {
            AllAttempt::Granted(r) => r,
            busy => return Ok(busy),
        };
        match self.upgrade_all(&reservations).await? {
            Upgrade::Upgraded(grants) => Ok(AllAttempt::Granted(grants)),
            Upgrade::Broken { name, detail } => {
                let state = self.inspect(&name).await.ok();
                Ok(AllAttempt::Busy(Busy {
                    name,
                    holders: state.map(|s| s.holders).unwrap_or_default(),
                    corrupt: None,
                    version: None,
                    failure: None,
                }))
                .inspect(|_| tracing::debug!(%detail, "a reservation was broken before its upgrade"))
            }
        }
    }
}

/// `true` for a tentative grant (a reservation).
pub fn is_reservation(g: &Grant) -> bool {
    reservation_id(g).is_some()
}

pub(super) fn reservation_id(g: &Grant) -> Option<u64> {
    if g.token == 0 && g.version.tag.starts_with("reservation-") { g.version.seq } else { None }
}
