//! The settings of moderation (`[moderation]`, `IMGCAS_VALIDATION_*`, `IMGCAS_BLOCKLIST_*`):
//! the blocklist's default radius and the optional validation hook that every new original
//! is shown to before it is stored.

use std::time::Duration;

use serde::Deserialize;
use url::Url;

use super::de_duration;

/// What a new original gets when the validation service does not answer in time or answers
/// something unreadable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Refused for now (503 `validation_unavailable`): nothing unchecked is stored.
    Closed,
    /// Stored as if allowed.
    Open,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModerationConfig {
    /// The operator's validation service: before a new original is stored, its hash,
    /// format, size, fingerprint and a small JPEG preview are POSTed here. This address
    /// alone is exempt from the origin guard (it is configured, not named by a request).
    pub validation_url: Option<String>,
    /// Fail-closed or fail-open.
    pub validation_on_error: OnError,
    /// How long the service has to answer.
    #[serde(deserialize_with = "de_duration")]
    pub validation_timeout: Duration,
    /// The fingerprint radius of a blocklist entry that names none (phash bits).
    pub blocklist_radius: u32,
}

impl Default for ModerationConfig {
    fn default() -> Self {
        ModerationConfig {
            validation_url: None,
            validation_on_error: OnError::Closed,
            validation_timeout: Duration::from_secs(2),
            blocklist_radius: 8,
        }
    }
}

impl ModerationConfig {
    /// The validation service's address, parsed (checked by `Config::validate`).
    pub fn validation_url(&self) -> Option<Url> {
        self.validation_url
            .as_deref()
            .and_then(|u| Url::parse(u).ok())
    }

    /// What is wrong with these settings, if anything: (key, why).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if let Some(raw) = &self.validation_url {
            match Url::parse(raw) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => {}
                _ => {
                    return Err((
                        "moderation.validation_url",
                        format!("`{raw}` is not an http(s) URL"),
                    ))
                }
            }
        }
        if self.validation_timeout.is_zero() {
            return Err((
                "moderation.validation_timeout",
                "must be above 0".to_string(),
            ));
        }
        if self.blocklist_radius > 16 {
            return Err((
                "moderation.blocklist_radius",
                "must be at most 16 (of 64 bits; wider matches distinct pictures)".to_string(),
            ));
        }
        Ok(())
    }
}

/// Parses `open`/`closed` (the environment's form).
pub fn on_error(v: &str) -> Result<OnError, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "open" => Ok(OnError::Open),
        "closed" => Ok(OnError::Closed),
        _ => Err("must be `open` or `closed`".into()),
    }
}
