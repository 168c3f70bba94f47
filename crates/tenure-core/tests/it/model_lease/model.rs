//! The model of [`super`]: its state (the register, the processes, what the
//! protected storage applied), its actions, the lease logic run on the shipped
//! record functions, and the properties it is checked for.

use std::collections::HashMap;
use std::sync::Arc;

use stateright::{Model, Property};
use tenure_core::record::{self, Ask, Decision, Entry, Judge, LeaseRecord};
use tenure_core::{EndedHow, Holder, Mode};

use super::{
    BY_WALL, BY_WATCH, CRASH_TAKEOVER, FENCE_MONOTONIC, NO_OVERLAPPING_WRITES, ONE_ACTOR, RENEWED, STALE_REJECTED,
    TOKENS,
};

const NAME: &str = "model/lease";
/// The absolute (monotonic and true) time that `now` stands for in calls to the real code.
const BASE: i64 = 1_000;

/// The record's exclusive grant; `deadline` is `deadline_ms - now`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Ent {
    token: u64,
    holder: usize,
    deadline: i64,
    renewals: u64,
}

/// The part of a `LeaseRecord` that decisions read.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Rec {
    last_token: u64,
    excl: Option<Ent>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Req {
    /// `replaced`: token and holder of the grant it ends; `rule`: the rules that judged it expired.
    Acquire {
        token: u64,
        replaced: Option<(u64, usize)>,
        rule: u8,
    },
    Renew,
    Release,
}

/// A write on its way to the register (`sent`: relative to now, <= 0).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Pending {
    req: Req,
    base: u64,
    rec: Rec,
    sent: i64,
}

/// What a holder knows (`local_deadline`: relative to now). `wrote`: it began its
/// one fenced write (violating property 3 or 4 never needs two writes of a grant).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Held {
    token: u64,
    local_deadline: i64,
    wrote: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Proc {
    offset: i64,
    crashed: bool,
    /// `CasStore::watched` for our name: stamp (token, renewals) and when first seen.
    watched: Option<(u64, u64, i64)>,
    held: Option<Held>,
    pending: Option<Pending>,
    /// Token of a fenced write on its way to the protected storage.
    write: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct St {
    version: u64,
    rec: Option<Rec>,
    procs: Vec<Proc>,
    crashes_left: u8,
    /// The fenced storage: highest token applied, and (a bit set of) tokens applied.
    fence: u64,
    applied: u64,
    /// Pairs of tokens that could act at the same time.
    overlaps: Vec<(u64, u64)>,
    bad_token: bool,
    regressed: bool,
    seen: u8,
}

const SEEN_CRASH_TAKEOVER: u8 = 1;
const SEEN_STALE_REJECTED: u8 = 2;
const SEEN_BY_WATCH: u8 = 4;
const SEEN_BY_WALL: u8 = 8;
const SEEN_RENEWED: u8 = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Act {
    Tick,
    Acquire(usize),
    Renew(usize),
    Release(usize),
    Land(usize),
    LandUnseen(usize),
    Begin(usize),
    Finish(usize),
    Crash(usize),
}

/// `cas.rs`'s private `Observer`, line by line (`watch_shortfall` is 0 but in a control).
struct Observer {
    now_ms: u64,
    max_skew_ms: u64,
    watched: HashMap<(u64, u64), u64>,
    watch_shortfall: u64,
}

impl Observer {
    fn watched_ms(&self, e: &Entry) -> u64 {
        self.watched.get(&(e.token, e.renewals)).copied().unwrap_or(0)
    }
    fn by_wall(&self, e: &Entry) -> u64 {
        e.deadline_ms.saturating_add(self.max_skew_ms).saturating_add(1).saturating_sub(self.now_ms)
    }
    fn by_watch(&self, e: &Entry) -> u64 {
        e.ttl_ms.saturating_sub(self.watch_shortfall).saturating_sub(self.watched_ms(e))
    }
}

impl Judge for Observer {
    fn expired(&self, e: &Entry) -> bool {
        self.remaining_ms(e) == 0
    }
    fn remaining_ms(&self, e: &Entry) -> u64 {
        self.by_wall(e).min(self.by_watch(e))
    }
}

/// One safeguard removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Flaw {
    /// The protected storage applies every write.
    NoFencing,
    /// Writes land without comparing versions.
    BlindWrites,
    /// Holders act until they learn that the grant is gone.
    IgnoreStopBy,
    /// Rule (a) watches this many ticks less than the TTL.
    ShortWatch(u64),
    /// Holders time their deadline from the answer instead of the send.
    DeadlineFromAnswer,
}

