//! JPEG: a marker walker that reads what decisions need before libjpeg is touched (frame
//! size and type, scan count, EXIF, ICC, Adobe transform, and which scans of a progressive
//! file a 1/8 decode can skip), and a libjpeg-turbo decode (through the `mozjpeg` crate) with
//! DCT-domain downscaling for shrink-on-load, from the DC scans alone where that gives the
//! same pixels.

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};

use image::{DynamicImage, GrayImage, RgbImage};

use super::{DecodeAt, Decoded, Decoder, Format, Header};
use crate::bytes::{Reader, Short};
use crate::error::ProcessError;
use crate::limits::Limits;
use crate::spec::OutputFormat;

pub(crate) struct Jpeg;

impl Format for Jpeg {
    fn sniff(&self, bytes: &[u8]) -> bool {
        bytes.starts_with(&[0xFF, 0xD8, 0xFF])
    }

    fn open<'a>(&self, bytes: &'a [u8], _limits: &Limits) -> Result<Header<'a>, ProcessError> {
        let header = parse(bytes)?;
        if let Some(reason) = header.unsupported_reason() {
            return Err(ProcessError::UnsupportedFormat(reason));
        }
        Ok(Header {
            width: header.width,
            height: header.height,
            has_alpha: false,
            orientation: super::exif_orientation(header.exif),
            icc: header.icc.clone(),
            decoder: Box::new(header),
        })
    }

    fn shrinks_on_load(&self) -> bool {
        true
    }

    fn as_output(&self) -> Option<OutputFormat> {
        Some(OutputFormat::Jpeg)
    }
}

impl Decoder for JpegHeader<'_> {
    /// DCT-downscaled, with the profile applied here (CMYK profiles need the raw inks).
    fn decode(&self, at: &DecodeAt<'_>) -> Result<Decoded, ProcessError> {
        Ok(Decoded {
            image: decode(at.bytes, self, at.denominator)?,
            profile_applied: true,
        })
    }

    /// libvips' rule, twice the output's resolution ([`crate::geometry::shrink_denominator`]:
    /// the DCT's block shrink is coarse, the resize after it is the good filter), except
    /// where the output's own loss hides a coarser decode (`coarse_ok`) and a progressive
    /// file's 1/8 decode reads only its DC scans ([`JpegHeader::dc_only`]): there 1/8 from a
    /// reduction of 8 costs an eighth of any other scale (a 16 MP photo: 24 ms against
    /// 185 ms, the AC scans' entropy decoding being most of a progressive decode), and
    /// keeps as much resolution as sharp's and Pillow's shrink-on-load keep by default.
    fn shrink_denominator(&self, reduction: f64, coarse_ok: bool) -> u32 {
        if coarse_ok && reduction >= 8.0 && self.reads_dc_only_at_one_eighth() {
            8
        } else {
            crate::geometry::shrink_denominator(reduction)
        }
    }
}

/// Most scans a file may have. Progressive JPEGs use about ten; thousands make a CPU bomb.
pub const MAX_SCANS: u32 = 256;
/// Largest ICC profile collected from APP2 segments.
pub const MAX_ICC_BYTES: usize = 4 << 20;

#[derive(Debug, Clone, Default)]
pub struct JpegHeader<'a> {
    pub width: u32,
    pub height: u32,
    pub components: u8,
    /// The SOF marker (0xC0 baseline, 0xC2 progressive, …).
    pub sof: u8,
    pub scans: u32,
    /// The TIFF structure of the first Exif APP1 segment.
    pub exif: Option<&'a [u8]>,
    pub icc: Option<Vec<u8>>,
    /// An Adobe APP14 segment is present (CMYK is then stored inverted).
    pub adobe: bool,
    /// Byte ranges of the AC scans of a progressive (SOF2) file that a 1/8-scale decode does
    /// not read, each its SOS segment and entropy-coded data (see [`JpegHeader::dc_only`]).
    pub ac_scans: Vec<Range<usize>>,
    /// Component ids of the frame, in frame order.
    component_ids: Vec<u8>,
    /// Per component (frame order): whether a 1/8-scale decode reads its AC coefficients.
    /// libjpeg scales a subsampled component up by a larger inverse DCT where the
    /// subsampling allows (4:2:0 chroma: 2 × 2 pixels a block at 1/8), and that reads AC
    /// coefficients; full-resolution components (and 4:2:2 chroma) take 1 pixel a block,
    /// the DC coefficient alone.
    reads_ac_at_one_eighth: Vec<bool>,
    /// Per component (frame order): bit k set when a scan brought AC coefficient k (1–9) to
    /// full precision (successive approximation's last bit, Al = 0).
    complete_ac: Vec<u16>,
}

