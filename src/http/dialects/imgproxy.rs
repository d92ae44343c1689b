//! imgproxy's URLs, read as imgcas's own: `/{signature}/{options}/plain/{source}@{ext}` and
//! `/{signature}/{options}/{base64url source}.{ext}` (below `/imgproxy`), signed as imgproxy
//! signs them (URL-safe Base64 of HMAC-SHA256 over salt + the path after the signature).
//!
//! Every option becomes imgcas's own option pair, so an imgproxy URL and the native URL of
//! the same output are one variant. An option imgcas cannot honour exactly is refused with
//! its name (400), never answered with a different image.

use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use hmac::{KeyInit, Mac};
use sha2::Sha256;

use super::{Dialect, Translated};
use crate::error::Error;

/// An option error, named as imgproxy names the option.
fn refuse(option: &str, message: impl Into<String>) -> Error {
    Error::invalid_option(option, message)
}

/// The signature of `path` under one key/salt pair, `size` bytes of it, as imgproxy writes it.
pub fn sign(key: &[u8], salt: &[u8], path: &str, size: usize) -> String {
    let mut mac = match hmac::Hmac::<Sha256>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts every key length"),
    };
    mac.update(salt);
    mac.update(path.as_bytes());
    let digest = mac.finalize().into_bytes();
    URL_SAFE_NO_PAD.encode(&digest[..size.clamp(1, digest.len())])
}

/// Checks the signature segment: `insecure`/`unsafe` while no pair is configured, else one
/// pair's signature of `signed` (the path after the signature, from its `/`).
fn check_signature(dialect: &Dialect, signature: &str, signed: &str) -> Result<(), Error> {
    let pairs = &dialect.imgproxy_pairs;
    if pairs.is_empty() {
        if dialect.native_signing {
            return Err(Error::BadSignature(
                "this server signs its URLs: imgproxy URLs need IMGCAS_IMGPROXY_KEY and \
                 IMGCAS_IMGPROXY_SALT"
                    .into(),
            ));
        }
        return match signature {
            "insecure" | "unsafe" => Ok(()),
            _ => Err(Error::BadSignature(
                "signing is off: the signature segment must be `insecure` or `unsafe`".into(),
            )),
        };
    }
    let size = dialect.imgproxy_signature_size;
    let matches = pairs.iter().any(|(key, salt)| {
        let expected = sign(key, salt, signed, size);
        super::super::same_bytes(
            expected.as_bytes(),
            signature.trim_end_matches('=').as_bytes(),
        )
    });
    match matches {
        true => Ok(()),
        false => Err(Error::BadSignature(
            "the signature does not match the URL".into(),
        )),
    }
}

/// What the options say, in imgcas's terms, before they become pairs.
#[derive(Default)]
struct Options {
    fit: Option<&'static str>,
    width: u32,
    height: u32,
    enlarge: bool,
    extend: Option<Option<String>>,
    gravity: Option<String>,
    /// The gravity's offsets, in pixels (imgcas's `gravity_offset`).
    gravity_offset: Option<(i32, i32)>,
    dpr: Option<String>,
    quality: u32,
    format: Option<&'static str>,
    blur: Option<String>,
    sharpen: Option<String>,
    rotate: u32,
    background: Option<String>,
    preset: Option<String>,
    /// `crop`: width and height as imgcas writes them, and its own gravity if given.
    crop: Option<(String, String, Option<String>)>,
}

fn flag(option: &str, v: &str) -> Result<bool, Error> {
    match v {
        "1" | "t" | "true" => Ok(true),
        "0" | "f" | "false" | "" => Ok(false),
        _ => Err(refuse(
            option,
            format!("`{v}` is not 1, t, true, 0, f or false"),
        )),
    }
}

fn size(option: &str, v: &str) -> Result<u32, Error> {
    match v {
        "" => Ok(0),
        _ => v
            .parse()
            .map_err(|_| refuse(option, format!("`{v}` is not a whole number of pixels"))),
    }
}

fn resizing_type(v: &str) -> Result<Option<&'static str>, Error> {
    Ok(Some(match v {
        "" => return Ok(None),
        "fit" => "contain",
        // imgproxy's fill cuts a box the source cannot fill to the source: imgcas's crop.
        "fill" => "crop",
        // fill-down keeps the box's shape: imgcas's cover.
        "fill-down" => "cover",
        "force" => "fill",
        // Fill or fit by whether the source is turned as the box: imgcas's auto.
        "auto" => "auto",
        other => return Err(refuse("resizing_type", format!("unknown type `{other}`"))),
    }))
}

