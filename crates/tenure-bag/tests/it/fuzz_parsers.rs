//! Fuzzing every decoder of bytes a bag reads back from storage: frames (data
//! files and batch objects), manifests, the log configuration and snapshots.
//!
//! A bag lives in a directory or bucket shared with other tenants, so each of
//! these may hold anything. Every decoder must return (never panic), allocate in
//! proportion to its input (never to a length or count it read), and what it
//! accepts must be what the encoder would have written: decoding then encoding
//! gives the same bytes. Checksums would stop random bytes at the door, so the
//! structure-aware cases put a correct CRC32C around arbitrary or mutated
//! contents to reach the field decoders behind it.
//!
//! `PROPTEST_CASES=50000 cargo nextest run -p tenure-bag --test it fuzz_parsers`
//! for a long run.

use crate::fuzz_support;

use std::sync::Arc;

use bytes::Bytes;
use fuzz_support::{bytes, config, mutate, mutations, peak_during};
use proptest::prelude::*;
use tenure_bag::frame::{self, LeaseStamp, Message, check_writer, is_item_name};
use tenure_bag::snapshot;
use tenure_bag::{LogConfig, Manifest};

/// Most a decoder may allocate: a small multiple of its input, plus room for
/// the bookkeeping of an empty result.
fn allowance(input: usize) -> usize {
    8 * input + 64 * 1024
}

// ---------------------------------------------------------------------------
// Frames.

fn lease() -> BoxedStrategy<LeaseStamp> {
    (
        prop_oneof!["[a-z0-9/._-]{0,16}", any::<String>()],
        any::<u64>(),
        any::<u64>(),
        proptest::option::of(any::<u64>()),
        "[0-9a-f]{0,20}",
        proptest::option::of(proptest::collection::vec(any::<u8>(), 1..80)),
    )
        .prop_map(|(name, token, deadline_ms, watermark_ms, holder, witness)| LeaseStamp {
            name,
            token,
            deadline_ms,
            watermark_ms,
            holder,
            witness,
        })
        .boxed()
}

fn writer_id() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_-]{1,64}"
}

type BatchParts = (String, u64, Vec<LeaseStamp>, Vec<(u64, Bytes)>);

fn batch() -> BoxedStrategy<BatchParts> {
    (
        writer_id(),
        prop_oneof![Just(0), Just(u64::MAX - 3), any::<u64>()],
        proptest::collection::vec(lease(), 0..3),
        proptest::collection::vec(
            (any::<u64>(), proptest::collection::vec(any::<u8>(), 0..40).prop_map(Bytes::from)),
            0..5,
        ),
    )
        .boxed()
}

/// `body` behind a correct frame header: length and CRC32C.
fn framed(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + body.len());
    out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// A frame the decoder accepted must be exactly what `encode` writes for what it
/// decoded: nothing in it is ignored, nothing is read two ways.
fn assert_reencodes(frame_bytes: &[u8], msgs: &[Message]) -> Result<(), TestCaseError> {
    let Some(first) = msgs.first() else { return Ok(()) };
    for (i, m) in msgs.iter().enumerate() {
        prop_assert_eq!(&m.writer, &first.writer);
        prop_assert_eq!(Some(m.seq), first.seq.checked_add(i as u64));
        prop_assert!(Arc::ptr_eq(&m.leases, &first.leases) || m.leases == first.leases);
        prop_assert!(check_writer(&m.writer).is_ok());
    }
    let payloads: Vec<(u64, Bytes)> = msgs.iter().map(|m| (m.ts_ms, m.payload.clone())).collect();
    let again = frame::encode(&first.writer, first.seq, &first.leases, &payloads).map_err(TestCaseError::fail)?;
    prop_assert_eq!(again.as_slice(), frame_bytes);
    Ok(())
}

