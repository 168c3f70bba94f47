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

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use async_trait::async_trait;
use tenure_etcd::etcd_client::{Client, LockOptions};

use super::{Op, Target};
use crate::exit::Fail;

pub(crate) struct EtcdLock {
    endpoint: String,
    client: Client,
    ttl: Duration,
    run: String,
    /// Per worker: its etcd lease and when it was last refreshed.
    sessions: std::sync::Mutex<Vec<Option<(i64, Instant)>>>,
}

impl EtcdLock {
    pub(crate) async fn connect(url: &str, op: Op, ttl: Duration) -> Result<Self> {
        if op != Op::Cycle {
            bail!(Fail::usage("the etcd-lock anchor measures acquire+release cycles only (--op cycle)"));
        }
        let hosts = url.trim_start_matches("etcd-lock://").trim_end_matches('/');
        if hosts.is_empty() || hosts.contains('/') {
            bail!(Fail::usage(format!("expected etcd-lock://host:port[,host:port…], got {url}")));
        }
        let endpoints: Vec<String> = hosts.split(',').map(|h| format!("http://{h}")).collect();
        let client = tokio::time::timeout(Duration::from_secs(10), Client::connect(&endpoints, None))
            .await
            .with_context(|| format!("connecting to etcd at {hosts}: no answer within 10s"))?
            .with_context(|| format!("connecting to etcd at {hosts}"))?;
        Ok(Self {
            endpoint: hosts.to_string(),
            client,
            ttl: ttl.max(Duration::from_secs(2)),
            run: tenure::random_nonce(),
            sessions: std::sync::Mutex::new(Vec::new()),
        })
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Vec<Option<(i64, Instant)>>> {
        self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Worker `w`'s etcd lease, refreshed when half its TTL has passed.
    async fn session(&self, w: usize) -> Result<i64> {
        let current = self.sessions().get(w).copied().flatten();
        let mut client = self.client.clone();
        let since = Instant::now();
        let lease = match current {
            Some((lease, since)) if since.elapsed() < self.ttl / 2 => return Ok(lease),
            Some((lease, _)) => {
                client.lease_keep_alive(lease).await.context("refreshing the bench's etcd lease")?;
                lease
            }
            None => client.lease_grant(self.ttl.as_secs() as i64, None).await.context("granting an etcd lease")?.id(),
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

    async fn setup(&self, w: usize) -> Result<()> {
        self.session(w).await.map(drop)
    }

    async fn op(&self, w: usize) -> Result<()> {
        let lease = self.session(w).await?;
        let mut client = self.client.clone();
        let name = format!("tenure-bench-lock/{}/w{w}", self.run);
        let locked = client.lock(name, Some(LockOptions::new().with_lease(lease))).await?;
        client.unlock(locked.key()).await?;
        Ok(())
    }

    async fn teardown(&self) -> Result<()> {
        let leases: Vec<i64> = self.sessions().drain(..).flatten().map(|(l, _)| l).collect();
        let mut client = self.client.clone();
        for lease in leases {
            client.lease_revoke(lease).await.context("revoking the bench's etcd lease")?;
        }
        Ok(())
    }
}
