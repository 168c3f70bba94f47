//! [`TenureStore`] as a [`LeaseStore`]: each operation sent to the server that
//! owns its names, and the answers read back into grants.

use super::*;

/// A grant to a wait whose caller gave up before it was returned (dropped
/// while it was renewed): released on its connection without waiting, so that
/// the lease does not stay held by nobody until its TTL (as released: nothing
/// was written under it).
pub(super) struct GiveBack<'a> {
    pub(super) conn: &'a Conn,
    pub(super) grant: &'a Grant,
}

impl Drop for GiveBack<'_> {
    fn drop(&mut self) {
        let release = ReleaseWire { grant: grant_ref(self.grant), dropped: false, watermark_ms: None, meta: None };
        self.conn.send_unanswered(&Request::Release(vec![release]));
    }
}

/// "unexpected answer …", quoting at most [`wire::MAX_QUOTED`] bytes of it.
pub(super) fn unexpected_answer(resp: &impl std::fmt::Debug) -> String {
    format!("unexpected answer {}", crate::clipped(&format!("{resp:?}")))
}

pub(super) fn grant_ref(g: &Grant) -> RefWire<'_> {
    RefWire { name: g.name.as_str(), token: g.token, reservation: reservation_id(g), nonce: &g.holder.nonce }
}

/// A grant from the wire, its numbers checked (`Err` names the one out of range).
pub(super) fn grant(
    r: &AcquireRequest,
    g: GrantIn<'_>,
    sent: Mono,
    tentative: bool,
) -> std::result::Result<Grant, String> {
    wire::check_grant(g.token, g.deadline_ms, tentative, g.predecessor.as_ref().map(|p| p.token))?;
    if let Some(p) = &g.predecessor {
        wire::check_predecessor(p.token, p.at_ms, p.acquired_ms, p.watermark_ms)?;
    }
    let version = if tentative {
        Version { tag: format!("reservation-{}", g.version), seq: Some(g.version) }
    } else {
        Version::seq(g.version)
    };
    Ok(Grant {
        name: r.name.clone(),
        mode: r.mode,
        token: g.token,
        ttl: r.ttl,
        deadline_ms: g.deadline_ms,
        local_deadline: sent + r.ttl,
        holder: r.holder.clone(),
        predecessor: g.predecessor.map(|p| predecessor(p, &r.holder)),
        version,
        witness: Some(g.witness.to_vec()),
    })
}

/// A predecessor from the wire. Its holder is very often the asker itself (a
/// process re-taking a lease it released), whose identity is shared, not copied.
fn predecessor(p: PredIn<'_>, asker: &Arc<Holder>) -> Predecessor {
    let holder = p.holder.map(|h| {
        let same = h.nonce == asker.nonce
            && h.pid == asker.pid
            && h.host == asker.host
            && h.user == asker.user
            && h.version == asker.version
            && h.label == asker.label.as_deref();
        if same {
            asker.clone()
        } else {
            Arc::new(Holder {
                nonce: h.nonce.to_string(),
                pid: h.pid,
                host: h.host.to_string(),
                user: h.user.to_string(),
                version: h.version.to_string(),
                label: h.label.map(str::to_string),
            })
        }
    });
    Predecessor {
        token: p.token,
        holder,
        how: p.how,
        at_ms: p.at_ms,
        acquired_ms: p.acquired_ms,
        watermark_ms: p.watermark_ms,
        meta: p.meta.map(str::to_string),
        // A note the client cannot take (oversized) is dropped, not fatal: it is
        // for people, and the grant is valid without it.
        broken: p.broken.and_then(|(by, reason)| BreakNoteWire { by, reason }.to_note().ok()),
    }
}

#[async_trait]
impl LeaseStore for TenureStore {
    fn url(&self) -> &str {
        &self.url
    }

    fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    async fn acquire_queued(&self, req: &AcquireRequest, wait: Duration) -> Option<Result<Attempt>> {
        self.wait_on(req, wait).await
    }

    async fn try_acquire(&self, req: &AcquireRequest) -> Result<Attempt> {
        let server = self.locate(req.name.as_str()).await?;
        match self.acquire_on(server, &[req], false).await? {
            Ok(mut grants) => {
                grants.pop().map(Attempt::Granted).ok_or_else(|| Error::store(&self.url, "acquiring", "no grant"))
            }
            Err((_, busy)) => Ok(Attempt::Busy(busy)),
        }
    }

