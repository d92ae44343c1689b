//! URL signatures: with signing keys configured, image URLs need a `sig` parameter, the
//! HMAC-SHA256 (hex) of `<path>?<canonical query>` under any one of the keys.
//!
//! The canonical query is every parameter but `sig`, sorted by name then value, each
//! form-urlencoded (`application/x-www-form-urlencoded`, as `url::form_urlencoded` writes it:
//! `:` → `%3A`, `/` → `%2F`, space → `+`). A query already written that way signs as typed,
//! so `openssl dgst -sha256 -hmac` is a signer (see docs/api.md, "Signed URLs"). Several keys make rotation
//! possible: add the new key, move the signers, then drop the old key.

use hmac::{KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = hmac::Hmac<Sha256>;

/// The bytes a signature covers.
pub fn signed_message(path: &str, query: &str) -> String {
    let mut pairs: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k != "sig")
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    pairs.sort();
    let canonical = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish();
    format!("{path}?{canonical}")
}

/// The signature of a request under `key` (lower-case hex).
pub fn sign(key: &[u8], path: &str, query: &str) -> String {
    let mut mac = mac(key);
    mac.update(signed_message(path, query).as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

fn mac(key: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length.
    match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts every key length"),
    }
}

/// Why a request's signature was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Missing,
    Malformed,
    Mismatch,
}

impl Refusal {
    pub fn message(self) -> &'static str {
        match self {
            Refusal::Missing => "this server requires signed URLs: the `sig` parameter is missing",
            Refusal::Malformed => "`sig` must be 64 hex digits (HMAC-SHA256)",
            Refusal::Mismatch => "`sig` does not match the URL",
        }
    }
}

/// Checks `sig` against every key, each comparison in constant time.
pub fn verify(keys: &[Vec<u8>], path: &str, query: &str) -> Result<(), Refusal> {
    let sigs: Vec<String> = url::form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k == "sig")
        .map(|(_, v)| v.into_owned())
        .collect();
    let [sig] = sigs.as_slice() else {
        return Err(if sigs.is_empty() {
            Refusal::Missing
        } else {
            Refusal::Malformed
        });
    };
    let given = hex::decode(sig.trim()).map_err(|_| Refusal::Malformed)?;
    if given.len() != 32 {
        return Err(Refusal::Malformed);
    }
    let message = signed_message(path, query);
    let mut matched = false;
    for key in keys {
        let mut m = mac(key);
        m.update(message.as_bytes());
        // Every key is tried, so timing does not tell which one matched.
        matched |= m.verify_slice(&given).is_ok();
    }
    if matched {
        Ok(())
    } else {
        Err(Refusal::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn the_message_is_order_and_encoding_independent() {
        let a = signed_message("/v1/image", "w=400&url=http://a.example/x.jpg&format=webp");
        let b = signed_message(
            "/v1/image",
            "format=webp&url=http%3A%2F%2Fa.example%2Fx.jpg&sig=00&w=400",
        );
        assert_eq!(a, b);
        assert_eq!(
            a,
            "/v1/image?format=webp&url=http%3A%2F%2Fa.example%2Fx.jpg&w=400"
        );
    }

    #[test]
    fn good_bad_missing_and_rotated() {
        let query = "url=http%3A%2F%2Fa.example%2Fx.jpg&w=400";
        let sig = sign(KEY, "/v1/image", query);
        let signed = format!("{query}&sig={sig}");
        let keys = vec![KEY.to_vec()];
        assert_eq!(verify(&keys, "/v1/image", &signed), Ok(()));
        // Another path, another width, another key: refused.
        assert_eq!(
            verify(&keys, "/v1/image/abc", &signed),
            Err(Refusal::Mismatch)
        );
        let tampered = signed.replace("w=400", "w=401");
        assert_eq!(
            verify(&keys, "/v1/image", &tampered),
            Err(Refusal::Mismatch)
        );
        let other = vec![b"another key of sixteen bytes".to_vec()];
        assert_eq!(verify(&other, "/v1/image", &signed), Err(Refusal::Mismatch));
        assert_eq!(verify(&keys, "/v1/image", query), Err(Refusal::Missing));
        assert_eq!(
            verify(&keys, "/v1/image", &format!("{query}&sig=zz")),
            Err(Refusal::Malformed)
        );
        assert_eq!(
            verify(&keys, "/v1/image", &format!("{signed}&sig={sig}")),
            Err(Refusal::Malformed)
        );
        // Rotation: old and new keys both verify while both are configured.
        let rotated = vec![b"the new key, thirty-two bytes ok".to_vec(), KEY.to_vec()];
        assert_eq!(verify(&rotated, "/v1/image", &signed), Ok(()));
    }
}
