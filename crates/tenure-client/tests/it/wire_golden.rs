//! The wire protocol's bytes, pinned. The format is documented as stable
//! (variants and fields only ever appended; see `tenure_client::wire`), and so
//! are witnesses and rendezvous scores (every client must compute the same):
//! each frame below is encoded and compared with the bytes an earlier build
//! wrote, then the bytes are decoded again and compared with what was encoded.
//! A change that moves a byte fails here; a deliberate extension appends a
//! case.

use tenure_client::remote::rendezvous_score;
use tenure_client::wire::{
    self, AcquireReply, AskWire, BreakNoteWire, ErrorCode, GrantWire, HolderOwned, HolderViewWire, Outcome,
    PredecessorWire, RefWire, ReleaseWire, RenewWire, Request, Response, StateWire,
};
use tenure_client::witness::seal_batch;
use tenure_client::witness::{WitnessKind, WitnessPredecessor};
use tenure_client::{Witness, verify};
use tenure_core::{EndedHow, Mode};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).expect("ascii"), 16).expect("hex digit pair"))
        .collect()
}

fn holder() -> wire::HolderWire<'static> {
    wire::HolderWire { nonce: "n1", pid: 42, host: "h", user: "u", version: "0.1.0", label: Some("job") }
}

fn holder_owned() -> HolderOwned {
    HolderOwned {
        nonce: "n1".into(),
        pid: 42,
        host: "h".into(),
        user: "u".into(),
        version: "0.1.0".into(),
        label: Some("job".into()),
    }
}

fn grant_ref() -> RefWire<'static> {
    RefWire { name: "a/b", token: 7, reservation: None, nonce: "n1" }
}

/// Every request variant, in declaration order, with the bytes of its frame
/// (request id 9).
fn requests() -> Vec<(Request<'static>, &'static str)> {
    let ask =
        || AskWire { name: "a/b", mode: Mode::Shared, ttl_ms: 30_000, holder: holder(), retake: true, meta: Some("m") };
    vec![
        (
            Request::Hello { magic: wire::MAGIC, version: 2, auth: Some(b"tok") },
            "0f000000 09000000 00544e5257020103746f6b",
        ),
        (
            Request::Acquire { tentative: false, asks: vec![ask()] },
            "26000000 09000000 01000103612f6201b0ea01026e312a0168017505302e312e3001036a6f620101016d",
        ),
        (
            Request::Upgrade(vec![RefWire { reservation: Some(3), ..grant_ref() }]),
            "10000000 09000000 020103612f62070103026e31",
        ),
        (
            Request::Renew(vec![RenewWire { grant: grant_ref(), ttl_ms: 1_000 }]),
            "11000000 09000000 030103612f620700026e31e807",
        ),
        (
            Request::Release(vec![ReleaseWire {
                grant: grant_ref(),
                dropped: false,
                watermark_ms: Some(5),
                meta: None,
            }]),
            "13000000 09000000 040103612f620700026e3100010500",
        ),
        (Request::Inspect("a/b"), "09000000 09000000 0503612f62"),
        (Request::List { prefix: "a", limit: 100, after: Some("a/b") }, "0d000000 09000000 060161640103612f62"),
        (
            Request::Break {
                name: "a/b",
                version: 300,
                only_token: Some(7),
                note: Some(BreakNoteWire { by: holder(), reason: Some("hung") }),
            },
            "27000000 09000000 0703612f62ac02010701026e312a0168017505302e312e3001036a6f62010468756e67",
        ),
        (Request::Ping, "05000000 09000000 08"),
        (
            Request::Wait { ask: ask(), wait_ms: 5_000 },
            "26000000 09000000 0903612f6201b0ea01026e312a0168017505302e312e3001036a6f620101016d8827",
        ),
        (Request::Unwait { id: 9 }, "06000000 09000000 0a09"),
        (Request::Waiters("a/b"), "09000000 09000000 0b03612f62"),
        (Request::Identify, "05000000 09000000 0c"),
        (Request::Servers(vec!["ab", "c"]), "0b000000 09000000 0d020261620163"),
    ]
}