/// The model and its knobs (`new` is the shipped protocol; the rest are controls
/// and bounds).
#[derive(Clone, Debug)]
pub(super) struct Lease {
    pub(super) procs: usize,
    pub(super) ttl: u64,
    pub(super) safety: i64,
    /// What the Observer is configured with (`CasOptions::max_skew`).
    pub(super) max_skew: u64,
    /// How far fast wall clocks are ahead of slow ones (each process is one or the other).
    pub(super) skew: i64,
    /// Bound: no request is sent once the register reached this version.
    pub(super) max_version: u64,
    pub(super) crashes: u8,
    /// Writes may land unseen (`LandUnseen`).
    pub(super) ambiguous: bool,
    /// A safeguard removed (negative controls).
    pub(super) flaw: Option<Flaw>,
    pub(super) fenced_writes: bool,
    /// Symmetry reduction (off where counterexample traces are wanted).
    pub(super) symmetric: bool,
    /// Records witnesses for the `sometimes` properties (they split states).
    pub(super) witnesses: bool,
    pub(super) holders: Vec<Arc<Holder>>,
}

impl Lease {
    /// The shipped protocol: TTL 3, safety margin 1, skew bound 1, clocks within it.
    pub(super) fn new(procs: usize) -> Self {
        Self {
            procs,
            ttl: 3,
            safety: 1,
            max_skew: 1,
            skew: 1,
            max_version: 4,
            crashes: 0,
            ambiguous: false,
            flaw: None,
            fenced_writes: true,
            symmetric: false,
            witnesses: false,
            holders: (0..procs).map(|i| Arc::new(Holder::current().with_nonce(format!("p{i}")))).collect(),
        }
    }

    fn has(&self, flaw: Flaw) -> bool {
        self.flaw == Some(flaw)
    }

    fn to_record(&self, r: &Rec) -> LeaseRecord {
        let mut rec = LeaseRecord::empty(NAME);
        rec.last_token = r.last_token;
        rec.exclusive = r.excl.as_ref().map(|e| Entry {
            token: e.token,
            holder: self.holders[e.holder].clone(),
            ttl_ms: self.ttl,
            deadline_ms: (BASE + e.deadline) as u64,
            acquired_ms: 0,
            renewals: e.renewals,
            meta: None,
        });
        rec
    }

    fn holder_index(&self, h: &Holder) -> usize {
        self.holders.iter().position(|x| x.nonce == h.nonce).expect("a modelled holder")
    }

    fn project(&self, rec: &LeaseRecord) -> Rec {
        assert!(rec.shared.is_empty() && rec.exclusive.as_ref().is_none_or(|e| e.ttl_ms == self.ttl));
        let excl = rec.exclusive.as_ref().map(|e| Ent {
            token: e.token,
            holder: self.holder_index(&e.holder),
            deadline: e.deadline_ms as i64 - BASE,
            renewals: e.renewals,
        });
        Rec { last_token: rec.last_token, excl }
    }

    fn wall_ms(&self, s: &St, p: usize) -> u64 {
        (BASE + s.procs[p].offset) as u64
    }

    /// The token `p` may act under now, if any.
    fn acting(&self, s: &St, p: usize) -> Option<u64> {
        let (pr, h) = (&s.procs[p], s.procs[p].held.as_ref()?);
        let stopped = !self.has(Flaw::IgnoreStopBy) && h.local_deadline - self.safety <= 0;
        (!pr.crashed && !stopped).then_some(h.token)
    }

    /// `CasStore::try_acquire`: read, `observe`, decide, send.
    fn acquire(&self, s: &mut St, p: usize) {
        let wall = self.wall_ms(s, p);
        let pr = &mut s.procs[p];
        pr.held = None; // a process whose grant is lost lets go of its handle first
        pr.watched = s.rec.as_ref().and_then(|r| r.excl.as_ref()).map(|e| match pr.watched {
            Some((t, r, first)) if (t, r) == (e.token, e.renewals) => (t, r, first),
            _ => (e.token, e.renewals, 0),
        });
        let watched = pr.watched.iter().map(|&(t, r, first)| ((t, r), (-first) as u64)).collect();
        let watch_shortfall = if let Some(Flaw::ShortWatch(by)) = self.flaw { by } else { 0 };
        let judge = Observer { now_ms: wall, max_skew_ms: self.max_skew, watched, watch_shortfall };
        let current = s.rec.as_ref().map(|r| self.to_record(r));
        let holder = &self.holders[p];
        let ask = Ask {
            mode: Mode::Exclusive,
            ttl_ms: self.ttl,
            holder,
            retake: true,
            now_ms: wall,
            token_floor: s.version,
            meta: None,
        };
        let Decision::Grant { record, token, .. } = record::decide_acquire(NAME, current.as_ref(), &ask, &judge) else {
            return;
        };
        let (mut replaced, mut rule) = (None, 0);
        if let Some(e) = current.as_ref().and_then(|c| c.exclusive.as_ref()) {
            replaced = Some((e.token, self.holder_index(&e.holder)));
            rule |= if judge.by_watch(e) == 0 { SEEN_BY_WATCH } else { 0 };
            rule |= if judge.by_wall(e) == 0 { SEEN_BY_WALL } else { 0 };
        }
        let req = Req::Acquire { token, replaced, rule };
        s.procs[p].pending = Some(Pending { req, base: s.version, rec: self.project(&record), sent: 0 });
    }

