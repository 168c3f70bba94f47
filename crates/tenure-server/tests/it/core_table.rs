//! The lease table on its own, on a manual clock: limits, retirement, the token
//! rule and the quarantine.

use std::sync::Arc;
use std::time::Duration;

use tenure_core::{Holder, LeaseName, ManualClock, Mode};
use tenure_server::leases::{Acquired, Ask, Refusal};
use tenure_server::{Core, CoreOptions};

fn core(clock: &ManualClock, opts: CoreOptions) -> Core {
    let core = Core::new(clock.shared(), opts);
    clock.advance(core.quarantine_left());
    core
}

/// A table with room for two leases or waiters in each shard.
fn two_places_a_shard(clock: &ManualClock) -> Arc<Core> {
    let max_live = 2 * tenure_server::leases::SHARDS;
    Arc::new(core(clock, CoreOptions { max_live, ..CoreOptions::new(Duration::from_secs(10)) }))
}

fn ask<'a>(name: &'a str, holder: &'a Arc<Holder>) -> Ask<'a> {
    Ask { name, mode: Mode::Exclusive, ttl_ms: 1_000, holder, retake: false, meta: None }
}

fn acquire(core: &Core, name: &str, holder: &Arc<Holder>) -> Result<u64, Refusal> {
    match core.acquire(&[ask(name, holder)], false)? {
        Acquired::Granted(g) => Ok(g[0].token),
        Acquired::Busy { .. } => panic!("{name} unexpectedly busy"),
    }
}

fn cycle(core: &Core, name: &str, holder: &Arc<Holder>) -> u64 {
    let token = acquire(core, name, holder).expect("acquire");
    assert!(core.release(name, token, None, &holder.nonce, false, None, None).expect("release"));
    token
}

#[test]
fn nothing_is_granted_during_the_start_quarantine() {
    let clock = ManualClock::new();
    let core = Core::new(clock.shared(), CoreOptions::new(Duration::from_secs(10)));
    assert_eq!(core.quarantine_left(), Duration::from_secs(11), "quarantine is max_lease + 1s");
    let me = Arc::new(Holder::current());
    clock.advance(Duration::from_millis(10_999));
    assert!(matches!(acquire(&core, "q", &me), Err(Refusal::Quarantine(left)) if left == Duration::from_millis(1)));
    clock.advance(Duration::from_millis(1));
    acquire(&core, "q", &me).expect("granted once the quarantine is over");
}

#[test]
fn tokens_carry_the_server_time_in_microseconds() {
    let clock = ManualClock::starting_at(1_800_000_000_000);
    let c = core(&clock, CoreOptions::new(Duration::from_secs(10)));
    let me = Arc::new(Holder::current());
    let t1 = cycle(&c, "t", &me);
    assert_eq!(t1, c.now_us() + 1, "first token is just above the server time in µs");
    let t2 = cycle(&c, "t", &me);
    assert_eq!(t2, t1 + 1, "a frozen clock still gives strictly growing tokens");
    clock.advance(Duration::from_secs(3));
    let t3 = cycle(&c, "t", &me);
    assert_eq!(t3, c.now_us() + 1, "the token jumps with the clock");
}

#[test]
fn grants_that_outrun_the_clock_by_half_the_max_lease_are_refused() {
    let clock = ManualClock::new();
    let c = core(&clock, CoreOptions::new(Duration::from_millis(10)));
    let me = Arc::new(Holder::current());
    let mut a = ask("hot", &me);
    a.ttl_ms = 10;
    let mut refused = None;
    for i in 0..6_000 {
        match c.acquire(std::slice::from_ref(&a), false) {
            Ok(Acquired::Granted(g)) => {
                assert!(c.release("hot", g[0].token, None, &me.nonce, false, None, None).expect("release"));
            }
            Ok(Acquired::Busy { .. }) => panic!("busy"),
            Err(r) => {
                refused = Some((i, r));
                break;
            }
        }
    }
    let (i, why) = refused.expect("5,000 grants in the same µs must hit the cap");
    assert_eq!(i, 5_000, "the cap is max_lease/2 = 5000 µs ahead of the clock");
    assert!(matches!(why, Refusal::Overloaded(m) if m.contains("outran")));
    clock.advance(Duration::from_millis(1));
    let again = c.acquire(std::slice::from_ref(&a), false).expect("granted again once the clock catches up");
    assert!(matches!(again, Acquired::Granted(_)));
}

