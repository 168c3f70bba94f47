//! The etcd anchor: the nearest raw lease on etcd, through one client (one
//! HTTP/2 channel) shared by every worker.
//!
//! - acquire: `LeaseGrant(ttl)`, then a transaction `if create_revision(key) == 0
//!   then put(key, holder, lease)` (must succeed);
//! - release: `LeaseRevoke`, which deletes the key with the lease.
//!
//! Three round trips, each a Raft commit with an fsync on the etcd side: this is
//! what a lease costs on a replicated store.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use async_trait::async_trait;
use tenure_etcd::proto::etcdserverpb::{LeaseGrantRequest, LeaseRevokeRequest, TxnRequest};
use tenure_etcd::rpc::{self, Connect, Etcd};

use super::{Op, Target};
use crate::exit::Fail;

pub(crate) struct EtcdRaw {
    endpoint: String,
    client: Etcd,
    ttl_secs: i64,
    run: String,
}

impl EtcdRaw {
    pub(crate) async fn connect(url: &str, op: Op, ttl: Duration) -> Result<Self> {
        if op != Op::Cycle {
            bail!(Fail::usage("the etcd-raw anchor measures acquire+release cycles only (--op cycle)"));
        }
        let endpoint = format!("http://{}", url.trim_start_matches("etcd-raw://").trim_end_matches('/'));
        let how = Connect { connect_timeout: Duration::from_secs(10), ..Connect::default() };
        let client = Etcd::connect(std::slice::from_ref(&endpoint), &how)
            .await
            .with_context(|| format!("connecting to {endpoint}"))?;
        Ok(Self { endpoint, client, ttl_secs: ttl.as_secs().max(1) as i64, run: tenure_core::random_nonce() })
    }
}

#[async_trait]
impl Target for EtcdRaw {
    fn label(&self) -> String {
        format!("etcd {} lease grant + txn put-if-absent + revoke (anchor)", self.endpoint)
    }

    fn is_anchor(&self) -> bool {
        true
    }

    async fn server_cpu(&self) -> Result<Option<f64>> {
        super::cpu::prometheus_seconds(&[format!("{}/metrics", self.endpoint)]).await.map(Some)
    }

    async fn op(&self, w: usize) -> Result<()> {
        let key = format!("tenure-bench/{}/w{w}", self.run);
        let id =
            self.client.lease().lease_grant(LeaseGrantRequest { ttl: self.ttl_secs, id: 0 }).await?.into_inner().id;
        let txn = TxnRequest {
            compare: vec![rpc::create_revision_is(&key, 0)],
            success: vec![rpc::put_op(&key, self.run.clone().into_bytes(), id)],
            failure: Vec::new(),
        };
        if !self.client.kv().txn(txn).await?.into_inner().succeeded {
            bail!("etcd key {key} unexpectedly exists");
        }
        self.client.lease().lease_revoke(LeaseRevokeRequest { id }).await?;
        Ok(())
    }
}
