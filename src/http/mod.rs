//! The HTTP face of the service (SPEC "HTTP API"): one file per resource, and `error.rs`
//! as the one place errors become statuses, headers and JSON bodies. Handlers share a
//! [`Service`] and reach the stored state only through its [`Pipeline`].

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::pipeline::Pipeline;

pub mod error;
pub mod image;
pub mod ingest;
pub mod ops;
pub mod originals;

/// What every handler shares: the pipeline, the settings HTTP reads, the signing keys and
/// the metrics recorder. Clones share one state.
#[derive(Clone)]
pub struct Service {
    parts: Arc<Parts>,
}

struct Parts {
    pipeline: Pipeline,
    config: Config,
    /// Signing keys (`security.signing_key`); empty: URLs need no `sig`.
    signing_keys: Vec<Vec<u8>>,
    metrics: Metrics,
}

impl Service {
    pub fn new(pipeline: Pipeline, config: Config, metrics: Metrics) -> Service {
        Service {
            parts: Arc::new(Parts {
                pipeline,
                signing_keys: config.security.signing_keys(),
                config,
                metrics,
            }),
        }
    }

    pub fn pipeline(&self) -> &Pipeline {
        &self.parts.pipeline
    }

    pub fn config(&self) -> &Config {
        &self.parts.config
    }

    pub fn metrics(&self) -> &Metrics {
        &self.parts.metrics
    }

    fn signing_keys(&self) -> &[Vec<u8>] {
        &self.parts.signing_keys
    }
}

pub fn router(service: Service) -> Router {
    // Multipart framing needs a little room beyond the largest accepted source.
    let body_limit = usize::try_from(service.config().fetch.max_bytes)
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
        .route_layer(middleware::from_fn_with_state(service.clone(), observe))
        .fallback(ops::not_found)
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(service)
}

/// Counts and times every routed request, by route pattern (never the raw path, which would
/// make a series per URL), and logs one access line.
async fn observe(State(service): State<Service>, request: Request, next: Next) -> Response {
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
    service.metrics().with(|| {
        metrics::counter!(
            "imgcas_http_requests_total",
            "route" => route.clone(),
            "method" => method_label(&method),
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

/// The `method` label: the methods the API answers, and one value for any other, so invented
/// methods cannot grow the series without bound.
fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        _ => "other",
    }
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
