//! Taking the lease for `tenure lock`: bounded steps (each with the error message
//! that names it) and, when the take outlives its deadline, giving back a grant
//! that came late.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use tenure::{Client, Holder, Lease, LeaseName, LeaseOptions, LeaseStore};
use tenure_core::human_duration;

use crate::exit::{self, Fail};
use crate::waiting::WaitLine;

use super::hold::stop_by;
use super::{LockArgs, SLACK, say};

/// Opens the store and acquires the lease, waiting (with the live line on a
/// terminal) unless `--no-wait`. Nothing here waits longer than `--timeout`
/// (plus [`SLACK`] while the client waits: it keeps the timeout itself), nor
/// than the store's deadline for one operation before the wait begins.
pub(super) async fn take(
    args: &LockArgs,
    name: &LeaseName,
    opts: &LeaseOptions,
    op_timeout: Duration,
    grace: Duration,
) -> Result<(Arc<dyn LeaseStore>, Lease)> {
    let started = tokio::time::Instant::now();
    let budget = if args.no_wait { None } else { args.timeout };
    let left = || budget.map(|t| t.saturating_sub(started.elapsed()));
    let step = Step { url: &args.store.url, name: name.as_str(), op_timeout, budget };

    // Under `--timeout`, a store that fails to open for a passing reason (not
    // answering, refusing connections while it restarts) is tried again until
    // the timeout; without one, it is misconfigured and said at once (69).
    let mut pause = Duration::from_millis(50);
    let store = loop {
        let opened = step.bounded("opening the store", left(), args.store.open()).await;
        match opened {
            Ok(store) => break store,
            Err(e) if step.retries(&e, left(), pause) => {
                tracing::info!(error = %format!("{e:#}"), "the store could not be opened; retrying until --timeout");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(args.poll);
            }
            Err(e) => return Err(e.context(format!("cannot take lease {:?}", name.as_str()))),
        }
    };
    let mut holder = Holder::current();
    if let Some(label) = &args.label {
        holder = holder.with_label(label);
    }
    if let Some(id) = &args.holder_id {
        holder = holder.with_nonce(id);
    }
    let client = Client::with_holder(store.clone(), holder);

    // The first attempt does not wait: a store that fails on first contact is
    // misconfigured (exit 69) — unless `--timeout` bounds the wait, which then
    // covers first contact too (a store restarting, a connection reset).
    let first = client.try_acquire(name.as_str(), opts);
    let mut lease = match step.bounded("the first attempt", left(), async { Ok(first.await?) }).await {
        Ok(lease) => lease,
        Err(e) => match e.downcast::<tenure::Error>() {
            Ok(tenure::Error::Busy { .. }) if !args.no_wait => step.wait(&client, opts, left()).await?,
            Ok(e) if e.is_transient() && budget.is_some() => {
                tracing::info!(error = %e, "the store failed on first contact; retrying until --timeout");
                step.wait(&client, opts, left()).await?
            }
            Ok(e @ tenure::Error::Store { .. }) => {
                return Err(anyhow::Error::new(e).context(format!("cannot take lease {:?}", name.as_str())));
            }
            Ok(e) => return Err(e.into()),
            // The store did not answer the first attempt within its own deadline.
            Err(e) if step.retries(&e, left(), Duration::ZERO) => step.wait(&client, opts, left()).await?,
            Err(e) => return Err(e),
        },
    };
    // A grant the command cannot start under — its stop-by is less than the
    // kill grace away, so the guard would stop the command at once, or has
    // passed (a slow answer, `tenure` paused after it) — is released unused and
    // waited for again. The command never runs inside a lease it cannot vouch for.
    let mut said_late = false;
    loop {
        let clock = store.clock().clone();
        let left_in_grant = stop_by(&lease.health()).map(|at| at.saturating_since(clock.mono()));
        if left_in_grant.is_some_and(|t| t > grace) {
            return Ok((store, lease));
        }
        let token = lease.grant().token;
        let released = tokio::time::timeout(op_timeout + SLACK, lease.release()).await;
        tracing::debug!(token, ?released, "released a grant that came too late to start the command under");
        let late = format!(
            "the grant (token {token}) left {} before its stop-by, less than the {} kill grace: \
             the store answered too slowly for a TTL of {} (it was released unused; a longer --ttl allows slower answers)",
            human_duration(left_in_grant.unwrap_or_default()),
            human_duration(grace),
            human_duration(args.ttl),
        );
        if args.no_wait || left().is_some_and(|l| l.is_zero()) {
            let (name, url) = (name.as_str(), &args.store.url);
            return Err(Fail::new(
                exit::TIMEOUT,
                format!("cannot run the command under lease {name:?} in {url}: {late}"),
            )
            .into());
        }
        if !said_late {
            say(&late);
            said_late = true;
        }
        // Not at once: the next grant would come as slowly.
        tokio::time::sleep(left().map_or(args.poll, |l| l.min(args.poll))).await;
        lease = step.wait(&client, opts, left()).await?;
    }
}