/// Decodes `data` as a run of frames, checking the bookkeeping and the memory
/// used; returns the messages.
fn decode_checked(data: &[u8]) -> Result<frame::Decoded, TestCaseError> {
    let input = Bytes::copy_from_slice(data);
    let (d, peak) = peak_during(|| frame::decode_all(&input));
    prop_assert!(peak <= allowance(data.len()), "{peak} bytes allocated to decode {} bytes", data.len());
    prop_assert_eq!(d.valid_len + d.ignored, data.len());
    prop_assert_eq!(d.stopped.is_some(), d.ignored > 0);
    for m in &d.messages {
        prop_assert!(check_writer(&m.writer).is_ok());
    }
    Ok(d)
}

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn arbitrary_bytes_decode_to_nothing_without_panic(data in bytes(1024)) {
        let d = decode_checked(&data)?;
        // Without a matching CRC32C nothing is accepted (a 1 in 2^32 chance is
        // below what this many cases can hit).
        prop_assert!(d.messages.is_empty() || data.len() >= 8);
    }

    #[test]
    fn arbitrary_bodies_behind_a_valid_checksum_are_refused_or_reencode_exactly(body in bytes(512)) {
        let f = framed(&body);
        let d = decode_checked(&f)?;
        if d.stopped.is_none() {
            assert_reencodes(&f, &d.messages)?;
        }
    }

    #[test]
    fn valid_batches_round_trip(parts in batch(), tail in bytes(64)) {
        let (writer, first_seq, leases, messages) = parts;
        let Ok(f) = frame::encode(&writer, first_seq, &leases, &messages) else {
            // Only a sequence past u64::MAX can be refused here, by the decoder.
            return Ok(());
        };
        let mut data = f.clone();
        data.extend_from_slice(&tail);
        let d = decode_checked(&data)?;
        if first_seq.checked_add(messages.len().saturating_sub(1) as u64).is_none() {
            prop_assert!(d.messages.is_empty(), "a batch whose sequence wraps must be refused");
            return Ok(());
        }
        prop_assert!(d.valid_len >= f.len());
        prop_assert_eq!(d.messages.len() >= messages.len(), true);
        for (m, (ts, payload)) in d.messages.iter().zip(&messages) {
            prop_assert_eq!((m.ts_ms, &m.payload), (*ts, payload));
            prop_assert_eq!(&*m.writer, writer.as_str());
            let expected: Vec<LeaseStamp> = leases.iter().cloned().map(|mut l| { if l.witness.as_deref() == Some(&[]) { l.witness = None } l }).collect();
            prop_assert_eq!(&*m.leases, expected.as_slice());
        }
    }

    /// Damage behind a correct checksum (as a buggy writer or a forger makes it):
    /// the field decoders themselves must refuse it or read it consistently.
    #[test]
    fn mutated_frames_with_a_fixed_checksum_are_refused_or_reencode_exactly(parts in batch(), m in mutations(3)) {
        let (writer, first_seq, leases, messages) = parts;
        let Ok(f) = frame::encode(&writer, first_seq, &leases, &messages) else { return Ok(()) };
        let body = mutate(&f[8..], &m);
        let refixed = framed(&body);
        let d = decode_checked(&refixed)?;
        if d.stopped.is_none() {
            assert_reencodes(&refixed, &d.messages)?;
        }
        // And without fixing the checksum: the damage is a torn tail.
        let raw = mutate(&f, &m);
        decode_checked(&raw)?;
    }

    #[test]
    fn item_and_writer_names_never_escape_a_bucket(name in "[A-Za-z0-9_./-]{0,24}|.{0,24}", suffix in "(\\.data)?") {
        if is_item_name(&name, &suffix) {
            prop_assert!(!name.contains('/') && !name.starts_with('.') && !name.contains(".."), "{name:?}");
            prop_assert!(!name.contains(' ') && !name.contains('\n'), "manifest lines split on them: {name:?}");
        }
        if check_writer(&name).is_ok() {
            prop_assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        }
    }
}

#[test]
fn length_fields_claiming_gigabytes_are_refused_before_anything_is_allocated() {
    let ok = frame::encode("w", 0, &[], &[(1, Bytes::from_static(b"x"))]).expect("encode");
    // The header's length: 4 GiB, and just past the limit, with nothing behind it.
    for len in [u32::MAX, (frame::MAX_FRAME + 1) as u32, frame::MAX_FRAME as u32] {
        let mut f = ok.clone();
        f[..4].copy_from_slice(&len.to_le_bytes());
        let (d, peak) = peak_during(|| frame::decode_all(&Bytes::from(f.clone())));
        assert!(d.messages.is_empty() && d.stopped.is_some(), "length {len}");
        assert!(peak < 64 * 1024, "{peak} bytes allocated for a frame claiming {len}");
    }
    // Inside a frame with a valid checksum: message count, payload length,
    // lease-name length, witness length, each at its maximum.
    let with_lease = frame::encode(
        "w",
        0,
        &[LeaseStamp {
            name: "n".into(),
            token: 1,
            deadline_ms: 2,
            watermark_ms: None,
            holder: "h".into(),
            witness: Some(vec![9]),
        }],
        &[(1, Bytes::from_static(b"x"))],
    )
    .expect("encode");
    let body = with_lease[8..].to_vec();
    // Offsets in this body (see the format in frame.rs): version 0, writer_len 1,
    // writer 2, first_seq 3..11, count 11..15, lease_count 15, name_len 16..18,
    // name 18, token 19..27, deadline 27..35, has_watermark 35, holder_len 36,
    // holder 37, witness_len 38..42, witness 42, ts 43..51, payload_len 51..55.
    for (at, width) in [(11, 4), (15, 1), (16, 2), (36, 1), (38, 4), (51, 4)] {
        let mut b = body.clone();
        b[at..at + width].fill(0xff);
        let f = framed(&b);
        let (d, peak) = peak_during(|| frame::decode_all(&Bytes::from(f.clone())));
        assert!(d.messages.is_empty() && d.stopped.is_some(), "field at {at}");
        assert!(peak < 64 * 1024, "{peak} bytes allocated for a field at {at} set to its maximum");
    }
}

