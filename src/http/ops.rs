//! Operational endpoints: liveness, readiness, `/metrics`, and the JSON 404 for unknown paths.

use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::Service;
use crate::error::Error;

pub async fn healthz() -> Response {
    Json(json!({ "status": "ok" })).into_response()
}

/// How long readiness waits for the stores: a load balancer's probe wants an answer, and a
/// store that accepts connections and never answers must read as not ready, not as a hang.
const READY_WITHIN: Duration = Duration::from_millis(1500);

/// 200 only when the maps and the blob store both answer, within [`READY_WITHIN`].
pub async fn readyz(State(service): State<Service>) -> Response {
    match tokio::time::timeout(READY_WITHIN, service.pipeline().check()).await {
        Ok(Ok(())) => Json(json!({ "status": "ready" })).into_response(),
        Ok(Err(e)) => e.into_response(),
        Err(_) => Error::StorageUnavailable(format!(
            "the stores did not answer the readiness probe within {READY_WITHIN:?}"
        ))
        .into_response(),
    }
}

/// Prometheus text format.
pub async fn metrics(State(service): State<Service>) -> Response {
    let body = service.metrics().render(&service.readings());
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

pub async fn not_found() -> Response {
    Error::NotFound("no such route".into()).into_response()
}
