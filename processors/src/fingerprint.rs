//! Perceptual fingerprints: what a picture looks like, in a few bytes that survive what
//! merchants' tools do to it (resizing, re-encoding, format changes, EXIF orientation applied
//! or not, metadata stripped, a slight crop, a brightness nudge, a small overlay).
//!
//! A fingerprint is computed from the smallest decode that suffices (JPEG's DCT scaling down
//! to at least [`SMALL_DECODE_SIDE`](crate::decode::SMALL_DECODE_SIDE) pixels), upright and in sRGB, reduced to a 32 × 32 grid of
//! area means. Three parts, each cheap to compare:
//! - `phash`: 64 bits from the grid's lowest DCT frequencies, each above or below their
//!   median. This is the hash the near-neighbour index searches by Hamming distance; being
//!   relative to a median, it does not move when brightness is scaled.
//! - `block_hash`: 64 bits, one per 4 × 4 block of the grid, brighter or darker than the
//!   blocks' median. A second opinion in the spatial domain, for the guards.
//! - `colour`: the mean chroma (Cb, Cr) of each quadrant, a byte each: two photos of one
//!   layout in other colours share a DCT hash far more often than their chroma.
//!
//! Together with the upright size, these are the guards of [`Fingerprint::matches`] against
//! merging pictures that only share a composition.

use image::DynamicImage;

use crate::decode::{self, Limits};
use crate::error::ProcessError;
use crate::Decodes;

/// Bumped whenever the computation changes, so that stored fingerprints are recomputed.
pub const FINGERPRINT_VERSION: u32 = 1;

const GRID: usize = 32;

/// A picture's perceptual fingerprint, and its upright size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint {
    pub phash: u64,
    pub block_hash: u64,
    pub colour: u64,
    pub width: u32,
    pub height: u32,
}

/// How strict a comparison is: reporting a likely copy, or merging one into another.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Guards {
    /// Largest `phash` Hamming distance.
    pub radius: u32,
    /// Largest `block_hash` Hamming distance.
    pub block_radius: u32,
    /// Largest difference of one quadrant's mean chroma (of 255).
    pub colour_delta: u8,
    /// Largest difference of the aspect ratios' logarithms (0.05 ≈ 5 %).
    pub aspect_delta: f64,
}

impl Guards {
    /// The guards for reporting at `radius`.
    pub fn report(radius: u32) -> Guards {
        Guards {
            radius,
            block_radius: 16,
            colour_delta: 12,
            aspect_delta: 0.07,
        }
    }

    /// The guards for merging (canonical mode) at `radius`: tighter on every part.
    pub fn canonical(radius: u32) -> Guards {
        Guards {
            radius,
            block_radius: 10,
            colour_delta: 8,
            aspect_delta: 0.05,
        }
    }
}

impl Fingerprint {
    /// Hamming distance of the DCT hashes: what the index searches by.
    pub fn distance(&self, other: &Fingerprint) -> u32 {
        (self.phash ^ other.phash).count_ones()
    }

    /// Whether `other` is the same picture under these guards.
    pub fn matches(&self, other: &Fingerprint, guards: &Guards) -> bool {
        self.distance(other) <= guards.radius
            && (self.block_hash ^ other.block_hash).count_ones() <= guards.block_radius
            && self.colour_delta(other) <= guards.colour_delta
            && (self.aspect().ln() - other.aspect().ln()).abs() <= guards.aspect_delta
    }

    fn aspect(&self) -> f64 {
        f64::from(self.width.max(1)) / f64::from(self.height.max(1))
    }

    fn colour_delta(&self, other: &Fingerprint) -> u8 {
        self.colour
            .to_be_bytes()
            .iter()
            .zip(other.colour.to_be_bytes())
            .map(|(a, b)| a.abs_diff(b))
            .max()
            .unwrap_or(0)
    }

