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

fn opts() -> LeaseOptions {
    LeaseOptions::exclusive().with_ttl(TTL).no_wait()
}

pub(crate) async fn client(h: &dyn Harness) -> Client {
    Client::new(h.store().await)
}

fn name(s: &str) -> LeaseName {
    LeaseName::new(s).expect("valid test name")
}

/// Waits (in real time) until `n` wait in `lease`'s line, as `onlooker` reads it.
async fn until_queued(onlooker: &Arc<dyn LeaseStore>, lease: &str, n: usize) {
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

fn assert_busy<T: std::fmt::Debug>(r: tenure_core::Result<T>, what: &str) {
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
    let wopts = LeaseOptions::exclusive().with_ttl(TTL).with_timeout(TTL * 10);
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
async fn break_token(admin: &Client, lease: &str, token: u64) {
    for attempt in 0.. {
        let seen = admin.inspect(lease).await.expect("inspect");
        match admin.break_lease(&seen, Some(token), None).await {
            Ok(()) => return,
            Err(Error::Changed { .. }) if attempt < 10 => {}
            Err(e) => panic!("breaking token {token} of {lease} must succeed: {e}"),
        }
    }
}

/// Metadata is carried forward by holders that leave none, however their
/// grants end — released, expired, broken, dropped — until one leaves its own
/// (what `tenure lock --once-per` keeps its mark in: `tenure_core::once`).
pub async fn metadata_is_carried_forward_until_a_holder_leaves_its_own(h: &dyn Harness) {
    let store = h.store().await;
    let (a, admin) = (client(h).await, client(h).await);
    let meta_after = |l: &tenure_core::Lease| l.grant().predecessor.and_then(|p| p.meta);
    let la = a.try_acquire("carry", &opts()).await.expect("acquire");
    la.release_with(ReleaseRequest { meta: Some("mark-1".into()), ..Default::default() }).await.expect("release");
    // Released without metadata.
    let lb = client(h).await.try_acquire("carry", &opts()).await.expect("acquire");
    assert_eq!(meta_after(&lb).as_deref(), Some("mark-1"));
    lb.release().await.expect("release");
    // A holder that died without releasing, taken over after its TTL.
    crashed_holder(&store, "carry", Holder::current()).await;
    let waiting = opts().with_timeout(TTL * 5);
    let ld = with_time_flowing(h, client(h).await.acquire("carry", &waiting)).await.expect("take over");
    assert_eq!(ld.grant().predecessor.map(|p| (p.how, p.meta)), Some((EndedHow::Expired, Some("mark-1".into()))));
    ld.release().await.expect("release");
    // A holder broken by an administrator.
    let broken = crashed_holder(&store, "carry", Holder::current()).await;
    break_token(&admin, "carry", broken.token).await;
    let lf = client(h).await.try_acquire("carry", &opts()).await.expect("acquire after the break");
    assert_eq!(lf.grant().predecessor.map(|p| (p.how, p.meta)), Some((EndedHow::Broken, Some("mark-1".into()))));
    // A handle dropped without a release.
    drop(lf);
    let lg = with_time_flowing(h, client(h).await.acquire("carry", &waiting)).await.expect("acquire after the drop");
    assert_eq!(meta_after(&lg).as_deref(), Some("mark-1"), "{:?}", lg.grant().predecessor);
    // A holder that leaves its own replaces it.
    lg.release_with(ReleaseRequest { meta: Some("mark-2".into()), ..Default::default() }).await.expect("release");
    let lh = client(h).await.try_acquire("carry", &opts()).await.expect("acquire");
    assert_eq!(meta_after(&lh).as_deref(), Some("mark-2"));
    lh.release().await.expect("release");
}

/// At most once per period (`tenure_core::once`): of the holders stamped in
/// one period, one runs; a run counts only if it ended well with its grant
/// still in the record — failed, dropped (its process died) or broken, the
/// next holder of the period runs — and holders that only looked, even one
/// that died holding the lease, never erase the mark.
pub async fn once_per_period_counts_only_runs_that_ended_well(h: &dyn Harness) {
    use tenure_core::{Once, OncePer};
    let once = OncePer::new(Duration::from_secs(60)).expect("a minute");
    let t0 = 1_000 * 60_000; // the start of period 1000
    let (a, b, c, admin) = (client(h).await, client(h).await, client(h).await, client(h).await);
    let waiting = opts().with_timeout(TTL * 5);
    let run = |o: Once, what: &str| match o {
        Once::Run(run) => run,
        Once::AlreadyRan(mark) => panic!("{what} must run, but the record says it ran: {mark:?}"),
    };
    let ran = |o: Once, what: &str| match o {
        Once::AlreadyRan(mark) => mark,
        Once::Run(_) => panic!("{what} must not run: the period's run already counted"),
    };
    // Nothing ran yet: a runs; b, asking meanwhile, finds the lease busy.
    let ra = run(a.acquire_once_at("nightly", &once, t0 + 1, &opts()).await.expect("a"), "the first");
    assert_busy(b.acquire_once_at("nightly", &once, t0 + 2, &opts()).await, "while a runs");
    // a failed: it does not count, and b runs.
    assert_eq!(ra.failed().await.expect("release"), Released::Released);
    let rb = run(b.acquire_once_at("nightly", &once, t0 + 2, &opts()).await.expect("b"), "after a failure");
    assert_eq!(rb.period_start_ms(), t0);
    assert_eq!(rb.ran().await.expect("release"), Released::Released);
    // Everyone else in the period — a clock a little behind, in the period
    // before, too — learns that it ran, and when.
    let mark = ran(c.acquire_once_at("nightly", &once, t0 + 59_999, &opts()).await.expect("c"), "c");
    assert_eq!(mark.ran_ms, t0 + 2);
    ran(c.acquire_once_at("nightly", &once, t0 - 1, &opts()).await.expect("c behind"), "a clock behind");
    // The next period: a's run dies with its process; b's runs after it; a
    // run whose grant is broken does not count either.
    let t1 = t0 + 60_000;
    drop(run(a.acquire_once_at("nightly", &once, t1, &opts()).await.expect("a"), "the next period"));
    let rb = run(with_time_flowing(h, b.acquire_once_at("nightly", &once, t1 + 1, &waiting)).await.expect("b"), "b");
    break_token(&admin, "nightly", rb.lease().token()).await;
    assert_eq!(rb.ran().await.expect("release"), Released::NotHeld, "a broken run never counts");
    let rc = run(c.acquire_once_at("nightly", &once, t1 + 2, &opts()).await.expect("c"), "after a broken run");
    assert_eq!(rc.last().map(|m| m.ran_ms), Some(t0 + 2), "the last counted run, a period before");
    assert_eq!(rc.ran().await.expect("release"), Released::Released);
    // A holder that dies while only looking (it never releases) keeps the mark.
    let store = h.store().await;
    crashed_holder(&store, "nightly", Holder::current()).await;
    let mark = ran(with_time_flowing(h, a.acquire_once_at("nightly", &once, t1 + 3, &waiting)).await.expect("a"), "a");
    assert_eq!(mark.ran_ms, t1 + 2);
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

pub(crate) fn parse(b: &Bytes) -> u64 {
    std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()).expect("counter is a number")
}

/// Waiters are granted the lease in the order they queued, and one that gives
/// up (its future dropped, as when its process is interrupted) leaves the line
/// and is skipped, on every store that keeps a wait line (a directory with
/// change notifications, memory, etcd, object stores); a store without one (a
/// directory on NFS polls) is skipped, and so is the lease server, whose queue
/// its own tests cover. Time flows while waiters wait: a polled line (object
/// stores) is looked at again on the store's clock.
pub async fn waiters_are_granted_in_the_order_they_queued(h: &dyn Harness) {
    if h.backend().is_none() {
        return;
    }
    let lease = "conf/line";
    let store = h.store().await;
    let first = crashed_holder(&store, lease, Holder::current().with_label("first")).await;
    let ask = |label: String| AcquireRequest {
        name: name(lease),
        mode: Mode::Exclusive,
        ttl: TTL,
        holder: Arc::new(Holder::current().with_label(label)),
        retake: false,
        meta: None,
    };
    // A wait of no time says whether the store queues at all.
    if store.acquire_queued(&ask("probe".into()), Duration::ZERO).await.is_none() {
        return;
    }
    let onlooker = h.store().await;
    let until_queued = async |n: usize| until_queued(&onlooker, lease, n).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for i in 0..5 {
        let (s, tx, r) = (h.store().await, tx.clone(), ask(format!("w{i}")));
        waiters.push(tokio::spawn(async move {
            let granted = s.acquire_queued(&r, Duration::from_secs(600)).await.expect("a queue").expect("wait");
            let Attempt::Granted(g) = granted else { panic!("w{i}: the wait ran out") };
            let _ = tx.send((i, g, s));
        }));
        until_queued(i + 1).await;
    }
    // The third waiter gives up: it leaves the line, and the lease skips it.
    waiters.remove(2).abort();
    until_queued(4).await;
    let (mut last, mut last_store) = (first, store);
    for i in [0, 1, 3, 4] {
        last_store.release(&last, &ReleaseRequest::default()).await.expect("release");
        let got = with_time_flowing(h, tokio::time::timeout(Duration::from_secs(60), rx.recv()))
            .await
            .expect("a grant")
            .expect("open");
        assert_eq!(got.0, i, "granted out of order");
        assert!(got.1.token > last.token, "tokens grow along the line");
        (last, last_store) = (got.1, got.2);
    }
    for w in waiters {
        w.await.expect("waiter");
    }
    until_queued(0).await;
}

/// A multi-lease waiter on a store that keeps queues takes its turn: while
/// others keep the queue of one of its leases full, it is granted after those
/// ahead of it and before those behind it, instead of being refused for as
/// long as anyone waits (it holds the leases before that one meanwhile).
pub async fn a_multi_lease_waiter_takes_its_turn_in_a_queue_that_never_empties(h: &dyn Harness) {
    let (hot, cold) = ("conf/turn/hot", "conf/turn/cold");
    let store = h.store().await;
    let ask = |label: &str| AcquireRequest {
        name: name(hot),
        mode: Mode::Exclusive,
        ttl: TTL,
        holder: Arc::new(Holder::current().with_label(label)),
        retake: false,
        meta: None,
    };
    let first = crashed_holder(&store, hot, Holder::current().with_label("first")).await;
    // A wait of no time says whether the store queues at all.
    if store.acquire_queued(&ask("probe"), Duration::ZERO).await.is_none() {
        return;
    }
    let onlooker = h.store().await;
    let until_queued = async |n: usize| until_queued(&onlooker, hot, n).await;
    let waiter = |label: &'static str, s: Arc<dyn LeaseStore>| {
        let r = ask(label);
        tokio::spawn(async move {
            match s.acquire_queued(&r, Duration::from_secs(600)).await.expect("a queue").expect("wait") {
                Attempt::Granted(g) => (g, s),
                Attempt::Busy(_) => panic!("{label}: the wait ran out"),
            }
        })
    };
    // One waits ahead; then the multi-lease waiter; then one more behind it.
    let ahead = waiter("ahead", h.store().await);
    until_queued(1).await;
    let multi = client(h).await;
    let both = LeaseOptions::exclusive().with_ttl(TTL).with_timeout(Duration::from_secs(600));
    let set = tokio::spawn(async move { multi.acquire_all(&[hot, cold], &both).await });
    until_queued(2).await;
    let behind = waiter("behind", h.store().await);
    until_queued(3).await;
    // The lease passes along the queue: to the one ahead, then to the set.
    store.release(&first, &ReleaseRequest::default()).await.expect("release");
    let (g, s) = with_time_flowing(h, tokio::time::timeout(Duration::from_secs(60), ahead))
        .await
        .expect("ahead's turn")
        .expect("join");
    s.release(&g, &ReleaseRequest::default()).await.expect("release");
    let set = with_time_flowing(h, async { tokio::time::timeout(Duration::from_secs(60), set).await })
        .await
        .expect("the set's turn came before the one behind it")
        .expect("join")
        .expect("the set");
    let names: Vec<String> = set.grants().iter().map(|g| g.name.to_string()).collect();
    assert_eq!(names, [cold, hot], "both, in canonical order");
    assert!(!behind.is_finished(), "the one behind the set got the lease first");
    set.release().await.expect("release the set");
    let (g, s) = with_time_flowing(h, tokio::time::timeout(Duration::from_secs(60), behind))
        .await
        .expect("behind's turn")
        .expect("join");
    s.release(&g, &ReleaseRequest::default()).await.expect("release");
}

/// Two tasks of one client (one holder identity: a cloned [`Client`]) waiting
/// for one lease: it goes to one of them, and to the other only once the first
/// lets it go. A fresh grant of the identity is no abandoned grant to re-take,
/// so the lease is never held twice, whether the store hands it along a line
/// (both tasks woken by one release) or the tasks poll.
pub async fn two_tasks_of_one_client_never_hold_one_lease_at_once(h: &dyn Harness) {
    let lease = "conf/siblings";
    let store = h.store().await;
    let first = crashed_holder(&store, lease, Holder::current().with_label("first")).await;
    let siblings = client(h).await;
    let wait = LeaseOptions::exclusive().with_ttl(TTL).with_timeout(Duration::from_secs(600));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let tasks: Vec<_> = (0..2)
        .map(|i| {
            let (c, wait, tx) = (siblings.clone(), wait.clone(), tx.clone());
            tokio::spawn(async move {
                let _ = tx.send((i, c.acquire(lease, &wait).await));
            })
        })
        .collect();
    // Both are waiting: in the store's line, or polling.
    with_time_flowing(h, tokio::time::sleep(Duration::from_millis(300))).await;
    store.release(&first, &ReleaseRequest::default()).await.expect("release");
    let mut next = async |within: Duration| with_time_flowing(h, tokio::time::timeout(within, rx.recv())).await;
    let (i, one) = next(Duration::from_secs(60)).await.expect("a sibling's grant").expect("open");
    let one = one.expect("granted");
    if let Ok(Some((_, Ok(other)))) = next(Duration::from_millis(500)).await {
        panic!(
            "both tasks of one client hold the lease: tokens {} and {} ({:?} / {:?})",
            one.token(),
            other.token(),
            one.grant().predecessor,
            other.grant().predecessor
        );
    }
    let token = one.token();
    one.release().await.expect("the first sibling still held the lease");
    let (j, other) = next(Duration::from_secs(60)).await.expect("the other sibling's turn").expect("open");
    let other = other.expect("granted");
    assert_ne!(i, j, "one task granted twice");
    assert!(other.token() > token, "tokens grow from one sibling to the other");
    other.release().await.expect("release");
    for t in tasks {
        t.await.expect("sibling");
    }
}

/// An exclusive waiter is not starved by readers, on every store: one that
/// queued while a reader held the lease (a garbage collector behind a backup)
/// is granted before the readers that came after it, which wait behind it
/// instead of joining the reader that holds the lease.
pub async fn an_exclusive_waiter_is_granted_before_readers_that_came_after_it(h: &dyn Harness) {
    let lease = "conf/gc";
    let reader = LeaseOptions::shared().with_ttl(TTL);
    let first = client(h).await.try_acquire(lease, &reader.clone().no_wait()).await.expect("the first reader");
    let onlooker = h.store().await;
    let wait = |o: LeaseOptions| o.with_ttl(TTL).with_timeout(Duration::from_secs(600));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let spawn = |who: &'static str, c: Client, opts: LeaseOptions| {
        let tx = tx.clone();
        tokio::spawn(async move {
            let _ = tx.send((who, c.acquire(lease, &opts).await.expect("granted")));
        })
    };
    let gc = spawn("collector", client(h).await, wait(LeaseOptions::exclusive()));
    until_queued(&onlooker, lease, 1).await;
    let mut readers = Vec::new();
    for _ in 0..2 {
        readers.push(spawn("reader", client(h).await, wait(LeaseOptions::shared())));
    }
    // Both readers wait, behind the collector: neither joined the first reader.
    until_queued(&onlooker, lease, 3).await;
    if let Ok((who, _)) = rx.try_recv() {
        panic!("a {who} was granted while the first reader held the lease and the collector waited");
    }
    first.release().await.expect("the first reader releases");
    let mut next = async || with_time_flowing(h, tokio::time::timeout(Duration::from_secs(60), rx.recv())).await;
    let (who, collector) = next().await.expect("a grant").expect("open");
    assert_eq!(who, "collector", "a reader that came after the waiting collector was granted before it");
    collector.release().await.expect("the collector releases");
    for _ in 0..2 {
        let (who, r) = next().await.expect("the readers' turn").expect("open");
        assert_eq!(who, "reader");
        r.release().await.expect("release");
    }
    gc.await.expect("collector");
    for r in readers {
        r.await.expect("reader");
    }
}

