//! The wait line on etcd, as etcd's own Lock API and ZooKeeper's recipe keep
//! it: a key per waiter, in the order etcd created them, each waiter watching
//! only the key of the one just ahead.
//!
//! Waiter `N` of lease `deploy/prod` in store `etcd://…/locks` is the key
//! `locks/deploy/prod~line/N`, holding `s` (it waits for a shared grant) or
//! `x`, and attached to the backend's etcd lease for [`ENTRY_TTL`]: a waiter
//! that crashes stops refreshing it, and etcd deletes its key on etcd's own
//! clock, within 1.5 × [`ENTRY_TTL`].
//!
//! | line | etcd | cost |
//! |---|---|---|
//! | enter | `Txn`: if `create_revision == 0`, put the key on our etcd lease and count the line | 1 Raft write |
//! | stay (every [`REFRESH`](tenure_core::cas::REFRESH)) | `Range` of our own key; our etcd lease is kept alive by `LeaseKeepAlive` | 1 read, no Raft write |
//! | whose turn | `Range` of our own key, then of the key created just before it (limit 1) | 2 small reads |
//! | wait for the turn | `Watch` of the key just ahead | woken only when that waiter leaves |
//! | leave | `DeleteRange` of the key | 1 Raft write |
//!
//! So a hand-over wakes one waiter, not the whole line, and writes nothing but
//! the new holder's grant and its departure from the line. (Over a single
//! record per lease, every departure rewrote the record and woke every
//! waiter: 16 waiters passed the lease on 8× slower than etcd's Lock API.)
//! Staying in line writes nothing: etcd counts any `Txn` that may put as a
//! write (`IsTxnReadonly`), a Raft proposal even when its comparison fails, so
//! a waiter looks at its key first and writes only when the key is gone.
//!
//! A key at a waiter's place that is no waiter's entry (on no etcd lease, or
//! holding neither `s` nor `x`: a careless tenant's, or a bug's) is replaced:
//! otherwise entering would find it there while the turn, which skips such
//! keys, found the waiter missing, and the waiter would ask both again at once,
//! forever.

use std::time::Duration;

use async_trait::async_trait;
use tenure_core::backend::{Line, Waiter, check_key};
use tenure_core::cas::{ENTRY_TTL, MAX_WAITERS, line_full};
use tenure_core::{Error, Result};

use crate::EtcdBackend;
use crate::backend::Resend;
use crate::proto::etcdserverpb::{
    DeleteRangeRequest, RangeRequest, RangeResponse, RequestOp, TxnRequest, range_request, request_op, response_op,
};
use crate::proto::mvccpb::KeyValue;
use crate::rpc;

/// What a waiter's key holds.
const SHARED: &[u8] = b"s";
const EXCLUSIVE: &[u8] = b"x";

/// A waiter in line, as read: its key and the revision it last changed at.
struct InLine {
    waiter: Waiter,
    key: String,
    mod_revision: i64,
}

impl EtcdBackend {
    /// `<root><name>~line/`: the keys of `name`'s waiters.
    fn line_prefix(&self, name: &str) -> Result<String> {
        check_key(name)?;
        Ok(self.etcd_key(&format!("{name}~line/")))
    }

    /// The line, first first: one prefix `Range` sorted by creation.
    async fn read_line(&self, prefix: &str) -> Result<Vec<InLine>> {
        let req = RangeRequest {
            sort_order: range_request::SortOrder::Ascend as i32,
            sort_target: range_request::SortTarget::Create as i32,
            limit: i64::try_from(MAX_WAITERS).unwrap_or(i64::MAX),
            ..rpc::range_prefix(prefix)
        };
        let resp = self.line_range(prefix, req).await?;
        Ok(resp.kvs.into_iter().filter_map(|kv| in_line(prefix, kv)).collect())
    }

    /// One `Range` of the line at `prefix`. An answer larger than the client
    /// takes (keys holding large values, which no waiter writes: an entry is
    /// one byte) makes the line unusable, not the store: its waiters poll.
    async fn line_range(&self, prefix: &str, req: RangeRequest) -> Result<RangeResponse> {
        let op = || format!("reading the wait line {prefix:?}");
        match self.try_range(&op, req).await? {
            Ok(resp) => Ok(resp),
            // A line's reads name no revision, so etcd has no compaction to
            // report: out of range is the client's bound on an answer.
            Err(e) if e.code() == tonic::Code::OutOfRange => Err(Error::corrupt(
                tenure_core::Backend::url(self),
                format!("the wait line {prefix:?}"),
                format!("{} (keys no waiter wrote?)", e.message()),
            )),
            Err(e) => Err(self.fail(op(), e)),
        }
    }
}

