//! `POST /v1/ingest`: a JSON batch of URLs (and optional warm specs) in, one result per URL
//! out. The work itself is `crate::ingest`, shared with the offline command; the shapes are
//! `crate::wire`'s.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::Service;
use crate::admission::{Asker, Tier};
use crate::error::Error;
use crate::ingest::{self, MAX_BODY_BYTES};
use crate::wire::IngestRequest;

/// 200 with per-URL results once the batch is accepted (a URL's failure is in its result,
/// not the status); 400 for a malformed batch, 413 for one over the limits; 503 with
/// `Retry-After` while bulk work is shed (admission's tiers), before any work.
pub async fn ingest(State(service): State<Service>, request: Request) -> Response {
    // A batch is bulk work, of the tenant its token names.
    let asker = service.asker(request.headers(), Asker::anonymous(Tier::Bulk));
    let body = match axum::body::to_bytes(request.into_body(), MAX_BODY_BYTES).await {
        Ok(body) => body,
        Err(_) => {
            return Error::BatchTooLarge(format!(
                "the ingest body is over {MAX_BODY_BYTES} bytes: split the batch"
            ))
            .into_response()
        }
    };
    let batch: IngestRequest = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return Error::invalid_option(
                "body",
                format!("expected {{\"urls\": [..], \"warm\": [..]}}: {e}"),
            )
            .into_response()
        }
    };
    let warm = match ingest::check_batch(&batch) {
        Ok(w) => w,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = service.pipeline().admit_bulk(&asker) {
        return e.into_response();
    }
    let answer = ingest::ingest_urls(service.pipeline(), batch.urls, &warm, &asker).await;
    (StatusCode::OK, Json(answer)).into_response()
}
