//! Bag manifests (raw; with a correct end line so the lines are read; and with
//! the harness writing the first two lines too) and log configurations, and
//! the bucket arithmetic on what parses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tenure_bag::{LogConfig, Manifest};

fuzz_target!(|data: &[u8]| {
    if data.len() < 9 {
        return;
    }
    let (head, rest) = data.split_at(9);
    let bucket = u64::from_le_bytes(head[1..9].try_into().expect("8 bytes"));
    let input = match head[0] % 3 {
        0 => rest.to_vec(),
        mode => {
            let mut m = if mode == 2 {
                format!("tenure-bag-manifest 1\nbucket {bucket} 1000\n").into_bytes()
            } else {
                Vec::new()
            };
            m.extend_from_slice(rest);
            let crc = crc32c::crc32c(&m);
            m.extend_from_slice(format!("end {crc:08x}\n").as_bytes());
            m
        }
    };
    if let Ok(m) = Manifest::parse(&input, bucket) {
        assert_eq!(Manifest::parse(&m.encode(), bucket), Ok(m));
    }
    let config = if head[0] % 2 == 0 { rest.to_vec() } else { [&b"tenure-bag-config 1\n"[..], rest].concat() };
    if let Ok(cfg) = LogConfig::parse(&config) {
        assert_eq!(LogConfig::parse(cfg.encode().as_bytes()), Ok(cfg));
        let b = cfg.bucket_of(bucket);
        let _ = (cfg.end_of(b), cfg.closable(b, bucket), cfg.clearly_early(b, bucket), cfg.last_closable(bucket));
        let _ = cfg.chunk_range(cfg.chunk_of(b));
    }
});