/// imgproxy's gravity and its arguments as imgcas's `gravity` (a compass point, `smart` or a
/// focal point `fp:X:Y`) and `gravity_offset` (whole pixels; imgproxy's relative offsets,
/// below 1, are refused).
fn gravity(args: &[&str]) -> Result<(String, Option<(i32, i32)>), Error> {
    let first = args.first().copied().unwrap_or("");
    if first == "fp" {
        let fraction = |i: usize| {
            let v = args.get(i).copied().unwrap_or("");
            match v.parse::<f64>() {
                Ok(f) if (0.0..=1.0).contains(&f) => Ok(v),
                _ => Err(refuse(
                    "gravity",
                    format!("a focal point's `{v}` is not a fraction from 0 to 1"),
                )),
            }
        };
        if args.len() > 3 {
            return Err(refuse("gravity", "a focal point is fp:X:Y"));
        }
        return Ok((format!("fp:{}:{}", fraction(1)?, fraction(2)?), None));
    }
    let named = match first {
        "" | "ce" => "center",
        "no" => "north",
        "so" => "south",
        "ea" => "east",
        "we" => "west",
        "noea" => "northeast",
        "nowe" => "northwest",
        "soea" => "southeast",
        "sowe" => "southwest",
        "sm" => "smart",
        other => return Err(refuse("gravity", format!("unknown gravity `{other}`"))),
    };
    let offset = |i: usize| match args.get(i).copied().unwrap_or("") {
        "" => Ok(0),
        v => match v.parse::<f64>() {
            Ok(px) if px.fract() == 0.0 && px.abs() <= 8192.0 => Ok(px as i32),
            Ok(px) if px.abs() < 1.0 => Err(refuse(
                "gravity",
                "relative offsets (below 1) are not supported: give pixels",
            )),
            _ => Err(refuse(
                "gravity",
                format!("offset `{v}` is not a whole number of pixels"),
            )),
        },
    };
    if args.len() > 3 {
        return Err(refuse("gravity", "takes a type and two offsets"));
    }
    let offsets = match (offset(1)?, offset(2)?) {
        (0, 0) => None,
        _ if named == "smart" => {
            return Err(refuse("gravity", "smart gravity takes no offsets"));
        }
        xy => Some(xy),
    };
    Ok((named.to_string(), offsets))
}

/// A gravity that places a region or a picture in a box (`crop`'s, `extend`'s): a compass
/// point without offsets.
fn compass(option: &str, args: &[&str]) -> Result<String, Error> {
    match gravity(args)? {
        (name, None) if !name.starts_with("fp:") => Ok(name),
        _ => Err(refuse(
            option,
            "places by a compass point here, without offsets",
        )),
    }
}

/// imgproxy's extension (or `format`) as imgcas's `format`.
fn format(option: &str, v: &str) -> Result<Option<&'static str>, Error> {
    if v.is_empty() {
        return Ok(None);
    }
    // Every format imgcas writes, by the names and aliases its room gives it (`jpg` too).
    match imgcas_processors::OutputFormat::from_name(v) {
        Some(format) => Ok(Some(format.name())),
        None => Err(refuse(option, format!("format `{v}` is not supported"))),
    }
}

/// A crop side as imgcas writes it: imgproxy's 0 (the whole side), pixels from 1 (the whole
/// part of the number), or a fraction below 1.
fn crop_side(v: &str) -> Result<String, Error> {
    let value: f64 = match v {
        "" => 0.0,
        _ => v
            .parse()
            .map_err(|_| refuse("crop", format!("`{v}` is not a number")))?,
    };
    if !value.is_finite() || value < 0.0 {
        return Err(refuse(
            "crop",
            format!("`{v}` is not 0, a fraction or pixels"),
        ));
    }
    Ok(match value {
        v if v >= 1.0 => format!("{}", v.trunc() as u64),
        v if v > 0.0 => format!("{v}"),
        _ => "0".into(),
    })
}

fn sigma(option: &str, v: &str) -> Result<Option<String>, Error> {
    let value: f64 = v
        .parse()
        .map_err(|_| refuse(option, format!("`{v}` is not a number")))?;
    if !value.is_finite() || value < 0.0 {
        return Err(refuse(option, format!("`{v}` is not a sigma")));
    }
    Ok((value > 0.0).then(|| v.to_string()))
}

