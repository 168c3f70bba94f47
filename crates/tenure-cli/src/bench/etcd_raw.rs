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
use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};

use super::{Op, Target};
use crate::exit::Fail;

pub(crate) struct EtcdRaw {
    endpoint: String,
    client: Client,
    ttl_secs: i64,
    run: String,
}

impl EtcdRaw {
    pub(crate) async fn connect(url: &str, op: Op, ttl: Duration) -> Result<Self> {
        if op != Op::Cycle {
            bail!(Fail::usage("the etcd-raw anchor measures acquire+release cycles only (--op cycle)"));
        }
        let endpoint = format!("http://{}", url.trim_start_matches("etcd-raw://").trim_end_matches('/'));
        let client =
            Client::connect([endpoint.as_str()], None).await.with_context(|| format!("connecting to {endpoint}"))?;
        Ok(Self { endpoint, client, ttl_secs: ttl.as_secs().max(1) as i64, run: tenure::random_nonce() })
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

    async fn op(&self, w: usize) -> Result<()> {
        let mut client = self.client.clone();
        let key = format!("tenure-bench/{}/w{w}", self.run);
        let lease = client.lease_grant(self.ttl_secs, None).await?.id();
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.as_str(), self.run.as_str(), Some(PutOptions::new().with_lease(lease)))]);
        if !client.txn(txn).await?.succeeded() {
            bail!("etcd key {key} unexpectedly exists");
        }
        client.lease_revoke(lease).await?;
        Ok(())
    }
}
