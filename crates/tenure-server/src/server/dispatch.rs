//! What a connection does with each request after the hello: checks its numbers
//! ([`wire::check_request`]), asks the [`crate::leases::Core`], and keeps the answer
//! (with its witnesses still to sign) for the batch.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tenure_core::limits::millis;
use tenure_core::{Holder, LeaseName};

use super::answer::{Answer, Reply, Unsent, error, granted_token};
use super::connection::{Connection, MAX_SENT_GRANTS, Queued, SentGrant};
use crate::leases::{Acquired, Ask, Parking, Refusal};
use crate::wire::{
    self, AcquireReply, BreakNoteWire, ErrorCode, HolderViewWire, HolderWire, IDENTITY_VERSION, MAX_BATCH,
    MAX_LIST_BYTES, MAX_LIST_PAGE, PredecessorWire, Request, Response, StateWire,
};

fn refusal(r: Refusal) -> (ErrorCode, String) {
    match r {
        Refusal::Quarantine(left) => (
            ErrorCode::Quarantine,
            format!("the server restarted recently and grants nothing for {}", tenure_core::human_duration(left)),
        ),
        Refusal::Invalid(m) => (ErrorCode::Invalid, m),
        Refusal::Overloaded(m) => (ErrorCode::Overloaded, m),
        Refusal::Changed => (ErrorCode::Changed, "the lease changed since it was inspected".into()),
        Refusal::Nothing(m) => (ErrorCode::Nothing, m),
        Refusal::Exhausted { last_token, .. } => {
            (ErrorCode::Invalid, format!("the lease has used up its fencing tokens (last token {last_token})"))
        }
    }
}

/// The answer to an acquisition, waited for or not.
pub(super) fn acquired(outcome: Result<Acquired, Refusal>) -> Result<Reply, (ErrorCode, String)> {
    let index = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
    Ok(Reply::Wire(Response::Acquired(match outcome {
        Ok(Acquired::Granted(gs)) => return Ok(Reply::Acquired(gs)),
        Ok(Acquired::Busy { index: i, holders, version }) => {
            AcquireReply::Busy { index: index(i), holders: holders.iter().map(HolderViewWire::from).collect(), version }
        }
        Err(Refusal::Quarantine(left)) => AcquireReply::Quarantine { left_ms: millis(left).saturating_add(1) },
        Err(Refusal::Exhausted { index: i, last_token }) => AcquireReply::Exhausted { index: index(i), last_token },
        Err(r) => return Err(refusal(r)),
    })))
}

