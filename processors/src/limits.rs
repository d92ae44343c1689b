//! Bounds on what one source may cost to open, decode and process: what every format's
//! header reader and decoder is held to, and what admission charges against.

use crate::ProcessError;

/// Bounds on what one decode may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest width × height accepted, for sources (from their header) and for outputs.
    pub max_pixels: u64,
    /// Most frames an animation is processed with (`animated=1`); its frames × width ×
    /// height are held to `max_pixels` too.
    pub max_frames: u32,
    /// The most work one run may imply, in pixel-equivalents ([`crate::cost`]); a spec over
    /// it is refused with `too_costly` before any decode.
    pub max_cost: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_pixels: 50_000_000,
            max_frames: 500,
            max_cost: 1_000_000_000,
        }
    }
}

impl Limits {
    /// Bytes a decoder may allocate: the RGBA picture twice over, plus working room.
    pub(crate) fn max_alloc(&self) -> u64 {
        self.max_pixels.saturating_mul(8).saturating_add(64 << 20)
    }
}

/// A run's memory beyond its pixels: the encoders' and decoders' tables and contexts (what
/// `plan::memory` adds to every run's estimate).
pub const RUN_BASE_BYTES: u64 = 24 << 20;

/// Refuses a run whose cost ([`crate::cost`]) is over `limits.max_cost`.
pub fn check_cost(cost: u64, limits: &Limits) -> Result<(), ProcessError> {
    if cost > limits.max_cost {
        return Err(ProcessError::TooCostly {
            cost,
            limit: limits.max_cost,
        });
    }
    Ok(())
}
