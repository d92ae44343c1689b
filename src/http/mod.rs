//! The HTTP face of the service (SPEC "HTTP API"): one file per resource, and `error.rs`
//! as the one place errors become statuses and JSON.

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;

use crate::app::Shared;

pub mod error;
pub mod image;
pub mod ops;
pub mod originals;

pub fn router(shared: Arc<Shared>) -> Router {
    // Multipart framing needs a little room beyond the largest accepted source.
    let body_limit = usize::try_from(shared.config.fetch.max_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(64 << 10);
    Router::new()
        .route("/v1/image", get(image::by_url))
        .route("/v1/image/{hash}", get(image::by_hash))
        .route("/v1/originals", post(originals::upload))
        .route("/v1/originals/{hash}", get(originals::original))
        .route("/v1/originals/{hash}/info", get(originals::info))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .fallback(ops::not_found)
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(shared)
}

/// Whether an `If-None-Match` header matches `etag` (weak comparison, as RFC 9110 asks).
pub fn etag_matches(headers: &axum::http::HeaderMap, etag: &str) -> bool {
    let bare = etag.trim_start_matches("W/");
    headers
        .get_all(axum::http::header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|candidate| candidate == "*" || candidate.trim_start_matches("W/") == bare)
}
