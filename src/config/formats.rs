//! The output format settings (`formats.*`): which formats `format=auto` offers, in which
//! order. Kept apart from `quality.*` because negotiation picks the encoder, not its quality.

use serde::Deserialize;

use imgcas_processors::AutoFormats;

/// `[formats]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FormatsConfig {
    /// `IMGCAS_AUTO_FORMATS`: the formats `format=auto` offers, best first, each to clients
    /// whose `Accept` lists it (a comma list of `avif`, `jxl`, `webp`; JPEG, or PNG for a
    /// source with alpha, is the implied fallback).
    #[serde(deserialize_with = "auto_formats_of_toml")]
    pub auto: AutoFormats,
}

fn auto_formats_of_toml<'de, D: serde::Deserializer<'de>>(d: D) -> Result<AutoFormats, D::Error> {
    let text = String::deserialize(d)?;
    AutoFormats::parse(&text).map_err(serde::de::Error::custom)
}
