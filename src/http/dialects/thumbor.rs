//! thumbor's URLs, read as imgcas's own:
//! `/{hmac|unsafe}/[trim/][AxB:CxD/][fit-in/][-]WxH/[halign/][valign/][smart/][filters:…/]{source}`
//! (below `/thumbor`), signed as thumbor signs them (URL-safe Base64, with its padding, of
//! HMAC-SHA1 over the path after the signature, without its leading `/`).
//!
//! thumbor resizes, then applies its filters: a `rotate()` turns the box too, so it becomes
//! imgcas's rotation (applied first) with the box and the crop's side turned to match. A
//! part or filter imgcas cannot honour exactly is refused with its name (400).

use base64::engine::general_purpose::URL_SAFE;
use base64::Engine;
use hmac::{KeyInit, Mac};

use super::{Dialect, Translated};
use crate::error::Error;

fn refuse(part: &str, message: impl Into<String>) -> Error {
    Error::invalid_option(part, message)
}

/// thumbor's signature of `signed` under `key`.
pub fn sign(key: &[u8], signed: &str) -> String {
    let mut mac = match hmac::Hmac::<sha1::Sha1>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts every key length"),
    };
    mac.update(signed.as_bytes());
    URL_SAFE.encode(mac.finalize().into_bytes())
}

fn check_signature(dialect: &Dialect, signature: &str, signed: &str) -> Result<(), Error> {
    match &dialect.thumbor_key {
        None if dialect.native_signing => Err(Error::BadSignature(
            "this server signs its URLs: thumbor URLs need IMGCAS_THUMBOR_KEY".into(),
        )),
        None => match signature {
            "unsafe" => Ok(()),
            _ => Err(Error::BadSignature(
                "signing is off: the signature segment must be `unsafe`".into(),
            )),
        },
        Some(key) => {
            let expected = sign(key, signed);
            match super::super::same_bytes(expected.as_bytes(), signature.as_bytes()) {
                true => Ok(()),
                false => Err(Error::BadSignature(
                    "the signature does not match the URL".into(),
                )),
            }
        }
    }
}

/// A box side: a number of pixels, or nothing (proportional); `orig` is refused.
fn side(v: &str) -> Result<Option<u32>, Error> {
    match v {
        "" | "0" => Ok(None),
        // thumbor's `orig` is the source's own side, unknown until its bytes are read.
        "orig" => Err(refuse(
            "size",
            "`orig` is not supported: give the side or 0",
        )),
        _ => v
            .parse()
            .map(Some)
            .map_err(|_| refuse("size", format!("`{v}` is not a number of pixels"))),
    }
}

/// A box: its width and height, each absent when proportional.
type BoxSides = (Option<u32>, Option<u32>);

/// `[-]W x [-]H`, if `segment` is one.
fn size(segment: &str) -> Option<Result<BoxSides, Error>> {
    let (w, h) = segment.split_once('x')?;
    let plain = |s: &str| s.is_empty() || s == "orig" || s.bytes().all(|b| b.is_ascii_digit());
    let (w_flip, w) = w.strip_prefix('-').map_or((false, w), |w| (true, w));
    let (h_flip, h) = h.strip_prefix('-').map_or((false, h), |h| (true, h));
    if !plain(w) || !plain(h) {
        return None;
    }
    if w_flip || h_flip {
        return Some(Err(refuse(
            "flip",
            "flipping (`-` before a side) is not supported",
        )));
    }
    Some(side(w).and_then(|w| Ok((w, side(h)?))))
}

/// `AxB:CxD`, a manual crop's left-top and right-bottom corners, if `segment` is one.
fn manual_crop(segment: &str) -> Option<[u32; 4]> {
    let (a, b) = segment.split_once(':')?;
    let corner = |p: &str| -> Option<(u32, u32)> {
        let (x, y) = p.split_once('x')?;
        Some((x.parse().ok()?, y.parse().ok()?))
    };
    let ((left, top), (right, bottom)) = (corner(a)?, corner(b)?);
    Some([left, top, right, bottom])
}

/// A filter's name and arguments: `name(a,b)`.
fn filter(text: &str) -> Result<(&str, Vec<&str>), Error> {
    let (name, rest) = text
        .split_once('(')
        .ok_or_else(|| refuse("filters", format!("`{text}` is not name(arguments)")))?;
    let args = rest
        .strip_suffix(')')
        .ok_or_else(|| refuse("filters", format!("`{text}` is not name(arguments)")))?;
    let args = match args.trim() {
        "" => Vec::new(),
        args => args.split(',').map(str::trim).collect(),
    };
    Ok((name, args))
}

