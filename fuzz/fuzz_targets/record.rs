//! Lease records: arbitrary bytes, as any tenant of a store may write them.
//! What parses must keep its rules, read back unchanged, and grant above its
//! counter.
#![no_main]

use std::sync::{Arc, LazyLock};

use libfuzzer_sys::fuzz_target;
use tenure_core::limits::{MAX_TIME_MS, MAX_TOKEN, MAX_TTL, millis};
use tenure_core::record::{self, Ask, ClockJudge, Decision, LeaseRecord};
use tenure_core::{Holder, Mode};

static ME: LazyLock<Arc<Holder>> = LazyLock::new(|| Arc::new(Holder::current().with_nonce("fuzz")));

fuzz_target!(|data: &[u8]| {
    let Ok(r) = LeaseRecord::parse(data) else { return };
    assert_eq!(LeaseRecord::parse(&r.to_bytes()), Ok(r.clone()), "round trip");
    for (e, _) in r.entries() {
        assert!(e.token <= r.last_token && e.ttl_ms >= 1 && e.ttl_ms <= millis(MAX_TTL));
        assert!(e.deadline_ms <= MAX_TIME_MS && e.acquired_ms <= MAX_TIME_MS);
    }
    let me = ME.clone();
    let now_ms = MAX_TIME_MS - millis(MAX_TTL);
    let ask =
        Ask { mode: Mode::Exclusive, ttl_ms: 1000, holder: &me, retake: true, now_ms, token_floor: 0, meta: None };
    if let Decision::Grant { token, record, .. } =
        record::decide_acquire(&r.name, Some(&r), &ask, &ClockJudge { now_ms })
    {
        assert!(token > r.last_token && token < MAX_TOKEN);
        assert_eq!(LeaseRecord::parse(&record.to_bytes()), Ok(record));
    }
});
