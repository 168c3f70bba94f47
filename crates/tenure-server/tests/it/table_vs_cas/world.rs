//! The two stores side by side: each generated operation runs on both, then
//! their answers, states and listings are compared; where the table retires a
//! record, the same grants are ended in the CAS store's.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::table_store::TableStore;
use tenure_core::record::{self, LeaseRecord};
use tenure_core::{
    AcquireRequest, AllAttempt, Attempt, Backend, BreakNote, CasOptions, CasStore, Clock, EndedHow, Error, Grant,
    Holder, HolderView, LeaseName, LeaseState, LeaseStore, ManualClock, MemoryBackend, Mode, Put, PutOptions,
    ReleaseRequest, Released,
};
use tenure_server::leases::Ask;
use tenure_server::{Core, CoreOptions};

use super::ops::{Op, Watermark};
use super::side::{Answer, Raw, Side};
use super::{HOLDERS, MAX_LEASE, NAMES, NEVER_GRANTED, START_MS};

pub(super) struct World {
    sides: [Side; 2],
    core: Arc<Core>,
    cas: Arc<dyn Backend>,
    /// Names whose table record a reservation has touched since both stores last
    /// wrote them: the table's `modified_ms` moved, the CAS store's did not.
    reserved: HashSet<&'static str>,
    holders: Vec<Arc<Holder>>,
    /// Every grant made so far, as each store made it (renewals replace them).
    grants: Vec<[Grant; 2]>,
}

impl World {
    pub(super) fn new() -> Self {
        let table_clock = ManualClock::starting_at(START_MS);
        // No restart quarantine: this table starts empty and grants at once.
        let opts = CoreOptions { quarantine: Duration::ZERO, ..CoreOptions::new(MAX_LEASE) };
        let core = Arc::new(Core::new(table_clock.shared(), opts));
        let table = TableStore::new(core.clone());
        let cas_clock = ManualClock::starting_at(START_MS);
        let backend: Arc<dyn Backend> = Arc::new(MemoryBackend::new(cas_clock.shared()));
        let cas =
            CasStore::new(backend.clone(), cas_clock.shared(), CasOptions::default().with_max_skew(Duration::ZERO));
        let side = |what, store: Arc<dyn LeaseStore>, clock| Side {
            what,
            store,
            clock,
            grants: HashMap::new(),
            high: HashMap::new(),
            states: Vec::new(),
        };
        Self {
            sides: [side("table", Arc::new(table), table_clock), side("cas", Arc::new(cas), cas_clock)],
            core,
            cas: backend,
            reserved: HashSet::new(),
            holders: HOLDERS.iter().map(|n| Arc::new(Holder::current().with_nonce(*n))).collect(),
            grants: Vec::new(),
        }
    }

    fn pick(&self, back: usize) -> Option<usize> {
        let n = self.grants.len();
        (n > 0).then(|| n - 1 - back % n)
    }

    fn request(&self, name: &str, holder: usize, mode: Mode, ttl_ms: u64, retake: bool, meta: bool) -> AcquireRequest {
        AcquireRequest {
            name: LeaseName::new(name).expect("name"),
            mode,
            ttl: Duration::from_millis(ttl_ms),
            holder: self.holders[holder].clone(),
            retake,
            meta: meta.then(|| format!("meta of {}", HOLDERS[holder])),
        }
    }

