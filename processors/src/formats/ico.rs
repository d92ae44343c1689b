//! ICO/CUR: the largest entry of the directory, handed to the PNG or BMP decoder as a file of
//! its own. Reading the entry ourselves makes imgcas as lenient as browsers are: any PNG colour
//! type, directory fields that disagree with the bitmap, a truncated AND mask.

use image::ImageFormat;

use super::image_decoders::{self, Whole};
use super::{DecodeAt, Format, Header};
use crate::bytes::{u16le_at, u32le_at as u32le};
use crate::error::ProcessError;
use crate::limits::Limits;

pub(crate) struct Ico;

impl Format for Ico {
    /// ICO and CUR: reserved 0, type 1 or 2, then a non-zero image count.
    fn sniff(&self, bytes: &[u8]) -> bool {
        bytes.len() >= 6
            && (bytes.starts_with(&[0, 0, 1, 0]) || bytes.starts_with(&[0, 0, 2, 0]))
            && bytes[4..6] != [0, 0]
    }

    /// The largest entry, read by the PNG or BMP decoder as a file of its own.
    fn open<'a>(&self, bytes: &'a [u8], limits: &Limits) -> Result<Header<'a>, ProcessError> {
        let (bytes, format) = largest_entry(bytes)?;
        // The entry's size and alpha; an icon has no orientation, and its profile is ignored.
        let read = image_decoders::open(&bytes, format, limits)?;
        let dims = (read.width, read.height);
        Ok(Header::plain(
            dims.0,
            dims.1,
            read.has_alpha,
            Entry {
                bytes,
                whole: Whole { format, dims },
            },
        ))
    }
}

/// The entry chosen, rewrapped as a file, and its decoder.
struct Entry {
    bytes: Vec<u8>,
    whole: Whole,
}

impl super::Decoder for Entry {
    fn decode(&self, at: &DecodeAt<'_>) -> Result<super::Decoded, ProcessError> {
        let entry = DecodeAt {
            bytes: &self.bytes,
            ..*at
        };
        self.whole.decode(&entry)
    }
}

fn u16le(b: &[u8], at: usize) -> Option<u32> {
    u16le_at(b, at).map(u32::from)
}

fn undecodable(m: &str) -> ProcessError {
    ProcessError::Undecodable(format!("ICO: {m}"))
}

/// The best (largest, then deepest) entry.
fn largest_entry(b: &[u8]) -> Result<(Vec<u8>, ImageFormat), ProcessError> {
    let short = |e: crate::bytes::Short| undecodable(&e.to_string());
    let mut r = crate::bytes::Reader::new(b);
    r.take(4, "header").map_err(short)?;
    let declared = r.u16le("entry count").map_err(short)?;
    // A directory larger than the file is refused before any entry is read.
    let count = r
        .count(u64::from(declared), 16, "directory entries")
        .map_err(short)?;
    let mut best: Option<(u64, u32, &[u8])> = None;
    for _ in 0..count {
        let entry = r.take(16, "directory entry").map_err(short)?;
        let side = |v: u8| if v == 0 { 256u64 } else { u64::from(v) };
        let area = side(entry[0]) * side(entry[1]);
        let bpp = u16le(entry, 6).unwrap_or(0);
        let (size, offset) = (
            u32le(entry, 8).unwrap_or(0) as usize,
            u32le(entry, 12).unwrap_or(0) as usize,
        );
        let Some(data) = b.get(offset..offset.saturating_add(size).min(b.len())) else {
            continue;
        };
        if data.is_empty() {
            continue;
        }
        if best.is_none_or(|(a, d, _)| (area, bpp) > (a, d)) {
            best = Some((area, bpp, data));
        }
    }
    let (_, _, data) = best.ok_or_else(|| undecodable("no readable entry"))?;
    if data.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Ok((data.to_vec(), ImageFormat::Png));
    }
    let bmp = bmp_file(data).ok_or_else(|| undecodable("bad bitmap entry"))?;
    Ok((bmp, ImageFormat::Bmp))
}

/// Wraps an ICO bitmap (a DIB whose height counts the AND mask too) as a BMP file.
fn bmp_file(dib: &[u8]) -> Option<Vec<u8>> {
    let header_size = u32le(dib, 0)?;
    let height = u32le(dib, 8)? as i32;
    let bpp = u16le(dib, 14)?;
    let compression = if header_size >= 20 {
        u32le(dib, 16)?
    } else {
        0
    };
    let colours_used = if header_size >= 36 {
        u32le(dib, 32)?
    } else {
        0
    };
    let palette = if bpp <= 8 {
        if colours_used == 0 {
            1u32 << bpp
        } else {
            colours_used
        }
    } else {
        0
    };
    let masks = if compression == 3 && header_size == 40 {
        12
    } else {
        0
    };
    let offset = 14 + header_size + masks + palette * 4;
    let mut out = Vec::with_capacity(14 + dib.len());
    out.extend_from_slice(b"BM");
    out.extend_from_slice(&(14 + dib.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(dib);
    // Only the colour (XOR) half is read: halve the height.
    out[14 + 8..14 + 12].copy_from_slice(&(height / 2).to_le_bytes());
    Some(out)
}
