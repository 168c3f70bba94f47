//! Witnesses: arbitrary bytes never verify; an arbitrary body the server signs
//! verifies exactly when it decodes, to what it decodes to.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use tenure_server::witness::{self, Signer, Witness};

static SIGNER: LazyLock<Signer> = LazyLock::new(|| Signer::from_seed(&[42; 32]));

fuzz_target!(|data: &[u8]| {
    assert!(witness::verify(&SIGNER.public_key(), data).is_err(), "forged witness verified");
    let _ = Witness::decode_unverified(data);
    if data.len() <= u16::MAX as usize {
        let signed = SIGNER.sign_batch(&[data.to_vec()]).remove(0);
        let verified = witness::verify(&SIGNER.public_key(), &signed);
        assert_eq!(verified.ok(), Witness::decode_unverified(&signed).ok());
    }
});