fn background(args: &[&str]) -> Result<Option<String>, Error> {
    let channel = |v: &str| -> Result<u8, Error> {
        v.parse()
            .map_err(|_| refuse("background", format!("`{v}` is not 0–255")))
    };
    match args {
        [] | [""] => Ok(None),
        [hex] if hex.len() == 6 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Ok(Some(hex.to_ascii_lowercase()))
        }
        [r, g, b] => Ok(Some(format!(
            "{:02x}{:02x}{:02x}",
            channel(r)?,
            channel(g)?,
            channel(b)?
        ))),
        _ => Err(refuse("background", "give R:G:B or a hex colour")),
    }
}

impl Options {
    /// Applies one `name:arg:…` segment.
    fn apply(&mut self, name: &str, args: &[&str]) -> Result<(), Error> {
        let arg = |i: usize| args.get(i).copied().unwrap_or("");
        match name {
            "resize" | "rs" => {
                self.fit = resizing_type(arg(0))?.or(self.fit);
                self.apply("size", &args[1.min(args.len())..])?;
            }
            "size" | "s" => {
                if args.len() > 4 {
                    return Err(refuse(name, "takes width:height:enlarge:extend"));
                }
                // An empty argument leaves what an earlier option set, as imgproxy does.
                if !arg(0).is_empty() {
                    self.width = size("width", arg(0))?;
                }
                if !arg(1).is_empty() {
                    self.height = size("height", arg(1))?;
                }
                if !arg(2).is_empty() {
                    self.enlarge = flag("enlarge", arg(2))?;
                }
                if !arg(3).is_empty() {
                    self.apply("extend", &args[3..])?;
                }
            }
            "resizing_type" | "rt" => self.fit = resizing_type(arg(0))?,
            "width" | "w" => self.width = size(name, arg(0))?,
            "height" | "h" => self.height = size(name, arg(0))?,
            "enlarge" | "el" => self.enlarge = flag(name, arg(0))?,
            "extend" | "ex" => {
                self.extend = match flag(name, arg(0))? {
                    false => None,
                    true if args.len() > 1 => Some(Some(compass(name, &args[1..])?)),
                    true => Some(None),
                };
            }
            "gravity" | "g" => {
                (self.gravity, self.gravity_offset) = {
                    let (named, offset) = gravity(args)?;
                    (Some(named), offset)
                }
            }
            "crop" | "c" => {
                let place = match args.len() {
                    0..=2 => None,
                    _ => Some(compass(name, &args[2..])?),
                };
                self.crop = Some((crop_side(arg(0))?, crop_side(arg(1))?, place));
            }
            "dpr" => {
                // A positive number (imgcas's own `dpr=auto`, which reads client hints, is
                // not imgproxy's).
                let ratio: f64 = arg(0)
                    .parse()
                    .map_err(|_| refuse(name, "the ratio is a positive number"))?;
                if !ratio.is_finite() || ratio <= 0.0 {
                    return Err(refuse(name, "the ratio is a positive number"));
                }
                self.dpr = Some(arg(0).to_string());
            }
            "quality" | "q" => self.quality = size(name, arg(0))?,
            "format" | "f" | "ext" => self.format = format(name, arg(0))?,
            "blur" | "bl" => self.blur = sigma(name, arg(0))?,
            "sharpen" | "sh" => self.sharpen = sigma(name, arg(0))?,
            "rotate" | "rot" => {
                let degrees: i64 = arg(0)
                    .parse()
                    .map_err(|_| refuse(name, "the angle is a multiple of 90"))?;
                if degrees % 90 != 0 {
                    return Err(refuse(name, "the angle is a multiple of 90"));
                }
                self.rotate = degrees.rem_euclid(360) as u32;
            }
            "background" | "bg" => self.background = background(args)?,
            "preset" | "pr" => match args {
                [one] if !one.is_empty() => self.preset = Some(one.to_string()),
                _ => return Err(refuse(name, "name one preset")),
            },
            // imgcas never keeps the source's metadata.
            "strip_metadata" | "sm" => {
                if !flag(name, arg(0))? {
                    return Err(refuse(name, "imgcas always strips metadata"));
                }
            }
            // Only changes the URL, so caches keep it apart: nothing to do.
            "cachebuster" | "cb" => {}
            other => {
                return Err(refuse(
                    other,
                    "this imgproxy option is not supported by imgcas",
                ))
            }
        }
        Ok(())
    }