    /// `CasStore::renew` or `release` after a fresh read (for exclusive grants the
    /// cache of the last write only saves that read). A holder stops acting when
    /// it releases; a renewal that finds the grant gone loses it.
    fn renew_or_release(&self, s: &mut St, p: usize, release: bool) {
        let (wall, nonce) = (self.wall_ms(s, p), &self.holders[p].nonce);
        let Some(token) = s.procs[p].held.as_ref().map(|h| h.token) else { return };
        let next = s.rec.as_ref().map(|r| self.to_record(r)).and_then(|cur| match release {
            false => record::decide_renew(&cur, token, nonce, self.ttl, wall, None).ok(),
            true => record::decide_release(&cur, token, nonce, EndedHow::Released, wall, None, None).ok(),
        });
        if release || next.is_none() {
            s.procs[p].held = None;
        }
        if let Some(rec) = next {
            let req = if release { Req::Release } else { Req::Renew };
            s.procs[p].pending = Some(Pending { req, base: s.version, rec: self.project(&rec), sent: 0 });
        }
    }

    /// `p`'s pending write reaches the register; `told`: whether `p` learns it landed.
    fn land(&self, s: &mut St, p: usize, told: bool) {
        let Some(pend) = s.procs[p].pending.take() else { return };
        if !self.has(Flaw::BlindWrites) && s.version != pend.base {
            return; // Put::Conflict: the sender reads again when it next acts
        }
        let last_token = s.rec.as_ref().map_or(0, |r| r.last_token);
        s.bad_token |= pend.rec.last_token < last_token;
        s.version += 1;
        s.rec = Some(pend.rec);
        let local_deadline = if self.has(Flaw::DeadlineFromAnswer) { 0 } else { pend.sent } + self.ttl as i64;
        let crashed = s.procs[p].crashed;
        match pend.req {
            Req::Acquire { token, replaced, rule } => {
                s.bad_token |= token <= last_token;
                if let Some((_, h)) = replaced.filter(|&(_, h)| h != p && self.witnesses) {
                    s.seen |= rule | if s.procs[h].crashed { SEEN_CRASH_TAKEOVER } else { 0 };
                }
                if told && !crashed {
                    s.procs[p].held = Some(Held { token, local_deadline, wrote: false });
                }
            }
            // The keep-alive uses a renewal's answer only if it comes before stop_by.
            Req::Renew if told && self.acting(s, p).is_some() => {
                if let Some(h) = s.procs[p].held.as_mut() {
                    h.local_deadline = local_deadline;
                    s.seen |= if self.witnesses { SEEN_RENEWED } else { 0 };
                }
            }
            Req::Renew | Req::Release => {}
        }
    }

    /// `p`'s fenced write reaches the protected storage.
    fn finish(&self, s: &mut St, p: usize) {
        let Some(t) = s.procs[p].write.take() else { return };
        if !self.has(Flaw::NoFencing) && t < s.fence {
            s.seen |= if self.witnesses { SEEN_STALE_REJECTED } else { 0 };
            return;
        }
        s.regressed |= t < s.fence;
        s.fence = s.fence.max(t);
        s.applied |= 1 << t;
    }

    /// Every stored time, relative to now, shifted by `by` (one tick: -1).
    fn shift(&self, s: &mut St, by: i64) {
        for pr in &mut s.procs {
            if let Some(w) = &mut pr.watched {
                w.2 += by;
            }
            if let Some(h) = &mut pr.held {
                h.local_deadline += by;
            }
            if let Some(pend) = &mut pr.pending {
                pend.sent += by;
                pend.rec.excl.iter_mut().for_each(|e| e.deadline += by);
            }
        }
        s.rec.iter_mut().filter_map(|r| r.excl.as_mut()).for_each(|e| e.deadline += by);
    }

