use super::*;
use tenure_core::{EndedHow, Predecessor};

#[test]
fn witness_bytes_keep_the_plain_sequence_wire_format() {
    #[derive(Serialize)]
    struct Plain {
        token: u64,
        deadline_ms: u64,
        version: u64,
        predecessor: Option<PredecessorWire>,
        witness: Vec<u8>,
    }
    let witness: Vec<u8> = (0..=255).collect();
    let plain = Plain { token: 7, deadline_ms: 9, version: 3, predecessor: None, witness: witness.clone() };
    let fast = GrantWire { token: 7, deadline_ms: 9, version: 3, predecessor: None, witness };
    let (a, b) = (postcard::to_allocvec(&plain), postcard::to_allocvec(&fast));
    assert_eq!(a.ok(), b.ok());
    let bytes = postcard::to_allocvec(&fast).unwrap_or_default();
    let back: GrantWire = postcard::from_bytes(&bytes).expect("decodes");
    assert_eq!(back.witness, fast.witness);
}

#[test]
fn the_servers_borrowed_answers_encode_exactly_as_the_owned_responses() {
    use super::Granted;
    let holder = Arc::new(Holder {
        nonce: "9f2c4e1ab3d07c55".into(),
        pid: 4242,
        host: "ci-7".into(),
        user: "deploy".into(),
        version: "0.1.0".into(),
        label: Some("job 1234".into()),
    });
    let pred = |meta: Option<&str>, holder: Option<Arc<Holder>>| Predecessor {
        token: 41,
        holder: holder.clone(),
        how: EndedHow::Expired,
        at_ms: 1_767_225_599_500,
        acquired_ms: Some(1_767_225_598_000),
        watermark_ms: Some(1_767_225_599_000),
        meta: meta.map(str::to_string),
        broken: holder.clone().map(|by| tenure_core::BreakNote { by, reason: meta.map(str::to_string) }),
    };
    let grants = vec![
        Granted { token: 42, deadline_ms: 9, version: 3, predecessor: None, witness: vec![1, 2, 3] },
        Granted {
            token: 1 << 50,
            deadline_ms: u64::MAX,
            version: 0,
            predecessor: Some(pred(Some("s3://bucket/x"), Some(holder.clone()))),
            witness: (0..=255).collect(),
        },
        Granted { token: 7, deadline_ms: 1, version: 1, predecessor: Some(pred(None, None)), witness: vec![] },
    ];
    let wire = |g: &Granted| GrantWire {
        token: g.token,
        deadline_ms: g.deadline_ms,
        version: g.version,
        predecessor: g.predecessor.as_ref().map(PredecessorWire::from),
        witness: g.witness.clone(),
    };
    let (mut a, mut b) = (Vec::new(), Vec::new());
    encode_response(&mut a, 5, 77, &Response::Acquired(AcquireReply::Granted(grants.iter().map(wire).collect())));
    encode_response_as(&mut b, 5, 77, &out::Acquired(&grants));
    assert_eq!(a, b);
    let outcomes: Vec<Result<Granted, String>> =
        vec![Ok(grants[1].clone()), Err("our grant was expired".into()), Ok(grants[0].clone())];
    let owned = outcomes
        .iter()
        .map(|o| match o {
            Ok(g) => Outcome::Ok(wire(g)),
            Err(why) => Outcome::Lost(why.clone()),
        })
        .collect();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    encode_response(&mut a, 6, 78, &Response::Granted(owned));
    encode_response_as(&mut b, 6, 78, &out::Outcomes(&outcomes));
    assert_eq!(a, b);
}

