//! The client's metrics (`tenure_core::meter`), as a recorder sees them:
//! exact counts for an acquisition after a busy answer, renewals, a loss and
//! releases, on the memory store with a manual clock.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tenure_core::{CasOptions, CasStore, Client, Error, LeaseOptions, LossReason, ManualClock, MemoryBackend, meter};

/// A metric's name and its labels, sorted.
type Series = (String, Vec<(String, String)>);

/// Everything recorded so far: a snapshot drains the recorder, so each is
/// added to what came before.
struct Tally {
    snap: Snapshotter,
    seen: RefCell<HashMap<Series, DebugValue>>,
}

impl Tally {
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<DebugValue> {
        let mut seen = self.seen.borrow_mut();
        for (key, _, _, value) in self.snap.snapshot().into_vec() {
            let key = key.key();
            let mut labels: Vec<(String, String)> =
                key.labels().map(|l| (l.key().to_string(), l.value().to_string())).collect();
            labels.sort();
            match (seen.get_mut(&(key.name().to_string(), labels.clone())), value) {
                (Some(DebugValue::Counter(n)), DebugValue::Counter(more)) => *n += more,
                (Some(DebugValue::Histogram(v)), DebugValue::Histogram(more)) => v.extend(more),
                (Some(old), new) => panic!("{} changed type: {old:?} then {new:?}", key.name()),
                (None, value) => {
                    seen.insert((key.name().to_string(), labels), value);
                }
            }
        }
        let mut want: Vec<(String, String)> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        want.sort();
        seen.get(&(name.to_string(), want)).map(|v| match v {
            DebugValue::Counter(n) => DebugValue::Counter(*n),
            DebugValue::Histogram(v) => DebugValue::Histogram(v.clone()),
            DebugValue::Gauge(g) => DebugValue::Gauge(*g),
        })
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        match self.value(name, labels) {
            Some(DebugValue::Counter(n)) => n,
            None => 0,
            Some(other) => panic!("{name} is not a counter: {other:?}"),
        }
    }

    fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        match self.value(name, labels) {
            Some(DebugValue::Histogram(v)) => v.into_iter().map(|f| f.into_inner()).collect(),
            None => Vec::new(),
            Some(other) => panic!("{name} is not a histogram: {other:?}"),
        }
    }
}

/// Advances the clock in 10 ms steps, letting the keep-alive run, until `done`.
async fn advance_until(clock: &ManualClock, limit: Duration, mut done: impl FnMut() -> bool) {
    let mut left = limit;
    while !done() && !left.is_zero() {
        let step = left.min(Duration::from_millis(10));
        clock.advance(step);
        left -= step;
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
    }
}

#[test]
fn an_acquire_after_a_busy_answer_renewals_a_loss_and_releases_are_recorded_exactly() {
    let recorder = DebuggingRecorder::new();
    let tally = Tally { snap: recorder.snapshotter(), seen: RefCell::default() };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().expect("rt");
    // A recorder of this thread only: the runtime and its tasks run here.
    metrics::with_local_recorder(&recorder, || runtime.block_on(scenario(&tally)));
}

async fn scenario(tally: &Tally) {
    let clock = ManualClock::new();
    let memory = Arc::new(MemoryBackend::new(clock.shared()));
    let store = Arc::new(CasStore::new(memory, clock.shared(), CasOptions::default()));
    let (a, b) = (Client::new(store.clone()), Client::new(store));
    // TTL 8 s: a renewal every second.
    let opts = LeaseOptions::exclusive().with_ttl(Duration::from_secs(8)).no_wait();
    let ex = [("store", "memory"), ("mode", "exclusive")];

    let first = a.try_acquire("l", &opts).await.expect("a free lease");
    assert!(matches!(b.try_acquire("l", &opts).await, Err(Error::Busy { .. })));
    assert_eq!(tally.counter(meter::ACQUIRED_TOTAL, &ex), 1);
    assert_eq!(tally.counter(meter::BUSY_TOTAL, &ex), 1);

    // Three renewals: at 1 s, 2 s and 3 s.
    advance_until(&clock, Duration::from_millis(3_500), || false).await;
    assert_eq!(first.renewals(), 3);
    assert_eq!(tally.counter(meter::RENEWALS_TOTAL, &ex), 3);
    assert_eq!(tally.histogram(meter::RENEWAL_SECONDS, &ex).len(), 3);

    // The lease is broken and taken by b: a's next renewal finds it stolen.
    let seen = b.inspect("l").await.expect("inspect");
    b.break_lease(&seen, None, None).await.expect("break");
    let second = b.try_acquire("l", &opts).await.expect("the broken lease");
    advance_until(&clock, Duration::from_secs(2), || first.health().is_lost()).await;
    assert!(matches!(first.health(), tenure_core::Health::Lost(LossReason::Stolen { .. })), "{:?}", first.health());
    assert_eq!(
        tally.counter(meter::LOST_TOTAL, &[("store", "memory"), ("mode", "exclusive"), ("reason", "stolen")]),
        1
    );
    assert_eq!(tally.counter(meter::ACQUIRED_TOTAL, &ex), 2);
    assert_eq!(tally.counter(meter::BUSY_TOTAL, &ex), 1);
    // The renewal that found it stolen took time too, but renewed nothing.
    assert_eq!(tally.counter(meter::RENEWALS_TOTAL, &ex), 3);
    assert_eq!(tally.histogram(meter::RENEWAL_SECONDS, &ex).len(), 4);
    assert_eq!(second.renewals(), 0);

    // Both handles end: each records its hold time once. Both acquisitions
    // were answered at once, with no time passing on the clock.
    assert!(tally.histogram(meter::HOLD_SECONDS, &ex).is_empty());
    first.release().await.expect("release the lost lease");
    second.release().await.expect("release");
    let held = tally.histogram(meter::HOLD_SECONDS, &ex);
    assert_eq!(held.len(), 2, "{held:?}");
    assert!(held[0] >= 3.5, "the first hold lasted from 0 to its loss after 4 s: {held:?}");
    assert_eq!(tally.histogram(meter::WAIT_SECONDS, &ex), vec![0.0, 0.0]);
    // No shared-mode series, and no other reason of loss.
    assert_eq!(tally.counter(meter::ACQUIRED_TOTAL, &[("store", "memory"), ("mode", "shared")]), 0);
    assert_eq!(
        tally.counter(meter::LOST_TOTAL, &[("store", "memory"), ("mode", "exclusive"), ("reason", "outage")]),
        0
    );
}