#[test]
fn retired_records_are_dropped_oldest_first_and_tokens_stay_above_them() {
    let clock = ManualClock::new();
    let mut opts = CoreOptions::new(Duration::from_secs(10));
    opts.retain = 64; // one per shard
    let c = core(&clock, opts);
    let me = Arc::new(Holder::current());
    let mut last = 0;
    for _ in 0..5 {
        last = cycle(&c, "keep/x", &me);
    }
    let x = LeaseName::new("keep/x").expect("name");
    assert!(c.inspect(&x).version.is_some(), "a released record is kept for the next holder");
    for i in 0..2_000 {
        cycle(&c, &format!("churn/{i}"), &me);
    }
    assert!(c.list("", None, usize::MAX, usize::MAX).0.len() <= 64, "retired records are bounded");
    assert!(c.inspect(&x).version.is_none(), "the oldest retired record was dropped");
    // The clock has not moved: only the shard's floor keeps the token above.
    assert!(cycle(&c, "keep/x", &me) > last, "a dropped record's tokens are never reused");
}

#[test]
fn live_leases_are_bounded() {
    let clock = ManualClock::new();
    let mut opts = CoreOptions::new(Duration::from_secs(10));
    opts.max_live = 64;
    let c = core(&clock, opts);
    let me = Arc::new(Holder::current());
    let outcomes: Vec<_> = (0..1_000).map(|i| acquire(&c, &format!("live/{i}"), &me)).collect();
    let granted = outcomes.iter().filter(|o| o.is_ok()).count();
    assert!(granted <= 64, "{granted} live leases granted past a limit of 64");
    assert!(outcomes.iter().any(|o| matches!(o, Err(Refusal::Overloaded(_)))));
}

#[test]
fn a_batch_takes_no_more_places_than_the_limit() {
    let clock = ManualClock::new();
    let mut opts = CoreOptions::new(Duration::from_secs(10));
    opts.max_live = 64;
    let c = core(&clock, opts);
    let me = Arc::new(Holder::current());
    let names: Vec<String> = (0..512).map(|i| format!("batch/{i}")).collect();
    let asks: Vec<Ask<'_>> = names.iter().map(|n| ask(n, &me)).collect();
    // 512 names over 64 shards of one place each: some shard gets two, and
    // each ask alone would fit in an empty table.
    assert!(matches!(c.acquire(&asks, false), Err(Refusal::Overloaded(_))));
    assert!(c.list("", None, usize::MAX, usize::MAX).0.is_empty(), "all or nothing: nothing was granted");
    acquire(&c, "batch/alone", &me).expect("one lease still fits");
}

#[test]
fn invalid_asks_are_refused_with_a_reason() {
    let clock = ManualClock::new();
    let c = core(&clock, CoreOptions::new(Duration::from_secs(10)));
    let me = Arc::new(Holder::current());
    let mut long = ask("ok", &me);
    long.ttl_ms = 10_001;
    assert!(matches!(c.acquire(&[long], false), Err(Refusal::Invalid(m)) if m.contains("max-lease")));
    assert!(matches!(acquire(&c, "../escape", &me), Err(Refusal::Invalid(m)) if m.contains("invalid lease name")));
    let big = "m".repeat(2_000);
    let mut meta = ask("ok", &me);
    meta.meta = Some(&big);
    assert!(matches!(c.acquire(&[meta], false), Err(Refusal::Invalid(_))));
    assert!(
        matches!(c.acquire(&[ask("a", &me), ask("a", &me)], false), Err(Refusal::Invalid(m)) if m.contains("twice"))
    );
    let token = acquire(&c, "wm", &me).expect("acquire");
    let past_deadline = c.now_us() / 1000 + 5_000;
    assert!(matches!(
        c.release("wm", token, None, &me.nonce, false, Some(past_deadline), None),
        Err(Refusal::Invalid(m)) if m.contains("deadline")
    ));
}

#[test]
fn a_full_request_breaks_reservations_and_their_upgrade_fails() {
    let clock = ManualClock::new();
    let c = Arc::new(core(&clock, CoreOptions::new(Duration::from_secs(10))));
    let (tentative, full, other) =
        (Arc::new(Holder::current()), Arc::new(Holder::current()), Arc::new(Holder::current()));
    let reservation = match c.acquire(&[ask("two", &tentative)], true).expect("reserve") {
        Acquired::Granted(g) => g.into_iter().next().expect("one"),
        Acquired::Busy { .. } => panic!("busy"),
    };
    assert_eq!(reservation.token, 0, "a reservation carries no usable token");
    assert!(
        matches!(c.acquire(&[ask("two", &other)], true), Ok(Acquired::Busy { .. })),
        "a second reservation waits for the first"
    );
    let token = acquire(&c, "two", &full).expect("a full request breaks the reservation");
    assert!(token > 0);
    assert!(c.upgrade("two", reservation.version, &tentative.nonce).expect("upgrade").is_err());
    assert_eq!(c.stats().tentative_broken.load(std::sync::atomic::Ordering::Relaxed), 1);
}

