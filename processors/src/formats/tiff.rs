//! TIFF: the first IFD's entry count held to the bytes before any decoder walks it; most
//! files through the `image` crate's TIFF path, and the cases it gets wrong or refuses read
//! with the `tiff` crate directly: CMYK with an embedded CMYK profile (the `image` crate converts inks to RGB
//! naively before any profile could be applied), YCbCr pixels (the `tiff` crate hands them
//! over as samples, the `image` crate refuses them), and CCITT Group 3 fax strips (decoded
//! with the `fax` crate; the `tiff` crate reads Group 4 only).

use std::io::Cursor;

use image::metadata::Orientation;
use image::{DynamicImage, ImageFormat};
use tiff::decoder::{Decoder, DecodingResult, Limits as TiffLimits};
use tiff::tags::Tag;
use tiff::ColorType;

use super::image_decoders;
use super::{DecodeAt, Decoded, Format, Header};
use crate::error::ProcessError;
use crate::limits::Limits;

pub(crate) struct Tiff;

impl Format for Tiff {
    fn sniff(&self, bytes: &[u8]) -> bool {
        bytes.starts_with(b"II*\0") || bytes.starts_with(b"MM\0*")
    }

    fn open<'a>(&self, bytes: &'a [u8], limits: &Limits) -> Result<Header<'a>, ProcessError> {
        check_first_ifd(bytes)?;
        let first = FirstImage::read(bytes);
        if let (Kind::YCbCr8 | Kind::Fax3, Some((w, h, orientation))) = (first.kind, first.size) {
            return Ok(Header {
                orientation: Orientation::from_exif(orientation)
                    .unwrap_or(Orientation::NoTransforms),
                ..Header::plain(
                    w,
                    h,
                    false,
                    TiffSource {
                        dims: (w, h),
                        kind: first.kind,
                    },
                )
            });
        }
        let mut header = image_decoders::open(bytes, ImageFormat::Tiff, limits)?;
        header.icc = header.icc.or_else(|| icc_profile(bytes));
        header.decoder = Box::new(TiffSource {
            dims: (header.width, header.height),
            kind: first.kind,
        });
        Ok(header)
    }
}

/// The kinds of first image this module decodes itself, rather than the `image` crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// 8-bit CMYK: through its CMYK profile when it has one.
    Cmyk8,
    /// 8-bit YCbCr, which the `image` crate refuses.
    YCbCr8,
    /// Group 3 fax, which the `tiff` crate does not decode.
    Fax3,
    Other,
}

/// What the first IFD says, read once at `open` for the decode to follow.
struct FirstImage {
    kind: Kind,
    /// Size and EXIF-style orientation, when readable.
    size: Option<(u32, u32, u8)>,
}

impl FirstImage {
    fn read(bytes: &[u8]) -> Self {
        let Ok(mut d) = Decoder::new(Cursor::new(bytes)) else {
            return FirstImage {
                kind: Kind::Other,
                size: None,
            };
        };
        let kind = match d.colortype().ok() {
            Some(ColorType::CMYK(8)) => Kind::Cmyk8,
            Some(ColorType::YCbCr(8)) => Kind::YCbCr8,
            _ if d.get_tag_u32(Tag::Compression).ok() == Some(COMPRESSION_FAX3) => Kind::Fax3,
            _ => Kind::Other,
        };
        let size = d.dimensions().ok().map(|(w, h)| {
            let orientation = d
                .find_tag_unsigned::<u8>(Tag::Orientation)
                .ok()
                .flatten()
                .unwrap_or(1);
            (w, h, orientation)
        });
        FirstImage { kind, size }
    }
}

/// A TIFF's decode: the `tiff` crate for the kinds above, the `image` crate otherwise.
struct TiffSource {
    dims: (u32, u32),
    kind: Kind,
}

impl super::Decoder for TiffSource {
    fn decode(&self, at: &DecodeAt<'_>) -> Result<Decoded, ProcessError> {
        let (bytes, max_alloc) = (at.bytes, at.limits.max_alloc());
        let whole = || image_decoders::decode(bytes, ImageFormat::Tiff, at.limits, self.dims);
        let image = match (self.kind, at.icc) {
            (Kind::Cmyk8, Some(icc)) => {
                return Ok(match decode_cmyk(bytes, icc, max_alloc) {
                    Some(managed) => Decoded {
                        image: managed?,
                        profile_applied: true,
                    },
                    None => Decoded::pixels(whole()?),
                })
            }
            (Kind::YCbCr8, _) => decode_ycbcr(bytes, max_alloc)?,
            (Kind::Fax3, _) => decode_fax3(bytes, max_alloc)?,
            _ => whole()?,
        };
        Ok(Decoded::pixels(image))
    }
}

fn undecodable(e: impl std::fmt::Display) -> ProcessError {
    ProcessError::Undecodable(format!("TIFF: {e}"))
}

