//! One wait for a key to change, as an etcd `Watch`, and its orderly end.
//!
//! A watch is a gRPC stream of its own. However the wait ends (a change seen,
//! its timeout, or the caller dropping it), the watcher is cancelled at etcd
//! before the stream is closed: a task of its own sends etcd's
//! `WatchCancelRequest` and reads the stream until etcd confirms (at most
//! [`CLOSING`]). Closing the stream under a live watcher would have etcd
//! send its later events to a stream the client has reset; HTTP/2's guards
//! count those (`too_many_internal_resets`, and unread small frames,
//! `too_many_data_frames`) and close the connection, under every lease of
//! the process, after about a thousand.

use std::time::Duration;

use futures::StreamExt;
use futures::channel::{mpsc, oneshot};
use tenure_core::{ClockExt, Error, Result};
use tonic::Streaming;

use crate::EtcdBackend;
use crate::backend::Resend;
use crate::proto::etcdserverpb::{WatchCancelRequest, WatchCreateRequest, WatchRequest, WatchResponse, watch_request};

/// Longest an ended watch waits for etcd to confirm its cancellation.
const CLOSING: Duration = Duration::from_secs(5);

/// A watch stream, cancelled at etcd when dropped.
struct Watch {
    requests: mpsc::UnboundedSender<WatchRequest>,
    responses: Option<Streaming<WatchResponse>>,
    /// etcd's id for the watcher, once it said it created it.
    id: Option<i64>,
}

fn cancel(id: i64) -> WatchRequest {
    WatchRequest {
        request_union: Some(watch_request::RequestUnion::CancelRequest(WatchCancelRequest { watch_id: id })),
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let Some(mut responses) = self.responses.take() else { return };
        let (requests, mut id) = (self.requests.clone(), self.id);
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        rt.spawn(async move {
            let close = async {
                if let Some(id) = id {
                    let _ = requests.unbounded_send(cancel(id));
                }
                // Read what etcd still sends (so nothing lies unread) until it
                // confirms; learn the id first if the wait ended before that.
                while let Some(Ok(resp)) = responses.next().await {
                    if resp.canceled {
                        return;
                    }
                    if id.is_none() && resp.created {
                        id = Some(resp.watch_id);
                        let _ = requests.unbounded_send(cancel(resp.watch_id));
                    }
                }
            };
            let _ = tokio::time::timeout(CLOSING, close).await;
        });
    }
}

impl EtcdBackend {
    /// Waits until etcd key `k` moves past `seen` (its `mod_revision`; `None`:
    /// absent), or for `timeout`: whether it saw a change.
    pub(crate) async fn watch_etcd_key(&self, k: &str, seen: Option<i64>, timeout: Duration) -> Result<bool> {
        let give_up = self.clock().sleep(timeout);
        let changed = async {
            // The watch starts at the store's next revision (start_revision 0):
            // etcd serves it at once, whereas one that starts in the past is
            // served from a catch-up loop that runs every 100 ms, and a waiter
            // would sleep through that. A change before the watch began is
            // caught by the read that follows its creation.
            let op = || format!("watching key {k:?}");
            let create = WatchCreateRequest { key: k.as_bytes().to_vec(), start_revision: 0, ..Default::default() };
            let request = WatchRequest { request_union: Some(watch_request::RequestUnion::CreateRequest(create)) };
            // The request stream stays open for as long as the watch: etcd
            // would end a watch whose requests have ended.
            let mut sent = None;
            let attempt = || {
                let (requests, asked) = mpsc::unbounded();
                let _ = requests.unbounded_send(request.clone());
                sent = Some(requests.clone());
                // The call runs in a task of its own: a wait dropped before
                // etcd answered leaves the stream to it, to close in order.
                let (answer, answered) = oneshot::channel();
                let mut watches = self.client().watch();
                tokio::spawn(async move {
                    let call = watches.watch(asked).await.map(tonic::Response::into_inner);
                    if let Err(Ok(orphan)) = answer.send(call) {
                        drop(Watch { requests, responses: Some(orphan), id: None });
                    }
                });
                async move { answered.await.unwrap_or_else(|_| Err(tonic::Status::cancelled("the watch call ended"))) }
            };
            let responses = self.timed(&op, Resend::Read, attempt).await?.map_err(|e| self.fail(op(), e))?;
            let lost = || Error::store(tenure_core::Backend::url(self), op(), "the watch stream was lost");
            let requests = sent.ok_or_else(lost)?;
            let mut watch = Watch { requests, responses: Some(responses), id: None };
            let mut checked = false;
            loop {
                let message = watch.responses.as_mut().ok_or_else(lost)?.message().await;
                if let Ok(Some(resp)) = &message
                    && resp.created
                {
                    watch.id = Some(resp.watch_id);
                }
                match message {
                    Ok(Some(resp)) if !resp.events.is_empty() => return Ok(true),
                    Ok(Some(resp)) if resp.canceled => {
                        watch.responses = None;
                        let why = format!("etcd cancelled the watch: {}", resp.cancel_reason);
                        return Err(Error::store(tenure_core::Backend::url(self), op(), why));
                    }
                    // "created" (then progress notifications): from here on every
                    // change comes as an event; one before it shows in a read.
                    Ok(Some(_)) if !checked => {
                        checked = true;
                        if self.unchanged_until(k, seen).await?.is_none() {
                            return Ok(true);
                        }
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        watch.responses = None;
                        let url = tenure_core::Backend::url(self);
                        return Err(Error::store(url, op(), "etcd closed the watch stream"));
                    }
                    Err(e) => {
                        watch.responses = None;
                        return Err(self.fail(op(), e));
                    }
                }
            }
        };
        tokio::select! {
            out = changed => out,
            () = give_up => Ok(false),
        }
    }
}
