//! Operational endpoints: liveness, readiness, `/metrics`, and the JSON 404 for unknown paths.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::Service;
use crate::error::Error;

pub async fn healthz() -> Response {
    Json(json!({ "status": "ok" })).into_response()
}

/// 200 only when the maps and the blob store both answer.
pub async fn readyz(State(service): State<Service>) -> Response {
    match service.pipeline().check().await {
        Ok(()) => Json(json!({ "status": "ready" })).into_response(),
        Err(e) => e.into_response(),
    }
}

/// Prometheus text format.
pub async fn metrics(State(service): State<Service>) -> Response {
    let body = service.metrics().render(&service.pipeline().readings());
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