    /// Merges states no decision can tell apart: clamps times that no longer
    /// matter, forgets watches of stamps that are gone (a stamp never comes back
    /// while tokens are unique, which property 1 checks) and storage memory that
    /// no future write can consult.
    fn normalize(&self, s: &mut St) {
        let ttl = self.ttl as i64;
        let stamp = s.rec.as_ref().and_then(|r| r.excl.as_ref()).map(|e| (e.token, e.renewals));
        for pr in &mut s.procs {
            if let Some((t, r, first)) = pr.watched {
                let gone = !self.has(Flaw::BlindWrites) && stamp != Some((t, r));
                pr.watched = (!gone).then_some((t, r, first.max(-ttl))); // watched >= TTL: all alike
            }
            if let Some(h) = &mut pr.held {
                h.local_deadline = h.local_deadline.max(self.safety); // past stop_by: all alike
            }
            if let Some(pend) = &mut pr.pending {
                pend.sent = pend.sent.max(-ttl); // landing that late: already past stop_by
            }
        }
        // A deadline this old has expired by every wall clock (offsets are >= 0), for good.
        let floor = -(self.max_skew as i64) - 1;
        let in_flight = s.procs.iter_mut().filter_map(|pr| pr.pending.as_mut()).map(|pend| &mut pend.rec);
        for e in s.rec.iter_mut().chain(in_flight).filter_map(|r| r.excl.as_mut()) {
            e.deadline = e.deadline.max(floor);
        }
        // A token joins an overlap only while it may act (a holder that stopped never
        // acts under that token again): other applied tokens matter only in noted pairs.
        let acting: Vec<u64> = (0..self.procs).filter_map(|p| self.acting(s, p)).collect();
        let keep = acting.iter().chain(s.overlaps.iter().flat_map(|(a, b)| [a, b])).fold(0, |k, t| k | 1 << t);
        s.applied &= keep;
        // Only how the fence compares with tokens that may still be written matters
        // (writes in flight, grants that may still begin one; any future grant's token
        // is above the record's last token, which is at least the fence): keep the
        // smallest fence that compares alike, and drop writes the fence will refuse.
        if !self.has(Flaw::BlindWrites) {
            for pr in s.procs.iter_mut().filter(|_| !self.has(Flaw::NoFencing) && !self.witnesses) {
                pr.write = pr.write.filter(|&t| t >= s.fence);
            }
            let may_begin = (0..self.procs).filter(|&p| s.procs[p].held.as_ref().is_some_and(|h| !h.wrote));
            let writable: Vec<u64> =
                s.procs.iter().filter_map(|pr| pr.write).chain(may_begin.filter_map(|p| self.acting(s, p))).collect();
            s.fence = writable.into_iter().filter(|&t| t < s.fence).max().map_or(0, |t| t + 1);
        }
    }

    /// Notes the pairs of grants that may act together in `s`.
    fn note_overlaps(&self, s: &mut St) {
        let acting: Vec<u64> = (0..self.procs).filter_map(|p| self.acting(s, p)).collect();
        for (i, &a) in acting.iter().enumerate() {
            for &b in &acting[i + 1..] {
                s.overlaps.push((a.min(b), a.max(b)));
            }
        }
        s.overlaps.sort_unstable();
        s.overlaps.dedup();
    }
}

/// Symmetry reduction: relabels processes so that interchangeable ones (same
/// clock offset) come sorted by their own state, renaming the references to
/// processes (the record's holder, the holder an acquisition replaces). Holders
/// are told apart only by nonce equality, so the relabeled state behaves the
/// same; ties are broken arbitrarily, which merges fewer states but stays sound.
fn canonical(s: &mut St) {
    let rec_holder = s.rec.as_ref().and_then(|r| r.excl.as_ref()).map(|e| e.holder);
    let key = |i: usize| {
        let mut pr = s.procs[i].clone();
        if let Some(pend) = &mut pr.pending {
            pend.rec.excl.iter_mut().for_each(|e| e.holder = usize::from(e.holder != i));
            if let Req::Acquire { replaced: Some((_, h)), .. } = &mut pend.req {
                *h = usize::from(*h != i);
            }
        }
        (pr.offset, rec_holder == Some(i), pr)
    };
    let mut order: Vec<usize> = (0..s.procs.len()).collect();
    order.sort_by_cached_key(|&i| key(i));
    let mut rename = vec![0; order.len()];
    for (j, &i) in order.iter().enumerate() {
        rename[i] = j;
    }
    s.procs = order.iter().map(|&i| s.procs[i].clone()).collect();
    for pend in s.procs.iter_mut().filter_map(|pr| pr.pending.as_mut()) {
        pend.rec.excl.iter_mut().for_each(|e| e.holder = rename[e.holder]);
        if let Req::Acquire { replaced: Some((_, h)), .. } = &mut pend.req {
            *h = rename[*h];
        }
    }
    s.rec.iter_mut().filter_map(|r| r.excl.as_mut()).for_each(|e| e.holder = rename[e.holder]);
}

