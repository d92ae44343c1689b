//! Animated AVIF (an AV1 image sequence) encoded through libavif directly (`libavif-sys`), one
//! frame at a time, as `webp_anim.rs` does for WebP: a frame is converted to YUV, handed to the
//! encoder (libaom keeps what it needs for its look-ahead, a bounded number of frames) and
//! freed before the next is made. The `libavif` crate's encoder wrapper cannot set the loop
//! count, which an animation keeps, hence the direct calls.
//!
//! The settings follow the still AVIF's (`encode.rs`): full chroma (4:4:4), libaom at the same
//! speed, one thread (a run owns one slot of the bounded pool), the quality for colour and 20
//! more for alpha. Durations are in milliseconds (a timescale of 1000).

use libavif_sys as ffi;

/// An animation being encoded: frames go in one by one ([`AvifAnimWriter::add`]), the file
/// comes out at the end ([`AvifAnimWriter::finish`]).
pub(crate) struct AvifAnimWriter {
    encoder: *mut ffi::avifEncoder,
    width: u32,
    height: u32,
    /// Whether frames keep an alpha plane (decided once: every frame of a sequence has the
    /// same planes).
    alpha: bool,
}

/// libavif's message for a result.
fn result(code: ffi::avifResult) -> Result<(), String> {
    if code == ffi::AVIF_RESULT_OK {
        return Ok(());
    }
    // SAFETY: libavif returns a static, NUL-terminated string for every result code.
    let text = unsafe { std::ffi::CStr::from_ptr(ffi::avifResultToString(code)) };
    Err(text.to_string_lossy().into_owned())
}

impl AvifAnimWriter {
    /// An encoder of `width` × `height` frames at `quality` (0–100), with an alpha plane when
    /// `alpha`, playing `plays` times (0: for ever), at libaom's `speed`.
    pub(crate) fn new(
        width: u32,
        height: u32,
        quality: u8,
        speed: u8,
        alpha: bool,
        plays: u32,
    ) -> Result<AvifAnimWriter, String> {
        // SAFETY: the encoder libavif returns (or null) is owned by this value and destroyed
        // by its drop; its fields are plain settings, set before the first frame.
        let encoder = unsafe { ffi::avifEncoderCreate() };
        if encoder.is_null() {
            return Err("libavif could not make an encoder".into());
        }
        let writer = AvifAnimWriter {
            encoder,
            width,
            height,
            alpha,
        };
        unsafe {
            let e = &mut *encoder;
            e.maxThreads = 1;
            e.speed = i32::from(speed);
            e.quality = i32::from(quality.min(100));
            e.qualityAlpha = i32::from(quality.saturating_add(20).min(100));
            e.timescale = 1000;
            // libavif counts repetitions after the first play.
            e.repetitionCount = match plays {
                0 => ffi::AVIF_REPETITION_COUNT_INFINITE,
                n => i32::try_from(n - 1).unwrap_or(ffi::AVIF_REPETITION_COUNT_INFINITE),
            };
        }
        Ok(writer)
    }

    /// Adds the next frame: `rgba` of the writer's size, shown for `delay_ms` (at least 1).
    pub(crate) fn add(&mut self, rgba: &[u8], delay_ms: u32) -> Result<(), String> {
        let expected = self.width as usize * self.height as usize * 4;
        if rgba.len() != expected {
            return Err(format!("a frame of {} bytes, not {expected}", rgba.len()));
        }
        // SAFETY: the image is created, filled from `rgba` (read only, for the length checked
        // above: rows of width × 4 bytes) and destroyed here whatever happens in between;
        // libavif copies what it encodes before `avifEncoderAddImage` returns.
        unsafe {
            let image =
                ffi::avifImageCreate(self.width, self.height, 8, ffi::AVIF_PIXEL_FORMAT_YUV444);
            if image.is_null() {
                return Err("libavif could not make a frame".into());
            }
            let planes = if self.alpha {
                ffi::AVIF_PLANES_ALL
            } else {
                ffi::AVIF_PLANES_YUV
            };
            let made = result(ffi::avifImageAllocatePlanes(image, planes as _)).and_then(|()| {
                let mut rgb = ffi::avifRGBImage::default();
                ffi::avifRGBImageSetDefaults(&mut rgb, image);
                rgb.format = ffi::AVIF_RGB_FORMAT_RGBA;
                rgb.depth = 8;
                rgb.ignoreAlpha = ffi::avifBool::from(!self.alpha);
                rgb.pixels = rgba.as_ptr().cast_mut();
                rgb.rowBytes = self.width * 4;
                result(ffi::avifImageRGBToYUV(image, &rgb))?;
                result(ffi::avifEncoderAddImage(
                    self.encoder,
                    image,
                    u64::from(delay_ms.max(1)),
                    ffi::AVIF_ADD_IMAGE_FLAG_NONE as _,
                ))
            });
            ffi::avifImageDestroy(image);
            made
        }
    }

    /// The encoded file.
    pub(crate) fn finish(self) -> Result<Vec<u8>, String> {
        let mut out = ffi::avifRWData::default();
        // SAFETY: libavif fills `out` with a buffer of `size` bytes it allocated, copied here
        // and freed by `avifRWDataFree`; the encoder is destroyed by this value's drop.
        unsafe {
            result(ffi::avifEncoderFinish(self.encoder, &mut out))?;
            let bytes = if out.data.is_null() {
                Vec::new()
            } else {
                std::slice::from_raw_parts(out.data, out.size).to_vec()
            };
            ffi::avifRWDataFree(&mut out);
            Ok(bytes)
        }
    }
}

impl Drop for AvifAnimWriter {
    fn drop(&mut self) {
        // SAFETY: the encoder was made by `avifEncoderCreate` and is destroyed only here.
        unsafe { ffi::avifEncoderDestroy(self.encoder) }
    }
}
