//! ISO-BMFF, the container of HEIF (AVIF and HEIC): its brands, for sniffing, and the one
//! walker over its boxes that every reader of the container uses (the AVIF and HEIC header,
//! the `pixi` repair). A box whose declared size runs past its parent ends the walk there.

use crate::bytes::{u32be_at, u64be_at};

/// A box: its type, where it starts (header included), where its payload starts, and where
/// it ends, all as offsets into the bytes walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BoxAt {
    pub kind: [u8; 4],
    pub start: usize,
    pub body: usize,
    pub end: usize,
    /// Its size is in the plain 32-bit field (not the 64-bit `largesize`, not "to the end"):
    /// the only layout an in-place edit of the size handles.
    pub plain: bool,
}

/// The boxes in `b[from..to]`, in order: a walk that ends at the first box whose header or
/// declared size the bytes cannot hold (that box is `Err(start)`), or at fewer than 8 bytes
/// left.
pub(crate) struct Boxes<'a> {
    b: &'a [u8],
    at: usize,
    to: usize,
    done: bool,
}

impl<'a> Boxes<'a> {
    pub fn within(b: &'a [u8], from: usize, to: usize) -> Self {
        Boxes {
            b,
            at: from,
            to: to.min(b.len()),
            done: false,
        }
    }

    fn read(&self) -> Option<BoxAt> {
        let at = self.at;
        let size = u32be_at(self.b, at)?;
        let kind = crate::bytes::array_at(self.b, at + 4)?;
        let (header, size) = match size {
            1 => (16, u64be_at(self.b, at + 8).filter(|_| at + 16 <= self.to)?),
            0 => (8, (self.to - at) as u64),
            s => (8, u64::from(s)),
        };
        let size = usize::try_from(size).ok()?;
        if size < header || size > self.to - at {
            return None;
        }
        Some(BoxAt {
            kind,
            start: at,
            body: at + header,
            end: at + size,
            plain: header == 8 && u32be_at(self.b, at) != Some(0),
        })
    }
}

impl Iterator for Boxes<'_> {
    type Item = Result<BoxAt, usize>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.to.saturating_sub(self.at) < 8 {
            return None;
        }
        match self.read() {
            Some(found) => {
                self.at = found.end;
                Some(Ok(found))
            }
            None => {
                self.done = true;
                Some(Err(self.at))
            }
        }
    }
}

/// The boxes of `b` that can be read, each as its type and payload.
pub(crate) fn children(b: &[u8]) -> impl Iterator<Item = ([u8; 4], &[u8])> {
    Boxes::within(b, 0, b.len())
        .map_while(Result::ok)
        .map(move |x| (x.kind, &b[x.body..x.end]))
}

/// The payload of the first child of `b` of type `kind`.
pub(crate) fn child<'a>(b: &'a [u8], kind: &[u8; 4]) -> Option<&'a [u8]> {
    children(b).find(|(k, _)| k == kind).map(|(_, p)| p)
}

/// The brands of a file that opens with an `ftyp` box (major brand, then compatible brands,
/// within the first 64 bytes); empty for any other bytes.
pub(crate) fn brands(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let ftyp = bytes.len() >= 12 && &bytes[4..8] == b"ftyp";
    let end = if ftyp { bytes.len().min(64) } else { 8 };
    bytes.get(8..end).unwrap_or_default().chunks_exact(4)
}

/// A box of type `kind` around `body`, for tests that build files.
#[cfg(test)]
pub(crate) fn plain_box(kind: &[u8; 4], body: &[u8]) -> Vec<u8> {
    let mut b = ((body.len() + 8) as u32).to_be_bytes().to_vec();
    b.extend_from_slice(kind);
    b.extend_from_slice(body);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_plain_large_and_to_the_end_boxes_and_stops_at_an_overrun() {
        let mut large = 1u32.to_be_bytes().to_vec();
        large.extend_from_slice(b"mdat");
        large.extend_from_slice(&20u64.to_be_bytes());
        large.extend_from_slice(&[7, 7, 7, 7]);
        let mut to_end = 0u32.to_be_bytes().to_vec();
        to_end.extend_from_slice(b"free");
        to_end.extend_from_slice(&[1, 2, 3]);
        let file = [plain_box(b"ftyp", b"avif"), large, to_end].concat();
        let found: Vec<_> = Boxes::within(&file, 0, file.len()).collect();
        assert_eq!(found.len(), 3);
        let kinds: Vec<_> = found.iter().flatten().map(|x| (x.kind, x.plain)).collect();
        assert_eq!(
            kinds,
            [(*b"ftyp", true), (*b"mdat", false), (*b"free", false)]
        );
        assert_eq!(child(&file, b"mdat"), Some(&[7u8, 7, 7, 7][..]));
        assert_eq!(child(&file, b"free"), Some(&[1u8, 2, 3][..]));

        // A size past the parent's end: the walk reports where and ends.
        let mut overrun = plain_box(b"meta", &[0; 4]);
        overrun[3] = 200;
        let file = [plain_box(b"ftyp", b"avif"), overrun].concat();
        let found: Vec<_> = Boxes::within(&file, 0, file.len()).collect();
        assert_eq!(found.len(), 2);
        assert_eq!(found[1], Err(12));
        assert_eq!(children(&file).count(), 1);
        // A size under its header, and a large size with no room for its field.
        assert_eq!(
            Boxes::within(&[0, 0, 0, 4, 1, 2, 3, 4], 0, 8).next(),
            Some(Err(0))
        );
        assert_eq!(
            Boxes::within(&[0, 0, 0, 1, 1, 2, 3, 4, 0], 0, 9).next(),
            Some(Err(0))
        );
    }

    #[test]
    fn brands_come_only_from_an_ftyp_box() {
        let file = plain_box(b"ftyp", b"heic\0\0\0\0mif1heic");
        let found: Vec<_> = brands(&file).collect();
        assert_eq!(found, [&b"heic"[..], b"\0\0\0\0", b"mif1", b"heic"]);
        assert_eq!(brands(b"RIFF\0\0\0\0WEBPVP8 ").count(), 0);
        assert_eq!(brands(b"").count(), 0);
    }
}
