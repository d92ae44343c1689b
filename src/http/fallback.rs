//! The fallback image (`fallback.*`, and a preset's own `fallback`): when a request's source
//! fails — gone or unknown, unreachable, too large, bytes that make no picture — the answer
//! is the fallback original processed with the request's own options, marked
//! `X-Imgcas-Fallback: <the error's code>`, with the configured status and `Cache-Control`.
//!
//! Nothing else changes: the source's error is still what the service holds for it (cached
//! as itself, so the next request costs what it cost before), and the fallback's variants are
//! ordinary variants of an ordinary original, made once. Refusals of the request itself
//! (options, signature, presets, an address not allowed), a takedown and the service's own
//! trouble answer as they always do ([`crate::error::Error::is_source_failure`]).

use std::collections::BTreeMap;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;

use super::answer::respond;
use super::error::Failed;
use super::request::ImageRequest;
use super::Service;
use crate::config::FallbackSource;
use crate::hash::ContentHash;
use crate::pipeline::{Pipeline, Source};

/// The fallback images a service answers with, stored as originals.
#[derive(Debug, Default)]
pub struct Fallbacks {
    global: Option<ContentHash>,
    by_preset: BTreeMap<String, ContentHash>,
}

impl Fallbacks {
    /// The configured fallback images. A file is stored as an original now, as an upload
    /// would be (a file that is no readable image stops the start); a hash names an original
    /// that should be stored (one that is not leaves the source's error as the answer).
    pub async fn load(pipeline: &Pipeline) -> Result<Fallbacks, String> {
        let mut fallbacks = Fallbacks::default();
        let structured = pipeline.structured();
        if let Some(image) = &structured.fallback {
            fallbacks.global = Some(stored(pipeline, "fallback.image", image).await?);
        }
        for (name, preset) in &structured.presets {
            if let Some(image) = &preset.fallback {
                let setting = format!("presets.{name}.fallback");
                let hash = stored(pipeline, &setting, image).await?;
                fallbacks.by_preset.insert(name.clone(), hash);
            }
        }
        Ok(fallbacks)
    }

    /// The fallback for a request naming `preset`: the preset's own, else the global one.
    fn for_request(&self, preset: Option<&str>) -> Option<ContentHash> {
        preset
            .and_then(|name| self.by_preset.get(name).copied())
            .or(self.global)
    }
}

/// The original a fallback setting names: its hash, or the file's, stored now.
async fn stored(
    pipeline: &Pipeline,
    setting: &str,
    source: &FallbackSource,
) -> Result<ContentHash, String> {
    match source {
        FallbackSource::Stored(hash) => Ok(*hash),
        FallbackSource::File(path) => {
            let bytes = tokio::fs::read(path)
                .await
                .map_err(|e| format!("{setting}: cannot read {}: {e}", path.display()))?;
            let uploaded = pipeline
                .upload(Bytes::from(bytes))
                .await
                .map_err(|e| format!("{setting}: {}: {e}", path.display()))?;
            Ok(uploaded.hash)
        }
    }
}

/// Whether a fallback may take `answer`'s place: it is a source's failure (its error's code
/// and kind, which every error answer carries as [`Failed`]).
pub(super) fn may_replace(answer: &Response) -> bool {
    answer
        .extensions()
        .get::<Failed>()
        .is_some_and(|failed| failed.source_failure)
}

/// `answer`, or in its place the fallback image processed as `asked` says (its spec, hints
/// applied, as read once), when `answer` is a source's failure (its error's code and kind,
/// which every error answer carries as [`Failed`]) and a fallback applies. A fallback that
/// cannot be made (not stored, taken down, failing itself) leaves `answer` as it was.
pub(super) async fn instead_of(
    service: &Service,
    answer: Response,
    headers: &HeaderMap,
    asked: &ImageRequest,
) -> Response {
    let failed = answer.extensions().get::<Failed>().copied();
    let Some(failed) = failed.filter(|f| f.source_failure) else {
        return answer;
    };
    let Some(image) = service
        .fallbacks()
        .for_request(asked.preset.as_deref())
        .filter(|_| !asked.json)
    else {
        return answer;
    };
    let settings = &service.config().fallback;
    let cache_control = format!("public, max-age={}", settings.ttl.as_secs());
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let Ok(target) = service
        .pipeline()
        .locate(&Source::Hash(image), &asked.spec, accept)
        .await
    else {
        return answer;
    };
    let mut response = respond(service, &target, headers, &cache_control).await;
    if response.extensions().get::<Failed>().is_some() {
        return answer;
    }
    if response.status() == StatusCode::OK {
        *response.status_mut() = StatusCode::from_u16(settings.status).unwrap_or(StatusCode::OK);
    }
    let h = response.headers_mut();
    h.insert("x-imgcas-fallback", HeaderValue::from_static(failed.code));
    // Purged with the failed source too: a purge by its URL's tag reaches this answer.
    if let Some(failed_tags) = answer
        .headers()
        .get("cache-tag")
        .and_then(|v| v.to_str().ok())
    {
        let own = h
            .get("cache-tag")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let joined = match own {
            "" => failed_tags.to_string(),
            own => format!("{own},{failed_tags}"),
        };
        if let Ok(v) = HeaderValue::from_str(&joined) {
            h.insert("cache-tag", v);
        }
    }
    response
}
