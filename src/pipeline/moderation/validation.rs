//! The validation hook (`moderation.validation_url`): the operator's own service sees every
//! new original before it is stored and says whether to keep it.
//!
//! imgcas POSTs JSON — `sha256`, `format`, `width`, `height`, `bytes`, `fingerprint` (64
//! hex digits, when the bytes are a picture) and `preview` (a JPEG at most 256 pixels wide,
//! base64) — and reads `{"allow": true}` or `{"allow": false, "reason": "…"}` from a 2xx
//! answer. A refusal lists the hash on the blocklist (`matched: "validation"`), so every
//! node refuses it from then on without asking again; an allowance is remembered here per
//! hash. No answer in `moderation.validation_timeout` (or an unreadable one) refuses the
//! bytes for now with 503 `validation_unavailable` (fail-closed, the default) or stores them
//! (`validation_on_error = "open"`).
//!
//! The service's address is configured by the operator, not named by a request: its client
//! is its own (never the origin fetcher, whose guard refuses private addresses), follows no
//! redirect, and sends to that address only.

use base64::Engine;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use imgcas_processors::{self as processors, Fingerprint, Spec};

use crate::admission::Tier;
use crate::config::moderation::OnError;
use crate::error::Error;
use crate::hash::ContentHash;
use crate::maps::OriginalInfo;
use crate::pipeline::{blocking, Pipeline};

/// Hashes whose allowance is remembered.
const REMEMBERED: u64 = 100_000;

/// The hook's client and what it allowed.
pub(in crate::pipeline) struct Validation {
    client: reqwest::Client,
    url: url::Url,
    on_error: OnError,
    allowed: moka::sync::Cache<ContentHash, ()>,
}

#[derive(Serialize)]
struct Asked<'a> {
    sha256: String,
    format: Option<&'a str>,
    width: Option<u32>,
    height: Option<u32>,
    bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    fingerprint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    preview: Option<String>,
}

#[derive(Deserialize)]
struct Answer {
    allow: bool,
    #[serde(default)]
    reason: Option<String>,
}

impl Validation {
    /// The hook, when one is configured.
    pub(in crate::pipeline) fn new(
        config: &crate::config::moderation::ModerationConfig,
    ) -> Result<Option<Validation>, String> {
        let Some(url) = config.validation_url() else {
            return Ok(None);
        };
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(config.validation_timeout)
            .user_agent(concat!("imgcas/", env!("CARGO_PKG_VERSION"), " validation"))
            .build()
            .map_err(|e| format!("validation client: {e}"))?;
        Ok(Some(Validation {
            client,
            url,
            on_error: config.validation_on_error,
            allowed: moka::sync::Cache::new(REMEMBERED),
        }))
    }
}

impl Pipeline {
    /// Asks the validation service about new bytes (when one is configured and has not
    /// allowed them before): `Ok` to store them, else `blocked` (refused, and listed) or
    /// `validation_unavailable` (no answer, fail-closed). `fingerprint` is the caller's when
    /// it computed one (`Some(None)`: no picture).
    pub(in crate::pipeline) async fn validate(
        &self,
        hash: &ContentHash,
        info: &OriginalInfo,
        bytes: &Bytes,
        fingerprint: Option<Option<Fingerprint>>,
    ) -> Result<(), Error> {
        let Some(hook) = &self.shared.moderation.validation else {
            return Ok(());
        };
        if hook.allowed.contains_key(hash) {
            return Ok(());
        }
        let fingerprint = match fingerprint {
            Some(known) => known,
            None => self.compute_fingerprint(hash, bytes.clone()).await?,
        };
        let asked = Asked {
            sha256: hash.to_hex(),
            format: info.format.map(imgcas_processors::SourceFormat::name),
            width: info.width,
            height: info.height,
            bytes: info.bytes,
            fingerprint: fingerprint.map(|f| hex::encode(f.to_bytes())),
            preview: self.preview(bytes.clone()).await,
        };
        let answer = async {
            let response = hook
                .client
                .post(hook.url.clone())
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&asked).map_err(|e| e.to_string())?)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let status = response.status();
            if !status.is_success() {
                return Err(format!("answered {status}"));
            }
            let body = response.bytes().await.map_err(|e| e.to_string())?;
            serde_json::from_slice::<Answer>(&body).map_err(|e| format!("unreadable answer: {e}"))
        }
        .await;
        match answer {
            Ok(Answer { allow: true, .. }) => {
                hook.allowed.insert(*hash, ());
                Ok(())
            }
            Ok(Answer {
                allow: false,
                reason,
            }) => {
                let why = reason.unwrap_or_else(|| "refused by the validation service".into());
                tracing::info!(%hash, %why, "new bytes refused by the validation service");
                self.list_refused(hash, &why).await?;
                Err(Error::Blocked(format!(
                    "original {hash} was refused by the validation service: {why}"
                )))
            }
            Err(why) => {
                tracing::warn!(%hash, error = %why, fail = ?hook.on_error, "validation service did not answer");
                match hook.on_error {
                    OnError::Open => Ok(()),
                    OnError::Closed => Err(Error::ValidationUnavailable(format!(
                        "the validation service did not answer ({why}); new originals wait for it"
                    ))),
                }
            }
        }
    }

    /// A small JPEG of the bytes for the validation service (base64); `None` when they do
    /// not make one.
    async fn preview(&self, bytes: Bytes) -> Option<String> {
        let spec = Spec::parse("w=256&h=256&format=jpeg&q=70").ok()?;
        let resolved = spec.resolve(None, false, None);
        let limits = self.limits();
        let slot = self.shared.admission.side_work(Tier::Interactive).await;
        let made = blocking(move || {
            let _slot = slot;
            Ok(processors::process(&bytes, &resolved, &limits).ok())
        })
        .await
        .ok()
        .flatten()?;
        Some(base64::engine::general_purpose::STANDARD.encode(made.bytes))
    }
}