/// Leader election's view (`Client::watch`): the state first, then each
/// change in order — acquired, released, acquired by a holder that then died,
/// expired when its deadline passed (with no write to wake the watcher),
/// taken over, broken.
pub async fn watch_sees_each_change_in_order(h: &dyn Harness) {
    use futures::StreamExt;
    let store = h.store().await;
    let watcher = client(h).await;
    let mut changes = Box::pin(watcher.watch("watched", Duration::from_millis(200)).expect("watch"));
    let mut next = async |what: &str| {
        let item = with_time_flowing(h, changes.next()).await.expect("the watch never ends by itself");
        let held = item.unwrap_or_else(|e| panic!("watching for {what}: {e}"));
        (held.change, held.token)
    };
    let (first, _) = next("the state now").await;
    assert_eq!(first, tenure_core::Change::Current);

    let a = client(h).await.try_acquire("watched", &opts()).await.expect("acquire");
    assert_eq!(next("an acquire").await, (tenure_core::Change::Acquired, Some(a.token())));
    let t1 = a.token();
    a.release().await.expect("release");
    assert_eq!(next("a release").await, (tenure_core::Change::Released, Some(t1)));

    let dead = crashed_holder(&store, "watched", Holder::current()).await;
    assert_eq!(next("a second acquire").await, (tenure_core::Change::Acquired, Some(dead.token)));
    assert_eq!(next("the expiry").await, (tenure_core::Change::Expired, Some(dead.token)));
    // A contender that has not watched the record may have to wait a little
    // longer than the watcher (clock discipline): it waits.
    let b = with_time_flowing(h, client(h).await.acquire("watched", &opts().with_timeout(TTL * 5)))
        .await
        .expect("take over");
    assert_eq!(next("the takeover").await, (tenure_core::Change::TakenOver, Some(b.token())));

    let admin = client(h).await;
    break_token(&admin, "watched", b.token()).await;
    assert_eq!(next("the break").await, (tenure_core::Change::Broken, Some(b.token())));
    drop(b);
}
