//! A lease store as a bench target: acquire + release cycles or renewals on a
//! lease per worker, or hand-overs of one lease through the client's waiting path.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use async_trait::async_trait;
use tenure::{
    AcquireRequest, Attempt, Client, Grant, Holder, Lease, LeaseName, LeaseOptions, LeaseStore, Mode, ReleaseRequest,
};
use tokio::sync::Mutex;

use super::{Op, Target, cpu};

/// A hand-over client: its own holder identity, and its lease while it holds it.
type Contender = (Arc<Client>, Option<Lease>);

/// A lease store: acquire+release cycles, or renewals, on one lease per worker.
pub(super) struct StoreTarget {
    /// The URL as given, options included (the store's own URL drops them).
    url: String,
    store: Arc<dyn LeaseStore>,
    op: Op,
    ttl: Duration,
    holder: Arc<Holder>,
    /// Each worker's request, made in `setup`: the load generator's own cost
    /// stays out of the figures.
    requests: std::sync::RwLock<Vec<Arc<AcquireRequest>>>,
    held: Mutex<Vec<Option<Grant>>>,
    /// Hand-overs: each worker's client (a holder of its own) and lease.
    contenders: std::sync::Mutex<Vec<Option<Contender>>>,
    run: String,
    /// The server's Prometheus metrics, for its CPU (see [`cpu`]).
    pub(super) metrics: Vec<String>,
}

impl StoreTarget {
    pub(super) fn new(url: &str, store: Arc<dyn LeaseStore>, op: Op, ttl: Duration) -> Self {
        Self {
            url: url.to_string(),
            store,
            op,
            ttl,
            holder: Arc::new(Holder::current()),
            requests: std::sync::RwLock::new(Vec::new()),
            held: Mutex::new(Vec::new()),
            contenders: std::sync::Mutex::new(Vec::new()),
            run: tenure_core::random_nonce()[..6].to_string(),
            metrics: Vec::new(),
        }
    }

    fn request(&self, w: usize) -> Result<Arc<AcquireRequest>> {
        let requests = self.requests.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        requests.get(w).cloned().context("bench worker without a request")
    }

    fn contenders(&self) -> std::sync::MutexGuard<'_, Vec<Option<Contender>>> {
        self.contenders.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn handover_name(&self) -> String {
        format!("bench-{}/handover", self.run)
    }

    async fn acquire(&self, w: usize) -> Result<Grant> {
        match self.store.try_acquire(&*self.request(w)?).await? {
            Attempt::Granted(g) => Ok(g),
            Attempt::Busy(b) => bail!("bench lease unexpectedly busy: {}", b.describe()),
        }
    }
}

#[async_trait]
impl Target for StoreTarget {
    fn label(&self) -> String {
        let what = match self.op {
            Op::Cycle => "acquire+release",
            Op::Renew => "renew",
            Op::Handover => "waiting acquire, release",
        };
        format!("{} {what}", self.url)
    }

    fn contends(&self) -> bool {
        true
    }

    async fn server_cpu(&self) -> Result<Option<f64>> {
        if self.metrics.is_empty() {
            return Ok(None);
        }
        cpu::prometheus_seconds(&self.metrics).await.map(Some)
    }

    async fn hold(&self, w: usize) -> Result<()> {
        let client = self.contenders().get(w).and_then(|c| c.as_ref()).map(|(c, _)| c.clone());
        let client = client.context("no bench client")?;
        // The waiting path users take: tenure's default backoff, and the
        // store's watch where it has one.
        let opts = LeaseOptions::exclusive().with_ttl(self.ttl);
        let lease = client.acquire(&self.handover_name(), &opts).await?;
        if let Some(Some((_, held))) = self.contenders().get_mut(w) {
            *held = Some(lease);
        }
        Ok(())
    }

    async fn unhold(&self, w: usize) -> Result<()> {
        let lease = self.contenders().get_mut(w).and_then(|c| c.as_mut()).and_then(|(_, l)| l.take());
        lease.context("releasing a lease the bench client does not hold")?.release().await?;
        Ok(())
    }

    async fn setup(&self, w: usize) -> Result<()> {
        {
            let mut requests = self.requests.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            while requests.len() <= w {
                let name = LeaseName::new(format!("bench-{}/w{}", self.run, requests.len()))?;
                requests.push(Arc::new(AcquireRequest {
                    name,
                    mode: Mode::Exclusive,
                    ttl: self.ttl,
                    holder: self.holder.clone(),
                    retake: true,
                    meta: None,
                }));
            }
        }
        if self.op == Op::Handover {
            let mut contenders = self.contenders();
            if contenders.len() <= w {
                contenders.resize_with(w + 1, || None);
            }
            contenders[w] = Some((Arc::new(Client::new(self.store.clone())), None));
            return Ok(());
        }
        let mut held = self.held.lock().await;
        if held.len() <= w {
            held.resize(w + 1, None);
        }
        if self.op == Op::Renew {
            held[w] = Some(self.acquire(w).await?);
        }
        Ok(())
    }

    async fn op(&self, w: usize) -> Result<()> {
        match self.op {
            Op::Cycle => {
                let g = self.acquire(w).await?;
                self.store.release(&g, &ReleaseRequest::default()).await?;
            }
            Op::Renew => {
                let g = self.held.lock().await[w].take().context("no held lease")?;
                let g = self.store.renew(&g).await?;
                self.held.lock().await[w] = Some(g);
            }
            Op::Handover => bail!("hand-overs are measured with hold and unhold"),
        }
        Ok(())
    }

    async fn teardown(&self) -> Result<()> {
        let leases: Vec<Lease> = self.contenders().drain(..).flatten().filter_map(|(_, l)| l).collect();
        for l in leases {
            l.release().await?;
        }
        let grants: Vec<Grant> = self.held.lock().await.drain(..).flatten().collect();
        for g in grants {
            self.store.release(&g, &ReleaseRequest::default()).await?;
        }
        Ok(())
    }
}
