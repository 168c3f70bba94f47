//! The server's witness signer. The witness format, its verification and
//! the batch's Merkle paths are protocol, defined in `tenure-client`
//! ([`tenure_client::witness`]) and re-exported here.

use ring::signature::{Ed25519KeyPair, KeyPair as _};

pub use tenure_client::witness::*;

/// The server's signing key.
pub struct Signer {
    key: Ed25519KeyPair,
    public_key: [u8; 32],
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer").field("public_key", &hex::encode(self.public_key())).finish()
    }
}

impl Signer {
    /// A signer from a 32-byte ed25519 secret seed.
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        let key = Ed25519KeyPair::from_seed_unchecked(seed).expect("any 32 bytes are an ed25519 seed");
        let public_key = key.public_key().as_ref().try_into().expect("an ed25519 public key is 32 bytes");
        Self { key, public_key }
    }

    /// A signer with a fresh random key.
    pub fn generate() -> Self {
        Self::from_seed(&rand::random::<[u8; 32]>())
    }

    /// A signer from a seed written as 64 hex digits (surrounding whitespace ignored).
    pub fn from_hex_seed(text: &str) -> Result<Self, WitnessError> {
        let seed = public_key_from_hex(text).map_err(|_| WitnessError::BadKey("not 64 hex digits".into()))?;
        Ok(Self::from_seed(&seed))
    }

    /// A fresh random seed as 64 hex digits, for a key file.
    pub fn generate_hex_seed() -> String {
        hex::encode(rand::random::<[u8; 32]>())
    }

    /// The public key as 64 hex digits.
    pub fn public_key_hex(&self) -> String {
        hex::encode(self.public_key())
    }

    /// The 32-byte public key.
    pub fn public_key(&self) -> [u8; 32] {
        self.public_key
    }

    /// Signs a batch of witness bodies (as written by [`Witness::encode_body`]) with
    /// one signature; returns each body's complete witness, in order. A body
    /// longer than a witness can say (65,535 bytes) is refused.
    pub fn sign_batch(&self, bodies: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, WitnessError> {
        seal_batch(bodies, |message| self.sign(message))
    }

    fn sign(&self, message: &[u8; 48]) -> [u8; 64] {
        let mut out = [0u8; 64];
        out.copy_from_slice(self.key.sign(message).as_ref());
        out
    }

    /// Completes witnesses started by [`witness_buf`] and filled with a body: fills
    /// in the length, appends each one's Merkle path and the batch's signature.
    pub(crate) fn sign_in_place(&self, witnesses: &mut [&mut Vec<u8>]) {
        seal(witnesses, |message| self.sign(message));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_core::{EndedHow, Mode};

    fn witness(i: u64) -> Witness {
        Witness {
            kind: WitnessKind::Grant,
            name: format!("orders/{i}"),
            mode: Mode::Exclusive,
            token: 1_000 + i,
            deadline_ms: 1_767_225_630_000,
            server_time_us: 1_767_225_600_000_000,
            holder_nonce: "9f2c4e1ab3d07c55".into(),
            predecessor: i.is_multiple_of(2).then(|| WitnessPredecessor {
                token: 999 + i,
                nonce: Some("0123456789abcdef".into()),
                how: EndedHow::Expired,
                at_ms: 1_767_225_599_000,
                watermark_ms: Some(1_767_225_598_000),
            }),
        }
    }

    fn body(w: &Witness) -> Vec<u8> {
        let mut b = Vec::new();
        w.encode_body(&mut b);
        b
    }

    #[test]
    fn every_witness_of_a_batch_verifies_on_its_own() {
        let signer = Signer::generate();
        for n in [1usize, 2, 3, 5, 8, 13] {
            let ws: Vec<Witness> = (0..n as u64).map(witness).collect();
            let signed = signer.sign_batch(&ws.iter().map(body).collect::<Vec<_>>()).expect("bodies fit");
            for (w, bytes) in ws.iter().zip(&signed) {
                assert_eq!(&verify(&signer.public_key(), bytes).expect("verifies"), w, "batch of {n}");
            }
        }
    }

    #[test]
    fn the_signature_is_the_standard_deterministic_ed25519_one() {
        // RFC 8032, section 7.1, TEST 1 (the empty message).
        let seed: [u8; 32] = hex::decode("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
            .expect("hex")
            .try_into()
            .expect("32 bytes");
        let signer = Signer::from_seed(&seed);
        assert_eq!(signer.public_key_hex(), "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
        let sig = signer.key.sign(b"");
        assert_eq!(
            hex::encode(sig.as_ref()),
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
        );
        // A batch of one: the root is the leaf, and the signature covers the
        // format's context and that root.
        let b = body(&witness(1));
        let signed = signer.sign_batch(std::slice::from_ref(&b)).expect("bodies fit");
        let expected = signer.sign(&signed_message(&leaf_hash(&b)));
        assert_eq!(&signed[0][signed[0].len() - 64..], &expected[..]);
        assert_eq!(verify(&signer.public_key(), &signed[0]).expect("verifies"), witness(1));
    }

    #[test]
    fn a_changed_byte_or_another_key_fails_verification() {
        let signer = Signer::generate();
        let ws: Vec<Witness> = (0..3).map(witness).collect();
        let signed = signer.sign_batch(&ws.iter().map(body).collect::<Vec<_>>()).expect("bodies fit");
        let other = Signer::generate();
        assert_eq!(verify(&other.public_key(), &signed[1]), Err(WitnessError::BadSignature));
        for i in 0..signed[1].len() {
            let mut bad = signed[1].clone();
            bad[i] ^= 0x40;
            assert!(verify(&signer.public_key(), &bad).is_err(), "flipping byte {i} must not verify");
        }
    }

    #[test]
    fn small_order_keys_and_rs_are_refused() {
        let signer = Signer::generate();
        let mut signed = signer.sign_batch(&[body(&witness(3))]).expect("bodies fit").remove(0);
        let mut one = [0u8; 32];
        one[0] = 1;
        let mut minus_one = [0xffu8; 32];
        minus_one[0] = 0xec;
        for key in [[0u8; 32], one, minus_one] {
            assert!(matches!(verify(&key, &signed), Err(WitnessError::BadKey(_))), "{}", hex::encode(key));
        }
        let n = signed.len();
        signed[n - 64..n - 32].copy_from_slice(&one);
        assert_eq!(verify(&signer.public_key(), &signed), Err(WitnessError::BadSignature));
    }

    #[test]
    fn truncated_or_garbage_bytes_are_malformed_not_a_panic() {
        let signer = Signer::generate();
        let signed = signer.sign_batch(&[body(&witness(2))]).expect("bodies fit");
        for cut in 0..signed[0].len() {
            assert!(verify(&signer.public_key(), &signed[0][..cut]).is_err());
        }
        assert!(matches!(verify(&signer.public_key(), b"garbage"), Err(WitnessError::Malformed(_))));
        assert!(matches!(verify(&[1, 2, 3], &signed[0]), Err(WitnessError::BadKey(_))));
        let mut extra = signed[0].clone();
        extra.push(0);
        assert!(matches!(verify(&signer.public_key(), &extra), Err(WitnessError::Malformed(_))));
    }

    #[test]
    fn public_key_round_trips_through_hex() {
        let signer = Signer::generate();
        let hex_key = hex::encode(signer.public_key());
        assert_eq!(public_key_from_hex(&hex_key), Ok(signer.public_key()));
        assert!(public_key_from_hex("zz").is_err());
    }

    #[test]
    fn tentative_witnesses_do_not_authorize_writes() {
        assert!(!WitnessKind::Tentative.authorizes_writes());
        assert!(WitnessKind::Upgrade.authorizes_writes() && WitnessKind::Grant.authorizes_writes());
    }
}
