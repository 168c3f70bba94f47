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
//! | enter (and stay) | `Txn`: if `create_revision == 0`, put the key on our etcd lease and count the line | 1 Raft write the first time, then none (a `LeaseKeepAlive` now and then) |
//! | whose turn | prefix `Range` sorted by `create_revision` | 1 round trip |
//! | wait for the turn | `Watch` of the key just ahead | woken only when that waiter leaves |
//! | leave | `DeleteRange` of the key | 1 Raft write |
//!
//! So a hand-over wakes one waiter, not the whole line, and writes nothing but
//! the new holder's grant and its departure from the line. (Over a single
//! record per lease, every departure rewrote the record and woke every
//! waiter: 16 waiters passed the lease on 8× slower than etcd's Lock API.)

use std::time::Duration;

use async_trait::async_trait;
use tenure_core::Result;
use tenure_core::backend::{Line, Waiter, check_key, may_try};
use tenure_core::cas::{ENTRY_TTL, MAX_WAITERS, line_full};

use crate::EtcdBackend;
use crate::backend::Resend;
use crate::proto::etcdserverpb::{
    DeleteRangeRequest, RangeRequest, RequestOp, TxnRequest, range_request, request_op, response_op,
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
        let resp = self.range(&|| format!("reading the wait line {prefix:?}"), req).await?;
        Ok(resp.kvs.into_iter().filter_map(|kv| in_line(prefix, kv)).collect())
    }
}

/// The waiter a key of the line at `prefix` stands for. A key on no etcd
/// lease, or holding anything but `s` or `x`, is no waiter's: a waiter's key
/// lapses with its etcd lease, while such a key (a careless tenant's) would
/// stay ahead of every waiter for good, and none would ever try the lease.
fn in_line(prefix: &str, kv: KeyValue) -> Option<InLine> {
    if kv.lease == 0 || (kv.value != SHARED && kv.value != EXCLUSIVE) {
        return None;
    }
    let nonce = std::str::from_utf8(&kv.key).ok()?.strip_prefix(prefix)?.to_string();
    let key = format!("{prefix}{nonce}");
    let shared = kv.value == SHARED;
    Some(InLine { waiter: Waiter { nonce, shared }, key, mod_revision: kv.mod_revision })
}

#[async_trait]
impl Line for EtcdBackend {
    async fn enter(&self, name: &str, waiter: &Waiter) -> Result<()> {
        let prefix = self.line_prefix(name)?;
        let k = format!("{prefix}{}", waiter.nonce);
        // Keeps the etcd lease alive for another ENTRY_TTL at least; a key
        // already in line stays on it.
        let lease = self.lease_for(&k, ENTRY_TTL).await?;
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
            return Ok(());
        }
        let counted = resp.responses.iter().find_map(|r| match &r.response {
            Some(response_op::Response::ResponseRange(r)) => Some(r.count),
            _ => None,
        });
        if counted.is_some_and(|n| usize::try_from(n).unwrap_or(usize::MAX) > MAX_WAITERS) {
            self.leave(name, &waiter.nonce).await?;
            return Err(line_full(tenure_core::Backend::url(self), name));
        }
        Ok(())
    }

    async fn waiters(&self, name: &str) -> Result<Vec<Waiter>> {
        let prefix = self.line_prefix(name)?;
        Ok(self.read_line(&prefix).await?.into_iter().map(|w| w.waiter).collect())
    }

    async fn turn(&self, name: &str, waiter: &Waiter, timeout: Duration) -> Result<Option<bool>> {
        let prefix = self.line_prefix(name)?;
        let line = self.read_line(&prefix).await?;
        let Some(at) = line.iter().position(|w| w.waiter.nonce == waiter.nonce) else { return Ok(None) };
        let waiters: Vec<Waiter> = line.iter().map(|w| w.waiter.clone()).collect();
        if may_try(&waiters, waiter) == Some(true) {
            return Ok(Some(true));
        }
        // Only the waiter just ahead: when it leaves, this one looks again.
        let ahead = &line[at - 1];
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
