//! Batch ingestion, shared by `POST /v1/ingest` and the offline `imgcas ingest`: many URLs
//! resolved through the URL map, each with one conditional request (a merchant pushing a URL
//! is telling us it may have changed), and variants built before their first request
//! ("warm"). The per-item results are one serde shape, so the command reads the server's
//! answer with the same types it fills in when it works on the local data dir.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use serde::{Deserialize, Serialize};

use imgcas_processors::Spec;

use crate::app::Shared;
use crate::error::Error;
use crate::fetch::client::canonical_url;
use crate::hash::ContentHash;
use crate::http::error::classify;
use crate::maps::OriginalInfo;
use crate::pipeline::{self, Source};

/// URLs per request: enough to amortise a round trip, small enough that one request
/// finishes well inside a client's timeout at origin speeds.
pub const MAX_URLS: usize = 1000;
/// Warm specs per request.
pub const MAX_WARM: usize = 16;
/// The JSON body of `POST /v1/ingest` (1000 long URLs fit several times over).
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// URLs of one batch worked on at once. Origins are also bounded per host by the fetcher,
/// and processing by admission control; this bounds the batch's own memory and tasks.
const CONCURRENCY: usize = 16;
/// How often a warm run refused as `overloaded` is tried again (after its `Retry-After`).
const WARM_ATTEMPTS: u32 = 4;

/// The body of `POST /v1/ingest`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestRequest {
    pub urls: Vec<String>,
    #[serde(default)]
    pub warm: Vec<String>,
}

/// How one item (a URL, or a file in `imgcas ingest`) came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Bytes never stored before.
    New,
    /// Bytes already stored (under this URL or another name): nothing new was kept.
    Duplicate,
    /// A known URL whose bytes are not the ones it pointed at before.
    Changed,
    Failed,
}

/// The SPEC's error body, as an item carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: String,
    pub message: String,
}

impl From<&Error> for ErrorBody {
    fn from(e: &Error) -> Self {
        ErrorBody {
            code: classify(e).1.to_string(),
            message: e.to_string(),
        }
    }
}

/// One warmed variant.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WarmResult {
    /// The canonical spec built (a `format=auto` spec warms one variant per output format).
    pub spec: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// `true` when this call ran the processing (`false`: it was stored already).
    #[serde(default)]
    pub processed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

/// One ingested item.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ItemResult {
    /// The URL as given (`POST /v1/ingest`), or the file's path (`imgcas ingest`).
    pub source: String,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// The bytes were stored already (no new blob).
    #[serde(default)]
    pub duplicate: bool,
    /// The URL pointed at other bytes before this call.
    #[serde(default)]
    pub changed: bool,
    /// The origin sent a body (`false`: a `304`, or the mapping was held stale).
    #[serde(default)]
    pub downloaded: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warm: Vec<WarmResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

impl ItemResult {
    pub fn failed(source: String, error: &Error) -> Self {
        Self::failed_with(source, error.into())
    }

    /// A failure as a server described it.
    pub fn failed_with(source: String, error: ErrorBody) -> Self {
        ItemResult {
            source,
            status: Status::Failed,
            hash: None,
            format: None,
            width: None,
            height: None,
            bytes: None,
            duplicate: false,
            changed: false,
            downloaded: false,
            warm: Vec::new(),
            error: Some(error),
        }
    }

    /// A stored original, before its status is decided.
    pub fn stored(source: String, hash: ContentHash, info: &OriginalInfo) -> Self {
        ItemResult {
            source,
            status: Status::Duplicate,
            hash: Some(hash.to_hex()),
            format: info.format.clone(),
            width: info.width,
            height: info.height,
            bytes: Some(info.bytes),
            duplicate: true,
            changed: false,
            downloaded: false,
            warm: Vec::new(),
            error: None,
        }
    }

    /// Bytes the store did not keep a second time because they were there already.
    pub fn bytes_saved(&self) -> u64 {
        if self.duplicate && self.downloaded {
            self.bytes.unwrap_or(0)
        } else {
            0
        }
    }
}

/// Counts over a batch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub new: u64,
    pub duplicate: u64,
    pub changed: u64,
    pub failed: u64,
    /// Items whose bytes crossed the wire to us.
    pub downloaded: u64,
    /// Bytes received but not stored again (dedup).
    pub bytes_saved: u64,
    /// Variants built by this call, and warm runs that failed.
    pub warmed: u64,
    pub warm_failed: u64,
}

impl Summary {
    pub fn add(&mut self, item: &ItemResult) {
        match item.status {
            Status::New => self.new += 1,
            Status::Duplicate => self.duplicate += 1,
            Status::Changed => self.changed += 1,
            Status::Failed => self.failed += 1,
        }
        self.downloaded += u64::from(item.downloaded);
        self.bytes_saved += item.bytes_saved();
        for w in &item.warm {
            if w.error.is_some() {
                self.warm_failed += 1;
            } else if w.processed {
                self.warmed += 1;
            }
        }
    }
}

