//! AVIF: a walker over the HEIF boxes for what decisions need before decoding (the primary
//! item's size for the pixel limit, alpha, and the `clap`/`irot`/`imir` transforms, which
//! libavif reports but never applies), and the decode itself through libavif (grids, image
//! sequences' first frame, 8–12 bit, monochrome and alpha handled there). An image sequence's
//! frames and plays are read, and its frames decoded for an animated output, in
//! `avif_anim.rs`. HEIC's room reads its
//! header with the same walk ([`parse_container`]).

use image::{imageops, DynamicImage, RgbaImage};

use super::heif::{child, children};
use super::{AnimationHeader, DecodeAt, Decoded, Decoder, Format, Header};
use crate::bytes::{u16be_at, u32be_at as u32be};
use crate::error::ProcessError;
use crate::limits::Limits;
use crate::spec::OutputFormat;

pub(crate) struct Avif;

impl Format for Avif {
    /// An `avif` (still) or `avis` (sequence) brand anywhere among the brands.
    fn sniff(&self, bytes: &[u8]) -> bool {
        super::heif::brands(bytes).any(|brand| brand == b"avif" || brand == b"avis")
    }

    fn open<'a>(&self, bytes: &'a [u8], _limits: &Limits) -> Result<Header<'a>, ProcessError> {
        let header = parse(bytes)?;
        Ok(Header::plain(
            header.width,
            header.height,
            header.has_alpha,
            header,
        ))
    }

    /// An image sequence (`avis` brand): its frames and plays from the container's sample
    /// tables, read by libavif without decoding a frame; a still: one frame.
    fn animation(&self, bytes: &[u8]) -> Option<AnimationHeader> {
        if !super::heif::brands(bytes).any(|brand| brand == b"avis") {
            return Some(AnimationHeader::of(1, 1));
        }
        crate::avif_anim::sequence_header(bytes).map(|(frames, plays, duration_ms)| {
            AnimationHeader::of(frames, plays).lasting(duration_ms)
        })
    }

    fn may_animate(&self) -> bool {
        true
    }

    fn as_output(&self) -> Option<OutputFormat> {
        Some(OutputFormat::Avif)
    }
}

impl Decoder for AvifHeader {
    /// Full size, with the container's transforms applied.
    fn decode(&self, at: &DecodeAt<'_>) -> Result<Decoded, ProcessError> {
        decode(at.bytes, self).map(Decoded::pixels)
    }

    fn upright_size(&self) -> Option<(u32, u32)> {
        Some(AvifHeader::upright_size(self))
    }
}

/// The clean aperture, resolved to whole pixels of the coded picture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanAperture {
    pub left: u32,
    pub top: u32,
    pub width: u32,
    pub height: u32,
}

/// What the container says of the primary image.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AvifHeader {
    /// Coded size (`ispe`, or a sequence track's size), before transforms.
    pub width: u32,
    pub height: u32,
    pub has_alpha: bool,
    /// Anticlockwise quarter turns (`irot`).
    pub rotation: u8,
    /// `imir` axis: 0 exchanges top and bottom, 1 left and right (checked against the
    /// Link-U `kimono.mirror-*` files, whose upright rendering is `kimono.jpg`).
    pub mirror: Option<u8>,
    /// Raw `clap` fields: width, height, horizontal and vertical offset, as fractions.
    clap: Option<[(i64, i64); 4]>,
    /// Where the primary item's `clap` box type, and the first byte of its `ipma` association
    /// (which holds the "essential" bit), sit in the file, so that a copy can hide the box from
    /// libavif (see [`decode`]).
    clap_type_at: Option<usize>,
    clap_association_at: Option<usize>,
}

fn undecodable(m: &str) -> ProcessError {
    ProcessError::Undecodable(format!("AVIF: {m}"))
}

fn u16be(b: &[u8], at: usize) -> Option<u32> {
    u16be_at(b, at).map(u32::from)
}

/// The same walk for another HEIF brand (HEIC's room): its refusals name `format`.
pub(crate) fn parse_container(b: &[u8], format: &str) -> Result<AvifHeader, ProcessError> {
    parse(b).map_err(|e| match e {
        ProcessError::Undecodable(m) => ProcessError::Undecodable(
            m.strip_prefix("AVIF: ")
                .map_or(m.clone(), |rest| format!("{format}: {rest}")),
        ),
        other => other,
    })
}

