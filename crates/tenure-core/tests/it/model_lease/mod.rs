//! Model check of the lease protocol over a versioned compare-and-swap register,
//! under the clock discipline of `tenure_core::cas`, with fenced writes to protected
//! storage (stateright; exhaustive breadth-first search of a bounded space).
//!
//! # Model
//!
//! - **Time**: a true time advanced by `Tick`; monotonic clocks *are* true time (no
//!   drift); wall clock of `p` = `now + offset[p]`, each offset 0 or `skew`, fixed
//!   per initial state, with `skew <= max_skew` (some variants break that). Time is unbounded: the
//!   state keeps times *relative to now* and clamps those that can no longer change
//!   a decision, so states differing by a shift in time are one. The real code gets
//!   absolute values (`BASE` + relative).
//! - **Register**: `(version, record)`; a write lands only if the version is still
//!   the one its sender read and makes it `version + 1` (the file store's `~<n+1>`);
//!   a read record's token floor is its version, as in `CasStore::try_acquire`.
//! - **Requests**: read + decide + send is one step (`Acquire`, `Renew`, `Release`),
//!   the write lands in a later one (`Land`): time passes and others act meanwhile.
//!   With `ambiguous`, a write may land while its sender hears "conflict"
//!   (`LandUnseen`), as the file store can report (see `model_file_store`).
//! - **Lease logic is the shipped code**: `tenure_core::record::{decide_acquire,
//!   decide_renew, decide_release}` on real `LeaseRecord`s (exclusive; `retake`
//!   as `Client` sets it once its own handle let go). The state keeps the record's
//!   last token and exclusive entry (`last`, `watermark_ms`: read by no decision).
//! - **Mirrored line by line**: `Observer` (`cas.rs`'s private judge, over the real
//!   `Judge` trait) and `observe` (a stamp `(token, renewals)` is first seen by the
//!   read that first shows it); from `keepalive.rs`/`cas.rs`: `local_deadline` =
//!   send time of the granting or renewing write + TTL, acting (beginning a fenced
//!   write) only while `now < local_deadline - safety`, a renewal's answer used only
//!   if it comes before then, and "grant gone" ending the holding.
//! - **Pauses and crashes**: any process may take no step for any number of ticks,
//!   also between beginning a fenced write and its arrival; `Crash` stops one for
//!   good (what it sent still arrives).
//! - **Protected storage** (`FencedRecord`): a write with token `t` is applied iff
//!   `t >=` the highest token applied so far.
//!
//! # Properties
//!
//! Always: (1) *tokens strictly increase*: each grant that lands has a token above
//! every earlier one, and the record's counter never goes back; (2) *one actor at a
//! time*: no two live processes both hold a grant and may act (`now < stop_by`) at
//! the same true time; (3) *fenced storage never goes back*: no write is applied
//! with a token below one already applied; (4) *no applied writes from overlapping
//! grants*: no two grants that could act at the same time both get a write applied.
//! Sometimes: a crashed holder's grant is taken over; a stale write is rejected;
//! takeovers by rule (a) and by rule (b); a renewal extends a holder's time.
//! Negative controls ([`Flaw`], skewed clocks): each must be caught.
//!
//! Not modelled: shared grants, lease sets, corrupt records, `break`, clock drift,
//! wall-clock jumps during a run, a second request in flight per process, restarts
//! with the same nonce, the keep-alive's timing (renewals at any tick: a superset),
//! and non-linearizable reads (see `model_file_store`).
//!
//! The model, its state and its knobs are in [`model`]; the checks, with the
//! properties' names, are here.

use std::time::Instant;

use stateright::{Checker, HasDiscoveries, Model};

mod model;

use model::{Flaw, Lease};

const TOKENS: &str = "tokens strictly increase";
const ONE_ACTOR: &str = "one actor at a time";
const FENCE_MONOTONIC: &str = "fenced storage never goes back";
const NO_OVERLAPPING_WRITES: &str = "no applied writes from overlapping grants";
const CRASH_TAKEOVER: &str = "a crashed holder's grant is taken over";
const STALE_REJECTED: &str = "a stale write is rejected by the fence";
const BY_WATCH: &str = "taken over by watching a full TTL";
const BY_WALL: &str = "taken over by the wall deadline plus max_skew";
const RENEWED: &str = "a renewal extends a holder's time";
const SAFETY: [&str; 4] = [TOKENS, ONE_ACTOR, FENCE_MONOTONIC, NO_OVERLAPPING_WRITES];
const WITNESSES: [&str; 5] = [CRASH_TAKEOVER, STALE_REJECTED, BY_WATCH, BY_WALL, RENEWED];

