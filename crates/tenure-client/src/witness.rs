//! Signed witnesses: proof, checkable offline, of which grant a write ran under.
//!
//! Every grant, renewal, tentative grant and upgrade the lease server hands out
//! comes with a witness (`docs/design/leases-on-dumb-storage.md#witnesses`): the lease name, mode,
//! fencing token, absolute deadline, the holder's nonce (its correlation id), the
//! server's time when it decided, and what the grant learned from its predecessor
//! (token, correlation id, whether it ended gracefully or was broken or expired,
//! when, and the watermark). A message written under the lease carries the witness
//! bytes; an audit calls [`verify`] with the server's public key (served by the
//! wire handshake and at `GET /pubkey` over HTTP).
//!
//! The signature is not meant to stop deliberate forgery by someone holding the
//! key, but to make it implausible for a bug to produce a valid-looking witness.
//!
//! # Batched signatures
//!
//! An ed25519 signature costs more than a whole lease cycle, so the server signs a
//! *batch*: the grants it decided together get one Merkle tree whose root it
//! signs, and each witness carries its path to the root (as Roughtime does).
//! Verifying a witness needs nothing but its own bytes.
//!
//! Signing and verifying use ring, the crate TLS and the object stores already
//! build on, so one crypto library is compiled (and no C toolchain beyond a C
//! compiler is needed). A signature costs ~23 µs on the 2-core test VM, once a
//! batch (`cargo run --release -p tenure-server --example witness_cost`).
//! Signatures are deterministic (RFC 8032), so they are the same bytes whatever
//! signs them. [`verify`] is strict: it refuses non-canonical signatures (`S`
//! not below the group order, an `R` that is not the canonical encoding), and
//! small-order keys and `R`s, with which a signature could verify for more than
//! one message.
//!
//! # Format (version 2, little-endian)
//!
//! ```text
//! witness  = body_len:u16 body path_len:u8 path_len*(side:u8 hash:[32]) signature:[64]
//! body     = format:u8(=2) kind:u8 mode:u8 token:u64 deadline_ms:u64 server_time_us:u64
//!            name_len:u8 name nonce_len:u8 nonce has_pred:u8 [pred]
//! pred     = token:u64 how:u8 at_ms:u64 has_watermark:u8 [watermark_ms:u64]
//!            nonce_len:u8 nonce            (nonce_len 0: unknown predecessor)
//! leaf     = BLAKE3(0x00 || body)
//! node     = BLAKE3(0x01 || left || right)      (side 0: the sibling is on the left)
//! signed   = "tenure-witness/2" || root          (ed25519, checked strictly)
//! ```
//!
//! `kind`: 0 grant, 1 renewal, 2 tentative, 3 upgrade. `mode`: 0 exclusive, 1
//! shared. `how`: 0 released, 1 dropped, 2 expired, 3 broken, 4 retaken, 5 corrupt.
//! A tentative witness is *not* authority to write: only a grant, upgrade or
//! renewal is.
//!
//! Format 1, which servers before format 2 wrote, differs only in its hash:
//! SHA-256 for the leaves and nodes, and `"tenure-witness/1"` before the root.
//! [`verify`] reads both (the body's first byte says which), so witnesses kept
//! in bags and logs stay checkable. Format 2 exists for speed: the tree costs
//! about four hash blocks a grant, and BLAKE3 hashes them in a quarter of the
//! time SHA-256 takes on a CPU without SHA extensions (0.27 µs a leaf and a
//! node, against 0.8–1.0 µs, on the 2-core test VM).

use ring::digest::{Context, SHA256, digest};
use ring::signature::{ED25519, UnparsedPublicKey};
use tenure_core::{EndedHow, Mode};

/// The witness body format written by this version.
pub const FORMAT: u8 = 2;
/// The oldest body format [`verify`] still reads.
pub const OLDEST_FORMAT: u8 = 1;
/// Longest Merkle path accepted (batches of up to 2^24 grants).
const MAX_PATH: usize = 24;