#[test]
fn the_clients_borrowed_view_decodes_the_owned_responses() {
    use inbound::{AcquireReplyIn, OutcomeIn, ResponseIn};
    let holder = HolderOwned {
        nonce: "9f2c4e1ab3d07c55".into(),
        pid: 4242,
        host: "ci-7".into(),
        user: "deploy".into(),
        version: "0.1.0".into(),
        label: None,
    };
    let pred = PredecessorWire {
        token: 41,
        holder: Some(holder.clone()),
        how: EndedHow::Broken,
        at_ms: 5,
        watermark_ms: None,
        meta: Some("where".into()),
        acquired_ms: Some(3),
        broken: Some((holder.clone(), Some("hung".into()))),
    };
    let grant = |p: Option<PredecessorWire>| GrantWire {
        token: 42,
        deadline_ms: 9,
        version: 3,
        predecessor: p,
        witness: (0..200).collect(),
    };
    let bytes = |r: &Response| postcard::to_allocvec(r).expect("encodes");
    let acquired = bytes(&Response::Acquired(AcquireReply::Granted(vec![grant(Some(pred.clone())), grant(None)])));
    match postcard::from_bytes::<ResponseIn<'_>>(&acquired).expect("decodes") {
        ResponseIn::Acquired(AcquireReplyIn::Granted(gs)) => {
            assert_eq!(gs.len(), 2);
            let p = gs[0].predecessor.as_ref().expect("predecessor");
            assert_eq!(
                (p.token, p.how, p.at_ms, p.watermark_ms, p.meta, p.acquired_ms),
                (41, EndedHow::Broken, 5, None, Some("where"), Some(3))
            );
            let (by, reason) = p.broken.expect("who broke it");
            assert_eq!((by.nonce, by.pid, reason), ("9f2c4e1ab3d07c55", 4242, Some("hung")));
            let h = p.holder.expect("holder");
            assert_eq!(
                (h.nonce, h.pid, h.host, h.user, h.version, h.label),
                ("9f2c4e1ab3d07c55", 4242, "ci-7", "deploy", "0.1.0", None)
            );
            assert_eq!((gs[1].token, gs[1].deadline_ms, gs[1].version), (42, 9, 3));
            assert_eq!(gs[1].witness, (0..200).collect::<Vec<u8>>().as_slice());
            assert!(gs[1].predecessor.is_none());
        }
        other => panic!("decoded as {other:?}"),
    }
    let outcomes = bytes(&Response::Granted(vec![Outcome::Lost("gone".into()), Outcome::Ok(grant(None))]));
    match postcard::from_bytes::<ResponseIn<'_>>(&outcomes).expect("decodes") {
        ResponseIn::Granted(os) => {
            assert!(matches!(&os[0], OutcomeIn::Lost(why) if why == "gone"));
            assert!(matches!(&os[1], OutcomeIn::Ok(g) if g.token == 42));
        }
        other => panic!("decoded as {other:?}"),
    }
    let busy = bytes(&Response::Acquired(AcquireReply::Busy { index: 1, holders: Vec::new(), version: 8 }));
    assert!(matches!(
        postcard::from_bytes::<ResponseIn<'_>>(&busy),
        Ok(ResponseIn::Acquired(AcquireReplyIn::Busy { index: 1, version: 8, .. }))
    ));
    let quarantine = bytes(&Response::Acquired(AcquireReply::Quarantine { left_ms: 3 }));
    assert!(matches!(
        postcard::from_bytes::<ResponseIn<'_>>(&quarantine),
        Ok(ResponseIn::Acquired(AcquireReplyIn::Quarantine { left_ms: 3 }))
    ));
    let released = bytes(&Response::Released(vec![true, false]));
    assert!(
        matches!(postcard::from_bytes::<ResponseIn<'_>>(&released), Ok(ResponseIn::Released(v)) if v == [true, false])
    );
    let error = bytes(&Response::Error { code: ErrorCode::Invalid, message: "no".into() });
    assert!(matches!(
        postcard::from_bytes::<ResponseIn<'_>>(&error),
        Ok(ResponseIn::Error { code: ErrorCode::Invalid, message }) if message == "no"
    ));
}

#[test]
fn frame_lengths_outside_the_bounds_are_refused_and_short_input_waits() {
    assert_eq!(frame_len(&[1, 0], 4, 100), Ok(None));
    assert_eq!(frame_len(&[8, 0, 0, 0, 1], 4, 100), Ok(None));
    assert_eq!(frame_len(&[4, 0, 0, 0, 1, 2, 3, 4], 4, 100), Ok(Some(8)));
    assert!(frame_len(&[3, 0, 0, 0], 4, 100).is_err());
    assert!(frame_len(&[97, 0, 0, 0], 4, 100).is_err());
}

/// A page of names decodes whole up to the page size; beyond it, both views
/// keep one name more than a page (so that the client can tell, and refuse
/// it) and still decode what follows the names.
#[test]
fn a_page_of_names_keeps_at_most_one_more_than_a_page() {
    use inbound::ResponseIn;
    for (sent, kept) in [(3, 3), (MAX_LIST_PAGE, MAX_LIST_PAGE), (MAX_LIST_PAGE + 1000, MAX_LIST_PAGE + 1)] {
        let names: Vec<String> = (0..sent).map(|i| format!("n/{i:06}")).collect();
        let bytes = postcard::to_allocvec(&Response::Names { names: names.clone(), more: true }).expect("encodes");
        match decode::<Response>(&bytes) {
            Ok(Response::Names { names: got, more: true }) => assert_eq!(got, names[..kept], "{sent} sent"),
            other => panic!("{sent} sent: {other:?}"),
        }
        match decode::<ResponseIn<'_>>(&bytes) {
            Ok(ResponseIn::Names { names: got, more: true }) => assert_eq!(got, names[..kept], "{sent} sent"),
            other => panic!("{sent} sent: {other:?}"),
        }
    }
}

