//! JPEG encoding: [`encode`] and [`encode_rows`] choose the settings (libjpeg's own, with
//! libvips' chroma rule), and [`compress`] drives libjpeg-turbo's compressor directly (through
//! `mozjpeg-sys`), for the one setting the `mozjpeg` crate cannot reach: the scan script of a
//! progressive JPEG.
//!
//! libjpeg's standard progression (`jpeg_simple_progression`) sends every AC coefficient in
//! two passes, its high bits first and a refinement scan of the low bit after, so that a
//! browser shows a coarse picture sooner. Those refinement scans are most of the cost of a
//! progressive encode: measured on the 40 photos of `bench/peers.py` at q80 with optimized
//! Huffman tables (`cjpeg`, one run), the standard script took 969 ms and this one 667 ms, for
//! 1.5 % more bytes (baseline: 607 ms, 3.4 % more bytes). The coefficients, and so the
//! decoded pixels, are those of a baseline file at the same quality: scans only order them.
//!
//! Everything else is libjpeg-turbo's own defaults (the `mozjpeg` library's "fastest"
//! profile: no trellis quantization, no scan search), so a baseline file is byte for byte what
//! the `mozjpeg` crate writes.

use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use image::RgbImage;
use mozjpeg_sys as ffi;

use crate::error::ProcessError;

/// The progressive scans: the DC of all three components together, then each component's
/// AC band in one pass (spectral selection only: no successive approximation). Luma is split
/// at coefficient 5 so that its low frequencies arrive before the chroma's AC.
const PROGRESSIVE_SCANS: [(&[c_int], c_int, c_int); 5] = [
    (&[0, 1, 2], 0, 0),
    (&[0], 1, 5),
    (&[2], 1, 63),
    (&[1], 1, 63),
    (&[0], 6, 63),
];

/// What one encode asks of libjpeg.
pub(crate) struct Settings {
    pub quality: u8,
    pub progressive: bool,
    pub optimize_coding: bool,
    /// Chroma at full resolution (4:4:4) instead of 4:2:0.
    pub full_chroma: bool,
}

/// From this quality up, chroma keeps full resolution (small sharp colour edges survive).
const FULL_CHROMA_FROM_QUALITY: u8 = 90;

/// Largest side libjpeg writes.
pub const MAX_SIDE: u32 = 65_500;

/// Encodes RGB as JPEG with libjpeg-turbo's own settings (the `mozjpeg` library's "fastest"
/// profile: no trellis quantization), optimized Huffman tables, chroma at 4:2:0 below quality
/// 90 and full resolution from 90 up (as libvips does): the same coefficients per quality as
/// libvips writes, at libjpeg-turbo's SIMD speed. Progressive files order them in five scans
/// without refinement passes (see this module).
pub fn encode(rgb: &RgbImage, quality: u8, progressive: bool) -> Result<Vec<u8>, ProcessError> {
    encode_rows(rgb.as_raw(), rgb.width(), quality, progressive, true)
}

/// [`encode`] of packed RGB rows `width` pixels wide (a run of rows of a larger picture,
/// without copying them out), with the choice of optimised Huffman tables: a second pass over
/// the picture that saves about 1 % at high quality and takes 60 % of the time. Worth it for
/// what is sent to clients, not for what only imgcas reads (the mezzanine).
pub fn encode_rows(
    rows: &[u8],
    width: u32,
    quality: u8,
    progressive: bool,
    optimize_coding: bool,
) -> Result<Vec<u8>, ProcessError> {
    let height = rows.len() / (width as usize * 3).max(1);
    let settings = Settings {
        quality,
        progressive,
        optimize_coding,
        full_chroma: quality >= FULL_CHROMA_FROM_QUALITY,
    };
    compress(rows, width, height as u32, &settings)
        .map_err(|e| ProcessError::Internal(format!("JPEG encoding failed: {e}")))
}

/// The compressor and the memory its callbacks reach through `client_data`: boxed, so the
/// pointers libjpeg keeps into it stay valid, and destroyed on drop, also when an error
/// unwinds out of libjpeg.
struct Compressor {
    cinfo: ffi::jpeg_compress_struct,
    err: ffi::jpeg_error_mgr,
    dest: ffi::jpeg_destination_mgr,
    out: Vec<u8>,
    scans: Vec<ffi::jpeg_scan_info>,
}

impl Drop for Compressor {
    fn drop(&mut self) {
        // SAFETY: `cinfo` was created by jpeg_CreateCompress before the box was handed out,
        // and destroying is valid in any state, mid-compression included.
        unsafe { ffi::jpeg_destroy_compress(&mut self.cinfo) }
    }
}

