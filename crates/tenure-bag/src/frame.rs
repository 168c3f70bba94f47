//! Messages and the framed record format shared by data files, batch objects
//! and snapshots.
//!
//! # Frame (version 1, little-endian)
//!
//! ```text
//! frame = body_len:u32 crc:u32 body            crc = CRC32C(body)
//! body  = version:u8(=1)
//!         writer_len:u8 writer                  the writer id (ASCII [A-Za-z0-9_-])
//!         first_seq:u64 count:u32               message i has sequence first_seq + i
//!         lease_count:u8 lease*                 the leases the batch was written under
//!         message*count
//! lease = name_len:u16 name token:u64 deadline_ms:u64
//!         has_watermark:u8 [watermark_ms:u64]   the predecessors' watermark
//!         holder_len:u8 holder                  the grant's correlation id (holder nonce)
//!         witness_len:u32 witness               0: no witness
//! message = ts_ms:u64 payload_len:u32 payload
//! ```
//!
//! One frame is one batch, written with one `write(2)` (or one PUT): it is
//! accepted or rejected as a whole. A reader decodes frames one after another and
//! stops at the first one that is incomplete or fails its CRC: in a single-writer
//! file that can only be a torn tail (the writer died or was cut off by a close
//! mid-write), and everything after it is ignored, the same way by every reader,
//! because the bytes a closed bucket covers never change.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;

/// Frame format version written by this crate.
pub const FRAME_VERSION: u8 = 1;
/// Largest frame body accepted (garbage lengths beyond it are a torn tail).
pub const MAX_FRAME: usize = 64 << 20;
/// Longest writer id.
pub const MAX_WRITER_LEN: usize = 64;
const HEADER: usize = 8;

/// The lease a message was written under, as the writer saw its grant.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct LeaseStamp {
    /// Lease name.
    pub name: String,
    /// Fencing token of the grant.
    pub token: u64,
    /// The grant's absolute deadline (wall ms) when the batch was stamped.
    pub deadline_ms: u64,
    /// The predecessors' watermark the grant learned: messages must be above it.
    pub watermark_ms: Option<u64>,
    /// The grant's correlation id (holder nonce).
    pub holder: String,
    /// The lease server's signed witness of the grant, if any.
    #[serde(serialize_with = "hex_opt")]
    pub witness: Option<Vec<u8>>,
}

fn hex_opt<S: serde::Serializer>(w: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
    match w {
        Some(bytes) => s.serialize_some(&bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()),
        None => s.serialize_none(),
    }
}

/// One message as read back.
#[derive(Clone, PartialEq, Eq)]
pub struct Message {
    /// Timestamp (wall ms): the message's place in the order.
    pub ts_ms: u64,
    /// Writer id.
    pub writer: Arc<str>,
    /// Sequence number within the writer.
    pub seq: u64,
    /// Leases the message was written under (shared by its batch).
    pub leases: Arc<[LeaseStamp]>,
    /// The payload.
    pub payload: Bytes,
}

impl Message {
    /// The reading order: timestamp, then writer, then sequence.
    pub fn key(&self) -> (u64, &str, u64) {
        (self.ts_ms, &self.writer, self.seq)
    }

    /// Whether a lease it carries had expired at its timestamp (readers drop it).
    pub fn after_deadline(&self) -> Option<&LeaseStamp> {
        self.leases.iter().find(|l| self.ts_ms >= l.deadline_ms)
    }
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Message({} {}#{} {:?}", self.ts_ms, self.writer, self.seq, String::from_utf8_lossy(&self.payload))?;
        for l in self.leases.iter() {
            write!(f, " {}@{}", l.name, l.token)?;
        }
        f.write_str(")")
    }
}

/// Sorts messages into reading order. Equal keys (only possible when two live
/// writers share an id, which they must not) fall back to the payload, so every
/// reader still agrees.
pub fn sort_messages(msgs: &mut [Message]) {
    msgs.sort_unstable_by(|a, b| a.key().cmp(&b.key()).then_with(|| a.payload.cmp(&b.payload)));
}