/// A format's Merkle tree hash and signed-message context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tree {
    /// Format 1.
    Sha256,
    /// Format 2.
    Blake3,
}

impl Tree {
    /// The tree of the format this version writes.
    const WRITTEN: Tree = Tree::Blake3;

    /// The tree of a body, by its format byte.
    fn of(body: &[u8]) -> Result<Self, WitnessError> {
        match body.first() {
            Some(1) => Ok(Tree::Sha256),
            Some(2) => Ok(Tree::Blake3),
            Some(f) => {
                Err(WitnessError::Malformed(format!("format {f} (this version reads {OLDEST_FORMAT} to {FORMAT})")))
            }
            None => Err(WitnessError::Malformed("truncated at format".into())),
        }
    }

    fn leaf(self, body: &[u8]) -> [u8; 32] {
        match self {
            Tree::Sha256 => {
                let mut h = Context::new(&SHA256);
                h.update(&[0u8]);
                h.update(body);
                sha256_bytes(h.finish().as_ref())
            }
            Tree::Blake3 => {
                let mut h = blake3::Hasher::new();
                h.update(&[0u8]);
                h.update(body);
                *h.finalize().as_bytes()
            }
        }
    }

    fn node(self, left: &[u8; 32], right: &[u8; 32]) -> [u8; 32] {
        let mut m = [0u8; 65];
        m[0] = 1;
        m[1..33].copy_from_slice(left);
        m[33..].copy_from_slice(right);
        match self {
            Tree::Sha256 => sha256_bytes(digest(&SHA256, &m).as_ref()),
            Tree::Blake3 => *blake3::hash(&m).as_bytes(),
        }
    }

    /// What the signature covers: the format's context, then the root.
    fn signed_message(self, root: &[u8; 32]) -> [u8; 48] {
        let context: &[u8; 16] = match self {
            Tree::Sha256 => b"tenure-witness/1",
            Tree::Blake3 => b"tenure-witness/2",
        };
        let mut m = [0u8; 48];
        m[..16].copy_from_slice(context);
        m[16..].copy_from_slice(root);
        m
    }
}

/// What a witness attests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WitnessKind {
    /// A new grant.
    Grant,
    /// A renewal of a grant (new deadline, same token).
    Renewal,
    /// A tentative grant (`docs/design/all-or-nothing.md#two-phase-acquisition`):
    /// no authority to write.
    Tentative,
    /// A tentative grant upgraded to a full one.
    Upgrade,
}

impl WitnessKind {
    /// Whether a holder may write under this witness.
    pub fn authorizes_writes(self) -> bool {
        !matches!(self, WitnessKind::Tentative)
    }
}

/// What the grant learned from the grant before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WitnessPredecessor {
    /// The predecessor's fencing token.
    pub token: u64,
    /// The predecessor's correlation id (holder nonce), if known.
    pub nonce: Option<String>,
    /// How it ended: gracefully (released) or not (dropped, expired, broken …).
    pub how: EndedHow,
    /// When it ended (server wall ms).
    pub at_ms: u64,
    /// Upper bound of everything written under the name before this grant.
    pub watermark_ms: Option<u64>,
}

/// A decoded witness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Witness {
    /// What it attests.
    pub kind: WitnessKind,
    /// Lease name.
    pub name: String,
    /// Mode of the grant.
    pub mode: Mode,
    /// Fencing token.
    pub token: u64,
    /// Absolute deadline (server wall ms) after which the grant is void.
    pub deadline_ms: u64,
    /// The server's time when it decided (µs since the unix epoch): the signed time.
    pub server_time_us: u64,
    /// The holder's nonce: the grant's correlation id.
    pub holder_nonce: String,
    /// The predecessor, if the name was held before (and still remembered).
    pub predecessor: Option<WitnessPredecessor>,
}

