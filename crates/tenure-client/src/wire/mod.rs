//! The wire protocol, version [`PROTOCOL_VERSION`] (peers as old as
//! [`MIN_PROTOCOL_VERSION`] are served): the message types, their framing,
//! and the ranges every number in them must fall in.
//!
//! See the crate documentation for the protocol as a whole. Every frame is
//!
//! ```text
//! request  = len:u32 id:u32 body                    (len = 4 + body length)
//! response = len:u32 id:u32 server_time_us:u64 body (len = 12 + body length)
//! ```
//!
//! little-endian, where `body` is the [postcard] encoding of a [`Request`] or a
//! [`Response`] (postcard's wire format is stable since 1.0: varint integers,
//! length-prefixed strings and sequences, enums as a varint variant index, in
//! declaration order, so **variants and fields are only ever appended**). A
//! response carries its request's `id`; responses may come in any order.
//!
//! Version 5 (this one) added server identities: [`Request::Identify`], which a
//! server answers with its identity ([`Response::Identity`]), and
//! [`Request::Servers`], with which a client of several servers tells one of
//! them the identities of them all; the server then refuses an acquisition of
//! a name that the list does not place on it. A client of several servers
//! needs every one of them at version 5 (names are placed by identity); one of
//! a single server speaks to older ones as before.
//! Version 4 added [`Request::Waiters`].
//! Version 3 added [`Request::Wait`]: waiting in the server's queue
//! for a lease, the grant pushed when it frees. Nothing else changed, so a
//! version 3 server speaks version 2 to a version 2 client (its hello answers
//! with the lower version), and a version 3 client polls a version 2 server.
//! Version 2 added the cursor of `List` and the `more` flag of its answer, the
//! predecessor's and each holder's `acquired_ms`, and `AcquireReply::Exhausted`;
//! a version 1 peer is refused at the hello.
//!
//! # Numbers from outside
//!
//! Every number a frame carries is checked where it is decoded, against
//! [`tenure_core::limits`] and the server's own limits: [`check_request`] on the
//! server (an `Error { code: Invalid }` naming the field), and the `check_*`
//! functions on the client (a store error naming the field): a hostile or buggy
//! peer gets a clear refusal, never a wrapped deadline or a panic.
//!
//! [postcard]: https://docs.rs/postcard

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tenure_core::limits::{MAX_REASON_BYTES, MAX_TIME_MS, MAX_TOKEN, MAX_TTL, millis};
use tenure_core::{BreakNote, Holder, MAX_NAME_LEN, Mode};

mod check;
mod frame;
mod owned;

pub use check::check_request;
pub(crate) use check::{check_grant, check_max_lease, check_predecessor, check_quarantine, check_state, check_view};
pub use frame::{
    decode, encode_request, encode_response, encode_response_as, frame_len, split_request, split_response,
};
pub use owned::{HolderOwned, HolderViewWire, PredecessorWire, StateWire};

/// The protocol version this build speaks (5: server identities).
pub const PROTOCOL_VERSION: u16 = 5;
/// The first version with server identities ([`Request::Identify`],
/// [`Request::Servers`]).
pub const IDENTITY_VERSION: u16 = 5;
/// Longest server identity, in bytes.
pub const MAX_SERVER_ID: usize = 64;
/// Most servers in one [`Request::Servers`] list.
pub const MAX_SERVERS: usize = 256;

