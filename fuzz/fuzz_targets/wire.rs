//! Lease-server frames: the length field, and request and response bodies.
//! What decodes re-encodes to a message that decodes the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tenure_server::wire::{self, MAX_REQUEST, MAX_RESPONSE, Request, Response};

fuzz_target!(|data: &[u8]| {
    let _ = wire::frame_len(data, 4, MAX_REQUEST);
    if let Ok(Some(n)) = wire::frame_len(data, 12, MAX_RESPONSE) {
        assert!(wire::split_response(&data[..n]).is_some());
    }
    if let Ok(r) = postcard::from_bytes::<Request<'_>>(data) {
        let again = postcard::to_allocvec(&r).expect("encodes");
        let r2 = postcard::from_bytes::<Request<'_>>(&again).expect("decodes its own encoding");
        assert_eq!(postcard::to_allocvec(&r2).expect("encodes"), again);
    }
    if let Ok(r) = postcard::from_bytes::<Response>(data) {
        let again = postcard::to_allocvec(&r).expect("encodes");
        let r2 = postcard::from_bytes::<Response>(&again).expect("decodes its own encoding");
        assert_eq!(postcard::to_allocvec(&r2).expect("encodes"), again);
    }
});
