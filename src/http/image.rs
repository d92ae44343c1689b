//! `GET/HEAD /v1/image?url=…` and `GET/HEAD /v1/image/<sha256>`: processed images.
//! (axum answers `HEAD` from the `GET` handler and drops the body.)

use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use imgcas_processors::Spec;

use super::{etag_matches, Service};
use crate::error::Error;
use crate::fetch::client::canonical_url;
use crate::pipeline::{Provenance, Source, Target};

const IMMUTABLE: &str = "public, max-age=31536000, immutable";

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

pub async fn by_url(
    State(service): State<Service>,
    uri: Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = service.check_signature(&uri) {
        return e.into_response();
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
    let revalidate = service.config().fetch.revalidate_after.as_secs();
    let cache_control = format!(
        "public, max-age={revalidate}, stale-while-revalidate={}",
        revalidate.max(60)
    );
    respond(&service, Source::Url(url), &spec, &headers, &cache_control).await
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
    let Ok(hash) = hash.parse() else {
        return Error::NotFound("not a SHA-256 hex digest".into()).into_response();
    };
    let spec = match parse_query(&service, query.as_deref(), false) {
        Ok((_, spec)) => spec,
        Err(e) => return e.into_response(),
    };
    respond(&service, Source::Hash(hash), &spec, &headers, IMMUTABLE).await
}

async fn respond(
    service: &Service,
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
    let vary = spec.varies_by_accept();
    if etag_matches(headers, &target.etag) {
        let mut response = StatusCode::NOT_MODIFIED.into_response();
        decorate(
            &mut response,
            &target,
            target.unchanged(),
            cache_control,
            vary,
        );
        return response;
    }
    match pipeline.variant(&target).await {
        Ok(served) => {
            let mut response = served.bytes.into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(served.format.mime()),
            );
            decorate(
                &mut response,
                &target,
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

fn decorate(
    response: &mut Response,
    target: &Target,
    provenance: Provenance,
    cache_control: &str,
    vary: bool,
) {
    let h = response.headers_mut();
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