/// `Err` saying why `id` is no server identity: 1 to [`MAX_SERVER_ID`] bytes of
/// ASCII letters, digits, `.`, `_` and `-` (it shows in errors and logs as is).
pub fn check_server_id(id: &str) -> Result<(), String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if id.is_empty() || id.len() > MAX_SERVER_ID || !id.chars().all(ok) {
        return Err(format!(
            "{:?} is not a server identity (1 to {MAX_SERVER_ID} ASCII letters, digits, '.', '_' or '-')",
            crate::clipped(id)
        ));
    }
    Ok(())
}
/// The oldest version it still speaks: a version 2 peer has no [`Request::Wait`].
pub const MIN_PROTOCOL_VERSION: u16 = 2;
/// Longest wait one [`Request::Wait`] may ask for (a day); a client that waits
/// longer asks again.
pub const MAX_WAIT_MS: u64 = 24 * 3600 * 1000;
/// Most waits one connection may have queued at once: far more than one
/// process waits for, so that a client's waiters never fall back to polling
/// (a hostile client is bounded by the server's table, where every waiter
/// takes a place like a lease).
pub const MAX_WAITS_PER_CONNECTION: usize = 1024;
/// The first four bytes of the hello's payload.
pub const MAGIC: [u8; 4] = *b"TNRW";
/// Largest request frame a server accepts (length field included).
pub const MAX_REQUEST: usize = 256 * 1024;
/// Largest response frame a client accepts.
pub const MAX_RESPONSE: usize = 8 * 1024 * 1024;
/// Most leases in one batch request.
pub const MAX_BATCH: usize = 512;
/// Longest holder string (host, user, version, label, nonce), in bytes.
pub const MAX_HOLDER_FIELD: usize = 256;
/// Largest frame a connection may send before its hello is answered: a hello
/// is a few dozen bytes plus the shared secret.
pub const MAX_HELLO: usize = 4 * 1024;
/// Shortest lease duration a server grants, in ms (as `tenure_core::LeaseOptions`).
pub const MIN_TTL_MS: u64 = 10;
/// Most live shared holders of one lease. Every answer that lists a lease's
/// holders (inspect, busy) then stays far below the largest frame (about 1.4 KB
/// a holder at most), and one lease cannot take the server's memory. A new
/// grant ends the expired ones, so a lease lists at most one more (an expired
/// exclusive holder).
pub const MAX_HOLDERS: usize = 1024;
/// Most names in one `List` answer.
pub const MAX_LIST_PAGE: usize = 10_000;
/// Most bytes of names in one `List` answer: with [`MAX_LIST_PAGE`] names of at
/// most 255 bytes, a page stays far below [`MAX_RESPONSE`].
pub const MAX_LIST_BYTES: usize = 1024 * 1024;

/// Decodes a sequence a peer claims has at most `MAX` elements, keeping at
/// most `MAX` + 1 of them: one more than any working peer sends, so that the
/// caller can tell the sequence was too long (a page of names, or a batch's
/// answers, is then refused; a list of holders shows its first `MAX` + 1). An element
/// can cost far more decoded than on the wire (an empty name: one byte sent,
/// 24 held; an `Outcome::Lost("")`: 2 and about 300), so one 8 MiB frame of
/// them would otherwise take hundreds of MiB to GiBs before anyone counted
/// them. The rest are decoded and dropped one at a time (postcard has no way
/// to skip them), so that the answer's other fields still decode.
pub(crate) fn at_most<'de, D, T, const MAX: usize>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Seq<T, const MAX: usize>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>, const MAX: usize> serde::de::Visitor<'de> for Seq<T, MAX> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "a sequence of at most {MAX}")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            // Bounded here too: the hint is the sender's claim.
            let mut kept = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(MAX + 1));
            while let Some(x) = seq.next_element::<T>()? {
                if kept.len() <= MAX {
                    kept.push(x);
                }
            }
            Ok(kept)
        }
    }
    d.deserialize_seq(Seq::<T, MAX>(std::marker::PhantomData))
}

/// Most bytes kept of a peer's words for humans (an error's message, why a
/// grant was lost): they end up in errors, copied to every caller waiting, and
/// a hostile server's may be megabytes.
pub const MAX_QUOTED: usize = 1000;

/// Decodes a peer's words for humans keeping at most [`MAX_QUOTED`] bytes of
/// them (see [`crate::clipped`]): only that much is ever copied out of the frame.
pub(crate) fn quoted<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct Text;
    impl serde::de::Visitor<'_> for Text {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            Ok(crate::clipped(v))
        }
    }
    d.deserialize_str(Text)
}

