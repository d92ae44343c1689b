//! JPEG XL sources, bare codestreams and ISO-BMFF containers alike, through `jxl-oxide` (pure
//! Rust; MIT or Apache-2.0). Its header gives the size, alpha, orientation, colour encoding and
//! animation; every displayed frame (a keyframe: the composite of the layers before it) is
//! counted from the frame headers as the bytes are read in, and the frame count and the pixel
//! limit are checked on them before a pixel is rendered. A JPEG recompressed losslessly into
//! JPEG XL renders like any other codestream.
//!
//! Colour: an XYB-coded picture (lossy JPEG XL, nearly always) is rendered straight into sRGB
//! by the decoder, whatever profile it carries, since XYB is absolute; a picture coded in its
//! own space (lossless, mostly) is rendered in that space and its ICC profile, when it has
//! one, is applied after as for every other format. Orientation is the decoder's, applied as
//! it renders.
//!
//! The decoder is told to stay on the calling thread (no pool: a run owns one slot of the
//! bounded CPU pool) and holds its buffers to a budget derived from the pixel limit, so a
//! codestream that asks for more than its size needs fails as undecodable instead of taking
//! the memory. That budget is also how a render is cut short: the decoder has no way to be
//! cancelled, but it asks its tracker before every buffer (each group's coefficients and
//! planes), so a watcher that empties the tracker once the run's stop signal is up
//! (`interrupt.rs`) makes the render fail at its next buffer (audit #4: a 6.6 KB file
//! declaring 7000×7000 rendered for 13 s past its deadline).

use image::{DynamicImage, GrayAlphaImage, GrayImage, RgbImage, RgbaImage};
use jxl_oxide::{
    AllocTracker, EnumColourEncoding, InitializeResult, JxlImage, JxlThreadPool, RenderingIntent,
};

use super::{AnimationHeader, DecodeAt, Decoded, Decoder, Format, Header};
use crate::error::ProcessError;
use crate::limits::Limits;

pub(crate) struct Jxl;

/// A bare codestream's first two bytes.
const CODESTREAM: &[u8] = &[0xff, 0x0a];
/// A container's signature box (`JXL `, 12 bytes).
const CONTAINER: &[u8] = &[
    0, 0, 0, 0x0c, b'J', b'X', b'L', b' ', 0x0d, 0x0a, 0x87, 0x0a,
];

/// Bytes the decoder may hold in its buffers per pixel of the picture: its planes are 32-bit
/// floats, four channels, and a frame being composited on a reference frame holds a few such
/// sets at once.
const BUFFER_BYTES_PER_PIXEL: u64 = 64;

impl Format for Jxl {
    fn sniff(&self, bytes: &[u8]) -> bool {
        bytes.starts_with(CODESTREAM) || bytes.starts_with(CONTAINER)
    }

    fn open<'a>(&self, bytes: &'a [u8], limits: &Limits) -> Result<Header<'a>, ProcessError> {
        let (image, tracker) = read_tracked(bytes, limits)?;
        let header = image.image_header();
        let (width, height) = (header.size.width, header.size.height);
        let has_alpha = header.metadata.alpha().is_some();
        // Counted from the frame headers; an animation's limits are checked on the count
        // before its frames render (`animation::process`), a still takes the first.
        if keyframes(&image) == 0 {
            return Err(undecodable("no frame to show"));
        }
        let upright = (image.width(), image.height());
        Ok(Header {
            width,
            height,
            has_alpha,
            // Applied by the decoder as it renders.
            orientation: image::metadata::Orientation::NoTransforms,
            // Applied after the decoder's render, as for other formats (`decode::Source`).
            icc: own_space_profile(&image),
            decoder: Box::new(JxlSource {
                image,
                tracker,
                upright,
            }),
        })
    }

    fn animation(&self, bytes: &[u8]) -> Option<AnimationHeader> {
        let image = read(bytes, &Limits::default()).ok()?;
        let plays = image
            .image_header()
            .metadata
            .animation
            .as_ref()
            .map_or(1, |a| a.num_loops);
        let frames = keyframes(&image);
        let ticks: u64 = (0..frames as usize)
            .filter_map(|k| image.frame_header(k))
            .map(|header| u64::from(header.duration))
            .sum();
        Some(AnimationHeader::of(frames, plays).lasting(ticks_ms(&image, ticks)))
    }

    fn may_animate(&self) -> bool {
        true
    }
}

