//! The operator page's login session: a cookie naming a token, an expiry and a nonce, signed
//! with that token (HMAC-SHA256 keyed by its digest). Every node configured with the token
//! accepts it and none has to remember sessions; the token itself never travels in the cookie
//! or in a URL. The cookie is `HttpOnly` (no script reads it) and `SameSite=Strict` (no other
//! site's page sends it); a request that carries it and says it comes from another origin is
//! refused all the same ([`same_origin`]), so a form elsewhere cannot act through it, and the
//! login form refuses a post from another origin too (login CSRF: another site's form would
//! otherwise log the operator's browser in under a token of its choosing).
//!
//! Logging out revokes the cookie on the node that answered ([`Revoked`]), and through the
//! maps on every node that shares them (`Pipeline::revoke_session`; a node learns of it the
//! first time the cookie is presented to it: `http::learn_revocation`): the signature is
//! remembered until the cookie's own expiry. No other session state is shared or kept.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use axum::http::{header, HeaderMap};
use hmac::{KeyInit, Mac};
use sha2::Digest;

/// The cookie's name.
pub const COOKIE: &str = "imgcas_session";
/// How long a login lasts.
pub const LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// Revoked sessions a node remembers at most. Only a holder of a valid session can add one
/// (by logging out), so the bound is against a token holder's loop, not the open internet.
const MAX_REVOKED: usize = 10_000;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

fn mac(key: &[u8; 32], name: &str, expires_secs: u64, nonce: &str) -> [u8; 32] {
    let mut mac = match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts every key length"),
    };
    mac.update(b"imgcas admin session\0");
    mac.update(name.as_bytes());
    mac.update(b"\0");
    mac.update(expires_secs.to_string().as_bytes());
    mac.update(b"\0");
    mac.update(nonce.as_bytes());
    mac.finalize().into_bytes().into()
}

/// A nonce for a new session: two logins in the same second get different cookies, so that
/// logging out of one (which revokes its signature) does not end the other.
pub fn nonce() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = sha2::Sha256::new();
    h.update(COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    h.update(since_epoch.as_nanos().to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    hex::encode(&h.finalize()[..8])
}

/// The cookie's value for token `name` (whose digest is `key`), valid until `expires_secs`.
pub fn value(name: &str, key: &[u8; 32], expires_secs: u64, nonce: &str) -> String {
    format!(
        "{name}.{expires_secs}.{nonce}.{}",
        hex::encode(mac(key, name, expires_secs, nonce))
    )
}

/// A presented session: the token's name, its expiry, its nonce and its signature.
pub struct Presented<'a> {
    pub name: &'a str,
    expires_secs: u64,
    nonce: &'a str,
    signature: [u8; 32],
}

impl Presented<'_> {
    /// What names this session among the nodes (its signature, in hex): the key its
    /// revocation is shared under.
    pub fn key(&self) -> String {
        hex::encode(self.signature)
    }

    /// When the cookie expires, in seconds since the epoch.
    pub fn expires_secs(&self) -> u64 {
        self.expires_secs
    }

    /// Whether it was signed with `key` and has not expired at `now_secs`.
    pub fn valid(&self, key: &[u8; 32], now_secs: u64) -> bool {
        let expected = mac(key, self.name, self.expires_secs, self.nonce);
        super::super::same_bytes(&expected, &self.signature) && now_secs < self.expires_secs
    }
}

/// The session cookie a request carries, parsed (none when absent or malformed). Token
/// names hold no `.` (`config/tokens.rs`) and nonces are hex, so the value has exactly four
/// parts; a cookie of the older three-part form is malformed (its owner logs in again).
pub fn presented(headers: &HeaderMap) -> Option<Presented<'_>> {
    let raw = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == COOKIE).then_some(value)
        })?;
    let mut parts = raw.split('.');
    let (name, expires, nonce, signature) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some()
        || nonce.is_empty()
        || nonce.len() > 32
        || !nonce.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return None;
    }
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(signature, &mut bytes).ok()?;
    Some(Presented {
        name,
        expires_secs: expires.parse().ok()?,
        nonce,
        signature: bytes,
    })
}

