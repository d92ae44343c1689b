//! The HTTP face of the service (SPEC "HTTP API"): one file per resource, and `error.rs`
//! as the one place errors become statuses and JSON.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;

use crate::app::Shared;

pub mod error;
pub mod image;
pub mod ingest;
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
        .route("/v1/ingest", post(ingest::ingest))
        .route("/v1/originals/{hash}", get(originals::original))
        .route("/v1/originals/{hash}/info", get(originals::info))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route_layer(middleware::from_fn_with_state(shared.clone(), observe))
        .fallback(ops::not_found)
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(shared)
}

/// Counts and times every routed request, by route pattern (never the raw path, which would
/// make a series per URL), and logs one access line.
async fn observe(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = request.method().clone();
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    let cache = response
        .headers()
        .get("x-imgcas-cache")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    shared.metrics.with(|| {
        metrics::counter!(
            "imgcas_http_requests_total",
            "route" => route.clone(),
            "method" => method.to_string(),
            "status" => status.to_string()
        )
        .increment(1);
        // By status and cache outcome too: a hit, a processed image and a refusal are
        // different latencies.
        metrics::histogram!(
            "imgcas_http_request_duration_seconds",
            "route" => route.clone(),
            "status" => status.to_string(),
            "cache" => cache.clone().unwrap_or_else(|| "none".into())
        )
        .record(elapsed.as_secs_f64());
        if let Some(outcome) = &cache {
            metrics::counter!("imgcas_cache_outcomes_total", "outcome" => outcome.clone())
                .increment(1);
        }
    });
    tracing::info!(
        target: "imgcas::access",
        method = %method,
        route,
        status,
        cache = cache.as_deref().unwrap_or("-"),
        ms = elapsed.as_secs_f64() * 1000.0,
    );
    response
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
