//! Random histories of appends (on time and late), closes, half-finished closes
//! and time steps, run on the real code over a directory: whatever happens, once
//! everything is closed, the accepted appends are exactly what every reader reads.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{T0, options};
use proptest::prelude::*;
use tenure_bag::fs::FsStorage;
use tenure_bag::{Batch, Log, ReadOptions};
use tenure_core::{Clock, ManualClock};

#[derive(Clone, Debug)]
enum Op {
    /// Writer `w` appends, stamped `lag` ms before now.
    Append { w: usize, lag: u64 },
    /// Time moves on.
    Advance(u64),
    /// Close every due bucket.
    CloseDue,
    /// A closer dies after its prelock in bucket `back` buckets before the newest due one.
    Prelock { back: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3usize, prop_oneof![Just(0u64), 0..4_000u64]).prop_map(|(w, lag)| Op::Append { w, lag }),
        2 => (1..1_500u64).prop_map(Op::Advance),
        1 => Just(Op::CloseDue),
        1 => (0..3u64).prop_map(|back| Op::Prelock { back }),
    ]
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    rt.block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = ManualClock::starting_at(T0);
        let log = Log::on_fs(FsStorage::new(dir.path(), false), options(clock.shared()));
        let writers: Vec<_> = (0..3).map(|i| log.writer(format!("w{i}")).expect("writer")).collect();
        let cfg = log.config_or_create().await.expect("config");
        let mut cursor = cfg.first_bucket_ms;
        let (mut accepted, mut rejected) = (BTreeSet::new(), BTreeSet::new());
        for (n, op) in ops.iter().enumerate() {
            match op {
                Op::Append { w, lag } => {
                    let ts = clock.wall_ms().saturating_sub(*lag);
                    let out = writers[*w].append(Batch::one(ts, format!("m{n}"))).await.expect("append");
                    if out.accepted { &mut accepted } else { &mut rejected }.insert(format!("m{n}"));
                }
                Op::Advance(ms) => clock.advance(Duration::from_millis(*ms)),
                Op::CloseDue => {
                    log.close_due(&mut cursor).await.expect("close");
                }
                Op::Prelock { back } => {
                    if let Some(last) = cfg.last_closable(clock.wall_ms()) {
                        let bucket = last.saturating_sub(back * cfg.width_ms).max(cfg.first_bucket_ms);
                        let bdir = FsStorage::new(dir.path(), false).bucket_dir(bucket).expect("dir");
                        std::fs::create_dir_all(&bdir).expect("mkdir");
                        std::fs::write(bdir.join("prelock"), b"").expect("prelock");
                    }
                }
            }
        }
        clock.advance(Duration::from_secs(10));
        log.close_due(&mut cursor).await.expect("final close");
        let reads = [
            log.read(&ReadOptions::default()).await.expect("read"),
            Log::on_fs(FsStorage::new(dir.path(), false), options(clock.shared()))
                .read(&ReadOptions { skip_snapshots: true, ..Default::default() })
                .await
                .expect("read"),
        ];
        prop_assert!(reads[0].exact);
        prop_assert_eq!(&reads[0].messages, &reads[1].messages);
        let read: BTreeSet<String> =
            reads[0].messages.iter().map(|m| String::from_utf8_lossy(&m.payload).into_owned()).collect();
        prop_assert_eq!(&read, &accepted, "rejected ones read: {:?}", read.intersection(&rejected).collect::<Vec<_>>());
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn after_any_history_readers_read_exactly_the_accepted_appends(ops in proptest::collection::vec(op(), 1..40)) {
        run(&ops)?;
    }
}