fn decoder(bytes: &[u8], max_alloc: u64) -> Result<Decoder<Cursor<&[u8]>>, ProcessError> {
    let mut limits = TiffLimits::default();
    limits.decoding_buffer_size = usize::try_from(max_alloc).unwrap_or(usize::MAX);
    Ok(Decoder::new(Cursor::new(bytes))
        .map_err(undecodable)?
        .with_limits(limits))
}

/// Bytes of one IFD entry: tag, type, count and value or offset.
const IFD_ENTRY_BYTES: usize = 12;

/// The first IFD's declared entry count, checked against the bytes from its offset before
/// the `tiff` crate walks it (issue 35): a directory of 65,535 entries in a 22-byte file is
/// `undecodable` here. Offsets past the end are left to the decoder, which refuses them.
fn check_first_ifd(bytes: &[u8]) -> Result<(), ProcessError> {
    let short = |e: crate::bytes::Short| undecodable(format!("the first IFD: {e}"));
    let mut r = crate::bytes::Reader::new(bytes);
    let order = r.take(2, "byte order").map_err(short)?;
    let little = order == b"II";
    let field32 = |r: &mut crate::bytes::Reader<'_>, what| {
        if little {
            r.u32le(what)
        } else {
            r.u32be(what)
        }
    };
    let magic = r.take(2, "version").map_err(short)?;
    if magic != [42, 0] && magic != [0, 42] {
        // BigTIFF (43) and others: the decoder's own checks.
        return Ok(());
    }
    let offset = field32(&mut r, "IFD offset").map_err(short)? as usize;
    let Some(ifd) = bytes.get(offset..) else {
        return Ok(());
    };
    let mut r = crate::bytes::Reader::new(ifd);
    let declared = if little {
        r.u16le("IFD entry count")
    } else {
        r.u16be("IFD entry count")
    }
    .map_err(short)?;
    r.count(u64::from(declared), IFD_ENTRY_BYTES, "IFD entries")
        .map_err(short)?;
    Ok(())
}

/// Largest embedded ICC profile read (CMYK profiles with big tables run to ~2 MB).
const MAX_ICC_BYTES: usize = 4 << 20;

/// The first image's ICC profile (the `image` crate's TIFF path drops larger ones).
fn icc_profile(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut limits = TiffLimits::default();
    limits.ifd_value_size = MAX_ICC_BYTES;
    let mut d = Decoder::new(Cursor::new(bytes)).ok()?.with_limits(limits);
    d.get_tag_u8_vec(Tag::IccProfile).ok()
}

/// TIFF compression 7: JPEG, whose codec already returns RGB.
const COMPRESSION_JPEG: u32 = 7;
/// Tags the `tiff` crate does not name.
const TAG_YCBCR_COEFFICIENTS: u16 = 529;
const TAG_REFERENCE_BLACK_WHITE: u16 = 532;

/// Decodes 8-bit YCbCr (unsubsampled, or JPEG-compressed) to RGB with the file's luma
/// coefficients (BT.601 unless it says otherwise, e.g. BT.709) and reference black and white.
fn decode_ycbcr(bytes: &[u8], max_alloc: u64) -> Result<DynamicImage, ProcessError> {
    let mut d = decoder(bytes, max_alloc)?;
    let (w, h) = d.dimensions().map_err(undecodable)?;
    let compression = d.get_tag_u32(Tag::Compression).unwrap_or(1);
    let coefficients = d
        .get_tag_f32_vec(Tag::Unknown(TAG_YCBCR_COEFFICIENTS))
        .ok()
        .filter(|c| c.len() == 3 && c.iter().all(|v| v.is_finite() && *v > 0.0 && *v < 1.0))
        .map_or([0.299, 0.587, 0.114], |c| [c[0], c[1], c[2]]);
    let reference = d
        .get_tag_f32_vec(Tag::Unknown(TAG_REFERENCE_BLACK_WHITE))
        .ok()
        .filter(|r| r.len() == 6 && r.iter().all(|v| v.is_finite()))
        .filter(|r| r[1] > r[0] && r[3] > r[2] && r[5] > r[4])
        .map_or([0.0, 255.0, 128.0, 255.0, 128.0, 255.0], |r| {
            [r[0], r[1], r[2], r[3], r[4], r[5]]
        });
    let DecodingResult::U8(mut px) = d.read_image().map_err(undecodable)? else {
        return Err(undecodable("8-bit YCbCr expected"));
    };
    if px.len() as u64 != u64::from(w) * u64::from(h) * 3 {
        return Err(undecodable("fewer samples than the image size"));
    }
    if compression != COMPRESSION_JPEG {
        let [kr, kg, kb] = coefficients;
        let [y0, y1, cb0, cb1, cr0, cr1] = reference;
        for p in px.chunks_exact_mut(3) {
            let y = (f32::from(p[0]) - y0) * 255.0 / (y1 - y0);
            let cb = (f32::from(p[1]) - cb0) * 127.0 / (cb1 - cb0);
            let cr = (f32::from(p[2]) - cr0) * 127.0 / (cr1 - cr0);
            let r = y + cr * (2.0 - 2.0 * kr);
            let b = y + cb * (2.0 - 2.0 * kb);
            let g = (y - kb * b - kr * r) / kg;
            // Float to u8 casts saturate.
            p.copy_from_slice(&[r.round() as u8, g.round() as u8, b.round() as u8]);
        }
    }
    image::RgbImage::from_raw(w, h, px)
        .map(DynamicImage::ImageRgb8)
        .ok_or_else(|| undecodable("YCbCr buffer size mismatch"))
}

