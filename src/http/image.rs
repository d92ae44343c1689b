//! `GET/HEAD /v1/image?url=…` and `GET/HEAD /v1/image/<sha256>`: processed images.
//! (axum answers `HEAD` from the `GET` handler and drops the body.)

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Extension;

use imgcas_processors::{accept_class, ClientHints, Spec};

use super::{etag_matches, Service};
use crate::error::Error;
use crate::fetch::client::canonical_url;
use crate::hash::ContentHash;
use crate::pipeline::{Failure, Provenance, Source, Target};

pub(super) const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// The client hints image routes ask browsers for (`Accept-CH`), read by `dpr=auto` and
/// `w=auto` (see `Spec::with_hints`).
pub(super) const ACCEPT_CH: &str = "Sec-CH-DPR, Sec-CH-Width, Save-Data";

/// The hint headers, in the order the request key holds them.
const HINT_HEADERS: [&str; 3] = ["sec-ch-dpr", "sec-ch-width", "save-data"];

/// The client hints a request carries.
pub(super) fn client_hints(headers: &HeaderMap) -> ClientHints {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let number = |name: &str| text(name).and_then(|v| v.trim().parse::<f64>().ok());
    ClientHints {
        dpr: number(HINT_HEADERS[0]),
        width: number(HINT_HEADERS[1]),
        // `on`, possibly with parameters after a `;`.
        save_data: text(HINT_HEADERS[2]).is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("on"))
        }),
    }
}

/// Adds `Accept-CH` to every answer of an image route (errors too: a first request that
/// failed still tells the browser which hints to send).
pub(super) async fn advertise_hints(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert("accept-ch", HeaderValue::from_static(ACCEPT_CH));
    response
}

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
    fn asked(self) -> super::fallback::Asked {
        super::fallback::Asked {
            spec: self.spec,
            preset: self.preset,
            json: self.json,
        }
    }
}

/// Splits a query into the source URL (if `url_param`) and the processing spec, expanding a
/// `preset` into its options (explicit options override them, unless only presets are allowed).
fn parse_query(service: &Service, query: Option<&str>, url_param: bool) -> Result<Parsed, Error> {
    let pairs = crate::config::option_pairs(query.unwrap_or(""));
    let json = pairs.iter().any(|(k, v)| k == "format" && v == "json");
    if pairs.iter().filter(|(k, _)| k == "format").count() > 1 {
        return Err(Error::invalid_option("format", "given more than once"));
    }
    let mut url = None;
    let mut preset = None;
    let mut explicit: Vec<(&str, &str)> = Vec::with_capacity(pairs.len());
    for (k, v) in &pairs {
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
                pipeline
                    .refuse_listed(&resolved.source)
                    .map_err(|e| Failure::from(e).with_hash(resolved.source))?;
                (resolved.hash, resolved.source)
            }
        };
        let failed = |e: Error| Failure::from(e).with_hash(hash);
        pipeline.refuse_listed(&hash).map_err(failed)?;
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

/// The `X-Imgcas-Cache` value of an answer (a cached error is `error-hit`, in `error.rs`).
pub(super) fn cache_header(provenance: Provenance) -> &'static str {
    match provenance {
        Provenance::Stored => "hit",
        Provenance::Made => "miss",
        Provenance::Revalidated => "revalidated",
        Provenance::Stale => "stale",
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
    or_fallback(&service, answer, &headers, query.as_deref(), true).await
}