impl Model for Lease {
    type State = St;
    type Action = Act;

    fn init_states(&self) -> Vec<St> {
        // Only differences between clocks matter, and processes are interchangeable:
        // the first `procs - fast` clocks are slow (offset 0), the others fast.
        let proc = |offset| Proc { offset, crashed: false, watched: None, held: None, pending: None, write: None };
        let fast_counts = if self.skew == 0 { 0..1 } else { 0..self.procs };
        fast_counts
            .map(|fast| St {
                version: 0,
                rec: None,
                procs: (0..self.procs).map(|i| proc(if i + fast < self.procs { 0 } else { self.skew })).collect(),
                crashes_left: self.crashes,
                fence: 0,
                applied: 0,
                overlaps: Vec::new(),
                bad_token: false,
                regressed: false,
                seen: 0,
            })
            .collect()
    }

    fn actions(&self, s: &St, out: &mut Vec<Act>) {
        out.push(Act::Tick);
        for (p, pr) in s.procs.iter().enumerate() {
            let acting = self.acting(s, p).is_some();
            if !pr.crashed && pr.pending.is_none() && s.version < self.max_version {
                if !acting {
                    out.push(Act::Acquire(p));
                }
                if let Some(h) = &pr.held {
                    // The keep-alive renews while it may act (always, if it ignores stop_by),
                    // at most once a tick.
                    if (acting || self.has(Flaw::IgnoreStopBy)) && h.local_deadline < self.ttl as i64 {
                        out.push(Act::Renew(p));
                    }
                    out.push(Act::Release(p));
                }
            }
            if pr.pending.is_some() {
                out.push(Act::Land(p));
                if self.ambiguous {
                    out.push(Act::LandUnseen(p));
                }
            }
            if self.fenced_writes && acting && pr.write.is_none() && pr.held.as_ref().is_some_and(|h| !h.wrote) {
                out.push(Act::Begin(p));
            }
            if pr.write.is_some() {
                out.push(Act::Finish(p));
            }
            if s.crashes_left > 0 && !pr.crashed {
                out.push(Act::Crash(p));
            }
        }
    }

    fn next_state(&self, last: &St, act: Act) -> Option<St> {
        let mut s = last.clone();
        match act {
            Act::Tick => self.shift(&mut s, -1),
            Act::Acquire(p) => self.acquire(&mut s, p),
            Act::Renew(p) => self.renew_or_release(&mut s, p, false),
            Act::Release(p) => self.renew_or_release(&mut s, p, true),
            Act::Land(p) => self.land(&mut s, p, true),
            Act::LandUnseen(p) => self.land(&mut s, p, false),
            Act::Begin(p) => {
                s.procs[p].write = self.acting(&s, p);
                s.procs[p].held.iter_mut().for_each(|h| h.wrote = true);
            }
            Act::Finish(p) => self.finish(&mut s, p),
            Act::Crash(p) => (s.procs[p].crashed, s.crashes_left) = (true, s.crashes_left - 1),
        }
        self.note_overlaps(&mut s); // before clamping (which never changes who may act)
        self.normalize(&mut s);
        if self.symmetric {
            canonical(&mut s);
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(TOKENS, |_, s: &St| !s.bad_token),
            Property::always(ONE_ACTOR, |m: &Lease, s: &St| {
                (0..m.procs).filter(|&p| m.acting(s, p).is_some()).count() <= 1
            }),
            Property::always(FENCE_MONOTONIC, |_, s: &St| !s.regressed),
            Property::always(NO_OVERLAPPING_WRITES, |_, s: &St| {
                s.overlaps.iter().all(|&(a, b)| s.applied & (1 << a) == 0 || s.applied & (1 << b) == 0)
            }),
            Property::sometimes(CRASH_TAKEOVER, |_, s: &St| s.seen & SEEN_CRASH_TAKEOVER != 0),
            Property::sometimes(STALE_REJECTED, |_, s: &St| s.seen & SEEN_STALE_REJECTED != 0),
            Property::sometimes(BY_WATCH, |_, s: &St| s.seen & SEEN_BY_WATCH != 0),
            Property::sometimes(BY_WALL, |_, s: &St| s.seen & SEEN_BY_WALL != 0),
            Property::sometimes(RENEWED, |_, s: &St| s.seen & SEEN_RENEWED != 0),
        ]
    }
}