fn grant() -> GrantWire {
    GrantWire {
        token: 7,
        deadline_ms: 1_700_000_000_000,
        version: 2,
        predecessor: Some(predecessor()),
        witness: vec![0xaa, 0xbb],
    }
}

fn predecessor() -> PredecessorWire {
    PredecessorWire {
        token: 6,
        holder: Some(holder_owned()),
        how: EndedHow::Broken,
        at_ms: 1_699_999_999_000,
        watermark_ms: None,
        meta: None,
        acquired_ms: Some(1_699_999_990_000),
        broken: Some((holder_owned(), Some("hung".into()))),
    }
}

fn view() -> HolderViewWire {
    HolderViewWire {
        holder: holder_owned(),
        mode: Mode::Exclusive,
        token: 7,
        deadline_ms: 1_700_000_000_000,
        ttl_ms: 30_000,
        expires_in_ms: 29_000,
        acquired_ms: None,
    }
}

/// Every response variant, and every acquisition outcome, with the bytes of its
/// frame (request id 9, server time 1 µs).
fn responses() -> Vec<(Response, &'static str)> {
    vec![
        (
            Response::Hello {
                version: 2,
                public_key: [1; 32],
                max_lease_ms: 60_000,
                quarantine_left_ms: 0,
                started_us: 5,
            },
            "33000000 09000000 0100000000000000 00020101010101010101010101010101010101010101010101010101010101010101e0d4030005",
        ),
        (
            Response::Acquired(AcquireReply::Granted(vec![grant()])),
            "5a000000 09000000 0100000000000000 0100010780d095ffbc3102010601026e312a0168017505302e312e3001036a6f620398c895ffbc31000001f08195ffbc3101026e312a0168017505302e312e3001036a6f62010468756e6702aabb",
        ),
        (
            Response::Acquired(AcquireReply::Busy { index: 0, holders: vec![view()], version: 3 }),
            "33000000 09000000 0100000000000000 01010001026e312a0168017505302e312e3001036a6f62000780d095ffbc31b0ea01c8e2010003",
        ),
        (
            Response::Acquired(AcquireReply::Quarantine { left_ms: 1_500 }),
            "10000000 09000000 0100000000000000 0102dc0b",
        ),
        (
            Response::Acquired(AcquireReply::Exhausted { index: 1, last_token: u64::MAX }),
            "19000000 09000000 0100000000000000 010301ffffffffffffffffff01",
        ),
        (
            Response::Granted(vec![Outcome::Ok(grant()), Outcome::Lost("gone".into())]),
            "60000000 09000000 0100000000000000 0202000780d095ffbc3102010601026e312a0168017505302e312e3001036a6f620398c895ffbc31000001f08195ffbc3101026e312a0168017505302e312e3001036a6f62010468756e6702aabb0104676f6e65",
        ),
        (Response::Released(vec![true, false]), "10000000 09000000 0100000000000000 03020100"),
        (
            Response::State(Box::new(StateWire {
                version: Some(3),
                modified_ms: Some(1_700_000_000_000),
                holders: vec![view()],
                expired: Vec::new(),
                last_token: 7,
                watermark_ms: Some(9),
                last: Some(predecessor()),
            })),
            "7d000000 09000000 0100000000000000 0401030180d095ffbc3101026e312a0168017505302e312e3001036a6f62000780d095ffbc31b0ea01c8e2010000070109010601026e312a0168017505302e312e3001036a6f620398c895ffbc31000001f08195ffbc3101026e312a0168017505302e312e3001036a6f62010468756e67",
        ),
        (
            Response::Names { names: vec!["a/b".into(), "c".into()], more: true },
            "15000000 09000000 0100000000000000 050203612f62016301",
        ),
        (Response::Done, "0d000000 09000000 0100000000000000 06"),
        (Response::Pong, "0d000000 09000000 0100000000000000 07"),
        (
            Response::Error { code: ErrorCode::Idle, message: "idle".into() },
            "13000000 09000000 0100000000000000 08080469646c65",
        ),
        (Response::Waiters(300), "0f000000 09000000 0100000000000000 09ac02"),
        (Response::Identity("ab".into()), "10000000 09000000 0100000000000000 0a026162"),
    ]
}

