//! The origin client: one GET with the stored validators, a hard byte limit enforced while
//! streaming, an overall deadline, and redirects followed by hand so every hop is checked.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use reqwest::header::{
    HeaderMap, HeaderValue, ACCEPT, CONTENT_LENGTH, ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH,
    LAST_MODIFIED, LOCATION,
};
use reqwest::StatusCode;
use url::{Host, Url};

use super::drip::{self, DripMeter};
use super::guard::{refusal, GuardedResolver, Refused};
use super::politeness::{origin_limit, origin_of, OriginSlots};
use super::FetchError;
use crate::config::FetchConfig;

const MAX_REDIRECTS: usize = 5;

/// The origin's validators for one URL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Validators {
    pub etag: Option<String>,
    pub last_modified: Option<String>,
}

#[derive(Debug)]
pub enum FetchOutcome {
    /// `304`: the content is what the validators describe. `validators` are the ones the 304
    /// carried (an origin may send fresher ones with it), each `None` where it sent none.
    NotModified { validators: Validators },
    Fetched {
        bytes: Bytes,
        validators: Validators,
    },
}

/// A download's result and the URL that gave it: the last hop its redirects reached, whose
/// origin a pause it asks for, a refused connection or a failure is charged to (issue 67: a
/// redirect to an origin that answers 429 pauses that origin, not the one that redirected).
#[derive(Debug)]
pub struct Answer {
    pub result: Result<FetchOutcome, FetchError>,
    pub from: Url,
}

/// Asked before a download follows a redirect to another origin than its own; an error ends
/// the download there, unsent (that origin may be paused for the whole cluster).
#[async_trait::async_trait]
pub trait HopGuard: Send + Sync {
    async fn before_hop(&self, to: &Url) -> Result<(), FetchError>;
}

pub struct Fetcher {
    client: reqwest::Client,
    config: FetchConfig,
    /// `s3://` sources (`bucket.rs`).
    buckets: super::bucket::Buckets,
    /// Download slots per origin (at most `fetch.origin_share` of the whole) and in all, in
    /// this process; waiting for one does not count against the timeout.
    pub slots: OriginSlots,
}

/// Parses a client-supplied source URL into the canonical form the URL map is keyed by;
/// one longer than `max_bytes` (`limits.max_url_bytes`), as given or once canonical, is
/// refused before anything keys on it.
pub fn canonical_url(raw: &str, max_bytes: usize) -> Result<Url, FetchError> {
    let too_long = FetchError::UrlTooLong { limit: max_bytes };
    if raw.len() > max_bytes {
        return Err(too_long);
    }
    let mut url = Url::parse(raw.trim()).map_err(|e| FetchError::BadUrl(format!("{e}")))?;
    if !matches!(url.scheme(), "http" | "https" | "s3") {
        return Err(FetchError::BadUrl(
            "only http, https and s3 URLs are fetched".into(),
        ));
    }
    if url.host().is_none() {
        return Err(FetchError::BadUrl("the URL has no host".into()));
    }
    if url.scheme() == "s3" {
        // The parser has removed `.` and `..` segments by now (`a/../b` is `b`): the key as
        // given is checked too, so that a key the parser tidied is refused, not fetched.
        super::bucket::check_given_key(raw.trim())?;
        super::bucket::check_object_key(&url)?;
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(FetchError::BadUrl(
            "credentials in source URLs are not accepted".into(),
        ));
    }
    url.set_fragment(None);
    // The URL standard's hosts admit characters (`{`, `"`, `` ` ``…) that an HTTP request
    // cannot carry: such a URL fails in the client, after its origin was named on the
    // operator's page and in metrics (50 names, first come) and its failures counted
    // against that origin. It is malformed, and refused as such before it is counted.
    if url.scheme() != "s3" && url.as_str().parse::<axum::http::Uri>().is_err() {
        return Err(FetchError::BadUrl(
            "the URL is not one an HTTP request can carry".into(),
        ));
    }
    // Canonical form can be longer than the text given (percent-encoding, IDNA).
    if url.as_str().len() > max_bytes {
        return Err(too_long);
    }
    Ok(url)
}

