//! The quality settings (`quality.*`): what a request that names no `q` gets, and the
//! SSIMULACRA2 score each `q=auto` level reaches.

use serde::Deserialize;

use imgcas_processors::{AutoLevel, AutoTargets, QualityRequest, Spec};

/// What a request that names no `q` gets, and what each `q=auto` level aims at.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QualityConfig {
    /// `IMGCAS_QUALITY_DEFAULT`: `fixed` (each format's own number: JPEG 82, WebP 80, AVIF
    /// 60) or `auto[:<level>]`, as if every request without `q` said that.
    #[serde(deserialize_with = "quality_default_of_toml")]
    pub default: QualityDefault,
    /// The SSIMULACRA2 score each `q=auto` level reaches (`IMGCAS_QUALITY_TARGET_<LEVEL>`).
    pub target_best: u8,
    pub target_good: u8,
    pub target_eco: u8,
    pub target_low: u8,
}

/// `quality.default`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QualityDefault {
    Fixed,
    Auto(AutoLevel),
}

impl QualityDefault {
    pub fn parse(v: &str) -> Result<QualityDefault, String> {
        match v.trim().to_ascii_lowercase().as_str() {
            "fixed" => Ok(QualityDefault::Fixed),
            other => match QualityRequest::from_value(other) {
                Some(QualityRequest::Auto(level)) => Ok(QualityDefault::Auto(level)),
                _ => Err("must be `fixed`, `auto` or `auto:best|good|eco|low`".into()),
            },
        }
    }

    /// Gives `spec` the `q` a request without one gets; a `q` of its own stays.
    pub fn fill(self, spec: &mut Spec) {
        if spec.quality.is_none() {
            spec.quality = self.request();
        }
    }

    /// The `q` a request without one gets.
    pub fn request(self) -> Option<QualityRequest> {
        match self {
            QualityDefault::Fixed => None,
            QualityDefault::Auto(level) => Some(QualityRequest::Auto(level)),
        }
    }
}

fn quality_default_of_toml<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<QualityDefault, D::Error> {
    let text = String::deserialize(d)?;
    QualityDefault::parse(&text).map_err(serde::de::Error::custom)
}

impl Default for QualityConfig {
    fn default() -> Self {
        let targets = AutoTargets::default();
        QualityConfig {
            default: QualityDefault::Fixed,
            target_best: targets.best,
            target_good: targets.good,
            target_eco: targets.eco,
            target_low: targets.low,
        }
    }
}

impl QualityConfig {
    pub fn targets(&self) -> AutoTargets {
        AutoTargets {
            best: self.target_best,
            good: self.target_good,
            eco: self.target_eco,
            low: self.target_low,
        }
    }

    /// The targets' bounds: the key of the first out of them and why.
    pub(super) fn check(&self) -> Result<(), (&'static str, &'static str)> {
        let targets = [
            ("quality.target_best", self.target_best),
            ("quality.target_good", self.target_good),
            ("quality.target_eco", self.target_eco),
            ("quality.target_low", self.target_low),
        ];
        match targets.into_iter().find(|(_, t)| !(10..=95).contains(t)) {
            Some((key, _)) => Err((key, "must be a SSIMULACRA2 score from 10 to 95")),
            None => Ok(()),
        }
    }
}