/// Checks a writer id: 1–64 characters of `[A-Za-z0-9_-]`.
pub fn check_writer(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_WRITER_LEN {
        return Err(format!("writer id {id:?} must be 1 to {MAX_WRITER_LEN} characters"));
    }
    if !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err(format!("writer id {id:?} may only contain letters, digits, '-' and '_'"));
    }
    Ok(())
}

/// Whether `name` is an item name a writer makes: `<writer>.<number>[suffix]`.
/// Anything else found in a bucket (a stray file, a foreign object) is ignored,
/// so it can never make a manifest unreadable.
pub fn is_item_name(name: &str, suffix: &str) -> bool {
    let Some(stem) = name.strip_suffix(suffix) else { return false };
    let Some((writer, number)) = stem.split_once('.') else { return false };
    check_writer(writer).is_ok()
        && !number.is_empty()
        && number.len() <= 20
        && number.bytes().all(|b| b.is_ascii_digit())
}

/// Encodes one batch as a frame. Fails only on sizes the format cannot hold.
pub fn encode(
    writer: &str,
    first_seq: u64,
    leases: &[LeaseStamp],
    messages: &[(u64, Bytes)],
) -> Result<Vec<u8>, String> {
    check_writer(writer)?;
    if leases.len() > u8::MAX as usize {
        return Err(format!("{} leases in one batch (at most 255)", leases.len()));
    }
    let mut body = Vec::with_capacity(32 + messages.iter().map(|(_, p)| 12 + p.len()).sum::<usize>());
    body.push(FRAME_VERSION);
    body.push(writer.len() as u8);
    body.extend_from_slice(writer.as_bytes());
    body.extend_from_slice(&first_seq.to_le_bytes());
    body.extend_from_slice(&u32::try_from(messages.len()).map_err(|_| "too many messages")?.to_le_bytes());
    body.push(leases.len() as u8);
    for l in leases {
        put_lease(&mut body, l)?;
    }
    for (ts, payload) in messages {
        body.extend_from_slice(&ts.to_le_bytes());
        body.extend_from_slice(&u32::try_from(payload.len()).map_err(|_| "payload too long")?.to_le_bytes());
        body.extend_from_slice(payload);
    }
    if body.len() > MAX_FRAME {
        return Err(format!("batch of {} bytes is larger than a frame may be ({MAX_FRAME})", body.len()));
    }
    let mut frame = Vec::with_capacity(HEADER + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Appends one lease stamp's encoding (see the module docs) to `body`.
pub(crate) fn put_lease(body: &mut Vec<u8>, l: &LeaseStamp) -> Result<(), String> {
    let name = u16::try_from(l.name.len()).map_err(|_| "lease name too long")?;
    body.extend_from_slice(&name.to_le_bytes());
    body.extend_from_slice(l.name.as_bytes());
    body.extend_from_slice(&l.token.to_le_bytes());
    body.extend_from_slice(&l.deadline_ms.to_le_bytes());
    match l.watermark_ms {
        Some(w) => {
            body.push(1);
            body.extend_from_slice(&w.to_le_bytes());
        }
        None => body.push(0),
    }
    let holder = u8::try_from(l.holder.len()).map_err(|_| "holder nonce too long")?;
    body.push(holder);
    body.extend_from_slice(l.holder.as_bytes());
    let witness = l.witness.as_deref().unwrap_or_default();
    body.extend_from_slice(&u32::try_from(witness.len()).map_err(|_| "witness too long")?.to_le_bytes());
    body.extend_from_slice(witness);
    Ok(())
}

/// What decoding a run of frames found.
#[derive(Debug, Default)]
pub struct Decoded {
    /// Messages of every valid frame, in file order.
    pub messages: Vec<Message>,
    /// Bytes of valid frames.
    pub valid_len: usize,
    /// Bytes ignored after the last valid frame (a torn tail, or damage).
    pub ignored: usize,
    /// Why decoding stopped early, if it did.
    pub stopped: Option<String>,
}

/// Decodes the frames of `data` (a data file's covered bytes, or a batch object).
pub fn decode_all(data: &Bytes) -> Decoded {
    let mut out = Decoded::default();
    let mut at = 0usize;
    while at < data.len() {
        match decode_one(data, at) {
            Ok((mut msgs, next)) => {
                out.messages.append(&mut msgs);
                at = next;
            }
            Err(why) => {
                out.stopped = Some(format!("at byte {at}: {why}"));
                break;
            }
        }
    }
    out.valid_len = at;
    out.ignored = data.len() - at;
    out
}

/// A bounds-checked little-endian reader over a frame body.
pub(crate) struct Cursor<'a> {
    pub(crate) data: &'a Bytes,
    pub(crate) at: usize,
    pub(crate) end: usize,
}

impl Cursor<'_> {
    pub(crate) fn lease(&mut self) -> Result<LeaseStamp, String> {
        let nlen = self.u16()? as usize;
        let name = self.str(nlen)?.to_string();
        let token = self.u64()?;
        let deadline_ms = self.u64()?;
        let watermark_ms = match self.u8()? {
            0 => None,
            1 => Some(self.u64()?),
            other => return Err(format!("bad watermark flag {other}")),
        };
        let hlen = self.u8()? as usize;
        let holder = self.str(hlen)?.to_string();
        let wit = self.u32()? as usize;
        let witness = self.take(wit)?;
        let witness = (!witness.is_empty()).then(|| self.data[witness].to_vec());
        Ok(LeaseStamp { name, token, deadline_ms, watermark_ms, holder, witness })
    }
    pub(crate) fn take(&mut self, n: usize) -> Result<std::ops::Range<usize>, String> {
        let start = self.at;
        let stop = start.checked_add(n).filter(|&s| s <= self.end).ok_or("a field runs past the frame")?;
        self.at = stop;
        Ok(start..stop)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, String> {
        let r = self.take(1)?;
        Ok(self.data[r.start])
    }
    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let r = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(&self.data[r]);
        Ok(a)
    }
    pub(crate) fn u16(&mut self) -> Result<u16, String> {
        self.array().map(u16::from_le_bytes)
    }
    pub(crate) fn u32(&mut self) -> Result<u32, String> {
        self.array().map(u32::from_le_bytes)
    }
    pub(crate) fn u64(&mut self) -> Result<u64, String> {
        self.array().map(u64::from_le_bytes)
    }
    pub(crate) fn str(&mut self, n: usize) -> Result<&str, String> {
        let r = self.take(n)?;
        std::str::from_utf8(&self.data[r]).map_err(|_| "a name is not UTF-8".to_string())
    }
}

