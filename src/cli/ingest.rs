//! `imgcas ingest <file|url|dir>…`: bulk loading for merchant pipelines. Directories are
//! walked for image files, files are uploaded, URLs are sent in batches; with `--server` all
//! of it goes over HTTP (`POST /v1/originals`, `POST /v1/ingest`), without it the command
//! opens the data dir itself (run it while `imgcas serve` is stopped: redb allows one process
//! per file) and does the same work in-process. Either way it shows a progress bar and ends
//! with one summary: new / duplicate / changed / failed, and bytes dedup saved.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use indicatif::ProgressBar;
use serde::Deserialize;
use url::Url;

use crate::app::Shared;
use crate::config::Config;
use crate::error::Error;
use crate::ingest::{
    self, decide, ErrorBody, IngestAnswer, IngestRequest, ItemResult, Status, Summary, WarmResult,
    WarmSpec,
};
use crate::maps::OriginalInfo;
use crate::pipeline;

/// File name extensions a directory walk picks up (files named on the command line are
/// always tried, whatever their name).
const IMAGE_EXTENSIONS: &[&str] = &[
    "jpg", "jpeg", "jpe", "jfif", "png", "apng", "gif", "webp", "avif", "tif", "tiff", "bmp", "ico",
];

/// What the command was asked to do (its command-line arguments).
#[derive(Debug, Clone, clap::Args)]
pub struct IngestOptions {
    /// Image files, directories, and http(s) URLs.
    pub inputs: Vec<String>,
    /// A running imgcas (e.g. http://127.0.0.1:8080); without it, the local data dir is
    /// opened directly (stop the server first).
    #[arg(long)]
    pub server: Option<Url>,
    /// Build this variant of every item (repeatable), e.g. --warm 'w=400&format=webp'.
    #[arg(long = "warm", value_name = "SPEC")]
    pub warm: Vec<String>,
    /// Also read URLs from this file, one per line (`-` for standard input).
    #[arg(long, value_name = "FILE")]
    pub url_list: Option<PathBuf>,
    /// URLs per ingest request.
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Files uploaded at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Print the whole report as JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Data directory, for local ingest (IMGCAS_DATA_DIR).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Allow URLs on loopback and private networks, for local ingest.
    #[arg(long)]
    pub allow_private_networks: bool,
}

/// One thing to ingest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    File(PathBuf),
    Url(String),
}

/// The whole run's results.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub target: String,
    pub summary: Summary,
    pub bytes_sent: u64,
    pub seconds: f64,
    pub results: Vec<ItemResult>,
}

/// Turns arguments into items: URLs as given, files as given, directories walked (sorted,
/// hidden entries skipped, image extensions only). A missing path is an error.
pub fn collect(inputs: &[String], url_list: Option<&Path>) -> Result<Vec<Item>, String> {
    let mut items = Vec::new();
    for input in inputs {
        let lower = input.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            items.push(Item::Url(input.clone()));
            continue;
        }
        let path = PathBuf::from(input);
        let meta = std::fs::metadata(&path).map_err(|e| format!("{input}: {e}"))?;
        if meta.is_dir() {
            walk(&path, &mut items).map_err(|e| format!("{input}: {e}"))?;
        } else {
            items.push(Item::File(path));
        }
    }
    if let Some(list) = url_list {
        let text = if list == Path::new("-") {
            std::io::read_to_string(std::io::stdin()).map_err(|e| format!("stdin: {e}"))?
        } else {
            std::fs::read_to_string(list).map_err(|e| format!("{}: {e}", list.display()))?
        };
        items.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(|l| Item::Url(l.to_string())),
        );
    }
    Ok(items)
}

fn walk(dir: &Path, items: &mut Vec<Item>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            walk(&path, items)?;
        } else if kind.is_file() && is_image_name(&path) {
            items.push(Item::File(path));
        }
    }
    Ok(())
}

fn is_image_name(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| IMAGE_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
}

/// Where the items go.
enum Destination {
    Remote(Remote),
    Local(Arc<Shared>),
}

/// A running server, over HTTP.
struct Remote {
    client: reqwest::Client,
    base: Url,
    /// The first signing key, for warming uploaded files through the signed image route.
    signing_key: Option<Vec<u8>>,
}

