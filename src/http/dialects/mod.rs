//! Image URLs in the peers' dialects (`/imgproxy/…`, `/thumbor/…`), so pages written for them work
//! unchanged. Each dialect's file reads its URL — signature, options, source — and says it in
//! imgcas's own options; from there a request is a native request by URL (presets, the
//! request cache, the variant key, fallbacks), so the same output asked in any dialect is one
//! variant, processed once.

use axum::http::Uri;

use crate::config::{Config, Structured};
use crate::error::Error;

mod imgproxy;
mod thumbor;

/// What the dialects need of the configuration, decoded once.
#[derive(Debug, Default)]
pub(super) struct Dialect {
    /// imgproxy's key/salt pairs (empty: signing off).
    pub imgproxy_pairs: Vec<crate::config::KeyAndSalt>,
    pub imgproxy_signature_size: usize,
    /// thumbor's security key (`None`: signing off).
    pub thumbor_key: Option<Vec<u8>>,
    /// Native URLs must be signed: a dialect with no signature of its own configured is
    /// refused rather than left open.
    pub native_signing: bool,
}

impl Dialect {
    pub fn of(config: &Config, structured: &Structured) -> Dialect {
        Dialect {
            imgproxy_pairs: structured.imgproxy_pairs.clone(),
            imgproxy_signature_size: config.imgproxy.signature_size,
            thumbor_key: config
                .thumbor
                .key
                .as_deref()
                .filter(|k| !k.is_empty())
                .map(|k| k.as_bytes().to_vec()),
            native_signing: !config.security.signing_keys().is_empty(),
        }
    }
}

/// A dialect's URL in imgcas's terms: the source URL and the option pairs.
#[derive(Debug)]
pub(super) struct Translated {
    pub source: String,
    pub pairs: Vec<(String, String)>,
}

/// A dialect's reader: the path below its prefix, in imgcas's terms.
type Reader = fn(&Dialect, &str) -> Result<Translated, Error>;

/// One dialect: the prefix its URLs live under, its route pattern, and its reader.
pub(super) struct Peer {
    pub prefix: &'static str,
    pub pattern: &'static str,
    read: Reader,
}

/// The dialects.
pub(super) const PREFIXES: [Peer; 2] = [
    Peer {
        prefix: "/imgproxy",
        pattern: "/imgproxy/{*path}",
        read: imgproxy::translate,
    },
    Peer {
        prefix: "/thumbor",
        pattern: "/thumbor/{*path}",
        read: thumbor::translate,
    },
];

/// The dialect URL `uri` names (by its prefix), read and its signature checked: the source
/// and options in imgcas's terms. A query is refused: these URLs say everything in the path.
pub(super) fn read(dialect: &Dialect, uri: &Uri) -> Result<Translated, Error> {
    if uri.query().is_some() {
        return Err(Error::invalid_option(
            "url",
            "these URLs have no query: write a source's `?` as %3F",
        ));
    }
    let (path, read) = PREFIXES
        .iter()
        .find_map(|peer| Some((uri.path().strip_prefix(peer.prefix)?, peer.read)))
        .ok_or_else(|| Error::NotFound("no such route".into()))?;
    read(dialect, path)
}

/// The option a dialect's URL is refused for (tests of each dialect).
#[cfg(test)]
fn refused_for(dialect: &Dialect, read: Reader, path: &str) -> String {
    match read(dialect, path) {
        Err(Error::InvalidOption { option, .. }) => option,
        other => panic!("{path}: {other:?}"),
    }
}