// ---------------------------------------------------------------------------
// Manifests.

fn manifest() -> BoxedStrategy<Manifest> {
    (
        any::<u64>(),
        any::<u64>(),
        proptest::collection::btree_map(
            ("[A-Za-z0-9_-]{1,16}", 0u64..1_000_000, "(\\.data)?").prop_map(|(w, n, s)| format!("{w}.{n}{s}")),
            prop_oneof![Just(0), Just(u64::MAX), any::<u64>()],
            0..6,
        ),
    )
        .prop_map(|(bucket, width_ms, items)| Manifest { bucket, width_ms, items })
        .boxed()
}

/// Manifests a closer can write: widths from 1 ms to 10 years, sizes up to an
/// item's cap, buckets before the year 10000.
fn manifest_in_range() -> BoxedStrategy<Manifest> {
    let max_width = tenure_core::limits::millis(tenure_core::limits::MAX_DURATION);
    (
        1..=max_width,
        0u64..=1_000_000,
        proptest::collection::btree_map(
            ("[A-Za-z0-9_-]{1,16}", 0u64..1_000_000).prop_map(|(w, n)| format!("{w}.{n}.data")),
            0..=tenure_bag::layout::MAX_ITEM_BYTES,
            0..6,
        ),
    )
        .prop_map(|(width_ms, k, items)| {
            let bucket = (k * width_ms).min(tenure_core::limits::MAX_TIME_MS / width_ms * width_ms);
            Manifest { bucket, width_ms, items }
        })
        .boxed()
}

/// `body` (the manifest's lines before `end`) with its correct end line.
fn with_end_line(body: &[u8]) -> Vec<u8> {
    let mut out = body.to_vec();
    out.extend_from_slice(format!("end {:08x}\n", crc32c::crc32c(body)).as_bytes());
    out
}

fn assert_manifest_reencodes(bytes: &[u8], bucket: u64) -> Result<(), TestCaseError> {
    let (parsed, peak) = peak_during(|| Manifest::parse(bytes, bucket));
    prop_assert!(peak <= allowance(bytes.len()), "{peak} bytes to parse a manifest of {}", bytes.len());
    if let Ok(m) = parsed {
        prop_assert_eq!(m.bucket, bucket);
        // What was accepted reads back the same from tenure's own encoding.
        prop_assert_eq!(Manifest::parse(&m.encode(), bucket), Ok(m.clone()));
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn manifests_read_back_exactly_or_are_refused(m in manifest()) {
        // Absurd widths and sizes are refused (layout's bounds); what is read is
        // exactly what was written.
        if let Ok(parsed) = Manifest::parse(&m.encode(), m.bucket) {
            prop_assert_eq!(parsed, m.clone());
        }
        prop_assert!(m.bucket == m.bucket.wrapping_add(1) || Manifest::parse(&m.encode(), m.bucket.wrapping_add(1)).is_err());
    }

    #[test]
    fn manifests_within_the_bounds_round_trip(m in manifest_in_range()) {
        prop_assert_eq!(Manifest::parse(&m.encode(), m.bucket), Ok(m.clone()));
    }

    #[test]
    fn arbitrary_manifest_bytes_never_panic(data in bytes(512), bucket in any::<u64>(), fix_crc in any::<bool>()) {
        let data = if fix_crc { with_end_line(&data) } else { data };
        assert_manifest_reencodes(&data, bucket)?;
    }

    #[test]
    fn mutated_manifests_are_refused_or_consistent(m in manifest(), muts in mutations(3), fix_crc in any::<bool>()) {
        let bytes = m.encode();
        let body_end = bytes.len() - "end 00000000\n".len();
        let data = if fix_crc { with_end_line(&mutate(&bytes[..body_end], &muts)) } else { mutate(&bytes, &muts) };
        assert_manifest_reencodes(&data, m.bucket)?;
    }
}

// ---------------------------------------------------------------------------
// The log configuration, and the arithmetic every process does with it.

fn config_text() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        Just("0".to_string()),
        Just(u64::MAX.to_string()),
        Just("1".to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        "[+-]?[0-9]{1,21}"
    ];
    let key = prop_oneof![
        Just("width_ms"),
        Just("grace_ms"),
        Just("max_skew_ms"),
        Just("chunk_buckets"),
        Just("first_bucket_ms"),
        Just("other")
    ];
    proptest::collection::vec((key, value), 0..8).prop_map(|lines| {
        let mut text = "tenure-bag-config 1\n".to_string();
        for (k, v) in lines {
            text.push_str(&format!("{k} {v}\n"));
        }
        text
    })
}

