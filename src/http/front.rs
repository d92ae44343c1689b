//! The front of the HTTP service: what hyper calls for every request. A repeated image request
//! (native, or in a peer's dialect: `dialects/`) whose variant is in memory is answered here, before the router, from the request cache and
//! the hot cache alone: no routing, extractors, middleware futures or request timeout, which
//! cost a hit more than its answer does (`bench/hit_path.py`). Everything else goes to the
//! router unchanged.
//!
//! Skipping the router's checks is sound because the request cache only holds requests that
//! passed them: its key is the path, the whole query (`sig` included), the `Accept` class and
//! the client hints the query may read, and a request is remembered after its signature,
//! preset and option checks, all of which depend on nothing else (the settings do not change
//! while the process runs). Answers are the router's to the byte: their headers are made once
//! per remembered request by `answer.rs`'s `decorate_headers`, plus the `Accept-CH` the image
//! routes' layer adds, and kept with it. They are counted and logged as routed ones are
//! (`observe.rs`).
//!
//! The front also says who the client is: the connection's peer, or, behind a proxy listed
//! in `server.trusted_proxies`, the address that proxy names in `X-Forwarded-For`. It writes
//! that into the request as [`CLIENT`], having first removed any such header the request
//! came with, so the routes below (which hand a `HeaderMap` down, not the request) read an
//! address only the front can have set. An anonymous client's budget is kept by it
//! (`pipeline/budgets.rs`).

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, Method, Response};
use axum::Router;
use hyper_util::service::TowerToHyperService;

use super::{answer, dialects, image, observe, routes, Service};
use crate::pipeline::{Provenance, Recalled};

/// A hyper service: remembered hits first, then the router.
#[derive(Clone)]
pub struct Front {
    service: Service,
    router: TowerToHyperService<Router>,
    /// The accounting of hits answered here, by route pattern.
    hits: Arc<Vec<(&'static str, observe::Fixed)>>,
    /// The connection's peer (set per connection by [`Front::for_peer`]).
    peer: Option<IpAddr>,
}

/// The header the front writes the client's address into (see the module's doc).
pub const CLIENT: &str = "x-imgcas-client";

/// The client's address as the front found it, if it did.
pub fn client_of(headers: &HeaderMap) -> Option<IpAddr> {
    headers.get(CLIENT)?.to_str().ok()?.parse().ok()
}

/// The client behind `peer`: `peer` itself unless it is a trusted proxy, else the last
/// address of `X-Forwarded-For` that is not a trusted proxy (each proxy appends the address
/// it was reached from; what a client wrote itself stands further left and is not believed).
fn client(peer: IpAddr, headers: &HeaderMap, trusted: &[ipnet::IpNet]) -> IpAddr {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(&ip.to_canonical()));
    let peer = peer.to_canonical();
    if !is_trusted(&peer) {
        return peer;
    }
    let mut client = peer;
    for value in headers.get_all("x-forwarded-for").iter().rev() {
        let Ok(text) = value.to_str() else {
            return client;
        };
        for part in text.rsplit(',') {
            let Ok(ip) = part.trim().parse::<IpAddr>() else {
                // A malformed hop: nothing left of it can be believed.
                return client;
            };
            client = ip.to_canonical();
            if !is_trusted(&client) {
                return client;
            }
        }
    }
    client
}

impl Front {
    pub fn new(service: Service, router: Router) -> Front {
        let patterns = routes::ROUTES
            .iter()
            .filter(|r| r.image.is_some())
            .map(|r| r.path);
        Front {
            hits: Arc::new(
                patterns
                    .map(|route| (route, observe::Fixed::hit(&service, route)))
                    .collect(),
            ),
            service,
            router: TowerToHyperService::new(router),
            peer: None,
        }
    }

    /// The front for one connection from `peer`.
    pub fn for_peer(&self, peer: SocketAddr) -> Front {
        Front {
            peer: Some(peer.ip()),
            ..self.clone()
        }
    }
}

const BY_URL: &str = "/v1/image";
const BY_HASH: &str = "/v1/image/{hash}";

/// The image route a path is for, as its pattern, and whether it names its source by URL:
/// the native routes and the peers' dialects.
fn image_route(uri: &axum::http::Uri) -> Option<(&'static str, bool)> {
    let path = uri.path();
    if path.starts_with("/v1/image") {
        return Some(match path == BY_URL {
            true => (BY_URL, true),
            false => (BY_HASH, false),
        });
    }
    // A dialect's URL with a query is refused by its handler: never answered here.
    dialects::PREFIXES
        .iter()
        .find(|d| path.starts_with(d.prefix) && path[d.prefix.len()..].starts_with('/'))
        .filter(|_| uri.query().is_none())
        .map(|d| (d.pattern, true))
}

type Answer = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

impl hyper::service::Service<Request<hyper::body::Incoming>> for Front {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Answer;

