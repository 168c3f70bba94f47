//! The Redis anchor: the classic Redis lock, through one multiplexed connection
//! shared by every worker (what a careful client does).
//!
//! The comparison with `tenure://` is like for like: both are driven by the same
//! load generator on the same runtime, and both put every worker's requests on
//! one pipelined connection (the `tenure://` store opens one connection per
//! server unless told otherwise). redis-server runs commands on one thread; a
//! `tenure serve` connection is served by one thread too.
//!
//! - acquire: `SET key holder NX PX ttl` (must answer OK);
//! - release: the compare-and-delete script
//!   `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end`
//!   sent as `EVALSHA` (loaded on first use);
//! - renew (`--op renew`): the compare-and-`PEXPIRE` script;
//! - hand-over (`--op handover`, all workers on one key): `SET NX PX` polled
//!   with tenure's default backoff (jittered, 25 ms doubling to 1 s) until it
//!   answers OK, then the compare-and-delete script to release — the Redis lock
//!   as its clients use it, with no waiter woken by the release.
//!
//! No fencing token, no witness, no watermark: this is the floor of what a lease
//! costs on Redis.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use async_trait::async_trait;
use redis::Script;
use redis::aio::MultiplexedConnection;

use super::handover::Backoff;
use super::{Op, Target};

const RELEASE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
const RENEW: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

pub(crate) struct RedisLock {
    url: String,
    conn: MultiplexedConnection,
    release: Script,
    renew: Script,
    op: Op,
    ttl_ms: u64,
    run: String,
    holder: String,
    /// Each worker's key, made in `setup` (as the store targets' names are).
    keys: std::sync::RwLock<Vec<std::sync::Arc<str>>>,
}

impl RedisLock {
    pub(crate) async fn connect(url: &str, op: Op, ttl: Duration) -> Result<Self> {
        let client = redis::Client::open(url).with_context(|| format!("redis URL {url}"))?;
        let conn = client.get_multiplexed_async_connection().await.with_context(|| format!("connecting to {url}"))?;
        Ok(Self {
            url: url.to_string(),
            conn,
            release: Script::new(RELEASE),
            renew: Script::new(RENEW),
            op,
            ttl_ms: ttl.as_millis() as u64,
            run: tenure_core::random_nonce(),
            holder: tenure_core::random_nonce(),
            keys: std::sync::RwLock::new(Vec::new()),
        })
    }

    fn key(&self, w: usize) -> Result<std::sync::Arc<str>> {
        let keys = self.keys.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        keys.get(w).cloned().context("bench worker without a key")
    }

    fn handover_key(&self) -> String {
        format!("tenure-bench:{}:handover", self.run)
    }

    /// `SET key holder NX PX ttl`: whether it was set.
    async fn set_nx(&self, key: &str, holder: &str) -> Result<bool> {
        let mut conn = self.conn.clone();
        let ok: Option<String> =
            redis::cmd("SET").arg(key).arg(holder).arg("NX").arg("PX").arg(self.ttl_ms).query_async(&mut conn).await?;
        Ok(ok.is_some())
    }

    async fn acquire(&self, key: &str) -> Result<()> {
        let mut conn = self.conn.clone();
        let ok: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(&self.holder)
            .arg("NX")
            .arg("PX")
            .arg(self.ttl_ms)
            .query_async(&mut conn)
            .await?;
        if ok.is_none() {
            bail!("redis lock {key} unexpectedly held");
        }
        Ok(())
    }
}

#[async_trait]
impl Target for RedisLock {
    fn label(&self) -> String {
        let what = match self.op {
            Op::Cycle => "SET NX PX + compare-and-delete",
            Op::Renew => "compare-and-pexpire",
            Op::Handover => "SET NX PX polled + compare-and-delete",
        };
        format!("{} {what} (anchor)", self.url)
    }

    fn is_anchor(&self) -> bool {
        true
    }

    fn contends(&self) -> bool {
        true
    }

    async fn server_cpu(&self) -> Result<Option<f64>> {
        super::cpu::redis_info_seconds(&mut self.conn.clone()).await.map(Some)
    }

    async fn hold(&self, w: usize) -> Result<()> {
        let (key, holder) = (self.handover_key(), format!("{}-w{w}", self.holder));
        let mut backoff = Backoff::new();
        while !self.set_nx(&key, &holder).await? {
            tokio::time::sleep(backoff.next()).await;
        }
        Ok(())
    }

    async fn unhold(&self, w: usize) -> Result<()> {
        let (key, holder) = (self.handover_key(), format!("{}-w{w}", self.holder));
        let mut conn = self.conn.clone();
        let deleted: i64 = self.release.key(&key).arg(&holder).invoke_async(&mut conn).await?;
        if deleted != 1 {
            bail!("redis lock {key} was not client {w}'s at release");
        }
        Ok(())
    }

    async fn setup(&self, w: usize) -> Result<()> {
        {
            let mut keys = self.keys.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            while keys.len() <= w {
                let key = format!("tenure-bench:{}:w{}", self.run, keys.len());
                keys.push(key.into());
            }
        }
        if self.op == Op::Renew {
            self.acquire(&self.key(w)?).await?;
        }
        Ok(())
    }

    async fn op(&self, w: usize) -> Result<()> {
        let key = self.key(w)?;
        let mut conn = self.conn.clone();
        match self.op {
            Op::Cycle => {
                self.acquire(&key).await?;
                let deleted: i64 = self.release.key(&*key).arg(&self.holder).invoke_async(&mut conn).await?;
                if deleted != 1 {
                    bail!("redis lock {key} was not ours at release");
                }
            }
            Op::Handover => bail!("hand-overs are measured with hold and unhold"),
            Op::Renew => {
                let renewed: i64 =
                    self.renew.key(&*key).arg(&self.holder).arg(self.ttl_ms).invoke_async(&mut conn).await?;
                if renewed != 1 {
                    bail!("redis lock {key} was not ours at renewal");
                }
            }
        }
        Ok(())
    }
}