/// One bounded step of taking the lease, for its error message.
struct Step<'a> {
    url: &'a str,
    name: &'a str,
    op_timeout: Duration,
    /// `--timeout`, if given.
    budget: Option<Duration>,
}

impl Step<'_> {
    /// Whether a step that failed with `e` is tried again: only under
    /// `--timeout`, with more than `pause` of it left, and for a passing
    /// failure (a store error that is not permanent, or no answer within the
    /// store's own deadline), not for a bad URL or option.
    fn retries(&self, e: &anyhow::Error, left: Option<Duration>, pause: Duration) -> bool {
        let passing = match e.chain().find_map(|c| c.downcast_ref::<tenure::Error>()) {
            Some(e) => matches!(e, tenure::Error::Store { .. }) && e.is_transient(),
            None => exit::code_for(e) == exit::STORE,
        };
        self.budget.is_some() && left.is_some_and(|l| l > pause) && passing
    }

    /// Waits for the lease for what is `left` of `--timeout` (as long as it
    /// takes without one), with the live line on a terminal. A wait that runs
    /// out while the store keeps failing ends as a timeout (75) that says how
    /// it failed: `--timeout` bounds retries of every passing store error.
    async fn wait(&self, client: &Client, opts: &LeaseOptions, left: Option<Duration>) -> Result<Lease> {
        let mut opts = opts.clone();
        // At least a moment, so that running out is reported as a timeout, not as busy.
        opts.timeout = left.map(|l| l.max(Duration::from_millis(1)));
        // Erased when dropped, also when a signal ends the wait.
        let mut line = WaitLine::new(self.url, self.name);
        let waiting = client.acquire_watching(self.name, &opts, |busy| line.update(busy));
        let lease = match opts.timeout {
            None => waiting.await?,
            Some(limit) => match tokio::time::timeout(limit + SLACK, waiting).await {
                Ok(Ok(lease)) => lease,
                Ok(Err(e @ tenure::Error::Store { .. })) if e.is_transient() => {
                    let (name, url) = (self.name, self.url);
                    let budget = human_duration(self.budget.unwrap_or(limit));
                    return Err(Fail::new(
                        exit::TIMEOUT,
                        format!("timed out waiting for lease {name:?} in {url} after the {budget} --timeout: {e}"),
                    )
                    .into());
                }
                Ok(Err(e)) => return Err(e.into()),
                Err(_) => return Err(self.no_answer("waiting", limit, true).into()),
            },
        };
        line.acquired();
        Ok(lease)
    }

    /// Runs `fut` for at most what is `left` of `--timeout`, or the store's
    /// operation deadline if that is shorter (plus [`SLACK`]: the store enforces
    /// its deadline itself, and says more about what did not answer). A step
    /// under way when `--timeout` runs out is let finish for
    /// [`tenure::FINISH_GRACE`] more: it may be writing a grant, which nobody
    /// would hold if it were cut short (and `--timeout 0` takes a free lease).
    async fn bounded<T>(&self, what: &str, left: Option<Duration>, fut: impl Future<Output = Result<T>>) -> Result<T> {
        let (limit, user) = match left {
            Some(left) if left < self.op_timeout => (left, true),
            _ => (self.op_timeout, false),
        };
        let wait = if user { limit + tenure::FINISH_GRACE } else { limit + SLACK };
        match tokio::time::timeout(wait, fut).await {
            Ok(out) => out,
            Err(_) => Err(self.no_answer(what, limit, user).into()),
        }
    }

    /// A store that did not answer: exit 75 if `--timeout` ran out (`user`), 69
    /// if the store's own deadline did.
    fn no_answer(&self, what: &str, limit: Duration, user: bool) -> Fail {
        let (name, url) = (self.name, self.url);
        match self.budget {
            Some(budget) if user => {
                let within = format!("the store did not answer within the {} --timeout", human_duration(budget));
                Fail::new(exit::TIMEOUT, format!("timed out waiting for lease {name:?} in {url}: {within} ({what})"))
            }
            _ => {
                let within = format!("the store did not answer within {}", human_duration(limit));
                Fail::new(exit::STORE, format!("cannot take lease {name:?} in {url}: {within} ({what})"))
            }
        }
    }
}
