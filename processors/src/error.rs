//! The one error type of the processing core.
//!
//! Every variant but [`ProcessError::Internal`] is a fact about the input bytes and the spec,
//! so the service may cache it like a result ([`ProcessError::is_permanent`]).

/// Why a source could not be turned into the asked variant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcessError {
    /// The bytes are in a format imgcas does not read, or the asked output is not built.
    #[error("{0}")]
    UnsupportedFormat(String),
    /// The bytes claim a known format but are corrupt, truncated or otherwise unreadable.
    #[error("{0}")]
    Undecodable(String),
    /// The source (from its header) or the asked output is larger than the pixel limit.
    #[error("{width}x{height} is {pixels} pixels, over the limit of {limit}")]
    TooManyPixels {
        width: u64,
        height: u64,
        pixels: u64,
        limit: u64,
    },
    /// The source is smaller than `min_w`/`min_h`.
    #[error("source is {width}x{height}, smaller than the required minimum {min}")]
    SourceTooSmall {
        width: u32,
        height: u32,
        min: String,
    },
    /// A fault of ours (an encoder refusing valid pixels): not cached.
    #[error("{0}")]
    Internal(String),
}

impl ProcessError {
    /// Whether the same bytes and spec would fail the same way every time.
    pub fn is_permanent(&self) -> bool {
        !matches!(self, ProcessError::Internal(_))
    }

    pub(crate) fn too_many_pixels(width: u32, height: u32, limit: u64) -> Self {
        ProcessError::TooManyPixels {
            width: u64::from(width),
            height: u64::from(height),
            pixels: u64::from(width) * u64::from(height),
            limit,
        }
    }
}
