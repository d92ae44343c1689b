//! `GET/HEAD /v1/image?url=…` and `GET/HEAD /v1/image/<sha256>`: processed images.
//! (axum answers `HEAD` from the `GET` handler and drops the body.)

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, Uri};
use axum::response::{IntoResponse, Response};
use axum::Extension;

use imgcas_processors::{accept_class, Spec};

use super::answer::{client_hints, respond, tag_hashes, url_tag, HINT_HEADERS, IMMUTABLE};
use super::dialects;
use super::fallback::{self, Asked};
use super::Service;
use crate::error::Error;
use crate::fetch::client::canonical_url;
use crate::pipeline::{Failure, Source, Target};

/// A query as [`parse_query`] splits it.
struct Parsed {
    url: Option<String>,
    spec: Spec,
    /// `format=json`: the original's facts are asked for, not pixels.
    json: bool,
    /// The preset named, if any.
    preset: Option<String>,
}

impl Parsed {
    fn asked(self) -> Asked {
        Asked {
            spec: self.spec,
            preset: self.preset,
            json: self.json,
        }
    }
}

/// Splits a request's option pairs (a native query's, or a dialect's URL said in imgcas's
/// options) into the source URL (if `url_param`) and the processing spec, expanding a `preset`
/// into its options (explicit options override them, unless only presets are allowed).
fn parse_query(
    service: &Service,
    pairs: &[(String, String)],
    url_param: bool,
) -> Result<Parsed, Error> {
    let json = pairs.iter().any(|(k, v)| k == "format" && v == "json");
    if pairs.iter().filter(|(k, _)| k == "format").count() > 1 {
        return Err(Error::invalid_option("format", "given more than once"));
    }
    let mut url = None;
    let mut preset = None;
    let mut explicit: Vec<(&str, &str)> = Vec::with_capacity(pairs.len());
    for (k, v) in pairs {
        match k.as_str() {
            "url" if url_param => {
                if url.replace(v.clone()).is_some() {
                    return Err(Error::invalid_option("url", "given more than once"));
                }
            }
            "preset" => {
                if preset.replace(v.as_str()).is_some() {
                    return Err(Error::invalid_option("preset", "given more than once"));
                }
            }
            // Checked before parsing, by `check_signature`.
            "sig" => {}
            // Facts, not pixels: no output format to parse.
            "format" if json => {}
            _ => explicit.push((k.as_str(), v.as_str())),
        }
    }
    if service.only_presets() {
        // `format=json` is an option like any other: facts are not a preset's output.
        let spelled = explicit.first().map(|(name, _)| *name);
        if let Some(name) = spelled.or(json.then_some("format")) {
            return Err(Error::PresetRequired(format!(
                "only presets are allowed here: `{name}` must come from a preset"
            )));
        }
        if preset.is_none() {
            return Err(Error::PresetRequired(
                "only presets are allowed here: name one with `preset=<name>`".into(),
            ));
        }
    }
    let mut options: Vec<(&str, &str)> = match preset {
        None => Vec::new(),
        Some(name) => service
            .preset(name)
            .ok_or_else(|| Error::invalid_option("preset", format!("no preset named `{name}`")))?
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .filter(|(k, _)| !explicit.iter().any(|(e, _)| e == k))
            .collect(),
    };
    options.extend(explicit);
    let spec = Spec::from_pairs(options)?;
    Ok(Parsed {
        url,
        spec,
        json,
        preset: preset.map(str::to_string),
    })
}

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
pub(super) fn request_key(uri: &Uri, headers: &HeaderMap) -> Vec<u8> {
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
    let may_read_hints = query.contains("auto")
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
            let key = request_key(uri, headers);
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
    let answer = native_answer(
        &service,
        Named::Url,
        &uri,
        query.as_deref(),
        &headers,
        looked,
    )
    .await;
    let pairs = crate::config::option_pairs(query.as_deref().unwrap_or(""));
    or_fallback(&service, answer, &headers, &pairs, true).await
}

/// `answer`, or the fallback image in its place (`fallback.rs`), processed as `pairs` ask.
async fn or_fallback(
    service: &Service,
    answer: Response,
    headers: &HeaderMap,
    pairs: &[(String, String)],
    url_param: bool,
) -> Response {
    fallback::instead_of(service, answer, headers, || {
        parse_query(service, pairs, url_param).map(Parsed::asked)
    })
    .await
}

/// What a native image route names its source by.
enum Named<'a> {
    /// The `url` option.
    Url,
    /// The path's hash, as written.
    Hash(&'a str),
}