    /// The 32-byte form the maps store: `phash ‖ block_hash ‖ colour ‖ width ‖ height`,
    /// big-endian.
    pub fn to_bytes(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        out[..8].copy_from_slice(&self.phash.to_be_bytes());
        out[8..16].copy_from_slice(&self.block_hash.to_be_bytes());
        out[16..24].copy_from_slice(&self.colour.to_be_bytes());
        out[24..28].copy_from_slice(&self.width.to_be_bytes());
        out[28..].copy_from_slice(&self.height.to_be_bytes());
        out
    }

    /// The inverse of [`Fingerprint::to_bytes`].
    pub fn from_bytes(raw: &[u8]) -> Option<Fingerprint> {
        let u64_at = |i: usize| -> Option<u64> {
            Some(u64::from_be_bytes(raw.get(i..i + 8)?.try_into().ok()?))
        };
        let u32_at = |i: usize| -> Option<u32> {
            Some(u32::from_be_bytes(raw.get(i..i + 4)?.try_into().ok()?))
        };
        if raw.len() != 32 {
            return None;
        }
        Some(Fingerprint {
            phash: u64_at(0)?,
            block_hash: u64_at(8)?,
            colour: u64_at(16)?,
            width: u32_at(24)?,
            height: u32_at(28)?,
        })
    }

    /// The DCT hash as text (16 hex digits), as the API shows it.
    pub fn hex(&self) -> String {
        format!("{:016x}", self.phash)
    }
}

/// The fingerprint of encoded bytes: opened and checked against `limits` like any source,
/// decoded as small as suffices ([`decode::decode_small`], through `decodes`).
pub fn fingerprint(
    bytes: &[u8],
    limits: &Limits,
    decodes: &dyn Decodes,
) -> Result<Fingerprint, ProcessError> {
    let (image, size) = decode::decode_small(bytes, limits, decodes)?;
    Ok(of_image(&image, size))
}

/// The fingerprint of decoded, upright pixels; `size` is the picture's full upright size
/// (the pixels may be a reduced decode of it).
pub fn of_image(image: &DynamicImage, size: (u32, u32)) -> Fingerprint {
    let grid = Grid::of(image);
    Fingerprint {
        phash: dct_hash(&grid.luma),
        block_hash: block_hash(&grid.luma),
        colour: grid.colour_signature(),
        width: size.0,
        height: size.1,
    }
}

/// The picture as 32 × 32 area means of luma and chroma (BT.601), alpha flattened on white.
struct Grid {
    luma: [f32; GRID * GRID],
    cb: [f32; GRID * GRID],
    cr: [f32; GRID * GRID],
}