/// Encodes `rows` (packed RGB, `width` × `height`) as JPEG. Errors inside libjpeg come back
/// as `Err` with libjpeg's message code; nothing of them escapes as a panic.
pub(crate) fn compress(
    rows: &[u8],
    width: u32,
    height: u32,
    settings: &Settings,
) -> Result<Vec<u8>, String> {
    let stride = width as usize * 3;
    if width == 0 || height == 0 || rows.len() < stride * height as usize {
        return Err(format!(
            "{width}x{height} RGB needs more than {} bytes",
            rows.len()
        ));
    }
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: every pointer libjpeg keeps (err, dest, client_data, scan_info) points into
        // the boxed compressor, which outlives every libjpeg call and is never moved; row
        // pointers point into `rows`, which holds `height` rows of `stride` bytes (checked).
        unsafe {
            let mut c: Box<Compressor> = Box::new(Compressor {
                cinfo: std::mem::zeroed(),
                err: std::mem::zeroed(),
                dest: std::mem::zeroed(),
                out: Vec::with_capacity((stride * height as usize / 8).max(4096)),
                scans: Vec::new(),
            });
            ffi::jpeg_std_error(&mut c.err);
            c.err.error_exit = Some(error_exit);
            c.err.emit_message = Some(silence);
            c.cinfo.common.err = &mut c.err;
            ffi::jpeg_CreateCompress(
                &mut c.cinfo,
                ffi::JPEG_LIB_VERSION,
                std::mem::size_of::<ffi::jpeg_compress_struct>(),
            );
            let me: *mut Compressor = &mut *c;
            c.cinfo.common.client_data = me.cast();
            c.dest.init_destination = Some(init_destination);
            c.dest.empty_output_buffer = Some(empty_output_buffer);
            c.dest.term_destination = Some(term_destination);
            c.cinfo.dest = &mut c.dest;

            c.cinfo.in_color_space = ffi::J_COLOR_SPACE::JCS_RGB;
            c.cinfo.input_components = 3;
            ffi::jpeg_c_set_int_param(
                &mut c.cinfo,
                ffi::J_INT_PARAM::JINT_COMPRESS_PROFILE,
                ffi::JINT_COMPRESS_PROFILE_VALUE::JCP_FASTEST as c_int,
            );
            ffi::jpeg_set_defaults(&mut c.cinfo);
            c.cinfo.image_width = width;
            c.cinfo.image_height = height;
            ffi::jpeg_set_quality(&mut c.cinfo, c_int::from(settings.quality), 0);
            c.cinfo.optimize_coding = ffi::boolean::from(settings.optimize_coding);
            if settings.full_chroma {
                let components = std::slice::from_raw_parts_mut(c.cinfo.comp_info, 3);
                for component in components {
                    component.h_samp_factor = 1;
                    component.v_samp_factor = 1;
                }
            }
            if settings.progressive {
                c.scans = PROGRESSIVE_SCANS
                    .iter()
                    .map(|&(components, ss, se)| {
                        let mut scan = ffi::jpeg_scan_info {
                            comps_in_scan: components.len() as c_int,
                            Ss: ss,
                            Se: se,
                            ..Default::default()
                        };
                        scan.component_index[..components.len()].copy_from_slice(components);
                        scan
                    })
                    .collect();
                c.cinfo.scan_info = c.scans.as_ptr();
                c.cinfo.num_scans = c.scans.len() as c_int;
            }
            ffi::jpeg_start_compress(&mut c.cinfo, 1);
            while c.cinfo.next_scanline < height {
                let at = c.cinfo.next_scanline as usize * stride;
                let row = rows[at..at + stride].as_ptr();
                if ffi::jpeg_write_scanlines(&mut c.cinfo, &row, 1) != 1 {
                    return Err("libjpeg took no scanline".to_string());
                }
            }
            ffi::jpeg_finish_compress(&mut c.cinfo);
            Ok(std::mem::take(&mut c.out))
        }
    }));
    match result {
        Ok(encoded) => encoded,
        Err(cause) => Err(cause
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| "libjpeg failed".into())),
    }
}

/// The compressor whose `cinfo` libjpeg passes to a callback.
///
/// # Safety
/// `cinfo` must be the `cinfo` of a live boxed [`Compressor`] (its `client_data`).
unsafe fn compressor<'a>(cinfo: &mut ffi::jpeg_compress_struct) -> &'a mut Compressor {
    &mut *cinfo.common.client_data.cast::<Compressor>()
}