/// A request's variant index, by an exhaustive match: a new variant must be
/// added here, and the tests below then fail until it has a pinned case.
fn request_index(req: &Request<'_>) -> u8 {
    match req {
        Request::Hello { .. } => 0,
        Request::Acquire { .. } => 1,
        Request::Upgrade(_) => 2,
        Request::Renew(_) => 3,
        Request::Release(_) => 4,
        Request::Inspect(_) => 5,
        Request::List { .. } => 6,
        Request::Break { .. } => 7,
        Request::Ping => 8,
        Request::Wait { .. } => 9,
        Request::Unwait { .. } => 10,
        Request::Waiters(_) => 11,
        Request::Identify => 12,
        Request::Servers(_) => 13,
    }
}

/// A response's variant index, and an acquisition reply's, as for requests.
fn response_index(resp: &Response) -> (u8, Option<u8>) {
    match resp {
        Response::Hello { .. } => (0, None),
        Response::Acquired(reply) => (
            1,
            Some(match reply {
                AcquireReply::Granted(_) => 0,
                AcquireReply::Busy { .. } => 1,
                AcquireReply::Quarantine { .. } => 2,
                AcquireReply::Exhausted { .. } => 3,
            }),
        ),
        Response::Granted(_) => (2, None),
        Response::Released(_) => (3, None),
        Response::State(_) => (4, None),
        Response::Names { .. } => (5, None),
        Response::Done => (6, None),
        Response::Pong => (7, None),
        Response::Error { .. } => (8, None),
        Response::Waiters(_) => (9, None),
        Response::Identity(_) => (10, None),
    }
}

#[test]
fn every_request_frame_has_its_pinned_bytes_and_decodes_to_what_was_sent() {
    let indices: Vec<u8> = requests().iter().map(|(r, _)| request_index(r)).collect();
    assert_eq!(indices, (0..=13).collect::<Vec<u8>>(), "one pinned case per variant, in order");
    for (req, want) in requests() {
        let mut frame = Vec::new();
        wire::encode_request(&mut frame, 9, &req);
        assert_eq!(frame[8], request_index(&req), "the body starts with the variant index: {req:?}");
        assert_eq!(hex(&frame), hex(&unhex(want)), "{req:?}");
        assert_eq!(wire::frame_len(&frame, 4, wire::MAX_REQUEST), Ok(Some(frame.len())));
        let (id, body) = wire::split_request(&frame).expect("a request frame");
        assert_eq!(id, 9);
        let back: Request<'_> = wire::decode(body).expect("decodes");
        assert_eq!(format!("{back:?}"), format!("{req:?}"));
    }
}

#[test]
fn every_response_frame_has_its_pinned_bytes_and_decodes_to_what_was_sent() {
    let indices: Vec<(u8, Option<u8>)> = responses().iter().map(|(r, _)| response_index(r)).collect();
    let every: Vec<(u8, Option<u8>)> =
        [(0, None)].into_iter().chain((0..=3).map(|a| (1, Some(a)))).chain((2..=10).map(|i| (i, None))).collect();
    assert_eq!(indices, every, "one pinned case per variant (and acquisition reply), in order");
    for (resp, want) in responses() {
        let mut frame = Vec::new();
        wire::encode_response(&mut frame, 9, 1, &resp);
        let (index, reply) = response_index(&resp);
        assert_eq!(frame[16], index, "the body starts with the variant index: {resp:?}");
        if let Some(reply) = reply {
            assert_eq!(frame[17], reply, "then the acquisition reply's: {resp:?}");
        }
        assert_eq!(hex(&frame), hex(&unhex(want)), "{resp:?}");
        let (id, time, body) = wire::split_response(&frame).expect("a response frame");
        assert_eq!((id, time), (9, 1));
        let back: Response = wire::decode(body).expect("decodes");
        assert_eq!(format!("{back:?}"), format!("{resp:?}"));
    }
}

