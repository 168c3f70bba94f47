//! Rendezvous hashing of lease names over server identities (part of the
//! protocol: every client, and every server checking a client's placement,
//! must compute the same score).

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

/// The rendezvous score of `name` on the server `endpoint` (its identity, from
/// protocol 5; stable across versions: part of the protocol).
pub fn rendezvous_score(endpoint: &str, name: &str) -> u64 {
    let h = fnv1a(0xcbf2_9ce4_8422_2325, endpoint.as_bytes());
    splitmix64(fnv1a(fnv1a(h, &[0xff]), name.as_bytes()))
}

/// Index in `ids` of the server that owns `name`: the one whose identity has
/// the highest [`rendezvous_score`] with it, a tie going to the smaller
/// identity, so that every order of one list picks the same server. Clients
/// place names with it, and a server checks each acquisition with it against
/// the client's list ([`crate::wire::Request::Servers`]). `ids` is not empty.
pub fn place<S: AsRef<str>>(ids: &[S], name: &str) -> usize {
    let mut best: Option<(u64, &str, usize)> = None;
    for (i, id) in ids.iter().enumerate() {
        let (id, score) = (id.as_ref(), rendezvous_score(id.as_ref(), name));
        if best.is_none_or(|(s, b, _)| score > s || (score == s && id < b)) {
            best = Some((score, id, i));
        }
    }
    best.map_or(0, |(_, _, i)| i)
}