/// A request, borrowed from the frame it was decoded from.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request<'a> {
    /// Must be the first frame of a connection.
    Hello {
        /// [`MAGIC`].
        magic: [u8; 4],
        /// The client's protocol version.
        version: u16,
        /// The shared secret, if the server wants one.
        #[serde(borrow)]
        auth: Option<&'a [u8]>,
    },
    /// Acquire all of `asks` or none; `tentative` asks for reservations only.
    Acquire {
        /// Reservations (two-phase acquisition) instead of grants.
        tentative: bool,
        /// What to acquire.
        #[serde(borrow, deserialize_with = "at_most::<_, _, MAX_BATCH>")]
        asks: Vec<AskWire<'a>>,
    },
    /// Upgrade reservations to grants, one outcome each.
    Upgrade(#[serde(borrow, deserialize_with = "at_most::<_, _, MAX_BATCH>")] Vec<RefWire<'a>>),
    /// Renew grants (or reservations), one outcome each.
    Renew(#[serde(borrow, deserialize_with = "at_most::<_, _, MAX_BATCH>")] Vec<RenewWire<'a>>),
    /// Release grants (or reservations), one outcome each.
    Release(#[serde(borrow, deserialize_with = "at_most::<_, _, MAX_BATCH>")] Vec<ReleaseWire<'a>>),
    /// A lease's state.
    Inspect(&'a str),
    /// Names under a prefix, in order, one page at a time.
    List {
        /// Prefix.
        prefix: &'a str,
        /// Most names to return (the server returns at most [`MAX_LIST_PAGE`],
        /// and fewer if their bytes would pass [`MAX_LIST_BYTES`]).
        limit: u32,
        /// Only names after this one: the last name of the previous page.
        after: Option<&'a str>,
    },
    /// Break grants if the record is still at `version`.
    Break {
        /// Lease name.
        name: &'a str,
        /// Version seen by the administrator.
        version: u64,
        /// Only this grant.
        only_token: Option<u64>,
        /// Who breaks it and why (version 2).
        #[serde(borrow)]
        note: Option<BreakNoteWire<'a>>,
    },
    /// Liveness and clock check.
    Ping,
    /// Acquire one lease, waiting for it in the server's queue for up to
    /// `wait_ms` (version 3). Answered by [`Response::Acquired`] once granted,
    /// or busy when the wait ends; the connection's other requests are
    /// answered meanwhile.
    Wait {
        /// What to acquire.
        #[serde(borrow)]
        ask: AskWire<'a>,
        /// Longest wait, ms (at most [`MAX_WAIT_MS`]).
        wait_ms: u64,
    },
    /// Withdraws the queued [`Request::Wait`] sent with request id `id` on
    /// this connection: it leaves its queue, and a grant it was just handed is
    /// given back (version 3). Answered by [`Response::Done`] (the wait itself
    /// then gets no answer), or [`Response::Error`] with
    /// [`ErrorCode::Nothing`] if it had ended already.
    Unwait {
        /// The wait's request id.
        id: u32,
    },
    /// How many wait in the queue of a lease (version 4). Answered by
    /// [`Response::Waiters`].
    Waiters(&'a str),
    /// The server's identity (version 5). Answered by [`Response::Identity`].
    Identify,
    /// The identities of every server of the client's list, this one's among
    /// them (version 5): from now on, the server refuses on this connection an
    /// acquisition or a wait for a name that the list places on another server
    /// (see `client::place`). Answered by [`Response::Done`].
    Servers(#[serde(borrow, deserialize_with = "at_most::<_, _, MAX_SERVERS>")] Vec<&'a str>),
}

/// [`BreakNote`] on the wire, borrowed (version 2).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct BreakNoteWire<'a> {
    /// Who broke it.
    #[serde(borrow)]
    pub by: HolderWire<'a>,
    /// Why.
    #[serde(borrow)]
    pub reason: Option<&'a str>,
}

impl<'a> BreakNoteWire<'a> {
    /// Borrows a note.
    pub fn of(n: &'a BreakNote) -> Self {
        Self { by: HolderWire::of(&n.by), reason: n.reason.as_deref() }
    }

    /// The note it carries, refusing oversized fields.
    pub fn to_note(self) -> Result<BreakNote, String> {
        let reason = self.reason.map(str::to_string);
        if let Some(r) = reason.as_ref().filter(|r| r.len() > MAX_REASON_BYTES) {
            return Err(format!("a break reason is {} bytes long (at most {MAX_REASON_BYTES})", r.len()));
        }
        Ok(BreakNote { by: Arc::new(self.by.to_holder()?), reason })
    }
}

/// A holder identity on the wire.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct HolderWire<'a> {
    /// Correlation id.
    pub nonce: &'a str,
    /// Process id.
    pub pid: u32,
    /// Host name.
    pub host: &'a str,
    /// User name.
    pub user: &'a str,
    /// tenure version.
    pub version: &'a str,
    /// Label.
    pub label: Option<&'a str>,
}

impl<'a> HolderWire<'a> {
    /// Borrows a holder.
    pub fn of(h: &'a Holder) -> Self {
        Self {
            nonce: &h.nonce,
            pid: h.pid,
            host: &h.host,
            user: &h.user,
            version: &h.version,
            label: h.label.as_deref(),
        }
    }

    /// An owned holder, refusing oversized fields.
    pub fn to_holder(self) -> Result<Holder, String> {
        for (what, v) in [
            ("nonce", self.nonce),
            ("host", self.host),
            ("user", self.user),
            ("version", self.version),
            ("label", self.label.unwrap_or("")),
        ] {
            if v.len() > MAX_HOLDER_FIELD {
                return Err(format!("holder {what} is {} bytes long (at most {MAX_HOLDER_FIELD})", v.len()));
            }
        }
        if self.nonce.is_empty() {
            return Err("holder nonce is empty".into());
        }
        Ok(Holder {
            nonce: self.nonce.to_string(),
            pid: self.pid,
            host: self.host.to_string(),
            user: self.user.to_string(),
            version: self.version.to_string(),
            label: self.label.map(str::to_string),
        })
    }
}

/// One lease asked for.
#[derive(Debug, Serialize, Deserialize)]
pub struct AskWire<'a> {
    /// Lease name.
    pub name: &'a str,
    /// Mode.
    pub mode: Mode,
    /// Lease duration.
    pub ttl_ms: u64,
    /// Who asks.
    #[serde(borrow)]
    pub holder: HolderWire<'a>,
    /// May re-take the same nonce's grant at once.
    pub retake: bool,
    /// Metadata.
    pub meta: Option<&'a str>,
}

impl<'a> AskWire<'a> {
    /// A request as asked on the wire.
    pub fn of(r: &'a tenure_core::AcquireRequest) -> Self {
        Self {
            name: r.name.as_str(),
            mode: r.mode,
            ttl_ms: millis(r.ttl),
            holder: HolderWire::of(&r.holder),
            retake: r.retake,
            meta: r.meta.as_deref(),
        }
    }
}

/// Which grant (or reservation) an operation is about.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct RefWire<'a> {
    /// Lease name.
    pub name: &'a str,
    /// Fencing token (0 for a reservation).
    pub token: u64,
    /// Reservation id, for tentative grants.
    pub reservation: Option<u64>,
    /// The holder's nonce.
    pub nonce: &'a str,
}

/// A renewal.
#[derive(Debug, Serialize, Deserialize)]
pub struct RenewWire<'a> {
    /// The grant.
    #[serde(borrow)]
    pub grant: RefWire<'a>,
    /// New lease duration from now.
    pub ttl_ms: u64,
}

