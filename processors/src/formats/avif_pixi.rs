//! A repair for AVIF files without a `pixi` (pixel information) property: libavif's strict
//! mode, which its safe binding cannot relax, refuses them although the bit depth is also in
//! `av1C`. [`with_pixi`] writes a copy with a `pixi` box built from `av1C` and associated with
//! the primary item: the box is appended to `ipco`, the association to the item's `ipma`
//! entry, every enclosing box grows, and `iloc` file offsets past the insertion move with it.
//!
//! Only plain layouts are handled (32-bit box sizes, a 1-byte association count); anything else
//! gives `None` and the original error stands.

use super::heif::{BoxAt, Boxes};
use crate::bytes::{u16be_at, u32be_at, u64be_at};

fn u16_at(b: &[u8], at: usize) -> Option<u64> {
    u16be_at(b, at).map(u64::from)
}

fn u32_at(b: &[u8], at: usize) -> Option<u64> {
    u32be_at(b, at).map(u64::from)
}

fn uint_at(b: &[u8], at: usize, size: usize) -> Option<u64> {
    match size {
        0 => Some(0),
        4 => u32_at(b, at),
        8 => u64be_at(b, at),
        _ => None,
    }
}

fn put_uint(b: &mut [u8], at: usize, size: usize, value: u64) -> Option<()> {
    match size {
        4 => b
            .get_mut(at..at + 4)?
            .copy_from_slice(&u32::try_from(value).ok()?.to_be_bytes()),
        8 => b.get_mut(at..at + 8)?.copy_from_slice(&value.to_be_bytes()),
        _ => return None,
    }
    Some(())
}

/// The child boxes in `b[from..to]`, when every one of them has a plain 32-bit size (the
/// layout whose sizes this repair rewrites).
fn children(b: &[u8], from: usize, to: usize) -> Option<Vec<BoxAt>> {
    Boxes::within(b, from, to)
        .map(|found| found.ok().filter(|x| x.plain))
        .collect()
}

fn find(boxes: &[BoxAt], kind: &[u8; 4]) -> Option<BoxAt> {
    boxes.iter().find(|x| &x.kind == kind).copied()
}

fn grow(b: &mut [u8], x: BoxAt, by: usize) -> Option<()> {
    put_uint(b, x.start, 4, u64::try_from(x.end - x.start + by).ok()?)
}