    async fn renew(&self, grant: &Grant) -> Result<Grant> {
        self.renew_all(std::slice::from_ref(grant))
            .await
            .pop()
            .unwrap_or_else(|| Err(Error::store(&self.url, "renewing", "no answer")))
    }

    async fn release(&self, grant: &Grant, req: &ReleaseRequest) -> Result<Released> {
        // `release_all` of one grant, without its grouping and joining.
        let server = match self.locate(grant.name.as_str()).await {
            Ok(server) => server,
            Err(e) => return Err(Error::store(&self.url, "releasing", e.to_string())),
        };
        match self.release_on(server, &[0], std::slice::from_ref(grant), req).await {
            Ok(Response::Released(flags)) if flags.len() == 1 => {
                Ok(if flags[0] { Released::Released } else { Released::NotHeld })
            }
            Ok(other) => Err(self.unexpected("releasing", &other)),
            Err(e) => Err(Error::store(&self.url, "releasing", e.to_string())),
        }
    }

    async fn inspect(&self, name: &LeaseName) -> Result<LeaseState> {
        let server = self.locate(name.as_str()).await?;
        match self.call(server, "inspecting", &Request::Inspect(name.as_str())).await? {
            Response::State(s) if let Err(m) = wire::check_state(&s) => Err(self.hostile("inspecting", m)),
            Response::State(s) => Ok(LeaseState {
                name: name.clone(),
                version: s.version.map(Version::seq),
                modified_ms: s.modified_ms,
                holders: s.holders.into_iter().map(Into::into).collect(),
                expired: s.expired.into_iter().map(Into::into).collect(),
                last_token: s.last_token,
                watermark_ms: s.watermark_ms,
                last: s.last.map(Into::into),
                corrupt: None,
            }),
            other => Err(self.unexpected("inspecting", &other)),
        }
    }

