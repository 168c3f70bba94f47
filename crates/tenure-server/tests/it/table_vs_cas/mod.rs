//! The server's lease table against `CasStore`, on the same operation
//! sequences (issue "One front door").
//!
//! Generated sequences of operations over three lease names and three holders
//! (exclusive and shared acquisitions, with and without `retake` and metadata;
//! all-or-nothing acquisitions of several names; renewals; releases, with and
//! without a watermark, dropped or not; breaks of all grants or of one token,
//! with a fresh or a stale `inspect`; clock steps, short, to the deadline and
//! past every TTL) run through the [`LeaseStore`](tenure_core::LeaseStore)
//! API on two stores: the table ([`Core`](tenure_server::Core), through
//! `common::table_store`, which answers as the `tenure://` client does) and a
//! [`CasStore`](tenure_core::CasStore) over memory. Each has its own
//! [`ManualClock`](tenure_core::ManualClock), started at the same wall time
//! and moved identically.
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
//! The parts: [`ops`] generates the operations, [`side`] turns what each store
//! answers and shows into views that can be compared, and [`world`] runs each
//! operation on both stores and compares them.
//!
//! `PROPTEST_CASES` sets the number of cases (default [`CASES`]).

use std::time::Duration;

use futures::executor::block_on;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError};

mod ops;
mod side;
mod world;

use ops::{Op, op};
use world::World;

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
