//! The processor version's history, as data: each change that altered the bytes of variants
//! already stored is one rung of [`RUNGS`] — its version, what changed, and which variants it
//! applies to, read from what the originals index holds (format, stored size) and the
//! resolved spec, before anything is decoded. A variant's version is that of the highest rung
//! that applies to it, else [`PROCESSOR_VERSION`], the base every variant started from.
//!
//! The version is part of a variant's key, so variants a change touched stop matching by
//! themselves and are made again, while the others keep their version (an upgrade does not
//! make every stored variant again). **A change that alters some variants' bytes adds one
//! rung at the top**: the next version, what changed, and a test of which specs or sources
//! it applies to — conservative where the index cannot tell (a variant counted in is made
//! once more; one left out is served stale bytes). `PROCESSOR_VERSION` stays the base.

use crate::fits::Fits;
use crate::formats::SourceFormat;
use crate::mezzanine;
use crate::spec::{OutputFormat, ResolvedSpec, PROCESSOR_VERSION};

/// What a rung's test reads: the originals index's facts and the spec, with the plan's fits
/// (each geometry laid out at most once).
pub struct Case<'s, 'f> {
    format: Option<SourceFormat>,
    /// The stored size (before orientation), when a probe could read it.
    size: Option<(u32, u32)>,
    spec: &'s ResolvedSpec,
    fits: &'f mut Fits<'s>,
}

impl Case<'_, '_> {
    /// A JPEG original (the only source that shrinks on load).
    fn shrinks_on_load(&self) -> bool {
        self.format.is_some_and(SourceFormat::shrinks_on_load)
    }

    /// The output's reduction in either orientation (the stored size's EXIF orientation is
    /// not in the index), when the size is known.
    fn reductions(&mut self) -> Option<[f64; 2]> {
        let (w, h) = self.size?;
        Some([
            self.fits.at((w, h)).reduction(),
            self.fits.at((h, w)).reduction(),
        ])
    }

    /// Reduced 8 to 16 times (either orientation): the JPEG decode from the DC scans' 1/8
    /// applied from 8 (from 16 both decodes give the same pixels).
    fn reduced_8_to_16(&mut self) -> Option<bool> {
        Some(self.reductions()?.iter().any(|r| (8.0..16.0).contains(r)))
    }
}

/// One change to stored variants' bytes.
pub struct Rung {
    pub version: u32,
    /// What changed (the history is public: a release's notes can list it).
    pub changed: &'static str,
    /// Whether a variant's bytes changed with it.
    applies: fn(&mut Case<'_, '_>) -> bool,
}

