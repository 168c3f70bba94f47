//! Failover on the three-member cluster (`TENURE_TEST_ETCD_CLUSTER`, with
//! `TENURE_TEST_ETCD_CLUSTER_DIR` holding the members' pid files and the
//! `member` script that starts them): the leader is killed (`kill -9`, so no
//! leadership hand-over) while a lease is held, then the holder dies.
//!
//! What must hold: the holder keeps its lease or loses it cleanly, and its
//! Health says which; no two holders ever pass a fenced write (the fenced
//! record keeps a log of every write that passed); a contender acquires within
//! the TTL (plus clock-discipline margins) after the holder dies. The killed
//! member is started again at the end, whatever happens.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tenure_conformance::{MAX_SKEW, server_from_env};
use tenure_core::{Client, Error, FencedRecord, Health, LeaseOptions};
use tenure_etcd::proto::etcdserverpb::{MemberListRequest, StatusRequest};
use tokio::sync::{oneshot, watch};

use common::{Raw, Scratch, open_options};

const TTL: Duration = Duration::from_secs(5);
/// Generous real-time bound for things that take a few seconds.
const PATIENCE: Duration = Duration::from_secs(60);

/// Runs `member ACTION NAME` from the cluster directory; true on success.
fn member(dir: &Path, action: &str, name: &str) -> bool {
    let out = Command::new(dir.join("member")).args([action, name]).output();
    match out {
        Ok(o) if o.status.success() => true,
        Ok(o) => {
            eprintln!("member {action} {name} failed: {}", String::from_utf8_lossy(&o.stderr));
            false
        }
        Err(e) => {
            eprintln!("cannot run {}/member: {e}", dir.display());
            false
        }
    }
}

/// Starts a killed member again when dropped, even if the test panicked.
struct Restart {
    dir: PathBuf,
    name: String,
}

impl Drop for Restart {
    fn drop(&mut self) {
        assert!(member(&self.dir, "start", &self.name), "restart etcd member {} (see its log)", self.name);
    }
}

/// The leader's member name, asked of every member that answers.
async fn leader(endpoints: &[String]) -> Option<String> {
    for ep in endpoints {
        let Ok(Ok(c)) = tokio::time::timeout(Duration::from_secs(3), Raw::connect(std::slice::from_ref(ep))).await
        else {
            continue;
        };
        let (Ok(Ok(status)), Ok(Ok(members))) = (
            tokio::time::timeout(Duration::from_secs(3), c.0.maintenance().status(StatusRequest {})).await,
            tokio::time::timeout(Duration::from_secs(3), c.0.cluster().member_list(MemberListRequest::default())).await,
        ) else {
            continue;
        };
        let (status, members) = (status.into_inner(), members.into_inner());
        if let Some(m) = members.members.iter().find(|m| m.id == status.leader) {
            return Some(m.name.clone());
        }
    }
    None
}

/// Kills member `name` with SIGKILL, as a crash would (no leadership hand-over).
fn kill_member(dir: &Path, name: &str) -> bool {
    let Ok(pid) = std::fs::read_to_string(dir.join(format!("{name}.pid"))) else { return false };
    Command::new("kill").args(["-KILL", pid.trim()]).status().is_ok_and(|s| s.success())
}

/// A health state without its timestamps, for the printed history.
fn summary(h: &Health) -> String {
    match h {
        Health::Held { .. } => "Held".into(),
        Health::AtRisk { failures, error, .. } => format!("AtRisk({failures}: {error})"),
        Health::Lost(reason) => format!("Lost({reason})"),
    }
}

/// Appends `entry` to the fenced log under `token`.
async fn log_write(fence: &FencedRecord, token: u64, entry: &str) -> tenure_core::Result<()> {
    fence
        .update(token, |prev| {
            let mut log = prev.map(|b| b.to_vec()).unwrap_or_default();
            log.extend_from_slice(format!("{entry}:{token} ").as_bytes());
            Bytes::from(log)
        })
        .await
        .map(drop)
}

/// What the holder thread reports.
struct HolderView {
    token: u64,
    health: watch::Receiver<Health>,
    health_log: Arc<Mutex<Vec<String>>>,
    writes: Arc<Mutex<u32>>,
}

