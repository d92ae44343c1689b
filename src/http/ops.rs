//! Operational endpoints: liveness, readiness, `/metrics`, and the JSON 404 for unknown paths.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::app::Shared;
use crate::error::Error;

pub async fn healthz() -> Response {
    Json(json!({ "status": "ok" })).into_response()
}

/// 200 only when the maps and the blob store both answer.
pub async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    if let Err(e) = shared.maps.check() {
        return Error::from(e).into_response();
    }
    if let Err(e) = shared.blobs.check().await {
        return Error::from(e).into_response();
    }
    Json(json!({ "status": "ready" })).into_response()
}

/// Prometheus text format.
pub async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    let body = shared.metrics.render(&shared);
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
