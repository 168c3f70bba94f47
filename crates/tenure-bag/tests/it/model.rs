//! A model of append vs close (stateright, exhaustive BFS): two writers, each
//! appending one frame to its own data file in one bucket, two closers, and time
//! with skewed clocks. Any process may stop at any step (a crash): the checker
//! explores every interleaving and every prefix.
//!
//! It shows that every writer's verdict agrees with the one manifest every reader
//! reads: accepted ⇒ covered, rejected ⇒ not covered — and that the checks are
//! not vacuous: without the skew margin on the fast path, or with a closer that
//! lists before its prelock, the checker finds a counterexample.

use stateright::{Checker, Model, Property};

const W: usize = 2;
/// Bucket end, grace and the skew bound, in ticks.
const END: u8 = 2;
const GRACE: u8 = 2;
const SKEW: u8 = 1;
const MAX_T: u8 = 6;
/// Clock offsets (pairwise at most SKEW apart): writer 0 slow, closer 0 fast.
const WRITER_OFF: [u8; W] = [0, 1];
const CLOSER_OFF: [u8; 2] = [1, 0];
/// A frame is two bytes, written in two steps (a torn write in between).
const FRAME: u8 = 2;

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Close {
    Idle,
    /// Listing file `next`; sizes seen so far.
    Listing {
        next: u8,
        sizes: [u8; W],
    },
    Done,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Verdict {
    Early,
    NoClose,
    InManifest,
    Rejected,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Pc {
    Start,
    Half,
    Full,
    /// Written; reads its clock next.
    Written,
    CheckPrelock,
    Helping(Close),
    Decided(Verdict),
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct St {
    now: u8,
    sizes: [u8; W],
    prelock: bool,
    manifest: Option<[u8; W]>,
    writers: [Pc; W],
    closers: [Close; 2],
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Act {
    Tick,
    Writer(usize),
    Closer(usize),
}

#[derive(Clone, Copy, Debug)]
struct BagModel {
    /// The fast path keeps `max_skew` away from `end + grace` (the real rule).
    skew_margin: bool,
    /// Closers ensure the prelock before listing (the real rule).
    prelock_first: bool,
}

impl BagModel {
    /// One step of the close procedure (shared by closers and helping writers).
    fn close_step(&self, s: &mut St, c: Close) -> Close {
        match c {
            Close::Idle => {
                if s.manifest.is_some() {
                    return Close::Done;
                }
                if self.prelock_first {
                    s.prelock = true;
                }
                Close::Listing { next: 0, sizes: [0; W] }
            }
            Close::Listing { next, mut sizes } if (next as usize) < W => {
                sizes[next as usize] = s.sizes[next as usize];
                Close::Listing { next: next + 1, sizes }
            }
            Close::Listing { sizes, .. } => {
                s.prelock = true;
                // First one wins (link(2) / create-if-absent).
                if s.manifest.is_none() {
                    s.manifest = Some(sizes);
                }
                Close::Done
            }
            Close::Done => Close::Done,
        }
    }

    fn fast(&self, clock: u8) -> bool {
        let margin = if self.skew_margin { SKEW } else { 0 };
        clock + margin < END + GRACE
    }
}

impl Model for BagModel {
    type State = St;
    type Action = Act;

    fn init_states(&self) -> Vec<St> {
        vec![St {
            now: 0,
            sizes: [0; W],
            prelock: false,
            manifest: None,
            writers: [Pc::Start; W],
            closers: [Close::Idle; 2],
        }]
    }

    fn actions(&self, s: &St, acts: &mut Vec<Act>) {
        if s.now < MAX_T {
            acts.push(Act::Tick);
        }
        for w in 0..W {
            if !matches!(s.writers[w], Pc::Decided(_)) {
                acts.push(Act::Writer(w));
            }
        }
        for (c, (&state, off)) in s.closers.iter().zip(CLOSER_OFF).enumerate() {
            // A closer starts only once the bucket is past its grace on its own clock.
            let due = s.now + off >= END + GRACE;
            if state != Close::Done && (due || state != Close::Idle) {
                acts.push(Act::Closer(c));
            }
        }
    }

    fn next_state(&self, s: &St, a: Act) -> Option<St> {
        let mut n = s.clone();
        match a {
            Act::Tick => n.now += 1,
            Act::Closer(c) => n.closers[c] = self.close_step(&mut n, s.closers[c]),
            Act::Writer(w) => {
                n.writers[w] = match s.writers[w] {
                    // A new data file: rejected unwritten if a close has begun.
                    Pc::Start if s.prelock => Pc::Decided(Verdict::Rejected),
                    Pc::Start => Pc::Half,
                    Pc::Half | Pc::Full => {
                        n.sizes[w] += 1;
                        if s.writers[w] == Pc::Half { Pc::Full } else { Pc::Written }
                    }
                    Pc::Written if self.fast(s.now + WRITER_OFF[w]) => Pc::Decided(Verdict::Early),
                    Pc::Written => Pc::CheckPrelock,
                    Pc::CheckPrelock if !s.prelock => Pc::Decided(Verdict::NoClose),
                    Pc::CheckPrelock => Pc::Helping(Close::Idle),
                    Pc::Helping(Close::Done) => match s.manifest {
                        Some(m) if m[w] >= FRAME => Pc::Decided(Verdict::InManifest),
                        Some(_) => Pc::Decided(Verdict::Rejected),
                        None => return None,
                    },
                    Pc::Helping(c) => Pc::Helping(self.close_step(&mut n, c)),
                    Pc::Decided(_) => return None,
                };
            }
        }
        Some(n)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("accepted writes are in the manifest", |_, s: &St| {
                (0..W).all(|w| match (s.writers[w], s.manifest) {
                    (Pc::Decided(v), Some(m)) if v != Verdict::Rejected => m[w] >= FRAME,
                    _ => true,
                })
            }),
            Property::always("rejected writes are never read", |_, s: &St| {
                (0..W).all(|w| match (s.writers[w], s.manifest) {
                    (Pc::Decided(Verdict::Rejected), Some(m)) => m[w] < FRAME,
                    (Pc::Decided(Verdict::Rejected), None) => s.sizes[w] == 0,
                    _ => true,
                })
            }),
            Property::sometimes("a writer is accepted on the fast path", |_, s: &St| {
                s.writers.contains(&Pc::Decided(Verdict::Early))
            }),
            Property::sometimes("a writer is accepted with no close begun", |_, s: &St| {
                s.writers.contains(&Pc::Decided(Verdict::NoClose))
            }),
            Property::sometimes("a late writer helps and is in the manifest", |_, s: &St| {
                s.writers.contains(&Pc::Decided(Verdict::InManifest))
            }),
            Property::sometimes("a late writer is rejected", |_, s: &St| {
                s.writers.contains(&Pc::Decided(Verdict::Rejected))
            }),
            Property::sometimes("a torn frame is covered by a manifest", |_, s: &St| {
                s.manifest.is_some_and(|m| m.contains(&1))
            }),
        ]
    }
}

#[test]
fn every_interleaving_of_appends_closes_and_crashes_agrees_on_the_accepted_set() {
    let checker = BagModel { skew_margin: true, prelock_first: true }.checker().spawn_bfs().join();
    checker.assert_properties();
    println!("explored {} states", checker.unique_state_count());
    assert!(checker.unique_state_count() > 1_000);
}

#[test]
fn a_fast_path_without_the_skew_margin_accepts_a_write_the_close_missed() {
    let checker = BagModel { skew_margin: false, prelock_first: true }.checker().spawn_bfs().join();
    checker.assert_any_discovery("accepted writes are in the manifest");
}

#[test]
fn a_closer_that_lists_before_its_prelock_loses_an_accepted_write() {
    let checker = BagModel { skew_margin: true, prelock_first: false }.checker().spawn_bfs().join();
    checker.assert_any_discovery("accepted writes are in the manifest");
}
