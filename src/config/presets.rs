//! Presets as the configuration writes them: a query of options (`w=200&h=200&fit=cover`),
//! and the fallback image a preset may name among them (`fallback=<sha256 or path>`); and
//! watermarks, a query of their settings (`hash=<sha256>&position=southeast`).

use std::collections::BTreeMap;

use super::FallbackSource;

/// The fallback image a preset's options name (`Err`: named more than once).
pub type NamedFallback = Result<String, String>;

/// The key a preset's options name its fallback image with.
pub const PRESET_FALLBACK: &str = "fallback";

/// `a=1&b=2` as decoded (name, value) pairs: a query string, or a preset's options.
pub fn option_pairs(options: &str) -> Vec<(String, String)> {
    url::form_urlencoded::parse(options.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// A preset's processing options, and the fallback image it names, if any (`Err`: named
/// more than once).
pub fn preset_parts(options: &str) -> (Vec<(String, String)>, Option<NamedFallback>) {
    let (fallbacks, pairs): (Vec<_>, Vec<_>) = option_pairs(options)
        .into_iter()
        .partition(|(k, _)| k == PRESET_FALLBACK);
    let fallback = match fallbacks.as_slice() {
        [] => None,
        [(_, image)] => Some(Ok(image.clone())),
        _ => Some(Err(format!("`{PRESET_FALLBACK}` is given more than once"))),
    };
    (pairs, fallback)
}

/// A name of the configuration's (a preset's, a watermark's): a plain word, by the rule a
/// request's `wm` is held to.
fn check_name(name: &str) -> Result<(), String> {
    match imgcas_processors::spec::is_plain_name(name) {
        true => Ok(()),
        false => Err("a name is up to 64 letters, digits, `_` and `-`".into()),
    }
}

/// A watermark's name is a plain word and its settings parse.
pub(super) fn check_watermark(name: &str, options: &str) -> Result<(), String> {
    check_name(name)?;
    imgcas_processors::Placement::parse(options)
        .map(|_| ())
        .map_err(|e| format!("`{}`: {}", e.option, e.message))
}

/// A preset's name is a plain word and its options parse as a spec (a preset naming
/// another preset is refused: one level keeps the expansion obvious), naming only
/// configured watermarks.
pub(super) fn check_preset(
    name: &str,
    options: &str,
    watermarks: &BTreeMap<String, String>,
) -> Result<(), String> {
    check_name(name)?;
    let (pairs, fallback) = preset_parts(options);
    if let Some((key, _)) = pairs
        .iter()
        .find(|(k, _)| matches!(k.as_str(), "preset" | "url" | "sig"))
    {
        return Err(format!("`{key}` cannot be part of a preset"));
    }
    if let Some(fallback) = fallback {
        FallbackSource::of(&fallback?).map_err(|m| format!("`{PRESET_FALLBACK}`: {m}"))?;
    }
    let spec =
        imgcas_processors::Spec::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map_err(|e| format!("option `{}`: {}", e.option, e.message))?;
    match spec.shape.watermark {
        Some(wm) if !watermarks.contains_key(&wm.name) => {
            Err(format!("`wm`: no watermark named `{}`", wm.name))
        }
        _ => Ok(()),
    }
}
