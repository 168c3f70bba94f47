//! Fuzzing witness decoding and verification, public keys, and `tenure://` URLs.
//!
//! Witnesses travel inside bag frames and are checked offline by audits, from
//! bytes anyone may have written: [`witness::verify`] and
//! [`Witness::decode_unverified`] must never panic, must accept exactly what the
//! server signs, and no change to a signed witness may verify. `tenure://` URLs
//! and their parameters come from users and scripts: refused with a reason, or
//! a store whose servers and settings are what the URL says.
//!
//! `PROPTEST_CASES=20000 cargo nextest run -p tenure-server -E 'test(/^fuzz_witness_url::/)'`
//! for a long run.

use crate::fuzz_support;

use std::sync::LazyLock;

use fuzz_support::{bytes, config, mutate, mutations, peak_during};
use proptest::prelude::*;
use tenure_core::{EndedHow, Mode, OpenOptions};
use tenure_server::TenureStore;
use tenure_server::client::{place, rendezvous_score};
use tenure_server::witness::{self, Signer, Witness, WitnessError, WitnessKind, WitnessPredecessor};

static SIGNER: LazyLock<Signer> = LazyLock::new(|| Signer::from_seed(&[42; 32]));

fn short(max: usize) -> impl Strategy<Value = String> {
    proptest::string::string_regex(&format!("[a-z0-9/._-]{{0,{max}}}|.{{0,{max}}}")).expect("regex")
}

/// Witnesses as the server makes them: names and nonces of at most 255 bytes,
/// a predecessor's nonce non-empty when known.
fn witness_value() -> BoxedStrategy<Witness> {
    let kind = prop_oneof![
        Just(WitnessKind::Grant),
        Just(WitnessKind::Renewal),
        Just(WitnessKind::Tentative),
        Just(WitnessKind::Upgrade)
    ];
    let how = prop_oneof![
        Just(EndedHow::Released),
        Just(EndedHow::Dropped),
        Just(EndedHow::Expired),
        Just(EndedHow::Broken),
        Just(EndedHow::Retaken),
        Just(EndedHow::Corrupt)
    ];
    let pred = (
        any::<u64>(),
        proptest::option::of(short(40).prop_filter("known nonces are not empty", |n| !n.is_empty())),
        how,
        any::<u64>(),
        proptest::option::of(any::<u64>()),
    )
        .prop_map(|(token, nonce, how, at_ms, watermark_ms)| WitnessPredecessor {
            token,
            nonce,
            how,
            at_ms,
            watermark_ms,
        });
    (
        kind,
        short(80),
        prop_oneof![Just(Mode::Exclusive), Just(Mode::Shared)],
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        short(40),
        proptest::option::of(pred),
    )
        .prop_map(|(kind, name, mode, token, deadline_ms, server_time_us, holder_nonce, predecessor)| Witness {
            kind,
            name,
            mode,
            token,
            deadline_ms,
            server_time_us,
            holder_nonce,
            predecessor,
        })
        .boxed()
}

fn body(w: &Witness) -> Vec<u8> {
    let mut b = Vec::new();
    w.encode_body(&mut b);
    b
}

/// Verification of `bytes` never panics, allocates in proportion to them, and
/// agrees with decoding: a witness that verifies decodes to the same content.
fn check(key: &[u8], bytes: &[u8]) -> Result<Option<Witness>, TestCaseError> {
    let (verified, peak) = peak_during(|| witness::verify(key, bytes));
    prop_assert!(peak <= 4 * bytes.len() + 16 * 1024, "{peak} bytes to verify {} bytes", bytes.len());
    let decoded = Witness::decode_unverified(bytes);
    if let Ok(w) = &verified {
        prop_assert_eq!(decoded.as_ref().ok(), Some(w));
    }
    if let Err(WitnessError::Malformed(_)) = &verified {
        prop_assert!(decoded.is_err(), "verify says malformed, decode accepts");
    }
    Ok(verified.ok())
}

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn hex_keys_and_seeds_parse_or_are_refused(text in "[0-9a-fA-F ]{0,70}|.{0,70}") {
        match witness::public_key_from_hex(&text) {
            Ok(k) => prop_assert_eq!(hex::encode(k), text.trim().to_ascii_lowercase()),
            Err(e) => prop_assert!(matches!(e, WitnessError::BadKey(_))),
        }
        prop_assert_eq!(Signer::from_hex_seed(&text).is_ok(), witness::public_key_from_hex(&text).is_ok());
    }

    #[test]
    fn arbitrary_bytes_and_keys_never_verify_or_panic(key in bytes(40), data in bytes(600)) {
        prop_assert!(check(&key, &data)?.is_none());
        prop_assert!(check(&SIGNER.public_key(), &data)?.is_none());
    }
}

proptest! {
    // ed25519 verification takes tens of milliseconds in an unoptimised test
    // build: few cases here by default; `--cargo-profile release` for many.
    #![proptest_config(config(40))]

    #[test]
    fn signed_witnesses_verify_to_what_was_signed(ws in proptest::collection::vec(witness_value(), 1..6)) {
        let bodies: Vec<Vec<u8>> = ws.iter().map(body).collect();
        let signed = SIGNER.sign_batch(&bodies).expect("bodies fit");
        for (w, bytes) in ws.iter().zip(&signed) {
            let verified = check(&SIGNER.public_key(), bytes)?;
            prop_assert_eq!(verified.as_ref(), Some(w));
        }
    }

    /// Any change to a signed witness is refused (a changed body, path or
    /// signature cannot verify), and arbitrary bodies the server is made to sign
    /// verify only if they decode.
    #[test]
    fn changed_witnesses_never_verify(w in witness_value(), m in mutations(3), raw_body in bytes(300)) {
        let signed = SIGNER.sign_batch(&[body(&w)]).expect("fits").remove(0);
        let changed = mutate(&signed, &m);
        let verified = check(&SIGNER.public_key(), &changed)?;
        prop_assert!(verified.is_none() || changed == signed, "a changed witness verified");
        let arbitrary = SIGNER.sign_batch(std::slice::from_ref(&raw_body)).expect("fits").remove(0);
        let verified = check(&SIGNER.public_key(), &arbitrary)?;
        prop_assert_eq!(verified.is_some(), Witness::decode_unverified(&arbitrary).is_ok());
    }

}