/// Why witness bytes were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WitnessError {
    /// The bytes are not a witness of a known format (truncated, garbage, newer).
    #[error("malformed witness: {0}")]
    Malformed(String),
    /// The public key is not a valid ed25519 key.
    #[error("invalid public key: {0}")]
    BadKey(String),
    /// The signature does not match the key and content.
    #[error("the witness signature does not verify with this public key")]
    BadSignature,
}

/// Verifies `witness` against the server's 32-byte ed25519 `public_key` and returns
/// its content. Never panics, whatever the bytes.
pub fn verify(public_key: &[u8], witness: &[u8]) -> Result<Witness, WitnessError> {
    let key: [u8; 32] =
        public_key.try_into().map_err(|_| WitnessError::BadKey(format!("{} bytes, not 32", public_key.len())))?;
    if has_small_order(&key) {
        return Err(WitnessError::BadKey("a small-order point, which signs anything".into()));
    }
    let parts = split(witness)?;
    let tree = Tree::of(parts.body)?;
    let mut node = tree.leaf(parts.body);
    for (side, sibling) in &parts.path {
        node = if *side == 0 { tree.node(sibling, &node) } else { tree.node(&node, sibling) };
    }
    // ring checks S < L and compares R byte for byte with the canonical
    // encoding it computes; a small-order R is refused here, as a strict
    // verifier does.
    let r: &[u8; 32] = parts.signature[..32].try_into().map_err(|_| WitnessError::BadSignature)?;
    if has_small_order(r) {
        return Err(WitnessError::BadSignature);
    }
    UnparsedPublicKey::new(&ED25519, &key)
        .verify(&tree.signed_message(&node), &parts.signature)
        .map_err(|_| WitnessError::BadSignature)?;
    decode_body(parts.body)
}

/// Whether a point encoding is one of the Edwards25519 points of small order
/// (the identity, the points of order 2, 4 and 8, and the non-canonical
/// encodings of those with `y` = 0 and 1), whatever its sign bit: the list
/// libsodium refuses.
fn has_small_order(point: &[u8; 32]) -> bool {
    const SMALL_ORDER: [[u8; 32]; 7] = [
        // 0 (order 4)
        [0; 32],
        // 1 (order 1)
        [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        // order 8
        [
            0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98, 0xf0, 0xd5, 0xdf,
            0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53, 0xfc, 0x05,
        ],
        // order 8
        [
            0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67, 0x0f, 0x2a, 0x20,
            0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac, 0x03, 0x7a,
        ],
        // p - 1 (order 2)
        [
            0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
        ],
        // p, that is 0 (order 4)
        [
            0xed, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
        ],
        // p + 1, that is 1 (order 1)
        [
            0xee, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
        ],
    ];
    let mut unsigned = *point;
    unsigned[31] &= 0x7f;
    SMALL_ORDER.contains(&unsigned)
}

/// Parses a public key from 64 hex digits (as `GET /pubkey` serves it).
pub fn public_key_from_hex(hex_key: &str) -> Result<[u8; 32], WitnessError> {
    let bytes = hex::decode(hex_key.trim()).map_err(|e| WitnessError::BadKey(e.to_string()))?;
    bytes.try_into().map_err(|_| WitnessError::BadKey("not 32 bytes".into()))
}

impl Witness {
    /// Decodes the content *without* checking the signature (for display).
    pub fn decode_unverified(witness: &[u8]) -> Result<Witness, WitnessError> {
        decode_body(split(witness)?.body)
    }

    /// The body bytes (what the Merkle leaf hashes).
    pub fn encode_body(&self, out: &mut Vec<u8>) {
        let pred = self.predecessor.as_ref().map(|p| PredRef {
            token: p.token,
            nonce: p.nonce.as_deref().unwrap_or(""),
            how: p.how,
            at_ms: p.at_ms,
            watermark_ms: p.watermark_ms,
        });
        BodyRef {
            kind: self.kind,
            name: &self.name,
            mode: self.mode,
            token: self.token,
            deadline_ms: self.deadline_ms,
            server_time_us: self.server_time_us,
            holder_nonce: &self.holder_nonce,
            predecessor: pred,
        }
        .encode(out);
    }
}

/// A witness body over borrowed data, so the server encodes without copying.
#[derive(Debug, Clone, Copy)]
#[doc(hidden)]
pub struct BodyRef<'a> {
    pub kind: WitnessKind,
    pub name: &'a str,
    pub mode: Mode,
    pub token: u64,
    pub deadline_ms: u64,
    pub server_time_us: u64,
    pub holder_nonce: &'a str,
    pub predecessor: Option<PredRef<'a>>,
}