    /// Runs `op` on store `i`.
    async fn run(&self, i: usize, op: &Op) -> Raw {
        let side = &self.sides[i];
        let store = &side.store;
        match op {
            Op::Acquire { name, holder, mode, ttl_ms, retake, meta } => {
                let req = self.request(name, *holder, *mode, *ttl_ms, *retake, *meta);
                match store.try_acquire(&req).await {
                    Ok(Attempt::Granted(g)) => Raw::Granted(vec![g]),
                    Ok(Attempt::Busy(b)) => Raw::Busy(b),
                    Err(e) => Raw::Failed(e),
                }
            }
            Op::AcquireAll { names, holder, ttl_ms, retake } => {
                let reqs: Vec<AcquireRequest> = names
                    .iter()
                    .map(|(name, mode)| self.request(name, *holder, *mode, *ttl_ms, *retake, false))
                    .collect();
                if i == 1
                    && let Some(blocked) = first_blocked(&side.states[side.states.len() - 1], &reqs)
                {
                    // The CAS store's batch is the trait's default: it takes the
                    // names one by one and gives them back on a busy one, which
                    // leaves a released grant (and a spent token) in each record
                    // it took. The table's batch changes nothing. To go on
                    // comparing after a busy batch, the CAS store is asked for
                    // the name its state says is held, alone: a busy answer
                    // writes nothing.
                    return match store.try_acquire(&reqs[blocked]).await {
                        Ok(Attempt::Busy(b)) => Raw::Busy(b),
                        Ok(Attempt::Granted(g)) => Raw::Failed(Error::unsupported(
                            "test",
                            format!("{}: granted {:?}, which its state said was held", side.what, g.name),
                        )),
                        Err(e) => Raw::Failed(e),
                    };
                }
                match store.try_acquire_all(&reqs).await {
                    Ok(AllAttempt::Granted(gs)) => Raw::Granted(gs),
                    Ok(AllAttempt::Busy(b)) => Raw::Busy(b),
                    Err(e) => Raw::Failed(e),
                }
            }
            Op::Renew { back } => {
                let Some(k) = self.pick(*back) else { return Raw::Skipped };
                match store.renew(&self.grants[k][i]).await {
                    Ok(g) => Raw::Renewed(k, g),
                    Err(e) => Raw::Failed(e),
                }
            }
            Op::Release { back, watermark, dropped, meta } => {
                let Some(k) = self.pick(*back) else { return Raw::Skipped };
                let watermark_ms = match watermark {
                    Watermark::None => None,
                    // Never past the deadline (the table refuses those, the CAS store takes them).
                    Watermark::Past => Some(side.clock.wall_ms().min(self.grants[k][i].deadline_ms) - 1),
                };
                let req = ReleaseRequest { watermark_ms, meta: meta.then(|| "left".to_string()), dropped: *dropped };
                match store.release(&self.grants[k][i], &req).await {
                    Ok(r) => Raw::Released(r),
                    Err(e) => Raw::Failed(e),
                }
            }
            Op::Break { name, only, age, note } => {
                let states = &side.states;
                let seen = &states[states.len() - 1 - (*age).min(states.len() - 1)][name];
                // A token of this name (tokens of different names may be equal
                // on one store and not on the other), or one it never granted.
                let only_token = only.map(|back| {
                    let mine: Vec<&[Grant; 2]> = self.grants.iter().filter(|g| g[0].name.as_str() == *name).collect();
                    mine.len().checked_sub(1).map_or(NEVER_GRANTED, |last| mine[last - back % mine.len()][i].token)
                });
                let note = note.then(|| BreakNote { by: self.holders[0].clone(), reason: Some("generated".into()) });
                match store.break_lease(seen, only_token, note.as_ref()).await {
                    Ok(()) => Raw::Broken,
                    Err(e) => Raw::Failed(e),
                }
            }
            Op::Advance { ms } => {
                side.clock.advance(Duration::from_millis(*ms));
                Raw::Skipped
            }
            Op::Sweep => {
                if i == 0 {
                    self.core.sweep();
                }
                Raw::Skipped
            }
            Op::Reserve { name, holder, mode } => {
                if i == 0 && side.states[side.states.len() - 1][name].version.is_some() {
                    let ask = Ask {
                        name,
                        mode: *mode,
                        ttl_ms: 2_500,
                        holder: &self.holders[*holder],
                        retake: false,
                        meta: None,
                    };
                    // Granted or busy: either way nothing a full ask sees changes.
                    let _ = self.core.acquire(&[ask], true);
                }
                Raw::Skipped
            }
        }
    }

