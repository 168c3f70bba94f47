//! The server's lease table against `CasStore`, on the same operation
//! sequences (issue "One front door").
//!
//! Generated sequences of operations over three lease names and three holders
//! (exclusive and shared acquisitions, with and without `retake` and metadata;
//! all-or-nothing acquisitions of several names; renewals; releases, with and
//! without a watermark, dropped or not; breaks of all grants or of one token,
//! with a fresh or a stale `inspect`; clock steps, short, to the deadline and
//! past every TTL) run through the [`LeaseStore`] API on two stores: the table
//! ([`Core`], through `common::table_store`, which answers as the `tenure://`
//! client does) and a [`CasStore`] over memory. Each has its own
//! [`ManualClock`], started at the same wall time and moved identically.
//!
//! Deadlines coincide. The table says a grant is over at its deadline. The CAS
//! store says so at `deadline + max_skew + 1 ms` by the wall clock, or once it
//! has watched the same write for a TTL. With `max_skew = 0`, and every record
//! inspected after every step (so the CAS store watches each write from the
//! instant it was made), both say "over" at the deadline exactly, so answers
//! are compared at every instant, the deadlines themselves included.
//!
//! After every step the test compares the answers (granted, or busy and who
//! blocks, or which error; the grants' holders, modes, deadlines and
//! predecessors; the deadlines of renewals; released or not held), then, for
//! every name, the state `inspect` shows (live and expired holders with their
//! deadlines and time left, the last ending, the watermark, the highest token,
//! whether a record exists, when it changed) and the names `list` shows.
//! Tokens are numbered differently (the table's carry its clock in µs, the CAS
//! store's count up by one), so a token is compared as the grant it belongs
//! to, and each store's own tokens must grow strictly under each name: above
//! every token it granted or showed before under that name, and above the
//! grant's predecessor.
//!
//! Where the two stores differ by design, the test makes them comparable:
//! - **All-or-nothing acquisition.** The table decides every name, and grants
//!   all of them or changes nothing. The CAS store uses the trait's default:
//!   it takes the names one by one and gives back what it took on a busy one,
//!   which leaves a released grant of its own (and a spent token) in each record
//!   taken. When the CAS store's own state says a name of the batch is held, the
//!   test asks it for that name alone (busy: nothing written) instead.
//! - **Retirement.** The table ends the expired grants of a record that has no
//!   live grant left (after a release or a break, and in its sweep) as a
//!   takeover would; the CAS store ends them at the next takeover. The test ends
//!   the same grants in the CAS store's record, with the same record functions
//!   and at the same instant. The sweep is an operation of its own here.
//! - **Reservations** (tentative asks) exist on the table only. Reserving a
//!   name must change no full ask's outcome (a full ask breaks the
//!   reservations it conflicts with), so reservations are generated, on the
//!   table alone, between the full asks; they move the table's `modified_ms`
//!   and nothing else `inspect` shows, which is then not compared until both
//!   write the name.
//! - **Limits** are not generated: the table grants 10 ms to `--max-lease`
//!   (the CAS store 1 ms to 30 days), refuses a watermark past the grant's
//!   deadline (the CAS store takes it). A batch naming a lease twice is
//!   refused by both (the conformance suite checks it).
//!
//! `PROPTEST_CASES` sets the number of cases (default [`CASES`]).

use crate::common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::table_store::TableStore;
use futures::executor::block_on;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError};
use tenure_core::record::{self, LeaseRecord};
use tenure_core::{
    AcquireRequest, AllAttempt, Attempt, Backend, BreakNote, CasOptions, CasStore, Clock, EndedHow, Error, Grant,
    Holder, HolderView, LeaseName, LeaseState, LeaseStore, ManualClock, MemoryBackend, Mode, Mono, Predecessor, Put,
    PutOptions, ReleaseRequest, Released,
};
use tenure_server::leases::Ask;
use tenure_server::{Core, CoreOptions};

/// Cases per run: a few seconds in a debug build.
const CASES: u32 = 512;
/// Most operations in a case.
const MAX_OPS: usize = 48;
/// Longest lease the table grants.
const MAX_LEASE: Duration = Duration::from_secs(10);
/// Wall time both clocks start at (2027).
const START_MS: u64 = 1_800_000_000_000;
/// The lease names (in canonical order).
const NAMES: [&str; 3] = ["a", "b", "c/d"];
/// A token neither store grants in a test.
const NEVER_GRANTED: u64 = 12_345;
/// Holders, by nonce.
const HOLDERS: [&str; 3] = ["h0", "h1", "h2"];

fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(CASES);
    Config { cases, failure_persistence: None, ..Config::default() }
}

// ---------------------------------------------------------------------------
// Operations

/// A watermark given at release.
#[derive(Clone, Copy, Debug)]
enum Watermark {
    None,
    /// Just before now, or before the grant's deadline if that is earlier.
    Past,
}

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        name: &'static str,
        holder: usize,
        mode: Mode,
        ttl_ms: u64,
        retake: bool,
        meta: bool,
    },
    /// All or nothing, names in canonical order.
    AcquireAll {
        names: Vec<(&'static str, Mode)>,
        holder: usize,
        ttl_ms: u64,
        retake: bool,
    },
    /// `back`: which grant, counting back from the latest one (modulo their number).
    Renew {
        back: usize,
    },
    Release {
        back: usize,
        watermark: Watermark,
        dropped: bool,
        meta: bool,
    },
    /// Breaks `name` as inspected `age` steps ago (0: as it is now), all its grants
    /// or only the token of one of its grants (counted back among the name's own).
    Break {
        name: &'static str,
        only: Option<usize>,
        age: usize,
        note: bool,
    },
    Advance {
        ms: u64,
    },
    /// The table's periodic sweep (retires idle records).
    Sweep,
    /// A tentative reservation, on the table only (the CAS store has none), of
    /// a name the table has a record of. It changes no full ask's outcome (a
    /// grant clears the expired reservations and those it conflicts with).
    Reserve {
        name: &'static str,
        holder: usize,
        mode: Mode,
    },
}

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![Just(Mode::Exclusive), Just(Mode::Shared)]
}

