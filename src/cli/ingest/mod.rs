//! `imgcas ingest <file|url|dir>…`: bulk loading for merchant pipelines. Directories are
//! walked for image files (`items.rs`), files are uploaded and URLs sent in batches to a
//! target (`target.rs`: a running server with `--server`, else the local data dir opened in
//! this process), and the run ends with one summary (`report.rs`): new / duplicate / changed
//! / failed, and bytes dedup saved.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use indicatif::ProgressBar;
use url::Url;

use imgcas::config::Config;
use imgcas::error::Error;
use imgcas::ingest::{self, WarmSpec};
use imgcas::wire::{credit_first, ItemResult, StoredItem, Summary};

mod items;
mod report;
mod target;

pub use report::{describe, Report};

use items::Item;
use target::{Local, Remote, Target};

/// What the command was asked to do (its command-line arguments).
#[derive(Debug, Clone, clap::Args)]
pub struct IngestOptions {
    /// Image files, directories, and http(s) URLs.
    pub inputs: Vec<String>,
    /// A running imgcas (e.g. http://127.0.0.1:8080); without it, the local data dir is
    /// opened directly (on the embedded maps, stop the server first; shared PostgreSQL maps need no such pause).
    #[arg(long)]
    pub server: Option<Url>,
    /// The server's admin token (else IMGCAS_ADMIN_TOKEN), sent as `Authorization: Bearer`.
    #[arg(long, value_name = "TOKEN")]
    pub admin_token: Option<String>,
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

/// Runs the command. `Err` is for what stops it before any item (bad arguments, a server
/// that does not answer, a data dir that will not open).
pub async fn run(config: Config, options: &IngestOptions) -> Result<Report, String> {
    let items = items::collect(&options.inputs, options.url_list.as_deref())?;
    if items.is_empty() {
        return Err("nothing to ingest: no URL, and no image file under the paths given".into());
    }
    let warm = ingest::parse_warm(&options.warm).map_err(|e| e.to_string())?;
    let target: Box<dyn Target> = match &options.server {
        Some(base) => {
            let token = options
                .admin_token
                .as_deref()
                .or(config.security.admin_token.as_deref());
            Box::new(Remote::connect(base, &config, token).await?)
        }
        None => Box::new(Local::open(config).await?),
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

    // Files with the same bytes are warmed once: the first to finish uploading does it.
    let warmed = Mutex::new(HashSet::new());
    let target = target.as_ref();
    let mut uploads = stream::iter(files)
        .map(|path: PathBuf| {
            let (warm, warmed) = (&warm, &warmed);
            async move { ingest_file(target, &path, warm, warmed).await }
        })
        .buffered(options.concurrency.max(1));
    while let Some((result, sent)) = uploads.next().await {
        bytes_sent += sent;
        record(result, &mut summary, &mut results);
    }
    drop(uploads);
    credit_first(&mut results);

    let batches: Vec<Vec<String>> = urls
        .chunks(options.batch.clamp(1, ingest::MAX_URLS))
        .map(<[String]>::to_vec)
        .collect();
    let mut sent_batches = stream::iter(batches)
        .map(|batch| target.ingest_urls(batch, &warm))
        .buffered(options.concurrency.clamp(1, 4));
    while let Some(answer) = sent_batches.next().await {
        for r in answer {
            record(r, &mut summary, &mut results);
        }
    }
    drop(sent_batches);
    bar.finish_and_clear();
    target.finish().await?;
    // Crediting may have moved "new" between items: count the final statuses.
    let summary = Summary::of(&results);
    Ok(Report {
        target: target.name(),
        summary,
        bytes_sent,
        seconds: started.elapsed().as_secs_f64(),
        results,
    })
}

/// One file: read, upload, warm (once per hash). Returns the result and the bytes sent.
async fn ingest_file(
    target: &dyn Target,
    path: &Path,
    warm: &[WarmSpec],
    warmed: &Mutex<HashSet<imgcas::hash::ContentHash>>,
) -> (ItemResult, u64) {
    let source = path.display().to_string();
    if let (Some(limit), Ok(meta)) = (target.max_file_bytes(), tokio::fs::metadata(path).await) {
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
    let (original, duplicate, near_duplicate_of) = match target.upload(bytes).await {
        Ok(stored) => stored,
        Err(e) => return (ItemResult::failed_with(source, e), sent),
    };
    let first = warmed
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(original.hash);
    let warm = if first {
        target.warm(original.hash, warm).await
    } else {
        Vec::new()
    };
    let item = StoredItem {
        original,
        duplicate,
        changed: false,
        downloaded: true,
        near_duplicate_of,
        warm,
    };
    (ItemResult::stored(source, item), sent)
}
