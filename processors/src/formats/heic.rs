//! HEIC (HEVC in HEIF): told from its brands, so that its refusal names it, but not decoded
//! by this build.

use super::{Format, Header};
use crate::error::ProcessError;
use crate::limits::Limits;

pub(crate) struct Heic;

impl Format for Heic {
    /// A HEIF brand and no AVIF brand (AVIF's room is tried first).
    fn sniff(&self, bytes: &[u8]) -> bool {
        super::heif::brands(bytes).any(|brand| {
            matches!(
                brand,
                b"heic" | b"heix" | b"heim" | b"heis" | b"hevc" | b"hevx" | b"mif1" | b"msf1"
            )
        })
    }

    fn open<'a>(&self, _bytes: &'a [u8], _limits: &Limits) -> Result<Header<'a>, ProcessError> {
        Err(ProcessError::UnsupportedFormat(
            "heic sources are not supported".into(),
        ))
    }

    fn can_decode(&self) -> bool {
        false
    }
}
