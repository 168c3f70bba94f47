//! Rendezvous hashing of lease names over servers (part of the protocol: every
//! client must compute the same score).

fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The rendezvous score of `name` on `endpoint` (stable across versions: part of
/// the protocol).
pub fn rendezvous_score(endpoint: &str, name: &str) -> u64 {
    let h = fnv1a(0xcbf2_9ce4_8422_2325, endpoint.as_bytes());
    splitmix64(fnv1a(fnv1a(h, &[0xff]), name.as_bytes()))
}
