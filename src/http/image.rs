//! `GET/HEAD /v1/image?url=…` and `GET/HEAD /v1/image/<sha256>`: processed images.
//! (axum answers `HEAD` from the `GET` handler and drops the body.)

use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use imgcas_processors::{accept_class, Spec};

use super::{etag_matches, Service};
use crate::error::Error;
use crate::fetch::client::canonical_url;
use crate::pipeline::{Provenance, Source, Target};

pub(super) const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// Splits a query into the source URL (if `url_param`) and the processing spec, expanding a
/// `preset` into its options (explicit options override them, unless only presets are allowed).
fn parse_query(
    service: &Service,
    query: Option<&str>,
    url_param: bool,
) -> Result<(Option<String>, Spec), Error> {
    let pairs = crate::config::option_pairs(query.unwrap_or(""));
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
            _ => explicit.push((k.as_str(), v.as_str())),
        }
    }
    if service.only_presets() {
        if let Some((name, _)) = explicit.first() {
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
    Ok((url, spec))
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
    let mut key = Vec::with_capacity(path.len() + query.len() + 3);
    key.extend_from_slice(path.as_bytes());
    key.push(0);
    key.extend_from_slice(query.as_bytes());
    key.push(0);
    key.push(accept_class(accept));
    key
}

pub async fn by_url(
    State(service): State<Service>,
    uri: Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = service.check_signature(&uri) {
        return e.into_response();
    }
    let request = request_key(&uri, &headers);
    let cache_control = service.url_cache_control();
    if let Some(target) = service.pipeline().recall(&request) {
        return respond(&service, &target, &headers, cache_control).await;
    }
    let (raw, spec) = match parse_query(&service, query.as_deref(), true) {
        Ok(parsed) => parsed,
        Err(e) => return e.into_response(),
    };
    let Some(raw) = raw else {
        return Error::invalid_option("url", "the source URL is required").into_response();
    };
    let url = match canonical_url(&raw) {
        Ok(url) => url,
        Err(e) => return Error::from(e).into_response(),
    };
    locate_and_respond(
        &service,
        request,
        Source::Url(url),
        &spec,
        &headers,
        cache_control,
    )
    .await
}

pub async fn by_hash(
    State(service): State<Service>,
    Path(hash): Path<String>,
    uri: Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = service.check_signature(&uri) {
        return e.into_response();
    }
    let request = request_key(&uri, &headers);
    if let Some(target) = service.pipeline().recall(&request) {
        return respond(&service, &target, &headers, IMMUTABLE).await;
    }
    let Ok(hash) = hash.parse() else {
        return Error::NotFound("not a SHA-256 hex digest".into()).into_response();
    };
    let spec = match parse_query(&service, query.as_deref(), false) {
        Ok((_, spec)) => spec,
        Err(e) => return e.into_response(),
    };
    locate_and_respond(
        &service,
        request,
        Source::Hash(hash),
        &spec,
        &headers,
        IMMUTABLE,
    )
    .await
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
    let pipeline = service.pipeline();
    let target = match pipeline.locate(&source, spec, accept).await {
        Ok(t) => t,
        Err(f) => return f.into_response(),
    };
    pipeline.remember(&request, &target);
    respond(service, &target, headers, cache_control).await
}

/// The answer for a located variant: `304` when the client's copy matches, else its bytes
/// (shared with the hot cache, not copied) or its error.
async fn respond(
    service: &Service,
    target: &Target,
    headers: &HeaderMap,
    cache_control: &str,
) -> Response {
    let vary = target.varies_by_accept;
    if etag_matches(headers, &target.etag) {
        let mut response = StatusCode::NOT_MODIFIED.into_response();
        decorate(
            &mut response,
            target,
            target.unchanged(),
            cache_control,
            vary,
        );
        return response;
    }
    match service.pipeline().variant(target).await {
        Ok(served) => {
            let mut response = served.bytes.into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(served.format.mime()),
            );
            decorate(
                &mut response,
                target,
                served.provenance,
                cache_control,
                vary,
            );
            response
        }
        Err(f) => {
            let mut response = f.into_response();
            if vary {
                response
                    .headers_mut()
                    .insert(header::VARY, HeaderValue::from_static("Accept"));
            }
            response
        }
    }
}

pub(super) fn decorate(
    response: &mut Response,
    target: &Target,
    provenance: Provenance,
    cache_control: &str,
    vary: bool,
) {
    decorate_headers(
        response.headers_mut(),
        target,
        provenance,
        cache_control,
        vary,
    );
}

/// [`decorate`]'s headers, into `h`.
pub(super) fn decorate_headers(
    h: &mut HeaderMap,
    target: &Target,
    provenance: Provenance,
    cache_control: &str,
    vary: bool,
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
    if vary {
        h.insert(header::VARY, HeaderValue::from_static("Accept"));
    }
}