/// Parses the container. Fails only when there is no image size to be found at all.
pub fn parse(b: &[u8]) -> Result<AvifHeader, ProcessError> {
    let mut h = AvifHeader::default();
    if let Some(meta) = child(b, b"meta").and_then(|m| m.get(4..)) {
        parse_meta(meta, &mut h)?;
    }
    // Offsets of sub-slices within the file; pointer arithmetic on addresses only.
    let offset = |addr: Option<usize>| addr.and_then(|a| a.checked_sub(b.as_ptr() as usize));
    h.clap_type_at = offset(h.clap_type_at).filter(|at| b.get(*at..*at + 4) == Some(b"clap"));
    h.clap_association_at = offset(h.clap_association_at).filter(|at| *at < b.len());
    if h.width == 0 || h.height == 0 {
        // An image sequence without a still item: the first video track's size.
        let tkhd = child(b, b"moov")
            .and_then(|m| child(m, b"trak"))
            .and_then(|t| child(t, b"tkhd"));
        if let Some(t) = tkhd {
            let at = if t.first() == Some(&1) { 88 } else { 76 };
            h.width = u32be(t, at).unwrap_or(0) >> 16;
            h.height = u32be(t, at + 4).unwrap_or(0) >> 16;
        }
    }
    if h.width == 0 || h.height == 0 {
        return Err(undecodable("no image size in the container"));
    }
    Ok(h)
}

/// The primary item's properties, from `ipma`'s associations into `ipco`. Counts are
/// checked against the bytes of their box before any entry is read: a count the box cannot
/// hold is undecodable at once.
fn parse_meta(meta: &[u8], h: &mut AvifHeader) -> Result<(), ProcessError> {
    let short = |e: crate::bytes::Short| undecodable(&e.to_string());
    let primary = child(meta, b"pitm").and_then(|p| match p.first() {
        Some(0) => u16be(p, 4),
        _ => u32be(p, 4),
    });
    let Some(iprp) = child(meta, b"iprp") else {
        return Ok(());
    };
    let properties: Vec<([u8; 4], &[u8])> = child(iprp, b"ipco")
        .map(|ipco| children(ipco).collect())
        .unwrap_or_default();
    let Some(ipma) = child(iprp, b"ipma") else {
        return Ok(());
    };
    let mut r = crate::bytes::Reader::new(ipma);
    let version = r.u8("ipma version").map_err(short)?;
    let flags = r.take(3, "ipma flags").map_err(short)?[2];
    let declared = r.u32be("ipma entry count").map_err(short)?;
    // An entry: the item's id (2 bytes, 4 from version 1) and its association count.
    let id_bytes = if version < 1 { 2 } else { 4 };
    let count = r
        .count(u64::from(declared), id_bytes + 1, "ipma entries")
        .map_err(short)?;
    let association_bytes = if flags & 1 != 0 { 2 } else { 1 };
    for _ in 0..count {
        let item = if version < 1 {
            u32::from(r.u16be("ipma item").map_err(short)?)
        } else {
            r.u32be("ipma item").map_err(short)?
        };
        let declared = r.u8("ipma association count").map_err(short)?;
        let n = r
            .count(u64::from(declared), association_bytes, "ipma associations")
            .map_err(short)?;
        let mut indices = Vec::with_capacity(n);
        for _ in 0..n {
            // Where the association sits (its first byte holds the "essential" bit).
            let association_addr = Some(ipma.as_ptr() as usize + r.position());
            let index = if association_bytes == 2 {
                u32::from(r.u16be("ipma association").map_err(short)? & 0x7FFF)
            } else {
                u32::from(r.u8("ipma association").map_err(short)? & 0x7F)
            };
            indices.push((index as usize, association_addr));
        }
        let props = indices.iter().filter_map(|(i, association)| {
            let (kind, payload) = i.checked_sub(1).and_then(|i| properties.get(i))?;
            Some((kind, payload, association))
        });
        let is_primary = Some(item) == primary;
        for (kind, payload, association) in props {
            match (kind, is_primary) {
                (b"auxC", false) => {
                    let urn = payload.get(4..).unwrap_or_default();
                    if urn.windows(5).any(|w| w == b"alpha")
                        || urn.starts_with(b"urn:mpeg:hevc:2015:auxid:1")
                    {
                        h.has_alpha = true;
                    }
                }
                (b"ispe", true) => {
                    h.width = u32be(payload, 4).unwrap_or(0);
                    h.height = u32be(payload, 8).unwrap_or(0);
                }
                (b"irot", true) => h.rotation = payload.first().copied().unwrap_or(0) & 3,
                (b"imir", true) => h.mirror = Some(payload.first().copied().unwrap_or(0) & 1),
                (b"clap", true) if payload.len() >= 32 => {
                    // A plain 8-byte box header: the type is the 4 bytes before the payload.
                    h.clap_type_at = (payload.as_ptr() as usize).checked_sub(4);
                    h.clap_association_at = *association;
                    let field = |i: usize| i64::from(u32be(payload, i * 4).unwrap_or(0));
                    let signed = |i: usize| i64::from(u32be(payload, i * 4).unwrap_or(0) as i32);
                    h.clap = Some([
                        (field(0), field(1)),
                        (field(2), field(3)),
                        (signed(4), field(5)),
                        (signed(6), field(7)),
                    ]);
                }
                _ => {}
            }
        }
    }
    Ok(())
}