    /// Runs `op` on both stores and compares their answers, then their states.
    pub(super) async fn step(&mut self, op: &Op) -> Result<(), String> {
        let raw = [self.run(0, op).await, self.run(1, op).await];
        let answers = [self.sides[0].answer(&raw[0]), self.sides[1].answer(&raw[1])];
        if answers[0] != answers[1] {
            return Err(format!("answers differ\n  table: {:?}\n  cas:   {:?}", answers[0], answers[1]));
        }
        match raw {
            [Raw::Granted(t), Raw::Granted(c)] => {
                for (t, c) in t.into_iter().zip(c) {
                    let n = self.grants.len();
                    self.sides[0].note_grant(&t, n)?;
                    self.sides[1].note_grant(&c, n)?;
                    self.grants.push([t, c]);
                }
            }
            [Raw::Renewed(k, t), Raw::Renewed(_, c)] => self.grants[k] = [t, c],
            _ => {}
        }
        // Names both stores wrote in this step.
        let grant_name = |back: &usize| self.pick(*back).map(|k| static_name(self.grants[k][0].name.as_str()));
        let written: Vec<&'static str> = match (op, &answers[0]) {
            (Op::Acquire { name, .. }, Answer::Granted(_)) | (Op::Break { name, .. }, Answer::Broken) => vec![name],
            (Op::AcquireAll { names, .. }, Answer::Granted(_)) => names.iter().map(|(n, _)| *n).collect(),
            (Op::Renew { back }, Answer::Renewed { .. })
            | (Op::Release { back, .. }, Answer::Released(Released::Released)) => {
                grant_name(back).into_iter().collect()
            }
            _ => Vec::new(),
        };
        for name in written {
            self.reserved.remove(name);
        }
        if let Op::Reserve { name, .. } = op {
            self.reserved.insert(name);
        }
        // The names whose records the table may have retired in this step.
        let retiring: Vec<&str> = match (op, &answers[0]) {
            (Op::Release { back, .. }, Answer::Released(Released::Released)) => {
                self.pick(*back).map(|k| self.grants[k][0].name.as_str()).into_iter().collect()
            }
            (Op::Break { name, .. }, Answer::Broken) => vec![name],
            (Op::Sweep, _) => NAMES.to_vec(),
            _ => Vec::new(),
        };
        for name in retiring {
            self.retire_on_cas(name).await?;
        }
        self.compare_states().await
    }

    /// The table retires a record with no live grant (after a release or a
    /// break, and in its sweep), ending its expired grants as a takeover would
    /// (`settle_expired` in the table): the CAS store ends them only when the
    /// next holder takes over. Where the table retired a record, the test ends
    /// the same grants in the CAS store's record, with the same record
    /// functions, at the same instant, so that both go on alike.
    async fn retire_on_cas(&self, name: &str) -> Result<(), String> {
        let lease = LeaseName::new(name).expect("name");
        let table = self.sides[0].store.inspect(&lease).await.map_err(|e| e.to_string())?;
        // A live reservation keeps a record from retiring, as a live grant does.
        let page = self.core.snapshot(None, usize::MAX);
        let reserved = page.leases.iter().find(|row| row.name == name).map_or(0, |row| row.tentative);
        if table.version.is_none() || !table.holders.is_empty() || reserved > 0 {
            return Ok(());
        }
        let key = tenure_core::Key::new(name).map_err(|e| e.to_string())?;
        let Some(stored) = self.cas.get(&key).await.map_err(|e| e.to_string())? else { return Ok(()) };
        let mut rec = LeaseRecord::parse(&stored.value).map_err(|e| format!("cas: record of {name:?}: {e:?}"))?;
        let now_ms = self.sides[1].clock.wall_ms();
        if rec.entries().any(|(e, _)| e.deadline_ms > now_ms) {
            // Live on one store and not on the other: the comparison says so.
            return Ok(());
        }
        let ending: Vec<(u64, String)> = rec.entries().map(|(e, _)| (e.token, e.holder.nonce.clone())).collect();
        for (token, nonce) in &ending {
            record::release(&mut rec, *token, nonce, EndedHow::Expired, now_ms, None, None)
                .map_err(|g| format!("cas: ending grant {token} of {name:?}: {}", g.detail))?;
        }
        if !ending.is_empty() {
            let put = self.cas.put(&key, Bytes::from(rec.to_bytes()), PutOptions::update(stored.version)).await;
            if !matches!(put, Ok(Put::Done(_))) {
                return Err(format!("cas: rewriting the record of {name:?}: {put:?}"));
            }
        }
        Ok(())
    }

    pub(super) async fn compare_states(&mut self) -> Result<(), String> {
        let mut lists = Vec::new();
        for side in &self.sides {
            lists.push(side.store.list("").await.map_err(|e| format!("{}: list: {e}", side.what))?);
        }
        if lists[0] != lists[1] {
            return Err(format!("names differ\n  table: {:?}\n  cas:   {:?}", lists[0], lists[1]));
        }
        let table = self.sides[0].inspect_all().await?;
        let cas = self.sides[1].inspect_all().await?;
        for ((name, mut t), mut c) in NAMES.iter().zip(table).zip(cas) {
            if self.reserved.contains(name) {
                (t.modified_ms, c.modified_ms) = (None, None);
            }
            if t != c {
                return Err(format!("states of {name:?} differ\n  table: {t:?}\n  cas:   {c:?}"));
            }
        }
        Ok(())
    }
}

/// `name` as one of [`NAMES`].
fn static_name(name: &str) -> &'static str {
    NAMES.into_iter().find(|n| *n == name).expect("one of the test's names")
}

/// The first of `reqs` that a live grant in `states` blocks (as
/// [`tenure_core::record::acquire`] decides), if any.
fn first_blocked(states: &HashMap<&'static str, LeaseState>, reqs: &[AcquireRequest]) -> Option<usize> {
    reqs.iter().position(|r| {
        let stays = |v: &&HolderView| !(r.retake && v.holder.nonce == r.holder.nonce);
        let mut blocking = states[r.name.as_str()].holders.iter().filter(stays);
        match r.mode {
            Mode::Exclusive => blocking.next().is_some(),
            Mode::Shared => blocking.any(|v| v.mode == Mode::Exclusive),
        }
    })
}
