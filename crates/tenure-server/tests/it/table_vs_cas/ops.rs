//! The operations the test generates, and their weights.

use proptest::prelude::*;
use tenure_core::Mode;

use super::{HOLDERS, NAMES};

/// A watermark given at release.
#[derive(Clone, Copy, Debug)]
pub(super) enum Watermark {
    None,
    /// Just before now, or before the grant's deadline if that is earlier.
    Past,
}

#[derive(Clone, Debug)]
pub(super) enum Op {
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

pub(super) fn op() -> impl Strategy<Value = Op> {
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
