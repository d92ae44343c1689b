//! Source formats, told from the bytes alone (never from a URL or a Content-Type).

use crate::spec::OutputFormat;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceFormat {
    Jpeg,
    Png,
    Gif,
    Webp,
    Avif,
    Heic,
    Tiff,
    Bmp,
    Ico,
}

impl SourceFormat {
    /// Whether its decoder can downscale while decoding (JPEG's DCT scaling): such
    /// sources make every output from the original, at the scale the output picks, and
    /// have no mezzanine.
    pub fn shrinks_on_load(self) -> bool {
        self == SourceFormat::Jpeg
    }

    pub fn name(self) -> &'static str {
        match self {
            SourceFormat::Jpeg => "jpeg",
            SourceFormat::Png => "png",
            SourceFormat::Gif => "gif",
            SourceFormat::Webp => "webp",
            SourceFormat::Avif => "avif",
            SourceFormat::Heic => "heic",
            SourceFormat::Tiff => "tiff",
            SourceFormat::Bmp => "bmp",
            SourceFormat::Ico => "ico",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        [
            SourceFormat::Jpeg,
            SourceFormat::Png,
            SourceFormat::Gif,
            SourceFormat::Webp,
            SourceFormat::Avif,
            SourceFormat::Heic,
            SourceFormat::Tiff,
            SourceFormat::Bmp,
            SourceFormat::Ico,
        ]
        .into_iter()
        .find(|f| f.name() == name)
    }

    pub fn mime(self) -> &'static str {
        match self {
            SourceFormat::Jpeg => "image/jpeg",
            SourceFormat::Png => "image/png",
            SourceFormat::Gif => "image/gif",
            SourceFormat::Webp => "image/webp",
            SourceFormat::Avif => "image/avif",
            SourceFormat::Heic => "image/heic",
            SourceFormat::Tiff => "image/tiff",
            SourceFormat::Bmp => "image/bmp",
            SourceFormat::Ico => "image/x-icon",
        }
    }

    /// Whether bytes of the format may hold an animation (GIF, WebP, APNG), which
    /// [`crate::frames::header`] counts the frames of.
    pub fn may_animate(self) -> bool {
        matches!(
            self,
            SourceFormat::Gif | SourceFormat::Webp | SourceFormat::Png
        )
    }

    /// Whether this build decodes the format.
    pub fn can_decode(self) -> bool {
        !matches!(self, SourceFormat::Heic)
    }

    /// The output format `format=original` means for this source, where imgcas writes it
    /// (otherwise the caller falls back to JPEG, or PNG for sources with alpha).
    pub fn as_output(self) -> Option<OutputFormat> {
        match self {
            SourceFormat::Jpeg => Some(OutputFormat::Jpeg),
            SourceFormat::Png => Some(OutputFormat::Png),
            SourceFormat::Gif => Some(OutputFormat::Gif),
            SourceFormat::Webp => Some(OutputFormat::Webp),
            SourceFormat::Avif => Some(OutputFormat::Avif),
            SourceFormat::Heic | SourceFormat::Tiff | SourceFormat::Bmp | SourceFormat::Ico => None,
        }
    }
}

/// The format of `bytes` from its magic numbers, if it is an image format imgcas knows of.
pub fn sniff(bytes: &[u8]) -> Option<SourceFormat> {
    let starts = |magic: &[u8]| bytes.starts_with(magic);
    if starts(&[0xFF, 0xD8, 0xFF]) {
        return Some(SourceFormat::Jpeg);
    }
    if starts(b"\x89PNG\r\n\x1a\n") {
        return Some(SourceFormat::Png);
    }
    if starts(b"GIF87a") || starts(b"GIF89a") {
        return Some(SourceFormat::Gif);
    }
    if bytes.len() >= 12 && starts(b"RIFF") && &bytes[8..12] == b"WEBP" {
        return Some(SourceFormat::Webp);
    }
    if starts(b"II*\0") || starts(b"MM\0*") {
        return Some(SourceFormat::Tiff);
    }
    if starts(b"BM") && bytes.len() >= 26 {
        return Some(SourceFormat::Bmp);
    }
    // ICO and CUR: reserved 0, type 1 or 2, then a non-zero image count.
    if bytes.len() >= 6 && (starts(&[0, 0, 1, 0]) || starts(&[0, 0, 2, 0])) && bytes[4..6] != [0, 0]
    {
        return Some(SourceFormat::Ico);
    }
    if bytes.len() >= 12 && &bytes[4..8] == b"ftyp" {
        // ISO-BMFF: the major brand, then compatible brands, name the image kind.
        let end = bytes.len().min(64);
        let brands = bytes[8..end].chunks_exact(4);
        let mut heif = false;
        for brand in brands {
            match brand {
                b"avif" | b"avis" => return Some(SourceFormat::Avif),
                b"heic" | b"heix" | b"heim" | b"heis" | b"hevc" | b"hevx" | b"mif1" | b"msf1" => {
                    heif = true
                }
                _ => {}
            }
        }
        if heif {
            return Some(SourceFormat::Heic);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_numbers() {
        assert_eq!(sniff(b"\xFF\xD8\xFF\xE0rest"), Some(SourceFormat::Jpeg));
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\nrest"), Some(SourceFormat::Png));
        assert_eq!(sniff(b"GIF89a...."), Some(SourceFormat::Gif));
        assert_eq!(sniff(b"RIFF\0\0\0\0WEBPVP8 "), Some(SourceFormat::Webp));
        assert_eq!(
            sniff(b"\0\0\0\x1cftypavif\0\0\0\0mif1miaf"),
            Some(SourceFormat::Avif)
        );
        assert_eq!(
            sniff(b"\0\0\0\x18ftypheic\0\0\0\0mif1heic"),
            Some(SourceFormat::Heic)
        );
        assert_eq!(sniff(b"<html>not an image</html>"), None);
        assert_eq!(sniff(b""), None);
    }
}
