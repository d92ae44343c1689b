//! RIFF, the container of WebP: the one walker over its chunks, through the bounded reader.

use crate::bytes::{Reader, Short};

/// The chunks of a RIFF file: type and data, in order, within the RIFF's own length (bytes
/// after it are not the container's: decoders ignore them). A chunk whose declared length
/// runs past the bytes is an `Err`, and the walk ends.
pub(crate) struct Chunks<'a> {
    r: Reader<'a>,
    done: bool,
}

impl<'a> Chunks<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        let riff = crate::bytes::u32le_at(bytes, 4).map_or(0, |n| n as usize);
        let end = riff.saturating_add(8).min(bytes.len());
        Chunks {
            r: Reader::new(bytes.get(12..end).unwrap_or_default()),
            done: false,
        }
    }

    fn chunk(&mut self) -> Result<(&'a [u8], &'a [u8]), Short> {
        let fourcc = self.r.take(4, "chunk type")?;
        let len = self.r.u32le("chunk length")?;
        let what = match fourcc {
            b"ANMF" => "an ANMF chunk",
            b"ANIM" => "an ANIM chunk",
            b"ALPH" => "an ALPH chunk",
            b"VP8X" => "a VP8X chunk",
            b"VP8 " | b"VP8L" => "the image chunk",
            _ => "a chunk",
        };
        let data = self.r.chunk(u64::from(len), what)?;
        // RIFF pads odd chunks to even lengths; a file may end without the pad.
        if len % 2 == 1 && self.r.left() > 0 {
            self.r.take(1, "padding")?;
        }
        Ok((fourcc, data))
    }
}

impl<'a> Iterator for Chunks<'a> {
    type Item = Result<(&'a [u8], &'a [u8]), Short>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.r.left() < 8 {
            return None;
        }
        let chunk = self.chunk();
        self.done = chunk.is_err();
        Some(chunk)
    }
}
