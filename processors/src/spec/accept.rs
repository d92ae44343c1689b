//! `format=auto`: the output format an `Accept` header allows, in the service's order of
//! preference ([`AutoFormats`], `IMGCAS_AUTO_FORMATS`), and the class of a header (what
//! negotiation reads of it), so that caches key on the class.

use super::*;

/// The formats `format=auto` offers, best first, each to clients whose `Accept` lists it:
/// some of AVIF, JPEG XL and WebP. JPEG, or PNG for a source with alpha, is the implied
/// fallback. The default, JPEG XL, then AVIF, then WebP, is by bytes at equal SSIMULACRA2 and
/// encode time on the shared photos (docs/performance.md, "JPEG XL").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoFormats(Vec<OutputFormat>);

impl Default for AutoFormats {
    fn default() -> Self {
        AutoFormats(vec![
            OutputFormat::Jxl,
            OutputFormat::Avif,
            OutputFormat::Webp,
        ])
    }
}

/// The formats `format=auto` may choose besides the fallbacks: those with an `Accept` bit.
fn offered() -> impl Iterator<Item = OutputFormat> {
    crate::encoders::ENCODERS
        .iter()
        .map(|e| e.facts())
        .filter(|f| f.accept_bit != 0)
        .map(|f| f.format)
}

impl AutoFormats {
    /// Parses a comma list such as `avif,jxl,webp` (names as `format=` takes them, each once;
    /// empty: the fallbacks only).
    pub fn parse(list: &str) -> Result<AutoFormats, String> {
        let mut formats = Vec::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let format = OutputFormat::from_name(&name.to_ascii_lowercase())
                .filter(|f| offered().any(|o| o == *f))
                .ok_or_else(|| format!("`{name}` is not one of avif, jxl, webp"))?;
            if formats.contains(&format) {
                return Err(format!("`{name}` is listed twice"));
            }
            formats.push(format);
        }
        Ok(AutoFormats(formats))
    }

    /// The formats in order.
    pub fn formats(&self) -> &[OutputFormat] {
        &self.0
    }
}

impl fmt::Display for AutoFormats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.0.iter().map(|f| f.name()).collect();
        f.write_str(&names.join(","))
    }
}

/// A client's `Accept` header and the order the service offers formats in: what
/// `format=auto` resolves against.
#[derive(Debug, Clone, Copy)]
pub struct Accept<'a> {
    pub header: &'a str,
    pub order: &'a AutoFormats,
}

/// What of an `Accept` header format negotiation reads: whether it admits AVIF (bit 0), WebP
/// (bit 1) and JPEG XL (bit 2). Two headers of one class negotiate alike for every source
/// under one order, so a cache of negotiated answers can key on the class rather than the
/// header.
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
    offered()
        .filter(|f| accepts(f.mime()))
        .fold(0, |class, f| class | class_bit(f))
}

/// The bit of [`accept_class`] that stands for `format`.
fn class_bit(format: OutputFormat) -> u8 {
    format.facts().accept_bit
}

/// The best output format `accept` allows: the first of its order the header lists (every one
/// of them keeps alpha), else PNG where the source has alpha, else JPEG.
pub fn negotiate(accept: Accept<'_>, has_alpha: bool) -> OutputFormat {
    let class = accept_class(accept.header);
    for &candidate in accept.order.formats() {
        if (candidate.keeps_alpha() || !has_alpha) && class & class_bit(candidate) != 0 {
            return candidate;
        }
    }
    if has_alpha {
        OutputFormat::Png
    } else {
        OutputFormat::Jpeg
    }
}

/// The best output format for an animation `accept` allows: the first of its order that
/// animates (AVIF, WebP: imgcas's JPEG XL encoder writes stills) and the header lists, else
/// GIF, which every browser plays. At equal SSIMULACRA2 on 13 real animations, animated AVIF
/// came to 0.52 of animated WebP's bytes on the median one: 0.12–0.27 on video clips,
/// 0.50–0.52 on screen recordings, 0.70–2.07 on rendered spins, but 1.2–1.3 times WebP's on
/// three of four line drawings (docs/performance.md, "Animated AVIF"), a kind nothing in a
/// header tells apart before the format is chosen.
pub(super) fn negotiate_animated(accept: Accept<'_>) -> OutputFormat {
    let class = accept_class(accept.header);
    accept
        .order
        .formats()
        .iter()
        .copied()
        .find(|f| f.animates() && class & class_bit(*f) != 0)
        .unwrap_or(OutputFormat::Gif)
}
