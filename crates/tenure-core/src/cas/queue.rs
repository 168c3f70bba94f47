//! Waiting in line on a store that can watch keys (a local directory, etcd):
//! first come, first served, written once over [`Backend`]'s read, conditional
//! write and watch.
//!
//! Each lease `name` has a queue record at key `name~queue`: the waiters, in the
//! order their conditional writes landed, each with the wall-clock time until
//! which it is known to be alive. A waiter
//! 1. **enters** by appending itself (a conditional write; a lost race reads and
//!    appends again), so the order is the order of the store's own writes, not
//!    of anybody's clock;
//! 2. **waits for its turn**: it may try the lease only when every waiter ahead
//!    of it is shared and so is it, or nobody is ahead. Until then it watches the
//!    queue record; at its turn it tries the lease and, while it is held, watches
//!    the lease's key, so only the head of the queue wakes when the lease frees;
//! 3. **stays alive** by rewriting its time every [`REFRESH`]; an entry whose
//!    time is more than the store's `max_skew` past is a waiter that crashed,
//!    and whoever writes the queue next drops it (it held nothing: only the order
//!    is at stake, never the lease, which the record's own conditional write
//!    still guards); an entry that claims to live longer than any waiter
//!    writes is not a waiter's, and is dropped too;
//! 4. **leaves** once granted, when its wait runs out, or when the caller gives
//!    up (the future is dropped: the entry is taken out by a task of its own).
//!
//! A waiter that crashes thus holds up those behind it for at most
//! [`ENTRY_TTL`] plus `max_skew`. A newcomer's first attempt does not read the
//! queue (that would cost every uncontended acquisition a read): it takes a
//! lease that is free at that instant, which between a release and the head's
//! grab is a window of one watch wake-up. A store that cannot watch the queue
//! (a directory on NFS: no change notifications) keeps no queue: its waiters poll.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::CasStore;
use crate::backend::{Backend, Put, PutOptions};
use crate::error::{Error, Result};
use crate::store::{AcquireRequest, LeaseStore};
use crate::types::{Attempt, Busy, Mode, Version};

/// How long an entry is known alive after its waiter last wrote it.
pub(super) const ENTRY_TTL: Duration = Duration::from_secs(6);
/// How often a waiter rewrites its entry.
const REFRESH: Duration = Duration::from_secs(2);
/// Most waiters in one queue.
const MAX_WAITERS: usize = 1024;
/// Conditional writes lost in a row before entering or leaving gives up.
const MAX_RACES: usize = 64;

/// A queue record.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Queue {
    waiters: Vec<Entry>,
}

/// One waiter.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    /// The holder's nonce.
    nonce: String,
    /// It waits for a shared grant.
    shared: bool,
    /// Alive until at least this wall time (unix ms, its own clock).
    until_ms: u64,
}

fn queue_key(name: &str) -> String {
    format!("{name}~queue")
}

/// The queue at `key` and its version, as written. A record that does not
/// parse (a careless tenant's bytes) is an empty queue, replaced by the next
/// write.
async fn read_raw(backend: &dyn Backend, key: &str) -> Result<(Queue, Option<Version>)> {
    let Some(stored) = backend.get(key).await? else { return Ok((Queue::default(), None)) };
    let queue = serde_json::from_slice(&stored.value).unwrap_or_else(|e| {
        tracing::debug!(key, error = %e, "unreadable queue record; taken as empty");
        Queue::default()
    });
    Ok((queue, Some(stored.version)))
}

/// The queue at `key` and its version, without the entries of waiters that
/// crashed (more than `skew` past their time) and of entries no waiter wrote
/// (claiming to live longer than any waiter writes: they would hold the line
/// up for good).
async fn read(backend: &dyn Backend, key: &str, now_ms: u64, skew: Duration) -> Result<(Queue, Option<Version>)> {
    let (mut queue, version) = read_raw(backend, key).await?;
    let skew_ms = crate::limits::millis(skew);
    let latest = now_ms.saturating_add(crate::limits::millis(ENTRY_TTL)).saturating_add(skew_ms);
    queue.waiters.retain(|e| e.until_ms.saturating_add(skew_ms) >= now_ms && e.until_ms <= latest);
    queue.waiters.truncate(MAX_WAITERS);
    Ok((queue, version))
}

