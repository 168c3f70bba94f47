//! Bag manifests (raw, and with a correct end line so the lines are read) and
//! log configurations, and the bucket arithmetic on what parses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tenure_bag::{LogConfig, Manifest};

fuzz_target!(|data: &[u8]| {
    if data.len() < 9 {
        return;
    }
    let (head, rest) = data.split_at(9);
    let bucket = u64::from_le_bytes(head[1..9].try_into().expect("8 bytes"));
    let input = if head[0] % 2 == 0 {
        rest.to_vec()
    } else {
        let mut m = rest.to_vec();
        m.extend_from_slice(format!("end {:08x}\n", crc32c::crc32c(rest)).as_bytes());
        m
    };
    if let Ok(m) = Manifest::parse(&input, bucket) {
        assert_eq!(Manifest::parse(&m.encode(), bucket), Ok(m));
    }
    if let Ok(cfg) = LogConfig::parse(rest) {
        assert_eq!(LogConfig::parse(cfg.encode().as_bytes()), Ok(cfg));
        let b = cfg.bucket_of(bucket);
        let _ = (cfg.end_of(b), cfg.closable(b, bucket), cfg.clearly_early(b, bucket), cfg.last_closable(bucket));
        let _ = cfg.chunk_range(cfg.chunk_of(b));
    }
});
