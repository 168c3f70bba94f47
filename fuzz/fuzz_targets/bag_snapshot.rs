//! Bag snapshots: raw (mode bit 0 clear), or with a correct trailing CRC32C and,
//! with mode bit 1, the magic and the chunk's header written by the harness, so
//! that the fuzzer's bytes are the tables and messages. What decodes is in its
//! chunk, in order, and re-encodes to the same messages.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tenure_bag::{LogConfig, snapshot};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let cfg = LogConfig { width_ms: 1000, grace_ms: 2000, max_skew_ms: 500, chunk_buckets: 4, first_bucket_ms: 0 };
    let chunk = u64::from(mode >> 2);
    let mut input = Vec::with_capacity(rest.len() + 44);
    if mode & 2 != 0 {
        let (from, to) = cfg.chunk_range(chunk);
        input.extend_from_slice(b"TBAGSNP1");
        for v in [chunk, from, to, cfg.width_ms] {
            input.extend_from_slice(&v.to_le_bytes());
        }
    }
    input.extend_from_slice(rest);
    if mode & 1 != 0 {
        let crc = crc32c::crc32c(&input);
        input.extend_from_slice(&crc.to_le_bytes());
    }
    let Ok(msgs) = snapshot::decode(&Bytes::from(input), &cfg, chunk) else { return };
    let again = snapshot::encode(&cfg, chunk, &msgs).expect("re-encodes");
    assert_eq!(snapshot::decode(&again, &cfg, chunk), Ok(msgs));
});