/// Reads the queue, lets `change` edit it, and writes it back on the version
/// read, again until a write lands. Returns the queue as written.
async fn update(
    backend: &dyn Backend,
    key: &str,
    clock: &dyn crate::clock::Clock,
    skew: Duration,
    change: impl Fn(&mut Queue, u64) -> Result<()>,
) -> Result<Queue> {
    for _ in 0..MAX_RACES {
        let now_ms = clock.wall_ms();
        let (mut queue, version) = read(backend, key, now_ms, skew).await?;
        change(&mut queue, now_ms)?;
        let bytes = Bytes::from(serde_json::to_vec(&queue).map_err(|e| Error::store(backend.url(), key, e))?);
        let opts = version.map_or_else(PutOptions::create, PutOptions::update);
        // On etcd the record goes with its last waiter.
        let opts = opts.with_expires_after(ENTRY_TTL.saturating_mul(2).saturating_add(skew));
        if let Put::Done(_) = backend.put(key, bytes, opts).await? {
            return Ok(queue);
        }
    }
    Err(Error::store(backend.url(), key, format!("lost {MAX_RACES} writes of the wait queue in a row")))
}

/// The nonces of the waiters in `name`'s queue, first first (entries of
/// waiters that crashed included until someone writes the queue): what
/// `tenure status` and tests show.
pub async fn waiting(backend: &dyn Backend, name: &str) -> Result<Vec<String>> {
    let (queue, _) = read_raw(backend, &queue_key(name)).await?;
    Ok(queue.waiters.into_iter().map(|e| e.nonce).collect())
}

/// Whether the waiter `nonce` may try the lease now: nobody is ahead of it, or
/// only shared waiters are and it is one. `None`: it is not in the queue.
fn turn(queue: &Queue, nonce: &str) -> Option<bool> {
    let at = queue.waiters.iter().position(|e| e.nonce == nonce)?;
    let me = &queue.waiters[at];
    Some(at == 0 || (me.shared && queue.waiters[..at].iter().all(|e| e.shared)))
}

/// Takes a waiter out of its queue when dropped, unless it already left.
struct Leave {
    backend: Arc<dyn Backend>,
    clock: Arc<dyn crate::clock::Clock>,
    skew: Duration,
    key: String,
    nonce: String,
    done: bool,
}

impl Leave {
    async fn now(mut self) -> Result<()> {
        self.done = true;
        let nonce = self.nonce.clone();
        update(self.backend.as_ref(), &self.key, self.clock.as_ref(), self.skew, move |q, _| {
            q.waiters.retain(|e| e.nonce != nonce);
            Ok(())
        })
        .await
        .map(drop)
    }
}

impl Drop for Leave {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let (backend, clock, skew) = (self.backend.clone(), self.clock.clone(), self.skew);
        let (key, nonce) = (std::mem::take(&mut self.key), std::mem::take(&mut self.nonce));
        // The caller gave up on the wait: leave in the background, if a runtime
        // is there to run it (else the entry lapses after its TTL).
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let left = update(backend.as_ref(), &key, clock.as_ref(), skew, |q, _| {
                    q.waiters.retain(|e| e.nonce != nonce);
                    Ok(())
                });
                if let Err(e) = left.await {
                    tracing::debug!(error = %e, "leaving a wait queue failed; the entry lapses");
                }
            });
        }
    }
}

impl CasStore {
    /// Busy if others wait in line for the lease ahead of `req`, on a name this
    /// store has queued for before: a holder that releases and asks again at
    /// once (a loop of jobs) goes to the back of the line instead of taking the
    /// lease from the waiter it was just handed to. Other newcomers do not read
    /// the queue (that would cost every acquisition a read).
    pub(super) async fn behind_the_line(&self, req: &AcquireRequest) -> Result<Option<Busy>> {
        let name = req.name.as_str();
        if !self.lined.lock().contains(name) {
            return Ok(None);
        }
        let now_ms = self.clock.wall_ms();
        let (queue, _) = read(self.backend.as_ref(), &queue_key(name), now_ms, self.opts.max_skew).await?;
        if queue.waiters.is_empty() {
            self.lined.lock().remove(name);
            return Ok(None);
        }
        if turn(&queue, &req.holder.nonce) == Some(true) {
            return Ok(None);
        }
        self.inspect(&req.name).await.map(|s| Some(Busy::of(s)))
    }