#[test]
fn names_and_nonces_longer_than_255_bytes_are_cut_at_a_character_boundary() {
    let name = "é".repeat(200);
    let w = Witness {
        kind: WitnessKind::Grant,
        name: name.clone(),
        mode: Mode::Exclusive,
        token: 1,
        deadline_ms: 2,
        server_time_us: 3,
        holder_nonce: "n".repeat(300),
        predecessor: None,
    };
    let signed = SIGNER.sign_batch(&[body(&w)]).expect("fits").remove(0);
    let back = witness::verify(&SIGNER.public_key(), &signed).expect("verifies");
    assert!(name.starts_with(&back.name) && back.name.len() == 254, "{}", back.name.len());
    assert_eq!(back.holder_nonce.len(), 255);
}

/// A body longer than the witness's 16-bit length field is refused, never
/// signed with a wrapped length (fuzz/FINDINGS.md, F6).
#[test]
fn a_body_over_64_kib_is_refused() {
    assert!(matches!(SIGNER.sign_batch(&[vec![0u8; 70_000]]), Err(WitnessError::Malformed(_))));
    assert!(SIGNER.sign_batch(&[vec![0u8; 65_535]]).is_ok());
}

// ---------------------------------------------------------------------------
// tenure:// URLs.

fn host_port() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => ("[a-z0-9.-]{1,12}|127\\.0\\.0\\.1|\\[::1\\]", prop_oneof![any::<u16>().prop_map(|p| p.to_string()), "[0-9]{0,7}|-1|\\+1|0x10"])
            .prop_map(|(h, p)| format!("{h}:{p}")),
        1 => "[a-z:,/?&=@]{0,16}",
        1 => ".{0,16}",
    ]
}

fn query() -> impl Strategy<Value = String> {
    let key =
        prop_oneof![Just("timeout"), Just("spin"), Just("connections"), Just("auth_token"), Just("bogus"), Just("")];
    let value = prop_oneof![
        Just(u64::MAX.to_string()),
        Just("18446744073709551616".to_string()),
        Just("0".to_string()),
        Just("-1".to_string()),
        any::<u32>().prop_map(|n| n.to_string()),
        "[a-z0-9%=&]{0,6}",
    ];
    proptest::collection::vec((key, value, any::<bool>()), 0..4).prop_map(|kvs| {
        kvs.into_iter()
            .map(|(k, v, eq)| if eq { format!("{k}={v}") } else { k.to_string() })
            .collect::<Vec<_>>()
            .join("&")
    })
}

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn tenure_urls_open_to_the_servers_they_name_or_are_refused(
        hosts in proptest::collection::vec(host_port(), 1..4),
        q in proptest::option::of(query()),
        raw in proptest::option::of(".{0,40}"),
    ) {
        let url = raw.unwrap_or_else(|| format!("tenure://{}{}", hosts.join(","), q.map(|q| format!("?{q}")).unwrap_or_default()));
        match TenureStore::new(&url, &OpenOptions::default()) {
            Ok(store) => {
                let servers = store.servers();
                prop_assert!(!servers.is_empty());
                for s in &servers {
                    let (h, p) = s.rsplit_once(':').expect("host:port");
                    prop_assert!(!h.is_empty() && p.parse::<u16>().is_ok(), "{s:?}");
                }
                let mut unique = servers.clone();
                unique.sort();
                unique.dedup();
                prop_assert_eq!(unique.len(), servers.len());
                // One server places every name on itself; several, only once
                // they have said their identities (nothing is connected here).
                prop_assert_eq!(store.server_for("a/b"), (servers.len() == 1).then_some(0));
            }
            Err(tenure_core::Error::InvalidStore { reason, .. }) => prop_assert!(!reason.is_empty()),
            Err(other) => prop_assert!(false, "unexpected error kind for {url:?}: {other:?}"),
        }
    }

    #[test]
    fn rendezvous_picks_the_same_server_in_any_order(ids in proptest::collection::btree_set("[a-z0-9]{1,16}", 2..5), name in ".{0,30}") {
        let ids: Vec<String> = ids.into_iter().collect();
        let backward: Vec<String> = ids.iter().rev().cloned().collect();
        prop_assert_eq!(&ids[place(&ids, &name)], &backward[place(&backward, &name)]);
        prop_assert_eq!(rendezvous_score(&ids[0], &name), rendezvous_score(&ids[0], &name));
    }
}

/// `timeout` is range-checked like every duration from a user
/// (`tenure_core::limits::MAX_DURATION`, 10 years; fuzz/FINDINGS.md, F7).
#[test]
fn an_absurd_timeout_is_refused() {
    let r = TenureStore::new("tenure://127.0.0.1:1?timeout=584000000y", &OpenOptions::default());
    assert!(r.is_err(), "a timeout of 584 million years must be refused");
}