    /// imgcas's option pairs for these options.
    fn pairs(self) -> Result<Vec<(String, String)>, Error> {
        let mut out: Vec<(String, String)> = Vec::new();
        let mut push = |k: &str, v: String| out.push((k.to_string(), v));
        if self.width > 0 {
            push("w", self.width.to_string());
        }
        if self.height > 0 {
            push("h", self.height.to_string());
        }
        let fit = self.fit.unwrap_or("contain");
        let mut gravity = self.gravity.clone();
        match self.extend {
            // Only a fit the URL says: a preset's own fit stands otherwise.
            None => {
                if let Some(fit) = self.fit {
                    push("fit", fit.to_string());
                }
            }
            // Extending a fitted picture to the box is imgcas's pad; the colour must be
            // said (imgproxy's default depends on the output's alpha).
            Some(place) if fit == "contain" => {
                if self.background.is_none() {
                    return Err(refuse(
                        "extend",
                        "give the colour to extend with (`bg`): imgcas pads with a colour",
                    ));
                }
                push("fit", "pad".into());
                // Where the picture sits in the box: extend's own gravity (the centre
                // unless it says one), not the crop's.
                gravity = Some(place.unwrap_or_else(|| "center".into()));
                if self.gravity_offset.is_some() {
                    return Err(refuse("gravity", "offsets are not supported with extend"));
                }
            }
            Some(_) => {
                return Err(refuse(
                    "extend",
                    "is supported with resizing type `fit` only",
                ))
            }
        }
        if let Some(gravity) = gravity {
            push("gravity", gravity);
        }
        if let Some((x, y)) = self.gravity_offset {
            push("gravity_offset", format!("{x},{y}"));
        }
        if self.enlarge {
            push("enlarge", "1".into());
        }
        if let Some(dpr) = self.dpr {
            push("dpr", dpr);
        }
        if self.quality > 0 {
            push("q", self.quality.to_string());
        }
        if let Some(format) = self.format {
            push("format", format.into());
        }
        if let Some(sigma) = self.blur {
            push("blur", sigma);
        }
        if let Some(sigma) = self.sharpen {
            push("sharpen", sigma);
        }
        if self.rotate > 0 {
            push("rotate", self.rotate.to_string());
        }
        if let Some(bg) = self.background {
            push("bg", bg);
        }
        if let Some(preset) = self.preset {
            push("preset", preset);
        }
        if let Some((width, height, place)) = self.crop {
            if self.rotate != 0 {
                // imgproxy crops before it turns; imgcas after.
                return Err(refuse("crop", "cannot be combined with rotate here"));
            }
            let by_main = place.is_none();
            match place.or(self.gravity) {
                Some(g) if g == "smart" => {
                    return Err(refuse("crop", "with smart gravity is not supported"));
                }
                Some(g) if g.starts_with("fp:") || (by_main && self.gravity_offset.is_some()) => {
                    return Err(refuse(
                        "crop",
                        "is placed by a compass point without offsets here",
                    ));
                }
                Some(g) if g != "center" => push("crop_gravity", g),
                _ => {}
            }
            push("crop", format!("{width},{height}"));
        }
        Ok(out)
    }
}

