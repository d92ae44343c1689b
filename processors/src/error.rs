//! The one error type of the processing core, and the guard that turns a third-party
//! decoder's panic into the input's `undecodable` ([`guarded`], counted by [`decoder_panics`]).
//!
//! Every variant but [`ProcessError::Internal`] is a fact about the input bytes and the spec,
//! so the service may cache it like a result: [`ProcessError::kind`] names it, and the kind's
//! byte ([`ProcessFailure::to_byte`]) is what a cached failure stores.

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
    /// An animation (`animated=1`) over the frame limit, or whose frames together are over
    /// the pixel limit. Its kind is [`ProcessFailure::TooManyPixels`].
    #[error(
        "the animation is {frames} frames of {width}x{height}, {pixels} pixels in all, over the \
         limits of {max_frames} frames and {limit} pixels (animated=0 takes its first frame)"
    )]
    AnimationTooLarge {
        frames: u32,
        width: u32,
        height: u32,
        pixels: u64,
        max_frames: u32,
        limit: u64,
    },
    /// The work the spec implies for this source is over `limits.max_cost`.
    #[error(
        "the spec asks for about {cost} pixel-equivalents of work, over the limit of {limit} \
         (ask for a smaller output, another format, or no blur or sharpen)"
    )]
    TooCostly { cost: u64, limit: u64 },
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
    /// The run was told to stop ([`crate::Decodes::check`]): its deadline passed, or the
    /// service is shutting down. Says nothing of the input: never cached.
    #[error("the run was stopped: {0}")]
    Stopped(String),
}

/// Panics of third-party decoders caught by [`guarded`], by format.
static DECODER_PANICS: std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Runs a third-party decoder on input bytes. A panic in it (a decoder's bug that these
/// bytes reach) is the input's failure: `undecodable`, cached like any other, its text not
/// shown (it names the decoder's code, not the file's fault), and counted by format for
/// [`decoder_panics`].
pub(crate) fn guarded<T>(
    format: &'static str,
    decode: impl FnOnce() -> Result<T, ProcessError>,
) -> Result<T, ProcessError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(decode)).unwrap_or_else(|_| {
        let mut panics = DECODER_PANICS.lock().unwrap_or_else(|e| e.into_inner());
        *panics.entry(format).or_default() += 1;
        Err(ProcessError::Undecodable(format!(
            "the {format} decoder could not read these bytes"
        )))
    })
}

/// Decoder panics caught in this process so far, by format (the service reports them as
/// `imgcas_decoder_panics_total{format}`).
pub fn decoder_panics() -> Vec<(&'static str, u64)> {
    let panics = DECODER_PANICS.lock().unwrap_or_else(|e| e.into_inner());
    panics.iter().map(|(format, n)| (*format, *n)).collect()
}

impl ProcessError {
    pub(crate) fn too_many_pixels(width: u32, height: u32, limit: u64) -> Self {
        ProcessError::TooManyPixels {
            width: u64::from(width),
            height: u64::from(height),
            pixels: u64::from(width) * u64::from(height),
            limit,
        }
    }
}

/// The kind of a permanent processing failure: what the service caches per variant and turns
/// into docs/api.md's error code. Its byte ([`ProcessFailure::to_byte`]) is part of stored variants,
/// so the numbers never change; a new kind takes a new number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProcessFailure {
    UnsupportedFormat,
    Undecodable,
    TooManyPixels,
    SourceTooSmall,
    TooCostly,
}

impl ProcessFailure {
    /// Every kind, for tests of the encoding and the codes.
    pub const ALL: [ProcessFailure; 5] = [
        ProcessFailure::UnsupportedFormat,
        ProcessFailure::Undecodable,
        ProcessFailure::TooManyPixels,
        ProcessFailure::SourceTooSmall,
        ProcessFailure::TooCostly,
    ];

    /// docs/api.md's error code for this kind.
    pub fn code(self) -> &'static str {
        match self {
            ProcessFailure::UnsupportedFormat => "unsupported_format",
            ProcessFailure::Undecodable => "undecodable",
            ProcessFailure::TooManyPixels => "too_many_pixels",
            ProcessFailure::SourceTooSmall => "source_too_small",
            ProcessFailure::TooCostly => "too_costly",
        }
    }

    /// Whether the failure follows from the service's configured limits rather than from the
    /// bytes and the spec alone: raising `max_pixels` turns it into a success, so it must not
    /// be stored under hash + spec for good.
    pub fn depends_on_limits(self) -> bool {
        matches!(
            self,
            ProcessFailure::TooManyPixels | ProcessFailure::TooCostly
        )
    }

    /// The stable byte stored with a cached failure.
    pub fn to_byte(self) -> u8 {
        match self {
            ProcessFailure::UnsupportedFormat => 1,
            ProcessFailure::Undecodable => 2,
            ProcessFailure::TooManyPixels => 3,
            ProcessFailure::SourceTooSmall => 4,
            ProcessFailure::TooCostly => 5,
        }
    }

    pub fn from_byte(byte: u8) -> Option<ProcessFailure> {
        Self::ALL.into_iter().find(|k| k.to_byte() == byte)
    }
}

impl ProcessError {
    /// The kind of a permanent failure (the same bytes and spec fail the same way every
    /// time); `None` for [`ProcessError::Internal`], which is ours and never cached.
    pub fn kind(&self) -> Option<ProcessFailure> {
        match self {
            ProcessError::UnsupportedFormat(_) => Some(ProcessFailure::UnsupportedFormat),
            ProcessError::Undecodable(_) => Some(ProcessFailure::Undecodable),
            ProcessError::TooManyPixels { .. } | ProcessError::AnimationTooLarge { .. } => {
                Some(ProcessFailure::TooManyPixels)
            }
            ProcessError::SourceTooSmall { .. } => Some(ProcessFailure::SourceTooSmall),
            ProcessError::TooCostly { .. } => Some(ProcessFailure::TooCostly),
            ProcessError::Internal(_) | ProcessError::Stopped(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_bytes_round_trip_and_never_collide() {
        for kind in ProcessFailure::ALL {
            assert_eq!(ProcessFailure::from_byte(kind.to_byte()), Some(kind));
        }
        assert_eq!(ProcessFailure::from_byte(0), None);
        assert_eq!(ProcessFailure::from_byte(6), None);
        assert_eq!(ProcessError::Internal("x".into()).kind(), None);
    }
}
