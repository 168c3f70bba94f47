//! The server's answers to acquisitions, renewals and upgrades, encoded straight
//! from the table's [`Granted`] values: the same bytes as [`super::Response::Acquired`]
//! with [`super::AcquireReply::Granted`], or [`super::Response::Granted`], without first copying
//! every predecessor's holder into owned strings. Variant indices are those of
//! the owned enums (postcard writes only the index), checked by a test.

use serde::Serialize;
use serde::ser::{SerializeSeq, SerializeStruct, Serializer};
use tenure_core::Predecessor;

use super::Granted;
use super::HolderWire;

/// `Response::Acquired(AcquireReply::Granted(grants))`.
#[derive(Debug)]
pub struct Acquired<'a>(pub &'a [Granted]);
/// `Response::Granted(outcomes)`: `Ok` grants, or `Lost` with why.
#[derive(Debug)]
pub struct Outcomes<'a>(pub &'a [Result<Granted, String>]);

struct Grants<'a>(&'a [Granted]);
struct Grant<'a>(&'a Granted);
struct Pred<'a>(&'a Predecessor);
struct Bytes<'a>(&'a [u8]);
enum OutcomeRef<'a> {
    Ok(&'a Granted),
    Lost(&'a str),
}

impl Serialize for Acquired<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_newtype_variant("Response", 1, "Acquired", &AcquireReplyGranted(self.0))
    }
}

struct AcquireReplyGranted<'a>(&'a [Granted]);

impl Serialize for AcquireReplyGranted<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_newtype_variant("AcquireReply", 0, "Granted", &Grants(self.0))
    }
}

impl Serialize for Grants<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for g in self.0 {
            seq.serialize_element(&Grant(g))?;
        }
        seq.end()
    }
}

impl Serialize for Outcomes<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_newtype_variant("Response", 2, "Granted", &OutcomeSeq(self.0))
    }
}

struct OutcomeSeq<'a>(&'a [Result<Granted, String>]);

impl Serialize for OutcomeSeq<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for o in self.0 {
            seq.serialize_element(&match o {
                Ok(g) => OutcomeRef::Ok(g),
                Err(why) => OutcomeRef::Lost(why),
            })?;
        }
        seq.end()
    }
}

impl Serialize for OutcomeRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            OutcomeRef::Ok(g) => s.serialize_newtype_variant("Outcome", 0, "Ok", &Grant(g)),
            OutcomeRef::Lost(why) => s.serialize_newtype_variant("Outcome", 1, "Lost", why),
        }
    }
}

impl Serialize for Grant<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let g = self.0;
        let mut st = s.serialize_struct("GrantWire", 5)?;
        st.serialize_field("token", &g.token)?;
        st.serialize_field("deadline_ms", &g.deadline_ms)?;
        st.serialize_field("version", &g.version)?;
        st.serialize_field("predecessor", &g.predecessor.as_ref().map(Pred))?;
        st.serialize_field("witness", &Bytes(&g.witness))?;
        st.end()
    }
}

impl Serialize for Pred<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let p = self.0;
        // `HolderWire` borrows and encodes exactly as `HolderOwned`.
        let holder = p.holder.as_deref().map(HolderWire::of);
        let broken = p.broken.as_ref().map(|b| (HolderWire::of(&b.by), b.reason.as_deref()));
        let mut st = s.serialize_struct("PredecessorWire", 8)?;
        st.serialize_field("token", &p.token)?;
        st.serialize_field("holder", &holder)?;
        st.serialize_field("how", &p.how)?;
        st.serialize_field("at_ms", &p.at_ms)?;
        st.serialize_field("watermark_ms", &p.watermark_ms)?;
        st.serialize_field("meta", &p.meta.as_deref())?;
        st.serialize_field("acquired_ms", &p.acquired_ms)?;
        st.serialize_field("broken", &broken)?;
        st.end()
    }
}

impl Serialize for Bytes<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0)
    }
}