/// The witness whose signed bytes the tests below pin.
fn pinned_witness() -> Witness {
    Witness {
        kind: WitnessKind::Grant,
        name: "a/b".into(),
        mode: Mode::Exclusive,
        token: 7,
        deadline_ms: 1_700_000_000_000,
        server_time_us: 1_699_999_970_000_000,
        holder_nonce: "n1".into(),
        predecessor: Some(WitnessPredecessor {
            token: 6,
            nonce: Some("n0".into()),
            how: EndedHow::Released,
            at_ms: 1_699_999_960_000,
            watermark_ms: Some(5),
        }),
    }
}

#[test]
fn a_signed_witness_has_its_pinned_bytes_and_verifies_to_its_content() {
    let signer = TestSigner::from_seed(&[7; 32]);
    let witness = pinned_witness();
    let mut body = Vec::new();
    witness.encode_body(&mut body);
    let signed = signer.sign_batch(std::slice::from_ref(&body)).expect("sign").pop().expect("one witness");
    assert_eq!(hex(&signer.public_key()), "ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c");
    // body_len, body (format 2), path_len 0 (a batch of one), signature.
    let want = "4000 02000007000000000000000068e5cf8b010000807c5416240a060003612f62026e3101060000000000000000c0cbe4cf8b010000010500000000000000026e30 00 e4a8a5c74a265dec62630dd5a388e19b94007f0ad37b02d1f1247f227a1794430eaa6744bf5253c37efbc13b70a96e6716e22ce2f7fdfdbbecfd0650235ad307";
    assert_eq!(hex(&signed), want.replace(' ', ""));
    assert_eq!(verify(&signer.public_key(), &signed), Ok(witness.clone()));
    // The signature is the format's, computed here from its definition: a
    // batch of one has its leaf as the root.
    let mut leaf = vec![0u8];
    leaf.extend_from_slice(&body);
    let mut message = b"tenure-witness/2".to_vec();
    message.extend_from_slice(blake3::hash(&leaf).as_bytes());
    assert_eq!(&signed[signed.len() - 64..], signer.0.sign(&message).as_ref());

    // In a batch of two, each witness carries a Merkle path of one step: the
    // side and the sibling's leaf hash.
    let other = Witness { name: "c".into(), predecessor: None, ..witness.clone() };
    let bodies: Vec<Vec<u8>> = [&witness, &other]
        .iter()
        .map(|w| {
            let mut b = Vec::new();
            w.encode_body(&mut b);
            b
        })
        .collect();
    let batch = signer.sign_batch(&bodies).expect("sign a batch");
    // body_len, body, path_len 1, side 0 (the sibling is on the left), its leaf hash, signature.
    let want = "2100 02000007000000000000000068e5cf8b010000807c5416240a06000163026e3100 01 00 8c3d7fe67efab18b2e2d0f97a153324bd68f5a80e31ffbfc079c2fceb0cda370 9aceb49501f4532c9a4bb879b7c8aef4aced389792cfd525e258c79bb5522f20c90bc954a076c782e1d6d3947da9795547970d2fe3c50e8e635d2929ed90660d";
    assert_eq!(hex(&batch[1]), want.replace(' ', ""));
    assert_eq!(&batch[1][0x25..0x45], blake3::hash(&leaf).as_bytes(), "the sibling is the first leaf");
    assert_eq!(verify(&signer.public_key(), &batch[0]), Ok(witness.clone()));
    assert_eq!(verify(&signer.public_key(), &batch[1]), Ok(other.clone()));
}

