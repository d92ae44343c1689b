//! What `q` asks for: a fixed encoder quality, or `q=auto:<level>`, a look to reach (a
//! SSIMULACRA2 score, the level's target) in the fewest bytes, searched per variant by
//! [`crate::auto_quality`]. Here the names, the targets and the forms both canonical forms
//! write; the search is the encoder's business.

use std::fmt;

/// A `q=auto` level, from the closest look to the smallest bytes (`auto` alone is `good`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AutoLevel {
    Best,
    Good,
    Eco,
    Low,
}

impl AutoLevel {
    pub const ALL: [AutoLevel; 4] = [
        AutoLevel::Best,
        AutoLevel::Good,
        AutoLevel::Eco,
        AutoLevel::Low,
    ];

    pub fn name(self) -> &'static str {
        match self {
            AutoLevel::Best => "best",
            AutoLevel::Good => "good",
            AutoLevel::Eco => "eco",
            AutoLevel::Low => "low",
        }
    }

    pub fn from_name(name: &str) -> Option<AutoLevel> {
        AutoLevel::ALL.into_iter().find(|l| l.name() == name)
    }

    /// One level down, as `Save-Data: on` asks (`low` stays `low`).
    pub fn lower(self) -> AutoLevel {
        match self {
            AutoLevel::Best => AutoLevel::Good,
            AutoLevel::Good => AutoLevel::Eco,
            AutoLevel::Eco | AutoLevel::Low => AutoLevel::Low,
        }
    }
}

impl fmt::Display for AutoLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `q` as a request gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QualityRequest {
    /// `q=1`–`100`: the encoder's own quality.
    Fixed(u8),
    /// `q=auto` or `q=auto:<level>`.
    Auto(AutoLevel),
}

impl QualityRequest {
    /// Reads `1`–`100`, `auto` or `auto:<level>`; `None` for anything else.
    pub fn from_value(value: &str) -> Option<QualityRequest> {
        if value == "auto" {
            return Some(QualityRequest::Auto(AutoLevel::Good));
        }
        if let Some(level) = value.strip_prefix("auto:") {
            return AutoLevel::from_name(level).map(QualityRequest::Auto);
        }
        match value.parse::<u8>() {
            Ok(q) if (1..=100).contains(&q) => Some(QualityRequest::Fixed(q)),
            _ => None,
        }
    }
}

impl fmt::Display for QualityRequest {
    /// The request form: the number, or `auto:<level>` (`auto` written out as `auto:good`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QualityRequest::Fixed(q) => write!(f, "{q}"),
            QualityRequest::Auto(level) => write!(f, "auto:{level}"),
        }
    }
}

/// The SSIMULACRA2 score each level reaches (settings `quality.target_<level>`). 90 is
/// visually lossless at a normal viewing distance, 70 high quality, 50 medium (the metric's
/// own scale).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoTargets {
    pub best: u8,
    pub good: u8,
    pub eco: u8,
    pub low: u8,
}

impl Default for AutoTargets {
    fn default() -> Self {
        AutoTargets {
            best: 80,
            good: 70,
            eco: 60,
            low: 50,
        }
    }
}

impl AutoTargets {
    pub fn of(&self, level: AutoLevel) -> u8 {
        match level {
            AutoLevel::Best => self.best,
            AutoLevel::Good => self.good,
            AutoLevel::Eco => self.eco,
            AutoLevel::Low => self.low,
        }
    }
}

/// The quality of a resolved spec (of a lossy output).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Quality {
    Fixed(u8),
    /// Searched: the fewest bytes scoring at least `target`.
    Auto {
        level: AutoLevel,
        target: u8,
    },
}

impl fmt::Display for Quality {
    /// The variant key's form: the number, or `auto:<level>:<target>` (the target is in the
    /// key, so a changed setting makes new variants rather than serving the old ones).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Quality::Fixed(q) => write!(f, "{q}"),
            Quality::Auto { level, target } => write!(f, "auto:{level}:{target}"),
        }
    }
}