impl Connection {
    /// `Err` naming the first of `names` that the client's server list, if it
    /// sent one, places on another server: the client placed it by something
    /// other than the servers' identities (two spellings of one list, a bug),
    /// and granting it here could grant it twice. A few hashes a name.
    pub(super) fn placed_here<'n>(&self, mut names: impl Iterator<Item = &'n str>) -> Result<(), String> {
        let Some((ids, me)) = &self.servers else { return Ok(()) };
        match names.find_map(|n| Some((n, crate::client::place(ids, n))).filter(|(_, at)| at != me)) {
            None => Ok(()),
            Some((name, at)) => Err(format!(
                "lease {name:?} belongs on server {} by the client's server list, not on this one ({}): the client \
                 placed it wrongly",
                ids[at], ids[*me]
            )),
        }
    }

    /// Starts a [`Request::Wait`]: answered at once if the lease is free (or
    /// the request is refused), otherwise queued, its answer pushed when it
    /// comes (see [`Connection::waits`]).
    pub(super) fn wait(&mut self, id: u32, req: &Request<'_>) -> Option<Answer> {
        let answer = move |outcome| match acquired(outcome) {
            Ok(resp) => Answer::new(id, resp),
            Err((code, message)) => error(id, code, message, false),
        };
        // A grant remembered under this id is an older wait's, whose answer the
        // client has seen (ids come round again): an Unwait of this id must
        // never give that one back.
        self.sent_grants.retain(|g| g.id != id);
        let Request::Wait { ask, wait_ms } = req else {
            return Some(error(id, ErrorCode::Protocol, "not a wait".into(), true));
        };
        if self.version < 3 {
            return Some(error(id, ErrorCode::Protocol, "a wait needs protocol 3".into(), true));
        }
        if let Err(m) = wire::check_request(req, millis(self.shared.core.options().max_lease)) {
            return Some(error(id, ErrorCode::Invalid, m, false));
        }
        if self.wait_ids.contains_key(&id) || self.withdrawn.contains_key(&id) {
            let m = format!("request id {id} is already waiting; a wait needs an id of its own");
            return Some(error(id, ErrorCode::Invalid, m, false));
        }
        if self.waits.len() >= wire::MAX_WAITS_PER_CONNECTION {
            let m = format!("a connection may wait for at most {} leases at once", wire::MAX_WAITS_PER_CONNECTION);
            return Some(error(id, ErrorCode::Overloaded, m, false));
        }
        if let Err(m) = self.placed_here(std::iter::once(ask.name)) {
            return Some(error(id, ErrorCode::Invalid, m, false));
        }
        let holder = match self.holder(&ask.holder) {
            Ok(h) => h,
            Err(m) => return Some(error(id, ErrorCode::Invalid, m, false)),
        };
        let ask = Ask {
            name: ask.name,
            mode: ask.mode,
            ttl_ms: ask.ttl_ms,
            holder: &holder,
            retake: ask.retake,
            meta: ask.meta,
        };
        let core = self.shared.core.clone();
        match core.acquire_or_park(&ask, Duration::from_millis(*wait_ms)) {
            Parking::Done(outcome) => {
                let answer = Unsent::arm(&core, answer(outcome), ask.name, &holder.nonce);
                self.remember_grant(&answer, ask.name.into(), holder.nonce.as_str().into());
                Some(answer)
            }
            Parking::Parked(parked) => {
                let (name, nonce): (Box<str>, Box<str>) = (ask.name.into(), holder.nonce.as_str().into());
                let (task_name, task_nonce) = (name.clone(), nonce.clone());
                let abort = self
                    .waits
                    .spawn(async move { Unsent::arm(&core, answer(parked.wait().await), &task_name, &task_nonce) });
                self.wait_ids.insert(id, Queued { abort, name, nonce });
                None
            }
        }
    }

    pub(super) fn dispatch(&mut self, req: Request<'_>) -> Result<Reply, (ErrorCode, String)> {
        let shared = self.shared.clone();
        let core = &shared.core;
        wire::check_request(&req, millis(core.options().max_lease)).map_err(|m| (ErrorCode::Invalid, m))?;
        let batch = |n: usize| {
            if n == 0 || n > MAX_BATCH {
                // Decoding keeps one item past the bound (`wire::at_most`).
                let n = if n > MAX_BATCH { format!("more than {MAX_BATCH}") } else { n.to_string() };
                Err((ErrorCode::Invalid, format!("a batch of {n} leases (1..={MAX_BATCH})")))
            } else {
                Ok(())
            }
        };
        Ok(match req {
            Request::Hello { .. } => return Err((ErrorCode::Protocol, "hello sent twice".into())),
            Request::Acquire { tentative, asks } => {
                batch(asks.len())?;
                self.placed_here(asks.iter().map(|a| a.name)).map_err(|m| (ErrorCode::Invalid, m))?;
                let holders = asks
                    .iter()
                    .map(|a| self.holder(&a.holder))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| (ErrorCode::Invalid, e))?;
                let asks: Vec<Ask<'_>> = asks
                    .iter()
                    .zip(&holders)
                    .map(|(a, holder)| Ask {
                        name: a.name,
                        mode: a.mode,
                        ttl_ms: a.ttl_ms,
                        holder,
                        retake: a.retake,
                        meta: a.meta,
                    })
                    .collect();
                return acquired(core.acquire(&asks, tentative));
            }
            Request::Wait { .. } => return Err((ErrorCode::Protocol, "a wait is answered by its connection".into())),
            Request::Unwait { id } => {
                if let Some(wait) = self.wait_ids.remove(&id) {
                    // Dropping the wait takes it out of its queue, or gives
                    // back the grant it was handed and has not sent; if it
                    // ended all the same, its grant is given back when its
                    // answer comes (see `waited`).
                    wait.abort.abort();
                    self.withdrawn.insert(id, wait);
                } else if let Some(at) = self.sent_grants.iter().position(|g| g.id == id) {
                    // Granted and sent, but the client withdrew it before it
                    // saw the grant (it drops answers to withdrawn waits):
                    // nobody will use it, nor wrote anything under it.
                    let g = self.sent_grants.remove(at).expect("found just now");
                    core.release(&g.name, g.token, None, &g.nonce, false, None, None).map_err(refusal)?;
                } else {
                    return Err((ErrorCode::Nothing, format!("no wait with request id {id} is queued")));
                }
                Response::Done
            }
            Request::Upgrade(refs) => {
                batch(refs.len())?;
                let mut out = Vec::with_capacity(refs.len());
                for r in refs {
                    let id = r.reservation.unwrap_or(0);
                    out.push(core.upgrade(r.name, id, r.nonce).map_err(refusal)?);
                }
                return Ok(Reply::Outcomes(out));
            }
            Request::Renew(items) => {
                batch(items.len())?;
                let mut out = Vec::with_capacity(items.len());
                for it in items {
                    let g = it.grant;
                    out.push(core.renew(g.name, g.token, g.reservation, g.nonce, it.ttl_ms).map_err(refusal)?);
                }
                return Ok(Reply::Outcomes(out));
            }
            Request::Release(items) => {
                batch(items.len())?;
                let mut out = Vec::with_capacity(items.len());
                for it in items {
                    let g = it.grant;
                    let released = core
                        .release(g.name, g.token, g.reservation, g.nonce, it.dropped, it.watermark_ms, it.meta)
                        .map_err(refusal)?;
                    out.push(released);
                }
                Response::Released(out)
            }
            Request::Identify | Request::Servers(_) if self.version < IDENTITY_VERSION => {
                return Err((ErrorCode::Protocol, format!("server identities need protocol {IDENTITY_VERSION}")));
            }
            Request::Identify => Response::Identity(shared.opts.server_id.clone()),
            Request::Servers(ids) => {
                let me = &*shared.opts.server_id;
                let Some(at) = ids.iter().position(|id| *id == me) else {
                    return Err((
                        ErrorCode::Invalid,
                        format!("this server ({me}) is not in the client's server list: the client has it wrong"),
                    ));
                };
                self.servers = Some((ids.iter().map(|&id| id.into()).collect(), at));
                Response::Done
            }
            Request::Waiters(name) => {
                let name = LeaseName::new(name).map_err(|e| (ErrorCode::Invalid, e.to_string()))?;
                Response::Waiters(u32::try_from(core.waiters(&name)).unwrap_or(u32::MAX))
            }
            Request::Inspect(name) => {
                let name = LeaseName::new(name).map_err(|e| (ErrorCode::Invalid, e.to_string()))?;
                let s = core.inspect(&name);
                Response::State(Box::new(StateWire {
                    version: s.version.and_then(|v| v.seq),
                    modified_ms: s.modified_ms,
                    holders: s.holders.iter().map(HolderViewWire::from).collect(),
                    expired: s.expired.iter().map(HolderViewWire::from).collect(),
                    last_token: s.last_token,
                    watermark_ms: s.watermark_ms,
                    last: s.last.as_ref().map(PredecessorWire::from),
                }))
            }
            Request::List { prefix, limit, after } => {
                let limit = usize::try_from(limit).unwrap_or(usize::MAX).clamp(1, MAX_LIST_PAGE);
                let (names, more) = core.list(prefix, after, limit, MAX_LIST_BYTES);
                Response::Names { names, more }
            }
            Request::Break { name, version, only_token, note } => {
                let note = note.map(BreakNoteWire::to_note).transpose().map_err(|m| (ErrorCode::Invalid, m))?;
                core.break_lease(name, version, only_token, note.as_ref()).map_err(refusal)?;
                Response::Done
            }
            Request::Ping => Response::Pong,
        }
        .into())
    }

    /// The end of a queued wait's task: its answer to send, or `None` if
    /// there is none or the client withdrew the wait meanwhile
    /// ([`Request::Unwait`]; a grant it got anyway is given back). A grant
    /// sent is remembered for a while, in case the client withdraws the wait
    /// before it sees the grant.
    pub(super) fn waited(&mut self, done: Result<Answer, tokio::task::JoinError>) -> Option<Answer> {
        let answer = match done {
            Ok(answer) => answer,
            // Cancelled by an Unwait (or panicked): nothing to send.
            Err(e) => {
                self.withdrawn.retain(|_, w| w.abort.id() != e.id());
                self.wait_ids.retain(|_, w| w.abort.id() != e.id());
                return None;
            }
        };
        // Withdrawn meanwhile: never sent, so dropping it gives its grant back.
        if self.withdrawn.remove(&answer.id).is_some() {
            return None;
        }
        let queued = self.wait_ids.remove(&answer.id)?;
        self.remember_grant(&answer, queued.name, queued.nonce);
        Some(answer)
    }

    /// Remembers the grant `answer` carries to a wait, if it does (see
    /// [`Connection::sent_grants`]).
    fn remember_grant(&mut self, answer: &Answer, name: Box<str>, nonce: Box<str>) {
        let Some(token) = granted_token(answer) else { return };
        if self.sent_grants.len() >= MAX_SENT_GRANTS {
            self.sent_grants.pop_front();
        }
        self.sent_grants.push_back(SentGrant { id: answer.id, name, nonce, token });
    }

    fn holder(&mut self, w: &HolderWire<'_>) -> Result<Arc<Holder>, String> {
        let same = |h: &Holder| {
            h.nonce == w.nonce
                && h.pid == w.pid
                && h.host == w.host
                && h.user == w.user
                && h.version == w.version
                && h.label.as_deref() == w.label
        };
        if let Some(h) = self.holders.iter().find(|h| same(h)) {
            return Ok(h.clone());
        }
        let h = Arc::new(w.to_holder()?);
        if self.holders.len() >= 16 {
            self.holders.remove(0);
        }
        self.holders.push(h.clone());
        Ok(h)
    }

    /// Signs every witness of the batch with one signature.
    pub(super) fn sign(&self, answers: &mut [Answer]) {
        let mut witnesses: Vec<&mut Vec<u8>> = Vec::new();
        for a in answers.iter_mut() {
            collect_witnesses(&mut a.resp, &mut witnesses);
        }
        if witnesses.is_empty() {
            return;
        }
        let stats = &self.shared.conns;
        stats.signatures.fetch_add(1, Ordering::Relaxed);
        stats.witnesses.fetch_add(witnesses.len() as u64, Ordering::Relaxed);
        self.shared.signer.sign_in_place(&mut witnesses);
    }
}

fn collect_witnesses<'a>(resp: &'a mut Reply, out: &mut Vec<&'a mut Vec<u8>>) {
    match resp {
        Reply::Acquired(gs) => out.extend(gs.iter_mut().map(|g| &mut g.witness)),
        Reply::Outcomes(os) => out.extend(os.iter_mut().filter_map(|o| o.as_mut().ok().map(|g| &mut g.witness))),
        Reply::Wire(_) => {}
    }
}
