//! `GET/HEAD /v1/image?url=…` and `GET/HEAD /v1/image/<sha256>`: processed images.
//! (axum answers `HEAD` from the `GET` handler and drops the body.)

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, Uri};
use axum::response::{IntoResponse, Response};
use axum::Extension;

use imgcas_processors::accept_class;

use super::answer::{respond, tag_hashes, url_tag, HINT_HEADERS, IMMUTABLE};
use super::dialects;
use super::fallback;
use super::request::{not_a_hash, ImageRequest, Named};
use super::Service;
use crate::error::Error;
use crate::pipeline::{Failure, Source, Target};

/// `format=json`: the facts of the original a request names (as `info` answers them), so a
/// page can fetch placeholder and dimensions before the image. Read from the index; a
/// URL is resolved as for pixels (a first request downloads it).
async fn facts_response(service: &Service, source: Source, cache_control: &str) -> Response {
    let pipeline = service.pipeline();
    let answer = async {
        let (hash, own) = match &source {
            Source::Hash(hash) => (*hash, *hash),
            Source::Url(url) => {
                let resolved = pipeline.resolve_url(url, false).await?;
                (resolved.hash, resolved.source)
            }
        };
        pipeline.may_serve(&[own, hash])?;
        let failed = |e: Error| Failure::from(e).with_hash(hash);
        let info = pipeline
            .original(&hash)
            .await
            .map_err(failed)?
            .ok_or_else(|| failed(Error::NotFound(format!("no original with hash {hash}"))))?;
        let answer = super::originals::info_answer(service, hash, &info)
            .await
            .map_err(failed)?;
        Ok::<_, Failure>((answer, own, hash))
    };
    let url = match &source {
        Source::Url(url) => Some(url.as_str()),
        Source::Hash(_) => None,
    };
    match answer.await {
        Ok((answer, own, hash)) => {
            let mut response = axum::Json(answer).into_response();
            let h = response.headers_mut();
            if let Ok(v) = HeaderValue::from_str(cache_control) {
                h.insert(header::CACHE_CONTROL, v);
            }
            if let Ok(v) = HeaderValue::from_str(&own.to_hex()) {
                h.insert("x-imgcas-source-hash", v);
            }
            // Purged with the original's images (a takedown's CDN purge by tag).
            let canonical = (own != hash).then_some(hash);
            tag_hashes(h, [Some(own), canonical].into_iter().flatten(), url);
            response
        }
        Err(f) => f.into_response(),
    }
}

/// What identifies a request to the request cache: its path, its whole query (`sig`
/// included) and the class of its `Accept` (all that negotiation reads of it).
pub(super) fn request_key(service: &Service, uri: &Uri, headers: &HeaderMap) -> Vec<u8> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let (path, query) = (uri.path(), uri.query().unwrap_or(""));
    let mut key = Vec::with_capacity(path.len() + query.len() + 8);
    key.extend_from_slice(path.as_bytes());
    key.push(0);
    key.extend_from_slice(query.as_bytes());
    key.push(0);
    key.push(accept_class(accept));
    // The hints as sent, when the query may read them (`auto`, a preset, or an encoded
    // value that may spell either): the key is made before the query is parsed, and leaving
    // them out of the others' keys keeps one entry per request however the hints vary.
    // A dialect's URL (`dialects/`) says its options in its path, a preset among them.
    // With `quality.default=auto`, a request without `q` is a `q=auto` one, which reads
    // `Save-Data`.
    let may_read_hints = service.config().quality.default.request().is_some()
        || query.contains("auto")
        || query.contains("preset")
        || query.contains('%')
        || !path.starts_with("/v1/image");
    for name in HINT_HEADERS.into_iter().filter(|_| may_read_hints) {
        key.push(0);
        if let Some(value) = headers.get(name) {
            key.extend_from_slice(value.as_bytes());
        }
    }
    key
}

/// What the front found of an image request before routing it: its request-cache key, and
/// the target remembered under it (whose variant was not in memory, or the request was
/// conditional or a `HEAD`).
#[derive(Clone)]
pub(super) struct Looked {
    pub(super) key: Vec<u8>,
    pub(super) target: Option<Arc<Target>>,
}

/// The lookup every image route starts with, once its signature is checked: the request
/// cache (as the front looked it up, or now for a request that did not come through it).
/// `Err`: the answer of a remembered target; `Ok`: the key to remember the request by.
async fn recalled(
    service: &Service,
    uri: &Uri,
    headers: &HeaderMap,
    looked: Option<Extension<Looked>>,
    cache_control: &str,
) -> Result<Vec<u8>, Response> {
    let looked = match looked {
        Some(Extension(looked)) => looked,
        None => {
            let key = request_key(service, uri, headers);
            let target = service.pipeline().recall(&key);
            Looked { key, target }
        }
    };
    match looked.target {
        Some(target) => Err(respond(service, &target, headers, cache_control).await),
        None => Ok(looked.key),
    }
}

