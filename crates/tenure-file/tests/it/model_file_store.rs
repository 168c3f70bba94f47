//! Model check of the file store's versioned register (`tenure_file`'s store):
//! immutable version files `~<n>` published with `link(2)`, garbage collection of
//! old versions, and the ABA check by listing after each write (stateright;
//! exhaustive breadth-first search of a bounded space).
//!
//! # What is modelled
//!
//! The directory maps version → content; a content is a unique write id and the id
//! of the value its writer had read (0: absent). Each step is one system call, and
//! any process may pause between any two. The steps mirror
//! `FileBackend::get_blocking` and `put_blocking` line by line:
//!
//! - **read**: `scan` (one atomic listing: POSIX readdir returns every entry that
//!   is neither added nor removed meanwhile, and the newest version is never
//!   removed), take the highest version, `open` + read it; if it is gone, list again.
//! - **conditional write** from version `n` (create: `n = 0`): `link` to `~<n+1>`,
//!   a conflict if that name exists; `scan`; if a version more than [`KEEP`] (the
//!   real constant) above `n+1` is listed, `remove_file(~<n+1>)` and report an
//!   *unknown* outcome (the ABA check); else delete, one `remove_file` at a time in
//!   any order, the listed versions more than `KEEP` below `n+1`, and report done.
//!   The temp file, its unlink, fsync and stale-temp cleanup change no version and
//!   are left out.
//! - **read** also lists once more after reading `~v`, and starts over if a
//!   version above `v + KEEP` is listed.
//!
//! Writers make a bounded number of attempts (read + conditional write each),
//! readers a bounded number of reads.
//!
//! # Properties
//!
//! Always: (1) *CAS steps*: the current value (the highest version's) only changes
//! to a value whose writer read the value current just before, and the highest
//! version never goes down; (2) *done means done*: every write reported done became
//! current (no lost update); (3) *conflict means no effect*: no write reported as a
//! conflict ever became current or was returned by a read; (4) *linearizable
//! reads*: a read returns a value that was current at some instant during the read.
//! Sometimes: a version is collected; a paused writer re-creates a collected slot
//! and the ABA check refuses it.
//!
//! Negative controls: no ABA check (a paused writer resurrects a collected slot and
//! its lost update is reported done); a write that replaces an existing version
//! (what `rename` would do); and the two rules this model first found wrong, each
//! still caught: an ABA check that reports a conflict whenever *any* version is
//! above the one just linked (a write others had already built on was reported as
//! a conflict, so `FencedRecord::update` could apply a change twice), and a read
//! without the second listing (a reader paused across a collection returned a
//! re-created slot's value that was never current).

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use stateright::{Checker, Model, Property};
use tenure_file::KEEP;

