//! `imgcas blocklist export|import`: the moderation blocklist as a file operators can share,
//! one JSON entry per line (the shape `GET /v1/blocklist` answers). On the local data dir
//! (opened here: on the embedded maps, stop the server first) or a running server
//! (`--server`, with the admin token). An import lists each entry as `POST /v1/blocklist`
//! would: checked, and taking down what it matches here.

use std::path::PathBuf;
use std::time::Duration;

use url::Url;

use imgcas::config::Config;
use imgcas::maps::BlockEntry;
use imgcas::metrics::Metrics;
use imgcas::pipeline::Pipeline;
use imgcas::wire::{BlockAnswer, BlocklistAnswer};

#[derive(Debug, Clone, clap::Subcommand)]
pub enum BlocklistCommand {
    /// Write every entry, one JSON object per line.
    Export {
        /// The file to write (default: standard output).
        #[arg(long, short)]
        output: Option<PathBuf>,
        #[command(flatten)]
        at: super::ServerOrLocal,
    },
    /// List every entry of a file written by `export` (or by hand, one JSON object per line
    /// with `sha256` and/or `fingerprint`, `radius`, `note`).
    Import {
        file: PathBuf,
        #[command(flatten)]
        at: super::ServerOrLocal,
    },
}

impl BlocklistCommand {
    pub fn data_dir(&self) -> Option<PathBuf> {
        match self {
            BlocklistCommand::Export { at, .. } | BlocklistCommand::Import { at, .. } => {
                at.data_dir.clone()
            }
        }
    }
}

/// Runs the command; the line to print when it is done.
pub async fn run(config: Config, command: &BlocklistCommand) -> Result<String, String> {
    match command {
        BlocklistCommand::Export { output, at } => {
            let entries = match &at.server {
                Some(base) => remote(at.token(&config))?.export(base).await?,
                None => local(config)
                    .await?
                    .blocklist()
                    .await
                    .map_err(|e| e.to_string())?,
            };
            let mut text = String::new();
            for entry in &entries {
                text.push_str(&serde_json::to_string(entry).map_err(|e| e.to_string())?);
                text.push('\n');
            }
            match output {
                Some(path) => {
                    std::fs::write(path, text)
                        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                    Ok(format!(
                        "{} entries written to {}",
                        entries.len(),
                        path.display()
                    ))
                }
                None => {
                    print!("{text}");
                    Ok(String::new())
                }
            }
        }
        BlocklistCommand::Import { file, at } => {
            let text = std::fs::read_to_string(file)
                .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            let mut entries = Vec::new();
            for (n, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let entry: BlockEntry = serde_json::from_str(line)
                    .map_err(|e| format!("{} line {}: not an entry: {e}", file.display(), n + 1))?;
                entries.push(entry);
            }
            let (mut listed, mut taken_down) = (0, 0);
            match &at.server {
                Some(base) => {
                    let client = remote(at.token(&config))?;
                    for entry in &entries {
                        let answer = client.import(base, entry).await?;
                        listed += usize::from(answer.newly_listed);
                        taken_down += answer.taken_down.len();
                    }
                }
                None => {
                    let pipeline = local(config).await?;
                    for entry in &entries {
                        let done = pipeline
                            .block(request_of(entry), None)
                            .await
                            .map_err(|e| format!("entry `{}`: {e}", entry.id))?;
                        listed += usize::from(done.newly_listed);
                        taken_down += done.taken_down.len();
                    }
                    pipeline.flush().await.map_err(|e| e.to_string())?;
                }
            }
            Ok(format!(
                "{} entries read, {listed} newly listed, {taken_down} stored originals taken down",
                entries.len()
            ))
        }
    }
}

/// What an imported entry asks (its own id and bookkeeping are this deployment's to make).
fn request_of(entry: &BlockEntry) -> BlockEntry {
    BlockEntry {
        sha256: entry.sha256.clone(),
        fingerprint: entry.fingerprint.clone(),
        radius: entry.radius,
        note: entry.note.clone(),
        ..BlockEntry::default()
    }
}

async fn local(config: Config) -> Result<Pipeline, String> {
    Pipeline::open(config, Metrics::default())
        .await
        .map_err(|e| e.to_string())
}

struct Remote(reqwest::Client);

fn remote(token: Option<&str>) -> Result<Remote, String> {
    super::server_client("imgcas-blocklist", token, Duration::from_secs(600)).map(Remote)
}

impl Remote {
    async fn send(
        &self,
        base: &Url,
        request: reqwest::RequestBuilder,
    ) -> Result<bytes::Bytes, String> {
        super::answer_of(base, request)
            .await?
            .map_err(|e| format!("{}: {}", e.code, e.message))
    }

    async fn export(&self, base: &Url) -> Result<Vec<BlockEntry>, String> {
        let url = base.join("/v1/blocklist").map_err(|e| e.to_string())?;
        let body = self.send(base, self.0.get(url)).await?;
        let answer: BlocklistAnswer = serde_json::from_slice(&body)
            .map_err(|e| format!("{base} answered what is not a blocklist: {e}"))?;
        Ok(answer.entries)
    }

    async fn import(&self, base: &Url, entry: &BlockEntry) -> Result<BlockAnswer, String> {
        let url = base.join("/v1/blocklist").map_err(|e| e.to_string())?;
        let json = serde_json::to_vec(&request_of(entry)).map_err(|e| e.to_string())?;
        let answer = self
            .send(
                base,
                self.0
                    .post(url)
                    .header("content-type", "application/json")
                    .body(json),
            )
            .await
            .map_err(|e| format!("entry `{}`: {e}", entry.id))?;
        serde_json::from_slice(&answer).map_err(|e| format!("unreadable answer: {e}"))
    }
}
