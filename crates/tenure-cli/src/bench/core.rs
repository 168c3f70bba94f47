//! The `core://` target: the lease server's table in this process.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use async_trait::async_trait;
use tenure::limits::millis;
use tenure::{Holder, Mode, SystemClock};
use tenure_server::leases::{Acquired, Ask};
use tenure_server::{Core, CoreOptions};

use super::Target;

/// The benchmark's `core://` target: the server's lease table in this process,
/// no network and no witness signature: acquire + release through [`Core`].
///
/// The table runs with `tenure serve`'s default `--max-lease` (60 s; the TTL if
/// longer). The restart rule lets a grant's token run ahead of the server clock
/// by at most `max_lease / 2`, so one name sustains at most one grant per µs; one
/// in-process worker cycles its name faster than that (several per µs). With a
/// 2 s max lease it would be refused after about a second; with 60 s it has half
/// a minute, longer than a bench run. The token check itself runs either way.
pub(crate) struct CoreTarget {
    core: Core,
    workers: Vec<(String, Arc<Holder>)>,
    ttl_ms: u64,
}

impl CoreTarget {
    pub(crate) fn new(max_clients: usize, ttl: Duration) -> Self {
        let mut opts = CoreOptions::new(ttl.max(Duration::from_secs(60)));
        opts.quarantine = Duration::ZERO;
        let run = tenure_core::random_nonce();
        Self {
            core: Core::new(SystemClock::shared(), opts),
            workers: (0..max_clients)
                .map(|w| (format!("bench-{}/w{w}", &run[..6]), Arc::new(Holder::current())))
                .collect(),
            ttl_ms: millis(ttl),
        }
    }
}

#[async_trait]
impl Target for CoreTarget {
    fn label(&self) -> String {
        "in-process core (table only, unsigned) acquire+release".into()
    }

    async fn op(&self, w: usize) -> Result<()> {
        let (name, holder) = self.workers.get(w).context("more workers than prepared")?;
        let ask = Ask { name, mode: Mode::Exclusive, ttl_ms: self.ttl_ms, holder, retake: true, meta: None };
        let token = match self.core.acquire(std::slice::from_ref(&ask), false) {
            Ok(Acquired::Granted(g)) => g.first().map_or(0, |g| g.token),
            Ok(Acquired::Busy { .. }) => bail!("bench lease unexpectedly busy"),
            Err(r) => bail!("refused: {r:?}"),
        };
        match self.core.release(name, token, None, &holder.nonce, false, None, None) {
            Ok(true) => Ok(()),
            Ok(false) => bail!("bench lease was not held at release"),
            Err(r) => bail!("refused: {r:?}"),
        }
    }
}