/// A predecessor over borrowed data.
#[derive(Debug, Clone, Copy)]
#[doc(hidden)]
pub struct PredRef<'a> {
    pub token: u64,
    pub nonce: &'a str,
    pub how: EndedHow,
    pub at_ms: u64,
    pub watermark_ms: Option<u64>,
}

impl<'a> PredRef<'a> {
    #[inline]
    pub fn of(p: &'a tenure_core::Predecessor) -> Self {
        Self {
            token: p.token,
            nonce: p.holder.as_ref().map_or("", |h| h.nonce.as_str()),
            how: p.how,
            at_ms: p.at_ms,
            watermark_ms: p.watermark_ms,
        }
    }
}

impl BodyRef<'_> {
    /// Writes the body.
    #[inline]
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[FORMAT, kind_code(self.kind), mode_code(self.mode)]);
        for v in [self.token, self.deadline_ms, self.server_time_us] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        put_str(out, self.name);
        put_str(out, self.holder_nonce);
        match &self.predecessor {
            None => out.push(0),
            Some(p) => {
                out.push(1);
                out.extend_from_slice(&p.token.to_le_bytes());
                out.push(how_code(p.how));
                out.extend_from_slice(&p.at_ms.to_le_bytes());
                match p.watermark_ms {
                    None => out.push(0),
                    Some(w) => {
                        out.push(1);
                        out.extend_from_slice(&w.to_le_bytes());
                    }
                }
                put_str(out, p.nonce);
            }
        }
    }
}

/// Strings longer than 255 bytes are cut (names are at most 255 bytes; nonces are
/// short): the witness stays well-formed whatever it is given.
#[inline]
fn put_str(out: &mut Vec<u8>, s: &str) {
    let mut end = s.len().min(255);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out.push(end as u8);
    out.extend_from_slice(&s.as_bytes()[..end]);
}

struct Parts<'a> {
    body: &'a [u8],
    path: Vec<(u8, [u8; 32])>,
    signature: [u8; 64],
}

/// A cursor that reports truncation instead of panicking.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], WitnessError> {
        if self.buf.len() < n {
            return Err(WitnessError::Malformed(format!("truncated at {what}")));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }
    fn u8(&mut self, what: &str) -> Result<u8, WitnessError> {
        Ok(self.take(1, what)?[0])
    }
    fn u64(&mut self, what: &str) -> Result<u64, WitnessError> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
    }
    fn string(&mut self, what: &str) -> Result<String, WitnessError> {
        let n = self.u8(what)? as usize;
        let b = self.take(n, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| WitnessError::Malformed(format!("{what} is not UTF-8")))
    }
}

fn split(witness: &[u8]) -> Result<Parts<'_>, WitnessError> {
    let mut r = Reader { buf: witness };
    let len = r.take(2, "body length")?;
    let body = r.take(u16::from_le_bytes([len[0], len[1]]) as usize, "body")?;
    let n = r.u8("path length")? as usize;
    if n > MAX_PATH {
        return Err(WitnessError::Malformed(format!("Merkle path of {n} levels (at most {MAX_PATH})")));
    }
    let mut path = Vec::with_capacity(n);
    for _ in 0..n {
        let side = r.u8("path side")?;
        if side > 1 {
            return Err(WitnessError::Malformed(format!("path side {side}")));
        }
        let mut hash = [0u8; 32];
        hash.copy_from_slice(r.take(32, "path hash")?);
        path.push((side, hash));
    }
    let mut signature = [0u8; 64];
    signature.copy_from_slice(r.take(64, "signature")?);
    if !r.buf.is_empty() {
        return Err(WitnessError::Malformed(format!("{} trailing bytes", r.buf.len())));
    }
    Ok(Parts { body, path, signature })
}