fn assert_config_arithmetic_is_total(cfg: &LogConfig, ts: u64, now: u64) {
    let b = cfg.bucket_of(ts);
    assert!(b <= ts && cfg.bucket_of(b) == b);
    let _ = (cfg.end_of(b), cfg.closable(b, now), cfg.clearly_early(b, now), cfg.chunk_range(cfg.chunk_of(b)));
    if let Some(last) = cfg.last_closable(now) {
        assert!(cfg.closable(last, now) && last >= cfg.first_bucket_ms);
    }
}

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn configurations_parse_to_consistent_values_or_are_refused(
        text in prop_oneof![config_text(), bytes(256).prop_map(|b| String::from_utf8_lossy(&b).into_owned())],
        ts in any::<u64>(),
        now in any::<u64>(),
    ) {
        if let Ok(cfg) = LogConfig::parse(text.as_bytes()) {
            prop_assert!(cfg.width_ms > 0 && cfg.grace_ms > 0 && cfg.chunk_buckets > 0);
            prop_assert!(cfg.first_bucket_ms.is_multiple_of(cfg.width_ms));
            prop_assert_eq!(LogConfig::parse(cfg.encode().as_bytes()), Ok(cfg));
            assert_config_arithmetic_is_total(&cfg, ts, now);
        }
    }
}

// ---------------------------------------------------------------------------
// Snapshots.

fn snapshot_config() -> LogConfig {
    LogConfig { width_ms: 1000, grace_ms: 2000, max_skew_ms: 500, chunk_buckets: 4, first_bucket_ms: 0 }
}

fn chunk_messages() -> BoxedStrategy<Vec<Message>> {
    let leases = proptest::collection::vec(lease(), 0..2).prop_map(Arc::<[LeaseStamp]>::from);
    proptest::collection::vec(
        (4_000u64..8_000, prop_oneof![Just("a"), Just("b-c"), Just("W_9")], any::<u64>(), leases, bytes(24)),
        0..12,
    )
    .prop_map(|raw| {
        let mut msgs: Vec<Message> = raw
            .into_iter()
            .map(|(ts_ms, writer, seq, leases, payload)| Message {
                ts_ms,
                writer: writer.into(),
                seq,
                leases: leases
                    .iter()
                    .cloned()
                    .map(|mut l| {
                        l.witness = l.witness.filter(|w| !w.is_empty());
                        l
                    })
                    .collect::<Vec<_>>()
                    .into(),
                payload: payload.into(),
            })
            .collect();
        frame::sort_messages(&mut msgs);
        msgs
    })
    .boxed()
}

/// `body` with its trailing CRC32C, as snapshots end.
fn with_crc(body: &[u8]) -> Bytes {
    let mut out = body.to_vec();
    out.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    out.into()
}

/// The snapshot decoder reserves room for up to 2^16 writers and 2^16 lease
/// sets (16 bytes each) before it knows they are there: a bounded 2 MiB at most
/// (fuzz/FINDINGS.md, note N3).
const SNAPSHOT_RESERVE: usize = 2 << 20;

