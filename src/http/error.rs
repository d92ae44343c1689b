//! The one mapping from [`Error`] to an HTTP answer: docs/api.md's status, the error body (its code
//! is the error's own, [`Error::code`]), the short `Cache-Control` errors carry (never a
//! year), and `Retry-After`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use imgcas_processors::ProcessFailure;

use crate::error::Error;
use crate::pipeline::Failure;
use crate::wire::{ErrorAnswer, ErrorBody};

/// What an error answer carries for the handler that made it (a response extension, never
/// sent): the error's code, and whether it is a failure of the source that a fallback image
/// may answer instead (`fallback.rs`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Failed {
    pub code: &'static str,
    pub source_failure: bool,
}

/// Status, and how long a shared cache may keep the answer.
fn classify(error: &Error) -> (StatusCode, &'static str) {
    const BRIEF: &str = "public, max-age=10";
    const MINUTE: &str = "public, max-age=60";
    const FIVE_MINUTES: &str = "public, max-age=300";
    const NO_STORE: &str = "no-store";
    match error {
        Error::InvalidOption { .. } => (StatusCode::BAD_REQUEST, MINUTE),
        Error::SourceNotAllowed(_) => (StatusCode::FORBIDDEN, MINUTE),
        Error::UrlTooLong { .. } => (StatusCode::URI_TOO_LONG, MINUTE),
        Error::BadSignature(_) => (StatusCode::FORBIDDEN, MINUTE),
        Error::PresetRequired(_) => (StatusCode::FORBIDDEN, MINUTE),
        Error::Unauthorized(_) => (StatusCode::UNAUTHORIZED, NO_STORE),
        Error::AdminDisabled(_) => (StatusCode::FORBIDDEN, NO_STORE),
        Error::InsufficientScope { .. } => (StatusCode::FORBIDDEN, NO_STORE),
        Error::TooSlow(_) => (StatusCode::REQUEST_TIMEOUT, NO_STORE),
        Error::NotFound(_) => (StatusCode::NOT_FOUND, MINUTE),
        // Lifting a takedown must take effect on the next request, downstream too.
        Error::TakenDown(_) => (StatusCode::UNAVAILABLE_FOR_LEGAL_REASONS, NO_STORE),
        Error::Blocked(_) => (StatusCode::UNAVAILABLE_FOR_LEGAL_REASONS, NO_STORE),
        Error::ValidationUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, NO_STORE),
        Error::SourceTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, FIVE_MINUTES),
        Error::BatchTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, NO_STORE),
        Error::Process { kind, .. } => match kind {
            ProcessFailure::UnsupportedFormat => (StatusCode::UNSUPPORTED_MEDIA_TYPE, FIVE_MINUTES),
            ProcessFailure::Undecodable => (StatusCode::UNPROCESSABLE_ENTITY, FIVE_MINUTES),
            ProcessFailure::TooManyPixels => (StatusCode::UNPROCESSABLE_ENTITY, FIVE_MINUTES),
            ProcessFailure::SourceTooSmall => (StatusCode::UNPROCESSABLE_ENTITY, FIVE_MINUTES),
            ProcessFailure::TooCostly => (StatusCode::UNPROCESSABLE_ENTITY, FIVE_MINUTES),
        },
        Error::Origin(_) => (StatusCode::BAD_GATEWAY, BRIEF),
        Error::OriginTimeout(_) => (StatusCode::GATEWAY_TIMEOUT, BRIEF),
        Error::StorageUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, NO_STORE),
        Error::Overloaded { .. } => (StatusCode::SERVICE_UNAVAILABLE, NO_STORE),
        Error::OverBudget { .. } => (StatusCode::TOO_MANY_REQUESTS, NO_STORE),
        // Another payer may be admitted the same work: never kept downstream.
        Error::BeyondBudget(_) => (StatusCode::UNPROCESSABLE_ENTITY, NO_STORE),
        Error::Conflict(_) => (StatusCode::CONFLICT, NO_STORE),
        Error::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, NO_STORE),
    }
}

/// A new request id for an answer whose cause only the log may tell: this process's start
/// time and a count, unique across restarts and nodes in practice, and short enough to quote.
fn new_request_id() -> String {
    static STARTED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let started = *STARTED.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    });
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{started:x}-{n}")
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let (status, cache_control) = classify(&self);
        // What went wrong inside (a task's failure, a store's error with its paths) is for
        // the log: the answer says what kind of failure it was and a request id the log line
        // carries too (issue 35).
        let hidden = match self {
            Error::Internal(_) => Some("internal error"),
            Error::StorageUnavailable(_) => Some("storage unavailable"),
            _ => None,
        };
        let request_id = hidden.map(|_| new_request_id());
        if status.is_server_error() {
            let id = request_id.as_deref();
            tracing::warn!(code = self.code(), request_id = id, error = %self, "request failed");
        }
        let error = match (hidden, &request_id) {
            (Some(kind), Some(id)) => ErrorBody {
                code: self.code().to_string(),
                message: format!("{kind} (request id {id})"),
            },
            _ => ErrorBody::from(&self),
        };
        let mut response = (status, Json(ErrorAnswer { error })).into_response();
        response.extensions_mut().insert(Failed {
            code: self.code(),
            source_failure: self.is_source_failure(),
        });
        let headers = response.headers_mut();
        if let Some(id) = request_id.and_then(|id| HeaderValue::from_str(&id).ok()) {
            headers.insert("x-request-id", id);
        }
        headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static(cache_control),
        );
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        // RFC 6750's answer to a token that is good but may not do this.
        if let Error::InsufficientScope { scope, .. } = &self {
            if let Ok(value) = HeaderValue::from_str(&format!(
                "Bearer error=\"insufficient_scope\", scope=\"{scope}\""
            )) {
                headers.insert(header::WWW_AUTHENTICATE, value);
            }
        }
        if status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS {
            let after = match self {
                Error::Overloaded {
                    retry_after_secs, ..
                }
                | Error::OverBudget {
                    retry_after_secs, ..
                } => retry_after_secs,
                _ => 1,
            };
            headers.insert(header::RETRY_AFTER, HeaderValue::from(after));
        }
        response
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let mut response = self.error.into_response();
        let server_error = response.status().is_server_error();
        let headers = response.headers_mut();
        if let Some(hash) = self.source_hash {
            if let Ok(v) = HeaderValue::from_str(&hash.to_hex()) {
                headers.insert("x-imgcas-source-hash", v);
            }
        }
        if self.cached {
            headers.insert("x-imgcas-cache", HeaderValue::from_static("error-hit"));
        }
        // An error held for this URL may be cached downstream exactly as long, and a client
        // told to retry no sooner: the service would answer the same until then.
        if let Some(held) = self.held_for {
            let secs = held.as_secs() + u64::from(held.subsec_nanos() > 0);
            if let Ok(v) = HeaderValue::from_str(&format!("public, max-age={secs}")) {
                headers.insert(header::CACHE_CONTROL, v);
            }
            if server_error {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
        }
        response
    }
}