/// Splits `filters:a(1):b(x,y)` at the colons between filters (none stands inside one).
fn filters(list: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ':' if depth == 0 => {
                out.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&list[start..]);
    out.into_iter().filter(|f| !f.is_empty()).collect()
}

/// The sixteen colour names of HTML 4, as hex.
fn named_colour(name: &str) -> Option<&'static str> {
    Some(match name.to_ascii_lowercase().as_str() {
        "black" => "000000",
        "silver" => "c0c0c0",
        "gray" | "grey" => "808080",
        "white" => "ffffff",
        "maroon" => "800000",
        "red" => "ff0000",
        "purple" => "800080",
        "fuchsia" => "ff00ff",
        "green" => "008000",
        "lime" => "00ff00",
        "olive" => "808000",
        "yellow" => "ffff00",
        "navy" => "000080",
        "blue" => "0000ff",
        "teal" => "008080",
        "aqua" => "00ffff",
        _ => return None,
    })
}

/// A compass gravity turned clockwise by `degrees` (the picture's side that ends there).
fn turned(gravity: &'static str, degrees: u32) -> &'static str {
    const RING: [&str; 8] = [
        "north",
        "northeast",
        "east",
        "southeast",
        "south",
        "southwest",
        "west",
        "northwest",
    ];
    match RING.iter().position(|g| *g == gravity) {
        Some(i) => RING[(i + (degrees / 45) as usize) % 8],
        None => gravity,
    }
}

/// The source and options of `path` (what follows `/thumbor`, from its `/`), once its
/// signature is checked.
pub(super) fn translate(dialect: &Dialect, path: &str) -> Result<Translated, Error> {
    let rest = path.strip_prefix('/').unwrap_or(path);
    let (signature, signed) = rest
        .split_once('/')
        .ok_or_else(|| Error::NotFound("a thumbor URL names its source".into()))?;
    check_signature(dialect, signature, signed)?;
    let mut segments = signed.split('/').peekable();
    let mut next_if = |test: &dyn Fn(&str) -> bool| segments.next_if(|s| test(s));
    if next_if(&|s| s == "meta" || s == "debug").is_some() {
        return Err(refuse(
            "meta",
            "thumbor's meta and debug answers are not supported",
        ));
    }
    // thumbor's trim without a tolerance cuts borders of exactly the top-left pixel's
    // colour: imgcas's trim=0. Its tolerance is a distance in RGB space, and its other corner
    // another reference: neither is imgcas's.
    let trim = match next_if(&|s| s == "trim" || s.starts_with("trim:")) {
        None => false,
        Some("trim" | "trim:top-left" | "trim:top-left:0" | "trim:0") => true,
        Some(_) => {
            return Err(refuse(
                "trim",
                "only trim by the top-left colour with no tolerance is supported",
            ))
        }
    };
    let crop = match next_if(&|s| manual_crop(s).is_some()).and_then(manual_crop) {
        Some([left, top, right, bottom]) if right > left && bottom > top => {
            Some((right - left, bottom - top, left, top))
        }
        Some(_) => {
            return Err(refuse(
                "crop",
                "the right-bottom corner is left of or above the left-top one",
            ))
        }
        None => None,
    };
    let fit_in = match next_if(&|s| s.ends_with("fit-in")) {
        Some("fit-in") => true,
        Some(other) => return Err(refuse(other, "only plain `fit-in` is supported")),
        None => false,
    };
    let (width, height) = match next_if(&|s| size(s).is_some()) {
        Some(segment) => size(segment).unwrap_or(Ok((None, None)))?,
        None => (None, None),
    };
    let halign = next_if(&|s| matches!(s, "left" | "center" | "right"));
    let valign = next_if(&|s| matches!(s, "top" | "middle" | "bottom"));
    let smart = next_if(&|s| s == "smart").is_some();
    let filter_list = next_if(&|s| s.starts_with("filters:"));
    let source: Vec<&str> = segments.collect();
    if source.is_empty() || source.iter().all(|s| s.is_empty()) {
        return Err(Error::NotFound("a thumbor URL names its source".into()));
    }

    // thumbor upscales a cropped picture, and fits one in without upscaling, unless a
    // filter says otherwise.
    let mut enlarge = !fit_in;
    let mut no_upscale = false;
    let (mut format, mut quality, mut blur, mut rotate, mut fill) = (None, None, None, 0, None);
    // focal(): the regions' box, whose middle the crop is centred on.
    let mut focal: Option<[u32; 4]> = None;
    for text in filter_list
        .and_then(|f| f.strip_prefix("filters:"))
        .map(filters)
        .unwrap_or_default()
    {
        let (name, args) = filter(text)?;
        let one = || match args.as_slice() {
            [one] => Ok(*one),
            _ => Err(refuse(name, "takes one argument")),
        };
        match name {
            "format" => {
                format = Some(match one()? {
                    "jpeg" | "jpg" => "jpeg",
                    "png" => "png",
                    "webp" => "webp",
                    "gif" => "gif",
                    "avif" => "avif",
                    other => {
                        return Err(refuse(name, format!("format `{other}` is not supported")))
                    }
                })
            }
            "quality" => quality = Some(one()?.to_string()),
            "focal" => {
                let [l, t, r, b] = manual_crop(one()?)
                    .filter(|[l, t, r, b]| r >= l && b >= t)
                    .ok_or_else(|| refuse(name, "takes a region LxT:RxB in pixels"))?;
                focal = Some(match focal {
                    None => [l, t, r, b],
                    Some([fl, ft, fr, fb]) => [fl.min(l), ft.min(t), fr.max(r), fb.max(b)],
                });
            }
            "blur" => {
                // blur(radius[, sigma]): the sigma is the radius unless given.
                let sigma = match args.as_slice() {
                    [radius] => *radius,
                    [_, sigma] => *sigma,
                    _ => return Err(refuse(name, "takes a radius and an optional sigma")),
                };
                blur = Some(sigma.to_string()).filter(|s| s != "0");
            }
            "rotate" => {
                let degrees: i64 = one()?
                    .parse()
                    .map_err(|_| refuse(name, "the angle is a number of degrees"))?;
                // thumbor turns by multiples of 90 counter-clockwise and ignores the rest.
                if degrees % 90 == 0 {
                    rotate = (360 - degrees.rem_euclid(360) as u32) % 360;
                }
            }
            "fill" => {
                let colour = args.first().copied().unwrap_or("");
                if args.get(1).is_some_and(|t| matches!(*t, "true" | "1")) {
                    return Err(refuse(name, "filling transparent areas is not supported"));
                }
                let hex = match (named_colour(colour), colour.len()) {
                    (Some(hex), _) => hex.to_string(),
                    (None, 3) => colour.chars().flat_map(|c| [c, c]).collect::<String>(),
                    (None, _) => colour.to_string(),
                };
                if hex.len() != 6 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(refuse(
                        name,
                        "the colour is 3 or 6 hex digits or one of the 16 HTML colour names here",
                    ));
                }
                fill = Some(hex.to_ascii_lowercase());
            }
            "no_upscale" => (enlarge, no_upscale) = (false, true),
            "upscale" => (enlarge, no_upscale) = (true, false),
            // imgcas never keeps the source's metadata or profile.
            "strip_exif" | "strip_icc" => {}
            other => {
                return Err(refuse(
                    other,
                    "this thumbor filter is not supported by imgcas",
                ))
            }
        }
    }

    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut push = |k: &str, v: String| pairs.push((k.to_string(), v));
    // The box is thumbor's before its rotation: imgcas turns first, then fits.
    let (width, height) = match rotate {
        90 | 270 => (height, width),
        _ => (width, height),
    };
    if let Some(w) = width {
        push("w", w.to_string());
    }
    if let Some(h) = height {
        push("h", h.to_string());
    }
    let gravity = match (
        smart,
        halign.unwrap_or("center"),
        valign.unwrap_or("middle"),
    ) {
        (true, _, _) => "smart",
        (false, h, v) => match (v, h) {
            ("top", "left") => "northwest",
            ("top", "center") => "north",
            ("top", _) => "northeast",
            ("middle", "left") => "west",
            ("middle", "center") => "center",
            ("middle", _) => "east",
            (_, "left") => "southwest",
            (_, "center") => "south",
            _ => "southeast",
        },
    };
    match (fit_in, fill) {
        (true, Some(colour)) => {
            push("fit", "pad".into());
            push("bg", colour);
        }
        (true, None) => push("fit", "contain".into()),
        (false, Some(_)) => return Err(refuse("fill", "is supported with fit-in only")),
        // thumbor's no_upscale() clamps each side of the box to the source's, then crops to
        // what is left: a box larger than the source both ways gives the source whole, and
        // one larger one way only cuts the other. That is `fit=crop` without enlarge, where
        // `cover` would shrink the box to its own shape.
        (false, None) => {
            push("fit", if no_upscale { "crop" } else { "cover" }.into());
            match focal {
                // Focal points lead over the alignment and smart detection, as in thumbor.
                Some(_) if rotate != 0 => {
                    return Err(refuse("focal", "cannot be combined with rotate() here"));
                }
                Some([l, t, r, b]) => {
                    let middle = |a: u32, b: u32| (u64::from(a) + u64::from(b)) / 2;
                    push(
                        "gravity",
                        format!("fp:{}px:{}px", middle(l, r), middle(t, b)),
                    );
                }
                None => push("gravity", turned(gravity, rotate).into()),
            }
        }
    }
    if enlarge {
        push("enlarge", "1".into());
    }
    if let Some(q) = quality {
        push("q", q);
    }
    if let Some(f) = format {
        push("format", f.into());
    }
    if let Some(sigma) = blur {
        push("blur", sigma);
    }
    if rotate > 0 {
        push("rotate", rotate.to_string());
    }
    if trim {
        if crop.is_some() {
            return Err(refuse("trim", "cannot be combined with a manual crop here"));
        }
        push("trim", "0".into());
    }
    if let Some((width, height, left, top)) = crop {
        if rotate > 0 || smart {
            return Err(refuse(
                "crop",
                "a manual crop cannot be combined with rotate() or smart here",
            ));
        }
        push("crop", format!("{width},{height},{left},{top}"));
    }
    // thumbor reads its source unquoted, and as http:// when it names no scheme.
    let raw = source.join("/");
    let decoded = percent_encoding::percent_decode_str(&raw)
        .decode_utf8()
        .map_err(|_| refuse("url", "the source is not UTF-8 once decoded"))?;
    let source = match decoded.starts_with("http://") || decoded.starts_with("https://") {
        true => decoded.into_owned(),
        false => format!("http://{decoded}"),
    };
    Ok(Translated { source, pairs })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// thumbor's library scenarios (docs/libraries.rst) and libthumbor's tests: key
    /// `my-security-key`.
    const VECTORS: [(&str, &str); 7] = [
        (
            "300x200/my.server.com/some/path/to/image.jpg",
            "8ammJH8D-7tXy6kU3lTvoXlhu4o=",
        ),
        (
            "meta/my.server.com/some/path/to/image.jpg",
            "Ps3ORJDqxlSQ8y00T29GdNAh2CY=",
        ),
        (
            "smart/my.server.com/some/path/to/image.jpg",
            "-2NHpejRK2CyPAm61FigfQgJBxw=",
        ),
        (
            "fit-in/my.server.com/some/path/to/image.jpg",
            "uvLnA6TJlF-Cc-L8z9pEtfasO3s=",
        ),
        (
            "filters:brightness(10):contrast(20)/my.server.com/some/path/to/image.jpg",
            "ZZtPCw-BLYN1g42Kh8xTcRs0Qls=",
        ),
        (
            "10x10:200x200/300x200/my.server.com/some/path/to/image.jpg",
            "B35oBEIwztbc3jm7vsdqLez2C78=",
        ),
        (
            "10x10:200x200/300x200/filters:brightness(20):contrast(10)/my.server.com/some/path/to/image.jpg",
            "as8U2DbUUtTMgvPF26LkjS3MocY=",
        ),
    ];

    fn keyed() -> Dialect {
        Dialect {
            thumbor_key: Some(b"my-security-key".to_vec()),
            ..Dialect::default()
        }
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_documentations_signatures_verify() {
        for (signed, signature) in VECTORS {
            assert_eq!(sign(b"my-security-key", signed), signature, "{signed}");
        }
        let done =
            translate(&keyed(), &format!("/{}/{}", VECTORS[0].1, VECTORS[0].0)).expect("signed");
        assert_eq!(done.source, "http://my.server.com/some/path/to/image.jpg");
        assert_eq!(
            done.pairs,
            pairs(&[
                ("w", "300"),
                ("h", "200"),
                ("fit", "cover"),
                ("gravity", "center"),
                ("enlarge", "1")
            ])
        );
        let fit_in =
            translate(&keyed(), &format!("/{}/{}", VECTORS[3].1, VECTORS[3].0)).expect("signed");
        assert_eq!(fit_in.pairs, pairs(&[("fit", "contain")]));
        // Signed, but asking what imgcas does not do: refused by name, after the check.
        let filters = translate(&keyed(), &format!("/{}/{}", VECTORS[4].1, VECTORS[4].0));
        assert!(
            matches!(&filters, Err(Error::InvalidOption { option, .. }) if option == "brightness"),
            "{filters:?}"
        );
        let altered = format!("/{}/{}", VECTORS[0].1, VECTORS[0].0.replace("300", "301"));
        assert!(matches!(
            translate(&keyed(), &altered),
            Err(Error::BadSignature(_))
        ));
        assert!(matches!(
            translate(&keyed(), &format!("/unsafe/{}", VECTORS[0].0)),
            Err(Error::BadSignature(_))
        ));
    }

    #[test]
    fn parts_and_filters_translate_or_are_refused_by_name() {
        let off = Dialect::default();
        let path = "/unsafe/fit-in/400x300/filters:format(webp):quality(70):fill(f00):upscale()/https%3A%2F%2Fa.test%2Fp.jpg";
        let done = translate(&off, path).expect("translates");
        assert_eq!(done.source, "https://a.test/p.jpg");
        assert_eq!(
            done.pairs,
            pairs(&[
                ("w", "400"),
                ("h", "300"),
                ("fit", "pad"),
                ("bg", "ff0000"),
                ("enlarge", "1"),
                ("q", "70"),
                ("format", "webp")
            ])
        );
        // Focal regions: the crop is centred on the middle of their box, over the alignment.
        let focal =
            "/unsafe/300x200/left/filters:focal(100x50:300x250):focal(20x40:60x60)/a.test/p.jpg";
        let focal = translate(&off, focal).expect("translates");
        assert_eq!(
            focal.pairs,
            pairs(&[
                ("w", "300"),
                ("h", "200"),
                ("fit", "cover"),
                ("gravity", "fp:160px:145px"),
                ("enlarge", "1")
            ])
        );
        for bad in [
            "focal(10x10)",
            "focal(30x30:10x10)",
            "focal(1x1:2x2):rotate(90)",
        ] {
            let path = format!("/unsafe/300x200/filters:{bad}/a.test/p.jpg");
            assert!(
                matches!(translate(&off, &path), Err(Error::InvalidOption { option, .. }) if option == "focal"),
                "{bad}"
            );
        }
        // Turned a quarter counter-clockwise after a 300×200 crop kept to the left: imgcas
        // turns first (270 clockwise), into a 200×300 box, kept to the bottom.
        let turned = translate(&off, "/unsafe/300x200/left/filters:rotate(90)/a.test/p.jpg")
            .expect("translates");
        assert_eq!(
            turned.pairs,
            pairs(&[
                ("w", "200"),
                ("h", "300"),
                ("fit", "cover"),
                ("gravity", "south"),
                ("enlarge", "1"),
                ("rotate", "270")
            ])
        );
        let refused = |path: &str| super::super::refused_for(&off, translate, path);
        assert_eq!(refused("/unsafe/trim:bottom-right/a.test/p.jpg"), "trim");
        assert_eq!(refused("/unsafe/trim:top-left:30/a.test/p.jpg"), "trim");
        let trimmed = translate(&off, "/unsafe/trim/300x200/a.test/p.jpg").unwrap();
        assert_eq!(trimmed.pairs.last(), Some(&("trim".into(), "0".into())));
        assert_eq!(refused("/unsafe/90x90:10x10/a.test/p.jpg"), "crop");
        assert_eq!(refused("/unsafe/10x10:90x90/smart/a.test/p.jpg"), "crop");
        let manual = translate(&off, "/unsafe/10x20:110x70/50x0/a.test/p.jpg").expect("translates");
        assert_eq!(
            manual.pairs.last(),
            Some(&("crop".into(), "100,50,10,20".into()))
        );
        assert_eq!(refused("/unsafe/-300x200/a.test/p.jpg"), "flip");
        assert_eq!(refused("/unsafe/origx100/a.test/p.jpg"), "size");
        assert_eq!(
            refused("/unsafe/adaptive-fit-in/300x200/a.test/p.jpg"),
            "adaptive-fit-in"
        );
        assert_eq!(
            refused("/unsafe/300x200/filters:grayscale()/a.test/p.jpg"),
            "grayscale"
        );
        assert_eq!(
            refused("/unsafe/300x200/filters:fill(blue)/a.test/p.jpg"),
            "fill"
        );
        assert_eq!(
            refused("/unsafe/fit-in/300x200/filters:fill(papayawhip)/a.test/p.jpg"),
            "fill"
        );
        let blue = translate(
            &off,
            "/unsafe/fit-in/300x200/filters:fill(blue)/a.test/p.jpg",
        )
        .unwrap();
        assert!(blue.pairs.contains(&("bg".into(), "0000ff".into())));
    }
}