    /// [`LeaseStore::acquire_queued`] for stores that can watch: `None` when
    /// this one cannot (its waiters poll).
    pub(super) async fn wait_in_line(&self, req: &AcquireRequest, wait: Duration) -> Option<Result<Attempt>> {
        use std::sync::atomic::Ordering;
        let name = req.name.as_str();
        let key = queue_key(name);
        // Whether the store can watch at all, learnt once, before anything is written.
        if !self.watch_checked.swap(true, Ordering::Relaxed)
            && let Err(Error::Unsupported { .. }) = self.backend.watch(&key, None, Duration::ZERO).await
        {
            self.cannot_watch.store(true, Ordering::Relaxed);
        }
        if self.cannot_watch.load(Ordering::Relaxed) {
            return None;
        }
        let skew = self.opts.max_skew;
        let until = self.clock.mono() + wait;
        let me = Entry { nonce: req.holder.nonce.clone(), shared: req.mode == Mode::Shared, until_ms: 0 };
        let enter = |q: &mut Queue, now_ms: u64| {
            let mut entry = me.clone();
            entry.until_ms = now_ms.saturating_add(crate::limits::millis(ENTRY_TTL));
            let full = q.waiters.len() >= MAX_WAITERS;
            match q.waiters.iter_mut().find(|e| e.nonce == entry.nonce) {
                Some(e) => *e = entry,
                None if full => {
                    return Err(Error::store(
                        self.url(),
                        format!("waiting for {name:?}"),
                        format!("its queue has its limit of {MAX_WAITERS} waiters"),
                    ));
                }
                None => q.waiters.push(entry),
            }
            Ok(())
        };
        let backend = self.backend.as_ref();
        self.lined.lock().insert(name.to_string());
        let mut queue = match update(backend, &key, self.clock.as_ref(), skew, enter).await {
            Ok(q) => q,
            Err(e) => return Some(Err(e)),
        };
        let leave = Leave {
            backend: self.backend.clone(),
            clock: self.clock.clone(),
            skew,
            key: key.clone(),
            nonce: me.nonce.clone(),
            done: false,
        };
        let mut refreshed = self.clock.mono();
        let mut version: Option<Version> = None;
        let mut busy: Option<Busy> = None;
        loop {
            let now = self.clock.mono();
            if now >= until {
                break;
            }
            if now.saturating_since(refreshed) >= REFRESH || turn(&queue, &me.nonce).is_none() {
                // Still here (or dropped as crashed after a long pause: back in line).
                queue = match update(backend, &key, self.clock.as_ref(), skew, enter).await {
                    Ok(q) => q,
                    Err(e) => return Some(Err(e)),
                };
                refreshed = self.clock.mono();
            }
            let nap = REFRESH.saturating_sub(self.clock.mono().saturating_since(refreshed));
            let nap = nap.min(until.saturating_since(self.clock.mono()));
            let wake = self.clock.mono() + nap;
            let watched = if turn(&queue, &me.nonce) == Some(true) {
                // Its turn, just read: no second look at the line.
                match self.acquire_now(req).await {
                    Ok(Attempt::Granted(g)) => {
                        if let Err(e) = leave.now().await {
                            tracing::debug!(error = %e, "leaving a wait queue failed; the entry lapses");
                        }
                        return Some(Ok(Attempt::Granted(g)));
                    }
                    Ok(Attempt::Busy(b)) => {
                        // Until the first holder could be taken over, at the latest.
                        let first = b.holders.iter().map(|h| h.expires_in_ms).min();
                        let nap = first.map_or(nap, |ms| nap.min(Duration::from_millis(ms.saturating_add(1))));
                        let seen = b.version.clone();
                        busy = Some(b);
                        let wake = self.clock.mono() + nap;
                        // The wait ends on this store's clock (tests inject one).
                        tokio::select! {
                            w = self.backend.watch(name, seen.as_ref(), nap) => w,
                            () = self.clock.sleep_until(wake) => Ok(false),
                        }
                    }
                    Err(e) => return Some(Err(e)),
                }
            } else {
                tokio::select! {
                    w = self.backend.watch(&key, version.as_ref(), nap) => w,
                    () = self.clock.sleep_until(wake) => Ok(false),
                }
            };
            match watched {
                Ok(_) => {}
                Err(Error::Unsupported { .. }) => {
                    // No change notifications here (NFS): poll, as without a queue.
                    self.cannot_watch.store(true, Ordering::Relaxed);
                    let _ = leave.now().await;
                    return None;
                }
                Err(e) => return Some(Err(e)),
            }
            match read(backend, &key, self.clock.wall_ms(), skew).await {
                Ok((q, v)) => (queue, version) = (q, v),
                Err(e) => return Some(Err(e)),
            }
        }
        if let Err(e) = leave.now().await {
            tracing::debug!(error = %e, "leaving a wait queue failed; the entry lapses");
        }
        Some(match busy {
            Some(b) => Ok(Attempt::Busy(b)),
            None => self.inspect(&req.name).await.map(|s| Attempt::Busy(Busy::of(s))),
        })
    }
}
