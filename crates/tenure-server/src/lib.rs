//! The tenure lease server (`tenure serve`).
//!
//! Leases are small and short-lived, so they belong in RAM, in a
//! service specialised for churning through them, not in storage (see
//! `docs/design/leases-on-dumb-storage.md#leases-in-ram`). The server
//! keeps every lease in a sharded in-memory table ([`leases`]), judges expiry by its
//! own clock alone, and answers over a small binary protocol ([`wire`]). The
//! client, [`TenureStore`], implements [`tenure_core::LeaseStore`], so everything in
//! tenure (keep-alive, `tenure lock`, the conformance suite) works on it unchanged.
//!
//! # Wire protocol
//!
//! Defined in `tenure-client` (its crate docs and [`wire`]), which this crate
//! depends on and re-exports: one message definition and codec for both sides.
//!
//! # Waiting: a queue per lease, the grant pushed
//!
//! A client waiting for a busy lease does not poll: it sends `Wait`, which
//! parks in the lease's FIFO queue ([`leases`]'s queue module) and is answered
//! when the lease is granted to it, or busy when `wait_ms` (at most a day) runs
//! out; the connection's other requests go on meanwhile. A release, a break or
//! an expiry hands the lease to the head of the queue in the same critical
//! section (shared waiters together, up to the first exclusive one), so a
//! release-to-grant gap is one pushed frame. While a lease has waiters, nobody
//! overtakes them, not even an `Acquire` that could share the lease. A
//! waiter is one lease: a client's multi-lease acquisition waits for its
//! leases one at a time, in canonical order, holding those before (see
//! `tenure_core::Client::acquire_all`), so waiters cannot deadlock. A
//! waiter whose connection closes, or who sends `Unwait` with its request id,
//! leaves the queue, and a grant it was handed but not sent is given back at
//! once. Bounds: [`leases::MAX_WAITERS`] per lease, [`wire::MAX_WAITS_PER_CONNECTION`]
//! per connection, and each waiter takes a place among `max_live` like a
//! lease; a connection with queued waits is not idle, and TCP
//! keepalive probes (about a minute) notice a peer that vanished. The restart
//! quarantine still holds: waiters queue through it and are served when it ends.
//!
//! # Robustness: every resource a client can take is bounded
//!
//! - **Frames**: a request frame is at most 256 KiB ([`wire::MAX_REQUEST`]), and
//!   at most 4 KiB before the hello ([`wire::MAX_HELLO`]); a response at most
//!   8 MiB ([`wire::MAX_RESPONSE`]), and every answer stays far below it: a
//!   listing is a page ([`wire::MAX_LIST_PAGE`] names, [`wire::MAX_LIST_BYTES`]),
//!   a lease has at most [`leases::MAX_HOLDERS`] shared holders. A frame that is
//!   oversized, undecodable or not a hello when a hello is due gets one
//!   `Error { code: Protocol }` answer with id 0 and the connection closes.
//! - **Numbers**: every number in a request is range-checked before use
//!   ([`wire::check_request`]: TTLs within `10 ms ..= --max-lease`, tokens below
//!   `MAX_TOKEN`, watermarks before the year 9999, …); out of range is an
//!   `Error { code: Invalid }` naming the field, and the connection stays open.
//!   The client checks the server's answers the same way.
//! - **Connections**: a new connection waits for its hello among at most
//!   `--max-pre-hello` (256) others, apart from the `--max-connections` (4096)
//!   places of clients that have said hello; when that set is full the oldest is
//!   closed (see the `admission` module for why). The hello must be complete
//!   within `--hello-timeout` (5 s) of the accept; with TLS, the handshake
//!   happens within the same deadline, in the same place.
//! - **Deadlines that cannot be dripped**: a frame must be complete within
//!   `--io-timeout` (10 s) of its first byte, and a batch of answers taken by
//!   the client within `--io-timeout` of being written; a client that sends
//!   nothing for `--idle-timeout` (5 min), and has no wait queued, is closed.
//! - **Memory per connection**: a read buffer (at most one frame), and one batch
//!   of answers (up to 1024 frames or about 1 MiB of answers, plus the last
//!   answer); see [`server::MAX_BATCH_BYTES`]. With TLS, rustls's buffers for
//!   the session come on top.
//! - **Leases**: at most `--max-leases` live leases, shared holders and
//!   reservations together, and `--retain` retired records (each one record:
//!   its expired grants are ended when it retires).
//!
//! Invalid requests (bad name, TTL beyond `max_lease`, …) get an
//! `Error { code: Invalid }` answer and the connection stays open.
//!
//! # Restart rule: no grant outlives a restart, tokens stay monotonic
//!
//! The server keeps no lease on disk. Its one piece of state there is a bound
//! ([`state::StateFile`], `tenure serve --state`): the longest lease it may have
//! granted, `longest`, the greater of the recorded value and this run's
//! `--max-lease`, written durably before it grants anything. Exclusion and
//! fencing tokens then hold across restarts and crashes by two rules together:
//! - **tabula rasa** (`docs/design/leases-on-dumb-storage.md#leases-in-ram`): a
//!   starting server grants nothing for its
//!   quarantine, `longest + 1 s` ([`CoreOptions::after`]). Every grant of the
//!   previous incarnation had a TTL of at most its `--max-lease` ≤ `longest`,
//!   from a decision made before the crash, so all of them have ended (by their
//!   holders' own monotonic clocks too) before the new incarnation grants
//!   anything, whatever flags it restarted with. Renewals of old grants are
//!   answered as lost (the server has no record of them, or their duration is
//!   above this run's `--max-lease`), so their holders learn at once that they
//!   lost them. The recorded bound is lowered to a lower `--max-lease` only once
//!   such a whole quarantine has passed under it.
//! - **time in the token**: a grant's token is `max(previous token, server time
//!   in µs) + 1`, where server time is the wall clock read once at start plus
//!   the monotonic time since. The server refuses grants that would put a token
//!   more than `max_lease / 2` ahead of its clock (more than one grant per µs on
//!   one name, sustained), so every token of an incarnation that crashed at wall
//!   time `T` is below `T + longest/2`, and every token of the next one is at
//!   least its clock at its first grant, `≥ T + longest + 1 s`.
//!
//! Assumptions: the wall clock at restart is not behind the wall clock at the
//! crash by more than `longest / 2` (an NTP step back of minutes would break it;
//! a clock that is wildly wrong, before 2020, is refused at start), and the state
//! file survives (a server started without it, elsewhere, knows only its own
//! flags). Tokens look like timestamps in µs (about 1.8 × 10^15 in 2027): they fit
//! in an `f64` exactly and tell roughly when a grant was made.
//!
//! # Identity
//!
//! Each server has an identity ([`ServerOptions::server_id`]; `tenure serve`
//! keeps a random one in its state file, or takes `--server-id`), which it
//! says when asked (protocol 5). Clients of several servers place names by
//! these identities, never by the addresses they wrote, and tell each
//! connection that acquires the whole list: the server then refuses an
//! acquisition or a wait for a name the list places on another server (a
//! few hashes a name). See `tenure_client::remote` for how a client learns
//! the identities, and the README on changing the server list.
//!
//! # Witnesses
//!
//! Every grant, renewal, reservation and upgrade carries an ed25519-signed
//! [`witness::Witness`] (name, mode, token, deadline, holder nonce, the server's
//! time, the predecessor's token, nonce, how it ended, when, and the watermark).
//! Witnesses decided together are signed together, one signature over a Merkle
//! root (as Roughtime does); [`witness::verify`] checks one witness with the
//! public key alone.
//!
//! # Memory
//!
//! A released lease's record (its token, watermark, and the metadata the holder
//! left, e.g. where it stored its updates:
//! `docs/design/leases-on-dumb-storage.md#one-record-per-name-with-a-version`) is kept for the next
//! holder in a bounded table, `--retain` records, dropping the oldest first; live
//! leases, with their shared holders and reservations, are bounded by
//! `--max-leases`, and each lease has at most [`leases::MAX_HOLDERS`] shared
//! holders and [`leases::MAX_RESERVATIONS`] reservations. See [`leases`]. The HTTP
//! port has limits of its own: see [`http`].

#![forbid(unsafe_code)]

mod admission;
pub mod http;
pub mod leases;
pub mod server;
pub mod state;
pub mod tls;
pub mod witness;

// The client and the protocol live in tenure-client; these paths stay.
pub use tenure_client::{
    ClientOptions, OPEN_FILES_LIMIT, ServerInfo, TenureStore, Upgrade, is_reservation, open, remote as client, wire,
};
pub(crate) use tenure_client::{keepalive, spin};

pub use leases::{Core, CoreOptions};
pub use server::{Server, ServerOptions};
pub use tls::{ClientTls, ServerTls, TlsError};
pub use witness::{Signer, Witness, WitnessError, verify};