/// Decodes an 8-bit CMYK TIFF through its CMYK profile to sRGB. `None` when the profile is not
/// a usable CMYK profile (the caller then takes the ordinary path).
fn decode_cmyk(
    bytes: &[u8],
    icc: &[u8],
    max_alloc: u64,
) -> Option<Result<DynamicImage, ProcessError>> {
    let read = || -> Result<(u32, u32, Vec<u8>), ProcessError> {
        let mut decoder = decoder(bytes, max_alloc)?;
        let (w, h) = decoder.dimensions().map_err(undecodable)?;
        match decoder.read_image().map_err(undecodable)? {
            DecodingResult::U8(px) => Ok((w, h, px)),
            _ => Err(undecodable("8-bit CMYK expected")),
        }
    };
    let (w, h, px) = match read() {
        Ok(v) => v,
        Err(e) => return Some(Err(e)),
    };
    let expected = u64::from(w) * u64::from(h) * 4;
    if px.len() as u64 != expected {
        return Some(Err(undecodable("fewer samples than the image size")));
    }
    crate::color::cmyk_to_srgb(w, h, &px, icc, false).map(|rgb| Ok(DynamicImage::ImageRgb8(rgb)))
}

/// TIFF compression 3: CCITT T.4 (Group 3 fax).
const COMPRESSION_FAX3: u32 = 3;

/// Decodes the first image of a Group 3 fax TIFF to grey (black and white). Lines the data
/// does not reach stay white, like a fax machine's paper.
fn decode_fax3(bytes: &[u8], max_alloc: u64) -> Result<DynamicImage, ProcessError> {
    let mut d = decoder(bytes, max_alloc)?;
    let (w, h) = d.dimensions().map_err(undecodable)?;
    let width = u16::try_from(w).map_err(|_| undecodable("fax lines are at most 65535 wide"))?;
    if u64::from(w) * u64::from(h) > max_alloc {
        return Err(undecodable("fax image larger than the decode budget"));
    }
    let tag = |d: &mut Decoder<Cursor<&[u8]>>, t: Tag, default: u32| {
        d.find_tag_unsigned::<u32>(t)
            .ok()
            .flatten()
            .unwrap_or(default)
    };
    // T4Options bit 0: 2-D coding, which the `fax` crate does not read.
    if tag(&mut d, Tag::Unknown(292), 0) & 1 != 0 {
        return Err(ProcessError::UnsupportedFormat(
            "2-D Group 3 fax TIFF is not supported".into(),
        ));
    }
    // Fax runs decode to 0 (white run) and 1 (black run) samples; BlackIsZero (1) shows the
    // 0 samples black, the usual WhiteIsZero (0) white.
    let black_is_zero = tag(&mut d, Tag::PhotometricInterpretation, 0) == 1;
    let reversed_bits = tag(&mut d, Tag::FillOrder, 1) == 2;
    let rows_per_strip = tag(&mut d, Tag::RowsPerStrip, h).clamp(1, h.max(1));
    let offsets = d.get_tag_u64_vec(Tag::StripOffsets).map_err(undecodable)?;
    let counts = d
        .get_tag_u64_vec(Tag::StripByteCounts)
        .map_err(undecodable)?;
    let (white, black) = if black_is_zero {
        (0u8, 255u8)
    } else {
        (255u8, 0u8)
    };
    let mut pixels = vec![white; w as usize * h as usize];
    for (strip, (offset, count)) in offsets.iter().zip(&counts).enumerate() {
        let start = usize::try_from(*offset).unwrap_or(usize::MAX);
        let end = start.saturating_add(usize::try_from(*count).unwrap_or(usize::MAX));
        let Some(data) = bytes.get(start..end.min(bytes.len())) else {
            break;
        };
        let first_row = strip as u64 * u64::from(rows_per_strip);
        let mut row = first_row;
        let last_row = (first_row + u64::from(rows_per_strip)).min(u64::from(h));
        let input = data
            .iter()
            .map(|b| if reversed_bits { b.reverse_bits() } else { *b });
        fax::decoder::decode_g3(input, |transitions| {
            if row >= last_row {
                return;
            }
            let line = &mut pixels[row as usize * w as usize..][..w as usize];
            for (px, colour) in line.iter_mut().zip(fax::decoder::pels(transitions, width)) {
                *px = match colour {
                    fax::Color::Black => black,
                    fax::Color::White => white,
                };
            }
            row += 1;
        });
        if row == first_row {
            return Err(undecodable("a fax strip holds no line"));
        }
    }
    let grey = image::GrayImage::from_raw(w, h, pixels)
        .ok_or_else(|| undecodable("fax buffer size mismatch"))?;
    Ok(DynamicImage::ImageLuma8(grey))
}
