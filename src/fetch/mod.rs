//! Origin fetching: a bounded, conditional, redirect-checked GET ([`client`]) behind an
//! address guard ([`guard`]), with download slots per origin host ([`politeness`]) and a cut
//! for bodies that drip ([`drip`]); and objects of listed S3 buckets as sources ([`bucket`]).

pub mod bucket;
pub mod client;
pub mod drip;
pub mod guard;
pub mod politeness;

pub use client::{Answer, FetchOutcome, Fetcher, HopGuard, Validators};

/// Why a fetch failed. `is_transient` says whether a stored mapping should be served instead.
/// (Serialized: a URL's held failure is shared with the other nodes through the maps.)
#[derive(Debug, Clone, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum FetchError {
    #[error("{0}")]
    BadUrl(String),
    /// Longer than `limits.max_url_bytes`: refused before any lookup or traffic.
    #[error("the URL is longer than the limit of {limit} bytes")]
    UrlTooLong { limit: usize },
    #[error("{0}")]
    NotAllowed(String),
    #[error("the origin answered {0}")]
    NotFound(u16),
    #[error("the origin answered {0}")]
    Status(u16),
    #[error("the origin answered 429 (too many requests)")]
    RateLimited {
        /// The origin's `Retry-After`, when it gave one in seconds or as a date.
        retry_after: Option<std::time::Duration>,
    },
    /// A `503` with `Retry-After`: the origin asks for a pause (every node keeps it).
    #[error("the origin answered {status} and asked to wait {} s", retry_after.as_secs())]
    Busy {
        status: u16,
        retry_after: std::time::Duration,
    },
    /// Not sent: the origin is paused for every node (it asked so, or refused connections
    /// in a row), for this long still.
    #[error("the origin asked for a pause; {} s left", left.as_secs().max(1))]
    Paused { left: std::time::Duration },
    #[error("the source is larger than {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("the origin did not answer in time")]
    Timeout,
    /// The body arrived slower than `fetch.min_rate` after its first second (a drip).
    #[error("the origin sent its body at {rate} bytes/s, under the minimum of {min_rate}")]
    TooSlow { rate: u64, min_rate: u64 },
    /// No download slot came free before the request's deadline: nothing was sent.
    #[error("no download slot came free before the request's deadline")]
    SlotWait,
    #[error("cannot reach the origin: {0}")]
    Connect(String),
    #[error("the origin's body broke off: {0}")]
    Body(String),
    #[error("more than 5 redirects")]
    TooManyRedirects,
    #[error("bad redirect: {0}")]
    BadRedirect(String),
    #[error("the origin answered 304 to an unconditional request")]
    UnexpectedNotModified,
}

impl FetchError {
    /// Failures that say nothing about the content (the origin may be back in a moment).
    pub fn is_transient(&self) -> bool {
        match self {
            FetchError::Status(s) => *s >= 500 || *s == 429 || *s == 408,
            FetchError::RateLimited { .. }
            | FetchError::Busy { .. }
            | FetchError::Paused { .. }
            | FetchError::Timeout
            | FetchError::TooSlow { .. }
            | FetchError::SlotWait
            | FetchError::Connect(_)
            | FetchError::Body(_) => true,
            _ => false,
        }
    }

    /// How long the origin asked every client to wait (`Retry-After` on a `429` or `503`).
    pub fn asked_pause(&self) -> Option<std::time::Duration> {
        match self {
            FetchError::RateLimited { retry_after } => *retry_after,
            FetchError::Busy { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }
}
