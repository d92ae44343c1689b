//! Animated AVIF (an AV1 image sequence) through libavif directly (`libavif-sys`), one frame at
//! a time both ways. Out, as `webp_anim.rs` does for WebP: a frame is converted to YUV, handed
//! to the encoder (libaom keeps what it needs for its look-ahead, a bounded number of frames)
//! and freed before the next is made; the `libavif` crate's encoder wrapper cannot set the loop
//! count, which an animation keeps, hence the direct calls. In: the container's sample tables
//! give the frames and plays without decoding a frame ([`sequence_header`]), and frames are
//! decoded to 8-bit RGBA as the animation's walk asks for them ([`frames`]); the wrapper decodes
//! a sequence's first frame only.
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

/// A libavif decoder over borrowed bytes, the container parsed.
struct SequenceDecoder<'a> {
    decoder: *mut ffi::avifDecoder,
    _bytes: std::marker::PhantomData<&'a [u8]>,
}

impl<'a> SequenceDecoder<'a> {
    /// Parses `bytes` (the container and its sample tables, no frame decoded), refusing a
    /// frame of more than `max_pixels`.
    fn open(bytes: &'a [u8], max_pixels: u64) -> Result<SequenceDecoder<'a>, String> {
        // SAFETY: the decoder (or null) is owned by the value returned and destroyed by its
        // drop; it reads `bytes`, which outlive it (`'a`), and nothing else.
        unsafe {
            let decoder = ffi::avifDecoderCreate();
            if decoder.is_null() {
                return Err("libavif could not make a decoder".into());
            }
            let this = SequenceDecoder {
                decoder,
                _bytes: std::marker::PhantomData,
            };
            let d = &mut *decoder;
            d.maxThreads = 1;
            d.ignoreExif = 1;
            d.ignoreXMP = 1;
            // libavif refuses a limit above its own default (16384 × 16384) or of 0.
            let most = u64::from(16384u32 * 16384);
            d.imageSizeLimit = u32::try_from(max_pixels.clamp(1, most)).unwrap_or(1);
            // Browsers play sequences that a strict reading refuses (a missing `pixi`, say).
            d.strictFlags = ffi::AVIF_STRICT_DISABLED as _;
            result(ffi::avifDecoderSetIOMemory(
                decoder,
                bytes.as_ptr(),
                bytes.len(),
            ))?;
            result(ffi::avifDecoderParse(decoder))?;
            Ok(this)
        }
    }

    /// Frames, and plays (0: for ever; a sequence that says nothing loops, as browsers play it).
    fn header(&self) -> (u32, u32) {
        // SAFETY: the decoder is live and parsed; these are plain fields.
        let (count, repetitions) =
            unsafe { ((*self.decoder).imageCount, (*self.decoder).repetitionCount) };
        let frames = u32::try_from(count).unwrap_or(0);
        let plays = match u32::try_from(repetitions) {
            Ok(n) => n.saturating_add(1),
            Err(_) => 0,
        };
        (frames, plays)
    }

    /// One play's length in milliseconds, from the sample tables (0 where no timescale).
    fn duration_ms(&self) -> u64 {
        // SAFETY: the decoder is live and parsed; these are plain fields.
        let (scale, length) = unsafe {
            (
                (*self.decoder).timescale,
                (*self.decoder).durationInTimescales,
            )
        };
        match scale {
            0 => 0,
            scale => {
                let ms = (u128::from(length) * 1000 + u128::from(scale / 2)) / u128::from(scale);
                u64::try_from(ms).unwrap_or(u64::MAX)
            }
        }
    }

    /// The next frame as 8-bit RGBA (opaque where the sequence has no alpha), and how long it
    /// shows in milliseconds.
    fn next_frame(&mut self) -> Result<(image::RgbaImage, u32), String> {
        // SAFETY: the decoder is live; the image it decoded into is read (never kept) while
        // the RGB buffer, allocated here at width × height × 4 bytes with rows of width × 4,
        // is written by libavif's conversion.
        unsafe {
            result(ffi::avifDecoderNextImage(self.decoder))?;
            let image = (*self.decoder).image;
            if image.is_null() {
                return Err("libavif decoded no frame".into());
            }
            let (width, height) = ((*image).width, (*image).height);
            let len = usize::try_from(u64::from(width) * u64::from(height) * 4)
                .map_err(|_| "a frame too large to hold".to_string())?;
            let mut pixels = vec![0u8; len];
            let mut rgb = ffi::avifRGBImage::default();
            ffi::avifRGBImageSetDefaults(&mut rgb, image);
            rgb.format = ffi::AVIF_RGB_FORMAT_RGBA;
            rgb.depth = 8;
            rgb.pixels = pixels.as_mut_ptr();
            rgb.rowBytes = width * 4;
            result(ffi::avifImageYUVToRGB(image, &mut rgb))?;
            let timing = (*self.decoder).imageTiming;
            let ms = match timing.timescale {
                0 => 0,
                scale => {
                    (u128::from(timing.durationInTimescales) * 1000 + u128::from(scale / 2))
                        / u128::from(scale)
                }
            };
            let frame = image::RgbaImage::from_raw(width, height, pixels)
                .ok_or_else(|| "a frame of another size than its samples".to_string())?;
            Ok((frame, u32::try_from(ms).unwrap_or(u32::MAX)))
        }
    }
}

impl Drop for SequenceDecoder<'_> {
    fn drop(&mut self) {
        // SAFETY: the decoder was made by `avifDecoderCreate` and is destroyed only here.
        unsafe { ffi::avifDecoderDestroy(self.decoder) }
    }
}

/// The frames and plays (0: for ever) of an AVIF image sequence, from its container alone;
/// `None` for bytes libavif cannot parse (their decode says why).
pub(crate) fn sequence_header(bytes: &[u8]) -> Option<(u32, u32, u64)> {
    SequenceDecoder::open(bytes, u64::MAX).ok().map(|d| {
        let (frames, plays) = d.header();
        (frames, plays, d.duration_ms())
    })
}

/// The frames of an AVIF image sequence, decoded one at a time as they are asked for, each
/// at most `max_pixels`, with their durations.
pub(crate) fn frames(bytes: &[u8], max_pixels: u64) -> Result<image::Frames<'_>, String> {
    let mut decoder = SequenceDecoder::open(bytes, max_pixels)?;
    let (count, _) = decoder.header();
    let decoded = (0..count).map(move |_| {
        let (pixels, ms) = decoder.next_frame().map_err(|e| {
            image::ImageError::Decoding(image::error::DecodingError::new(
                image::error::ImageFormatHint::Name("AVIF".into()),
                e,
            ))
        })?;
        Ok(image::Frame::from_parts(
            pixels,
            0,
            0,
            image::Delay::from_numer_denom_ms(ms, 1),
        ))
    });
    Ok(image::Frames::new(Box::new(decoded)))
}