fn decode_body(body: &[u8]) -> Result<Witness, WitnessError> {
    let mut r = Reader { buf: body };
    // Every known format has this body; they differ in the tree's hash. The
    // formats known are `Tree::of`'s.
    Tree::of(body)?;
    r.u8("format")?;
    let kind = match r.u8("kind")? {
        0 => WitnessKind::Grant,
        1 => WitnessKind::Renewal,
        2 => WitnessKind::Tentative,
        3 => WitnessKind::Upgrade,
        k => return Err(WitnessError::Malformed(format!("kind {k}"))),
    };
    let mode = match r.u8("mode")? {
        0 => Mode::Exclusive,
        1 => Mode::Shared,
        m => return Err(WitnessError::Malformed(format!("mode {m}"))),
    };
    let token = r.u64("token")?;
    let deadline_ms = r.u64("deadline")?;
    let server_time_us = r.u64("server time")?;
    let name = r.string("name")?;
    let holder_nonce = r.string("holder nonce")?;
    let predecessor = match r.u8("predecessor flag")? {
        0 => None,
        1 => {
            let token = r.u64("predecessor token")?;
            let how = how_from(r.u8("predecessor ending")?)?;
            let at_ms = r.u64("predecessor end time")?;
            let watermark_ms = match r.u8("watermark flag")? {
                0 => None,
                1 => Some(r.u64("watermark")?),
                f => return Err(WitnessError::Malformed(format!("watermark flag {f}"))),
            };
            let nonce = Some(r.string("predecessor nonce")?).filter(|n| !n.is_empty());
            Some(WitnessPredecessor { token, nonce, how, at_ms, watermark_ms })
        }
        f => return Err(WitnessError::Malformed(format!("predecessor flag {f}"))),
    };
    if !r.buf.is_empty() {
        return Err(WitnessError::Malformed(format!("{} trailing body bytes", r.buf.len())));
    }
    Ok(Witness { kind, name, mode, token, deadline_ms, server_time_us, holder_nonce, predecessor })
}

#[inline]
fn kind_code(k: WitnessKind) -> u8 {
    match k {
        WitnessKind::Grant => 0,
        WitnessKind::Renewal => 1,
        WitnessKind::Tentative => 2,
        WitnessKind::Upgrade => 3,
    }
}

#[inline]
fn mode_code(m: Mode) -> u8 {
    match m {
        Mode::Exclusive => 0,
        Mode::Shared => 1,
    }
}

#[inline]
fn how_code(h: EndedHow) -> u8 {
    match h {
        EndedHow::Released => 0,
        EndedHow::Dropped => 1,
        EndedHow::Expired => 2,
        EndedHow::Broken => 3,
        EndedHow::Retaken => 4,
        EndedHow::Corrupt => 5,
    }
}

fn how_from(code: u8) -> Result<EndedHow, WitnessError> {
    Ok(match code {
        0 => EndedHow::Released,
        1 => EndedHow::Dropped,
        2 => EndedHow::Expired,
        3 => EndedHow::Broken,
        4 => EndedHow::Retaken,
        5 => EndedHow::Corrupt,
        c => return Err(WitnessError::Malformed(format!("predecessor ending {c}"))),
    })
}

/// The leaf hash of a body in the format this version writes.
#[doc(hidden)]
pub fn leaf_hash(body: &[u8]) -> [u8; 32] {
    Tree::WRITTEN.leaf(body)
}

/// A SHA-256 digest as an array (it is always 32 bytes).
fn sha256_bytes(d: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(d);
    out
}