/// The source and options of `path` (what follows `/imgproxy`, from its `/`), once its
/// signature is checked.
pub(super) fn translate(dialect: &Dialect, path: &str) -> Result<Translated, Error> {
    let rest = path.strip_prefix('/').unwrap_or(path);
    let (signature, signed) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => return Err(Error::NotFound("an imgproxy URL names its source".into())),
    };
    check_signature(dialect, signature, signed)?;
    let segments: Vec<&str> = signed[1..].split('/').collect();
    let mut options = Options::default();
    let mut at = 0;
    while let Some(segment) = segments.get(at) {
        if *segment == "plain" || *segment == "enc" || !segment.contains(':') {
            break;
        }
        let mut parts = segment.split(':');
        let name = parts.next().unwrap_or("");
        let args: Vec<&str> = parts.collect();
        options.apply(name, &args)?;
        at += 1;
    }
    let source = match segments.get(at) {
        Some(&"plain") => {
            let raw = segments[at + 1..].join("/");
            let (raw, extension) = match raw.rfind('@') {
                Some(i) => (&raw[..i], Some(&raw[i + 1..])),
                None => (raw.as_str(), None),
            };
            if let Some(ext) = extension {
                options.format = format("extension", ext)?.or(options.format);
            }
            percent_encoding::percent_decode_str(raw)
                .decode_utf8()
                .map_err(|_| refuse("url", "the plain source is not UTF-8 once decoded"))?
                .into_owned()
        }
        Some(&"enc") => {
            return Err(refuse("enc", "encrypted source URLs are not supported"));
        }
        Some(_) => {
            let joined = segments[at..].concat();
            let (encoded, extension) = match joined.rfind('.') {
                Some(i) => (&joined[..i], Some(&joined[i + 1..])),
                None => (joined.as_str(), None),
            };
            if let Some(ext) = extension {
                options.format = format("extension", ext)?.or(options.format);
            }
            let bytes = URL_SAFE_NO_PAD
                .decode(encoded.trim_end_matches('='))
                .or_else(|_| URL_SAFE.decode(encoded))
                .map_err(|_| refuse("url", "the source is not URL-safe Base64"))?;
            String::from_utf8(bytes).map_err(|_| refuse("url", "the source is not UTF-8"))?
        }
        None => return Err(Error::NotFound("an imgproxy URL names its source".into())),
    };
    Ok(Translated {
        source,
        pairs: options.pairs()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example of imgproxy's "Signing a URL" page: key `secret`, salt `hello`.
    const SIGNED_PATH: &str =
        "/rs:fill:300:400:0/g:sm/aHR0cDovL2V4YW1w/bGUuY29tL2ltYWdl/cy9jdXJpb3NpdHku/anBn.png";

    fn signing(size: usize) -> Dialect {
        Dialect {
            imgproxy_pairs: vec![(b"secret".to_vec(), b"hello".to_vec())],
            imgproxy_signature_size: size,
            ..Dialect::default()
        }
    }

    #[test]
    fn the_documentations_signature_verifies() {
        assert_eq!(
            sign(b"secret", b"hello", SIGNED_PATH, 32),
            "oKfUtW34Dvo2BGQehJFR4Nr0_rIjOtdtzJ3QFsUcXH8"
        );
        let url = format!("/oKfUtW34Dvo2BGQehJFR4Nr0_rIjOtdtzJ3QFsUcXH8{SIGNED_PATH}");
        let done = translate(&signing(32), &url).expect("signed");
        assert_eq!(done.source, "http://example.com/images/curiosity.jpg");
        assert_eq!(
            done.pairs,
            [
                ("w", "300"),
                ("h", "400"),
                ("fit", "crop"),
                ("gravity", "smart"),
                ("format", "png")
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
        );
        // Truncated to 8 bytes, as IMGPROXY_SIGNATURE_SIZE=8 signs.
        let short = format!("/oKfUtW34Dvo{SIGNED_PATH}");
        assert!(translate(&signing(8), &short).is_ok());
        assert!(translate(&signing(32), &short).is_err());
        // One character changed in the options, or in the signature: refused.
        let altered = url.replace("300:400", "300:401");
        assert!(matches!(
            translate(&signing(32), &altered),
            Err(Error::BadSignature(_))
        ));
        let altered = url.replace("oKfU", "oKfV");
        assert!(matches!(
            translate(&signing(32), &altered),
            Err(Error::BadSignature(_))
        ));
    }

    /// imgproxy's own signature tests: raw key and salt, path `/asd`.
    #[test]
    fn imgproxys_signature_tests_hold() {
        assert_eq!(
            sign(b"test-key", b"test-salt", "/asd", 32),
            "oWaL7QoW5TsgbuiS9-5-DI8S3Ibbo1gdB2SteJh3a20"
        );
        assert_eq!(sign(b"test-key", b"test-salt", "/asd", 8), "oWaL7QoW5Ts");
        assert_eq!(
            sign(b"test-key2", b"test-salt2", "/asd", 32),
            "jYz1UZ7j1BCdSzH3pZhaYf0iuz0vusoOTdqJsUT6WXI"
        );
        assert_ne!(sign(b"test-key", b"test-salt", "/asd", 8), "dtLwhdnPPis");
    }

    #[test]
    fn plain_sources_and_the_processing_pages_examples_translate() {
        let off = Dialect::default();
        let plain = translate(
            &off,
            "/insecure/pr:sharp/rs:fill:300:400:0/g:sm/plain/http://example.com/images/curiosity.jpg@png",
        )
        .expect("translates");
        assert_eq!(plain.source, "http://example.com/images/curiosity.jpg");
        assert!(plain.pairs.contains(&("preset".into(), "sharp".into())));
        let long = translate(
            &off,
            "/unsafe/preset:sharp/resize:fill:300:400:0/gravity:sm/plain/http://example.com/images/curiosity.jpg@png",
        )
        .expect("translates");
        assert_eq!(long.pairs, plain.pairs);
        let encoded = translate(
            &off,
            "/insecure/w:100/plain/http%3A%2F%2Fa.test%2Fx%3Fy%3D1",
        )
        .expect("translates");
        assert_eq!(encoded.source, "http://a.test/x?y=1");
        // Empty arguments leave what came before; a preset's fit stands unless one is said.
        let kept = translate(&off, "/insecure/w:300/h:200/rs:fill/plain/http://a.test/x").unwrap();
        assert_eq!(
            kept.pairs,
            [("w", "300"), ("h", "200"), ("fit", "crop")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
        );
        let preset = translate(&off, "/insecure/pr:card/plain/http://a.test/x").unwrap();
        assert_eq!(preset.pairs, [("preset".to_string(), "card".to_string())]);
        let auto = translate(&off, "/insecure/rs:auto:300:200/plain/http://a.test/x").unwrap();
        assert!(auto.pairs.contains(&("fit".into(), "auto".into())));
        assert_eq!(encoded.pairs[0], ("w".into(), "100".into()));
    }

    #[test]
    fn focal_points_and_offsets_are_imgcas_gravity_and_gravity_offset() {
        let off = Dialect::default();
        let pairs = |path: &str| translate(&off, path).expect("translates").pairs;
        let source = "plain/http://example.com/a.jpg";
        let fp = pairs(&format!("/insecure/rs:fill:300:200/g:fp:0.3:0.7/{source}"));
        assert!(
            fp.contains(&("gravity".into(), "fp:0.3:0.7".into())),
            "{fp:?}"
        );
        let moved = pairs(&format!("/insecure/rs:fill:300:200/g:no:10:-20/{source}"));
        assert!(moved.ends_with(&[
            ("gravity".into(), "north".into()),
            ("gravity_offset".into(), "10,-20".into())
        ]));
        let still = pairs(&format!("/insecure/rs:fill:300:200/g:so:0:0/{source}"));
        assert!(!still.iter().any(|(k, _)| k == "gravity_offset"));
    }

    #[test]
    fn a_crop_is_imgcas_crop_by_its_own_gravity_or_the_main_one() {
        let off = Dialect::default();
        let pairs = |path: &str| translate(&off, path).expect("translates").pairs;
        let source = "plain/http://example.com/a.jpg";
        assert!(
            pairs(&format!("/insecure/c:300:0.5:nowe/w:100/{source}")).ends_with(&[
                ("crop_gravity".into(), "northwest".into()),
                ("crop".into(), "300,0.5".into())
            ])
        );
        assert!(
            pairs(&format!("/insecure/g:so/c:1.7:0/{source}")).ends_with(&[
                ("crop_gravity".into(), "south".into()),
                ("crop".into(), "1,0".into())
            ])
        );
    }

    #[test]
    fn what_imgcas_cannot_honour_is_refused_by_name() {
        let off = Dialect::default();
        let refused = |path: &str| super::super::refused_for(&off, translate, path);
        let source = "plain/http://example.com/a.jpg";
        let cases = [
            ("wm:0.5", "wm"),
            ("g:ce:0.5:0", "gravity"),
            ("g:sm:10:0", "gravity"),
            ("g:fp:1.5:0", "gravity"),
            ("g:no:1:2:3", "gravity"),
            ("c:10:10:fp:0.5:0.5", "c"),
            ("c:10:10:no:5:0", "c"),
            ("g:no:5:0/c:10:10", "crop"),
            ("g:fp:0.5:0.5/c:10:10", "crop"),
            ("rot:45", "rot"),
            ("ex:1", "extend"),
            ("c:10:10/g:sm", "crop"),
            ("c:10:10/rot:90", "crop"),
            ("rs:fill:10:10:0:1", "extend"),
            ("sm:0", "sm"),
            ("dpr:auto", "dpr"),
            ("c:-50:NaN", "crop"),
            ("bl:-1", "bl"),
        ];
        for (options, option) in cases {
            assert_eq!(refused(&format!("/insecure/{options}/{source}")), option);
        }
        assert_eq!(refused(&format!("/insecure/{source}@bmp")), "extension");
        assert_eq!(refused("/insecure/enc/abc"), "enc");
        assert!(matches!(
            translate(&off, &format!("/abc/{source}")),
            Err(Error::BadSignature(_))
        ));
    }
}