/// The history, newest first: a variant takes the first rung that applies to it.
pub const RUNGS: &[Rung] = &[
    Rung {
        version: 12,
        changed: "the coarse decode only where measured to be hidden \
                  (`ResolvedSpec::hides_coarse_decode`): WebP outputs, `q=auto` outputs and \
                  JPEGs above the quality measured for their reduction, of JPEG originals \
                  reduced 8 to 16 times, decode at 1/4 where they took the DC scans' 1/8",
        applies: coarse_decode_dropped,
    },
    Rung {
        version: 11,
        changed: "JPEG XL originals decode (builds before did not know the format: bytes of \
                  no image format, refused; such an original is read as JPEG XL once stored \
                  again, as an SVG is)",
        applies: |c| c.format == Some(SourceFormat::Jxl),
    },
    Rung {
        version: 10,
        changed: "HEIC and SVG originals decode (builds before refused them with \
                  `unsupported_format`, and the variants map keeps refusals). An SVG stored by \
                  an earlier build is indexed with no format, like any bytes of no image \
                  format, whose stored refusals keep their version: it is read as SVG once \
                  stored again",
        applies: |c| matches!(c.format, Some(SourceFormat::Heic | SourceFormat::Svg)),
    },
    Rung {
        version: 9,
        changed: "`blur` and `sharpen` use three box passes for the Gaussian: other pixels, \
                  whatever the original and the output",
        applies: |c| c.spec.shape.blur.is_some() || c.spec.shape.sharpen.is_some(),
    },
    Rung {
        version: 8,
        changed: "progressive JPEG outputs order their coefficients in five scans without \
                  refinement passes: the same pixels in other bytes, whatever the original",
        applies: |c| c.spec.format == OutputFormat::Jpeg && c.spec.progressive,
    },
    Rung {
        version: 7,
        changed: "AVIF outputs are encoded at libaom speed 7 (it was 8), whatever their \
                  original; and outputs whose own loss would not hide a 1/8 decode from the \
                  DC scans (PNG, GIF, lossless WebP, JPEG or WebP above q90, by the rule of \
                  then) of JPEG originals reduced 8 to 16 times decode at 1/4 again, as \
                  before version 5 (counted in when the size is not known)",
        applies: |c| {
            c.spec.format == OutputFormat::Avif
                || (c.shrinks_on_load()
                    && !c.spec.hid_coarse_decode_before_68()
                    && c.reduced_8_to_16().unwrap_or(true))
        },
    },
    // Version 6 (AVIF outputs keep full chroma, 4:4:4) applied to AVIF outputs alone, all of
    // which version 7 took on again.
    Rung {
        version: 6,
        changed: "AVIF outputs keep full chroma (4:4:4; they were 4:2:0), whatever their \
                  original",
        applies: |c| c.spec.format == OutputFormat::Avif,
    },
    Rung {
        version: 5,
        changed: "JPEG originals make every output themselves, never from a mezzanine, and a \
                  progressive JPEG reduced 8 to 16 times decodes at 1/8 from its DC scans (it \
                  decoded at 1/4): JPEG outputs reduced at least 4 times of originals whose \
                  long side is at least the mezzanine's threshold, or reduced 8 to 16 times \
                  of any (counted in when the size is not known: a baseline JPEG's header is \
                  not in the index)",
        applies: |c| {
            if !c.shrinks_on_load() {
                return false;
            }
            let Some(reductions) = c.reductions() else {
                return true;
            };
            // A mezzanine served outputs it held twice the resolution of, and it was at least
            // twice smaller than its original: reductions from 4.
            let long = c.size.map_or(0, |(w, h)| w.max(h));
            let mezzanine_before =
                long >= mezzanine::FROM_SIDE && reductions.iter().any(|r| *r >= 4.0);
            mezzanine_before || reductions.iter().any(|r| (8.0..16.0).contains(r))
        },
    },
];

/// The processor version of a variant (part of its key, with the original and the
/// canonical spec): that of the highest rung of [`RUNGS`] that applies, else
/// [`PROCESSOR_VERSION`]. Read from what the originals index holds, before anything is
/// decoded.
pub fn processor_version(
    format: Option<SourceFormat>,
    size: Option<(u32, u32)>,
    spec: &ResolvedSpec,
) -> u32 {
    version_with(format, size, spec, &mut Fits::new(spec))
}

/// [`processor_version`] with the plan's fits.
pub(crate) fn version_with<'s>(
    format: Option<SourceFormat>,
    size: Option<(u32, u32)>,
    spec: &'s ResolvedSpec,
    fits: &mut Fits<'s>,
) -> u32 {
    let mut case = Case {
        format,
        size,
        spec,
        fits,
    };
    RUNGS
        .iter()
        .find(|rung| (rung.applies)(&mut case))
        .map_or(PROCESSOR_VERSION, |rung| rung.version)
}

/// Whether a JPEG original's output took the DC scans' 1/8 under the rule before issue 68 and
/// no longer does: reduced 8 to 16 times (either orientation; counted in when the size is not
/// known), where the new rule does not hide the coarse decode.
fn coarse_decode_dropped(c: &mut Case<'_, '_>) -> bool {
    if !c.shrinks_on_load() || !c.spec.hid_coarse_decode_before_68() {
        return false;
    }
    let spec = c.spec;
    match c.reductions() {
        // At 8, the least reduction it applies to, the rule is at its strictest.
        None => !spec.hides_coarse_decode(8.0),
        Some(reductions) => reductions
            .into_iter()
            .any(|r| (8.0..16.0).contains(&r) && !spec.hides_coarse_decode(r)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rungs_climb_one_version_at_a_time_from_the_base() {
        let versions: Vec<u32> = RUNGS.iter().rev().map(|r| r.version).collect();
        let expected: Vec<u32> =
            (PROCESSOR_VERSION + 1..=PROCESSOR_VERSION + RUNGS.len() as u32).collect();
        assert_eq!(
            versions, expected,
            "newest first, one version each, none skipped"
        );
        assert!(RUNGS.iter().all(|r| !r.changed.is_empty()));
    }
}