fn assert_snapshot_decodes_consistently(data: &Bytes) -> Result<(), TestCaseError> {
    let cfg = snapshot_config();
    let (decoded, peak) = peak_during(|| snapshot::decode(data, &cfg, 1));
    prop_assert!(
        peak <= allowance(data.len()) + SNAPSHOT_RESERVE,
        "{peak} bytes to decode a snapshot of {}",
        data.len()
    );
    if let Ok(msgs) = decoded {
        let (from, to) = cfg.chunk_range(1);
        prop_assert!(msgs.iter().all(|m| (from..to).contains(&m.ts_ms)));
        prop_assert!(msgs.windows(2).all(|w| w[0].key() <= w[1].key()), "out of order");
        prop_assert_eq!(
            snapshot::decode(&snapshot::encode(&cfg, 1, &msgs).map_err(TestCaseError::fail)?, &cfg, 1),
            Ok(msgs)
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn snapshots_round_trip(msgs in chunk_messages()) {
        let cfg = snapshot_config();
        let bytes = snapshot::encode(&cfg, 1, &msgs).map_err(TestCaseError::fail)?;
        prop_assert_eq!(snapshot::decode(&bytes, &cfg, 1), Ok(msgs));
    }

    #[test]
    fn arbitrary_and_mutated_snapshots_are_refused_or_consistent(
        msgs in chunk_messages(),
        muts in mutations(3),
        garbage in bytes(256),
        fix_crc in any::<bool>(),
    ) {
        assert_snapshot_decodes_consistently(&with_crc(&garbage))?;
        assert_snapshot_decodes_consistently(&Bytes::from(garbage))?;
        let bytes = snapshot::encode(&snapshot_config(), 1, &msgs).map_err(TestCaseError::fail)?;
        let mutated = if fix_crc { with_crc(&mutate(&bytes[..bytes.len() - 4], &muts)) } else { Bytes::from(mutate(&bytes, &muts)) };
        assert_snapshot_decodes_consistently(&mutated)?;
    }
}

#[test]
fn snapshot_counts_claiming_billions_are_refused_before_allocating() {
    let cfg = snapshot_config();
    let (from, to) = cfg.chunk_range(1);
    let mut head = b"TBAGSNP1".to_vec();
    for v in [1, from, to, cfg.width_ms] {
        head.extend_from_slice(&v.to_le_bytes());
    }
    for body in [
        [head.clone(), u32::MAX.to_le_bytes().to_vec()].concat(),
        [head.clone(), 0u32.to_le_bytes().to_vec(), u32::MAX.to_le_bytes().to_vec()].concat(),
        [head.clone(), 0u32.to_le_bytes().to_vec(), 0u32.to_le_bytes().to_vec(), u64::MAX.to_le_bytes().to_vec()]
            .concat(),
    ] {
        let data = with_crc(&body);
        let (d, peak) = peak_during(|| snapshot::decode(&data, &cfg, 1));
        assert!(d.is_err());
        assert!(
            peak <= allowance(data.len()) + SNAPSHOT_RESERVE,
            "{peak} bytes for a snapshot of {} bytes",
            data.len()
        );
    }
}

// ---------------------------------------------------------------------------
// Audits: every number in a lease stamp came out of a frame, so from outside.

/// Says every witness verifies, with content taken from its first bytes: the
/// audit's comparisons then meet arbitrary names, tokens and times.
#[derive(Debug)]
struct Gullible;

impl tenure_bag::WitnessVerifier for Gullible {
    fn verify(&self, w: &[u8]) -> Result<tenure_bag::VerifiedWitness, String> {
        let n = |at: usize| w.get(at..at + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
        if w.first() == Some(&0) {
            return Err("refused".into());
        }
        Ok(tenure_bag::VerifiedWitness {
            name: String::from_utf8_lossy(w.get(..2).unwrap_or_default()).into_owned(),
            token: n(1),
            deadline_ms: n(2),
            server_time_ms: n(3),
            watermark_ms: w.get(4).map(|_| n(4)),
            authorizes_writes: w.len().is_multiple_of(2),
        })
    }
}

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn audits_of_arbitrary_stamps_never_panic(msgs in chunk_messages(), max_skew in any::<u64>()) {
        let read = tenure_bag::ReadResult { messages: msgs.clone(), ..Default::default() };
        let report = tenure_bag::audit(&read, Some(&Gullible), max_skew);
        prop_assert_eq!(report.messages, msgs.len() as u64);
        let unverified = tenure_bag::audit(&read, None, max_skew);
        prop_assert_eq!(unverified.witnesses_verified, 0);
    }
}