/// Every list in an answer decodes whole up to what a working server sends;
/// beyond it, both views keep one element more (so that the client can tell,
/// and refuse the answer) however many the frame carries: a hostile server's
/// millions of two-byte `Lost("")` outcomes would otherwise take some 300
/// bytes each.
#[test]
fn every_list_in_an_answer_keeps_at_most_one_more_than_a_server_sends() {
    use inbound::{AcquireReplyIn, ResponseIn};
    let grant = || GrantWire { token: 1, deadline_ms: 2, version: 3, predecessor: None, witness: vec![] };
    let view = || HolderViewWire {
        holder: HolderOwned::from(&Holder::current()),
        mode: Mode::Shared,
        token: 1,
        deadline_ms: 2,
        ttl_ms: 3,
        expires_in_ms: 4,
        acquired_ms: None,
    };
    let (batch, holders) = (MAX_BATCH + 1000, MAX_HOLDERS + 1000);
    let state = StateWire {
        version: None,
        modified_ms: None,
        holders: (0..holders).map(|_| view()).collect(),
        expired: (0..holders).map(|_| view()).collect(),
        last_token: 0,
        watermark_ms: None,
        last: None,
    };
    let answers = [
        Response::Granted((0..batch).map(|_| Outcome::Lost(String::new())).collect()),
        Response::Released(vec![true; batch]),
        Response::Acquired(AcquireReply::Granted((0..batch).map(|_| grant()).collect())),
        Response::Acquired(AcquireReply::Busy {
            index: 0,
            holders: (0..holders).map(|_| view()).collect(),
            version: 1,
        }),
        Response::State(Box::new(state)),
    ];
    for answer in answers {
        let bytes = postcard::to_allocvec(&answer).expect("encodes");
        let owned = match decode::<Response>(&bytes).expect("decodes") {
            Response::Granted(os) => vec![os.len()],
            Response::Released(rs) => vec![rs.len()],
            Response::Acquired(AcquireReply::Granted(gs)) => vec![gs.len()],
            Response::Acquired(AcquireReply::Busy { holders, .. }) => vec![holders.len()],
            Response::State(s) => vec![s.holders.len(), s.expired.len()],
            other => panic!("{other:?}"),
        };
        let borrowed = match decode::<ResponseIn<'_>>(&bytes).expect("decodes") {
            ResponseIn::Granted(os) => vec![os.len()],
            ResponseIn::Released(rs) => vec![rs.len()],
            ResponseIn::Acquired(AcquireReplyIn::Granted(gs)) => vec![gs.len()],
            ResponseIn::Acquired(AcquireReplyIn::Busy { holders, .. }) => vec![holders.len()],
            ResponseIn::State(s) => vec![s.holders.len(), s.expired.len()],
            other => panic!("{other:?}"),
        };
        let kept = if owned.len() == 2 || matches!(answer, Response::Acquired(AcquireReply::Busy { .. })) {
            MAX_HOLDERS + 1
        } else {
            MAX_BATCH + 1
        };
        assert!(owned.iter().chain(&borrowed).all(|&n| n == kept), "{owned:?} {borrowed:?}, expected {kept}");
    }
}

/// A peer's words for humans (an error's message, why a grant was lost) are
/// decoded keeping at most `MAX_QUOTED` bytes, cut on a character boundary and
/// marked, in both views; shorter ones whole.
#[test]
fn a_peers_words_are_decoded_keeping_at_most_max_quoted_bytes() {
    use inbound::{OutcomeIn, ResponseIn};
    // Two-byte characters from an odd offset: the cut falls inside one.
    let long = format!("x{}", "é".repeat(MAX_QUOTED));
    for (text, expected) in
        [("short".to_string(), "short".to_string()), (long.clone(), format!("x{}…", "é".repeat(499)))]
    {
        let error = postcard::to_allocvec(&Response::Error { code: ErrorCode::Protocol, message: text.clone() });
        let lost = postcard::to_allocvec(&Response::Granted(vec![Outcome::Lost(text.clone())]));
        let (error, lost) = (error.expect("encodes"), lost.expect("encodes"));
        let got = [
            match decode::<Response>(&error) {
                Ok(Response::Error { message, .. }) => message,
                other => panic!("{other:?}"),
            },
            match decode::<ResponseIn<'_>>(&error) {
                Ok(ResponseIn::Error { message, .. }) => message,
                other => panic!("{other:?}"),
            },
            match decode::<Response>(&lost) {
                Ok(Response::Granted(mut os)) => match os.pop() {
                    Some(Outcome::Lost(why)) => why,
                    other => panic!("{other:?}"),
                },
                other => panic!("{other:?}"),
            },
            match decode::<ResponseIn<'_>>(&lost) {
                Ok(ResponseIn::Granted(mut os)) => match os.pop() {
                    Some(OutcomeIn::Lost(why)) => why,
                    other => panic!("{other:?}"),
                },
                other => panic!("{other:?}"),
            },
        ];
        for g in got {
            assert_eq!(g, expected);
            assert!(g.len() <= MAX_QUOTED + '…'.len_utf8());
        }
    }
}

/// The version the docs name is the version this build speaks: the prose
/// that states it is checked against the constants.
#[test]
fn the_docs_state_the_protocol_version_of_the_constants() {
    let wire = include_str!("mod.rs");
    let lib = include_str!("../lib.rs");
    assert!(wire.contains(&format!("//! Version {PROTOCOL_VERSION} (this one)")), "wire/mod.rs");
    assert!(lib.contains(&format!("//! # Wire protocol (version {PROTOCOL_VERSION})")), "lib.rs heading");
    let range = format!("speaks versions {MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION}");
    assert!(lib.contains(&range), "lib.rs: {range}");
}
