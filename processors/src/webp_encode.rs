//! Still WebP encoding through libwebp directly (`libwebp-sys`), for the one setting the `webp`
//! crate fixes: it hands libwebp every picture as ARGB (`use_argb = 1`), so a lossy encode
//! first packs the pixels to ARGB and then converts them to YUV. Imported with
//! `use_argb = 0`, libwebp converts RGB to YUV once, with the same conversion: the very
//! bytes, without a pass over the picture (about 2 % of the server's CPU on the photos →
//! WebP benchmark). Lossless encoding works on ARGB and keeps it.

use libwebp_sys as ffi;

/// Encodes packed RGB (`alpha` false) or RGBA pixels, `width` × `height`, with `config`.
pub(crate) fn encode(
    pixels: &[u8],
    width: u32,
    height: u32,
    alpha: bool,
    config: &ffi::WebPConfig,
) -> Result<Vec<u8>, String> {
    let channels: usize = if alpha { 4 } else { 3 };
    let stride = width as usize * channels;
    if width == 0 || height == 0 || pixels.len() < stride * height as usize {
        return Err(format!(
            "{width}x{height} pixels need more than {} bytes",
            pixels.len()
        ));
    }
    let stride = i32::try_from(stride).map_err(|_| "row too wide".to_string())?;
    let (w, h) = (
        i32::try_from(width).map_err(|_| "too wide".to_string())?,
        i32::try_from(height).map_err(|_| "too tall".to_string())?,
    );
    let mut picture = Picture::new()?;
    let mut writer = Writer::new();
    // SAFETY: `picture` was initialised by libwebp and is freed by its guard; `pixels` holds
    // `height` rows of `stride` bytes (checked above) and outlives the import, which copies
    // them; the writer outlives the encode and is cleared by its guard.
    unsafe {
        if ffi::WebPValidateConfig(config) == 0 {
            return Err("invalid libwebp configuration".into());
        }
        let p = &mut picture.0;
        p.use_argb = i32::from(config.lossless != 0);
        p.width = w;
        p.height = h;
        let imported = if alpha {
            ffi::WebPPictureImportRGBA(p, pixels.as_ptr(), stride)
        } else {
            ffi::WebPPictureImportRGB(p, pixels.as_ptr(), stride)
        };
        if imported == 0 {
            return Err("libwebp could not import the picture".into());
        }
        p.writer = Some(ffi::WebPMemoryWrite);
        p.custom_ptr = std::ptr::addr_of_mut!(writer.0).cast();
        if ffi::WebPEncode(config, p) == 0 {
            return Err(format!("libwebp error {:?}", p.error_code));
        }
        Ok(std::slice::from_raw_parts(writer.0.mem, writer.0.size).to_vec())
    }
}

/// A libwebp picture, freed on drop.
struct Picture(ffi::WebPPicture);

impl Picture {
    fn new() -> Result<Picture, String> {
        ffi::WebPPicture::new()
            .map(Picture)
            .map_err(|()| "libwebp picture init failed".into())
    }
}

impl Drop for Picture {
    fn drop(&mut self) {
        // SAFETY: initialised by WebPPictureInit; freeing an empty picture is a no-op.
        unsafe { ffi::WebPPictureFree(&mut self.0) }
    }
}

/// libwebp's in-memory writer, cleared on drop.
struct Writer(ffi::WebPMemoryWriter);

impl Writer {
    fn new() -> Writer {
        let mut w = std::mem::MaybeUninit::<ffi::WebPMemoryWriter>::uninit();
        // SAFETY: WebPMemoryWriterInit initialises every field.
        Writer(unsafe {
            ffi::WebPMemoryWriterInit(w.as_mut_ptr());
            w.assume_init()
        })
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // SAFETY: initialised by WebPMemoryWriterInit; frees what WebPMemoryWrite allocated.
        unsafe { ffi::WebPMemoryWriterClear(&mut self.0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_bytes_as_the_webp_crates_encoder() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/exif-orientation/Landscape_1.jpg");
        let rgb = image::open(path)
            .unwrap()
            .resize(300, 300, image::imageops::Triangle);
        let rgb = rgb.into_rgb8();
        let rgba = image::DynamicImage::ImageRgb8(rgb.clone()).into_rgba8();
        let (w, h) = rgb.dimensions();
        for lossless in [0, 1] {
            let mut config = webp::WebPConfig::new().unwrap();
            config.quality = 75.0;
            config.method = 4;
            config.lossless = lossless;
            let theirs = webp::Encoder::from_rgb(rgb.as_raw(), w, h)
                .encode_advanced(&config)
                .unwrap();
            assert_eq!(
                encode(rgb.as_raw(), w, h, false, &config).unwrap(),
                &*theirs
            );
            let theirs = webp::Encoder::from_rgba(rgba.as_raw(), w, h)
                .encode_advanced(&config)
                .unwrap();
            assert_eq!(
                encode(rgba.as_raw(), w, h, true, &config).unwrap(),
                &*theirs
            );
        }
        assert!(encode(
            &rgb.as_raw()[..9],
            w,
            h,
            false,
            &webp::WebPConfig::new().unwrap()
        )
        .is_err());
    }
}