/// Explores the whole state space (breadth first, one thread), asserts that none
/// of `hold` is violated, and reports the size.
fn check(label: &str, model: Lease, hold: &[&'static str]) {
    let model = Lease { symmetric: true, ..model };
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
}

/// Runs a model that must violate `property`, stopping at the first counterexample.
fn find(label: &str, model: Lease, property: &'static str) {
    let started = Instant::now();
    let checker = model.checker().finish_when(HasDiscoveries::AnyOf([property].into())).spawn_bfs().join();
    let path = checker.assert_any_discovery(property);
    println!(
        "{label}: {property:?} violated ({} states explored, {:.1?}): {:?}",
        checker.unique_state_count(),
        started.elapsed(),
        path.into_actions()
    );
}

#[test]
fn two_processes_keep_every_safety_property() {
    check("2 processes, 4 writes", Lease::new(2), &SAFETY);
}

#[test]
fn three_processes_keep_every_safety_property() {
    // Three processes cost more states: protocol properties only (fenced writes
    // with three processes: `deeper_bounds`).
    let model = Lease { max_version: 3, fenced_writes: false, ..Lease::new(3) };
    check("3 processes, 3 writes, no fenced writes", model, &[TOKENS, ONE_ACTOR]);
}

#[test]
fn writes_that_land_while_their_sender_hears_conflict_keep_every_safety_property() {
    // What the file store does when a newer version appears before its post-link
    // listing (see model_file_store): the lease protocol must stay safe.
    let model = Lease { ambiguous: true, ..Lease::new(2) };
    check("2 processes, 4 writes, ambiguous conflicts", model, &SAFETY);
}

#[test]
fn the_safety_margin_is_slack_not_the_proof() {
    // With monotonic clocks that do not drift, holders may act to their very
    // local deadline: the margin covers drift and the time a write takes.
    let model = Lease { safety: 0, max_version: 3, ..Lease::new(2) };
    check("2 processes, 3 writes, safety margin 0", model, &SAFETY);
}

#[test]
#[ignore = "minutes of CPU: run on demand with --run-ignored only"]
fn deeper_bounds() {
    check("2 processes, 5 writes", Lease { max_version: 5, ..Lease::new(2) }, &SAFETY);
    check("3 processes, 3 writes", Lease { max_version: 3, ..Lease::new(3) }, &SAFETY);
}

#[test]
fn takeovers_after_crashes_stale_write_rejections_and_both_rules_happen() {
    let model = Lease { crashes: 1, witnesses: true, ..Lease::new(2) };
    let started = Instant::now();
    let checker =
        model.checker().finish_when(HasDiscoveries::AllOf(WITNESSES.into_iter().collect())).spawn_bfs().join();
    for p in WITNESSES {
        let path = checker.assert_any_discovery(p);
        println!("witness {p:?}: {:?}", path.into_actions());
    }
    println!("witnesses: {} states, {:.1?}", checker.unique_state_count(), started.elapsed());
}

// Negative controls: each removes one safeguard and must be caught.

#[test]
fn each_safeguard_removed_is_caught() {
    let base = Lease::new(2);
    let flawed = |flaw| Lease { flaw: Some(flaw), ..base.clone() };
    let controls = [
        ("no fencing: a paused write lands after a newer one", flawed(Flaw::NoFencing), FENCE_MONOTONIC),
        ("blind writes: the same token twice", flawed(Flaw::BlindWrites), TOKENS),
        // A watch one tick short is covered by the safety margin; one more is not.
        ("watch shorter than the TTL", flawed(Flaw::ShortWatch(base.safety as u64 + 1)), ONE_ACTOR),
        ("deadline timed from the answer", flawed(Flaw::DeadlineFromAnswer), ONE_ACTOR),
        ("no skew margin, skewed clocks", Lease { max_skew: 0, skew: base.safety + 2, ..base.clone() }, ONE_ACTOR),
    ];
    for (label, model, property) in controls {
        find(label, model, property);
    }
}

#[test]
fn clocks_beyond_the_skew_bound_break_exclusion_but_not_the_fence() {
    let base = Lease::new(2);
    let beyond = Lease { skew: base.max_skew as i64 + base.safety + 2, ..base };
    find("clocks beyond the bound", beyond.clone(), ONE_ACTOR);
    find("clocks beyond the bound", beyond.clone(), NO_OVERLAPPING_WRITES);
    check("clocks beyond the bound", Lease { max_version: 3, ..beyond }, &[TOKENS, FENCE_MONOTONIC]);
}

#[test]
fn holders_that_ignore_stop_by_overlap_and_only_the_fence_saves_the_storage() {
    let model = Lease { flaw: Some(Flaw::IgnoreStopBy), ..Lease::new(2) };
    find("holders ignore stop_by", model.clone(), ONE_ACTOR);
    find("holders ignore stop_by", model.clone(), NO_OVERLAPPING_WRITES);
    check("holders ignore stop_by", Lease { max_version: 3, ..model }, &[TOKENS, FENCE_MONOTONIC]);
}