/// The bytes read into a decoder: the header parsed, every frame's header and table of
/// contents loaded (no pixel decoded yet).
fn read(bytes: &[u8], limits: &Limits) -> Result<JxlImage, ProcessError> {
    read_tracked(bytes, limits).map(|(image, _)| image)
}

/// [`read`], with the tracker the decoder's buffers are allocated from.
fn read_tracked(bytes: &[u8], limits: &Limits) -> Result<(JxlImage, AllocTracker), ProcessError> {
    let budget = limits.max_pixels.saturating_mul(BUFFER_BYTES_PER_PIXEL);
    let tracker = AllocTracker::with_limit(usize::try_from(budget).unwrap_or(usize::MAX));
    let mut reader = JxlImage::builder()
        .pool(JxlThreadPool::none())
        .alloc_tracker(tracker.clone())
        .build_uninit();
    reader.feed_bytes(bytes).map_err(refused)?;
    let mut image = match reader.try_init().map_err(refused)? {
        InitializeResult::Initialized(image) => image,
        InitializeResult::NeedMoreData(_) => return Err(undecodable("the header is cut short")),
    };
    image.finalize().map_err(refused)?;
    let header = image.image_header();
    if header.metadata.xyb_encoded {
        // XYB is absolute: the decoder renders it into sRGB itself, with no colour engine.
        let encoding = if header.metadata.grayscale() {
            EnumColourEncoding::gray_srgb(RenderingIntent::Relative)
        } else {
            EnumColourEncoding::srgb(RenderingIntent::Relative)
        };
        image.request_color_encoding(encoding);
    }
    Ok((image, tracker))
}

/// How often a render's watcher reads the stop signal.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(10);

/// Runs `render` on this thread while another watches this thread's stop signal, taking
/// every byte of `tracker`'s budget away once it is up (and keeping it away as the decoder
/// frees buffers, until the render returns). `Err(Stopped)` when the signal cut it short.
fn watched<T>(
    tracker: &AllocTracker,
    render: impl FnOnce() -> Result<T, ProcessError>,
) -> Result<T, ProcessError> {
    let Some(stop) = crate::interrupt::signal() else {
        return render();
    };
    if stop() {
        return Err(crate::interrupt::stopped());
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    let fired = std::sync::atomic::AtomicBool::new(false);
    let result = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            use std::sync::atomic::Ordering::Relaxed;
            while !done.load(Relaxed) {
                if fired.load(Relaxed) || stop() {
                    fired.store(true, Relaxed);
                    drain(tracker);
                }
                std::thread::park_timeout(WATCH_EVERY);
            }
        });
        let result = render();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        // Not a watch period more.
        watcher.thread().unpark();
        result
    });
    // A render that ended by itself keeps its answer: only a failure after the signal is
    // the signal's doing.
    match (result, fired.load(std::sync::atomic::Ordering::Relaxed)) {
        (Err(_), true) => Err(crate::interrupt::stopped()),
        (result, _) => result,
    }
}

/// Takes all that is left of `tracker`'s budget (largest pieces first).
fn drain(tracker: &AllocTracker) {
    for shift in (0..usize::BITS).rev() {
        while tracker.shrink_limit(1usize << shift).is_ok() {}
    }
}

/// The ICC profile to apply after a render in the picture's own space: `None` where the
/// decoder renders into sRGB (XYB) or the picture is described without one.
fn own_space_profile(image: &JxlImage) -> Option<Vec<u8>> {
    if image.image_header().metadata.xyb_encoded {
        return None;
    }
    image.original_icc().map(<[u8]>::to_vec)
}

/// `ticks` of the animation's clock in milliseconds, rounded (0 for a still picture).
fn ticks_ms(image: &JxlImage, ticks: u64) -> u64 {
    let Some(animation) = image.image_header().metadata.animation.as_ref() else {
        return 0;
    };
    // Ticks per second are numerator / denominator.
    let (num, den) = (
        u128::from(animation.tps_numerator),
        u128::from(animation.tps_denominator),
    );
    if num == 0 {
        return 0;
    }
    let ms = (u128::from(ticks) * 1000 * den + num / 2) / num;
    u64::try_from(ms).unwrap_or(u64::MAX)
}