/// A copy of `b` with a `pixi` property for the primary item, or `None` when the file already
/// has one, or its layout is not one this repair handles.
pub fn with_pixi(b: &[u8]) -> Option<Vec<u8>> {
    let top = children(b, 0, b.len())?;
    let meta = find(&top, b"meta")?;
    let in_meta = children(b, meta.body + 4, meta.end)?;
    let pitm = find(&in_meta, b"pitm")?;
    let primary = match b.get(pitm.body)? {
        0 => u16_at(b, pitm.body + 4)?,
        _ => u32_at(b, pitm.body + 4)?,
    };
    let iprp = find(&in_meta, b"iprp")?;
    let in_iprp = children(b, iprp.body, iprp.end)?;
    let ipco = find(&in_iprp, b"ipco")?;
    let ipma = find(&in_iprp, b"ipma")?;
    let properties = children(b, ipco.body, ipco.end)?;
    if find(&properties, b"pixi").is_some() {
        return None;
    }

    // The primary item's ipma entry: where its count byte and its last association end.
    let (version, flags) = (*b.get(ipma.body)?, *b.get(ipma.body + 3)?);
    let wide_ids = version >= 1;
    let wide_index = flags & 1 != 0;
    let entries = u32_at(b, ipma.body + 4)?;
    let mut at = ipma.body + 8;
    let mut target = None;
    for _ in 0..entries {
        let item = if wide_ids {
            u32_at(b, at)?
        } else {
            u16_at(b, at)?
        };
        at += if wide_ids { 4 } else { 2 };
        let count_at = at;
        let count = usize::from(*b.get(at)?);
        at += 1;
        let associations: Vec<usize> = (0..count)
            .map(|i| at + i * if wide_index { 2 } else { 1 })
            .collect();
        at += count * if wide_index { 2 } else { 1 };
        if item == primary {
            target = Some((count_at, count, associations, at));
        }
    }
    let (count_at, count, associations, insert_association_at) = target?;
    if count >= 255 {
        return None;
    }
    // Its av1C gives the depth and the plane count.
    let av1c = associations.iter().find_map(|&a| {
        let index = if wide_index {
            u16_at(b, a)? & 0x7FFF
        } else {
            u64::from(*b.get(a)? & 0x7F)
        };
        let p = properties.get(usize::try_from(index).ok()?.checked_sub(1)?)?;
        (&p.kind == b"av1C").then_some(*p)
    })?;
    let flags_byte = *b.get(av1c.body + 2)?;
    let depth = match (flags_byte & 0x40 != 0, flags_byte & 0x20 != 0) {
        (true, true) => 12,
        (true, false) => 10,
        _ => 8,
    };
    let planes: u8 = if flags_byte & 0x10 != 0 { 1 } else { 3 };
    let new_index = properties.len() + 1;
    if new_index > if wide_index { 0x7FFF } else { 0x7F } {
        return None;
    }
    let mut pixi = Vec::new();
    pixi.extend_from_slice(&(13 + u32::from(planes)).to_be_bytes());
    pixi.extend_from_slice(b"pixi");
    pixi.extend_from_slice(&[0, 0, 0, 0, planes]);
    pixi.extend(std::iter::repeat_n(depth, usize::from(planes)));
    // Not essential: decoders may ignore it, as the MIAF rules allow.
    let association: Vec<u8> = if wide_index {
        u16::try_from(new_index).ok()?.to_be_bytes().to_vec()
    } else {
        vec![u8::try_from(new_index).ok()?]
    };
    let added = pixi.len() + association.len();

    let mut out = b.to_vec();
    // In-place edits first (positions are the original ones), insertions last, back to front.
    shift_iloc_offsets(
        &mut out,
        &in_meta,
        ipco.end.min(insert_association_at),
        added,
    )?;
    *out.get_mut(count_at)? += 1;
    grow(&mut out, ipco, pixi.len())?;
    grow(&mut out, ipma, association.len())?;
    grow(&mut out, iprp, added)?;
    grow(&mut out, meta, added)?;
    let mut inserts = [(ipco.end, pixi), (insert_association_at, association)];
    inserts.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
    for (at, bytes) in inserts {
        out.splice(at..at, bytes);
    }
    Some(out)
}

/// Moves every `iloc` file offset (construction method 0) at or past `from` by `by` bytes.
fn shift_iloc_offsets(b: &mut [u8], in_meta: &[BoxAt], from: usize, by: usize) -> Option<()> {
    let Some(iloc) = find(in_meta, b"iloc") else {
        return Some(());
    };
    let version = *b.get(iloc.body)?;
    let sizes = *b.get(iloc.body + 4)?;
    let more = *b.get(iloc.body + 5)?;
    let (offset_size, length_size) = (usize::from(sizes >> 4), usize::from(sizes & 15));
    let base_size = usize::from(more >> 4);
    let index_size = if version >= 1 {
        usize::from(more & 15)
    } else {
        0
    };
    let mut at = iloc.body + 6;
    let items = if version < 2 {
        let n = u16_at(b, at)?;
        at += 2;
        n
    } else {
        let n = u32_at(b, at)?;
        at += 4;
        n
    };
    let (from, by) = (u64::try_from(from).ok()?, u64::try_from(by).ok()?);
    for _ in 0..items {
        at += if version < 2 { 2 } else { 4 };
        let method = if version >= 1 {
            let m = u16_at(b, at)? & 15;
            at += 2;
            m
        } else {
            0
        };
        let data_reference = u16_at(b, at)?;
        at += 2;
        let base_at = at;
        let base = uint_at(b, at, base_size)?;
        at += base_size;
        let extents = u16_at(b, at)?;
        at += 2;
        let in_file = method == 0 && data_reference == 0;
        if in_file && base_size > 0 && base >= from {
            put_uint(b, base_at, base_size, base + by)?;
        }
        for _ in 0..extents {
            at += index_size;
            let offset = uint_at(b, at, offset_size)?;
            if in_file && (base_size == 0 || base < from) && base + offset >= from {
                put_uint(b, at, offset_size, offset + by)?;
            }
            at += offset_size + length_size;
        }
    }
    if at > iloc.end {
        return None;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_that_have_pixi_or_no_meta_are_left_alone() {
        assert_eq!(with_pixi(b""), None);
        assert_eq!(with_pixi(&[0, 0, 0, 8, b'f', b't', b'y', b'p']), None);
    }
}
