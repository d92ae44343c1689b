//! Animated WebP encoding through libwebp's animation encoder directly (`libwebp-sys`), one
//! frame at a time. The `webp` crate's encoder takes every frame by reference and hands them
//! to libwebp only at the end, keeping each frame's picture too, so a run held the whole
//! animation twice over (issue 28: an 11.5 KB GIF of 499 frames of 300 × 300 held 366 MB). libwebp
//! copies what it needs of each frame as it is added: here a frame is imported, added and
//! freed before the next is decoded, and a run holds a few frames whatever their number.
//!
//! The settings are the ones the `webp` crate used — RGBA imported as ARGB, the animation's
//! background colour 0 and its loop count in the animation parameters — so the bytes are the
//! same (checked by the test below).

use libwebp_sys as ffi;

/// An animation being encoded: frames go in one by one ([`AnimWriter::add`]), the file comes
/// out at the end ([`AnimWriter::finish`]).
pub(crate) struct AnimWriter {
    encoder: *mut ffi::WebPAnimEncoder,
    config: ffi::WebPConfig,
    width: u32,
    height: u32,
    /// Where the next frame starts, in ms from the first.
    timestamp: i32,
}

impl AnimWriter {
    /// An encoder of `width` × `height` frames with `config`, playing `loop_count` times
    /// (0: for ever).
    pub(crate) fn new(
        width: u32,
        height: u32,
        config: &ffi::WebPConfig,
        loop_count: i32,
    ) -> Result<AnimWriter, String> {
        let (w, h) = (
            i32::try_from(width).map_err(|_| "too wide".to_string())?,
            i32::try_from(height).map_err(|_| "too tall".to_string())?,
        );
        let mut options = std::mem::MaybeUninit::<ffi::WebPAnimEncoderOptions>::uninit();
        // SAFETY: the options are initialised by libwebp before they are read; the encoder it
        // returns (or null) is owned by this value and deleted by its drop.
        let encoder = unsafe {
            let abi = ffi::WebPGetMuxABIVersion();
            if ffi::WebPValidateConfig(config) == 0
                || ffi::WebPAnimEncoderOptionsInitInternal(options.as_mut_ptr(), abi) == 0
            {
                return Err("invalid libwebp configuration".into());
            }
            let mut options = options.assume_init();
            options.anim_params.bgcolor = 0;
            options.anim_params.loop_count = loop_count;
            ffi::WebPAnimEncoderNewInternal(w, h, &options, abi)
        };
        if encoder.is_null() {
            return Err("libwebp could not start an animation".into());
        }
        Ok(AnimWriter {
            encoder,
            config: *config,
            width,
            height,
            timestamp: 0,
        })
    }

    /// Adds a frame of packed RGBA pixels, shown for `delay_ms`.
    pub(crate) fn add(&mut self, rgba: &[u8], delay_ms: u32) -> Result<(), String> {
        let stride = self.width as usize * 4;
        if rgba.len() < stride * self.height as usize {
            return Err("a frame of another size".into());
        }
        let mut picture = ffi::WebPPicture::new().map_err(|()| "libwebp picture init failed")?;
        picture.use_argb = 1;
        picture.width = self.width as i32;
        picture.height = self.height as i32;
        // SAFETY: `picture` was initialised by libwebp and is freed below on every path;
        // `rgba` holds `height` rows of `stride` bytes (checked above) and outlives the import,
        // which copies them; libwebp copies the frame in `WebPAnimEncoderAdd`.
        let added = unsafe {
            let imported =
                ffi::WebPPictureImportRGBA(&mut picture, rgba.as_ptr(), stride as i32) != 0;
            let added = imported
                && ffi::WebPAnimEncoderAdd(
                    self.encoder,
                    &mut picture,
                    self.timestamp,
                    &self.config,
                ) != 0;
            ffi::WebPPictureFree(&mut picture);
            added
        };
        if !added {
            return Err(self.error());
        }
        // WebP holds a duration in 24 bits; a longer animation than an i32 of ms is refused.
        self.timestamp = i32::try_from(i64::from(self.timestamp) + i64::from(delay_ms))
            .map_err(|_| "the animation is longer than WebP holds (24 days)".to_string())?;
        Ok(())
    }

    /// Ends the animation after its last frame's delay and returns the file.
    pub(crate) fn finish(self) -> Result<Vec<u8>, String> {
        let mut data = ffi::WebPData {
            bytes: std::ptr::null(),
            size: 0,
        };
        // SAFETY: the encoder is live; a null frame ends the animation at the timestamp;
        // `data` is filled by libwebp and freed here after its bytes are copied.
        unsafe {
            if ffi::WebPAnimEncoderAdd(
                self.encoder,
                std::ptr::null_mut(),
                self.timestamp,
                std::ptr::null(),
            ) == 0
                || ffi::WebPAnimEncoderAssemble(self.encoder, &mut data) == 0
            {
                return Err(self.error());
            }
            let bytes = std::slice::from_raw_parts(data.bytes, data.size).to_vec();
            ffi::WebPDataClear(&mut data);
            Ok(bytes)
        }
    }

    fn error(&self) -> String {
        // SAFETY: the encoder is live; the message is a C string it owns, copied here.
        unsafe {
            let message = ffi::WebPAnimEncoderGetError(self.encoder);
            if message.is_null() {
                "libwebp animation error".into()
            } else {
                std::ffi::CStr::from_ptr(message)
                    .to_string_lossy()
                    .into_owned()
            }
        }
    }
}

impl Drop for AnimWriter {
    fn drop(&mut self) {
        // SAFETY: created by WebPAnimEncoderNewInternal (never null here), deleted once.
        unsafe { ffi::WebPAnimEncoderDelete(self.encoder) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes the `webp` crate's encoder wrote for the same frames and settings (its
    /// timestamps ended at 0; only differences are stored).
    #[test]
    fn the_same_bytes_as_the_webp_crates_animation_encoder() {
        let (w, h) = (40u32, 30u32);
        let frames: Vec<(Vec<u8>, u32)> = (0..5u32)
            .map(|i| {
                let pixels = (0..w * h)
                    .flat_map(|p| {
                        let v = ((p * 7 + i * 40) % 256) as u8;
                        [v, 255 - v, (i * 50) as u8, 255]
                    })
                    .collect();
                (pixels, 40 + i * 10)
            })
            .collect();
        let mut config = webp::WebPConfig::new().unwrap();
        config.quality = 75.0;
        for plays in [0, 3] {
            let mut theirs = webp::AnimEncoder::new(w, h, &config);
            theirs.set_loop_count(plays);
            let total: i32 = frames.iter().map(|(_, d)| *d as i32).sum();
            let mut start = -total;
            for (pixels, delay) in &frames {
                theirs.add_frame(webp::AnimFrame::from_rgba(pixels, w, h, start));
                start += *delay as i32;
            }
            let theirs = theirs.try_encode().unwrap().to_vec();
            let mut ours = AnimWriter::new(w, h, &config, plays).unwrap();
            for (pixels, delay) in &frames {
                ours.add(pixels, *delay).unwrap();
            }
            assert_eq!(ours.finish().unwrap(), theirs, "plays {plays}");
        }
        let mut short = AnimWriter::new(w, h, &config, 0).unwrap();
        assert!(short.add(&[0; 8], 10).is_err());
    }
}
