//! The configuration's structured settings, written as text and typed once, when the
//! configuration is checked ([`Structured`], from `Config::validate`): presets, a query of
//! options (`w=200&h=200&fit=cover`) with the fallback image a preset may name among them
//! (`fallback=<sha256 or path>`); watermarks, a query of their settings
//! (`hash=<sha256>&position=southeast`); the global fallback image; imgproxy's keys and
//! salts. A bad one stops the start with its setting's name; no request parses them again.

use std::collections::BTreeMap;

use imgcas_processors::Placement;

use super::{bad, Config, ConfigError, FallbackSource, KeyAndSalt};
use crate::hash::ContentHash;

/// The structured settings, typed.
#[derive(Debug, Clone, Default)]
pub struct Structured {
    pub presets: BTreeMap<String, Preset>,
    pub watermarks: BTreeMap<String, Watermark>,
    /// `fallback.image`.
    pub fallback: Option<FallbackSource>,
    /// imgproxy's key/salt pairs, decoded (empty: its signing off).
    pub imgproxy_pairs: Vec<KeyAndSalt>,
}

/// A preset: its processing options, and the fallback image it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preset {
    pub options: Vec<(String, String)>,
    pub fallback: Option<FallbackSource>,
}

/// A watermark: where and how its overlay is drawn, and the overlay original.
#[derive(Debug, Clone, PartialEq)]
pub struct Watermark {
    pub placement: Placement,
    pub overlay: ContentHash,
}

impl Structured {
    /// The structured settings of `config`, each checked (an error names its setting).
    pub(super) fn of(config: &Config) -> Result<Structured, ConfigError> {
        let mut presets = BTreeMap::new();
        for (name, options) in &config.presets {
            let preset = preset(name, options, &config.watermarks)
                .map_err(|m| bad(&format!("presets.{name}"), m))?;
            presets.insert(name.clone(), preset);
        }
        let mut watermarks = BTreeMap::new();
        for (name, options) in &config.watermarks {
            let watermark =
                watermark(name, options).map_err(|m| bad(&format!("watermarks.{name}"), m))?;
            watermarks.insert(name.clone(), watermark);
        }
        let fallback = match &config.fallback.image {
            Some(image) => Some(FallbackSource::of(image).map_err(|m| bad("fallback.image", m))?),
            None => None,
        };
        let imgproxy_pairs = config
            .imgproxy
            .pairs()
            .map_err(|m| bad("imgproxy.key", m))?;
        Ok(Structured {
            presets,
            watermarks,
            fallback,
            imgproxy_pairs,
        })
    }
}

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
fn preset_parts(options: &str) -> (Vec<(String, String)>, Option<NamedFallback>) {
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

/// A watermark: its name a plain word, its settings parsed.
fn watermark(name: &str, options: &str) -> Result<Watermark, String> {
    check_name(name)?;
    let placement =
        Placement::parse(options).map_err(|e| format!("`{}`: {}", e.option, e.message))?;
    let overlay = placement
        .overlay
        .parse()
        .map_err(|_| "`hash`: must be a SHA-256 (64 hex digits)".to_string())?;
    Ok(Watermark { placement, overlay })
}

/// A preset: its name a plain word, its options parsed as a spec (a preset naming another
/// preset is refused: one level keeps the expansion obvious), naming only configured
/// watermarks.
fn preset(
    name: &str,
    options: &str,
    watermarks: &BTreeMap<String, String>,
) -> Result<Preset, String> {
    check_name(name)?;
    let (pairs, fallback) = preset_parts(options);
    if let Some((key, _)) = pairs
        .iter()
        .find(|(k, _)| matches!(k.as_str(), "preset" | "url" | "sig"))
    {
        return Err(format!("`{key}` cannot be part of a preset"));
    }
    let fallback = match fallback {
        Some(text) => {
            Some(FallbackSource::of(&text?).map_err(|m| format!("`{PRESET_FALLBACK}`: {m}"))?)
        }
        None => None,
    };
    let spec =
        imgcas_processors::Spec::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map_err(|e| format!("option `{}`: {}", e.option, e.message))?;
    if let Some(wm) = spec.shape.watermark {
        if !watermarks.contains_key(&wm.name) {
            return Err(format!("`wm`: no watermark named `{}`", wm.name));
        }
    }
    Ok(Preset {
        options: pairs,
        fallback,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12";

    /// What a request uses comes typed out of the check: the preset's pairs and fallback,
    /// the watermark's placement and overlay, the fallback image, imgproxy's keys.
    #[test]
    fn the_structured_settings_come_typed_out_of_the_check() {
        let mut config = Config::default();
        config.watermarks.insert(
            "logo".into(),
            format!("hash={}&position=north&opacity=0.5", HASH.to_uppercase()),
        );
        config
            .presets
            .insert("thumb".into(), format!("w=200&wm=logo&fallback={HASH}"));
        config.fallback.image = Some("/srv/imgcas/placeholder.png".into());
        config.imgproxy.key = Some("aa".into());
        config.imgproxy.salt = Some("bb".into());
        let structured = config.validate().expect("valid");
        let hash: ContentHash = HASH.parse().expect("a hash");
        let thumb = &structured.presets["thumb"];
        assert_eq!(
            thumb.options,
            [("w".into(), "200".into()), ("wm".into(), "logo".into())]
        );
        assert_eq!(thumb.fallback, Some(FallbackSource::Stored(hash)));
        let logo = &structured.watermarks["logo"];
        assert_eq!(logo.overlay, hash);
        assert_eq!(logo.placement.opacity.to_string(), "0.5");
        assert_eq!(
            structured.fallback,
            Some(FallbackSource::File("/srv/imgcas/placeholder.png".into()))
        );
        assert_eq!(structured.imgproxy_pairs, vec![(vec![0xaa], vec![0xbb])]);
    }

    /// A bad structured setting stops the start with its own name.
    #[test]
    fn a_bad_structured_setting_is_named() {
        let refused = |change: &dyn Fn(&mut Config)| {
            let mut config = Config::default();
            change(&mut config);
            config.validate().expect_err("refused").to_string()
        };
        let named = [
            (
                refused(&|c| {
                    c.watermarks.insert("logo".into(), "position=north".into());
                }),
                "watermarks.logo",
            ),
            (
                refused(&|c| {
                    c.presets.insert("thumb".into(), "w=big".into());
                }),
                "presets.thumb",
            ),
            (
                refused(&|c| {
                    c.presets.insert("thumb".into(), "w=10&wm=none".into());
                }),
                "presets.thumb",
            ),
            (
                refused(&|c| c.fallback.image = Some(" ".into())),
                "fallback.image",
            ),
            (
                refused(&|c| c.imgproxy.key = Some("not hex".into())),
                "imgproxy.key",
            ),
        ];
        for (message, setting) in named {
            assert!(message.starts_with(setting), "{message}");
        }
    }
}