/// Runs a holder in a runtime of its own, as a separate process would: it
/// acquires, writes to the fenced log while its health allows, and "dies" like
/// `kill -9` when told (its runtime is dropped mid-flight: no release).
fn spawn_holder(url: String, die: oneshot::Receiver<()>) -> oneshot::Receiver<HolderView> {
    let (ready_tx, ready) = oneshot::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        rt.block_on(async move {
            let store = common::open(&url, &open_options()).await.expect("holder opens the store");
            let fence_backend = common::connect(&url, &open_options()).await.expect("backend");
            let fence = FencedRecord::new(Arc::new(fence_backend), "failover-data").expect("fence");
            let opts = LeaseOptions::exclusive().with_ttl(TTL).with_max_failures(10).no_wait();
            let lease = Client::new(store).try_acquire("failover", &opts).await.expect("holder acquires");
            let (health_log, writes) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(0)));
            let view = HolderView {
                token: lease.token(),
                health: lease.health_watch(),
                health_log: health_log.clone(),
                writes: writes.clone(),
            };
            let mut health = lease.health_watch();
            let _ = ready_tx.send(view);
            let work = async {
                loop {
                    let now = health.borrow_and_update().clone();
                    health_log.lock().expect("log").push(summary(&now));
                    let acting = !now.is_lost();
                    if acting && log_write(&fence, lease.token(), "holder").await.is_ok() {
                        *writes.lock().expect("writes") += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            };
            tokio::select! {
                _ = die => {}
                () = work => {}
            }
            // Killed: the lease is neither released nor dropped.
            std::mem::forget(lease);
        });
        rt.shutdown_background();
    });
    ready
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stopping_the_leader_while_a_lease_is_held_keeps_or_loses_it_cleanly_and_never_lets_two_holders_write() {
    let Some(endpoints) = server_from_env("TENURE_TEST_ETCD_CLUSTER") else { return };
    let Some(dir) = server_from_env("TENURE_TEST_ETCD_CLUSTER_DIR") else { return };
    let dir = PathBuf::from(dir);
    for m in ["e1", "e2", "e3"] {
        assert!(member(&dir, "start", m), "etcd member {m} must be running before the test");
    }
    let eps: Vec<String> = endpoints.split(',').map(str::to_string).collect();
    let s = Scratch::new(&endpoints, "failover").await;

    let (die, die_rx) = oneshot::channel();
    let holder = tokio::time::timeout(PATIENCE, spawn_holder(s.url.clone(), die_rx))
        .await
        .expect("the holder acquires in time")
        .expect("holder thread");
    let contender_store = common::open(&s.url, &open_options()).await.expect("contender opens the store");
    let contender = Client::new(contender_store);
    let wait = LeaseOptions::exclusive().with_ttl(TTL).with_timeout(PATIENCE * 2);
    let waiting = tokio::spawn(async move { contender.acquire("failover", &wait).await });
    tokio::time::sleep(Duration::from_secs(1)).await;

    let leader = leader(&eps).await.expect("the cluster has a leader");
    eprintln!("killing the leader, {leader} (kill -9), while token {} holds the lease", holder.token);
    let restart = Restart { dir: dir.clone(), name: leader.clone() };
    assert!(kill_member(&dir, &leader), "kill -9 the leader");
    let writes_at_stop = *holder.writes.lock().expect("writes");

    // Two TTLs: time for an election, for renewals to resume, or for the loss.
    tokio::time::sleep(TTL * 2).await;
    let health = holder.health.borrow().clone();
    let kept = matches!(health, Health::Held { .. } | Health::AtRisk { .. });
    let changes: Vec<String> = holder.health_log.lock().expect("log").iter().fold(Vec::new(), |mut v, h| {
        if v.last() != Some(h) {
            v.push(h.clone());
        }
        v
    });
    eprintln!("holder health across the failover: {}", changes.join(" -> "));
    if kept {
        eprintln!("the holder kept its lease across the failover");
        assert!(!waiting.is_finished(), "nobody else may hold a lease its holder kept");
        // How much it wrote meanwhile depends on the machine's load: a figure, not a verdict.
        let after = *holder.writes.lock().expect("writes") - writes_at_stop;
        eprintln!("it wrote {after} more fenced records during the two TTLs after the leader died");
    } else {
        let Health::Lost(reason) = &health else { unreachable!() };
        eprintln!("the holder lost its lease cleanly: {reason}");
    }

    // Now the holder dies without a word; a contender takes over within the TTL.
    let died = Instant::now();
    let _ = die.send(());
    let lease = tokio::time::timeout(PATIENCE, waiting)
        .await
        .expect("a contender must acquire after the holder dies")
        .expect("join")
        .expect("contender acquires");
    // Liveness is asserted by the PATIENCE timeout above; how soon within it is a
    // figure for the reader (TTL + skew + one poll is the design bound), since a
    // loaded machine must not fail the test on timing.
    let took = died.elapsed();
    let bound = TTL + MAX_SKEW + LeaseOptions::default().backoff_max;
    eprintln!("the contender acquired {took:?} after the holder died (design bound {bound:?})");
    assert!(lease.token() > holder.token);

    let fence = FencedRecord::new(s.dyn_backend().await, "failover-data").expect("fence");
    log_write(&fence, lease.token(), "contender").await.expect("the new holder writes");
    match log_write(&fence, holder.token, "stale").await {
        Err(Error::Fenced { ours, current, .. }) => assert_eq!((ours, current), (holder.token, lease.token())),
        other => panic!("the dead holder's write must be fenced, got {other:?}"),
    }
    let log = fence.read().await.expect("read").expect("written");
    let entries: Vec<(String, u64)> = String::from_utf8_lossy(&log.value)
        .split_whitespace()
        .map(|e| {
            let (who, token) = e.split_once(':').expect("who:token");
            (who.to_string(), token.parse().expect("token"))
        })
        .collect();
    let first_contender = entries.iter().position(|(who, _)| who == "contender").expect("contender wrote");
    assert!(
        entries[..first_contender].iter().all(|(who, t)| who == "holder" && *t == holder.token)
            && entries[first_contender..].iter().all(|(who, t)| who == "contender" && *t == lease.token()),
        "fenced writes of two holders interleaved: {entries:?}"
    );
    assert!(first_contender > 0, "the holder wrote under its lease");
    lease.release().await.expect("release");

    drop(restart);
    assert!(leader_after_restart(&eps).await, "the cluster must be healthy again, with all three members");
}

/// Whether all three members answer and agree on a leader.
async fn leader_after_restart(eps: &[String]) -> bool {
    let mut leaders = Vec::new();
    for ep in eps {
        let Ok(Ok(c)) = tokio::time::timeout(Duration::from_secs(3), Raw::connect(std::slice::from_ref(ep))).await
        else {
            return false;
        };
        match tokio::time::timeout(Duration::from_secs(3), c.0.maintenance().status(StatusRequest {})).await {
            Ok(Ok(status)) => leaders.push(status.into_inner().leader),
            _ => return false,
        }
    }
    leaders.windows(2).all(|w| w[0] == w[1]) && leaders[0] != 0
}
