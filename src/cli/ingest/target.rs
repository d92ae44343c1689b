//! Where `imgcas ingest` sends its items, behind one trait: the local data dir (the pipeline
//! opened in this process) or a running server over HTTP. The run does not know which.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use url::Url;

use imgcas::admission::{Asker, Tier};
use imgcas::config::Config;
use imgcas::error::Error;
use imgcas::hash::ContentHash;
use imgcas::ingest::{self, WarmSpec};
use imgcas::metrics::Metrics;
use imgcas::pipeline::Pipeline;
use imgcas::wire::{
    ErrorBody, IngestAnswer, IngestRequest, ItemResult, OriginalAnswer, UploadAnswer, WarmResult,
};

/// A stored upload: what the original is, and whether it was stored already.
/// What an upload stored: the original, whether it was stored already, and its best
/// near-duplicate.
pub type Upload = (OriginalAnswer, bool, Option<ContentHash>);

#[async_trait]
pub trait Target: Send + Sync {
    /// Where items go, as the report names it.
    fn name(&self) -> String;

    /// The largest file worth reading, when this side knows the limit.
    fn max_file_bytes(&self) -> Option<u64>;

    /// Stores one file's bytes.
    async fn upload(&self, bytes: Bytes) -> Result<Upload, ErrorBody>;

    /// Builds the warm specs' variants of a stored original.
    async fn warm(&self, hash: ContentHash, specs: &[WarmSpec]) -> Vec<WarmResult>;

    /// One batch of URLs, with their warm specs; a result per URL, in order.
    async fn ingest_urls(&self, urls: Vec<String>, warm: &[WarmSpec]) -> Vec<ItemResult>;

    /// Makes what was stored durable.
    async fn finish(&self) -> Result<(), String>;
}

/// The data dir, opened here (the server must be stopped: redb allows one process).
pub struct Local {
    pipeline: Pipeline,
    data_dir: String,
}

impl Local {
    pub async fn open(config: Config) -> Result<Local, String> {
        let data_dir = config.data_dir.display().to_string();
        let pipeline = Pipeline::open(config, Metrics::default())
            .await
            .map_err(|e| e.to_string())?;
        Ok(Local { pipeline, data_dir })
    }
}

#[async_trait]
impl Target for Local {
    fn name(&self) -> String {
        self.data_dir.clone()
    }

    fn max_file_bytes(&self) -> Option<u64> {
        Some(self.pipeline.max_source_bytes())
    }

    async fn upload(&self, bytes: Bytes) -> Result<Upload, ErrorBody> {
        match self.pipeline.upload(bytes).await {
            Ok(u) => Ok((
                OriginalAnswer::new(u.hash, &u.info),
                u.duplicate,
                u.near_duplicate_of,
            )),
            Err(e) => Err((&e).into()),
        }
    }

    async fn warm(&self, hash: ContentHash, specs: &[WarmSpec]) -> Vec<WarmResult> {
        ingest::warm_variants(&self.pipeline, hash, specs, &local_batch()).await
    }

    async fn ingest_urls(&self, urls: Vec<String>, warm: &[WarmSpec]) -> Vec<ItemResult> {
        ingest::ingest_urls(&self.pipeline, urls, warm, &local_batch())
            .await
            .results
    }

    async fn finish(&self) -> Result<(), String> {
        self.pipeline
            .flush()
            .await
            .map_err(|e| format!("the maps could not be made durable: {e}"))
    }
}

/// The offline command's work: bulk, of the tenant `local`.
fn local_batch() -> Asker {
    Asker::new(Tier::Bulk, "local")
}

/// How many times a request the server refused for now (503 or 429) is sent again, each
/// after the `Retry-After` it answered.
const BUSY_ATTEMPTS: u32 = 30;
/// The longest `Retry-After` waited for at once.
const LONGEST_WAIT: Duration = Duration::from_secs(60);

/// How long a busy answer asks to wait (`Retry-After` in seconds; 1 s when absent or an
/// HTTP date, which this server never sends).
fn retry_after(response: &reqwest::Response) -> Duration {
    response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(Duration::from_secs(1), Duration::from_secs)
        .clamp(Duration::from_millis(100), LONGEST_WAIT)
}

fn is_busy(status: reqwest::StatusCode) -> bool {
    status == reqwest::StatusCode::SERVICE_UNAVAILABLE
        || status == reqwest::StatusCode::TOO_MANY_REQUESTS
}

/// Sends the request `build` makes, again after each busy answer's `Retry-After`, up to
/// [`BUSY_ATTEMPTS`] times; the last answer.
async fn until_not_busy(
    build: impl Fn() -> reqwest::RequestBuilder,
) -> Result<reqwest::Response, reqwest::Error> {
    let mut attempt = 1;
    loop {
        let response = build().send().await?;
        if !is_busy(response.status()) || attempt >= BUSY_ATTEMPTS {
            return Ok(response);
        }
        attempt += 1;
        tokio::time::sleep(retry_after(&response)).await;
    }
}

/// A running server, over HTTP.
pub struct Remote {
    client: reqwest::Client,
    base: Url,
    /// The first signing key, for warming uploaded files through the signed image route.
    signing_key: Option<Vec<u8>>,
}

impl Remote {
    /// A client for `base`, once its `/healthz` answers; `admin_token` goes with every request.
    pub async fn connect(
        base: &Url,
        config: &Config,
        admin_token: Option<&str>,
    ) -> Result<Remote, String> {
        // A batch of 1000 URLs, each a download and warm runs, can take minutes.
        let client =
            crate::cli::server_client("imgcas-ingest", admin_token, Duration::from_secs(600))?;
        let remote = Remote {
            client,
            base: base.clone(),
            signing_key: config.security.signing_keys().into_iter().next(),
        };
        let health = remote.endpoint("/healthz")?;
        match remote.client.get(health).send().await {
            Ok(r) if r.status().is_success() => Ok(remote),
            Ok(r) => Err(format!("{base} answered /healthz with {}", r.status())),
            Err(e) => Err(format!("cannot reach {base}: {e}")),
        }
    }