/// How long a `format=json` answer by hash may be kept.
const FACTS_BY_HASH: &str = "public, max-age=3600";

pub(super) async fn by_url(
    State(service): State<Service>,
    uri: Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    looked: Option<Extension<Looked>>,
) -> Response {
    native(
        &service,
        Named::UrlOption,
        &uri,
        query.as_deref(),
        &headers,
        looked,
    )
    .await
}

pub(super) async fn by_hash(
    State(service): State<Service>,
    uri: Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    Path(hash): Path<String>,
    looked: Option<Extension<Looked>>,
) -> Response {
    let named = Named::Hash(&hash);
    native(&service, named, &uri, query.as_deref(), &headers, looked).await
}

/// A native image route: its signature checked, then [`answer`]ed.
async fn native(
    service: &Service,
    named: Named<'_>,
    uri: &Uri,
    query: Option<&str>,
    headers: &HeaderMap,
    looked: Option<Extension<Looked>>,
) -> Response {
    if let Err(e) = service.check_signature(uri) {
        return e.into_response();
    }
    let by_url = matches!(named, Named::UrlOption);
    let pairs = crate::config::option_pairs(query.unwrap_or(""));
    let read = || ImageRequest::read(service, &pairs, named, headers);
    answer(service, by_url, read, uri, headers, looked).await
}

/// `GET /imgproxy/{signature}/{options}/…` and `GET /thumbor/{hmac|unsafe}/…`: read by the
/// dialect the prefix names (`dialects/`), its signature checked there, then answered as a
/// native request by URL with the options it says (the pairs as the dialect said them,
/// never spelled into a query to be split again).
pub(super) async fn by_dialect(
    State(service): State<Service>,
    uri: Uri,
    headers: HeaderMap,
    looked: Option<Extension<Looked>>,
) -> Response {
    let translated = match dialects::read(service.dialect(), &uri) {
        Ok(translated) => translated,
        Err(e) => return e.into_response(),
    };
    let read = || {
        let named = Named::Url(&translated.source);
        ImageRequest::read(&service, &translated.pairs, named, &headers)
    };
    answer(&service, true, read, &uri, &headers, looked).await
}

/// The one flow of every image route once its signature is checked: the request cache,
/// then the request read (once) and its variant (or facts) located and answered; a
/// source's failure is then answered by the fallback image, processed as the same request
/// asks (`fallback.rs`). A remembered request is answered without reading its options:
/// they are read only when that answer failed and a fallback may take its place.
async fn answer(
    service: &Service,
    by_url: bool,
    read: impl FnOnce() -> Result<ImageRequest, Error>,
    uri: &Uri,
    headers: &HeaderMap,
    looked: Option<Extension<Looked>>,
) -> Response {
    let remembered = if by_url {
        service.url_cache_control()
    } else {
        IMMUTABLE
    };
    let key = match recalled(service, uri, headers, looked, remembered).await {
        Ok(key) => key,
        Err(answer) if !fallback::may_replace(&answer) => return answer,
        Err(answer) => {
            return match read() {
                Ok(request) => fallback::instead_of(service, answer, headers, &request).await,
                Err(_) => answer,
            }
        }
    };
    let request = match read() {
        Ok(request) => request,
        Err(e) => return e.into_response(),
    };
    let Some(source) = &request.source else {
        let answer = not_a_hash().into_response();
        return fallback::instead_of(service, answer, headers, &request).await;
    };
    let cache_control = match (source, request.json) {
        (Source::Url(_), _) => service.url_cache_control(),
        // Facts of an original never change, but its near-duplicates may: not immutable.
        (Source::Hash(_), true) => FACTS_BY_HASH,
        (Source::Hash(_), false) => IMMUTABLE,
    };
    let answer = match request.json {
        true => facts_response(service, source.clone(), cache_control).await,
        false => locate_and_respond(service, key, source, &request, headers, cache_control).await,
    };
    fallback::instead_of(service, answer, headers, &request).await
}

/// A request the request cache did not know: the pipeline finds its variant (remembered for
/// the next time), then it is answered.
async fn locate_and_respond(
    service: &Service,
    key: Vec<u8>,
    source: &Source,
    request: &ImageRequest,
    headers: &HeaderMap,
    cache_control: &str,
) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let pipeline = service.pipeline();
    let target = match pipeline.locate(source, &request.spec, accept).await {
        Ok(t) => t,
        Err(f) => {
            // An origin's failure held for this URL is purged by the URL's tag.
            let mut response = f.into_response();
            if let Source::Url(url) = source {
                if let Ok(v) = HeaderValue::from_str(&url_tag(url.as_str())) {
                    response.headers_mut().insert("cache-tag", v);
                }
            }
            return response;
        }
    };
    pipeline.remember(&key, &target);
    respond(service, &target, headers, cache_control).await
}