impl AvifHeader {
    /// The clean aperture within a `width`×`height` picture, if valid.
    pub fn clean_aperture(&self, width: u32, height: u32) -> Option<CleanAperture> {
        let [(wn, wd), (hn, hd), (xn, xd), (yn, yd)] = self.clap?;
        if wd <= 0 || hd <= 0 || xd <= 0 || yd <= 0 {
            return None;
        }
        let (cw, ch) = (wn as f64 / wd as f64, hn as f64 / hd as f64);
        // The aperture is centred on the picture's centre plus the offset.
        let left = (xn as f64 / xd as f64) + (f64::from(width) - cw) / 2.0;
        let top = (yn as f64 / yd as f64) + (f64::from(height) - ch) / 2.0;
        let (left, top, cw, ch) = (left.round(), top.round(), cw.round(), ch.round());
        let fits = left >= 0.0
            && top >= 0.0
            && cw >= 1.0
            && ch >= 1.0
            && left + cw <= f64::from(width)
            && top + ch <= f64::from(height);
        fits.then_some(CleanAperture {
            left: left as u32,
            top: top as u32,
            width: cw as u32,
            height: ch as u32,
        })
    }

    /// Whether the transforms swap width and height.
    pub fn swaps_axes(&self) -> bool {
        self.rotation % 2 == 1
    }

    /// The displayed size: aperture, then rotation.
    pub fn upright_size(&self) -> (u32, u32) {
        let (w, h) = self
            .clean_aperture(self.width, self.height)
            .map_or((self.width, self.height), |c| (c.width, c.height));
        if self.swaps_axes() {
            (h, w)
        } else {
            (w, h)
        }
    }

    /// Applies the transforms in MIAF order: clean aperture, rotation, mirror.
    pub fn apply(&self, image: RgbaImage) -> RgbaImage {
        let (w, h) = image.dimensions();
        let image = match self.clean_aperture(w, h) {
            Some(c) => imageops::crop_imm(&image, c.left, c.top, c.width, c.height).to_image(),
            None => image,
        };
        // `irot` turns anticlockwise.
        let image = match self.rotation {
            1 => imageops::rotate270(&image),
            2 => imageops::rotate180(&image),
            3 => imageops::rotate90(&image),
            _ => image,
        };
        match self.mirror {
            Some(0) => imageops::flip_vertical(&image),
            Some(_) => imageops::flip_horizontal(&image),
            None => image,
        }
    }
}

/// A copy of `b` that libavif's strict mode (which its safe binding cannot relax) accepts, for
/// the two refusals that concern nothing imgcas needs libavif for: a `clap` box it finds
/// invalid (imgcas applies the aperture itself, so the copy's `clap` is renamed to an unknown
/// property, no longer marked essential) and a missing `pixi` (added from `av1C`).
fn strict_mode_repair(b: &[u8], header: &AvifHeader) -> Option<Vec<u8>> {
    let mut copy = b.to_vec();
    let mut changed = false;
    if let Some(at) = header.clap_type_at {
        copy.splice(at..at + 4, *b"xlap");
        if let Some(association) = header.clap_association_at.and_then(|i| copy.get_mut(i)) {
            *association &= 0x7F;
        }
        changed = true;
    }
    if let Some(with_pixi) = super::avif_pixi::with_pixi(&copy) {
        copy = with_pixi;
        changed = true;
    }
    changed.then_some(copy)
}

