//! Waiters on a directory store (local file system: a file per waiter, woken
//! by inotify) and on the memory store (one record per lease) wait in line:
//! granted in the order they queued, a waiter that gives up is skipped, a
//! waiter that crashed, or an entry no waiter wrote in a record, holds up
//! nobody; sets, readers and writers, long waits, new runtimes and passing
//! store errors keep the order. The helpers here serve [`directory_line`] too.

use std::sync::Arc;
use std::time::Duration;

use tenure_core::backend::Line;
use tenure_core::cas::RecordLine;
use tenure_core::{
    AcquireRequest, Attempt, Backend, CasOptions, CasStore, Clock, Grant, Holder, LeaseName, LeaseStore, Mode,
    PutOptions, ReleaseRequest, SystemClock,
};
use tenure_file::{DirUrl, FileBackend};

mod directory_line;

const TTL: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(60);

fn req(name: &str, label: &str) -> AcquireRequest {
    AcquireRequest {
        name: LeaseName::new(name).expect("name"),
        mode: Mode::Exclusive,
        ttl: TTL,
        holder: Arc::new(Holder::current().with_label(label)),
        retake: false,
        meta: None,
    }
}

/// A fresh store on `url` (each waiter has its own, as separate processes do).
fn store(url: &str) -> Arc<dyn LeaseStore> {
    store_on(url, SystemClock::shared())
}

/// [`store`] on `clock`.
fn store_on(url: &str, clock: Arc<dyn Clock>) -> Arc<dyn LeaseStore> {
    Arc::new(CasStore::new(backend(url), clock, CasOptions::default()))
}

/// The backend under the store at `url`.
fn backend(url: &str) -> Arc<dyn Backend> {
    if url.starts_with("memory://") {
        tenure_core::store::memory::open(url).expect("memory")
    } else {
        Arc::new(FileBackend::from_dir_url(&DirUrl::parse(url, &Default::default()).expect("directory")))
    }
}

/// The nonces of the waiters in `name`'s line, in order, as the store keeps
/// it (a directory: its own; memory: a record).
async fn line(url: &str, name: &str) -> Vec<String> {
    let backend = backend(url);
    let (clock, skew) = (SystemClock::shared(), Duration::from_secs(2));
    let line = backend
        .clone()
        .line(&clock, skew)
        .unwrap_or_else(|| Arc::new(RecordLine::new(backend, clock.clone(), skew)) as Arc<dyn Line>);
    line.waiters(name).await.expect("read the line").into_iter().map(|w| w.nonce).collect()
}

async fn queued(url: &str, name: &str) -> usize {
    line(url, name).await.len()
}

async fn until_queued(url: &str, name: &str, n: usize) {
    for _ in 0..500 {
        if queued(url, name).await >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} waiters queued, not {n}", queued(url, name).await);
}

fn held(a: Attempt) -> Grant {
    match a {
        Attempt::Granted(g) => g,
        Attempt::Busy(b) => panic!("busy: {}", b.describe()),
    }
}

/// A waiter, in a store of its own, queued for `r` until it is granted.
fn waiter(url: &str, r: AcquireRequest) -> tokio::task::JoinHandle<Grant> {
    let s = store(url);
    tokio::spawn(async move { held(s.acquire_queued(&r, WAIT).await.expect("a queue").expect("wait")) })
}

/// The grant of `w`, which must come within 5 s.
async fn granted(w: tokio::task::JoinHandle<Grant>) -> Grant {
    tokio::time::timeout(Duration::from_secs(5), w).await.expect("granted in time").expect("the waiter")
}

/// With `name` held, a waiter finds no line to wait in (its queued
/// acquisition answers `None` at once: its caller polls, not fails), and
/// gets the lease once it is free.
async fn no_line_but_granted_once_free(url: &str, holder: &Arc<dyn LeaseStore>, name: &str) {
    let first = held(holder.try_acquire(&req(name, "first")).await.expect("acquire"));
    let waiting = store(url);
    let answer = tokio::time::timeout(Duration::from_secs(5), waiting.acquire_queued(&req(name, "w"), WAIT))
        .await
        .expect("answered at once");
    assert!(answer.is_none(), "{name}: no line, the waiter polls, not {answer:?}");
    holder.release(&first, &ReleaseRequest::default()).await.expect("release");
    let g = held(waiting.try_acquire(&req(name, "w")).await.expect("a free lease"));
    waiting.release(&g, &ReleaseRequest::default()).await.expect("release");
}