/// The answer of `POST /v1/ingest`: one result per URL, in request order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IngestAnswer {
    pub results: Vec<ItemResult>,
    pub summary: Summary,
}

/// A warm spec, parsed once per batch.
#[derive(Debug, Clone)]
pub struct WarmSpec {
    /// As given (without a leading `?`): what a remote warm puts in its query.
    pub text: String,
    spec: Spec,
}

/// `Accept` headers standing for the clients a `format=auto` variant is negotiated for:
/// AVIF-capable, WebP-only, and neither.
const AUTO_ACCEPTS: [Option<&str>; 3] = [
    Some("image/avif,image/webp,*/*"),
    Some("image/webp,*/*"),
    None,
];

impl WarmSpec {
    /// The `Accept` headers to build this spec for: one per output a `format=auto` spec can
    /// negotiate to, else just "no preference".
    pub fn accepts(&self) -> &'static [Option<&'static str>] {
        if self.spec.varies_by_accept() {
            &AUTO_ACCEPTS
        } else {
            &[None]
        }
    }
}

/// Parses the `warm` list; a bad spec refuses the whole batch, naming the spec and option.
pub fn parse_warm(specs: &[String]) -> Result<Vec<WarmSpec>, Error> {
    if specs.len() > MAX_WARM {
        return Err(Error::BatchTooLarge(format!(
            "{} warm specs in one batch; the limit is {MAX_WARM}",
            specs.len()
        )));
    }
    specs
        .iter()
        .map(|text| {
            let text = text.trim_start_matches('?');
            if text
                .split('&')
                .any(|pair| pair.starts_with("url=") || pair.starts_with("sig="))
            {
                return Err(Error::invalid_option(
                    "warm",
                    format!("`{text}`: a warm spec holds processing options only"),
                ));
            }
            Spec::parse(text)
                .map(|spec| WarmSpec {
                    text: text.to_string(),
                    spec,
                })
                .map_err(|e| {
                    Error::invalid_option(
                        "warm",
                        format!("`{text}`: invalid option `{}`: {}", e.option, e.message),
                    )
                })
        })
        .collect()
}

/// Checks a batch's shape before any work: count limits (413) and an empty list (400).
pub fn check_batch(request: &IngestRequest) -> Result<Vec<WarmSpec>, Error> {
    if request.urls.is_empty() {
        return Err(Error::invalid_option("urls", "the batch has no URL"));
    }
    if request.urls.len() > MAX_URLS {
        return Err(Error::BatchTooLarge(format!(
            "{} URLs in one batch; the limit is {MAX_URLS}: split it",
            request.urls.len()
        )));
    }
    parse_warm(&request.warm)
}

/// Ingests every URL of a checked batch, at most [`CONCURRENCY`] at once, in request order.
pub async fn ingest_urls(
    shared: &Arc<Shared>,
    urls: Vec<String>,
    warm: &[WarmSpec],
) -> IngestAnswer {
    let mut results: Vec<ItemResult> = stream::iter(urls)
        .map(|raw| ingest_url(shared, raw, warm))
        .buffered(CONCURRENCY)
        .collect()
        .await;
    credit_first(&mut results);
    let mut summary = Summary::default();
    for r in &results {
        summary.add(r);
    }
    IngestAnswer { results, summary }
}

/// One URL: a conditional request when known (a download when new), then the warm specs.
pub async fn ingest_url(shared: &Arc<Shared>, raw: String, warm: &[WarmSpec]) -> ItemResult {
    let url = match canonical_url(&raw) {
        Ok(url) => url,
        Err(e) => return ItemResult::failed(raw, &e.into()),
    };
    let resolved = match pipeline::resolve_url(shared, &url, true).await {
        Ok(r) => r,
        Err(f) => return ItemResult::failed(raw, &f.error),
    };
    let info = match shared.maps.originals.get(&resolved.hash) {
        Ok(Some(info)) => info,
        Ok(None) => {
            let e = Error::Internal(format!("original {} is not indexed", resolved.hash));
            return ItemResult::failed(raw, &e);
        }
        Err(e) => return ItemResult::failed(raw, &e.into()),
    };
    let mut item = ItemResult::stored(raw, resolved.hash, &info);
    item.downloaded = resolved.downloaded;
    item.duplicate = !resolved.new_original;
    item.changed = resolved.changed;
    item.status = decide(item.changed, item.duplicate);
    item.warm = warm_variants(shared, resolved.hash, warm).await;
    item
}

