//! Bag snapshots, raw and with a correct trailing CRC32C. What decodes is in
//! its chunk, in order, and re-encodes to the same messages.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tenure_bag::{LogConfig, snapshot};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let cfg = LogConfig { width_ms: 1000, grace_ms: 2000, max_skew_ms: 500, chunk_buckets: 4, first_bucket_ms: 0 };
    let mut input = rest.to_vec();
    if mode % 2 == 1 {
        input.extend_from_slice(&crc32c::crc32c(rest).to_le_bytes());
    }
    let Ok(msgs) = snapshot::decode(&Bytes::from(input), &cfg, u64::from(mode / 2 % 4)) else { return };
    let again = snapshot::encode(&cfg, u64::from(mode / 2 % 4), &msgs).expect("re-encodes");
    assert_eq!(snapshot::decode(&again, &cfg, u64::from(mode / 2 % 4)), Ok(msgs));
});