/// Witnesses of format 1 (SHA-256 trees), which servers wrote before format 2,
/// still verify: they are kept in bags and logs.
#[test]
fn a_format_1_witness_still_verifies_to_its_content() {
    let signer = TestSigner::from_seed(&[7; 32]);
    let witness = pinned_witness();
    let other = Witness { name: "c".into(), predecessor: None, ..witness.clone() };
    // As a format-1 server signed them: alone, and second in a batch of two.
    let alone = unhex(
        "4000 01000007000000000000000068e5cf8b010000807c5416240a060003612f62026e3101060000000000000000c0cbe4cf8b010000010500000000000000026e30 00 453c9b088a29528379cd2a3b29836a8c59dea17846968ebe0562138f67332c217bcb3f90027acec7885e8e9e16d86125834603b5dd0a7159592f38ff0f32db02",
    );
    let second = unhex(
        "2100 01000007000000000000000068e5cf8b010000807c5416240a06000163026e3100 01 00 9133551242ebd8b11b87a3b74aa1bff1adfc9bed466e6f2b42ae3d8812520494 818bfea29acf3b3f1ded0a82f9b769afe61e46713c59e311713dce26c8f6c52d99203b992109f50ec8875933ff55f76a10f467c6c5c0d999cce641d4841cc101",
    );
    assert_eq!(verify(&signer.public_key(), &alone), Ok(witness));
    assert_eq!(verify(&signer.public_key(), &second), Ok(other));
    // The format byte is signed: relabelled as format 2 (whose tree hashes
    // differently), or as a format nobody wrote, it is refused.
    let mut relabelled = alone.clone();
    relabelled[2] = 2;
    assert_eq!(verify(&signer.public_key(), &relabelled), Err(tenure_client::WitnessError::BadSignature));
    relabelled[2] = 3;
    assert!(
        matches!(verify(&signer.public_key(), &relabelled), Err(tenure_client::WitnessError::Malformed(m)) if m.contains("format 3"))
    );
}

#[test]
fn rendezvous_scores_are_pinned() {
    let cases = [
        ("127.0.0.1:7777", "a/b", 9984070220979451770),
        ("127.0.0.1:7778", "a/b", 7972070803285366082),
        ("lease-1.example:7777", "deploy/prod", 10721764246312538402),
        ("", "", 134870256705401553),
    ];
    for (endpoint, name, want) in cases {
        assert_eq!(rendezvous_score(endpoint, name), want, "{endpoint} {name}");
    }
}

/// Every error code's variant index, by an exhaustive match: a new code must
/// be added here (and so appended), and a reordering moves a byte.
fn code_index(code: ErrorCode) -> u8 {
    match code {
        ErrorCode::Protocol => 0,
        ErrorCode::Version => 1,
        ErrorCode::Unauthorized => 2,
        ErrorCode::Invalid => 3,
        ErrorCode::Overloaded => 4,
        ErrorCode::Changed => 5,
        ErrorCode::Nothing => 6,
        ErrorCode::Quarantine => 7,
        ErrorCode::Idle => 8,
    }
}

#[test]
fn every_error_code_has_its_pinned_index() {
    use ErrorCode::*;
    for code in [Protocol, Version, Unauthorized, Invalid, Overloaded, Changed, Nothing, Quarantine, Idle] {
        let mut frame = Vec::new();
        wire::encode_response(&mut frame, 9, 1, &Response::Error { code, message: String::new() });
        // len, id, time, then Response::Error (index 8), the code, an empty message.
        assert_eq!(&frame[16..], &[8, code_index(code), 0], "{code:?}");
        let (_, _, body) = wire::split_response(&frame).expect("a response frame");
        match wire::decode::<Response>(body).expect("decodes") {
            Response::Error { code: back, .. } => assert_eq!(back, code),
            other => panic!("{other:?}"),
        }
    }
}

/// Signs as the server does (ed25519 is deterministic, RFC 8032: any signer
/// gives the same bytes), with the protocol's Merkle sealing.
struct TestSigner(ring::signature::Ed25519KeyPair);

impl TestSigner {
    fn from_seed(seed: &[u8; 32]) -> Self {
        Self(ring::signature::Ed25519KeyPair::from_seed_unchecked(seed).expect("any 32 bytes are a seed"))
    }

    fn public_key(&self) -> [u8; 32] {
        use ring::signature::KeyPair as _;
        self.0.public_key().as_ref().try_into().expect("32 bytes")
    }

    fn sign_batch(&self, bodies: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, tenure_client::WitnessError> {
        seal_batch(bodies, |message| self.0.sign(message).as_ref().try_into().expect("64 bytes"))
    }
}
