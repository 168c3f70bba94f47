//! The conformance suite: the invariants of tenure's design, as tests that every
//! lease store runs (object_store's `integration.rs` is the model).
//!
//! A store's test file implements [`Harness`] (how to open handles on one fresh
//! piece of storage, how time moves, how to damage a record) and invokes
//! [`conformance_tests!`], which expands to one `#[tokio::test]` per behaviour.
//! The functions are also public, so a store can call them with its own setup.

#![forbid(unsafe_code)]

mod line;
mod paced;
mod recipes;
mod slots;
mod suite;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure_core::{Backend, CasOptions, Clock, ManualClock};

pub use line::*;
pub use paced::{Paced, RENEWAL_WAIT};
pub use recipes::*;
pub use slots::*;
pub use suite::*;

/// Lease duration used by the suite.
pub const TTL: Duration = Duration::from_secs(2);
/// Clock skew bound the suite's stores are built with.
pub const MAX_SKEW: Duration = Duration::from_millis(500);
/// Age after which the suite's stores replace an unreadable record.
pub const CORRUPT_TTL: Duration = Duration::from_secs(5);

/// The options CAS-based harnesses build their stores with.
pub fn cas_options() -> CasOptions {
    CasOptions::default().with_max_skew(MAX_SKEW).with_corrupt_ttl(CORRUPT_TTL)
}

/// How time moves for a harness.
#[derive(Clone, Debug)]
pub enum Time {
    /// Every handle (and the server, if any) runs on this clock; the suite moves it.
    Manual(ManualClock),
    /// Real time (stores with their own server-side clocks, such as etcd).
    Real,
}

impl Time {
    /// The clock for stores of this harness.
    pub fn clock(&self) -> Arc<dyn Clock> {
        match self {
            Time::Manual(c) => c.shared(),
            Time::Real => tenure_core::SystemClock::shared(),
        }
    }
}

/// One fresh piece of storage, and how to reach it.
#[async_trait]
pub trait Harness: Send + Sync {
    /// A new handle on the same storage, as a separate process would have.
    async fn store(&self) -> Arc<dyn tenure_core::LeaseStore>;

    /// How time moves.
    fn time(&self) -> Time;

    /// A [`Backend`] on the same storage, for fenced records; `None` if the store
    /// has no raw records (the lease server).
    fn backend(&self) -> Option<Arc<dyn Backend>>;

    /// Overwrites the record of lease `name` with `bytes`, as a crash or a foreign
    /// writer would. `false` if the store cannot hold unreadable records.
    async fn corrupt(&self, name: &str, bytes: &[u8]) -> bool;

    /// Real time to let background work (keep-alive renewals) finish after the
    /// manual clock moves: a few ms for local stores, more for remote ones.
    fn settle(&self) -> Duration {
        Duration::from_millis(5)
    }

    /// When the latest renewal still in flight on this harness's stores began;
    /// [`advance`] waits for it. [`Paced`] notes them, and [`conformance_tests!`]
    /// runs every harness through it; a harness of its own need not.
    fn latest_renewal_in_flight(&self) -> Option<std::time::Instant> {
        None
    }
}

/// Moves time by `d`: in steps of at most 50 ms on a manual clock, each taken
/// once no renewal is in flight (see [`Paced`]), letting background work run
/// after each step; a real sleep otherwise.
pub async fn advance(h: &dyn Harness, d: Duration) {
    match h.time() {
        Time::Manual(clock) => {
            let step = Duration::from_millis(50);
            let mut left = d;
            while !left.is_zero() {
                let s = left.min(step);
                paced::until_no_renewal(h).await;
                clock.advance(s);
                left -= s;
                tokio::time::sleep(h.settle()).await;
            }
        }
        Time::Real => tokio::time::sleep(d).await,
    }
}

/// Whether tests that need an external server must fail, not skip, when it is
/// absent (CI sets `TENURE_REQUIRE_SERVERS=1`).
pub fn servers_required() -> bool {
    std::env::var("TENURE_REQUIRE_SERVERS").is_ok_and(|v| v == "1")
}

/// The value of the environment variable naming a test server, or `None` after
/// printing why the test is skipped. Panics instead when servers are required.
pub fn server_from_env(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if servers_required() => {
            panic!("{var} is not set but TENURE_REQUIRE_SERVERS=1: start the servers with scripts/servers.sh")
        }
        _ => {
            // Credentials for real cloud services are not servers we can start.
            let hint = if var.contains("GCS") || var.contains("GOOGLE") {
                ""
            } else {
                " (start the test servers with scripts/servers.sh start, then eval \"$(scripts/servers.sh env)\")"
            };
            eprintln!("skipped: {var} is not set{hint}");
            None
        }
    }
}

/// Expands to one test per conformance behaviour. `$make` is an `async fn() ->
/// Option<H>` where `H: Harness` (`None` skips, after saying why).
///
/// `conformance_tests!(paused $make)` runs them on tokio's paused clock, for
/// stores that live in the test's process and do no I/O (memory): each real
/// wait for background work is then exact, as long as that work needs, and
/// takes no real time. Stores that do I/O, even to a local disk, keep real
/// time: a paused runtime would jump its clock over their operations'
/// deadlines while they run on another thread.
#[macro_export]
macro_rules! conformance_tests {
    (paused $make:path) => {
        $crate::conformance_tests!(@all $make; #[tokio::test(start_paused = true)]);
    };
    ($make:path) => {
        $crate::conformance_tests!(@all $make; #[tokio::test(flavor = "multi_thread", worker_threads = 4)]);
    };
    (@all $make:path; #[$runtime:meta]) => {
        $crate::conformance_tests!(@each $make; #[$runtime];
            exclusive_lease_excludes_everyone_else,
            shared_leases_coexist_and_exclude_exclusive,
            expired_lease_is_taken_over_after_ttl_and_not_before,
            wall_clock_deadline_older_than_max_skew_allows_takeover,
            tokens_increase_strictly_across_grants,
            fenced_write_from_a_stale_holder_is_rejected,
            delayed_release_never_frees_someone_elses_lease,
            break_is_conditional_on_the_observed_version,
            keep_alive_holds_the_lease_past_its_ttl,
            holder_learns_its_lease_was_stolen,
            corrupt_records_are_judged_by_age,
            multi_lease_is_all_or_nothing_in_canonical_order,
            same_holder_retakes_its_abandoned_lease_at_once,
            release_publishes_watermark_to_the_next_holder,
            metadata_is_carried_forward_until_a_holder_leaves_its_own,
            once_per_period_counts_only_runs_that_ended_well,
            concurrent_workers_increment_a_fenced_counter_exactly,
            a_store_acquires_and_renews_again_after_many_writes_by_others,
            waiters_are_granted_in_the_order_they_queued,
            a_multi_lease_waiter_takes_its_turn_in_a_queue_that_never_empties,
            two_tasks_of_one_client_never_hold_one_lease_at_once,
            an_exclusive_waiter_is_granted_before_readers_that_came_after_it,
            slots_never_hold_more_than_n_and_each_slot_counts_exactly,
            slots_refuse_another_count_and_a_second_slot_and_are_leases_of_their_own,
            a_dropped_slot_is_let_go_and_its_client_takes_one_again_at_once,
            watch_sees_each_change_in_order,
        );
    };
    (@each $make:path; #[$runtime:meta]; $($name:ident),* $(,)?) => {
        $(
            #[$runtime]
            async fn $name() {
                if let Some(h) = $make().await {
                    $crate::$name(&$crate::Paced::new(h)).await;
                }
            }
        )*
    };
}
