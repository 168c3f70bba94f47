//! Framing: `len:u32 id:u32 [server_time_us:u64] body`, little-endian, with
//! `body` in postcard.

use serde::Serialize;

use super::{Request, Response};

/// Appends a request frame with `id` to `out`.
pub fn encode_request(out: &mut Vec<u8>, id: u32, req: &Request<'_>) {
    append_frame(out, &id.to_le_bytes(), req);
}

/// Appends a response frame for request `id` to `out`.
pub fn encode_response(out: &mut Vec<u8>, id: u32, server_time_us: u64, resp: &Response) {
    encode_response_as(out, id, server_time_us, resp);
}

/// Appends a response frame for request `id` to `out`, the body being anything
/// that serialises exactly as a [`Response`] does (the server's borrowed forms).
#[doc(hidden)]
pub fn encode_response_as<T: Serialize>(out: &mut Vec<u8>, id: u32, server_time_us: u64, resp: &T) {
    let mut header = [0; 12];
    header[..4].copy_from_slice(&id.to_le_bytes());
    header[4..].copy_from_slice(&server_time_us.to_le_bytes());
    append_frame(out, &header, resp);
}

/// Appends one frame to `out`: `len:u32`, `header`, then `body` in postcard,
/// where `len` counts the bytes after itself.
fn append_frame<T: Serialize + ?Sized>(out: &mut Vec<u8>, header: &[u8], body: &T) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(header);
    // Serialising plain data into a Vec cannot fail.
    *out = postcard::to_extend(body, std::mem::take(out)).unwrap_or_else(|_| Vec::new());
    let Some(len) = out.len().checked_sub(start + 4) else { return };
    // Every answer is bounded far below 4 GiB; a length that did not fit would
    // be refused by the peer as oversized, never wrap to a small one.
    out[start..start + 4].copy_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
}

/// Where the next frame in `buf` ends: `Ok(None)` if more bytes are needed,
/// `Err` if the length field is out of bounds (`min` ..= `max` bytes after it).
pub fn frame_len(buf: &[u8], min: usize, max: usize) -> Result<Option<usize>, String> {
    let Some(head) = buf.get(..4) else { return Ok(None) };
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len < min || len + 4 > max {
        return Err(format!("frame length {len} is not within {min} to {} bytes", max - 4));
    }
    Ok((buf.len() >= 4 + len).then_some(4 + len))
}

/// Splits a response frame (as delimited by [`frame_len`]) into id, server time
/// and body.
pub fn split_response(frame: &[u8]) -> Option<(u32, u64, &[u8])> {
    let id = u32::from_le_bytes(frame.get(4..8)?.try_into().ok()?);
    let time = u64::from_le_bytes(frame.get(8..16)?.try_into().ok()?);
    Some((id, time, frame.get(16..)?))
}

/// Decodes one message that must fill `body` exactly: bytes after it are an
/// error, so every message has one encoding (postcard alone would ignore them).
pub fn decode<'a, T: serde::Deserialize<'a>>(body: &'a [u8]) -> Result<T, String> {
    match postcard::take_from_bytes::<T>(body) {
        Ok((msg, [])) => Ok(msg),
        Ok((_, rest)) => Err(format!("{} bytes after the message", rest.len())),
        Err(e) => Err(e.to_string()),
    }
}

/// Splits a request frame into id and body.
pub fn split_request(frame: &[u8]) -> Option<(u32, &[u8])> {
    let id = u32::from_le_bytes(frame.get(4..8)?.try_into().ok()?);
    Some((id, frame.get(8..)?))
}