/// What the signature covers, in the format this version writes.
#[doc(hidden)]
pub fn signed_message(root: &[u8; 32]) -> [u8; 48] {
    Tree::WRITTEN.signed_message(root)
}

/// Seals a batch of witness bodies (as written by [`Witness::encode_body`])
/// with one signature, made by `sign` (see [`seal`]); returns each body's
/// complete witness, in order. A body longer than a witness can say (65,535
/// bytes) is refused.
///
/// # Errors
/// [`WitnessError::Malformed`] for a body that is too long.
#[doc(hidden)]
pub fn seal_batch(bodies: &[Vec<u8>], sign: impl FnOnce(&[u8; 48]) -> [u8; 64]) -> Result<Vec<Vec<u8>>, WitnessError> {
    if let Some(b) = bodies.iter().find(|b| b.len() > usize::from(u16::MAX)) {
        return Err(WitnessError::Malformed(format!("a witness body of {} bytes (at most 65535)", b.len())));
    }
    let mut out: Vec<Vec<u8>> = bodies
        .iter()
        .map(|b| {
            let mut w = witness_buf(b.len());
            w.extend_from_slice(b);
            w
        })
        .collect();
    let mut refs: Vec<&mut Vec<u8>> = out.iter_mut().collect();
    seal(&mut refs, sign);
    Ok(out)
}

/// Completes witnesses started by [`witness_buf`] and filled with a body: fills
/// in each length, appends each one's Merkle path and the batch's signature,
/// which `sign` makes over the message for the batch's root (for the server's
/// signer; verification needs none of this).
#[doc(hidden)]
pub fn seal(witnesses: &mut [&mut Vec<u8>], sign: impl FnOnce(&[u8; 48]) -> [u8; 64]) {
    if witnesses.is_empty() {
        return;
    }
    // levels[0] = leaves; each next level pairs neighbours, a lone last node
    // moves up unchanged (so it gets no path entry at that level).
    let tree = Tree::WRITTEN;
    let mut levels: Vec<Vec<[u8; 32]>> =
        vec![witnesses.iter().map(|w| tree.leaf(w.get(2..).unwrap_or_default())).collect()];
    while levels.last().is_some_and(|l| l.len() > 1) {
        let below = levels.last().map(Vec::as_slice).unwrap_or_default();
        let up = below.chunks(2).map(|pair| if let [l, r] = pair { tree.node(l, r) } else { pair[0] }).collect();
        levels.push(up);
    }
    let root = levels.last().and_then(|l| l.first()).copied().unwrap_or_default();
    let signature = sign(&tree.signed_message(&root));
    for (leaf, w) in witnesses.iter_mut().enumerate() {
        // Bodies the server builds are under 1 KiB; sign_batch refuses longer
        // ones than the field holds.
        let body_len = u16::try_from(w.len().saturating_sub(2)).unwrap_or(u16::MAX);
        if let Some(head) = w.get_mut(..2) {
            head.copy_from_slice(&body_len.to_le_bytes());
        }
        let at = w.len();
        w.push(0);
        let mut i = leaf;
        let mut n = 0u8;
        for level in &levels[..levels.len() - 1] {
            let sibling = i ^ 1;
            if let Some(h) = level.get(sibling) {
                w.push(u8::from(sibling > i));
                w.extend_from_slice(h);
                n += 1;
            }
            i /= 2;
        }
        w[at] = n;
        w.extend_from_slice(&signature);
    }
}

/// A buffer for a witness whose body is `name_len`-ish: two bytes for the length,
/// then room for the body, a path for batches up to 64 and the signature.
#[doc(hidden)]
#[inline]
pub fn witness_buf(name_len: usize) -> Vec<u8> {
    let mut w = Vec::with_capacity(2 + 96 + 2 * name_len + 1 + 6 * 33 + 64);
    w.extend_from_slice(&[0, 0]);
    w
}