fn undecodable(message: impl Into<String>) -> ProcessError {
    ProcessError::Undecodable(message.into())
}

/// Where the entropy-coded data starting at `from` ends: the next 0xFF that is a marker
/// (not a stuffed 0xFF 0x00, nor a restart marker inside the data), or the end. Found by
/// `memchr`, since this walks megabytes of a large photo at every open.
fn next_marker(b: &[u8], from: usize) -> usize {
    let mut j = from;
    while let Some(at) = b.get(j..).and_then(|rest| memchr::memchr(0xFF, rest)) {
        j += at;
        match b.get(j + 1) {
            None => return b.len(),
            Some(0x00 | 0xD0..=0xD7) => j += 1,
            Some(_) => return j,
        }
    }
    b.len()
}

/// Walks the markers of a whole file, skipping entropy-coded data.
pub fn parse(b: &[u8]) -> Result<JpegHeader<'_>, ProcessError> {
    if !b.starts_with(&[0xFF, 0xD8]) {
        return Err(undecodable("not a JPEG stream"));
    }
    let mut h = JpegHeader::default();
    let mut icc_chunks: Vec<(u8, &[u8])> = Vec::new();
    let mut icc_total = 0usize;
    let mut i = 2;
    while i + 1 < b.len() {
        if b[i] != 0xFF {
            i += 1;
            continue;
        }
        let marker = b[i + 1];
        match marker {
            0xFF => {
                i += 1;
                continue;
            }
            0x00 | 0x01 | 0xD0..=0xD8 => {
                i += 2;
                continue;
            }
            0xD9 => break,
            _ => {}
        }
        // The segment's declared length is checked against the bytes present. Before the
        // first scan a short segment leaves no image data, so it is the input's error; after
        // a scan the file was cut short, and libjpeg decodes the scans that arrived.
        let mut r = Reader::new(&b[i + 2..]);
        let segment = match r.u16be("JPEG segment length") {
            Ok(len) if len >= 2 => r
                .chunk(u64::from(len - 2), "JPEG segment")
                .map_err(|e| e.to_string()),
            Ok(len) => Err(format!("a segment length of {len} (at least 2)")),
            Err(e) => Err(e.to_string()),
        };
        let payload = match segment {
            Ok(payload) => payload,
            Err(_) if h.scans > 0 => break,
            Err(e) => return Err(undecodable(format!("JPEG marker {marker:#04x}: {e}"))),
        };
        let end = i + 4 + payload.len();
        match marker {
            // The first frame header (SOFn; C4, C8 and CC are other markers).
            0xC0..=0xCF if !matches!(marker, 0xC4 | 0xC8 | 0xCC) && h.sof == 0 => {
                h.note_frame(marker, payload)
                    .map_err(|e| undecodable(format!("JPEG frame header: {e}")))?;
            }
            0xE1 if h.exif.is_none() && payload.starts_with(b"Exif\0\0") => {
                h.exif = Some(&payload[6..]);
            }
            0xE2 if payload.starts_with(b"ICC_PROFILE\0") && payload.len() > 14 => {
                icc_total += payload.len() - 14;
                if icc_total <= MAX_ICC_BYTES {
                    icc_chunks.push((payload[12], &payload[14..]));
                }
            }
            0xEE if payload.starts_with(b"Adobe") => h.adobe = true,
            0xDA => {
                h.scans += 1;
                if h.scans > MAX_SCANS {
                    return Err(undecodable(format!(
                        "more than {MAX_SCANS} scans: refused as a decoding-time bomb"
                    )));
                }
                let j = next_marker(b, end);
                if h.sof == 0xC2 {
                    h.note_progressive_scan(payload, i..j);
                }
                i = j;
                continue;
            }
            _ => {}
        }
        i = end;
    }
    if h.sof == 0 {
        return Err(undecodable("no frame header (SOF)"));
    }
    if h.width == 0 || h.height == 0 {
        return Err(undecodable(format!(
            "frame header declares {}x{}",
            h.width, h.height
        )));
    }
    if h.scans == 0 {
        return Err(undecodable("no scan (SOS): no image data"));
    }
    if !icc_chunks.is_empty() && icc_total <= MAX_ICC_BYTES {
        icc_chunks.sort_by_key(|(seq, _)| *seq);
        h.icc = Some(
            icc_chunks
                .into_iter()
                .flat_map(|(_, c)| c.iter().copied())
                .collect(),
        );
    }
    Ok(h)
}