impl Grid {
    fn of(image: &DynamicImage) -> Grid {
        // Opaque RGB is read as it is (below); anything else as RGBA.
        let rgba = match image {
            DynamicImage::ImageRgb8(_) => None,
            DynamicImage::ImageRgba8(i) => Some(std::borrow::Cow::Borrowed(i)),
            other => Some(std::borrow::Cow::Owned(other.to_rgba8())),
        };
        let (w, h) = (
            image.width().max(1) as usize,
            image.height().max(1) as usize,
        );
        let mut sums = vec![[0f64; 3]; GRID * GRID];
        let mut counts = vec![0u32; GRID * GRID];
        let cols: Vec<usize> = (0..w).map(|x| x * GRID / w).collect();
        if let (DynamicImage::ImageRgb8(rgb), None) = (image, &rgba) {
            // Opaque: flattening keeps every value as it is, and sums of whole numbers are
            // exact in u64 as in f64, so this is the general path's result without a copy
            // of the picture into RGBA or a float operation per pixel.
            let mut whole = vec![[0u64; 3]; GRID * GRID];
            for (y, row) in rgb.as_raw().chunks_exact(w * 3).enumerate() {
                let by = y * GRID / h;
                for (x, p) in row.chunks_exact(3).enumerate() {
                    let cell = by * GRID + cols[x];
                    let s = &mut whole[cell];
                    s[0] += u64::from(p[0]);
                    s[1] += u64::from(p[1]);
                    s[2] += u64::from(p[2]);
                    counts[cell] += 1;
                }
            }
            for (sum, exact) in sums.iter_mut().zip(&whole) {
                *sum = exact.map(|v| v as f64);
            }
        } else if let Some(rgba) = &rgba {
            for (y, row) in rgba.rows().enumerate() {
                let by = y * GRID / h;
                for (x, p) in row.enumerate() {
                    let cell = by * GRID + cols[x];
                    let [r, g, b] = flatten(p.0);
                    let s = &mut sums[cell];
                    s[0] += f64::from(r);
                    s[1] += f64::from(g);
                    s[2] += f64::from(b);
                    counts[cell] += 1;
                }
            }
        }
        let mut grid = Grid {
            luma: [0.0; GRID * GRID],
            cb: [0.0; GRID * GRID],
            cr: [0.0; GRID * GRID],
        };
        for cell in 0..GRID * GRID {
            let [r, g, b] = if counts[cell] > 0 {
                let n = f64::from(counts[cell]);
                sums[cell].map(|s| s / n)
            } else {
                // Pictures under 32 pixels a side: the nearest pixel stands for the cell.
                let (x, y) = ((cell % GRID) * w / GRID, (cell / GRID) * h / GRID);
                // Opaque RGB reads as RGBA with alpha 255.
                let p = match &rgba {
                    Some(rgba) => rgba.get_pixel(x as u32, y as u32).0,
                    None => image::GenericImageView::get_pixel(image, x as u32, y as u32).0,
                };
                flatten(p).map(f64::from)
            };
            grid.luma[cell] = (0.299 * r + 0.587 * g + 0.114 * b) as f32;
            grid.cb[cell] = (128.0 - 0.168_736 * r - 0.331_264 * g + 0.5 * b) as f32;
            grid.cr[cell] = (128.0 + 0.5 * r - 0.418_688 * g - 0.081_312 * b) as f32;
        }
        grid
    }

    /// Mean Cb and Cr of each quadrant, a byte each.
    fn colour_signature(&self) -> u64 {
        let mut out = 0u64;
        for quadrant in 0..4 {
            let (qx, qy) = (quadrant % 2, quadrant / 2);
            let (mut cb, mut cr) = (0f32, 0f32);
            for y in qy * GRID / 2..(qy + 1) * GRID / 2 {
                for x in qx * GRID / 2..(qx + 1) * GRID / 2 {
                    cb += self.cb[y * GRID + x];
                    cr += self.cr[y * GRID + x];
                }
            }
            let n = (GRID * GRID / 4) as f32;
            for v in [cb / n, cr / n] {
                out = (out << 8) | u64::from(v.round().clamp(0.0, 255.0) as u8);
            }
        }
        out
    }
}

fn flatten([r, g, b, a]: [u8; 4]) -> [f32; 3] {
    let a = f32::from(a) / 255.0;
    [r, g, b].map(|c| f32::from(c) * a + 255.0 * (1.0 - a))
}

/// 64 bits from the lowest frequencies of the grid's 2-D DCT-II: rows and columns 0–7 but
/// the DC term (the mean, which brightness moves), and (0, 8) to make 64.
fn dct_hash(luma: &[f32; GRID * GRID]) -> u64 {
    let basis = dct_basis();
    // Rows first: only the 9 lowest frequencies of each row are ever needed.
    let mut rows = [[0f32; 9]; GRID];
    for (y, row) in rows.iter_mut().enumerate() {
        for (u, out) in row.iter_mut().enumerate() {
            *out = (0..GRID).map(|x| luma[y * GRID + x] * basis[u][x]).sum();
        }
    }
    let mut coefficients = Vec::with_capacity(64);
    for (v, column_basis) in basis.iter().enumerate().take(8) {
        for u in 0..9 {
            if (u, v) == (0, 0) || (u == 8 && v != 0) {
                continue;
            }
            let sum = rows.iter().zip(column_basis).map(|(row, b)| row[u] * b);
            coefficients.push(sum.sum::<f32>());
        }
    }
    bits_above_median(&coefficients)
}

