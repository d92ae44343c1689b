//! `ContentHash`: the SHA-256 that names an original everywhere (maps, blob keys, URLs).

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentHash(pub [u8; 32]);

impl ContentHash {
    pub fn of(bytes: &[u8]) -> Self {
        ContentHash(Sha256::digest(bytes).into())
    }

    pub fn to_hex(&self) -> String {
        // By table: every hit's headers carry a hash or two, and the hex crate's encoder goes
        // a char at a time through an iterator.
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut hex = String::with_capacity(64);
        for byte in self.0 {
            hex.push(char::from(DIGITS[usize::from(byte >> 4)]));
            hex.push(char::from(DIGITS[usize::from(byte & 15)]));
        }
        hex
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(ContentHash)
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash({})", self.to_hex())
    }
}

/// Parses 64 hex digits (either case).
impl FromStr for ContentHash {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        if s.len() != 64 {
            return Err(());
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).map_err(|_| ())?;
        Ok(ContentHash(out))
    }
}

impl serde::Serialize for ContentHash {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> serde::Deserialize<'de> for ContentHash {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse()
            .map_err(|()| serde::de::Error::custom("expected 64 hex digits"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digest_and_round_trip() {
        let h = ContentHash::of(b"abc");
        assert_eq!(
            h.to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(h.to_hex().parse::<ContentHash>(), Ok(h));
        assert_eq!(h.to_hex().to_uppercase().parse::<ContentHash>(), Ok(h));
        assert!("abc".parse::<ContentHash>().is_err());
        assert!("zz".repeat(32).parse::<ContentHash>().is_err());
    }
}