impl JpegHeader<'_> {
    /// Reads the frame header (SOFn): size, components and their sampling. A component count
    /// the segment cannot hold is refused, not read short.
    fn note_frame(&mut self, marker: u8, payload: &[u8]) -> Result<(), Short> {
        let mut r = Reader::new(payload);
        r.u8("sample precision")?;
        self.sof = marker;
        self.height = u32::from(r.u16be("frame height")?);
        self.width = u32::from(r.u16be("frame width")?);
        self.components = r.u8("component count")?;
        let count = r.count(u64::from(self.components), 3, "frame components")?;
        let components: Vec<&[u8]> = r
            .take(3 * count, "frame components")?
            .chunks_exact(3)
            .collect();
        let sampling = |c: &[u8]| (u32::from(c[1] >> 4), u32::from(c[1] & 0x0F));
        let max_h = components.iter().map(|c| sampling(c).0).max().unwrap_or(1);
        let max_v = components.iter().map(|c| sampling(c).1).max().unwrap_or(1);
        self.component_ids = components.iter().map(|c| c[0]).collect();
        self.reads_ac_at_one_eighth = components
            .iter()
            .map(|c| {
                let (ch, cv) = sampling(c);
                ch > 0 && cv > 0 && max_h % (2 * ch) == 0 && max_v % (2 * cv) == 0
            })
            .collect();
        self.complete_ac = vec![0; self.component_ids.len()];
        Ok(())
    }

    /// Notes one scan of a progressive file: an AC scan's byte range, and which of AC
    /// coefficients 1–9 it completes for its components.
    fn note_progressive_scan(&mut self, sos: &[u8], range: Range<usize>) {
        let mut r = Reader::new(sos);
        let mut fields = || -> Result<_, Short> {
            let count = r.u8("scan component count")?;
            let count = r.count(u64::from(count), 2, "scan components")?;
            let ids = r.take(2 * count, "scan components")?;
            let bands = r.take(3, "spectral selection")?;
            Ok((ids, bands[0], bands[1], bands[2]))
        };
        let Ok((ids, ss, se, approximation)) = fields() else {
            return;
        };
        if ss == 0 {
            return;
        }
        let components: Vec<usize> = ids
            .chunks_exact(2)
            .filter_map(|c| self.component_ids.iter().position(|id| *id == c[0]))
            .collect();
        let read = components.iter().any(|at| {
            self.reads_ac_at_one_eighth
                .get(*at)
                .copied()
                .unwrap_or(true)
        });
        if !read && !components.is_empty() {
            self.ac_scans.push(range);
        }
        if approximation & 0x0F != 0 {
            return;
        }
        let bands = (ss..=se.min(9)).fold(0u16, |bits, k| bits | 1 << k);
        for at in components {
            self.complete_ac[at] |= bands;
        }
    }

    /// Whether a 1/8-scale decode is made from a stripped file ([`JpegHeader::dc_only`]).
    pub fn reads_dc_only_at_one_eighth(&self) -> bool {
        let every_ac_complete = self.complete_ac.iter().all(|bits| *bits == 0b11_1111_1110);
        self.sof == 0xC2 && !self.ac_scans.is_empty() && every_ac_complete
    }

    /// The file without the AC scans a 1/8-scale decode does not read, when a 1/8-scale
    /// decode of that is the very pixels a 1/8-scale decode of the whole file gives:
    /// libjpeg's 1/8 scale reads only the DC coefficient of each full-resolution block, and
    /// in a progressive file the DC coefficients come in scans of their own (typically a
    /// tenth of the bytes), so the costly AC scans need not be entropy-decoded at all. Exact only when the whole file completes AC coefficients
    /// 1–9 of every component: otherwise libjpeg smooths blocks whose coefficients are
    /// missing, reading them, even at 1/8 (the stripped file is decoded with smoothing off).
    /// `None` for baseline files, whose DC and AC are interleaved in one scan.
    pub fn dc_only(&self, b: &[u8]) -> Option<Vec<u8>> {
        if !self.reads_dc_only_at_one_eighth() {
            return None;
        }
        let dropped: usize = self.ac_scans.iter().map(|r| r.len()).sum();
        let mut stream = Vec::with_capacity(b.len().saturating_sub(dropped));
        let mut at = 0;
        for scan in &self.ac_scans {
            stream.extend_from_slice(b.get(at..scan.start)?);
            at = scan.end;
        }
        stream.extend_from_slice(b.get(at..)?);
        Some(stream)
    }

    /// Lossless, hierarchical and differential JPEG: valid, rare, and not read by imgcas.
    pub fn unsupported_reason(&self) -> Option<String> {
        match self.sof {
            0xC0 | 0xC1 | 0xC2 | 0xC9 | 0xCA => None,
            0xC3 | 0xCB => Some("lossless JPEG is not supported".into()),
            other => Some(format!(
                "hierarchical/differential JPEG (SOF {other:#04x}) is not supported"
            )),
        }
    }
}

