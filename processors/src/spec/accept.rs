//! `format=auto`: the output format an `Accept` header allows, and the class of a header
//! (what negotiation reads of it), so that caches key on the class.

use super::*;

/// What of an `Accept` header format negotiation reads: whether it admits AVIF (bit 0) and
/// WebP (bit 1). Two headers of one class negotiate alike for every source, so a cache of
/// negotiated answers can key on the class rather than the header.
pub fn accept_class(accept: &str) -> u8 {
    let accepts = |mime: &str| {
        accept.split(',').any(|item| {
            let mut parts = item.split(';');
            let ty = parts.next().unwrap_or("").trim();
            let refused = parts.any(|p| {
                let p = p.trim();
                p.strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            ty.eq_ignore_ascii_case(mime) && !refused
        })
    };
    let bit = |format: OutputFormat, bit: u8| if accepts(format.mime()) { bit } else { 0 };
    bit(OutputFormat::Avif, AVIF_BIT) | bit(OutputFormat::Webp, WEBP_BIT)
}

/// The bits of [`accept_class`].
const AVIF_BIT: u8 = 1;
const WEBP_BIT: u8 = 2;

/// The best output format an `Accept` header allows: AVIF, then WebP, then PNG where the
/// source has alpha, else JPEG. Formats that would drop the source's alpha are skipped.
pub fn negotiate(accept: &str, has_alpha: bool) -> OutputFormat {
    let class = accept_class(accept);
    for (candidate, bit) in [
        (OutputFormat::Avif, AVIF_BIT),
        (OutputFormat::Webp, WEBP_BIT),
    ] {
        if (candidate.keeps_alpha() || !has_alpha) && class & bit != 0 {
            return candidate;
        }
    }
    if has_alpha {
        OutputFormat::Png
    } else {
        OutputFormat::Jpeg
    }
}

/// The best output format for an animation an `Accept` header allows: WebP, else GIF (imgcas
/// writes no animated AVIF, and every browser takes GIF).
pub(super) fn negotiate_animated(accept: &str) -> OutputFormat {
    if accept_class(accept) & WEBP_BIT != 0 {
        OutputFormat::Webp
    } else {
        OutputFormat::Gif
    }
}
