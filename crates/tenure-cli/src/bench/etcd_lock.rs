//! The etcd Lock API anchor (`etcd-lock://host:port`): what etcd itself offers
//! for mutual exclusion, next to the `etcd://` store in the same run.
//!
//! Like a user of etcd's `concurrency` package, each worker holds one etcd lease
//! (its session), granted before the measurement and kept alive with
//! `LeaseKeepAlive` when half its TTL has passed; a *cycle* is then
//! - `Lock(name, lease)`: the server puts `name/<lease>` attached to the lease,
//!   and answers once it is the lowest key under `name` (at once here: each
//!   worker locks a name of its own);
//! - `Unlock(key)`: the server deletes the key.
//!
//! Two round trips and two Raft commits per cycle, no fencing token besides the
//! key's revision, no holder identity, watermark or shared mode.
//!
//! Hand-overs (`--op handover`): every worker locks the same name; the server
//! queues them by the revision of their keys and answers the next one's `Lock`
//! when the holder's key is deleted (woken by watch).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use async_trait::async_trait;
use tenure_etcd::proto::etcdserverpb::{LeaseGrantRequest, LeaseRevokeRequest, StatusRequest};
use tenure_etcd::proto::v3lockpb::{LockRequest, UnlockRequest};
use tenure_etcd::rpc::{Connect, Etcd};

use super::{Op, Target};
use crate::exit::Fail;

pub(crate) struct EtcdLock {
    endpoint: String,
    client: Etcd,
    ttl: Duration,
    run: String,
    /// Per worker: its etcd lease and when it was last refreshed.
    sessions: std::sync::Mutex<Vec<Option<(i64, Instant)>>>,
    /// Hand-overs: the key each worker's `Lock` returned.
    locked: std::sync::Mutex<Vec<Option<Vec<u8>>>>,
}

impl EtcdLock {
    pub(crate) async fn connect(url: &str, op: Op, ttl: Duration) -> Result<Self> {
        if op == Op::Renew {
            bail!(Fail::usage("the etcd-lock anchor measures acquire+release cycles and hand-overs, not renewals"));
        }
        let hosts = url.trim_start_matches("etcd-lock://").trim_end_matches('/');
        if hosts.is_empty() || hosts.contains('/') {
            bail!(Fail::usage(format!("expected etcd-lock://host:port[,host:port…], got {url}")));
        }
        let endpoints: Vec<String> = hosts.split(',').map(|h| format!("http://{h}")).collect();
        let how = Connect { connect_timeout: Duration::from_secs(10), ..Connect::default() };
        let client = Etcd::connect(&endpoints, &how).await.with_context(|| format!("connecting to etcd at {hosts}"))?;
        // The client connects lazily: ask once, so an etcd that is not there is
        // found here (and the anchor skipped), not in the middle of a run.
        tokio::time::timeout(Duration::from_secs(10), client.maintenance().status(StatusRequest {}))
            .await
            .with_context(|| format!("asking etcd at {hosts} for its status: no answer within 10s"))?
            .with_context(|| format!("asking etcd at {hosts} for its status"))?;
        Ok(Self {
            endpoint: hosts.to_string(),
            client,
            ttl: ttl.max(Duration::from_secs(2)),
            run: tenure_core::random_nonce(),
            sessions: std::sync::Mutex::new(Vec::new()),
            locked: std::sync::Mutex::new(Vec::new()),
        })
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Vec<Option<(i64, Instant)>>> {
        self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Worker `w`'s etcd lease, refreshed when half its TTL has passed.
    async fn session(&self, w: usize) -> Result<i64> {
        let current = self.sessions().get(w).copied().flatten();
        let since = Instant::now();
        let lease = match current {
            Some((lease, since)) if since.elapsed() < self.ttl / 2 => return Ok(lease),
            Some((lease, _)) => {
                self.client.keep_alive_once(lease).await.context("refreshing the bench's etcd lease")?;
                lease
            }
            None => {
                let ttl = i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX);
                let mut leases = self.client.lease();
                let grant = leases.lease_grant(LeaseGrantRequest { ttl, id: 0 }).await;
                grant.context("granting an etcd lease")?.into_inner().id
            }
        };
        let mut sessions = self.sessions();
        if sessions.len() <= w {
            sessions.resize(w + 1, None);
        }
        sessions[w] = Some((lease, since));
        Ok(lease)
    }
}

#[async_trait]
impl Target for EtcdLock {
    fn label(&self) -> String {
        format!("etcd {} Lock+Unlock API (anchor)", self.endpoint)
    }

    fn is_anchor(&self) -> bool {
        true
    }

    fn contends(&self) -> bool {
        true
    }

    async fn server_cpu(&self) -> Result<Option<f64>> {
        let urls: Vec<String> = self.endpoint.split(',').map(|h| format!("http://{h}/metrics")).collect();
        super::cpu::prometheus_seconds(&urls).await.map(Some)
    }

    async fn hold(&self, w: usize) -> Result<()> {
        let lease = self.session(w).await?;
        let name = format!("tenure-bench-lock/{}/handover", self.run).into_bytes();
        let locked = self.client.lock().lock(LockRequest { name, lease }).await?.into_inner();
        let mut keys = self.locked.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if keys.len() <= w {
            keys.resize(w + 1, None);
        }
        keys[w] = Some(locked.key);
        Ok(())
    }

    async fn unhold(&self, w: usize) -> Result<()> {
        let key = {
            let mut keys = self.locked.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            keys.get_mut(w).and_then(Option::take).context("unlocking a lock the bench client does not hold")?
        };
        self.client.lock().unlock(UnlockRequest { key }).await?;
        Ok(())
    }

    async fn setup(&self, w: usize) -> Result<()> {
        self.session(w).await.map(drop)
    }

    async fn op(&self, w: usize) -> Result<()> {
        let lease = self.session(w).await?;
        let name = format!("tenure-bench-lock/{}/w{w}", self.run).into_bytes();
        let locked = self.client.lock().lock(LockRequest { name, lease }).await?.into_inner();
        self.client.lock().unlock(UnlockRequest { key: locked.key }).await?;
        Ok(())
    }

    async fn teardown(&self) -> Result<()> {
        let leases: Vec<i64> = self.sessions().drain(..).flatten().map(|(l, _)| l).collect();
        for id in leases {
            self.client
                .lease()
                .lease_revoke(LeaseRevokeRequest { id })
                .await
                .context("revoking the bench's etcd lease")?;
        }
        Ok(())
    }
}