unsafe extern "C-unwind" fn init_destination(cinfo: &mut ffi::jpeg_compress_struct) {
    let c = compressor(cinfo);
    let len = c.out.capacity().max(4096);
    c.out.resize(len, 0);
    c.dest.next_output_byte = c.out.as_mut_ptr();
    c.dest.free_in_buffer = len;
}

/// libjpeg filled the whole buffer: double it and hand out the new half.
unsafe extern "C-unwind" fn empty_output_buffer(
    cinfo: &mut ffi::jpeg_compress_struct,
) -> ffi::boolean {
    let c = compressor(cinfo);
    let used = c.out.len();
    c.out.resize(used * 2, 0);
    c.dest.next_output_byte = c.out.as_mut_ptr().add(used);
    c.dest.free_in_buffer = c.out.len() - used;
    1
}

unsafe extern "C-unwind" fn term_destination(cinfo: &mut ffi::jpeg_compress_struct) {
    let c = compressor(cinfo);
    let used = c.out.len() - c.dest.free_in_buffer;
    c.out.truncate(used);
}

/// libjpeg's fatal errors unwind to the `catch_unwind` of [`encode`] (libjpeg cannot return
/// from them), without the panic hook: they are answers, not crashes.
unsafe extern "C-unwind" fn error_exit(cinfo: &mut ffi::jpeg_common_struct) {
    let code = (*cinfo.err).msg_code;
    std::panic::resume_unwind(Box::new(format!("libjpeg error {code}")));
}

unsafe extern "C-unwind" fn silence(_cinfo: &mut ffi::jpeg_common_struct, _level: c_int) {}

#[cfg(test)]
mod tests {
    use super::*;

    fn photo() -> image::RgbImage {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/exif-orientation/Landscape_1.jpg");
        image::open(path).unwrap().into_rgb8()
    }

    /// The `mozjpeg` crate's encode with the same settings (the path this module replaced).
    fn crate_encode(rgb: &image::RgbImage, s: &Settings) -> Vec<u8> {
        let mut c = mozjpeg::Compress::new(mozjpeg::ColorSpace::JCS_RGB);
        c.set_fastest_defaults();
        c.set_size(rgb.width() as usize, rgb.height() as usize);
        c.set_quality(f32::from(s.quality));
        c.set_optimize_coding(s.optimize_coding);
        if s.full_chroma {
            c.set_chroma_sampling_pixel_sizes((1, 1), (1, 1));
        }
        if s.progressive {
            c.set_progressive_mode();
        }
        let mut started = c.start_compress(Vec::new()).unwrap();
        started.write_scanlines(rgb.as_raw()).unwrap();
        started.finish().unwrap()
    }

    #[test]
    fn baseline_is_byte_for_byte_the_crates_and_progressive_decodes_to_its_pixels() {
        let rgb = photo();
        for full_chroma in [false, true] {
            for optimize_coding in [false, true] {
                let baseline = Settings {
                    quality: 80,
                    progressive: false,
                    optimize_coding,
                    full_chroma,
                };
                let ours = compress(rgb.as_raw(), rgb.width(), rgb.height(), &baseline).unwrap();
                assert_eq!(ours, crate_encode(&rgb, &baseline));
                let progressive = Settings {
                    progressive: true,
                    ..baseline
                };
                let p = compress(rgb.as_raw(), rgb.width(), rgb.height(), &progressive).unwrap();
                // Markers, counted in the bytes (entropy-coded data stuffs every 0xFF it
                // holds, so 0xFF 0xC2 and 0xFF 0xDA appear only as markers).
                let markers = |m: u8| p.windows(2).filter(|w| *w == [0xFF, m]).count();
                assert_eq!((markers(0xC2), markers(0xDA)), (1, 5));
                let pixels = |b: &[u8]| image::load_from_memory(b).unwrap().into_rgb8();
                assert_eq!(pixels(&p), pixels(&ours));
            }
        }
    }

    #[test]
    fn short_input_and_libjpeg_errors_are_errors() {
        let rgb = photo();
        let s = Settings {
            quality: 80,
            progressive: true,
            optimize_coding: true,
            full_chroma: false,
        };
        assert!(compress(&rgb.as_raw()[..10], rgb.width(), rgb.height(), &s).is_err());
        // Wider than JPEG allows: libjpeg's own error, caught.
        let wide = vec![0u8; 70_000 * 3];
        assert!(compress(&wide, 70_000, 1, &s)
            .unwrap_err()
            .contains("libjpeg"));
    }
}
