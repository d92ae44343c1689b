//! The service's one error type, and the error code (docs/api.md) each error carries.
//!
//! Lower layers keep their own enums (`FetchError`, `MapError`, `BlobError`, the processors'
//! `ProcessError`); they convert into [`Error`] here. The code ([`Error::code`]) belongs to the
//! error, so the HTTP layer, ingest reports and the command line all name an error the same
//! way without importing each other; `http::error` only decides the status and headers.

use imgcas_processors::{ProcessError, ProcessFailure, SpecError};

use crate::blob::BlobError;
use crate::fetch::FetchError;
use crate::maps::MapError;

#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("invalid option `{option}`: {message}")]
    InvalidOption { option: String, message: String },
    #[error("{0}")]
    SourceNotAllowed(String),
    /// A request target or source URL longer than `limits.max_url_bytes`.
    #[error("the URL is longer than the limit of {limit} bytes")]
    UrlTooLong { limit: usize },
    #[error("{0}")]
    NotFound(String),
    #[error("the source is larger than the limit of {limit} bytes")]
    SourceTooLarge { limit: u64 },
    #[error("{message}")]
    Process {
        kind: ProcessFailure,
        message: String,
    },
    #[error("{0}")]
    Origin(String),
    #[error("{0}")]
    OriginTimeout(String),
    #[error("{0}")]
    StorageUnavailable(String),
    #[error("{0}")]
    BadSignature(String),
    /// Only presets are allowed (`security.only_presets`) and the request spelled options out.
    #[error("{0}")]
    PresetRequired(String),
    /// A client sent its request too slowly (an upload under `server.min_upload_rate`).
    #[error("{0}")]
    TooSlow(String),
    /// A route guarded by the admin token was called without it.
    #[error("{0}")]
    Unauthorized(String),
    /// A token was presented that matches, but lacks the scope the route needs.
    #[error("{message}")]
    InsufficientScope {
        scope: &'static str,
        message: String,
    },
    /// A route that removes stored data was called with no admin token configured: such
    /// routes are never open.
    #[error("{0}")]
    AdminDisabled(String),
    /// The content is on the takedown list (`DELETE /v1/originals/<hash>`).
    #[error("{0}")]
    TakenDown(String),
    /// The bytes match the moderation blocklist, or the validation service refused them.
    #[error("{0}")]
    Blocked(String),
    /// The validation service did not answer (fail-closed): new originals wait for it.
    #[error("{0}")]
    ValidationUnavailable(String),
    /// A request carrying more work than one call may (an ingest batch over its limits).
    #[error("{0}")]
    BatchTooLarge(String),
    /// Processing refused by admission control; retry after the estimated drain time.
    #[error("{message}")]
    Overloaded {
        message: String,
        retry_after_secs: u64,
    },
    /// The tenant has spent its budget (`[tenants.<name>]`): its cold work waits until the
    /// budget refills, `retry_after_secs` from now.
    #[error("{message}")]
    OverBudget {
        message: String,
        retry_after_secs: u64,
    },
    /// A run costs more than its payer's budget refills in `limits.max_budget_wait`: never
    /// admitted for that payer, however long it waits (`too_costly`, not stored).
    #[error("{0}")]
    BeyondBudget(String),
    /// A migration of the maps was asked what its phase does not allow (`migrate/`).
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Internal(String),
}

impl Error {
    pub fn invalid_option(option: &str, message: impl Into<String>) -> Self {
        Error::InvalidOption {
            option: option.to_string(),
            message: message.into(),
        }
    }

    /// Whether the source failed: gone or unknown, unreachable, too large, or bytes that
    /// make no picture. What a fallback image answers for; never a refusal of the request
    /// itself (options, signature, presets, an address not allowed), a takedown, or the
    /// service's own trouble.
    pub fn is_source_failure(&self) -> bool {
        match self {
            Error::NotFound(_)
            | Error::SourceTooLarge { .. }
            | Error::Origin(_)
            | Error::OriginTimeout(_) => true,
            Error::Process { kind, .. } => matches!(
                kind,
                ProcessFailure::UnsupportedFormat
                    | ProcessFailure::Undecodable
                    | ProcessFailure::TooManyPixels
                    | ProcessFailure::SourceTooSmall
            ),
            _ => false,
        }
    }