impl Fetcher {
    pub fn new(config: &FetchConfig, s3: &crate::config::S3Config) -> Result<Fetcher, String> {
        // reqwest is built without a bundled crypto provider; ring is ours.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder()
            // Proxy variables (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`) are ignored: through a
            // proxy the guard would check the proxy's address while the proxy resolved the
            // target, and any internal address would be one variable away.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(config.timeout)
            .user_agent(concat!("imgcas/", env!("CARGO_PKG_VERSION")))
            .pool_idle_timeout(Duration::from_secs(30));
        if !config.allow_private_networks {
            builder = builder.dns_resolver(GuardedResolver);
        }
        let client = builder.build().map_err(|e| format!("HTTP client: {e}"))?;
        Ok(Fetcher {
            client,
            buckets: super::bucket::Buckets::new(&config.source_buckets, &config.buckets, s3),
            config: config.clone(),
            slots: OriginSlots::new(
                origin_limit(
                    config.per_host_concurrency,
                    config.concurrency,
                    config.origin_share,
                ),
                config.concurrency,
            ),
        })
    }

    /// Refuses a URL before any traffic: scheme, host allow-list, and IP-literal hosts (which
    /// never reach the resolver).
    fn check(&self, url: &Url) -> Result<(), FetchError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(FetchError::NotAllowed(format!(
                "scheme `{}` is not fetched",
                url.scheme()
            )));
        }
        let host = url
            .host()
            .ok_or_else(|| FetchError::BadUrl("the URL has no host".into()))?;
        if !self.config.allowed_hosts.is_empty() {
            let name = url.host_str().unwrap_or("").trim_end_matches('.');
            let allowed = self
                .config
                .allowed_hosts
                .iter()
                .any(|h| h.trim_end_matches('.').eq_ignore_ascii_case(name));
            if !allowed {
                return Err(FetchError::NotAllowed(format!(
                    "host {name} is not in the allowed hosts"
                )));
            }
        }
        if self.config.allow_private_networks {
            return Ok(());
        }
        let ip = match host {
            Host::Ipv4(v4) => std::net::IpAddr::V4(v4),
            Host::Ipv6(v6) => std::net::IpAddr::V6(v6),
            Host::Domain(name) => {
                // RFC 6761: these names are loopback whatever a resolver says.
                let name = name.trim_end_matches('.').to_ascii_lowercase();
                if name == "localhost" || name.ends_with(".localhost") {
                    return Err(FetchError::NotAllowed(format!("{name} is a loopback name")));
                }
                return Ok(());
            }
        };
        match refusal(ip) {
            Some(why) => Err(FetchError::NotAllowed(format!("{ip} is a {why} address"))),
            None => Ok(()),
        }
    }

    /// GETs `url`, conditionally when `validators` are given, following up to 5 redirects,
    /// once one of this process's download slots for its origin is free.
    pub async fn fetch(
        &self,
        url: &Url,
        validators: Option<&Validators>,
    ) -> Result<FetchOutcome, FetchError> {
        self.check_source(url)?;
        let _slot = self.slots.acquire(url, None).await;
        self.fetch_now(url, validators, None).await.result
    }

    /// The checks a source URL passes before any traffic: the address guard's (for HTTP),
    /// or the listed buckets' (for `s3://`).
    pub fn check_source(&self, url: &Url) -> Result<(), FetchError> {
        match url.scheme() == "s3" {
            true => self.buckets.check(url),
            false => self.check(url),
        }
    }

    /// [`Fetcher::fetch`] for a caller that holds the download's slots already: the
    /// request alone, bounded by `fetch.timeout` from the moment it is sent (time spent
    /// waiting for a slot never counts against it). `hops`, when given, is asked before a
    /// redirect leads to another origin. The answer names the URL that gave it.
    pub async fn fetch_now(
        &self,
        url: &Url,
        validators: Option<&Validators>,
        hops: Option<&dyn HopGuard>,
    ) -> Answer {
        if let Err(e) = self.check_source(url) {
            return Answer {
                result: Err(e),
                from: url.clone(),
            };
        }
        // The hop the download reached, read even when the timeout drops the request.
        let mut from = url.clone();
        let download = async {
            match url.scheme() == "s3" {
                true => {
                    let max = self.config.max_bytes;
                    self.buckets.get(url, validators, max).await
                }
                false => self.fetch_inner(url, validators, hops, &mut from).await,
            }
        };
        let result = match tokio::time::timeout(self.config.timeout, download).await {
            Ok(result) => result,
            Err(_) => Err(FetchError::Timeout),
        };
        Answer { result, from }
    }

    /// The request and its redirects; `sent_to` is set to each hop as its request is sent
    /// (a hop refused before it is sent is not the origin that answered).
    async fn fetch_inner(
        &self,
        url: &Url,
        validators: Option<&Validators>,
        hops: Option<&dyn HopGuard>,
        sent_to: &mut Url,
    ) -> Result<FetchOutcome, FetchError> {
        let first = origin_of(url);
        let mut current = url.clone();
        for hop in 0..=MAX_REDIRECTS {
            self.check(&current)?;
            if let (Some(guard), true) = (hops, hop > 0 && origin_of(&current) != first) {
                guard.before_hop(&current).await?;
            }
            sent_to.clone_from(&current);
            let mut headers = HeaderMap::new();
            headers.insert(ACCEPT, HeaderValue::from_static("image/*,*/*;q=0.8"));
            if let Some(v) = validators {
                let value = |s: &str| HeaderValue::from_str(s).ok();
                if let Some(etag) = v.etag.as_deref().and_then(value) {
                    headers.insert(IF_NONE_MATCH, etag);
                }
                if let Some(lm) = v.last_modified.as_deref().and_then(value) {
                    headers.insert(IF_MODIFIED_SINCE, lm);
                }
            }
            let response = self
                .client
                .get(current.clone())
                .headers(headers)
                .send()
                .await
                .map_err(map_send_error)?;
            let status = response.status();
            if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
                let location = response
                    .headers()
                    .get(LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .ok_or_else(|| FetchError::BadRedirect("redirect without Location".into()))?;
                current = current
                    .join(location)
                    .map_err(|e| FetchError::BadRedirect(format!("{location}: {e}")))?;
                // The rule for a URL given directly holds for every hop (issue 28).
                if !current.username().is_empty() || current.password().is_some() {
                    return Err(FetchError::BadRedirect(
                        "a redirect to a URL with credentials is not followed".into(),
                    ));
                }
                continue;
            }
            return match status {
                StatusCode::NOT_MODIFIED if validators.is_some() => Ok(FetchOutcome::NotModified {
                    validators: validators_of(&response),
                }),
                StatusCode::NOT_MODIFIED => Err(FetchError::UnexpectedNotModified),
                StatusCode::NOT_FOUND | StatusCode::GONE => {
                    Err(FetchError::NotFound(status.as_u16()))
                }
                StatusCode::TOO_MANY_REQUESTS => Err(FetchError::RateLimited {
                    retry_after: response
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(parse_retry_after),
                }),
                StatusCode::SERVICE_UNAVAILABLE => {
                    match response
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(parse_retry_after)
                    {
                        Some(retry_after) => Err(FetchError::Busy {
                            status: status.as_u16(),
                            retry_after,
                        }),
                        None => Err(FetchError::Status(status.as_u16())),
                    }
                }
                s if s.is_success() => self.read_body(response).await,
                s => Err(FetchError::Status(s.as_u16())),
            };
        }
        Err(FetchError::TooManyRedirects)
    }

    async fn read_body(&self, response: reqwest::Response) -> Result<FetchOutcome, FetchError> {
        let limit = self.config.max_bytes;
        let validators = validators_of(&response);
        let declared = response
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > limit) {
            return Err(FetchError::TooLarge { limit });
        }
        let mut body = BytesMut::with_capacity(declared.unwrap_or(64 << 10).min(limit) as usize);
        let mut stream = response.bytes_stream();
        let min_rate = self.config.min_rate;
        let mut meter = DripMeter::new(min_rate, Instant::now());
        // Looked at on a clock, not on each chunk: a body that stalls sends no chunk.
        let mut check = tokio::time::interval_at(
            tokio::time::Instant::now() + drip::CHECK_EVERY,
            drip::CHECK_EVERY,
        );
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let chunk = tokio::select! {
                chunk = stream.next() => chunk,
                _ = check.tick() => {
                    if let Some(rate) = meter.too_slow(Instant::now(), body.len() as u64) {
                        return Err(FetchError::TooSlow { rate, min_rate });
                    }
                    continue;
                }
            };
            let Some(chunk) = chunk else { break };
            let chunk = chunk.map_err(|e| FetchError::Body(e.to_string()))?;
            if (body.len() + chunk.len()) as u64 > limit {
                return Err(FetchError::TooLarge { limit });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(FetchOutcome::Fetched {
            bytes: body.freeze(),
            validators,
        })
    }
}