/// Sessions this node knows were logged out of (here, or on another node and looked up in the
/// maps), by signature, each with its cookie's expiry: a revoked cookie is refused until
/// then, and forgotten after (it is refused as expired).
#[derive(Default)]
pub struct Revoked {
    ended: Mutex<HashMap<[u8; 32], u64>>,
}

impl Revoked {
    /// Revokes `session` (whose validity the caller checked: nobody fills the list with
    /// cookies that were never sessions). Expired entries go first; when the list is still
    /// full, the one closest to its own expiry makes room, the least left to replay.
    pub fn revoke(&self, session: &Presented, now_secs: u64) {
        let mut ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        if ended.len() >= MAX_REVOKED {
            ended.retain(|_, expires| *expires > now_secs);
        }
        if ended.len() >= MAX_REVOKED {
            let soonest = ended
                .iter()
                .min_by_key(|(_, expires)| **expires)
                .map(|(signature, _)| *signature);
            if let Some(signature) = soonest {
                ended.remove(&signature);
                tracing::warn!(
                    limit = MAX_REVOKED,
                    "revoked admin sessions at their limit: the one closest to expiry is forgotten"
                );
            }
        }
        ended.insert(session.signature, session.expires_secs);
    }

    /// Whether `session` was logged out of on this node.
    pub fn holds(&self, session: &Presented) -> bool {
        let ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        ended.contains_key(&session.signature)
    }
}

/// Whether the page was reached over HTTPS, as the proxy in front says with
/// `X-Forwarded-Proto` (its first value, when proxies chained theirs). imgcas itself serves
/// plain HTTP only.
pub fn served_over_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .is_some_and(|proto| proto.trim().eq_ignore_ascii_case("https"))
}

/// Whether a request that carries the cookie (or posts the login form) comes from the page's
/// own origin: its `Origin` (sent by browsers with every cross-origin request and every
/// same-origin one that is not a `GET`) names the scheme the page was served over
/// ([`served_over_https`]) and the host it was sent to, and its `Sec-Fetch-Site` (where the
/// browser sends one) is not another site's. The scheme counts: `http://host` is another
/// origin than `https://host` (a page on the plain-HTTP side of the same host, or a network
/// that can rewrite it, must not act for the HTTPS one).
pub fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let site_ok = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_none_or(|site| matches!(site, "same-origin" | "none"));
    let origin_ok = match text(header::ORIGIN) {
        None => true,
        Some(origin) => {
            let scheme = if served_over_https(headers) {
                "https"
            } else {
                "http"
            };
            origin.split_once("://").is_some_and(|(given, authority)| {
                given.eq_ignore_ascii_case(scheme)
                    && text(header::HOST).is_some_and(|host| {
                        host.eq_ignore_ascii_case(authority.trim_end_matches('/'))
                    })
            })
        }
    };
    site_ok && origin_ok
}