    fn call(&self, mut request: Request<hyper::body::Incoming>) -> Answer {
        let trusted = &self.service.config().server.trusted_proxies;
        let found = self
            .peer
            .map(|peer| client(peer, request.headers(), trusted));
        let headers = request.headers_mut();
        headers.remove(CLIENT);
        if let Some(ip) = found {
            if let Ok(value) = HeaderValue::from_str(&ip.to_string()) {
                headers.insert(CLIENT, value);
            }
        }
        // A target over `limits.max_url_bytes` is not looked up: the router answers it 414.
        if super::target_too_long(&self.service, request.uri()) {
            return Box::pin(self.router.call(request));
        }
        if let Some(route) = image_route(request.uri()) {
            // The request key and the request cache are looked up once, here: a hit in memory
            // is answered now, and anything else carries what was found to the handler.
            let key = image::request_key(&self.service, request.uri(), request.headers());
            let recalled = self.service.pipeline().recall_entry(&key);
            if let Some(response) = recalled
                .as_ref()
                .and_then(|r| self.remembered_hit(&request, r, &key, route))
            {
                return Box::pin(std::future::ready(Ok(response)));
            }
            let target = recalled.map(|r| r.target());
            request
                .extensions_mut()
                .insert(image::Looked { key, target });
        }
        let routed = self.router.call(request);
        Box::pin(routed)
    }
}

impl Front {
    /// The answer to a `GET` of an image whose request is remembered and whose variant is
    /// in the hot cache, or `None` (the router answers: anything conditional, `HEAD`, a first
    /// request, a variant not in memory, an error).
    fn remembered_hit<B>(
        &self,
        request: &Request<B>,
        recalled: &Recalled,
        key: &[u8],
        (route, by_url): (&'static str, bool),
    ) -> Option<Response<Body>> {
        let service = &self.service;
        if request.method() != Method::GET {
            return None;
        }
        let headers = request.headers();
        if headers.contains_key(header::IF_NONE_MATCH) {
            return None;
        }
        let started = std::time::Instant::now();
        let (bytes, format, chosen) = service.pipeline().hot_answer(recalled, key)?;
        // The headers depend on the target and the route alone (both fixed by the key): made
        // once per remembered request, then a clone of shared values.
        let answer_headers = recalled.memo(|target| {
            let cache_control = match by_url {
                true => service.url_cache_control(),
                false => answer::IMMUTABLE,
            };
            let mut h = HeaderMap::with_capacity(8);
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(format.mime()),
            );
            // A remembered request's mapping is fresh: a stored variant is a plain hit.
            answer::decorate_headers(&mut h, target, Provenance::Stored, cache_control);
            answer::quality_headers(&mut h, chosen);
            // As the image routes' layer adds to every answer.
            h.insert("accept-ch", HeaderValue::from_static(answer::ACCEPT_CH));
            AnswerHeaders(h)
        })?;
        let mut response = Response::new(Body::from(bytes));
        *response.headers_mut() = answer_headers.0.clone();
        if let Some((_, accounting)) = self.hits.iter().find(|(r, _)| *r == route) {
            accounting.account(started.elapsed());
        }
        Some(response)
    }
}

/// The headers of a remembered request's answer, kept with it in the request cache.
struct AnswerHeaders(HeaderMap);

#[cfg(test)]
mod client_tests {
    use super::*;

    /// The front's image routes are the route table's, by URL or by hash as the table says.
    #[test]
    fn the_image_routes_are_the_tables() {
        for r in routes::ROUTES.iter().filter(|r| r.image.is_some()) {
            let example = r
                .path
                .replace("{hash}", &"a".repeat(64))
                .replace("{*path}", "x/y");
            let uri: axum::http::Uri = example.parse().unwrap();
            let by_url = r.image.map(|routes::ByUrl(u)| u);
            assert_eq!(
                image_route(&uri),
                Some((r.path, by_url.unwrap())),
                "{}",
                r.path
            );
        }
        assert_eq!(image_route(&"/v1/originals".parse().unwrap()), None);
    }

    fn forwarded(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn the_client_is_the_peer_unless_the_peer_is_a_trusted_proxy() {
        let trusted = crate::config::parse_networks("10.0.0.0/8, ::1").unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let h = forwarded(&["198.51.100.7"]);
        assert_eq!(client(ip("192.0.2.1"), &h, &trusted), ip("192.0.2.1"));
        assert_eq!(client(ip("10.1.2.3"), &h, &trusted), ip("198.51.100.7"));
        // Each trusted hop appends; the first untrusted one from the right is the client,
        // and what stands left of it (written by the client) is not believed.
        let h = forwarded(&["203.0.113.9, 198.51.100.7", "10.9.9.9"]);
        assert_eq!(client(ip("10.1.2.3"), &h, &trusted), ip("198.51.100.7"));
        // A malformed hop ends the walk at the last address believed.
        let h = forwarded(&["198.51.100.7, junk"]);
        assert_eq!(client(ip("::1"), &h, &trusted), ip("::1"));
        // No header: the proxy itself.
        assert_eq!(
            client(ip("10.1.2.3"), &HeaderMap::new(), &trusted),
            ip("10.1.2.3")
        );
        // An IPv4 peer seen as IPv6 is the IPv4 address.
        assert_eq!(
            client(ip("::ffff:192.0.2.1"), &HeaderMap::new(), &[]),
            ip("192.0.2.1")
        );
    }
}
