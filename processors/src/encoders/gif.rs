//! GIF out, through `image`'s encoder: a still at its best palette search, an animation at
//! a faster one (every frame is quantized). Lossless as far as its palette goes: no quality.

use image::codecs::gif::{GifEncoder, Repeat};
use image::DynamicImage;

use super::{
    animation_failed, encoding_failed, Encoder, Facts, FrameSink, OutputFormat, Passes, PerPixel,
    Settings,
};
use crate::error::ProcessError;

pub(super) struct Gif;

/// Palette search speed for animations (1 best … 30 fastest): an animation quantizes every
/// frame, so the still's best-quality setting would cost its frames over.
const ANIMATION_SPEED: i32 = 10;

/// GIF: animated up to 65535 a side; the best palette search about 50 passes, an
/// animation's frames' faster one 5.
const FACTS: Facts = Facts {
    animates: true,
    animation_max_side: Some(u16::MAX as u32),
    bytes_per_pixel: PerPixel::both(12),
    passes: Passes::still(50).animated(5),
    ..Facts::of(OutputFormat::Gif, "gif", "image/gif")
};

impl Encoder for Gif {
    fn facts(&self) -> &'static Facts {
        &FACTS
    }

    fn encode(&self, image: &DynamicImage, _settings: Settings) -> Result<Vec<u8>, ProcessError> {
        let rgba = image.to_rgba8();
        let mut out = Vec::new();
        let mut encoder = GifEncoder::new(&mut out);
        encoder
            .encode(
                rgba.as_raw(),
                rgba.width(),
                rgba.height(),
                image::ExtendedColorType::Rgba8,
            )
            .map_err(|e| encoding_failed("GIF", &e))?;
        drop(encoder);
        Ok(out)
    }

    fn animation(
        &self,
        _size: (u32, u32),
        _settings: Settings,
        plays: u32,
        _alpha: bool,
    ) -> Result<Option<Box<dyn FrameSink>>, ProcessError> {
        let out = SharedBuffer::default();
        let mut encoder = GifEncoder::new_with_speed(out.clone(), ANIMATION_SPEED);
        // GIF counts repeats after the first play; without the extension it plays once.
        let repeat = match plays {
            0 => Some(Repeat::Infinite),
            1 => None,
            n => Some(Repeat::Finite(u16::try_from(n - 1).unwrap_or(u16::MAX))),
        };
        if let Some(repeat) = repeat {
            encoder
                .set_repeat(repeat)
                .map_err(|e| animation_failed(OutputFormat::Gif, &e))?;
        }
        Ok(Some(Box::new(Animation { encoder, out })))
    }
}

struct Animation {
    encoder: GifEncoder<SharedBuffer>,
    out: SharedBuffer,
}

impl FrameSink for Animation {
    fn add(&mut self, pixels: image::RgbaImage, delay_ms: u32) -> Result<(), ProcessError> {
        let delay = image::Delay::from_numer_denom_ms(delay_ms, 1);
        self.encoder
            .encode_frame(image::Frame::from_parts(pixels, 0, 0, delay))
            .map_err(|e| animation_failed(OutputFormat::Gif, &e))
    }

    fn finish(self: Box<Self>) -> Result<Vec<u8>, ProcessError> {
        let Animation { encoder, out } = *self;
        // Dropping the encoder writes the trailer.
        drop(encoder);
        let bytes = out.0.borrow().clone();
        Ok(bytes)
    }
}

/// A byte buffer the GIF encoder writes into and the writer reads back once it is done.
#[derive(Clone, Default)]
struct SharedBuffer(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

impl std::io::Write for SharedBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