/// Version slots (the bounds never reach the last).
const SLOTS: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Content {
    id: u8,
    base: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Phase {
    Idle,
    /// Listed: `max` is the newest version seen; `since` indexes the history entry
    /// current then.
    Listed {
        max: usize,
        since: usize,
    },
    /// Read `~v` (value `id`); with the proposed fix, about to list once more.
    Verify {
        v: usize,
        id: u8,
        since: usize,
    },
    /// Has read version `n`, value `base`; about to link `~<n+1>`.
    Read {
        n: usize,
        base: u8,
    },
    /// Linked `~<target>` (`stray`: that slot had existed before); about to list.
    Linked {
        target: usize,
        id: u8,
        stray: bool,
    },
    /// Deleting the versions in the bit set `del`.
    Collecting {
        id: u8,
        del: u32,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Proc {
    left: u8,
    used: u8,
    phase: Phase,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct St {
    files: [Option<Content>; SLOTS],
    /// Versions that ever existed (to recognise a re-created slot).
    ever: u32,
    /// The values that were current, in order, starting with 0 (absent).
    history: Vec<u8>,
    writers: Vec<Proc>,
    readers: Vec<Proc>,
    /// Bit sets of write ids: reported done, reported conflict, returned by a read.
    done: u64,
    conflicted: u64,
    returned: u64,
    bad_step: bool,
    bad_read: bool,
    seen: u8,
}

const SEEN_COLLECTED: u8 = 1;
const SEEN_RESURRECTED: u8 = 2;
const SEEN_ABA_REFUSED: u8 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Act {
    /// Writer `w` makes its next system call.
    Write(usize),
    /// Writer `w`, collecting, removes version `v`.
    Delete(usize, usize),
    /// Reader `r` makes its next system call.
    Read(usize),
}

#[derive(Clone, Debug)]
struct FileStore {
    /// Attempts per writer, reads per reader.
    writers: Vec<u8>,
    readers: Vec<u8>,
    aba_check: bool,
    link_replaces: bool,
    /// The proposed fix, for writes and for reads.
    fix_writes: bool,
    fix_reads: bool,
}

fn max_version(s: &St) -> usize {
    (1..SLOTS).rev().find(|&v| s.files[v].is_some()).unwrap_or(0)
}

fn bit(id: u8) -> u64 {
    1 << id
}

fn history_mask(s: &St) -> u64 {
    s.history.iter().fold(0, |m, &id| m | bit(id))
}

/// A read that started when `history[since]` was current returns `id`.
fn check_read(s: &mut St, since: usize, id: u8) {
    s.bad_read |= !s.history[since..].contains(&id);
    s.returned |= bit(id);
}

/// The newest version was `before`: a new current value must be based on the
/// previous one, and the newest version never drops.
fn note_current(s: &mut St, before: usize) {
    let after = max_version(s);
    let prev = *s.history.last().expect("history starts with 0");
    if after < before {
        s.bad_step = true;
    } else if let Some(c) = s.files[after].filter(|c| c.id != prev) {
        s.bad_step |= c.base != prev;
        s.history.push(c.id);
    }
}

impl FileStore {
    /// `get_blocking`, one system call; a finished read leaves the phase `Read`
    /// with the version and value it returns.
    fn read_step(&self, s: &mut St, phase: Phase) -> Phase {
        match phase {
            Phase::Idle | Phase::Read { .. } => match (max_version(s), s.history.len() - 1) {
                (0, since) => {
                    check_read(s, since, 0);
                    Phase::Read { n: 0, base: 0 }
                }
                (max, since) => Phase::Listed { max, since },
            },
            Phase::Listed { max, since } => {
                let Some(c) = s.files[max] else { return Phase::Idle }; // NotFound: list again
                if self.fix_reads {
                    return Phase::Verify { v: max, id: c.id, since };
                }
                check_read(s, since, c.id);
                Phase::Read { n: max, base: c.id }
            }
            Phase::Verify { v, id, since } => {
                if max_version(s) > v + KEEP as usize {
                    return Phase::Idle; // ~v may have been re-created: read again
                }
                check_read(s, since, id);
                Phase::Read { n: v, base: id }
            }
            other => other,
        }
    }

    fn write_step(&self, s: &mut St, w: usize) {
        let p = s.writers[w].clone();
        let finish = |s: &mut St, outcome: Option<bool>, id: u8| {
            match outcome {
                Some(true) => s.done |= bit(id),
                Some(false) => s.conflicted |= bit(id),
                None => {} // unknown (proposed fix): the caller reads again
            }
            s.writers[w].phase = Phase::Idle;
        };
        match p.phase {
            Phase::Idle | Phase::Listed { .. } | Phase::Verify { .. } => {
                s.writers[w].phase = self.read_step(s, p.phase);
            }
            Phase::Read { n, base } => {
                // put_blocking: the temp file is written, then linked to ~<n+1>.
                // Ids are unique per (writer, attempt): 16 attempts per writer at most.
                let (target, id) = (n + 1, 1 + 16 * w as u8 + p.used);
                (s.writers[w].left, s.writers[w].used) = (p.left - 1, p.used + 1);
                if s.files[target].is_some() && !self.link_replaces {
                    return finish(s, Some(false), id); // EEXIST: Put::Conflict
                }
                let stray = s.ever & (1 << target) != 0 && s.files[target].is_none();
                s.seen |= if stray { SEEN_RESURRECTED } else { 0 };
                let before = max_version(s);
                s.files[target] = Some(Content { id, base });
                s.ever |= 1 << target;
                note_current(s, before);
                s.writers[w].phase = Phase::Linked { target, id, stray };
            }
            Phase::Linked { target, id, stray } => {
                // The listing after the link: the ABA check, then collection.
                let max = max_version(s);
                let suspect = if self.fix_writes { target + KEEP as usize } else { target };
                if self.aba_check && max > suspect {
                    s.seen |= if stray { SEEN_ABA_REFUSED } else { 0 };
                    s.files[target] = None;
                    note_current(s, max);
                    return finish(s, (!self.fix_writes).then_some(false), id);
                }
                let del = (1..SLOTS)
                    .filter(|&v| s.files[v].is_some() && (v as u64) + KEEP < target as u64)
                    .fold(0u32, |m, v| m | 1 << v);
                s.writers[w].phase = Phase::Collecting { id, del };
                if del == 0 {
                    finish(s, Some(true), id);
                }
            }
            Phase::Collecting { .. } => {}
        }
    }

    fn delete(&self, s: &mut St, w: usize, v: usize) {
        let Phase::Collecting { id, del } = s.writers[w].phase else { return };
        let before = max_version(s);
        s.files[v] = None;
        s.seen |= SEEN_COLLECTED;
        note_current(s, before);
        let del = del & !(1 << v);
        s.writers[w].phase = Phase::Collecting { id, del };
        if del == 0 {
            s.done |= bit(id);
            s.writers[w].phase = Phase::Idle;
        }
    }
}

impl Model for FileStore {
    type State = St;
    type Action = Act;

    fn init_states(&self) -> Vec<St> {
        let proc = |&left: &u8| Proc { left, used: 0, phase: Phase::Idle };
        vec![St {
            files: [None; SLOTS],
            ever: 0,
            history: vec![0],
            writers: self.writers.iter().map(proc).collect(),
            readers: self.readers.iter().map(proc).collect(),
            done: 0,
            conflicted: 0,
            returned: 0,
            bad_step: false,
            bad_read: false,
            seen: 0,
        }]
    }

    fn actions(&self, s: &St, out: &mut Vec<Act>) {
        for (w, p) in s.writers.iter().enumerate() {
            match p.phase {
                Phase::Collecting { del, .. } => {
                    out.extend((1..SLOTS).filter(|&v| del & (1 << v) != 0).map(|v| Act::Delete(w, v)));
                }
                Phase::Idle if p.left == 0 => {}
                _ => out.push(Act::Write(w)),
            }
        }
        for (r, p) in s.readers.iter().enumerate() {
            if p.left > 0 || matches!(p.phase, Phase::Listed { .. } | Phase::Verify { .. }) {
                out.push(Act::Read(r));
            }
        }
    }

    fn next_state(&self, last: &St, act: Act) -> Option<St> {
        let mut s = last.clone();
        match act {
            Act::Write(w) => self.write_step(&mut s, w),
            Act::Delete(w, v) => self.delete(&mut s, w, v),
            Act::Read(r) => {
                let phase = s.readers[r].phase;
                let next = self.read_step(&mut s, phase);
                s.readers[r].left -= u8::from(matches!(next, Phase::Read { .. }));
                s.readers[r].phase = next;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(CAS_STEPS, |_, s: &St| !s.bad_step),
            Property::always(DONE_MEANS_DONE, |_, s: &St| s.done & !history_mask(s) == 0),
            Property::always(CONFLICT_NO_EFFECT, |_, s: &St| s.conflicted & (history_mask(s) | s.returned) == 0),
            Property::always(READS, |_, s: &St| !s.bad_read),
            Property::sometimes(COLLECTED, |_, s: &St| s.seen & SEEN_COLLECTED != 0),
            Property::sometimes(RESURRECTED, |_, s: &St| s.seen & SEEN_RESURRECTED != 0),
            Property::sometimes(ABA_REFUSED, |_, s: &St| s.seen & SEEN_ABA_REFUSED != 0),
        ]
    }
}

const CAS_STEPS: &str = "the register moves only by compare-and-swap steps";
const DONE_MEANS_DONE: &str = "every write reported done took effect";
const CONFLICT_NO_EFFECT: &str = "a write reported as a conflict had no effect";
const READS: &str = "reads return a value current during the read";
const COLLECTED: &str = "an old version is collected";
const RESURRECTED: &str = "a paused writer re-creates a collected slot";
const ABA_REFUSED: &str = "the ABA check refuses a re-created slot";
const WITNESSES: [&str; 3] = [COLLECTED, RESURRECTED, ABA_REFUSED];

/// The shipped store with `writers` attempts per writer and `readers` reads per reader.
fn shipped(writers: &[u8], readers: &[u8]) -> FileStore {
    FileStore {
        writers: writers.to_vec(),
        readers: readers.to_vec(),
        aba_check: true,
        link_replaces: false,
        fix_writes: true,
        fix_reads: true,
    }
}

/// The smallest bounds that reach every finding: a writer that writes often
/// enough to get a slot collected (KEEP + 2 writes), a paused writer with one
/// attempt, and a reader.
fn bounded() -> FileStore {
    shipped(&[KEEP as u8 + 2, 1], &[1])
}

/// Larger bounds: two paused writers.
fn wider() -> FileStore {
    shipped(&[KEEP as u8 + 2, 1, 1], &[1])
}

/// Explores the whole space and asserts that none of `hold` is violated and
/// that every witness is found.
fn check(label: &str, model: FileStore, hold: &[&'static str]) {
    let started = Instant::now();
    let checker = model.checker().spawn_bfs().join();
    println!(
        "{label}: {} unique states ({} visited), depth {}, {:.1?}",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    for p in hold {
        checker.assert_no_discovery(p);
    }
    for p in WITNESSES {
        checker.assert_any_discovery(p);
    }
}

/// A shortest trace to a state violating `property` (stateright's paths are not
/// always the shortest), printed step by step; panics if there is none.
fn find(label: &str, model: FileStore, property: &'static str) {
    let started = Instant::now();
    let prop = model.properties().into_iter().find(|p| p.name == property).expect("a property").condition;
    let mut parent: HashMap<St, Option<(St, Act)>> = HashMap::new();
    let mut queue: VecDeque<St> = model.init_states().into();
    queue.iter().for_each(|s| drop(parent.insert(s.clone(), None)));
    let mut actions = Vec::new();
    while let Some(s) = queue.pop_front() {
        if !prop(&model, &s) {
            let mut trace = Vec::new();
            let mut at = s;
            while let Some(Some((prev, act))) = parent.get(&at) {
                trace.push(describe(prev, *act, &at));
                at = prev.clone();
            }
            println!("{label}: {property:?} violated ({} states, {:.1?}):", parent.len(), started.elapsed());
            trace.iter().rev().enumerate().for_each(|(i, step)| println!("  {:2}. {step}", i + 1));
            return;
        }
        model.actions(&s, &mut actions);
        for act in actions.drain(..) {
            if let Some(next) = model.next_state(&s, act).filter(|n| !parent.contains_key(n)) {
                parent.insert(next.clone(), Some((s.clone(), act)));
                queue.push_back(next);
            }
        }
    }
    panic!("{label}: {property:?} holds in all {} states", parent.len());
}

/// A write's value, for humans: `w<writer>.<attempt>`.
fn name(id: u8) -> String {
    if id == 0 { "absent".into() } else { format!("w{}.{}", (id - 1) / 8, (id - 1) % 8 + 1) }
}

/// One step of a trace, for humans.
fn describe(before: &St, act: Act, after: &St) -> String {
    let (who, p0, p1) = match act {
        Act::Write(w) | Act::Delete(w, _) => (format!("W{w}"), before.writers[w].phase, after.writers[w].phase),
        Act::Read(r) => (format!("R{r}"), before.readers[r].phase, after.readers[r].phase),
    };
    let top = max_version(after);
    let what = match (act, p0, p1) {
        (Act::Delete(_, v), _, _) => format!("collects ~{v}"),
        (_, _, Phase::Listed { max, .. }) => format!("lists: newest ~{max}"),
        (_, Phase::Idle | Phase::Read { .. }, Phase::Read { .. }) => "lists: no version; reads absent".into(),
        (_, Phase::Listed { max, .. }, Phase::Idle) => format!("opens ~{max}: gone; will list again"),
        (_, Phase::Listed { .. }, Phase::Verify { v, id, .. } | Phase::Read { n: v, base: id }) => {
            format!("opens ~{v}: {}", name(id))
        }
        (_, Phase::Verify { v, .. }, Phase::Idle) => format!("lists: newest ~{top} > ~{v} + KEEP: reads again"),
        (_, Phase::Verify { .. }, Phase::Read { n, base }) => format!("lists: newest ~{top}: ~{n} = {}", name(base)),
        (_, Phase::Read { n, .. }, Phase::Idle) => format!("links ~{}: exists, conflict", n + 1),
        (_, Phase::Read { base, .. }, Phase::Linked { target, id, stray }) => {
            let again = if stray { ", RE-CREATING a collected slot" } else { "" };
            format!("links ~{target} = {} (read {}){again}", name(id), name(base))
        }
        (_, Phase::Linked { target, id, .. }, Phase::Idle) if after.done & bit(id) == 0 => {
            let outcome = if after.conflicted & bit(id) != 0 { "a CONFLICT" } else { "unknown" };
            format!("lists: newest ~{top} > ~{target}: removes ~{target}, reports {} {outcome}", name(id))
        }
        (_, Phase::Linked { id, .. }, _) => format!("lists: newest ~{top}, reports {} done", name(id)),
        _ => format!("{act:?}"),
    };
    format!("{who} {what}")
}

#[test]
fn writes_are_compare_and_swap_steps_and_reads_are_linearizable() {
    let all = [CAS_STEPS, DONE_MEANS_DONE, CONFLICT_NO_EFFECT, READS];
    check("shipped", bounded(), &all);
    check("shipped, 3 writers", wider(), &all);
}

// Negative controls: each must be caught.

#[test]
fn without_the_aba_check_a_paused_writer_loses_an_update_reported_done() {
    find("no ABA check", FileStore { aba_check: false, ..bounded() }, DONE_MEANS_DONE);
}

#[test]
fn a_write_that_replaces_an_existing_version_is_not_a_compare_and_swap() {
    find("link replaces", FileStore { link_replaces: true, ..bounded() }, CAS_STEPS);
}

/// The first ABA rule, found wrong by this model: A links ~1; B reads ~1 and links
/// ~2; A's listing sees ~2 > ~1 and reports a conflict for a write that B built
/// on. Callers that retry on conflict applied their change twice
/// (FencedRecord::update) or reported a landed write as fenced.
#[test]
fn an_aba_check_on_any_newer_version_reports_landed_writes_as_conflicts() {
    find("ABA check on any newer version", FileStore { fix_writes: false, ..bounded() }, CONFLICT_NO_EFFECT);
}

/// The first read, found wrong by this model: a reader paused between its
/// listing and its open read a collected slot that a paused writer re-created.
#[test]
fn a_read_without_the_second_listing_can_return_a_value_never_current() {
    find("read without the second listing", FileStore { fix_reads: false, ..bounded() }, READS);
}