    async fn waiting(&self, name: &LeaseName) -> Result<Option<usize>> {
        let server = self.locate(name.as_str()).await?;
        let e = &self.endpoints[server];
        self.conn(e).await?;
        // A server before protocol 4 cannot say.
        if e.info.lock().as_ref().is_none_or(|i| i.protocol < 4) {
            return Ok(None);
        }
        match self.call(server, "counting waiters", &Request::Waiters(name.as_str())).await? {
            Response::Waiters(n) => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
            other => Err(self.unexpected("counting waiters", &other)),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<LeaseName>> {
        let answers = join_all((0..self.endpoints.len()).map(|s| self.list_on(s, prefix))).await;
        let mut names = Vec::new();
        for a in answers {
            names.extend(a?);
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    async fn break_lease(&self, seen: &LeaseState, only_token: Option<u64>, note: Option<&BreakNote>) -> Result<()> {
        let name = seen.name.as_str();
        let Some(version) = seen.version.as_ref().and_then(|v| v.seq) else {
            return Err(Error::unsupported(
                &self.url,
                format!("lease {name:?} does not exist; there is nothing to break"),
            ));
        };
        let req = Request::Break { name, version, only_token, note: note.map(BreakNoteWire::of) };
        match self.call(self.locate(name).await?, "breaking", &req).await {
            Ok(Response::Done) => Ok(()),
            Ok(other) => Err(self.unexpected("breaking", &other)),
            Err(Error::Changed { .. }) => Err(Error::Changed { store: self.url.clone(), name: name.to_string() }),
            Err(e) => Err(e),
        }
    }

    async fn try_acquire_all(&self, reqs: &[AcquireRequest]) -> Result<AllAttempt> {
        self.acquire_all(reqs, false).await
    }

    async fn renew_all(&self, grants: &[Grant]) -> Vec<Result<Grant>> {
        let placement = match self.placement().await {
            Ok(p) => p,
            Err(e) => return grants.iter().map(|_| Err(Error::store(&self.url, "renewing", e.to_string()))).collect(),
        };
        let groups = self.by_server(placement, grants.iter().map(|g| g.name.as_str()));
        // One server (one grant, usually): no join machinery.
        let answers = if let [(srv, idx)] = groups.as_slice() {
            vec![self.renew_on(*srv, idx, grants).await]
        } else {
            join_all(groups.iter().map(|(srv, idx)| self.renew_on(*srv, idx, grants))).await
        };
        let mut out: Vec<Option<Result<Grant>>> = grants.iter().map(|_| None).collect();
        for ((_, idx), (answer, sent)) in groups.iter().zip(answers) {
            let body = match answer {
                Ok(body) => body,
                Err(e) => {
                    let msg = e.to_string();
                    idx.iter().for_each(|&i| out[i] = Some(Err(Error::store(&self.url, "renewing", msg.clone()))));
                    continue;
                }
            };
            match self.decode_in("renewing", &body) {
                Ok(ResponseIn::Granted(outs)) if outs.len() == idx.len() => {
                    for (&i, o) in idx.iter().zip(outs) {
                        let g = &grants[i];
                        out[i] = Some(match o {
                            OutcomeIn::Ok(w)
                                if let Err(m) = wire::check_grant(w.token, w.deadline_ms, is_reservation(g), None) =>
                            {
                                Err(self.hostile("renewing", m))
                            }
                            // The server renews the grant asked for, under its token.
                            OutcomeIn::Ok(w) if w.token != g.token => Err(self.hostile(
                                "renewing",
                                format!("the renewal of token {} came back for token {}", g.token, w.token),
                            )),
                            OutcomeIn::Ok(w) => Ok(Grant {
                                name: g.name.clone(),
                                mode: g.mode,
                                token: g.token,
                                ttl: g.ttl,
                                deadline_ms: w.deadline_ms,
                                local_deadline: sent + g.ttl,
                                holder: g.holder.clone(),
                                predecessor: g.predecessor.clone(),
                                version: if is_reservation(g) { g.version.clone() } else { Version::seq(w.version) },
                                witness: Some(w.witness.to_vec()),
                            }),
                            OutcomeIn::Lost(detail) => Err(Error::Lost {
                                store: self.url.clone(),
                                name: g.name.to_string(),
                                token: g.token,
                                reason: LossReason::Stolen { detail },
                            }),
                        });
                    }
                }
                Ok(other) => {
                    let msg = unexpected_answer(&other);
                    idx.iter().for_each(|&i| out[i] = Some(Err(Error::store(&self.url, "renewing", msg.clone()))));
                }
                // A renewal the server refuses as invalid (an older server's
                // answer to a duration above its --max-lease, after a restart
                // with a lower one) is refused again however often it is sent:
                // the grant will not be renewed, so it is lost now, not after
                // a passing outage's retries.
                Err(Error::InvalidOptions { reason }) => {
                    for &i in idx {
                        out[i] = Some(Err(Error::Lost {
                            store: self.url.clone(),
                            name: grants[i].name.to_string(),
                            token: grants[i].token,
                            reason: LossReason::Stolen { detail: format!("the server refuses to renew it: {reason}") },
                        }));
                    }
                }
                Err(e) => {
                    let msg = e.to_string();
                    idx.iter().for_each(|&i| out[i] = Some(Err(Error::store(&self.url, "renewing", msg.clone()))));
                }
            }
        }
        out.into_iter().map(|o| o.unwrap_or_else(|| Err(Error::store(&self.url, "renewing", "no answer")))).collect()
    }

    async fn release_all(&self, grants: &[Grant], req: &ReleaseRequest) -> Vec<Result<Released>> {
        let placement = match self.placement().await {
            Ok(p) => p,
            Err(e) => return grants.iter().map(|_| Err(Error::store(&self.url, "releasing", e.to_string()))).collect(),
        };
        let groups = self.by_server(placement, grants.iter().map(|g| g.name.as_str()));
        let answers = if let [(srv, idx)] = groups.as_slice() {
            vec![self.release_on(*srv, idx, grants, req).await]
        } else {
            join_all(groups.iter().map(|(srv, idx)| self.release_on(*srv, idx, grants, req))).await
        };
        let mut out: Vec<Option<Result<Released>>> = grants.iter().map(|_| None).collect();
        for ((_, idx), answer) in groups.iter().zip(answers) {
            match answer {
                Ok(Response::Released(flags)) if flags.len() == idx.len() => {
                    for (&i, held) in idx.iter().zip(flags) {
                        out[i] = Some(Ok(if held { Released::Released } else { Released::NotHeld }));
                    }
                }
                Ok(other) => {
                    let msg = unexpected_answer(&other);
                    idx.iter().for_each(|&i| out[i] = Some(Err(Error::store(&self.url, "releasing", msg.clone()))));
                }
                Err(e) => {
                    let msg = e.to_string();
                    idx.iter().for_each(|&i| out[i] = Some(Err(Error::store(&self.url, "releasing", msg.clone()))));
                }
            }
        }
        out.into_iter().map(|o| o.unwrap_or_else(|| Err(Error::store(&self.url, "releasing", "no answer")))).collect()
    }
}