fn shared<'a>(name: &'a str, holder: &'a Arc<Holder>) -> Ask<'a> {
    Ask { mode: Mode::Shared, ..ask(name, holder) }
}

fn granted(outcome: Result<Acquired, Refusal>) -> tenure_server::leases::Granted {
    match outcome {
        Ok(Acquired::Granted(g)) => g.into_iter().next().expect("one grant"),
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[test]
fn shared_holders_and_reservations_count_against_the_live_lease_limit() {
    let clock = ManualClock::new();
    let mut opts = CoreOptions::new(Duration::from_secs(10));
    // Three places a shard: the lease and two holders.
    opts.max_live = 3 * tenure_server::leases::SHARDS;
    let c = core(&clock, opts);
    let holders: Vec<Arc<Holder>> = (0..3).map(|_| Arc::new(Holder::current())).collect();
    let take = |h: &Arc<Holder>, tentative| c.acquire(&[shared("crowd", h)], tentative);
    granted(take(&holders[0], false));
    let second = granted(take(&holders[1], false));
    let full = |o: Result<Acquired, Refusal>| matches!(o, Err(Refusal::Overloaded(m)) if m.contains("shared holder"));
    assert!(full(take(&holders[2], false)), "a third holder is a fourth place");
    assert!(full(take(&holders[2], true)), "so is a reservation");
    assert!(c.release("crowd", second.token, None, &holders[1].nonce, false, None, None).expect("release"));
    granted(take(&holders[2], false));
    // Expired and swept: the crowd leaves one record, its last ending, and its room.
    clock.advance(Duration::from_secs(11));
    c.sweep();
    let state = c.inspect(&LeaseName::new("crowd").expect("name"));
    assert!(state.holders.is_empty() && state.expired.is_empty(), "{state:?}");
    assert_eq!(state.last.as_ref().map(|l| l.how), Some(tenure_core::EndedHow::Expired));
    assert!(state.watermark_ms >= Some(second.deadline_ms), "the expired holders' deadlines bound the watermark");
    granted(take(&holders[0], false));
    granted(take(&holders[1], false));
}

#[test]
fn one_lease_holds_at_most_its_limit_of_shared_holders_and_reservations() {
    use tenure_server::leases::{MAX_HOLDERS, MAX_RESERVATIONS};
    let clock = ManualClock::new();
    let c = core(&clock, CoreOptions::new(Duration::from_secs(10)));
    for (tentative, limit, what) in [(false, MAX_HOLDERS, "shared holders"), (true, MAX_RESERVATIONS, "reservations")] {
        let name = if tentative { "reserved" } else { "crowded" };
        for _ in 0..limit {
            granted(c.acquire(&[shared(name, &Arc::new(Holder::current()))], tentative));
        }
        let one_more = c.acquire(&[shared(name, &Arc::new(Holder::current()))], tentative);
        assert!(matches!(&one_more, Err(Refusal::Overloaded(m)) if m.contains(what)), "{one_more:?}");
    }
}

#[test]
fn an_upgrade_is_held_to_the_limits_of_any_full_ask() {
    use tenure_server::leases::MAX_HOLDERS;
    let clock = ManualClock::new();
    // The manual clock never moves here: 10 ms grants stay live throughout.
    let c = core(&clock, CoreOptions::new(Duration::from_millis(10)));
    fn short<'a>(name: &'a str, holder: &'a Arc<Holder>) -> Ask<'a> {
        Ask { ttl_ms: 10, ..shared(name, holder) }
    }
    let planner = Arc::new(Holder::current());
    let overloaded = |o: &Result<Result<_, String>, Refusal>, what: &str| matches!(o, Err(Refusal::Overloaded(m)) if m.contains(what));

    // A shared reservation, then a full crowd of shared holders beside it: the
    // upgrade would be one holder too many.
    let reserved = granted(c.acquire(&[short("crowded", &planner)], true));
    for _ in 0..MAX_HOLDERS {
        granted(c.acquire(&[short("crowded", &Arc::new(Holder::current()))], false));
    }
    let upgrade = c.upgrade("crowded", reserved.version, &planner.nonce);
    assert!(overloaded(&upgrade, "shared holders"), "{upgrade:?}");
    let state = c.inspect(&LeaseName::new("crowded").expect("name"));
    assert_eq!(state.holders.len(), MAX_HOLDERS, "the refused upgrade added no holder");

    // A shared reservation, then grants in the same µs until the clock cap:
    // the upgrade's token would be more than max_lease / 2 ahead of the clock.
    let reserved = granted(c.acquire(&[short("hot", &planner)], true));
    let cycler = Arc::new(Holder::current());
    let hot = short("hot", &cycler);
    while let Ok(Acquired::Granted(g)) = c.acquire(std::slice::from_ref(&hot), false) {
        assert!(c.release("hot", g[0].token, None, &cycler.nonce, false, None, None).expect("release"));
    }
    let last = c.inspect(&LeaseName::new("hot").expect("name")).last_token;
    let upgrade = c.upgrade("hot", reserved.version, &planner.nonce);
    assert!(overloaded(&upgrade, "outran"), "{upgrade:?}");
    let state = c.inspect(&LeaseName::new("hot").expect("name"));
    assert!(state.holders.is_empty() && state.last_token == last, "no token was spent: {state:?}");
}

/// A waiter queued on a record that was retired (in the quarantine nothing
/// holds a record, and a sweep retires it) brings it back to life: dropping
/// the oldest retired records never drops it with its waiter, who is granted
/// once the quarantine is over.
#[tokio::test]
async fn a_waiter_on_a_retired_record_keeps_it_and_is_granted_after_the_quarantine() {
    use tenure_server::leases::Parking;
    let clock = ManualClock::new();
    let opts = CoreOptions { retain: 1, ..CoreOptions::new(Duration::from_secs(10)) };
    let core = Arc::new(Core::new(clock.shared(), opts));
    let (early, victim) = (Arc::new(Holder::current()), Arc::new(Holder::current().with_label("victim")));
    let park =
        |name: &str, holder: &Arc<Holder>| match core.acquire_or_park(&ask(name, holder), Duration::from_secs(600)) {
            Parking::Parked(p) => p,
            Parking::Done(done) => panic!("{name} answered at once in the quarantine: {done:?}"),
        };
    // A wait on `x` that leaves; the sweep then retires its record.
    drop(park("x", &early));
    core.sweep();
    // The victim queues on the retired record.
    let waiting = park("x", &victim);
    // Many more records retired, each shard keeping one: the oldest go first.
    for i in 0..2_000 {
        drop(park(&format!("other/{i}"), &early));
    }
    core.sweep();
    clock.advance(core.quarantine_left());
    match waiting.wait().await {
        Ok(Acquired::Granted(g)) => assert_eq!(g.len(), 1),
        other => panic!("the victim's wait must end in a grant, got {other:?}"),
    }
}

/// Queued waiters take places in the table like leases: a shard full of
/// waiters refuses the next one as overloaded, so a client that queues
/// without end cannot take the server's memory.
#[tokio::test]
async fn waiters_take_places_in_the_table_like_leases() {
    use tenure_server::leases::Parking;
    let clock = ManualClock::new();
    // Two places a shard: the held lease, and one waiter.
    let c = two_places_a_shard(&clock);
    let (holder, first, second) = (
        Arc::new(Holder::current()),
        Arc::new(Holder::current().with_label("first")),
        Arc::new(Holder::current().with_label("second")),
    );
    acquire(&c, "w", &holder).expect("held");
    let park = |who: &Arc<Holder>| c.acquire_or_park(&ask("w", who), Duration::from_secs(600));
    let Parking::Parked(waiting) = park(&first) else { panic!("the first waiter queues") };
    match park(&second) {
        Parking::Done(Err(Refusal::Overloaded(why))) => assert!(why.contains("waiter"), "{why}"),
        Parking::Done(other) => panic!("expected overloaded, got {other:?}"),
        Parking::Parked(_) => panic!("a full shard queued one more waiter"),
    }
    drop(waiting);
    let Parking::Parked(_again) = park(&second) else { panic!("a waiter's place is free again once it left") };
}

/// A waiter's place in the table passes to its grant: a shared waiter (whose
/// grant takes a place of its own) in a shard that its wait filled is
/// granted when the lease frees, not refused as overloaded.
#[tokio::test]
async fn a_waiter_in_a_full_shard_is_granted_in_its_own_place() {
    use tenure_server::leases::Parking;
    let clock = ManualClock::new();
    let c = two_places_a_shard(&clock);
    let (holder, reader) = (Arc::new(Holder::current()), Arc::new(Holder::current().with_label("reader")));
    let token = acquire(&c, "w", &holder).expect("held");
    let shared = Ask { mode: Mode::Shared, ..ask("w", &reader) };
    let Parking::Parked(waiting) = c.acquire_or_park(&shared, Duration::from_secs(600)) else {
        panic!("the reader queues")
    };
    assert!(c.release("w", token, None, &holder.nonce, false, None, None).expect("release"));
    match waiting.wait().await {
        Ok(Acquired::Granted(g)) => assert_eq!(g.len(), 1),
        other => panic!("the waiter must be granted in its own place, got {other:?}"),
    }
}
