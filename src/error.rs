//! The service's one error type. Lower layers keep their own enums (`FetchError`,
//! `MapError`, `BlobError`, the processors' `ProcessError`); they convert into [`Error`] here,
//! and `http::error` is the one place that turns an [`Error`] into a status and SPEC's JSON.

use imgcas_processors::{ProcessError, SpecError};

use crate::blob::BlobError;
use crate::fetch::FetchError;
use crate::maps::MapError;

/// The kind of a processing failure, as stored in the variants map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessFailure {
    UnsupportedFormat,
    Undecodable,
    TooManyPixels,
    SourceTooSmall,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("invalid option `{option}`: {message}")]
    InvalidOption { option: String, message: String },
    #[error("{0}")]
    SourceNotAllowed(String),
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
    /// A request carrying more work than one call may (an ingest batch over its limits).
    #[error("{0}")]
    BatchTooLarge(String),
    /// Processing refused by admission control; retry after the estimated drain time.
    #[error("{message}")]
    Overloaded {
        message: String,
        retry_after_secs: u64,
    },
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
        let message = e.to_string();
        let kind = match e {
            ProcessError::UnsupportedFormat(_) => ProcessFailure::UnsupportedFormat,
            ProcessError::Undecodable(_) => ProcessFailure::Undecodable,
            ProcessError::TooManyPixels { .. } => ProcessFailure::TooManyPixels,
            ProcessError::SourceTooSmall { .. } => ProcessFailure::SourceTooSmall,
            ProcessError::Internal(m) => return Error::Internal(m),
        };
        Error::Process { kind, message }
    }
}

impl From<FetchError> for Error {
    fn from(e: FetchError) -> Self {
        let message = e.to_string();
        match e {
            FetchError::BadUrl(m) => Error::invalid_option("url", m),
            FetchError::NotAllowed(_) => Error::SourceNotAllowed(message),
            FetchError::NotFound(_) => Error::NotFound(message),
            FetchError::TooLarge { limit } => Error::SourceTooLarge { limit },
            FetchError::Timeout => Error::OriginTimeout(message),
            FetchError::Status(_)
            | FetchError::RateLimited { .. }
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
        Error::Internal(format!("a background task failed: {e}"))
    }
}