async fn in_order(url: &str) {
    let name = "line";
    let first = held(store(url).try_acquire(&req(name, "first")).await.expect("acquire"));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for i in 0..5 {
        let (s, tx, r) = (store(url), tx.clone(), req(name, &format!("w{i}")));
        waiters.push(tokio::spawn(async move {
            let g = held(s.acquire_queued(&r, WAIT).await.expect("a queue").expect("wait"));
            let _ = tx.send((r.holder.label.clone().unwrap_or_default(), g, s));
        }));
        until_queued(url, name, i + 1).await;
    }
    let (mut last, mut last_store) = (first, store(url));
    for i in 0..5 {
        last_store.release(&last, &ReleaseRequest::default()).await.expect("release");
        let (label, g, s) = tokio::time::timeout(WAIT, rx.recv()).await.expect("a grant").expect("open");
        assert_eq!(label, format!("w{i}"), "granted out of order");
        assert!(g.token > last.token);
        (last, last_store) = (g, s);
    }
    for w in waiters {
        w.await.expect("waiter");
    }
    // A granted waiter leaves the line in the background; its release waits
    // for that.
    last_store.release(&last, &ReleaseRequest::default()).await.expect("release");
    assert_eq!(queued(url, name).await, 0, "everyone left the line");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_waiters_are_granted_in_the_order_they_queued() {
    let dir = tempfile::tempdir().expect("tempdir");
    in_order(&format!("file://{}?fsync=false", dir.path().display())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_waiters_are_granted_in_the_order_they_queued() {
    in_order(&format!("memory://wait-queue-{}", std::process::id())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_leaves_the_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}?fsync=false", dir.path().display());
    let name = "quit";
    let holder = store(&url);
    let first = held(holder.try_acquire(&req(name, "first")).await.expect("acquire"));
    let quitter = store(&url);
    let quitting = req(name, "quitter");
    let gave_up = tokio::time::timeout(Duration::from_millis(500), quitter.acquire_queued(&quitting, WAIT));
    assert!(gave_up.await.is_err(), "the lease is held: the wait goes on");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let r = req(name, "next");
    let next_nonce = r.holder.nonce.clone();
    let next = {
        let s = store(&url);
        tokio::spawn(async move {
            let g = held(s.acquire_queued(&r, WAIT).await.expect("a queue").expect("wait"));
            let _ = tx.send(g);
        })
    };
    // The quitter's entry goes in the background; then only "next" is in line.
    for _ in 0..500 {
        if line(&url, name).await == [next_nonce.clone()] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(line(&url, name).await, [next_nonce]);
    holder.release(&first, &ReleaseRequest::default()).await.expect("release");
    // Granted at once, not after the quitter's entry lapsed.
    let g = tokio::time::timeout(Duration::from_secs(3), rx.recv()).await.expect("granted at once").expect("open");
    assert_eq!(g.holder.label.as_deref(), Some("next"));
    next.await.expect("next");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_waiter_or_a_forged_entry_in_a_record_holds_up_nobody() {
    let url = format!("memory://wait-queue-crash-{}", std::process::id());
    let name = "crash";
    // A waiter that crashed long ago (its entry's time is in the past), and an
    // entry no waiter wrote, which claims to live for ever.
    let backend = backend(&url);
    let stale = serde_json::json!({"waiters": [
        {"nonce": "forever", "shared": false, "until_ms": u64::MAX},
        {"nonce": "crashed", "shared": false, "until_ms": 1},
    ]});
    backend
        .put(
            &tenure_core::Key::new(&format!("{name}~queue")).expect("key"),
            serde_json::to_vec(&stale).expect("json").into(),
            PutOptions::create(),
        )
        .await
        .expect("write");
    let g = tokio::time::timeout(Duration::from_secs(5), store(&url).acquire_queued(&req(name, "alive"), WAIT))
        .await
        .expect("not held up by a dead waiter");
    held(g.expect("a queue").expect("wait"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_in_the_queue_record_is_an_empty_line() {
    let url = format!("memory://wait-queue-garbage-{}", std::process::id());
    let name = "garbage";
    backend(&url)
        .put(
            &tenure_core::Key::new(&format!("{name}~queue")).expect("key"),
            b"\xff{not json".to_vec().into(),
            PutOptions::create(),
        )
        .await
        .expect("write");
    let holder = store(&url);
    let first = held(holder.try_acquire(&req(name, "first")).await.expect("acquire"));
    let next = waiter(&url, req(name, "next"));
    until_queued(&url, name, 1).await;
    holder.release(&first, &ReleaseRequest::default()).await.expect("release");
    assert_eq!(granted(next).await.holder.label.as_deref(), Some("next"));
}

/// A set waiting in order (`acquire_all`) for a lease that is busy: it holds
/// the lease before that one, renews it for as long as it waits (here longer
/// than its TTL), keeps it from its own client's other handles, and gives it
/// back at once when its caller gives up the wait (not at its TTL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_waiting_in_order_keeps_what_it_holds_then_gives_it_back_when_dropped() {
    use tenure_core::{Client, Error, LeaseOptions};
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}?fsync=false", dir.path().display());
    let ttl = Duration::from_secs(2);
    let opts = LeaseOptions::exclusive().with_ttl(ttl).with_renew_every(Duration::from_millis(100));
    let holder = Client::new(store(&url));
    let b = holder.acquire("set/b", &opts.clone().no_wait()).await.expect("b is held");
    let set = Client::new(store(&url));
    let waiting = {
        let (set, opts) = (set.clone(), opts.clone().with_timeout(WAIT));
        tokio::spawn(async move { set.acquire_all(&["set/b", "set/a"], &opts).await })
    };
    until_queued(&url, "set/b", 1).await;
    let onlooker = store(&url);
    let a = LeaseName::new("set/a").expect("name");
    let holder_of_a = async || onlooker.inspect(&a).await.expect("inspect").holders.first().map(|h| h.token);
    let first = holder_of_a().await.expect("the set holds set/a while it waits for set/b");
    // Longer than a TTL: still held under the same grant, renewed meanwhile.
    tokio::time::sleep(ttl + ttl / 2).await;
    assert_eq!(holder_of_a().await, Some(first), "the set renews what it holds while it waits");
    // Its own client's other handles do not re-take it meanwhile.
    match set.try_acquire("set/a", &opts).await {
        Err(Error::Busy { .. }) => {}
        other => panic!("the set's own client took set/a from under the wait: {other:?}"),
    }
    // The caller gives up: set/a is released at once, long before its deadline.
    waiting.abort();
    let _ = waiting.await;
    let gave_up = tokio::time::Instant::now();
    while holder_of_a().await.is_some() {
        assert!(gave_up.elapsed() < ttl / 2, "set/a was not given back when the wait was dropped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    b.release().await.expect("release");
}

/// A request for `name` in `mode`.
fn req_in(name: &str, label: &str, mode: Mode) -> AcquireRequest {
    AcquireRequest { mode, ..req(name, label) }
}

/// A directory store on a fresh temporary directory (and the directory).
fn directory() -> (tempfile::TempDir, String) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}?fsync=false", tmp.path().display());
    (tmp, url)
}

/// A lease held shared, a writer waiting first in line, and readers coming
/// one after another, each before the last one left: no reader joins while
/// the writer waits (readers waiting alone keep no reader out), so the writer gets the lease when the readers that held
/// it before it queued have left (a lease that is free may go to a newcomer;
/// one held by readers does not go to one more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_is_not_overtaken_by_readers_that_overlap() {
    let (_tmp, url) = directory();
    let r0 = store(&url);
    let reading = held(r0.try_acquire(&req_in("l", "r0", Mode::Shared)).await.expect("acquire"));
    let writer = waiter(&url, req("l", "writer"));
    until_queued(&url, "l", 1).await;
    for i in 0..5 {
        let newcomer = store(&url).try_acquire(&req_in("l", &format!("reader {i}"), Mode::Shared)).await.expect("ask");
        assert!(matches!(newcomer, Attempt::Busy(_)), "reader {i} joined the readers ahead of the waiting writer");
    }
    // The holder's own process asking for one more read grant (not a
    // re-take: it adds one) is a reader joining too.
    let mut more = req_in("l", "r0", Mode::Shared);
    more.holder = reading.holder.clone();
    let more = r0.try_acquire(&more).await.expect("ask");
    assert!(matches!(more, Attempt::Busy(_)), "a second read grant of the holder's joined ahead of the writer");
    // The holder itself re-taking its own grant overtakes nobody.
    let mut again = req_in("l", "r0", Mode::Shared);
    again.holder = reading.holder.clone();
    again.retake = true;
    let reading = held(r0.try_acquire(&again).await.expect("re-take"));
    r0.release(&reading, &ReleaseRequest::default()).await.expect("release");
    assert!(granted(writer).await.token > reading.token);
}

/// A clock whose monotonic time runs [`FAST`] times as fast as real time (its
/// wall clock is the real one).
#[derive(Debug)]
struct FastClock(tokio::time::Instant);

const FAST: u32 = 500;

impl tenure_core::Clock for FastClock {
    fn wall_ms(&self) -> u64 {
        SystemClock::new().wall_ms()
    }
    fn mono(&self) -> tenure_core::Mono {
        tenure_core::Mono::from_origin(self.0.elapsed() * FAST)
    }
    fn sleep_until(&self, deadline: tenure_core::Mono) -> futures::future::BoxFuture<'static, ()> {
        let origin = self.0;
        Box::pin(async move { tokio::time::sleep_until(origin + deadline.since_origin() / FAST).await })
    }
}

/// Two waiters with no timeout (as long as it takes): A queues, B 30 minutes
/// later, and the lease frees 70 minutes after A queued. A waited longest
/// and is granted first: a wait without a deadline keeps its place however
/// long it lasts. (The waiters' monotonic clock runs 500 times fast.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_without_a_deadline_keeps_its_place_past_an_hour() {
    let (_tmp, url) = directory();
    let holder = store(&url);
    let h = held(
        holder
            .try_acquire(&AcquireRequest { ttl: Duration::from_secs(86_400), ..req("l", "holder") })
            .await
            .expect("acquire"),
    );
    let clock: Arc<dyn tenure_core::Clock> = Arc::new(FastClock(tokio::time::Instant::now()));
    let fast = |label: &'static str| {
        let s = store_on(&url, clock.clone());
        let c = tenure_core::Client::new(s);
        tokio::spawn(
            async move { (label, c.acquire("l", &tenure_core::LeaseOptions::exclusive()).await.expect("acquire")) },
        )
    };
    let minutes = |m: u64| Duration::from_secs(60 * m) / FAST;
    let a = fast("A");
    until_queued(&url, "l", 1).await;
    tokio::time::sleep(minutes(30)).await;
    let b = fast("B");
    until_queued(&url, "l", 2).await;
    tokio::time::sleep(minutes(40)).await;
    holder.release(&h, &ReleaseRequest::default()).await.expect("release");
    let (first, lease) = tokio::select! {
        x = a => x.expect("A"),
        x = b => x.expect("B"),
    };
    let _ = lease.release().await;
    assert_eq!(first, "A", "B, which queued 30 minutes after A, was granted first");
}

/// A store that outlives the runtime of its first wait (a program that
/// builds a runtime per job): its change notifications were set up on that
/// runtime, and the next wait, on another, still waits (and is granted when
/// the lease frees) instead of failing with the old runtime's shutdown.
#[test]
fn a_directory_store_outliving_the_runtime_of_its_first_wait_still_waits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}?fsync=false", dir.path().display());
    let runtime = || tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    let first = runtime();
    let (waiter, holder) = first.block_on(async { (store(&url), store(&url)) });
    let held = first.block_on(async {
        match holder.try_acquire(&req("rt", "holder")).await.expect("acquire") {
            Attempt::Granted(g) => g,
            Attempt::Busy(b) => panic!("busy: {}", b.describe()),
        }
    });
    let waited = first.block_on(waiter.acquire_queued(&req("rt", "w1"), Duration::from_millis(300)));
    assert!(matches!(waited, Some(Ok(Attempt::Busy(_)))), "first runtime: {waited:?}");
    drop(first);
    let second = runtime();
    let waited = second.block_on(waiter.acquire_queued(&req("rt", "w2"), Duration::from_millis(300)));
    assert!(matches!(waited, Some(Ok(Attempt::Busy(_)))), "second runtime: {waited:?}");
    let granted = second.block_on(async {
        let wait = tokio::spawn({
            let waiter = waiter.clone();
            async move { waiter.acquire_queued(&req("rt", "w3"), WAIT).await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        holder.release(&held, &ReleaseRequest::default()).await.expect("release");
        tokio::time::timeout(Duration::from_secs(10), wait).await.expect("in time").expect("join")
    });
    assert!(matches!(granted, Some(Ok(Attempt::Granted(_)))), "after the release: {granted:?}");
}

/// A memory store whose watches of one key can be cut, as a dropped
/// connection resets an etcd watch stream.
#[derive(Debug)]
struct Blips {
    inner: tenure_core::MemoryBackend,
    key: String,
    cut: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl Backend for Blips {
    fn url(&self) -> &str {
        "blips://"
    }
    async fn get(&self, key: &tenure_core::Key) -> tenure_core::Result<Option<tenure_core::Stored>> {
        self.inner.get(key).await
    }
    async fn put(
        &self,
        key: &tenure_core::Key,
        value: bytes::Bytes,
        opts: PutOptions,
    ) -> tenure_core::Result<tenure_core::Put> {
        self.inner.put(key, value, opts).await
    }
    async fn list(&self, prefix: &str) -> tenure_core::Result<Vec<String>> {
        self.inner.list(prefix).await
    }
    async fn watch(
        &self,
        key: &tenure_core::Key,
        seen: Option<&tenure_core::Version>,
        timeout: Duration,
    ) -> tenure_core::Result<bool> {
        if key.as_str() != self.key {
            return self.inner.watch(key, seen, timeout).await;
        }
        tokio::select! {
            changed = self.inner.watch(key, seen, timeout) => changed,
            () = self.cut.notified() => Err(tenure_core::Error::store("blips://", "watching", "the stream was reset")),
        }
    }
}

/// A waiter whose watch fails for a moment (a connection blip) keeps its
/// place in line: it does not leave and queue again behind those who came
/// after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passing_store_error_does_not_cost_a_waiter_its_place() {
    let blips = Arc::new(Blips {
        inner: tenure_core::MemoryBackend::new(SystemClock::shared()),
        key: "b".into(),
        cut: tokio::sync::Notify::new(),
    });
    let store: Arc<dyn LeaseStore> =
        Arc::new(tenure_core::CasStore::new(blips.clone(), SystemClock::shared(), Default::default()));
    let line = || async {
        let cas = tenure_core::CasStore::new(blips.clone(), SystemClock::shared(), Default::default());
        cas.waiters("b").await.expect("line").into_iter().map(|w| w.nonce).collect::<Vec<_>>()
    };
    let first = held(store.try_acquire(&req("b", "first")).await.expect("acquire"));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut nonces = Vec::new();
    for label in ["ahead", "behind"] {
        let (s, tx, r) = (store.clone(), tx.clone(), req("b", label));
        nonces.push(r.holder.nonce.clone());
        tokio::spawn(async move {
            let g = held(s.acquire_queued(&r, WAIT).await.expect("a queue").expect("wait"));
            let _ = tx.send((label, g));
        });
        for _ in 0..500 {
            if line().await.len() == nonces.len() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    assert_eq!(line().await, nonces);
    // The head watches the lease; its watch is cut, again and again.
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        blips.cut.notify_waiters();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(line().await, nonces, "the line after the blips");
    store.release(&first, &ReleaseRequest::default()).await.expect("release");
    let (label, g) = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("a grant").expect("open");
    assert_eq!(label, "ahead", "the waiter ahead lost its place");
    store.release(&g, &ReleaseRequest::default()).await.expect("release");
    let (label, _) = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("a grant").expect("open");
    assert_eq!(label, "behind");
}
