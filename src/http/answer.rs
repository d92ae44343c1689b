//! How a located variant is answered: `304` or its bytes (or its error), with the headers
//! every image answer carries (ETag, `Cache-Control`, where it came from, `Vary`, the purge
//! tags), and the client hints image options read. Shared by the image routes (`image.rs`),
//! the fallback (`fallback.rs`) and the front's answers from memory (`front.rs`); it imports
//! none of them.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use imgcas_processors::{Chosen, ClientHints};

use super::{etag_matches, Service};
use crate::hash::ContentHash;
use crate::pipeline::{Provenance, Target};

pub(super) const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// The client hints image routes ask browsers for (`Accept-CH`), read by `dpr=auto` and
/// `w=auto` (see `Spec::with_hints`).
pub(super) const ACCEPT_CH: &str = "Sec-CH-DPR, Sec-CH-Width, Save-Data";

/// The hint headers, in the order the request key holds them.
pub(super) const HINT_HEADERS: [&str; 3] = ["sec-ch-dpr", "sec-ch-width", "save-data"];

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

/// The `X-Imgcas-Cache` value of an answer (a cached error is `error-hit`, in `error.rs`).
pub(super) fn cache_header(provenance: Provenance) -> &'static str {
    match provenance {
        Provenance::Stored => "hit",
        Provenance::Made => "miss",
        Provenance::Revalidated => "revalidated",
        Provenance::Stale => "stale",
    }
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
            quality_headers(response.headers_mut(), served.chosen);
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

/// `X-Imgcas-Quality` (the encoder quality) and `X-Imgcas-Score` (its SSIMULACRA2 score, one
/// decimal) of a `q=auto` variant: what its search chose.
pub(super) fn quality_headers(h: &mut HeaderMap, chosen: Option<Chosen>) {
    let Some(chosen) = chosen else {
        return;
    };
    h.insert(
        "x-imgcas-quality",
        HeaderValue::from(u16::from(chosen.quality)),
    );
    if let Some(v) = chosen
        .score()
        .and_then(|s| HeaderValue::from_str(&format!("{s:.1}")).ok())
    {
        h.insert("x-imgcas-score", v);
    }
}

/// The `Cache-Tag` of what a URL (in canonical form) served.
pub(super) fn url_tag(url: &str) -> String {
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
pub(super) fn tag_hashes(
    h: &mut HeaderMap,
    hashes: impl IntoIterator<Item = ContentHash>,
    url: Option<&str>,
) {
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