/// Whether a key of the line is a waiter's entry. A key on no etcd lease, or
/// holding anything but `s` or `x`, is no waiter's: a waiter's key lapses with
/// its etcd lease, while such a key (a careless tenant's) would stay ahead of
/// every waiter for good, and none would ever try the lease.
fn is_entry(kv: &KeyValue) -> bool {
    kv.lease != 0 && (kv.value == SHARED || kv.value == EXCLUSIVE)
}

/// The waiter a key of the line at `prefix` stands for (see [`is_entry`]).
fn in_line(prefix: &str, kv: KeyValue) -> Option<InLine> {
    if !is_entry(&kv) {
        return None;
    }
    let nonce = std::str::from_utf8(&kv.key).ok()?.strip_prefix(prefix)?.to_string();
    let key = format!("{prefix}{nonce}");
    let shared = kv.value == SHARED;
    Some(InLine { waiter: Waiter { nonce, shared }, key, mod_revision: kv.mod_revision })
}

/// Keys read per `Range` when looking past the waiter just ahead (past keys
/// that are no waiter's, or, for a shared waiter, past shared ones).
const PAGE: i64 = 64;

impl EtcdBackend {
    /// Etcd key `k` (a waiter's own), as read: one `Range` of it.
    async fn own_key(&self, k: &str) -> Result<Option<KeyValue>> {
        let resp = self.range(&|| format!("reading our place in the wait line at {k:?}"), rpc::range(k)).await?;
        Ok(resp.kvs.into_iter().next())
    }

    /// The waiter that keeps the one created at revision `mine` from trying
    /// the lease (see [`may_try`](tenure_core::backend::may_try)): for an
    /// exclusive waiter the waiter just ahead; for a shared one, the waiter
    /// just ahead if any waiter ahead is exclusive. `None`: it may try.
    ///
    /// As etcd's `concurrency.Mutex` finds the key to wait for: a prefix
    /// `Range` sorted by create revision, newest first, of keys created before
    /// `mine`, limit 1; then pages of [`PAGE`] further back while what it read
    /// does not decide. Keys created in one transaction share a create
    /// revision, and a page boundary between two of them skips the second:
    /// only a tenant's own transactions do that, and it costs order, never a
    /// lease. Past [`MAX_WAITERS`] keys without a decision (a line padded with
    /// garbage), it may try: the line only orders the waiters, the lease's own
    /// compare-and-swap keeps them apart.
    async fn blocker(&self, prefix: &str, mine: i64, shared: bool) -> Result<Option<InLine>> {
        let (mut below, mut limit, mut read) = (mine.saturating_sub(1), 1, 0usize);
        let mut nearest: Option<InLine> = None;
        // `max_create_revision` 0 would mean "no bound": stop above it.
        while below > 0 && read < MAX_WAITERS {
            let req = RangeRequest {
                sort_order: range_request::SortOrder::Descend as i32,
                sort_target: range_request::SortTarget::Create as i32,
                limit,
                max_create_revision: below,
                ..rpc::range_prefix(prefix)
            };
            let resp = self.line_range(prefix, req).await?;
            let more = resp.more && !resp.kvs.is_empty();
            read += resp.kvs.len();
            for kv in resp.kvs {
                // etcd returns create revisions up to `below` only: this falls
                // at every key, so every page starts further back.
                below = below.min(kv.create_revision.saturating_sub(1));
                let Some(w) = in_line(prefix, kv) else { continue };
                if !shared || !w.waiter.shared {
                    return Ok(Some(nearest.unwrap_or(w)));
                }
                nearest.get_or_insert(w);
            }
            if !more {
                break;
            }
            limit = PAGE;
        }
        Ok(None)
    }

    /// Deletes etcd key `k` if it is still at `mod_revision`.
    async fn clear(&self, k: &str, mod_revision: i64) -> Result<()> {
        let delete = DeleteRangeRequest { key: k.as_bytes().to_vec(), ..Default::default() };
        let txn = TxnRequest {
            compare: vec![rpc::mod_revision_is(k, mod_revision)],
            success: vec![RequestOp { request: Some(request_op::Request::RequestDeleteRange(delete)) }],
            failure: Vec::new(),
        };
        let op = || format!("replacing a key at our place in the wait line, {k:?}, that is no waiter's entry");
        // Conditional on the revision seen: applying it twice deletes nothing more.
        let attempt = || {
            let (mut kv, txn) = (self.client().kv(), txn.clone());
            async move { kv.txn(txn).await.map(drop) }
        };
        self.timed(&op, Resend::Read, attempt).await?.map_err(|e| self.fail(op(), e))
    }
}