/// `Retry-After` as delta-seconds or an HTTP date.
fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// The validators a response carries.
fn validators_of(response: &reqwest::Response) -> Validators {
    let header = |name| {
        response
            .headers()
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
            .map(str::to_string)
    };
    Validators {
        etag: header(ETAG),
        last_modified: header(LAST_MODIFIED),
    }
}

fn map_send_error(e: reqwest::Error) -> FetchError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(err) = source {
        if let Some(refused) = err.downcast_ref::<Refused>() {
            return FetchError::NotAllowed(refused.to_string());
        }
        source = err.source();
    }
    if e.is_timeout() {
        return FetchError::Timeout;
    }
    let mut message = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(err) = source {
        message.push_str(": ");
        message.push_str(&err.to_string());
        source = err.source();
    }
    FetchError::Connect(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: usize = 8 << 10;

    #[test]
    fn canonical_urls() {
        let u = canonical_url("HTTP://Example.COM:80/a/../b.jpg#frag", LIMIT).unwrap();
        assert_eq!(u.as_str(), "http://example.com/b.jpg");
        assert!(canonical_url("file:///etc/passwd", LIMIT).is_err());
        assert!(canonical_url("gopher://x/", LIMIT).is_err());
        assert!(canonical_url("http://user:pw@example.com/", LIMIT).is_err());
        assert!(canonical_url("not a url", LIMIT).is_err());
    }

    #[test]
    fn s3_keys_the_parser_would_tidy_are_refused_as_given() {
        for raw in [
            "s3://b/a/../b.png",
            "s3://b/a/%2e%2e/b.png",
            "s3://b/a/.%2E/b.png",
            "s3://b/a/./b.png",
            "s3://b/a/%2E/b.png",
            "s3://b/a/.\t./b.png",
            "s3://b/a/..",
        ] {
            assert!(
                matches!(canonical_url(raw, LIMIT), Err(FetchError::BadUrl(m)) if m.contains("segment")),
                "{raw}"
            );
        }
        for fine in [
            "s3://b/a/b.png",
            "s3://b/v1..2/.hidden..png",
            "s3://b/a.png?x=/../",
        ] {
            assert!(canonical_url(fine, LIMIT).is_ok(), "{fine}");
        }
    }

    #[test]
    fn urls_a_request_cannot_carry_are_refused() {
        for raw in [
            "http://a{1}.example/x.jpg",
            "http://a\"b/x.jpg",
            "http://a`b/x.jpg",
        ] {
            assert!(
                matches!(canonical_url(raw, LIMIT), Err(FetchError::BadUrl(_))),
                "{raw}: {:?}",
                canonical_url(raw, LIMIT)
            );
        }
        for fine in [
            "http://a-b.example/x{1}.jpg",
            "http://xn--bcher-kva.example/",
            "http://b\u{fc}cher.example/",
            "https://[2001:db8::1]:8443/x.jpg",
        ] {
            assert!(canonical_url(fine, LIMIT).is_ok(), "{fine}");
        }
    }

    #[test]
    fn urls_over_the_limit_are_refused_as_given_and_once_canonical() {
        let long = format!("http://example.com/{}", "a".repeat(100));
        assert!(canonical_url(&long, 200).is_ok());
        assert!(matches!(
            canonical_url(&long, 100),
            Err(FetchError::UrlTooLong { limit: 100 })
        ));
        // 31 bytes given, 63 once each space is percent-encoded.
        let spaced = format!("http://e.com/a{}b", " ".repeat(16));
        assert_eq!(spaced.len(), 31);
        assert!(matches!(
            canonical_url(&spaced, 40),
            Err(FetchError::UrlTooLong { limit: 40 })
        ));
    }

    #[test]
    fn retry_after_in_both_forms() {
        assert_eq!(parse_retry_after(" 7 "), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after("Thu, 01 Jan 1970 00:00:00 GMT"),
            Some(Duration::ZERO)
        );
        let later = std::time::SystemTime::now() + Duration::from_secs(120);
        let d = parse_retry_after(&httpdate::fmt_http_date(later)).unwrap();
        assert!(d > Duration::from_secs(100) && d <= Duration::from_secs(120));
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn obfuscated_loopback_literals_are_refused_before_traffic() {
        let fetcher = Fetcher::new(&FetchConfig::default(), &Default::default()).unwrap();
        for raw in [
            "http://127.0.0.1/",
            "http://127.1/",
            "http://2130706433/",
            "http://0x7f000001/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://0.0.0.0/",
            "http://localhost/",
            "http://LOCALHOST./",
            "http://a.b.localhost/",
        ] {
            let url = canonical_url(raw, LIMIT).unwrap();
            assert!(
                matches!(fetcher.check(&url), Err(FetchError::NotAllowed(_))),
                "{raw}"
            );
        }
    }
}
