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

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, Method, Response};
use axum::Router;
use hyper_util::service::TowerToHyperService;

use super::{answer, dialects, image, observe, Service};
use crate::pipeline::{Provenance, Recalled};

/// A hyper service: remembered hits first, then the router.
#[derive(Clone)]
pub struct Front {
    service: Service,
    router: TowerToHyperService<Router>,
    /// The accounting of hits answered here, by route pattern.
    hits: Arc<Vec<(&'static str, observe::Fixed)>>,
}

impl Front {
    pub fn new(service: Service, router: Router) -> Front {
        let patterns = [BY_URL, BY_HASH]
            .into_iter()
            .chain(dialects::PREFIXES.iter().map(|d| d.pattern));
        Front {
            hits: Arc::new(
                patterns
                    .map(|route| (route, observe::Fixed::hit(&service, route)))
                    .collect(),
            ),
            service,
            router: TowerToHyperService::new(router),
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

    fn call(&self, request: Request<hyper::body::Incoming>) -> Answer {
        // A target over `limits.max_url_bytes` is not looked up: the router answers it 414.
        if super::target_too_long(&self.service, request.uri()) {
            return Box::pin(self.router.call(request));
        }
        let mut request = request;
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