/// Runs the command. `Err` is for what stops it before any item (bad arguments, a server
/// that does not answer, a data dir that will not open).
pub async fn run(config: Config, options: &IngestOptions) -> Result<Report, String> {
    let items = collect(&options.inputs, options.url_list.as_deref())?;
    if items.is_empty() {
        return Err("nothing to ingest: no URL, and no image file under the paths given".into());
    }
    let warm = ingest::parse_warm(&options.warm).map_err(|e| e.to_string())?;
    let (destination, target) = match &options.server {
        Some(base) => (
            Destination::Remote(Remote::connect(base, &config).await?),
            base.to_string(),
        ),
        None => {
            let target = config.data_dir.display().to_string();
            let shared = Shared::open(config).await.map_err(|e| e.to_string())?;
            (Destination::Local(shared), target)
        }
    };
    // The JSON report is for programs; a bar on a terminal is for people.
    let bar = if options.json || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        ProgressBar::hidden()
    } else {
        super::progress(items.len(), "ingest")
    };
    let started = Instant::now();
    let (mut files, mut urls) = (Vec::new(), Vec::new());
    for item in items {
        match item {
            Item::File(path) => files.push(path),
            Item::Url(url) => urls.push(url),
        }
    }
    let mut results = Vec::new();
    let mut summary = Summary::default();
    let mut bytes_sent = 0;
    let record = |r: ItemResult, summary: &mut Summary, results: &mut Vec<ItemResult>| {
        summary.add(&r);
        bar.inc(1);
        bar.set_message(format!(
            "new {} dup {} changed {} failed {}",
            summary.new, summary.duplicate, summary.changed, summary.failed
        ));
        results.push(r);
    };

    let limit = match &destination {
        Destination::Local(shared) => Some(shared.config.fetch.max_bytes),
        Destination::Remote(_) => None,
    };
    // Files with the same bytes are warmed once: the first to finish uploading does it.
    let warmed = std::sync::Mutex::new(std::collections::HashSet::new());
    let mut uploads = stream::iter(files)
        .map(|path: PathBuf| {
            let (destination, warm, warmed) = (&destination, &warm, &warmed);
            async move { ingest_file(destination, &path, limit, (warm, warmed)).await }
        })
        .buffered(options.concurrency.max(1));
    while let Some((result, sent)) = uploads.next().await {
        bytes_sent += sent;
        record(result, &mut summary, &mut results);
    }
    drop(uploads);
    ingest::credit_first(&mut results);

    let batches: Vec<Vec<String>> = urls
        .chunks(options.batch.clamp(1, ingest::MAX_URLS))
        .map(<[String]>::to_vec)
        .collect();
    let mut sent_batches = stream::iter(batches)
        .map(|batch| ingest_urls(&destination, batch, &warm))
        .buffered(options.concurrency.clamp(1, 4));
    while let Some(answer) = sent_batches.next().await {
        for r in answer {
            record(r, &mut summary, &mut results);
        }
    }
    drop(sent_batches);
    bar.finish_and_clear();

    if let Destination::Local(shared) = &destination {
        shared
            .maps
            .flush()
            .map_err(|e| format!("the maps could not be made durable: {e}"))?;
    }
    Ok(Report {
        target,
        summary,
        bytes_sent,
        seconds: started.elapsed().as_secs_f64(),
        results,
    })
}

/// One file: read, upload, warm. Returns the result and the bytes sent.
async fn ingest_file(
    destination: &Destination,
    path: &Path,
    limit: Option<u64>,
    (warm, warmed): (
        &[WarmSpec],
        &std::sync::Mutex<std::collections::HashSet<String>>,
    ),
) -> (ItemResult, u64) {
    let source = path.display().to_string();
    if let (Some(limit), Ok(meta)) = (limit, tokio::fs::metadata(path).await) {
        if meta.len() > limit {
            return (
                ItemResult::failed(source, &Error::SourceTooLarge { limit }),
                0,
            );
        }
    }
    let bytes = match tokio::fs::read(path).await {
        Ok(b) => Bytes::from(b),
        Err(e) => {
            let e = Error::invalid_option("file", format!("cannot read it: {e}"));
            return (ItemResult::failed(source, &e), 0);
        }
    };
    let sent = bytes.len() as u64;
    if bytes.is_empty() {
        let e = Error::invalid_option("file", "the file is empty");
        return (ItemResult::failed(source, &e), 0);
    }
    let mut result = match destination {
        Destination::Local(shared) => match pipeline::upload(shared, bytes).await {
            Ok(u) => {
                let mut r = ItemResult::stored(source, u.hash, &u.info);
                r.duplicate = u.duplicate;
                r
            }
            Err(e) => ItemResult::failed(source, &e),
        },
        Destination::Remote(remote) => remote.upload(source, bytes).await,
    };
    if result.status == Status::Failed {
        return (result, sent);
    }
    result.downloaded = true;
    result.status = decide(false, result.duplicate);
    let first = result.hash.as_ref().is_some_and(|h| {
        warmed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(h.clone())
    });
    if let (true, Some(hash)) = (first, result.hash.as_deref().and_then(|h| h.parse().ok())) {
        result.warm = match destination {
            Destination::Local(shared) => ingest::warm_variants(shared, hash, warm).await,
            Destination::Remote(remote) => remote.warm(&result, warm).await,
        };
    }
    (result, sent)
}

