//! The operator page's login session: a cookie naming a token and an expiry, signed with
//! that token (HMAC-SHA256 keyed by its digest). Every node configured with the token accepts
//! it and none has to remember sessions; the token itself never travels in the cookie or in a
//! URL. The cookie is `HttpOnly` (no script reads it) and `SameSite=Strict` (no other site's
//! page sends it); a request that carries it and says it comes from another origin is
//! refused all the same ([`same_origin`]), so a form elsewhere cannot act through it.

use std::time::Duration;

use axum::http::{header, HeaderMap};
use hmac::{KeyInit, Mac};

/// The cookie's name.
pub const COOKIE: &str = "imgcas_session";
/// How long a login lasts.
pub const LIFETIME: Duration = Duration::from_secs(12 * 3600);

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

fn mac(key: &[u8; 32], name: &str, expires_secs: u64) -> [u8; 32] {
    let mut mac = match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts every key length"),
    };
    mac.update(b"imgcas admin session\0");
    mac.update(name.as_bytes());
    mac.update(b"\0");
    mac.update(expires_secs.to_string().as_bytes());
    mac.finalize().into_bytes().into()
}

/// The cookie's value for token `name` (whose digest is `key`), valid until `expires_secs`.
pub fn value(name: &str, key: &[u8; 32], expires_secs: u64) -> String {
    format!(
        "{name}.{expires_secs}.{}",
        hex::encode(mac(key, name, expires_secs))
    )
}

/// A presented session: the token's name, its expiry, and its signature.
pub struct Presented<'a> {
    pub name: &'a str,
    expires_secs: u64,
    signature: [u8; 32],
}

impl Presented<'_> {
    /// Whether it was signed with `key` and has not expired at `now_secs`.
    pub fn valid(&self, key: &[u8; 32], now_secs: u64) -> bool {
        let expected = mac(key, self.name, self.expires_secs);
        super::super::same_bytes(&expected, &self.signature) && now_secs < self.expires_secs
    }
}

/// The session cookie a request carries, parsed (none when absent or malformed). Token
/// names hold no `.` (`config/tokens.rs`), so the value splits from the right.
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
    let (rest, signature) = raw.rsplit_once('.')?;
    let (name, expires) = rest.rsplit_once('.')?;
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(signature, &mut bytes).ok()?;
    Some(Presented {
        name,
        expires_secs: expires.parse().ok()?,
        signature: bytes,
    })
}

/// Whether a request that carries the cookie comes from the page's own origin: its `Origin`
/// (sent by browsers with every cross-origin request and every same-origin one that is not
/// a `GET`) names the host it was sent to, and its `Sec-Fetch-Site` (where the browser
/// sends one) is not another site's.
pub fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let site_ok = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_none_or(|site| matches!(site, "same-origin" | "none"));
    let origin_ok = match text(header::ORIGIN) {
        None => true,
        Some(origin) => {
            let authority = origin
                .split_once("://")
                .map_or(origin, |(_, rest)| rest)
                .trim_end_matches('/');
            text(header::HOST).is_some_and(|host| host.eq_ignore_ascii_case(authority))
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
        let cookie = format!("other=1; {COOKIE}={}", value("ops", &key, 1000));
        let headers = with(&[("cookie", &cookie)]);
        let session = presented(&headers).expect("parsed");
        assert_eq!(session.name, "ops");
        assert!(session.valid(&key, 999));
        assert!(!session.valid(&key, 1000), "expired");
        assert!(!session.valid(&[8u8; 32], 999), "another token's key");
        // A forged expiry breaks the signature.
        let forged = value("ops", &key, 1000).replace(".1000.", ".99999.");
        let headers = with(&[("cookie", &format!("{COOKIE}={forged}"))]);
        assert!(!presented(&headers).unwrap().valid(&key, 999));
    }

    #[test]
    fn malformed_cookies_are_none() {
        for bad in ["", "x", "a.b", "a.1.zz", "a.notanumber.00"] {
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
}
