//! PNG and APNG: the header through the `image` crate's decoder; an APNG's `acTL` (frames
//! and plays) read from the chunks before the image data, its frame count held to the bytes
//! after it.

use image::ImageFormat;

use super::image_decoders;
use super::{AnimationHeader, Format, Header};
use crate::bytes::{Reader, Short};
use crate::error::ProcessError;
use crate::limits::Limits;
use crate::spec::OutputFormat;

pub(crate) struct Png;

const SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

/// Bytes an `fcTL` chunk takes with its length, type and CRC: every APNG frame has one.
const FCTL_CHUNK_BYTES: usize = 12 + 26;

impl Format for Png {
    fn sniff(&self, bytes: &[u8]) -> bool {
        bytes.starts_with(SIGNATURE)
    }

    fn open<'a>(&self, bytes: &'a [u8], limits: &Limits) -> Result<Header<'a>, ProcessError> {
        check_actl(bytes)?;
        image_decoders::open(bytes, ImageFormat::Png, limits)
    }

    /// APNG: the frame count and plays its `acTL` chunk declares (before the image data), and
    /// the delays its `fcTL` chunks declare.
    fn animation(&self, bytes: &[u8]) -> Option<AnimationHeader> {
        // `None`: no `acTL` (a still PNG); `Some(None)`: one too damaged to read.
        let mut declared = None;
        let mut duration_ms = 0u64;
        for (kind, data) in Chunks::all(bytes) {
            match kind {
                b"acTL" => declared = Some(actl(data).ok()),
                // The delay's numerator and denominator (u16 BE) after the sequence number,
                // size and offset; a denominator of 0 means hundredths.
                b"fcTL" => {
                    if let Some(&[n0, n1, d0, d1]) = data.get(20..24) {
                        let num = u64::from(u16::from_be_bytes([n0, n1]));
                        let den = match u16::from_be_bytes([d0, d1]) {
                            0 => 100,
                            d => u64::from(d),
                        };
                        duration_ms += (num * 1000 + den / 2) / den;
                    }
                }
                _ => {}
            }
        }
        match declared {
            Some(Some((frames, plays))) => {
                Some(AnimationHeader::of(frames, plays).lasting(duration_ms))
            }
            Some(None) => None,
            None => Some(AnimationHeader::of(1, 1)),
        }
    }

    fn may_animate(&self) -> bool {
        true
    }

    fn as_output(&self) -> Option<OutputFormat> {
        Some(OutputFormat::Png)
    }
}

/// An APNG's `acTL` frame count, held to the bytes after it (one `fcTL` chunk a frame at
/// the least), before anything trusts it (issue 35).
fn check_actl(bytes: &[u8]) -> Result<(), ProcessError> {
    let refused = |e: Short| super::undecodable("APNG", e);
    let mut chunks = Chunks::new(bytes);
    while let Some((kind, data)) = chunks.next() {
        if kind == b"acTL" {
            let (frames, _) = actl(data).map_err(refused)?;
            Reader::new(&bytes[bytes.len() - chunks.left()..])
                .count(
                    u64::from(frames),
                    FCTL_CHUNK_BYTES,
                    "acTL frames (an fcTL each)",
                )
                .map_err(refused)?;
            break;
        }
    }
    Ok(())
}

/// The chunks of a PNG up to its first `IDAT` (the image data: what comes after is frames,
/// never headers; [`Chunks::all`] walks on), read through the bounded reader: type and data.
/// A walk cut short by the bytes ends there, its rest left to the decoder.
struct Chunks<'a> {
    r: Reader<'a>,
    done: bool,
    past_data: bool,
}

impl<'a> Chunks<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Chunks {
            r: Reader::new(bytes.get(SIGNATURE.len()..).unwrap_or_default()),
            done: false,
            past_data: false,
        }
    }

    /// Every chunk, the frames' after the image data too.
    fn all(bytes: &'a [u8]) -> Self {
        Chunks {
            past_data: true,
            ..Chunks::new(bytes)
        }
    }

    /// Bytes after the chunks read so far.
    fn left(&self) -> usize {
        self.r.left()
    }

    fn chunk(&mut self) -> Result<(&'a [u8], &'a [u8]), Short> {
        let len = self.r.u32be("chunk length")?;
        let kind = self.r.take(4, "chunk type")?;
        let data = self.r.chunk(u64::from(len), "chunk")?;
        self.r.take(4, "CRC")?;
        Ok((kind, data))
    }
}

impl<'a> Iterator for Chunks<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let chunk = self.chunk().ok();
        self.done =
            chunk.is_none_or(|(kind, _)| kind == b"IEND" || (kind == b"IDAT" && !self.past_data));
        chunk
    }
}

/// The `acTL` chunk's frame count and plays.
fn actl(data: &[u8]) -> Result<(u32, u32), Short> {
    let mut r = Reader::new(data);
    Ok((r.u32be("acTL frame count")?, r.u32be("acTL plays")?))
}
