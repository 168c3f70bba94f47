//! A bounded set of connections where a newcomer evicts the oldest member.
//!
//! The lease server keeps connections that have not said hello yet in one of
//! these (`--max-pre-hello`), and the HTTP port keeps all of its connections in
//! another (`--http-max-connections`). When the set is full, the **oldest**
//! member is told to leave, not the newcomer: a real client finishes its hello
//! (or its HTTP request) within a round trip of connecting, so it is nearly
//! always among the newest, while a slow-loris connection only grows older.
//! Refusing newcomers instead would let an attacker keep the set full forever
//! with a handful of connections that each drip a byte now and then; evicting
//! the oldest makes it open connections faster than real clients finish their
//! round trip, and even then each of its connections lives only until the next
//! newcomer arrives.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use tokio::sync::Notify;

/// A bounded set of connections, oldest evicted first.
#[derive(Debug)]
pub(crate) struct Admission {
    cap: usize,
    members: Mutex<Members>,
    evicted: AtomicU64,
}

#[derive(Debug, Default)]
struct Members {
    next: u64,
    /// Members by age (admission order), each with the signal that evicts it.
    by_age: BTreeMap<u64, Arc<Notify>>,
}

/// A member's place in an [`Admission`]: it leaves the set when dropped.
#[derive(Debug)]
pub(crate) struct Ticket {
    id: u64,
    admission: Arc<Admission>,
    evict: Arc<Notify>,
}

impl Admission {
    /// A set of at most `cap` members (at least one).
    pub(crate) fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self { cap: cap.max(1), members: Mutex::new(Members::default()), evicted: AtomicU64::new(0) })
    }

    /// Admits a newcomer. If the set is full, its oldest member is told to leave
    /// ([`Ticket::evicted`] completes) and stops counting at once.
    pub(crate) fn admit(self: &Arc<Self>) -> Ticket {
        let evict = Arc::new(Notify::new());
        let mut m = self.members.lock();
        while m.by_age.len() >= self.cap {
            let Some((_, oldest)) = m.by_age.pop_first() else { break };
            // Stored if the member is not waiting right now: it sees it next time.
            oldest.notify_one();
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
        let id = m.next;
        m.next += 1;
        m.by_age.insert(id, evict.clone());
        Ticket { id, admission: self.clone(), evict }
    }

    /// Members now.
    pub(crate) fn len(&self) -> usize {
        self.members.lock().by_age.len()
    }

    /// Members evicted so far.
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }
}

impl Ticket {
    /// Completes once this member has been evicted by a newcomer.
    pub(crate) async fn evicted(&self) {
        self.evict.notified().await;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.admission.members.lock().by_age.remove(&self.id);
    }
}

/// Completes when `ticket` (if any) is evicted; never without one.
pub(crate) async fn evicted(ticket: Option<&Ticket>) {
    match ticket {
        Some(t) => t.evicted().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_full_set_evicts_its_oldest_member_and_counts_the_newcomer() {
        let set = Admission::new(2);
        let (a, b) = (set.admit(), set.admit());
        assert_eq!(set.len(), 2);
        let c = set.admit();
        assert_eq!((set.len(), set.evicted()), (2, 1));
        async fn signalled(t: &Ticket) -> bool {
            tokio::time::timeout(Duration::from_millis(50), t.evicted()).await.is_ok()
        }
        assert!(signalled(&a).await, "the oldest is told to leave");
        assert!(!signalled(&b).await && !signalled(&c).await, "the others stay");
        drop(b);
        assert_eq!(set.len(), 1, "a member that leaves frees its place");
        drop(a);
        assert_eq!(set.len(), 1, "an evicted member no longer counted");
    }
}