/// `Set-Cookie` for a new session (`Secure` when the page was reached over HTTPS, as a
/// proxy in front says with `X-Forwarded-Proto`).
pub fn set_cookie(value: &str, secure: bool) -> String {
    format!(
        "{COOKIE}={value}; Path=/; Max-Age={}; HttpOnly; SameSite=Strict{}",
        LIFETIME.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

/// `Set-Cookie` that ends the session.
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (k, v) in pairs {
            headers.append(*k, HeaderValue::from_str(v).unwrap());
        }
        headers
    }

    #[test]
    fn a_session_is_valid_for_its_token_until_it_expires() {
        let key = [7u8; 32];
        let cookie = format!("other=1; {COOKIE}={}", value("ops", &key, 1000, "ab12"));
        let headers = with(&[("cookie", &cookie)]);
        let session = presented(&headers).expect("parsed");
        assert_eq!(session.name, "ops");
        assert!(session.valid(&key, 999));
        assert!(!session.valid(&key, 1000), "expired");
        assert!(!session.valid(&[8u8; 32], 999), "another token's key");
        // A forged expiry breaks the signature.
        let forged = value("ops", &key, 1000, "ab12").replace(".1000.", ".99999.");
        let headers = with(&[("cookie", &format!("{COOKIE}={forged}"))]);
        assert!(!presented(&headers).unwrap().valid(&key, 999));
        // So does another nonce.
        let forged = value("ops", &key, 1000, "ab12").replace(".ab12.", ".ab13.");
        let headers = with(&[("cookie", &format!("{COOKIE}={forged}"))]);
        assert!(!presented(&headers).unwrap().valid(&key, 999));
    }

    #[test]
    fn a_revoked_session_is_held_and_the_list_stays_bounded() {
        let key = [7u8; 32];
        let revoked = Revoked::default();
        let first = format!("{COOKIE}={}", value("ops", &key, 1000, &nonce()));
        let second = format!("{COOKIE}={}", value("ops", &key, 1000, &nonce()));
        let (first, second) = (with(&[("cookie", &first)]), with(&[("cookie", &second)]));
        let (first, second) = (presented(&first).unwrap(), presented(&second).unwrap());
        revoked.revoke(&first, 10);
        assert!(revoked.holds(&first));
        assert!(
            !revoked.holds(&second),
            "a login in the same second is another session"
        );
        // Full: expired entries go first, then the one closest to its expiry.
        for i in 0..MAX_REVOKED as u64 {
            let cookie = format!("{COOKIE}={}", value("ops", &key, 2000 + i, "0"));
            revoked.revoke(&presented(&with(&[("cookie", &cookie)])).unwrap(), 1500);
        }
        assert!(!revoked.holds(&first), "expired, forgotten");
        assert_eq!(revoked.ended.lock().unwrap().len(), MAX_REVOKED);
        revoked.revoke(&second, 1500);
        assert!(revoked.holds(&second));
        let soonest = format!("{COOKIE}={}", value("ops", &key, 2000, "0"));
        assert!(!revoked.holds(&presented(&with(&[("cookie", &soonest)])).unwrap()));
        assert_eq!(revoked.ended.lock().unwrap().len(), MAX_REVOKED);
    }

    #[test]
    fn malformed_cookies_are_none() {
        let sig = "00".repeat(32);
        for bad in [
            "",
            "x",
            "a.b",
            "a.1.zz",
            "a.notanumber.00",
            &format!("a.1.{sig}"),
            &format!("a.1.nothex.{sig}"),
            &format!("a.1..{sig}"),
            &format!("a.1.ab.cd.{sig}"),
        ] {
            let headers = with(&[("cookie", &format!("{COOKIE}={bad}"))]);
            assert!(presented(&headers).is_none(), "{bad}");
        }
    }

    #[test]
    fn another_origin_is_refused() {
        let host = ("host", "127.0.0.1:8080");
        assert!(same_origin(&with(&[host])));
        assert!(same_origin(&with(&[
            host,
            ("origin", "http://127.0.0.1:8080")
        ])));
        assert!(!same_origin(&with(&[
            host,
            ("origin", "https://evil.example")
        ])));
        assert!(!same_origin(&with(&[
            host,
            ("sec-fetch-site", "cross-site")
        ])));
        assert!(
            !same_origin(&with(&[("origin", "http://127.0.0.1:8080")])),
            "no host"
        );
    }

    #[test]
    fn another_scheme_is_another_origin() {
        let host = ("host", "admin.example");
        let https = ("x-forwarded-proto", "https");
        assert!(same_origin(&with(&[
            host,
            https,
            ("origin", "https://admin.example")
        ])));
        assert!(!same_origin(&with(&[
            host,
            https,
            ("origin", "http://admin.example")
        ])));
        assert!(!same_origin(&with(&[
            host,
            ("origin", "https://admin.example")
        ])));
        assert!(same_origin(&with(&[
            host,
            ("origin", "http://admin.example")
        ])));
        assert!(!same_origin(&with(&[host, ("origin", "admin.example")])));
        assert!(served_over_https(&with(&[(
            "x-forwarded-proto",
            "HTTPS, http"
        )])));
        assert!(!served_over_https(&with(&[host])));
    }
}