#[async_trait]
impl Line for EtcdBackend {
    async fn enter(&self, name: &str, waiter: &Waiter) -> Result<()> {
        let prefix = self.line_prefix(name)?;
        let k = format!("{prefix}{}", waiter.nonce);
        // Keeps the etcd lease alive for another ENTRY_TTL at least (now and
        // then a LeaseKeepAlive, which etcd's leader answers without a Raft
        // write): a key already in line stays on it.
        let lease = self.lease_for(&k, ENTRY_TTL).await?;
        // Staying is a read: a Txn that may put is a Raft write even when its
        // comparison fails, which cost every waiter one every REFRESH.
        match self.own_key(&k).await? {
            Some(kv) if is_entry(&kv) => return Ok(()),
            // No waiter's entry, but in our place: it would make us a waiter
            // that enters and is never in line (see the module docs).
            Some(kv) => self.clear(&k, kv.mod_revision).await?,
            None => {}
        }
        let value = if waiter.shared { SHARED } else { EXCLUSIVE };
        let count = RangeRequest { count_only: true, ..rpc::range_prefix(&prefix) };
        let txn = TxnRequest {
            compare: vec![rpc::create_revision_is(&k, 0)],
            success: vec![
                rpc::put_op(&k, value.to_vec(), lease),
                RequestOp { request: Some(request_op::Request::RequestRange(count)) },
            ],
            failure: Vec::new(),
        };
        let op = || format!("entering the wait line {prefix:?}");
        let attempt = || {
            let (mut kv, txn) = (self.client().kv(), txn.clone());
            async move { kv.txn(txn).await.map(tonic::Response::into_inner) }
        };
        let resp = self.timed(&op, Resend::Unsent, attempt).await?.map_err(|e| self.fail(op(), e))?;
        if !resp.succeeded {
            // Someone else put the key since we read it; the turn judges it.
            return Ok(());
        }
        let counted = resp.responses.iter().find_map(|r| match &r.response {
            Some(response_op::Response::ResponseRange(r)) => Some(r.count),
            _ => None,
        });
        // More keys than waiters a line holds: full, if they are waiters'
        // entries. Keys that are not (a tenant's, with no etcd lease or
        // another value) take no place: the line is read to tell.
        if counted.is_some_and(|n| usize::try_from(n).unwrap_or(usize::MAX) > MAX_WAITERS) {
            let refused = match self.read_line(&prefix).await {
                Ok(line) if line.len() >= MAX_WAITERS => Some(line_full(tenure_core::Backend::url(self), name)),
                Ok(_) => None,
                Err(e) => Some(e),
            };
            if let Some(e) = refused {
                self.leave(name, &waiter.nonce).await?;
                return Err(e);
            }
        }
        Ok(())
    }

    async fn waiters(&self, name: &str) -> Result<Vec<Waiter>> {
        let prefix = self.line_prefix(name)?;
        Ok(self.read_line(&prefix).await?.into_iter().map(|w| w.waiter).collect())
    }

    async fn turn(&self, name: &str, waiter: &Waiter, timeout: Duration) -> Result<Option<bool>> {
        let prefix = self.line_prefix(name)?;
        let k = format!("{prefix}{}", waiter.nonce);
        let Some(me) = self.own_key(&k).await?.filter(is_entry) else { return Ok(None) };
        let Some(ahead) = self.blocker(&prefix, me.create_revision, waiter.shared).await? else {
            return Ok(Some(true));
        };
        // Only the waiter just ahead: when it leaves, this one looks again.
        self.watch_etcd_key(&ahead.key, Some(ahead.mod_revision), timeout).await?;
        Ok(Some(false))
    }

    async fn leave(&self, name: &str, nonce: &str) -> Result<()> {
        let k = format!("{}{nonce}", self.line_prefix(name)?);
        let op = || format!("leaving the wait line at {k:?}");
        let delete = DeleteRangeRequest { key: k.as_bytes().to_vec(), ..Default::default() };
        // Deleting twice deletes nothing the second time: safe to resend.
        let attempt = || {
            let (mut kv, delete) = (self.client().kv(), delete.clone());
            async move { kv.delete_range(delete).await.map(drop) }
        };
        self.timed(&op, Resend::Read, attempt).await?.map_err(|e| self.fail(op(), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_on_no_etcd_lease_or_not_in_the_entry_format_is_no_waiter() {
        let kv = |nonce: &str, value: &[u8], lease: i64| KeyValue {
            key: format!("p/a~line/{nonce}").into_bytes(),
            value: value.to_vec(),
            lease,
            mod_revision: 7,
            ..Default::default()
        };
        let w = in_line("p/a~line/", kv("n1", b"s", 42)).expect("a waiter");
        assert_eq!((w.waiter.nonce.as_str(), w.waiter.shared, w.key.as_str()), ("n1", true, "p/a~line/n1"));
        assert!(!in_line("p/a~line/", kv("n2", b"x", 42)).expect("a waiter").waiter.shared);
        assert!(in_line("p/a~line/", kv("stuck", b"x", 0)).is_none(), "never lapses: it would block the line");
        assert!(in_line("p/a~line/", kv("odd", b"hello", 42)).is_none());
    }
}