    fn endpoint(&self, path: &str) -> Result<Url, String> {
        self.base
            .join(path)
            .map_err(|e| format!("bad server URL {}: {e}", self.base))
    }

    /// POSTs `body` to `path`: the answer's body when it succeeded, else its error. A busy
    /// answer (503, 429) is retried after its `Retry-After`, up to [`BUSY_ATTEMPTS`] times.
    async fn post(&self, path: &str, content_type: &str, body: Bytes) -> Result<Bytes, ErrorBody> {
        let url = self
            .endpoint(path)
            .map_err(|e| ErrorBody::from(&Error::Internal(e)))?;
        let mut attempt = 1;
        let response = loop {
            let response = self
                .client
                .post(url.clone())
                .header("content-type", content_type)
                .body(body.clone())
                .send()
                .await
                .map_err(|e| ErrorBody::from(&Error::Origin(format!("POST {path} failed: {e}"))))?;
            if !is_busy(response.status()) || attempt >= BUSY_ATTEMPTS {
                break response;
            }
            attempt += 1;
            tokio::time::sleep(retry_after(&response)).await;
        };
        let status = response.status();
        let body = response.bytes().await.map_err(|e| {
            ErrorBody::from(&Error::Origin(format!(
                "the answer to POST {path} was lost: {e}"
            )))
        })?;
        if !status.is_success() {
            return Err(error_of(status, &body));
        }
        Ok(body)
    }

    async fn warm_one(&self, path: &str, query: &str, spec: &str, accept: &str) -> WarmResult {
        let failed = |error: ErrorBody| WarmResult::failed(spec.to_string(), error);
        let url = match self.endpoint(&format!("{path}?{query}")) {
            Ok(u) => u,
            Err(e) => return failed(ErrorBody::from(&Error::Internal(e))),
        };
        // Warming is a batch's work: it asks as bulk, so that the server's interactive
        // requests go first and it is the first shed.
        let sent = until_not_busy(|| {
            self.client
                .get(url.clone())
                .header("accept", accept)
                .header("x-imgcas-tier", "bulk")
        })
        .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) => return failed((&Error::Origin(format!("warm request failed: {e}"))).into()),
        };
        let status = response.status();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let processed = header("x-imgcas-cache").as_deref() == Some("miss");
        let quality = header("x-imgcas-quality").and_then(|q| q.parse().ok());
        let score = header("x-imgcas-score").and_then(|s| s.parse().ok());
        let format = header("content-type").map(|t| t.trim_start_matches("image/").to_string());
        let body = response.bytes().await.unwrap_or_default();
        if !status.is_success() {
            return failed(error_of(status, &body));
        }
        WarmResult {
            spec: spec.to_string(),
            format,
            bytes: Some(body.len() as u64),
            quality,
            score,
            processed,
            error: None,
        }
    }
}

#[async_trait]
impl Target for Remote {
    fn name(&self) -> String {
        self.base.to_string()
    }

    fn max_file_bytes(&self) -> Option<u64> {
        None
    }

    async fn upload(&self, bytes: Bytes) -> Result<Upload, ErrorBody> {
        let body = self
            .post("/v1/originals", "application/octet-stream", bytes)
            .await?;
        let answer: UploadAnswer = serde_json::from_slice(&body).map_err(|e| {
            ErrorBody::from(&Error::Internal(format!("unreadable upload answer: {e}")))
        })?;
        Ok((answer.original, answer.duplicate, answer.near_duplicate_of))
    }

    /// Warms through `GET /v1/image/<hash>` (signed when a key is configured):
    /// `POST /v1/ingest` takes URLs only.
    async fn warm(&self, hash: ContentHash, specs: &[WarmSpec]) -> Vec<WarmResult> {
        let mut out = Vec::new();
        let path = format!("/v1/image/{hash}");
        for spec in specs {
            let text = spec.text.as_str();
            let query = match &self.signing_key {
                Some(key) => {
                    let sig = imgcas::signing::sign(key, &path, text);
                    if text.is_empty() {
                        format!("sig={sig}")
                    } else {
                        format!("{text}&sig={sig}")
                    }
                }
                None => text.to_string(),
            };
            for accept in spec.accepts() {
                let accept = accept.unwrap_or("*/*");
                out.push(self.warm_one(&path, &query, text, accept).await);
            }
        }
        out
    }

    async fn ingest_urls(&self, urls: Vec<String>, warm: &[WarmSpec]) -> Vec<ItemResult> {
        let request = IngestRequest {
            urls: urls.clone(),
            warm: warm.iter().map(|w| w.text.clone()).collect(),
        };
        let answer = match serde_json::to_vec(&request) {
            Ok(body) => {
                self.post("/v1/ingest", "application/json", Bytes::from(body))
                    .await
            }
            Err(e) => Err((&Error::Internal(e.to_string())).into()),
        }
        .and_then(|body| {
            serde_json::from_slice::<IngestAnswer>(&body)
                .map_err(|e| (&Error::Internal(format!("unreadable ingest answer: {e}"))).into())
        });
        match answer {
            Ok(a) => a.results,
            Err(e) => urls
                .into_iter()
                .map(|source| ItemResult::failed_with(source, e.clone()))
                .collect(),
        }
    }

    async fn finish(&self) -> Result<(), String> {
        Ok(())
    }
}

use crate::cli::server_error as error_of;
