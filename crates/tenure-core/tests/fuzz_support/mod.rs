//! Shared by the fuzz tests of every crate (each includes this file with
//! `#[path = "…/crates/tenure-core/tests/fuzz_support/mod.rs"] mod fuzz_support;`):
//! the case count, byte mutations of valid encodings, and an allocation meter
//! that checks a parser allocates in proportion to its input, not to a length
//! field it read.
//!
//! `PROPTEST_CASES` sets the number of cases of every fuzz test (each test has
//! its own modest default so that CI stays fast); failures are not persisted to
//! files, a failing case is printed minimised instead.

#![allow(dead_code, unreachable_pub)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use proptest::prelude::*;
use proptest::test_runner::Config;

/// A proptest configuration of `default` cases, or `PROPTEST_CASES` if set.
pub fn config(default: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    Config { cases, failure_persistence: None, ..Config::default() }
}

/// One change to a valid encoding: the kinds of damage storage and networks do,
/// and the kinds of edits an attacker makes.
#[derive(Clone, Debug)]
pub enum Mutation {
    /// Flip bit `bit` of byte `at`.
    Flip { at: usize, bit: u8 },
    /// Overwrite byte `at` with `value`.
    Set { at: usize, value: u8 },
    /// Cut the input at `at`.
    Truncate { at: usize },
    /// Insert `bytes` at `at`.
    Insert { at: usize, bytes: Vec<u8> },
    /// Remove `len` bytes at `at`.
    Remove { at: usize, len: usize },
    /// Overwrite 1, 2, 4 or 8 bytes at `at` with an extreme little-endian number
    /// (0, 1, the maximum, half of it): where a length or count lives, this is a
    /// length prefix claiming gigabytes.
    Extreme { at: usize, width: u8, which: u8 },
    /// Copy `len` bytes from `from` over `at` (a field moved elsewhere).
    Splice { from: usize, at: usize, len: usize },
}

/// Mutations; positions are taken modulo the input's length when applied.
pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(at, value)| Mutation::Set { at, value }),
        2 => any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        1 => (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        1 => (any::<usize>(), 1usize..16).prop_map(|(at, len)| Mutation::Remove { at, len }),
        3 => (any::<usize>(), prop_oneof![Just(1u8), Just(2), Just(4), Just(8)], 0u8..4)
            .prop_map(|(at, width, which)| Mutation::Extreme { at, width, which }),
        1 => (any::<usize>(), any::<usize>(), 1usize..32).prop_map(|(from, at, len)| Mutation::Splice { from, at, len }),
    ]
}

/// Applies `mutations` to `bytes` in order.
pub fn mutate(bytes: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for m in mutations {
        apply(&mut out, m);
    }
    out
}

fn apply(out: &mut Vec<u8>, m: &Mutation) {
    let n = out.len();
    if n == 0 {
        if let Mutation::Insert { bytes, .. } = m {
            out.extend_from_slice(bytes);
        }
        return;
    }
    match m {
        Mutation::Flip { at, bit } => out[at % n] ^= 1 << bit,
        Mutation::Set { at, value } => out[at % n] = *value,
        Mutation::Truncate { at } => out.truncate(at % n),
        Mutation::Insert { at, bytes } => {
            let at = at % (n + 1);
            out.splice(at..at, bytes.iter().copied());
        }
        Mutation::Remove { at, len } => {
            let at = at % n;
            out.drain(at..(at + len).min(n));
        }
        Mutation::Extreme { at, width, which } => {
            let max = match width {
                1 => u64::from(u8::MAX),
                2 => u64::from(u16::MAX),
                4 => u64::from(u32::MAX),
                _ => u64::MAX,
            };
            let value = [0, 1, max, max / 2][usize::from(*which % 4)];
            let at = at % n;
            let width = usize::from(*width).min(n - at);
            out[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
        }
        Mutation::Splice { from, at, len } => {
            let (from, at) = (from % n, at % n);
            let len = (*len).min(n - from).min(n - at);
            let piece = out[from..from + len].to_vec();
            out[at..at + len].copy_from_slice(&piece);
        }
    }
}

/// Up to `max` mutations.
pub fn mutations(max: usize) -> impl Strategy<Value = Vec<Mutation>> {
    proptest::collection::vec(mutation(), 1..=max)
}

/// Bytes that look like what parsers meet: mostly small, sometimes all of one
/// value, sometimes ASCII.
pub fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), 0..max),
        1 => (any::<u8>(), 0..max).prop_map(|(b, n)| vec![b; n]),
        1 => proptest::collection::vec(0x20u8..0x7f, 0..max),
    ]
}

// ---------------------------------------------------------------------------
// The allocation meter.

/// Counts the bytes the current thread has allocated and not freed, and the
/// peak of that since [`peak_during`] started measuring.
pub struct Meter;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    // `try_with`: during thread teardown the slots may be gone; then nothing is measured.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every call is forwarded to the system allocator unchanged; the meter
// only does arithmetic on thread-local cells, which never allocate.
unsafe impl GlobalAlloc for Meter {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize);
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as isize));
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size as isize - layout.size() as isize);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static METER: Meter = Meter;

/// Runs `f` and returns its result with the most bytes it had allocated at once
/// on this thread (beyond what was live when it started).
pub fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let out = f();
    let peak = PEAK.with(Cell::get);
    (out, usize::try_from(peak - base).unwrap_or(0))
}