/// A native image route's answer, before any fallback: the signature, the request cache,
/// then the source and options.
async fn native_answer(
    service: &Service,
    named: Named<'_>,
    uri: &Uri,
    query: Option<&str>,
    headers: &HeaderMap,
    looked: Option<Extension<Looked>>,
) -> Response {
    let cache_control = match named {
        Named::Url => service.url_cache_control(),
        Named::Hash(_) => IMMUTABLE,
    };
    if let Err(e) = service.check_signature(uri) {
        return e.into_response();
    }
    let request = match recalled(service, uri, headers, looked, cache_control).await {
        Ok(request) => request,
        Err(answer) => return answer,
    };
    let hash = match named {
        Named::Url => None,
        Named::Hash(hash) => match hash.parse() {
            Ok(hash) => Some(hash),
            Err(_) => return Error::NotFound("not a SHA-256 hex digest".into()).into_response(),
        },
    };
    let pairs = crate::config::option_pairs(query.unwrap_or(""));
    let parsed = match parse_query(service, &pairs, hash.is_none()) {
        Ok(parsed) => parsed,
        Err(e) => return e.into_response(),
    };
    let Some(hash) = hash else {
        let Some(raw) = parsed.url.clone() else {
            return Error::invalid_option("url", "the source URL is required").into_response();
        };
        return answer_by_url(service, request, parsed, &raw, headers).await;
    };
    if parsed.json {
        // Facts of an original never change, but its near-duplicates may: not immutable.
        return facts_response(service, Source::Hash(hash), FACTS_BY_HASH).await;
    }
    let source = Source::Hash(hash);
    locate_and_respond(service, request, source, &parsed.spec, headers, IMMUTABLE).await
}

/// The answer for source URL `raw` with the options `parsed` holds: pixels, or facts.
async fn answer_by_url(
    service: &Service,
    request: Vec<u8>,
    parsed: Parsed,
    raw: &str,
    headers: &HeaderMap,
) -> Response {
    let cache_control = service.url_cache_control();
    let url = match canonical_url(raw, service.config().limits.max_url_bytes) {
        Ok(url) => url,
        Err(e) => return Error::from(e).into_response(),
    };
    if parsed.json {
        return facts_response(service, Source::Url(url), cache_control).await;
    }
    let source = Source::Url(url);
    locate_and_respond(
        service,
        request,
        source,
        &parsed.spec,
        headers,
        cache_control,
    )
    .await
}

pub(super) async fn by_hash(
    State(service): State<Service>,
    Path(hash): Path<String>,
    uri: Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    looked: Option<Extension<Looked>>,
) -> Response {
    let named = Named::Hash(&hash);
    let answer = native_answer(&service, named, &uri, query.as_deref(), &headers, looked).await;
    let pairs = crate::config::option_pairs(query.as_deref().unwrap_or(""));
    or_fallback(&service, answer, &headers, &pairs, false).await
}

/// `GET /imgproxy/{signature}/{options}/…` and `GET /thumbor/{hmac|unsafe}/…`: read by the
/// dialect the prefix names (`dialects/`), its signature checked there, then answered as a
/// native request by URL with the options it says.
pub(super) async fn by_dialect(
    State(service): State<Service>,
    uri: Uri,
    headers: HeaderMap,
    looked: Option<Extension<Looked>>,
) -> Response {
    match dialects::read(service.dialect(), &uri) {
        Ok(translated) => by_translated_url(&service, &uri, &headers, looked, translated).await,
        Err(e) => e.into_response(),
    }
}

/// An image by URL asked in another dialect, whose signature that dialect has checked: from
/// here, as a native request by URL with these options (the pairs as the dialect said them,
/// never spelled into a query to be split again).
async fn by_translated_url(
    service: &Service,
    uri: &Uri,
    headers: &HeaderMap,
    looked: Option<Extension<Looked>>,
    translated: dialects::Translated,
) -> Response {
    let cache_control = service.url_cache_control();
    let answer = async {
        let request = match recalled(service, uri, headers, looked, cache_control).await {
            Ok(request) => request,
            Err(answer) => return answer,
        };
        match parse_query(service, &translated.pairs, false) {
            Ok(parsed) => {
                answer_by_url(service, request, parsed, &translated.source, headers).await
            }
            Err(e) => e.into_response(),
        }
    }
    .await;
    or_fallback(service, answer, headers, &translated.pairs, false).await
}

/// A request the request cache did not know: the pipeline finds its variant (remembered for
/// the next time), then it is answered.
async fn locate_and_respond(
    service: &Service,
    request: Vec<u8>,
    source: Source,
    spec: &Spec,
    headers: &HeaderMap,
    cache_control: &str,
) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let spec = spec.with_hints(&client_hints(headers));
    let pipeline = service.pipeline();
    let target = match pipeline.locate(&source, &spec, accept).await {
        Ok(t) => t,
        Err(f) => {
            // An origin's failure held for this URL is purged by the URL's tag.
            let mut response = f.into_response();
            if let Source::Url(url) = &source {
                if let Ok(v) = HeaderValue::from_str(&url_tag(url.as_str())) {
                    response.headers_mut().insert("cache-tag", v);
                }
            }
            return response;
        }
    };
    pipeline.remember(&request, &target);
    respond(service, &target, headers, cache_control).await
}