fn ttl_ms() -> impl Strategy<Value = u64> {
    // Zero is refused by both; the others are within both stores' limits.
    prop_oneof![1 => Just(0), 4 => Just(1_000), 3 => Just(2_500), 2 => Just(10_000)]
}

fn op() -> impl Strategy<Value = Op> {
    let name = proptest::sample::select(NAMES.to_vec());
    let holder = 0..HOLDERS.len();
    let back = 0usize..6;
    prop_oneof![
        6 => (name.clone(), holder.clone(), mode(), ttl_ms(), any::<bool>(), proptest::bool::weighted(0.2)).prop_map(
            |(name, holder, mode, ttl_ms, retake, meta)| Op::Acquire { name, holder, mode, ttl_ms, retake, meta }
        ),
        2 => (proptest::sample::subsequence(NAMES.to_vec(), 2..=3), proptest::collection::vec(mode(), 3), holder,
              ttl_ms(), proptest::bool::weighted(0.2))
            .prop_map(|(names, modes, holder, ttl_ms, retake)| Op::AcquireAll {
                names: names.into_iter().zip(modes).collect(),
                holder,
                ttl_ms,
                retake,
            }),
        3 => back.clone().prop_map(|back| Op::Renew { back }),
        3 => (back.clone(), prop_oneof![Just(Watermark::None), Just(Watermark::Past)], proptest::bool::weighted(0.3),
              proptest::bool::weighted(0.2))
            .prop_map(|(back, watermark, dropped, meta)| Op::Release { back, watermark, dropped, meta }),
        2 => (name, proptest::option::weighted(0.5, back), 0usize..3, any::<bool>())
            .prop_map(|(name, only, age, note)| Op::Break { name, only, age, note }),
        4 => prop_oneof![
            4 => 1u64..=300,
            2 => prop_oneof![Just(1_000u64), Just(2_500), Just(10_000)],
            1 => 999u64..=1_001,
            2 => 10_001u64..=15_000,
        ]
        .prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Sweep),
        2 => (proptest::sample::select(NAMES.to_vec()), 0..HOLDERS.len(), mode())
            .prop_map(|(name, holder, mode)| Op::Reserve { name, holder, mode }),
    ]
}

// ---------------------------------------------------------------------------
// What the two stores answer, with their tokens replaced by the grants they
// belong to.

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
struct View {
    token: Tok,
    holder: usize,
    mode: Mode,
    deadline_ms: u64,
    ttl_ms: u64,
    acquired_ms: Option<u64>,
    expires_in_ms: u64,
}

#[derive(Debug, PartialEq, Eq)]
struct Pred {
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
struct GrantView {
    name: String,
    holder: usize,
    mode: Mode,
    deadline_ms: u64,
    local_deadline: Mono,
    ttl: Duration,
    predecessor: Option<Pred>,
}

#[derive(Debug, PartialEq, Eq)]
enum Answer {
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
struct State {
    exists: bool,
    holders: Vec<View>,
    expired: Vec<View>,
    last_token: Tok,
    watermark_ms: Option<u64>,
    last: Option<Pred>,
    modified_ms: Option<u64>,
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

// ---------------------------------------------------------------------------
// The two stores, side by side

/// One store, with what the test knows of its tokens.
struct Side {
    what: &'static str,
    store: Arc<dyn LeaseStore>,
    clock: ManualClock,
    /// The grant each token of each name belongs to.
    grants: HashMap<(String, u64), usize>,
    /// Highest token seen under each name (granted, or `last_token` inspected).
    high: HashMap<String, u64>,
    /// Each name's state after each step (the first: before any).
    states: Vec<HashMap<&'static str, LeaseState>>,
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
    fn note_grant(&mut self, g: &Grant, n: usize) -> Result<(), String> {
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
    async fn inspect_all(&mut self) -> Result<Vec<State>, String> {
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

struct World {
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
    fn new() -> Self {
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
    async fn step(&mut self, op: &Op) -> Result<(), String> {
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

    async fn compare_states(&mut self) -> Result<(), String> {
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

/// What one store did.
#[derive(Debug)]
enum Raw {
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
    fn answer(&self, raw: &Raw) -> Answer {
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

/// Runs `ops` on fresh stores; `Err` describes the first step where they differ.
fn run(ops: &[Op]) -> Result<(), String> {
    block_on(async {
        let mut world = World::new();
        world.compare_states().await.map_err(|e| format!("before any step: {e}"))?;
        for (i, op) in ops.iter().enumerate() {
            world.step(op).await.map_err(|e| format!("step {i}, {op:?}: {e}"))?;
        }
        Ok(())
    })
}

proptest! {
    #![proptest_config(config())]

    /// The table and `CasStore` grant, refuse and report alike, step by step.
    #[test]
    fn the_table_and_the_cas_store_agree(ops in proptest::collection::vec(op(), 1..=MAX_OPS)) {
        run(&ops).map_err(TestCaseError::fail)?;
    }
}