/// Displayed frames: each keyframe is a whole picture (the layers before it composited).
fn keyframes(image: &JxlImage) -> u32 {
    u32::try_from(image.num_loaded_keyframes()).unwrap_or(u32::MAX)
}

fn refused(e: Box<dyn std::error::Error + Send + Sync>) -> ProcessError {
    undecodable(&e.to_string())
}

fn undecodable(why: &str) -> ProcessError {
    ProcessError::Undecodable(format!("JPEG XL: {why}"))
}

/// An opened JPEG XL source.
pub(crate) struct JxlSource {
    image: JxlImage,
    /// What the decoder's buffers are allocated from (emptied to cut a render short).
    tracker: AllocTracker,
    upright: (u32, u32),
}

impl JxlSource {
    /// Keyframe `index` rendered to 8-bit pixels, upright, in sRGB where the picture is XYB
    /// (else in its own space, the header's profile still to apply), and how long it shows,
    /// in milliseconds.
    pub(crate) fn frame(&self, index: usize) -> Result<(DynamicImage, u32), ProcessError> {
        let render = watched(&self.tracker, || {
            self.image.render_frame(index).map_err(refused)
        })?;
        let mut stream = render.stream();
        let (width, height, channels) = (stream.width(), stream.height(), stream.channels());
        let len = usize::try_from(u64::from(width) * u64::from(height) * u64::from(channels))
            .map_err(|_| undecodable("a frame too large to hold"))?;
        let mut samples = vec![0u8; len];
        if stream.write_to_buffer(&mut samples) != len {
            return Err(undecodable("a frame rendered short"));
        }
        let has_black = self.image.pixel_format().has_black();
        let image = match (channels, has_black) {
            (1, _) => GrayImage::from_raw(width, height, samples).map(DynamicImage::ImageLuma8),
            (2, false) => {
                GrayAlphaImage::from_raw(width, height, samples).map(DynamicImage::ImageLumaA8)
            }
            (3, false) => RgbImage::from_raw(width, height, samples).map(DynamicImage::ImageRgb8),
            (4, false) => RgbaImage::from_raw(width, height, samples).map(DynamicImage::ImageRgba8),
            _ => {
                return Err(ProcessError::UnsupportedFormat(
                    "JPEG XL in CMYK is not supported".into(),
                ))
            }
        }
        .ok_or_else(|| undecodable("a frame of another size than its samples"))?;
        Ok((image, self.duration_ms(render.duration())))
    }

    /// Displayed frames.
    pub(crate) fn frames(&self) -> u32 {
        keyframes(&self.image)
    }

    /// `ticks` of the animation's clock in milliseconds, rounded (the animation's walk holds
    /// it to what an output frame may show for).
    fn duration_ms(&self, ticks: u32) -> u32 {
        u32::try_from(ticks_ms(&self.image, u64::from(ticks))).unwrap_or(u32::MAX)
    }
}

/// The frames of a JPEG XL animation, composited (each keyframe whole), rendered as they are
/// asked for, with their durations: the bytes are read again, as the other formats' frame
/// decoders read them.
pub(crate) fn frames(
    bytes: &[u8],
    limits: &Limits,
) -> Result<image::Frames<'static>, ProcessError> {
    let (image, tracker) = read_tracked(bytes, limits)?;
    let upright = (image.width(), image.height());
    let source = JxlSource {
        image,
        tracker,
        upright,
    };
    let count = source.frames() as usize;
    let rendered = (0..count).map(move |index| {
        let (image, ms) = source.frame(index).map_err(|e| {
            image::ImageError::Decoding(image::error::DecodingError::new(
                image::error::ImageFormatHint::Name("JPEG XL".into()),
                e.to_string(),
            ))
        })?;
        Ok(image::Frame::from_parts(
            image.into_rgba8(),
            0,
            0,
            image::Delay::from_numer_denom_ms(ms, 1),
        ))
    });
    Ok(image::Frames::new(Box::new(rendered)))
}

impl Decoder for JxlSource {
    fn decode(&self, _at: &DecodeAt<'_>) -> Result<Decoded, ProcessError> {
        self.frame(0).map(|(image, _)| Decoded::pixels(image))
    }

    fn upright_size(&self) -> Option<(u32, u32)> {
        Some(self.upright)
    }
}