/// Items with the same new bytes raced to store them; whichever won, the report credits the
/// first in order as `new` and calls the rest duplicates, as a sequential run would.
pub fn credit_first(results: &mut [ItemResult]) {
    let mut first_of: std::collections::HashMap<String, usize> = Default::default();
    for i in 0..results.len() {
        let Some(hash) = results[i].hash.clone() else {
            continue;
        };
        let Some(&first) = first_of.get(&hash) else {
            first_of.insert(hash, i);
            continue;
        };
        if !results[i].duplicate && results[first].duplicate && !results[first].changed {
            results[first].duplicate = false;
            results[i].duplicate = true;
            for r in [first, i] {
                results[r].status = decide(results[r].changed, results[r].duplicate);
            }
        }
    }
}

/// The status of a stored item.
pub fn decide(changed: bool, duplicate: bool) -> Status {
    match (changed, duplicate) {
        (true, _) => Status::Changed,
        (false, false) => Status::New,
        (false, true) => Status::Duplicate,
    }
}

/// Builds each warm spec's variant of `hash` (each output format of a `format=auto` spec),
/// going through the same single-flight and admission control as a request would.
pub async fn warm_variants(
    shared: &Arc<Shared>,
    hash: ContentHash,
    warm: &[WarmSpec],
) -> Vec<WarmResult> {
    let mut out: Vec<WarmResult> = Vec::new();
    let source = Source::Hash(hash);
    for w in warm {
        for accept in w.accepts() {
            let target = match pipeline::locate(shared, &source, &w.spec, *accept).await {
                Ok(t) => t,
                Err(f) => {
                    out.push(warm_failed(w.spec.canonical(), &f.error));
                    continue;
                }
            };
            let spec = target.key.canonical_spec.clone();
            if out.iter().any(|r| r.spec == spec) {
                continue;
            }
            out.push(warm_one(shared, &target, spec).await);
        }
    }
    out
}

async fn warm_one(shared: &Arc<Shared>, target: &pipeline::Target, spec: String) -> WarmResult {
    let mut attempt = 1;
    loop {
        match pipeline::variant(shared, target).await {
            Ok(served) => {
                return WarmResult {
                    spec,
                    format: Some(served.format.name().to_string()),
                    bytes: Some(served.bytes.len() as u64),
                    processed: served.ran_here,
                    error: None,
                }
            }
            // A batch can wait where an interactive request could not: retry after the
            // drain time admission control estimated, a few times.
            Err(f) if attempt < WARM_ATTEMPTS => match f.error {
                Error::Overloaded {
                    retry_after_secs, ..
                } => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_secs(retry_after_secs.clamp(1, 10))).await;
                }
                other => return warm_failed(spec, &other),
            },
            Err(f) => return warm_failed(spec, &f.error),
        }
    }
}

fn warm_failed(spec: String, error: &Error) -> WarmResult {
    WarmResult {
        spec,
        format: None,
        bytes: None,
        processed: false,
        error: Some(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warm_specs_are_checked_up_front() {
        assert!(parse_warm(&["w=400&format=webp".into(), "?h=10".into()]).is_ok());
        let bad = parse_warm(&["w=400&nope=1".into()]).unwrap_err();
        assert!(bad.to_string().contains("nope"), "{bad}");
        assert!(parse_warm(&["url=http://x/&w=1".into()]).is_err());
        let many: Vec<String> = (1..=17).map(|w| format!("w={w}")).collect();
        assert!(parse_warm(&many).is_err());
    }

    #[test]
    fn batch_limits() {
        let empty = IngestRequest::default();
        assert!(matches!(
            check_batch(&empty),
            Err(Error::InvalidOption { .. })
        ));
        let big = IngestRequest {
            urls: vec!["http://a/".into(); MAX_URLS + 1],
            warm: vec![],
        };
        assert!(matches!(check_batch(&big), Err(Error::BatchTooLarge(_))));
    }

    #[test]
    fn the_first_of_equal_bytes_is_credited_as_new() {
        let info = OriginalInfo {
            format: None,
            width: None,
            height: None,
            has_alpha: false,
            bytes: 10,
            first_seen_ms: 0,
        };
        let hash = ContentHash::of(b"x");
        let mut a = ItemResult::stored("a".into(), hash, &info);
        let mut b = ItemResult::stored("b".into(), hash, &info);
        (a.downloaded, b.downloaded) = (true, true);
        b.duplicate = false;
        b.status = Status::New;
        let mut results = vec![a, b];
        credit_first(&mut results);
        let got: Vec<Status> = results.iter().map(|r| r.status).collect();
        assert_eq!(got, [Status::New, Status::Duplicate]);
        assert_eq!(results[1].bytes_saved(), 10);
    }

    #[test]
    fn status_rules() {
        assert_eq!(decide(false, false), Status::New);
        assert_eq!(decide(false, true), Status::Duplicate);
        assert_eq!(decide(true, true), Status::Changed);
        assert_eq!(decide(true, false), Status::Changed);
    }
}