/// Decodes at `1/denominator` scale (1, 2, 4 or 8), DCT-domain, to RGB.
pub fn decode(
    b: &[u8],
    header: &JpegHeader<'_>,
    denominator: u32,
) -> Result<DynamicImage, ProcessError> {
    let adobe = header.adobe;
    let icc = header.icc.as_deref();
    let denominator = denominator.clamp(1, 8);
    let dc_only = if denominator == 8 {
        header.dc_only(b)
    } else {
        None
    };
    let result = catch_unwind(AssertUnwindSafe(|| -> std::io::Result<DynamicImage> {
        let mut d = mozjpeg::Decompress::new_mem(dc_only.as_deref().unwrap_or(b))?;
        d.scale((8 / denominator) as u8);
        if dc_only.is_some() {
            // Missing AC coefficients are missing on purpose (see `dc_only`): no estimate.
            d.do_block_smoothing(false);
        }
        Ok(match d.image()? {
            mozjpeg::decompress::Format::RGB(mut s) => {
                let (w, h) = (s.width() as u32, s.height() as u32);
                let px = s.read_scanlines::<u8>()?;
                let _ = s.finish();
                DynamicImage::ImageRgb8(RgbImage::from_raw(w, h, px).ok_or_else(short)?)
            }
            mozjpeg::decompress::Format::Gray(mut s) => {
                let (w, h) = (s.width() as u32, s.height() as u32);
                let px = s.read_scanlines::<u8>()?;
                let _ = s.finish();
                DynamicImage::ImageLuma8(GrayImage::from_raw(w, h, px).ok_or_else(short)?)
            }
            mozjpeg::decompress::Format::CMYK(mut s) => {
                let (w, h) = (s.width() as u32, s.height() as u32);
                let px = s.read_scanlines::<u8>()?;
                let _ = s.finish();
                let managed = icc.and_then(|p| crate::color::cmyk_to_srgb(w, h, &px, p, adobe));
                let rgb = match managed {
                    Some(rgb) => rgb,
                    None => cmyk_to_rgb(w, h, &px, adobe).ok_or_else(short)?,
                };
                DynamicImage::ImageRgb8(rgb)
            }
        })
    }));
    match result {
        Ok(Ok(img)) if matches!(img, DynamicImage::ImageRgb8(_)) && !header_is_cmyk(header) => {
            Ok(match icc {
                Some(profile) => crate::color::to_srgb(img, profile),
                None => img,
            })
        }
        Ok(Ok(img)) => Ok(img),
        Ok(Err(e)) => Err(undecodable(e.to_string())),
        Err(payload) => Err(undecodable(
            payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "libjpeg failed".into()),
        )),
    }
}