    /// docs/api.md's `code` string (the `error.code` of every error body, the prefix of
    /// `imgcas process`'s error line).
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidOption { .. } => "invalid_option",
            Error::SourceNotAllowed(_) => "source_not_allowed",
            Error::UrlTooLong { .. } => "url_too_long",
            Error::NotFound(_) => "not_found",
            Error::SourceTooLarge { .. } => "source_too_large",
            Error::Process { kind, .. } => kind.code(),
            Error::Origin(_) => "origin_error",
            Error::OriginTimeout(_) => "origin_timeout",
            Error::StorageUnavailable(_) => "storage_unavailable",
            Error::BadSignature(_) => "bad_signature",
            Error::PresetRequired(_) => "preset_required",
            Error::Unauthorized(_) => "unauthorized",
            Error::AdminDisabled(_) => "admin_disabled",
            Error::InsufficientScope { .. } => "insufficient_scope",
            Error::TooSlow(_) => "request_timeout",
            Error::BatchTooLarge(_) => "batch_too_large",
            Error::TakenDown(_) => "taken_down",
            Error::Blocked(_) => "blocked",
            Error::ValidationUnavailable(_) => "validation_unavailable",
            Error::Overloaded { .. } => "overloaded",
            Error::OverBudget { .. } => "over_budget",
            Error::BeyondBudget(_) => "too_costly",
            Error::Conflict(_) => "migration_conflict",
            Error::Internal(_) => "internal",
        }
    }
}

impl From<SpecError> for Error {
    fn from(e: SpecError) -> Self {
        Error::InvalidOption {
            option: e.option,
            message: e.message,
        }
    }
}

impl From<ProcessError> for Error {
    fn from(e: ProcessError) -> Self {
        // A run told to stop (its deadline, a shutdown) is capacity's answer, never cached.
        if let ProcessError::Stopped(why) = &e {
            return Error::Overloaded {
                message: format!("the processing run was stopped: {why}"),
                retry_after_secs: 1,
            };
        }
        match e.kind() {
            Some(kind) => Error::Process {
                kind,
                message: e.to_string(),
            },
            None => Error::Internal(e.to_string()),
        }
    }
}

impl From<FetchError> for Error {
    fn from(e: FetchError) -> Self {
        let message = e.to_string();
        match e {
            FetchError::BadUrl(m) => Error::invalid_option("url", m),
            FetchError::UrlTooLong { limit } => Error::UrlTooLong { limit },
            FetchError::NotAllowed(_) => Error::SourceNotAllowed(message),
            FetchError::NotFound(_) => Error::NotFound(message),
            FetchError::TooLarge { limit } => Error::SourceTooLarge { limit },
            FetchError::Timeout | FetchError::TooSlow { .. } | FetchError::SlotWait => {
                Error::OriginTimeout(message)
            }
            FetchError::Status(_)
            | FetchError::RateLimited { .. }
            | FetchError::Busy { .. }
            | FetchError::Paused { .. }
            | FetchError::Connect(_)
            | FetchError::Body(_)
            | FetchError::TooManyRedirects
            | FetchError::BadRedirect(_)
            | FetchError::UnexpectedNotModified => Error::Origin(message),
        }
    }
}

impl From<MapError> for Error {
    fn from(e: MapError) -> Self {
        Error::StorageUnavailable(format!("map store: {e}"))
    }
}

impl From<BlobError> for Error {
    fn from(e: BlobError) -> Self {
        Error::StorageUnavailable(format!("blob store: {e}"))
    }
}

impl From<tokio::task::JoinError> for Error {
    fn from(e: tokio::task::JoinError) -> Self {
        // A panic's text names our code, not the request's fault: it goes to the log, and the
        // answer says only what failed.
        tracing::error!(error = %e, "a background task failed");
        Error::Internal("a background task failed".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processing_failures_keep_their_kind_and_code() {
        let e = Error::from(ProcessError::Undecodable("bad huffman".into()));
        assert_eq!(e.code(), "undecodable");
        assert!(matches!(
            e,
            Error::Process {
                kind: ProcessFailure::Undecodable,
                ..
            }
        ));
        assert_eq!(
            Error::from(ProcessError::Internal("x".into())).code(),
            "internal"
        );
    }
}