/// Decodes the frame at `at`; returns its messages and where the next frame starts.
pub fn decode_one(data: &Bytes, at: usize) -> Result<(Vec<Message>, usize), String> {
    let start = at.checked_add(HEADER).ok_or("incomplete frame header")?;
    let header = data.get(at..start).ok_or("incomplete frame header")?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if len > MAX_FRAME {
        return Err(format!("frame length {len} is implausible"));
    }
    let end = start.checked_add(len).filter(|&e| e <= data.len()).ok_or("incomplete frame")?;
    if crc32c::crc32c(&data[start..end]) != crc {
        return Err("checksum mismatch".into());
    }
    let mut c = Cursor { data, at: start, end };
    let version = c.u8()?;
    if version != FRAME_VERSION {
        return Err(format!("frame version {version} is not {FRAME_VERSION}"));
    }
    let wlen = c.u8()? as usize;
    let writer: Arc<str> = c.str(wlen)?.into();
    check_writer(&writer)?;
    let first_seq = c.u64()?;
    let count = c.u32()? as usize;
    let nleases = c.u8()? as usize;
    let mut leases = Vec::with_capacity(nleases);
    for _ in 0..nleases {
        leases.push(c.lease()?);
    }
    let leases: Arc<[LeaseStamp]> = leases.into();
    // Each message takes at least 12 bytes: refuse counts the body cannot hold
    // before allocating for them.
    if count > (end - c.at) / 12 {
        return Err(format!("message count {count} does not fit the frame"));
    }
    let mut messages = Vec::with_capacity(count);
    for i in 0..count {
        let ts_ms = c.u64()?;
        let plen = c.u32()? as usize;
        let payload = data.slice(c.take(plen)?);
        let seq = first_seq.checked_add(i as u64).ok_or("sequence overflow")?;
        messages.push(Message { ts_ms, writer: writer.clone(), seq, leases: leases.clone(), payload });
    }
    if c.at != end {
        return Err(format!("{} unexplained bytes at the end of the frame", end - c.at));
    }
    Ok((messages, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease() -> LeaseStamp {
        LeaseStamp {
            name: "acct/7".into(),
            token: 42,
            deadline_ms: 2_000,
            watermark_ms: Some(900),
            holder: "9f2c".into(),
            witness: Some(vec![1, 2, 3]),
        }
    }

    #[test]
    fn frames_round_trip_with_leases_and_sequences() {
        let msgs = vec![(1_000, Bytes::from_static(b"a")), (1_001, Bytes::from_static(b""))];
        let mut data = encode("w1", 7, &[lease()], &msgs).expect("encode");
        data.extend(encode("w1", 9, &[], &[(1_002, Bytes::from_static(b"c"))]).expect("encode"));
        let d = decode_all(&Bytes::from(data.clone()));
        assert_eq!(d.stopped, None);
        assert_eq!((d.valid_len, d.ignored), (data.len(), 0));
        let got: Vec<_> = d.messages.iter().map(|m| (m.ts_ms, m.seq, m.payload.clone(), m.leases.len())).collect();
        assert_eq!(
            got,
            [
                (1_000, 7, Bytes::from_static(b"a"), 1),
                (1_001, 8, Bytes::new(), 1),
                (1_002, 9, Bytes::from_static(b"c"), 0)
            ]
        );
        assert_eq!(d.messages[0].leases[0], lease());
    }

    #[test]
    fn every_truncation_is_a_torn_tail_that_keeps_the_earlier_frames() {
        let first = encode("w", 0, &[lease()], &[(5, Bytes::from_static(b"first"))]).expect("encode");
        let second = encode("w", 1, &[], &[(6, Bytes::from_static(b"second"))]).expect("encode");
        let all = [first.clone(), second.clone()].concat();
        for cut in 0..all.len() {
            let d = decode_all(&Bytes::copy_from_slice(&all[..cut]));
            let expect = if cut >= first.len() { 1 } else { 0 };
            assert_eq!(d.messages.len(), expect, "cut at {cut}");
            assert_eq!(d.valid_len + d.ignored, cut);
        }
    }

    #[test]
    fn a_flipped_bit_anywhere_stops_decoding_at_that_frame() {
        let frame = encode("w", 0, &[lease()], &[(5, Bytes::from_static(b"payload"))]).expect("encode");
        for byte in 0..frame.len() {
            let mut bad = frame.clone();
            bad[byte] ^= 0x10;
            let d = decode_all(&Bytes::from(bad));
            assert!(d.messages.is_empty(), "flip in byte {byte} went unnoticed");
            assert!(d.stopped.is_some());
        }
    }

    #[test]
    fn invalid_writer_ids_are_refused() {
        for bad in ["", "a/b", "a.b", "é", &"x".repeat(65)] {
            assert!(encode(bad, 0, &[], &[]).is_err(), "{bad:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn garbage_after_valid_frames_never_panics_and_never_hides_them(
            garbage in proptest::collection::vec(proptest::num::u8::ANY, 0..512)
        ) {
            let valid = encode("w", 3, &[lease()], &[(5, Bytes::from_static(b"kept"))]).expect("encode");
            let data = Bytes::from([valid.clone(), garbage.clone()].concat());
            let d = decode_all(&data);
            proptest::prop_assert!(d.valid_len >= valid.len());
            proptest::prop_assert_eq!(d.messages[0].payload.as_ref(), b"kept");
            proptest::prop_assert_eq!(d.valid_len + d.ignored, data.len());
            // Garbage alone yields nothing: it would need a matching CRC32C.
            proptest::prop_assert!(decode_all(&Bytes::from(garbage)).messages.is_empty());
        }
    }
}