fn header_is_cmyk(header: &JpegHeader<'_>) -> bool {
    header.components == 4
}

fn short() -> std::io::Error {
    std::io::Error::other("decoder returned fewer pixels than its size")
}

/// Naive CMYK → RGB. Adobe writers store CMYK inverted (0 = full ink).
fn cmyk_to_rgb(w: u32, h: u32, px: &[u8], inverted: bool) -> Option<RgbImage> {
    let mut out = Vec::with_capacity(px.len() / 4 * 3);
    for p in px.chunks_exact(4) {
        let [c, m, y, k] = [p[0], p[1], p[2], p[3]].map(u32::from);
        let (c, m, y, k) = if inverted {
            (c, m, y, k)
        } else {
            (255 - c, 255 - m, 255 - y, 255 - k)
        };
        out.extend_from_slice(&[
            (c * k / 255) as u8,
            (m * k / 255) as u8,
            (y * k / 255) as u8,
        ]);
    }
    RgbImage::from_raw(w, h, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata;

    #[test]
    fn walks_markers_and_counts_scans() {
        let img = DynamicImage::new_rgb8(33, 17);
        let mut out = std::io::Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Jpeg).unwrap();
        let bytes = out.into_inner();
        let h = parse(&bytes).unwrap();
        assert_eq!(
            (h.width, h.height, h.components, h.sof, h.scans),
            (33, 17, 3, 0xC0, 1)
        );
        assert!(parse(b"\xFF\xD8\xFF\xD9").is_err());
        let decoded = decode(&bytes, &h, 2).unwrap();
        assert_eq!((decoded.width(), decoded.height()), (17, 9));
    }

    #[test]
    fn declared_lengths_and_counts_are_held_to_the_bytes_present() {
        // An APP1 segment declaring 60,000 bytes in a file of 12: refused, naming it.
        let message = parse(b"\xFF\xD8\xFF\xE1\xEA\x60Exif\0\0")
            .unwrap_err()
            .to_string();
        assert!(message.contains("JPEG marker 0xe1"), "{message}");
        assert!(
            message.contains("need at least 59998 bytes, 6 are left"),
            "{message}"
        );
        // A frame header declaring 255 components and holding one.
        let sof = b"\xFF\xD8\xFF\xC0\x00\x0B\x08\x00\x10\x00\x10\xFF\x01\x11\x00";
        let message = parse(sof).unwrap_err().to_string();
        assert!(
            message.contains("frame components need at least 765 bytes"),
            "{message}"
        );
        // A segment length under 2.
        assert!(parse(b"\xFF\xD8\xFF\xE0\x00\x01").is_err());
        // After a scan, a cut-short segment ends the walk: the scans that came decode.
        let img = DynamicImage::new_rgb8(16, 16);
        let mut out = std::io::Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Jpeg).unwrap();
        let mut bytes = out.into_inner();
        bytes.truncate(bytes.len() - 2); // no EOI
        bytes.extend_from_slice(b"\xFF\xE1\x40\x00");
        let h = parse(&bytes).unwrap();
        assert_eq!((h.width, h.height, h.scans), (16, 16, 1));
    }

    /// The 1/8 decode of a whole file, AC scans entropy-decoded (the path without `dc_only`).
    fn decode_whole(bytes: &[u8], denominator: u32) -> DynamicImage {
        let mut header = parse(bytes).unwrap();
        header.ac_scans.clear();
        decode(bytes, &header, denominator).unwrap()
    }

    #[test]
    fn a_progressive_file_decodes_at_one_eighth_from_its_dc_scans_to_the_same_pixels() {
        let photo = testdata("exif-orientation/Landscape_1.jpg");
        let rgb = decode_whole(&photo, 1).into_rgb8();
        let gray = DynamicImage::ImageRgb8(rgb.clone()).into_luma8();
        let mut gray_jpeg = std::io::Cursor::new(Vec::new());
        DynamicImage::ImageLuma8(gray)
            .write_to(&mut gray_jpeg, image::ImageFormat::Jpeg)
            .unwrap();
        let files = [
            // libjpeg-turbo's progression: DC and AC by successive approximation.
            ("4:2:0", crate::jpeg_encode::encode(&rgb, 80, true).unwrap()),
            ("4:4:4", crate::jpeg_encode::encode(&rgb, 92, true).unwrap()),
            (
                "kimono (another encoder's scans)",
                testdata("avif/kimono.jpg"),
            ),
        ];
        for (name, bytes) in &files {
            let header = parse(bytes).unwrap();
            assert_eq!(header.sof, 0xC2, "{name}");
            let stripped = header.dc_only(bytes).expect(name);
            assert!(
                stripped.len() * 3 < bytes.len(),
                "{name}: the AC scans are most bytes"
            );
            let fast = decode(bytes, &header, 8).unwrap();
            assert_eq!(fast, decode_whole(bytes, 8), "{name}");
            // Other scales read AC coefficients: the whole file.
            assert_eq!(
                decode(bytes, &header, 4).unwrap(),
                decode_whole(bytes, 4),
                "{name}"
            );
        }
        // Baseline files interleave DC and AC: nothing to strip.
        let baseline = parse(&photo).unwrap();
        assert!(baseline.dc_only(&photo).is_none());
        let gray = gray_jpeg.into_inner();
        assert!(parse(&gray).unwrap().dc_only(&gray).is_none());
    }

    #[test]
    fn a_progressive_file_missing_ac_refinements_is_decoded_whole() {
        // Cut after its first scans: libjpeg estimates the missing coefficients, and that
        // estimate reads AC bands, so the DC scans alone would give other pixels.
        let rgb = decode_whole(&testdata("exif-orientation/Landscape_1.jpg"), 4).into_rgb8();
        let bytes = crate::jpeg_encode::encode(&rgb, 80, true).unwrap();
        let header = parse(&bytes).unwrap();
        let cut = header.ac_scans[1].start;
        let mut truncated = bytes[..cut].to_vec();
        truncated.extend_from_slice(&[0xFF, 0xD9]);
        let header = parse(&truncated).unwrap();
        assert!(header.dc_only(&truncated).is_none());
    }

    #[test]
    fn a_repeated_scan_bomb_is_refused_before_decoding() {
        let mut b = vec![0xFF, 0xD8];
        b.extend_from_slice(&[0xFF, 0xC2, 0, 11, 8, 0, 8, 0, 8, 1, 1, 0x11, 0]);
        for _ in 0..(MAX_SCANS + 1) {
            b.extend_from_slice(&[0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 0x3F, 0, 0x12, 0x34]);
        }
        b.extend_from_slice(&[0xFF, 0xD9]);
        let err = parse(&b).unwrap_err();
        assert!(err.to_string().contains("scans"), "{err}");
    }
}
