//! The behaviours. Each function takes a fresh [`Harness`] and panics with a
//! message naming the broken invariant.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tenure_core::{
    AcquireRequest, Attempt, Backend, BreakNote, Client, EndedHow, Error, FencedRecord, Grant, Health, Holder,
    LeaseName, LeaseOptions, LeaseStore, LossReason, MemoryBackend, Mode, ReleaseRequest, Released,
};

use crate::{CORRUPT_TTL, Harness, MAX_SKEW, TTL, Time, advance};

pub(crate) fn opts() -> LeaseOptions {
    LeaseOptions::exclusive().with_ttl(TTL).no_wait()
}

pub(crate) async fn client(h: &dyn Harness) -> Client {
    Client::new(h.store().await)
}

pub(crate) fn name(s: &str) -> LeaseName {
    LeaseName::new(s).expect("valid test name")
}

/// Waits (in real time) until `n` wait in `lease`'s line, as `onlooker` reads it.
pub(crate) async fn until_queued(onlooker: &Arc<dyn LeaseStore>, lease: &str, n: usize) {
    let mut queued = 0;
    for _ in 0..1000 {
        queued = onlooker.waiting(&name(lease)).await.expect("read the line").expect("a line");
        if queued == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{queued} waiters in line, never {n}");
}

/// Acquires through the store directly, with no keep-alive: a holder that crashes
/// right after acquiring.
pub(crate) async fn crashed_holder(store: &Arc<dyn LeaseStore>, lease: &str, holder: Holder) -> Grant {
    let req = AcquireRequest {
        name: name(lease),
        mode: Mode::Exclusive,
        ttl: TTL,
        holder: Arc::new(holder),
        retake: false,
        meta: None,
    };
    match store.try_acquire(&req).await.expect("acquire") {
        Attempt::Granted(g) => g,
        Attempt::Busy(b) => panic!("{lease} should be free, but is held by {}", b.describe()),
    }
}

pub(crate) fn assert_busy<T: std::fmt::Debug>(r: tenure_core::Result<T>, what: &str) {
    match r {
        Err(Error::Busy { .. }) => {}
        other => panic!("{what}: expected the lease to be busy, got {other:?}"),
    }
}

/// A fenced record on the harness's storage, or in memory for stores without one.
pub(crate) fn fence(h: &dyn Harness, name: &str) -> FencedRecord {
    let backend: Arc<dyn Backend> = h.backend().unwrap_or_else(|| Arc::new(MemoryBackend::new(h.time().clock())));
    FencedRecord::new(backend, name).expect("fence")
}

/// Runs `fut` while time flows: on a manual clock, a ticker advances it, pausing
/// for renewals in flight as [`advance`] does.
pub(crate) async fn with_time_flowing<F: std::future::Future>(h: &dyn Harness, fut: F) -> F::Output {
    let Time::Manual(clock) = h.time() else { return fut.await };
    let ticker = async {
        loop {
            crate::paced::until_no_renewal(h).await;
            clock.advance(Duration::from_millis(2));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::select! {
        out = fut => out,
        never = ticker => never,
    }
}

/// Invariant 1: while one holder has an exclusive lease, nobody else gets it in
/// any mode; after release, the next grant has a higher token.
pub async fn exclusive_lease_excludes_everyone_else(h: &dyn Harness) {
    let (a, b) = (client(h).await, client(h).await);
    let la = a.try_acquire("ex", &opts()).await.expect("a acquires a free lease");
    match b.try_acquire("ex", &opts()).await {
        Err(Error::Busy { holder, .. }) => {
            assert!(holder.contains(&a.holder().nonce[..8]), "busy message should name the holder: {holder}")
        }
        other => panic!("b must not get a held exclusive lease: {other:?}"),
    }
    assert_busy(
        b.try_acquire("ex", &LeaseOptions::shared().with_ttl(TTL).no_wait()).await,
        "shared ask against exclusive holder",
    );
    let t1 = la.token();
    assert_eq!(la.release().await.expect("release"), Released::Released);
    let lb = b.try_acquire("ex", &opts()).await.expect("b acquires after release");
    assert!(lb.token() > t1, "token must grow: {} then {}", t1, lb.token());
    assert_eq!(lb.grant().predecessor.map(|p| p.how), Some(EndedHow::Released));
    lb.release().await.expect("release");
}

/// Shared holders coexist; an exclusive ask waits until none is left (backups
/// versus garbage collection: `docs/design/backup-lease-file.md#shared-and-exclusive`).
pub async fn shared_leases_coexist_and_exclude_exclusive(h: &dyn Harness) {
    let shared = LeaseOptions::shared().with_ttl(TTL).no_wait();
    let (a, b, gc) = (client(h).await, client(h).await, client(h).await);
    let la = a.try_acquire("repo", &shared).await.expect("first shared");
    let lb = b.try_acquire("repo", &shared).await.expect("second shared alongside the first");
    assert_ne!(la.token(), lb.token());
    let state = gc.inspect("repo").await.expect("inspect");
    assert_eq!(state.holders.len(), 2, "both shared holders are listed: {state:?}");
    assert_busy(gc.try_acquire("repo", &opts()).await, "exclusive while two shared holders");
    la.release().await.expect("release a");
    assert_busy(gc.try_acquire("repo", &opts()).await, "exclusive while one shared holder");
    lb.release().await.expect("release b");
    let lgc = gc.try_acquire("repo", &opts()).await.expect("exclusive once all shared holders left");
    assert_busy(a.try_acquire("repo", &shared).await, "shared while exclusive");
    lgc.release().await.expect("release");
}

/// Invariant 3: a crashed holder's lease is taken over by a waiting contender
/// within TTL + one poll interval, and not before the TTL.
pub async fn expired_lease_is_taken_over_after_ttl_and_not_before(h: &dyn Harness) {
    let store = h.store().await;
    let dead = crashed_holder(&store, "crash", Holder::current()).await;
    let waiter = client(h).await;
    // The waiter's own TTL leaves room for a slow answer to its grant: the
    // manual clock runs about ten times faster than real time, and a grant
    // whose answer comes too late to be renewed is given back and asked for
    // again (its release would then be the predecessor). 4x stays within
    // what every store grants (the lease server's test limit is 10 s).
    let wopts = LeaseOptions::exclusive().with_ttl(TTL * 4).with_timeout(TTL * 10);
    let task = tokio::spawn(async move { waiter.acquire("crash", &wopts).await });
    advance(h, TTL - Duration::from_millis(300)).await;
    assert!(!task.is_finished(), "the lease was taken over before its TTL");
    advance(h, Duration::from_millis(300) + wopts_poll() + Duration::from_millis(200)).await;
    let mut waited = Duration::ZERO;
    while !task.is_finished() && waited < Duration::from_secs(5) {
        advance(h, Duration::from_millis(100)).await;
        waited += Duration::from_millis(100);
    }
    assert!(task.is_finished(), "a crashed holder's lease must be taken over within TTL + one poll");
    let lease = task.await.expect("join").expect("acquire after expiry");
    let grant = lease.grant();
    assert!(grant.token > dead.token);
    let pred = grant.predecessor.expect("predecessor");
    assert_eq!((pred.token, pred.how), (dead.token, EndedHow::Expired));
    assert!(pred.watermark_ms >= Some(dead.deadline_ms), "a broken holder's deadline bounds its writes");
    lease.release().await.expect("release");
}

pub(crate) fn wopts_poll() -> Duration {
    LeaseOptions::default().backoff_max
}

/// Clock discipline (b): a contender that never watched the record may take over
/// once the record's wall-clock deadline is older than the skew bound.
pub async fn wall_clock_deadline_older_than_max_skew_allows_takeover(h: &dyn Harness) {
    let store = h.store().await;
    let dead = crashed_holder(&store, "wall", Holder::current()).await;
    advance(h, TTL + MAX_SKEW + Duration::from_millis(200)).await;
    let fresh = client(h).await;
    let lease = fresh.try_acquire("wall", &opts()).await.expect("a stale deadline is taken over at first sight");
    assert!(lease.token() > dead.token);
    lease.release().await.expect("release");
}

/// Invariant 2: tokens grow strictly across releases, expiries, re-takes and modes.
pub async fn tokens_increase_strictly_across_grants(h: &dyn Harness) {
    let c = client(h).await;
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let l = c.try_acquire("tok", &opts()).await.expect("acquire");
        tokens.push(l.token());
        l.release().await.expect("release");
    }
    for _ in 0..2 {
        let l = c.try_acquire("tok", &LeaseOptions::shared().with_ttl(TTL).no_wait()).await.expect("shared");
        tokens.push(l.token());
        l.release().await.expect("release");
    }
    let store = h.store().await;
    let me = Holder::current();
    tokens.push(crashed_holder(&store, "tok", me.clone()).await.token);
    let again = Client::with_holder(h.store().await, me);
    let l = again.try_acquire("tok", &opts()).await.expect("re-take");
    tokens.push(l.token());
    l.release().await.expect("release");
    tokens.push(crashed_holder(&store, "tok", Holder::current()).await.token);
    advance(h, TTL + MAX_SKEW + Duration::from_millis(200)).await;
    let l = c.try_acquire("tok", &opts()).await.expect("after expiry");
    tokens.push(l.token());
    l.release().await.expect("release");
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "tokens must strictly increase: {tokens:?}");
}

/// Invariant 1, fenced: a paused ex-holder's write fails once the new holder wrote.
pub async fn fenced_write_from_a_stale_holder_is_rejected(h: &dyn Harness) {
    let store = h.store().await;
    let f = fence(h, "fenced-data");
    let old = crashed_holder(&store, "fenced", Holder::current()).await;
    f.write(old.token, Bytes::from_static(b"old")).await.expect("holder writes under its token");
    advance(h, TTL + MAX_SKEW + Duration::from_millis(200)).await;
    let new = client(h).await.try_acquire("fenced", &opts()).await.expect("take over");
    f.write(new.token(), Bytes::from_static(b"new")).await.expect("new holder writes");
    match f.write(old.token, Bytes::from_static(b"stale")).await {
        Err(Error::Fenced { ours, current, .. }) => assert_eq!((ours, current), (old.token, new.token())),
        other => panic!("a stale holder's write must be fenced, got {other:?}"),
    }
    let now = f.read().await.expect("read").expect("present");
    assert_eq!((now.token, now.value.as_ref()), (new.token(), &b"new"[..]));
    new.release().await.expect("release");
}

/// Invariant 5: a release that arrives after the grant expired and was taken over
/// does nothing (`docs/design/object-store-lock.md#unintended-release`).
pub async fn delayed_release_never_frees_someone_elses_lease(h: &dyn Harness) {
    let store = h.store().await;
    let old = crashed_holder(&store, "late", Holder::current()).await;
    advance(h, TTL + MAX_SKEW + Duration::from_millis(200)).await;
    let b = client(h).await;
    let lb = b.try_acquire("late", &opts()).await.expect("take over");
    let late = store
        .release(&old, &ReleaseRequest { watermark_ms: Some(1), ..Default::default() })
        .await
        .expect("late release");
    assert_eq!(late, Released::NotHeld);
    assert_busy(client(h).await.try_acquire("late", &opts()).await, "after a late release by the old holder");
    assert_eq!(
        store.renew(&old).await.map(|_| ()).map_err(|e| matches!(e, Error::Lost { .. })),
        Err(true),
        "old grant cannot be renewed"
    );
    lb.release().await.expect("release");
}

/// Invariant 5: breaking is conditional on the version the administrator saw.
pub async fn break_is_conditional_on_the_observed_version(h: &dyn Harness) {
    let holder = client(h).await;
    let lease = holder.acquire("brk", &opts()).await.expect("acquire");
    let admin = client(h).await;
    let seen = admin.inspect("brk").await.expect("inspect");
    assert_eq!(seen.holders.len(), 1);
    // Let the keep-alive renew: the record moves on.
    advance(h, LeaseOptions::default().with_ttl(TTL).renew_interval() * 2).await;
    assert!(matches!(lease.health(), Health::Held { .. }), "{:?}", lease.health());
    match admin.break_lease(&seen, None, None).await {
        Err(Error::Changed { .. }) => {}
        other => panic!("breaking a stale view must fail with Changed, got {other:?}"),
    }
    // An administrator re-inspects and breaks what it now sees, saying who and
    // why; a renewal that was still in flight may move the record once more, and
    // then it simply retries.
    let note = BreakNote {
        by: Arc::new(Holder::current().with_label("the on-call admin")),
        reason: Some("deploy hung; see the incident".into()),
    };
    let mut attempts = 0;
    loop {
        let seen = admin.inspect("brk").await.expect("inspect again");
        match admin.break_lease(&seen, None, Some(&note)).await {
            Ok(()) => break,
            Err(Error::Changed { .. }) if attempts < 10 => attempts += 1,
            Err(e) => panic!("breaking the current view must succeed: {e}"),
        }
    }
    // Whoever looks, and the next holder, learn who broke it and why.
    let last = admin.inspect("brk").await.expect("inspect after the break").last.expect("a last ending");
    assert_eq!((last.how, last.broken.as_ref()), (EndedHow::Broken, Some(&note)), "{last:?}");
    let next = client(h).await.try_acquire("brk", &opts()).await.expect("free after break");
    let predecessor = next.grant().predecessor.clone().expect("a predecessor");
    assert_eq!((predecessor.how, predecessor.broken.as_ref()), (EndedHow::Broken, Some(&note)), "{predecessor:?}");
    // A break of one grant alone (what `tenure lock`'s guard does for a
    // `tenure` that died) never frees a successor: the old token names nothing.
    let seen = admin.inspect("brk").await.expect("inspect the successor");
    assert!(admin.break_lease(&seen, Some(lease.token()), None).await.is_err(), "an old token must break nothing");
    let tokens = |s: &tenure_core::LeaseState| s.holders.iter().map(|h| h.token).collect::<Vec<_>>();
    assert_eq!(tokens(&admin.inspect("brk").await.expect("inspect")), [next.token()], "the successor still holds");
    // The successor's own token breaks its grant (retried if a renewal moved it).
    for attempt in 0.. {
        let seen = admin.inspect("brk").await.expect("inspect");
        match admin.break_lease(&seen, Some(next.token()), None).await {
            Ok(()) => break,
            Err(Error::Changed { .. }) if attempt < 10 => {}
            Err(e) => panic!("breaking the holder's own token must succeed: {e}"),
        }
    }
    assert!(tokens(&admin.inspect("brk").await.expect("inspect")).is_empty(), "broken by its token");
    drop(next);
    drop(lease);
}

/// A held lease outlives many TTLs while its keep-alive renews it.
pub async fn keep_alive_holds_the_lease_past_its_ttl(h: &dyn Harness) {
    let a = client(h).await;
    let lease = a.try_acquire("alive", &opts()).await.expect("acquire");
    let token = lease.token();
    advance(h, TTL * 3).await;
    assert!(matches!(lease.health(), Health::Held { .. }), "health after 3 TTLs: {:?}", lease.health());
    assert_busy(client(h).await.try_acquire("alive", &opts()).await, "while the holder keeps renewing");
    assert_eq!(lease.token(), token, "renewal keeps the token");
    assert_eq!(lease.release().await.expect("release"), Released::Released);
}

/// Invariant 6: a holder whose lease was broken learns it (Lost, Stolen) at its
/// next renewal, through the health it can await.
pub async fn holder_learns_its_lease_was_stolen(h: &dyn Harness) {
    let a = client(h).await;
    let lease = a.try_acquire("stolen", &opts()).await.expect("acquire");
    let admin = client(h).await;
    let seen = admin.inspect("stolen").await.expect("inspect");
    admin.break_lease(&seen, None, None).await.expect("break");
    let interval = LeaseOptions::default().with_ttl(TTL).renew_interval();
    let mut waited = Duration::ZERO;
    while !lease.health().is_lost() && waited < interval * 4 {
        advance(h, Duration::from_millis(50)).await;
        waited += Duration::from_millis(50);
    }
    match lease.health() {
        Health::Lost(LossReason::Stolen { .. }) => {}
        other => panic!("the holder must learn its lease was broken, health is {other:?}"),
    }
    assert!(matches!(lease.lost().await, LossReason::Stolen { .. }));
    assert_eq!(lease.release().await.expect("release after loss"), Released::NotHeld);
}

/// Invariant 4: empty, truncated and garbage records block while recent and are
/// replaced once stale, with a token above every earlier one; never a panic.
pub async fn corrupt_records_are_judged_by_age(h: &dyn Harness) {
    let valid = tenure_core::record::LeaseRecord::empty("x").to_bytes();
    let cases: [(&str, &[u8]); 3] = [
        ("corrupt-empty", b""),
        ("corrupt-truncated", &valid[..valid.len() / 2]),
        ("corrupt-garbage", b"\x00\x01 not json at all"),
    ];
    for (lease, bytes) in cases {
        let held = client(h).await.try_acquire(lease, &opts()).await.expect("acquire");
        let before = held.token();
        held.release().await.expect("release");
        // The holder released; then the record got damaged.
        if !h.corrupt(lease, bytes).await {
            eprintln!("skipped: this store cannot hold unreadable records");
            return;
        }
        let contender = client(h).await;
        let state = contender.inspect(lease).await.expect("inspecting a corrupt record is not an error");
        assert!(state.corrupt.is_some(), "{lease}: inspect must report the damage");
        // An unreadable record cannot show whose it is: a break of one token
        // (the one that held it before the damage) must not replace it.
        assert!(
            contender.break_lease(&state, Some(before), None).await.is_err(),
            "{lease}: a break of token {before} alone must not replace an unreadable record"
        );
        match contender.try_acquire(lease, &opts()).await {
            Err(Error::Busy { holder, .. }) => assert!(holder.contains("unreadable"), "{holder}"),
            other => panic!("{lease}: a recent corrupt record must block, got {other:?}"),
        }
        advance(h, CORRUPT_TTL + MAX_SKEW + Duration::from_millis(200)).await;
        let lease_now = contender
            .try_acquire(lease, &opts())
            .await
            .unwrap_or_else(|e| panic!("{lease}: a stale corrupt record must be replaced: {e}"));
        assert!(lease_now.token() > before, "{lease}: token {} must exceed {before}", lease_now.token());
        assert_eq!(lease_now.grant().predecessor.map(|p| p.how), Some(EndedHow::Corrupt));
        lease_now.release().await.expect("release");
    }
}

/// Several leases are taken all or nothing, in canonical order, and
/// nothing stays held when one is busy (`docs/design/all-or-nothing.md`).
pub async fn multi_lease_is_all_or_nothing_in_canonical_order(h: &dyn Harness) {
    let (a, b, c) = (client(h).await, client(h).await, client(h).await);
    let lb = b.try_acquire("multi/b", &opts()).await.expect("b holds multi/b");
    let names = ["multi/c", "multi/a", "multi/b", "multi/a"];
    match a.acquire_all(&names, &opts()).await {
        Err(Error::Busy { name, .. }) => assert_eq!(name, "multi/b"),
        other => panic!("acquire_all must fail while one is busy, got {other:?}"),
    }
    for free in ["multi/a", "multi/c"] {
        let l = c
            .try_acquire(free, &opts())
            .await
            .unwrap_or_else(|e| panic!("{free} must not stay held after a failed acquire_all: {e}"));
        l.release().await.expect("release");
    }
    let wait = opts().with_timeout(TTL * 5);
    let a2 = a.clone();
    let task = tokio::spawn(async move { a2.acquire_all(&names, &wait).await });
    advance(h, Duration::from_millis(200)).await;
    lb.release().await.expect("b releases");
    let set = with_time_flowing(h, async { task.await.expect("join") }).await.expect("acquire_all once free");
    let got: Vec<String> = set.grants().iter().map(|g| g.name.to_string()).collect();
    assert_eq!(got, ["multi/a", "multi/b", "multi/c"], "canonical order, duplicates removed");
    assert_busy(c.try_acquire("multi/c", &opts()).await, "while the set is held");
    set.release().await.expect("release the set");
    for name in ["multi/a", "multi/b", "multi/c"] {
        let l = c.try_acquire(name, &opts()).await.expect("free after the set is released");
        l.release().await.expect("release");
    }
    // Through the store itself, a name asked twice in one batch is refused on
    // every store, shared or not (never two grants to one asker at once).
    let store = h.store().await;
    let shared = AcquireRequest {
        name: name("multi/a"),
        mode: Mode::Shared,
        ttl: TTL,
        holder: Arc::new(Holder::current()),
        retake: false,
        meta: None,
    };
    let twice = [shared.clone(), shared];
    match store.try_acquire_all(&twice).await {
        Err(Error::InvalidOptions { reason }) => assert!(reason.contains("twice"), "{reason}"),
        other => panic!("a name twice in one batch must be refused, got {other:?}"),
    }
}

/// The same holder identity re-takes its abandoned lease at once
/// (`docs/design/object-store-lock.md#re-taking-ones-own-abandoned-lease`);
/// others wait; a client never re-takes a lease it holds live.
pub async fn same_holder_retakes_its_abandoned_lease_at_once(h: &dyn Harness) {
    let me = Holder::current().with_label("restarting worker");
    let store = h.store().await;
    let old = crashed_holder(&store, "retake", me.clone()).await;
    assert_busy(client(h).await.try_acquire("retake", &opts()).await, "another holder");
    let restarted = Client::with_holder(h.store().await, me);
    let lease = restarted.try_acquire("retake", &opts()).await.expect("the same identity re-takes at once");
    assert!(lease.token() > old.token);
    assert_eq!(lease.grant().predecessor.map(|p| p.how), Some(EndedHow::Retaken));
    assert_busy(restarted.try_acquire("retake", &opts()).await, "a client's own live lease");
    lease.release().await.expect("release");
}

/// A holder's published watermark reaches the next holder; a dropped holder's
/// deadline stands in for its watermark
/// (`docs/design/closable-bags.md#buckets-watermarks-timestamps`).
pub async fn release_publishes_watermark_to_the_next_holder(h: &dyn Harness) {
    let (a, b, c) = (client(h).await, client(h).await, client(h).await);
    let la = a.try_acquire("wm", &opts()).await.expect("acquire");
    let watermark = la.grant().deadline_ms - 1;
    la.release_with(ReleaseRequest { watermark_ms: Some(watermark), meta: Some("segment-7".into()), dropped: false })
        .await
        .expect("release");
    let lb = b.try_acquire("wm", &opts()).await.expect("acquire");
    let pred = lb.grant().predecessor.expect("predecessor");
    assert_eq!(
        (pred.how, pred.watermark_ms, pred.meta.as_deref()),
        (EndedHow::Released, Some(watermark), Some("segment-7"))
    );
    let b_deadline = lb.grant().deadline_ms;
    drop(lb);
    let lc = with_time_flowing(h, c.acquire("wm", &opts().with_timeout(TTL * 5))).await.expect("acquire after drop");
    let pred = lc.grant().predecessor.expect("predecessor");
    assert!(matches!(pred.how, EndedHow::Dropped | EndedHow::Expired), "{pred:?}");
    assert!(pred.watermark_ms >= Some(b_deadline), "a dropped holder's deadline bounds its writes: {pred:?}");
    lc.release().await.expect("release");
}

/// Breaks grant `token` of `lease` as an administrator would, looking again
/// when a renewal in flight moved the record.
pub(crate) async fn break_token(admin: &Client, lease: &str, token: u64) {
    for attempt in 0.. {
        let seen = admin.inspect(lease).await.expect("inspect");
        match admin.break_lease(&seen, Some(token), None).await {
            Ok(()) => return,
            Err(Error::Changed { .. }) if attempt < 10 => {}
            Err(e) => panic!("breaking token {token} of {lease} must succeed: {e}"),
        }
    }
}

/// The race: N workers × M increments of a counter under the lease, each a plain
/// read then a fenced write. Any overlap of holders loses an increment, which the
/// exact final count exposes.
pub async fn concurrent_workers_increment_a_fenced_counter_exactly(h: &dyn Harness) {
    const WORKERS: u64 = 4;
    const EACH: u64 = 8;
    let counter = fence(h, "race-counter");
    let successes = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let (c, counter, successes) = (client(h).await, counter.clone(), successes.clone());
        tasks.push(tokio::spawn(async move {
            let wait = LeaseOptions::exclusive().with_ttl(TTL).with_timeout(Duration::from_secs(600));
            let mut done = 0;
            while done < EACH {
                let lease = c.acquire("race", &wait).await.expect("acquire");
                let current = counter.read().await.expect("read").map_or(0, |f| parse(&f.value));
                tokio::task::yield_now().await;
                match counter.write(lease.token(), Bytes::from((current + 1).to_string())).await {
                    Ok(_) => {
                        done += 1;
                        successes.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(Error::Fenced { .. }) => {}
                    Err(e) => panic!("write: {e}"),
                }
                lease.release().await.expect("release");
            }
        }));
    }
    with_time_flowing(h, async {
        for t in tasks {
            t.await.expect("worker");
        }
    })
    .await;
    let total = counter.read().await.expect("read").map_or(0, |f| parse(&f.value));
    assert_eq!(successes.load(Ordering::SeqCst), WORKERS * EACH);
    assert_eq!(total, WORKERS * EACH, "increments were lost: holders overlapped");
}

/// A store that wrote a lease, then saw many others take and leave it, acquires
/// it again (and a shared holder renews and releases) from the record as it now is, at
/// once: its copy of what it wrote last is long stale, and a write decided
/// from that copy must not fail where one from a read succeeds. (A directory
/// store collects old versions: re-creating one was "outcome unknown", and the
/// copy was used again at every try, so 12 workers on one lease stalled.)
pub async fn a_store_acquires_and_renews_again_after_many_writes_by_others(h: &dyn Harness) {
    // Two writes each: far more versions than a directory keeps.
    const OTHERS: usize = 12;
    let (a, b) = (client(h).await, client(h).await);
    let first = a.try_acquire("again", &opts()).await.expect("a acquires a free lease");
    let mut last = first.token();
    first.release().await.expect("release");
    for _ in 0..OTHERS {
        let lb = b.try_acquire("again", &opts()).await.expect("b acquires the free lease");
        last = lb.token();
        lb.release().await.expect("release");
    }
    let again = a.try_acquire("again", &opts()).await.expect("a acquires the free lease again after many holders");
    assert!(again.token() > last, "token must grow: {last} then {}", again.token());
    again.release().await.expect("release");

    let (sa, sb) = (h.store().await, h.store().await);
    let shared = || AcquireRequest {
        name: name("again-shared"),
        mode: Mode::Shared,
        ttl: TTL,
        holder: Arc::new(Holder::current()),
        retake: false,
        meta: None,
    };
    let granted = |a: Attempt| match a {
        Attempt::Granted(g) => g,
        Attempt::Busy(b) => panic!("a shared lease should be granted beside readers, but: {}", b.describe()),
    };
    let ga = granted(sa.try_acquire(&shared()).await.expect("a reads"));
    for _ in 0..OTHERS {
        let gb = granted(sb.try_acquire(&shared()).await.expect("b reads"));
        assert_eq!(sb.release(&gb, &ReleaseRequest::default()).await.expect("release"), Released::Released);
    }
    let renewed = sa.renew(&ga).await.expect("a renews its shared lease after many readers came and went");
    assert_eq!(renewed.token, ga.token);
    for _ in 0..OTHERS {
        let gb = granted(sb.try_acquire(&shared()).await.expect("b reads"));
        assert_eq!(sb.release(&gb, &ReleaseRequest::default()).await.expect("release"), Released::Released);
    }
    let left = sa.release(&renewed, &ReleaseRequest::default()).await;
    assert_eq!(left.expect("a releases its shared lease after many readers came and went"), Released::Released);
    let state = sa.inspect(&name("again-shared")).await.expect("inspect");
    assert!(state.holders.is_empty(), "every reader left: {:?}", state.holders);
}

pub(crate) fn parse(b: &Bytes) -> u64 {
    std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()).expect("counter is a number")
}