async fn ingest_urls(
    destination: &Destination,
    urls: Vec<String>,
    warm: &[WarmSpec],
) -> Vec<ItemResult> {
    match destination {
        Destination::Local(shared) => ingest::ingest_urls(shared, urls, warm).await.results,
        Destination::Remote(remote) => remote.ingest(urls, warm).await,
    }
}

/// An upload answer (SPEC "Upload answer").
#[derive(Deserialize)]
struct UploadAnswer {
    hash: String,
    format: Option<String>,
    width: Option<u32>,
    height: Option<u32>,
    bytes: u64,
    duplicate: bool,
}

#[derive(Deserialize)]
struct ErrorAnswer {
    error: ErrorBody,
}

impl Remote {
    async fn connect(base: &Url, config: &Config) -> Result<Remote, String> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .user_agent(concat!("imgcas-ingest/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            // A batch of 1000 URLs, each a download and warm runs, can take minutes.
            .timeout(Duration::from_secs(600))
            .build()
            .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
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

    /// POSTs `body` to `path`: the answer's status and body, or why there is none.
    async fn post(
        &self,
        path: &str,
        content_type: &str,
        body: impl Into<reqwest::Body>,
    ) -> Result<(reqwest::StatusCode, Bytes), Error> {
        let url = self.endpoint(path).map_err(Error::Internal)?;
        let response = self
            .client
            .post(url)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .map_err(|e| Error::Origin(format!("POST {path} failed: {e}")))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| Error::Origin(format!("the answer to POST {path} was lost: {e}")))?;
        Ok((status, body))
    }

    async fn upload(&self, source: String, bytes: Bytes) -> ItemResult {
        let sent = self.post("/v1/originals", "application/octet-stream", bytes);
        let (status, body) = match sent.await {
            Ok(x) => x,
            Err(e) => return ItemResult::failed(source, &e),
        };
        if !status.is_success() {
            return ItemResult::failed_with(source, error_of(status, &body));
        }
        match serde_json::from_slice::<UploadAnswer>(&body) {
            Ok(a) => {
                let info = OriginalInfo {
                    format: a.format,
                    width: a.width,
                    height: a.height,
                    has_alpha: false,
                    bytes: a.bytes,
                    first_seen_ms: 0,
                };
                match a.hash.parse() {
                    Ok(hash) => {
                        let mut r = ItemResult::stored(source, hash, &info);
                        r.duplicate = a.duplicate;
                        r
                    }
                    Err(()) => ItemResult::failed(
                        source,
                        &Error::Internal(format!("the server answered a bad hash `{}`", a.hash)),
                    ),
                }
            }
            Err(e) => ItemResult::failed(
                source,
                &Error::Internal(format!("unreadable upload answer: {e}")),
            ),
        }
    }

    /// Warms an uploaded file's variants through `GET /v1/image/<hash>` (signed when a key
    /// is configured): `POST /v1/ingest` takes URLs only.
    async fn warm(&self, item: &ItemResult, specs: &[WarmSpec]) -> Vec<WarmResult> {
        let Some(hash) = item.hash.as_deref() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for spec in specs {
            let text = spec.text.as_str();
            let path = format!("/v1/image/{hash}");
            let query = match &self.signing_key {
                Some(key) => {
                    let sig = crate::signing::sign(key, &path, text);
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

    async fn warm_one(&self, path: &str, query: &str, spec: &str, accept: &str) -> WarmResult {
        let failed = |error: ErrorBody| WarmResult {
            spec: spec.to_string(),
            format: None,
            bytes: None,
            processed: false,
            error: Some(error),
        };
        let url = match self.endpoint(&format!("{path}?{query}")) {
            Ok(u) => u,
            Err(e) => return failed((&Error::Internal(e)).into()),
        };
        let response = match self.client.get(url).header("accept", accept).send().await {
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
        let format = header("content-type").map(|t| t.trim_start_matches("image/").to_string());
        let body = response.bytes().await.unwrap_or_default();
        if !status.is_success() {
            return failed(error_of(status, &body));
        }
        WarmResult {
            spec: spec.to_string(),
            format,
            bytes: Some(body.len() as u64),
            processed,
            error: None,
        }
    }

    async fn ingest(&self, urls: Vec<String>, warm: &[WarmSpec]) -> Vec<ItemResult> {
        let fail_all = |urls: Vec<String>, e: &ErrorBody| {
            urls.into_iter()
                .map(|u| ItemResult::failed_with(u, e.clone()))
                .collect()
        };
        let request = IngestRequest {
            urls: urls.clone(),
            warm: warm.iter().map(|w| w.text.clone()).collect(),
        };
        let sent = async {
            let body = serde_json::to_vec(&request).map_err(|e| Error::Internal(e.to_string()))?;
            self.post("/v1/ingest", "application/json", body).await
        };
        let (status, body) = match sent.await {
            Ok(x) => x,
            Err(e) => return fail_all(urls, &(&e).into()),
        };
        if !status.is_success() {
            let e = error_of(status, &body);
            return fail_all(urls, &e);
        }
        match serde_json::from_slice::<IngestAnswer>(&body) {
            Ok(a) => a.results,
            Err(e) => fail_all(
                urls,
                &ErrorBody {
                    code: "internal".into(),
                    message: format!("unreadable ingest answer: {e}"),
                },
            ),
        }
    }
}

fn error_of(status: reqwest::StatusCode, body: &[u8]) -> ErrorBody {
    serde_json::from_slice::<ErrorAnswer>(body)
        .map(|a| a.error)
        .unwrap_or_else(|_| ErrorBody {
            code: "internal".into(),
            message: format!("the server answered {status}"),
        })
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// The summary table printed at the end (failures listed under it, at most 20).
pub fn describe(report: &Report) -> String {
    let s = &report.summary;
    let total = s.new + s.duplicate + s.changed + s.failed;
    let rate = total as f64 / report.seconds.max(1e-3);
    let mut out = format!(
        "ingest into {}\n\
         \x20 new          {:>8}\n\
         \x20 duplicate    {:>8}\n\
         \x20 changed      {:>8}\n\
         \x20 failed       {:>8}\n\
         \x20 total        {:>8}   in {:.1} s ({rate:.1}/s)\n\
         \x20 sent         {:>8}   (files uploaded)\n\
         \x20 dedup saved  {:>8}   (bytes received but already stored)\n",
        report.target,
        s.new,
        s.duplicate,
        s.changed,
        s.failed,
        total,
        report.seconds,
        human_bytes(report.bytes_sent),
        human_bytes(s.bytes_saved),
    );
    if s.warmed + s.warm_failed > 0 {
        out.push_str(&format!(
            "  warmed       {:>8}   variants built ({} failed)\n",
            s.warmed, s.warm_failed
        ));
    }
    let failures: Vec<&ItemResult> = report
        .results
        .iter()
        .filter(|r| r.status == Status::Failed)
        .collect();
    for r in failures.iter().take(20) {
        if let Some(e) = &r.error {
            out.push_str(&format!("  ! {}: {} ({})\n", r.source, e.message, e.code));
        }
    }
    if failures.len() > 20 {
        out.push_str(&format!("  ! … and {} more\n", failures.len() - 20));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_directories_for_images_only() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        for name in ["b.JPG", "a.png", "notes.txt", ".hidden.png"] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        std::fs::write(sub.join("c.webp"), b"x").unwrap();
        let inputs = vec![
            dir.path().display().to_string(),
            "https://example.com/x.jpg".to_string(),
        ];
        let items = collect(&inputs, None).unwrap();
        let names: Vec<String> = items
            .iter()
            .map(|i| match i {
                Item::File(p) => p.file_name().unwrap().to_string_lossy().into_owned(),
                Item::Url(u) => u.clone(),
            })
            .collect();
        assert_eq!(
            names,
            ["a.png", "b.JPG", "c.webp", "https://example.com/x.jpg"]
        );
        assert!(collect(&["/no/such/path".into()], None).is_err());
    }

    #[test]
    fn summary_table_names_every_count() {
        let report = Report {
            target: "here".into(),
            summary: Summary {
                new: 1,
                duplicate: 2,
                changed: 3,
                failed: 0,
                downloaded: 6,
                bytes_saved: 2048,
                warmed: 0,
                warm_failed: 0,
            },
            bytes_sent: 10,
            seconds: 1.0,
            results: vec![],
        };
        let text = describe(&report);
        for needle in ["new", "duplicate", "changed", "failed", "2.0 KiB", "total"] {
            assert!(text.contains(needle), "{needle} in {text}");
        }
    }
}