/// cos((2x + 1) u π / 64) for the 9 lowest frequencies `u`.
fn dct_basis() -> [[f32; GRID]; 9] {
    let mut basis = [[0f32; GRID]; 9];
    for (u, row) in basis.iter_mut().enumerate() {
        for (x, value) in row.iter_mut().enumerate() {
            *value = ((2 * x + 1) as f64 * u as f64 * std::f64::consts::PI / (2 * GRID) as f64)
                .cos() as f32;
        }
    }
    basis
}

/// One bit per 4 × 4 block of the grid: its mean luma above the blocks' median.
fn block_hash(luma: &[f32; GRID * GRID]) -> u64 {
    let mut means = Vec::with_capacity(64);
    for by in 0..8 {
        for bx in 0..8 {
            let mut sum = 0f32;
            for y in by * 4..by * 4 + 4 {
                for x in bx * 4..bx * 4 + 4 {
                    sum += luma[y * GRID + x];
                }
            }
            means.push(sum);
        }
    }
    bits_above_median(&means)
}

fn bits_above_median(values: &[f32]) -> u64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f32::total_cmp);
    let median = (sorted[sorted.len() / 2 - 1] + sorted[sorted.len() / 2]) / 2.0;
    values
        .iter()
        .fold(0u64, |acc, v| (acc << 1) | u64::from(*v > median))
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{Rgb, RgbImage};

    fn picture(seed: u32) -> DynamicImage {
        DynamicImage::ImageRgb8(RgbImage::from_fn(320, 240, |x, y| {
            let v = (x * (3 + seed) + y * (5 + 2 * seed)) % 256;
            let w = ((x as f32 / 30.0 + seed as f32).sin() * 120.0 + 128.0) as u32;
            Rgb([v as u8, w as u8, ((x ^ y) % 256) as u8])
        }))
    }

    #[test]
    fn opaque_rgb_is_read_as_its_rgba_would_be() {
        // The opaque path sums whole numbers; the general one flattens in floats: equal.
        for (w, h) in [(320, 240), (1000, 3), (7, 9)] {
            let rgb = DynamicImage::ImageRgb8(RgbImage::from_fn(w, h, |x, y| {
                Rgb([
                    (x * 7 % 256) as u8,
                    (y * 13 % 256) as u8,
                    ((x + y) % 256) as u8,
                ])
            }));
            let rgba = DynamicImage::ImageRgba8(rgb.to_rgba8());
            assert_eq!(of_image(&rgb, (w, h)), of_image(&rgba, (w, h)), "{w}x{h}");
        }
    }

    #[test]
    fn survives_resizing_and_scaled_brightness() {
        let a = picture(1);
        let fa = of_image(&a, (320, 240));
        let small = a.resize_exact(160, 120, image::imageops::FilterType::Triangle);
        assert!(fa.matches(&of_image(&small, (160, 120)), &Guards::canonical(4)));
        let mut brighter = a.to_rgb8();
        for p in brighter.pixels_mut() {
            p.0 = p.0.map(|c| (f32::from(c) * 0.95) as u8);
        }
        let fb = of_image(&DynamicImage::ImageRgb8(brighter), (320, 240));
        assert!(fa.distance(&fb) <= 4, "{}", fa.distance(&fb));
    }

    #[test]
    fn tells_other_pictures_apart_and_round_trips() {
        // The same pattern upside down: the same colours and histogram, another picture.
        let (a, b) = (
            of_image(&picture(1), (320, 240)),
            of_image(&picture(1).rotate180(), (320, 240)),
        );
        assert!(!a.matches(&b, &Guards::report(8)));
        assert_eq!(Fingerprint::from_bytes(&a.to_bytes()), Some(a));
        assert_eq!(Fingerprint::from_bytes(&[0; 31]), None);
        assert_eq!(a.hex().len(), 16);
    }
}
