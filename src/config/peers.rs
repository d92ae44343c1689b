//! The settings of what imgcas does for the peers' users: the fallback image answered when a
//! source fails (`fallback.*`), and the signatures of imgproxy's and thumbor's URLs
//! (`imgproxy.*`, `thumbor.*`).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::de_duration;
use crate::hash::ContentHash;

/// The image answered, processed with the request's own spec, when a source fails (gone,
/// unreachable, undecodable, too large): `IMGCAS_FALLBACK_*`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FallbackConfig {
    /// A file (stored as an original at start) or a stored original's SHA-256; none: a
    /// failing source answers its error.
    pub image: Option<String>,
    /// The status a fallback answer carries.
    pub status: u16,
    /// How long a fallback answer may be kept (`Cache-Control: max-age`).
    #[serde(deserialize_with = "de_duration")]
    pub ttl: Duration,
}

impl Default for FallbackConfig {
    fn default() -> Self {
        FallbackConfig {
            image: None,
            status: 200,
            ttl: Duration::from_secs(60),
        }
    }
}

/// thumbor-style URLs (`/thumbor/…`): the security key that signs them, as thumbor's
/// `SECURITY_KEY`. None: the signature segment is `unsafe`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ThumborConfig {
    /// The key, as text (thumbor's keys are text, not hex).
    pub key: Option<String>,
}

/// One imgproxy signing key and its salt, decoded.
pub type KeyAndSalt = (Vec<u8>, Vec<u8>);

/// imgproxy-style URLs (`/imgproxy/…`): the key/salt pairs that sign them, as imgproxy's
/// own `IMGPROXY_KEY`/`IMGPROXY_SALT` (hex, comma lists paired in order), and how many bytes
/// of the HMAC a signature keeps. No pair: the signature segment is `insecure` or `unsafe`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImgproxyConfig {
    /// Bytes of the HMAC a signature keeps (imgproxy's `IMGPROXY_SIGNATURE_SIZE`).
    pub signature_size: usize,
    /// Hex keys, a comma list.
    pub key: Option<String>,
    /// Hex salts, one per key, in the same order.
    pub salt: Option<String>,
}

impl Default for ImgproxyConfig {
    fn default() -> Self {
        ImgproxyConfig {
            key: None,
            salt: None,
            signature_size: 32,
        }
    }
}

impl ImgproxyConfig {
    /// The key/salt pairs, decoded (empty: signing off).
    pub fn pairs(&self) -> Result<Vec<KeyAndSalt>, String> {
        let list = |v: &Option<String>, what: &str| -> Result<Vec<Vec<u8>>, String> {
            v.as_deref()
                .unwrap_or("")
                .split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(|k| hex::decode(k).map_err(|_| format!("{what} `{k}` is not hex")))
                .collect()
        };
        let (keys, salts) = (list(&self.key, "key")?, list(&self.salt, "salt")?);
        if keys.len() != salts.len() {
            return Err(format!(
                "{} keys and {} salts: each key needs its salt, in the same order",
                keys.len(),
                salts.len()
            ));
        }
        Ok(keys.into_iter().zip(salts).collect())
    }
}

/// Where a fallback image comes from: a stored original, or a file to store at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FallbackSource {
    /// A stored original, by its SHA-256.
    Stored(ContentHash),
    File(PathBuf),
}

impl FallbackSource {
    /// A SHA-256 (64 hex digits) names a stored original; anything else is a file path.
    pub fn of(text: &str) -> Result<FallbackSource, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("names no image: give a file path or a stored original's SHA-256".into());
        }
        if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            if let Ok(hash) = text.parse() {
                return Ok(FallbackSource::Stored(hash));
            }
        }
        Ok(FallbackSource::File(PathBuf::from(text)))
    }
}