/// `answer`, or the fallback image in its place (`fallback.rs`), processed as `query` asks.
async fn or_fallback(
    service: &Service,
    answer: Response,
    headers: &HeaderMap,
    query: Option<&str>,
    url_param: bool,
) -> Response {
    super::fallback::instead_of(service, answer, headers, || {
        parse_query(service, query, url_param).map(Parsed::asked)
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
    let parsed = match parse_query(service, query, hash.is_none()) {
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
    or_fallback(&service, answer, &headers, query.as_deref(), false).await
}

/// An image by URL asked in another dialect (`dialects/`), whose signature that dialect has
/// checked: from here, as a native request by URL with these options.
pub(super) async fn by_translated_url(
    service: &Service,
    uri: &Uri,
    headers: &HeaderMap,
    looked: Option<Extension<Looked>>,
    translated: super::dialects::Translated,
) -> Response {
    let query = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(&translated.pairs)
        .finish();
    let cache_control = service.url_cache_control();
    let answer = async {
        let request = match recalled(service, uri, headers, looked, cache_control).await {
            Ok(request) => request,
            Err(answer) => return answer,
        };
        match parse_query(service, Some(&query), false) {
            Ok(parsed) => {
                answer_by_url(service, request, parsed, &translated.source, headers).await
            }
            Err(e) => e.into_response(),
        }
    }
    .await;
    or_fallback(service, answer, headers, Some(&query), false).await
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

/// The answer for a located variant: `304` when the client's copy matches, else its bytes
/// (shared with the hot cache, not copied) or its error.
pub(super) async fn respond(
    service: &Service,
    target: &Target,
    headers: &HeaderMap,
    cache_control: &str,
) -> Response {
    if etag_matches(headers, &target.etag) {
        let mut response = StatusCode::NOT_MODIFIED.into_response();
        decorate(&mut response, target, target.unchanged(), cache_control);
        return response;
    }
    let asker = || service.asker(headers, target.asker());
    match service.pipeline().variant_as(target, asker).await {
        Ok(served) => {
            let mut response = served.bytes.into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(served.format.mime()),
            );
            decorate(&mut response, target, served.provenance, cache_control);
            response
        }
        Err(f) => {
            // A cached error of this variant is as much a function of the hints as its image,
            // and is purged with its original.
            let mut response = f.into_response();
            if let Some(v) = vary(target) {
                response.headers_mut().insert(header::VARY, v);
            }
            tag(response.headers_mut(), target);
            response
        }
    }
}

pub(super) fn decorate(
    response: &mut Response,
    target: &Target,
    provenance: Provenance,
    cache_control: &str,
) {
    decorate_headers(response.headers_mut(), target, provenance, cache_control);
}

/// The request headers an answer varies by: `Accept` for `format=auto`, and the client
/// hints its options consulted.
fn vary(target: &Target) -> Option<HeaderValue> {
    let accept = target.varies_by_accept.then_some("Accept");
    let names: Vec<&str> = accept
        .into_iter()
        .chain(target.vary_hints.headers())
        .collect();
    match names.as_slice() {
        [] => None,
        ["Accept"] => Some(HeaderValue::from_static("Accept")),
        _ => HeaderValue::from_str(&names.join(", ")).ok(),
    }
}

/// [`decorate`]'s headers, into `h`.
pub(super) fn decorate_headers(
    h: &mut HeaderMap,
    target: &Target,
    provenance: Provenance,
    cache_control: &str,
) {
    let value = |s: &str| HeaderValue::from_str(s).ok();
    if let Some(v) = value(&target.etag) {
        h.insert(header::ETAG, v);
    }
    if let Some(v) = value(cache_control) {
        h.insert(header::CACHE_CONTROL, v);
    }
    if let Some(v) = value(&target.source_hash().to_hex()) {
        h.insert("x-imgcas-source-hash", v);
    }
    if let Some(v) = target.canonical().and_then(|c| value(&c.to_hex())) {
        h.insert("x-imgcas-canonical", v);
    }
    h.insert(
        "x-imgcas-cache",
        HeaderValue::from_static(cache_header(provenance)),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if let Some(v) = vary(target) {
        h.insert(header::VARY, v);
    }
    tag(h, target);
}

/// The `Cache-Tag` of what a URL (in canonical form) served.
fn url_tag(url: &str) -> String {
    format!("url-{}", ContentHash::of(url.as_bytes()).to_hex())
}

/// `Surrogate-Key` (Fastly's, space-separated) and `Cache-Tag` (Cloudflare's, comma-separated):
/// the hashes of the source's bytes and, in canonical mode, of the original whose pixels were
/// used, so that a CDN purges every variant of an original by one tag (and of a watermark's
/// overlay: every variant drawn with it); `Cache-Tag` also names the URL (`url-` and the
/// SHA-256 of its canonical form), to purge what one URL served.
fn tag(h: &mut HeaderMap, target: &Target) {
    let overlay = target.spec.shape.watermark.as_ref();
    let overlay = overlay.and_then(|w| w.overlay.as_deref()?.parse::<ContentHash>().ok());
    let hashes = [Some(target.source_hash()), target.canonical(), overlay];
    tag_hashes(h, hashes.into_iter().flatten(), target.url.as_deref());
}

/// [`tag`] from its parts: the source's own hash, then the canonical original and the
/// overlay (where there are), and the source URL (if the request named one).
fn tag_hashes(h: &mut HeaderMap, hashes: impl IntoIterator<Item = ContentHash>, url: Option<&str>) {
    let hashes: Vec<String> = hashes.into_iter().map(|c| c.to_hex()).collect();
    let url = url.map(url_tag);
    let cache_tags: Vec<&str> = hashes
        .iter()
        .map(String::as_str)
        .chain(url.as_deref())
        .collect();
    if let Ok(v) = HeaderValue::from_str(&hashes.join(" ")) {
        h.insert("surrogate-key", v);
    }
    if let Ok(v) = HeaderValue::from_str(&cache_tags.join(",")) {
        h.insert("cache-tag", v);
    }
}