/// A release.
#[derive(Debug, Serialize, Deserialize)]
pub struct ReleaseWire<'a> {
    /// The grant.
    #[serde(borrow)]
    pub grant: RefWire<'a>,
    /// Dropped without an explicit release.
    pub dropped: bool,
    /// Watermark to publish.
    pub watermark_ms: Option<u64>,
    /// Metadata for the next holder.
    pub meta: Option<&'a str>,
}

/// A response.
#[derive(Debug, Serialize, Deserialize)]
pub enum Response {
    /// Answer to [`Request::Hello`].
    Hello {
        /// The server's protocol version.
        version: u16,
        /// Its ed25519 public key (witnesses verify with it).
        public_key: [u8; 32],
        /// Longest lease it grants.
        max_lease_ms: u64,
        /// How much longer it grants nothing.
        quarantine_left_ms: u64,
        /// When this incarnation started (µs since the unix epoch).
        started_us: u64,
    },
    /// Answer to [`Request::Acquire`].
    Acquired(AcquireReply),
    /// Answer to [`Request::Upgrade`] and [`Request::Renew`], one per item.
    Granted(#[serde(deserialize_with = "at_most::<_, _, MAX_BATCH>")] Vec<Outcome>),
    /// Answer to [`Request::Release`]: whether each grant was still held.
    Released(#[serde(deserialize_with = "at_most::<_, _, MAX_BATCH>")] Vec<bool>),
    /// Answer to [`Request::Inspect`] (boxed: the largest answer by far, it
    /// would make every answer as large as itself, and answers are moved
    /// several times between the table and the socket).
    State(Box<StateWire>),
    /// Answer to [`Request::List`]: a page of names, in order.
    Names {
        /// The names (decoded: at most [`MAX_LIST_PAGE`] + 1, see `wire::at_most`).
        #[serde(deserialize_with = "at_most::<_, _, MAX_LIST_PAGE>")]
        names: Vec<String>,
        /// More names follow the last one: ask again with it as `after`.
        more: bool,
    },
    /// Answer to [`Request::Break`].
    Done,
    /// Answer to [`Request::Ping`].
    Pong,
    /// The request failed.
    Error {
        /// What kind of failure.
        code: ErrorCode,
        /// For humans (decoded: at most [`MAX_QUOTED`] bytes, see `wire::quoted`).
        #[serde(deserialize_with = "quoted")]
        message: String,
    },
    /// Answer to [`Request::Waiters`]: how many wait in the lease's queue.
    Waiters(u32),
    /// Answer to [`Request::Identify`]: the server's identity (decoded: at most
    /// [`MAX_QUOTED`] bytes; a client checks it with [`check_server_id`]).
    Identity(#[serde(deserialize_with = "quoted")] String),
}

/// The outcome of an acquisition.
#[derive(Debug, Serialize, Deserialize)]
pub enum AcquireReply {
    /// Every lease, in request order.
    Granted(#[serde(deserialize_with = "at_most::<_, _, MAX_BATCH>")] Vec<GrantWire>),
    /// Ask `index` was busy; nothing was taken.
    Busy {
        /// Index in the request.
        index: u32,
        /// Who blocks it.
        #[serde(deserialize_with = "at_most::<_, _, MAX_HOLDERS>")]
        holders: Vec<HolderViewWire>,
        /// Record version.
        version: u64,
    },
    /// The server is in its start-up quarantine for this much longer.
    Quarantine {
        /// Milliseconds left.
        left_ms: u64,
    },
    /// Ask `index`'s lease has used up its fencing tokens: it is never granted
    /// again (tokens would go backwards); nothing was taken.
    Exhausted {
        /// Index in the request.
        index: u32,
        /// The lease's highest token.
        last_token: u64,
    },
}

/// One renewal's or upgrade's outcome.
#[derive(Debug, Serialize, Deserialize)]
pub enum Outcome {
    /// Done.
    Ok(GrantWire),
    /// The grant is gone: why.
    Lost(#[serde(deserialize_with = "quoted")] String),
}

/// A grant, renewal or reservation.
#[derive(Debug, Serialize, Deserialize)]
pub struct GrantWire {
    /// Fencing token (0 for a reservation).
    pub token: u64,
    /// Absolute deadline, server wall ms.
    pub deadline_ms: u64,
    /// Record version (reservation id for reservations).
    pub version: u64,
    /// Predecessor.
    pub predecessor: Option<PredecessorWire>,
    /// Signed witness.
    #[serde(with = "raw_bytes")]
    pub witness: Vec<u8>,
}

/// `Vec<u8>` as one length-prefixed run of bytes. Postcard writes a `u8` as one
/// raw byte either way, so this is the same wire format as serde's default (a
/// sequence of `u8`), only without a call per byte.
mod raw_bytes {
    use serde::{Deserializer, Serializer, de};

    pub(super) fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct Bytes;
        impl<'de> de::Visitor<'de> for Bytes {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
                while let Some(b) = seq.next_element()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        d.deserialize_bytes(Bytes)
    }
}

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorCode {
    /// The bytes were not a valid frame or message; the server closes.
    Protocol,
    /// The protocol versions do not match; the server closes.
    Version,
    /// Missing or wrong shared secret; the server closes.
    Unauthorized,
    /// The request is invalid (name, TTL, metadata, watermark, batch size).
    Invalid,
    /// A server limit was reached (connections, live leases, token rate).
    Overloaded,
    /// `break` found the record changed.
    Changed,
    /// Nothing to do.
    Nothing,
    /// The server is in its start-up quarantine.
    Quarantine,
    /// The server closes a connection that was idle for its idle timeout (sent
    /// with id 0): it read nothing after deciding so, so requests still waiting
    /// for an answer were not handled and may be sent again (version 2).
    Idle,
}

#[doc(hidden)]
pub mod out;

pub(crate) mod inbound;

#[cfg(test)]
mod tests;

/// Longest metadata a holder may leave with a lease, in bytes.
pub const MAX_META: usize = 1024;

/// A grant (or reservation, or renewal) as decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Granted {
    /// Fencing token (0 for a tentative reservation: no fenced write accepts it).
    pub token: u64,
    /// Absolute deadline, server wall ms.
    pub deadline_ms: u64,
    /// The record's version after this change (a reservation id for tentative ones).
    pub version: u64,
    /// What came before.
    pub predecessor: Option<tenure_core::Predecessor>,
    /// The witness body to sign.
    pub witness: Vec<u8>,
}
