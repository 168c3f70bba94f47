//! Bag frames. The first byte chooses: the rest as raw bytes (a data file), or
//! as a frame body behind a correct header and CRC32C (to reach the field
//! decoders). A frame that decodes must re-encode to the same bytes.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tenure_bag::frame;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let input = if mode % 2 == 0 {
        rest.to_vec()
    } else {
        let mut f = Vec::with_capacity(8 + rest.len());
        f.extend_from_slice(&(rest.len() as u32).to_le_bytes());
        f.extend_from_slice(&crc32c::crc32c(rest).to_le_bytes());
        f.extend_from_slice(rest);
        f
    };
    let d = frame::decode_all(&Bytes::from(input.clone()));
    assert_eq!(d.valid_len + d.ignored, input.len());
    if mode % 2 == 1 && d.stopped.is_none() {
        let Some(first) = d.messages.first() else { return };
        let payloads: Vec<(u64, Bytes)> = d.messages.iter().map(|m| (m.ts_ms, m.payload.clone())).collect();
        let again = frame::encode(&first.writer, first.seq, &first.leases, &payloads).expect("re-encodes");
        assert_eq!(again, input, "a decoded frame re-encodes to its own bytes");
    }
});