/// Decodes the primary image (or a sequence's first frame) and applies its transforms.
pub fn decode(b: &[u8], header: &AvifHeader) -> Result<DynamicImage, ProcessError> {
    let repaired: Vec<u8>;
    let pixels = match libavif::decode_rgb(b) {
        Ok(pixels) => pixels,
        Err(first) => {
            repaired = strict_mode_repair(b, header)
                .ok_or_else(|| undecodable(&format!("libavif: {first:?}")))?;
            libavif::decode_rgb(&repaired).map_err(|e| undecodable(&format!("libavif: {e:?}")))?
        }
    };
    let (w, h) = (pixels.width(), pixels.height());
    let rgba = RgbaImage::from_raw(w, h, pixels.to_vec())
        .ok_or_else(|| undecodable("libavif returned fewer pixels than its size"))?;
    let upright = header.apply(rgba);
    Ok(if header.has_alpha {
        DynamicImage::ImageRgba8(upright)
    } else {
        DynamicImage::ImageRgb8(DynamicImage::ImageRgba8(upright).into_rgb8())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::heif::plain_box as full_box;

    #[test]
    fn primary_item_properties_are_found() {
        let ispe = full_box(b"ispe", &[0, 0, 0, 0, 0, 0, 0, 40, 0, 0, 0, 20]);
        let irot = full_box(b"irot", &[1]);
        let imir = full_box(b"imir", &[1]);
        let ipco = full_box(b"ipco", &[ispe, irot, imir].concat());
        // ipma v0: one entry, item 1, three associations (indices 1, 2, 3).
        let ipma = full_box(
            b"ipma",
            &[0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 3, 0x81, 0x82, 0x83],
        );
        let iprp = full_box(b"iprp", &[ipco, ipma].concat());
        let pitm = full_box(b"pitm", &[0, 0, 0, 0, 0, 1]);
        let mut meta_body = vec![0, 0, 0, 0];
        meta_body.extend(pitm);
        meta_body.extend(iprp);
        let file = [
            full_box(b"ftyp", b"avif\0\0\0\0avifmif1"),
            full_box(b"meta", &meta_body),
        ]
        .concat();
        let h = parse(&file).unwrap();
        assert_eq!(
            (h.width, h.height, h.rotation, h.mirror),
            (40, 20, 1, Some(1))
        );
        assert_eq!(h.upright_size(), (20, 40));
        assert!(parse(&full_box(b"ftyp", b"avif")).is_err());
    }

    /// A file whose `ipma` declares `count` entries, the first of which gives the primary
    /// item its `ispe`.
    fn with_ipma_count(count: u32) -> Vec<u8> {
        let ispe = full_box(b"ispe", &[0, 0, 0, 0, 0, 0, 0, 40, 0, 0, 0, 20]);
        let ipco = full_box(b"ipco", &ispe);
        let mut body = vec![0, 0, 0, 0];
        body.extend_from_slice(&count.to_be_bytes());
        body.extend_from_slice(&[0, 1, 1, 0x81]);
        let iprp = full_box(b"iprp", &[ipco, full_box(b"ipma", &body)].concat());
        let pitm = full_box(b"pitm", &[0, 0, 0, 0, 0, 1]);
        let meta_body = [vec![0, 0, 0, 0], pitm, iprp].concat();
        [
            full_box(b"ftyp", b"avif\0\0\0\0avifmif1"),
            full_box(b"meta", &meta_body),
        ]
        .concat()
    }

    #[test]
    fn a_count_its_box_cannot_hold_is_undecodable_at_once() {
        assert_eq!(parse(&with_ipma_count(1)).map(|h| h.width), Ok(40));
        // 2^32 - 1 entries in a file of less than 200 bytes: refused before any entry is
        // read (it read zeros past the box's end, 2^32 times, for seconds).
        let bomb = with_ipma_count(u32::MAX);
        assert!(bomb.len() < 200);
        // The file the service's tests send (testdata/crafted) is this one.
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/crafted/avif-ipma-count.avif"
        );
        assert_eq!(std::fs::read(path).ok().as_deref(), Some(&bomb[..]));
        let refused = parse(&bomb).unwrap_err();
        assert!(
            matches!(&refused, ProcessError::Undecodable(m) if m.contains("ipma entries")),
            "{refused:?}"
        );
        // One entry more than the box holds is refused the same way.
        assert!(parse(&with_ipma_count(2)).is_err());
    }

    #[test]
    fn clean_aperture_is_centred_plus_offset() {
        let h = AvifHeader {
            width: 100,
            height: 80,
            clap: Some([(50, 1), (40, 1), (-10, 1), (0, 1)]),
            ..AvifHeader::default()
        };
        assert_eq!(
            h.clean_aperture(100, 80),
            Some(CleanAperture {
                left: 15,
                top: 20,
                width: 50,
                height: 40
            })
        );
        assert_eq!(h.upright_size(), (50, 40));
    }
}
