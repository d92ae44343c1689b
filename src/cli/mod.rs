//! The commands of the `imgcas` binary besides `serve`: `process` (one file, offline),
//! `ingest` (bulk loading, over HTTP or on the local data dir), `purge` (takedowns, likewise),
//! the maintenance commands `stats`, `verify` and `gc`, and `maps copy` (a node's maps into a
//! cluster's). They are the binary's own (not the library's): flags, progress bars and
//! printed tables stay out of the service's API.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use imgcas::wire::{ErrorAnswer, ErrorBody};

pub mod blocklist;
pub mod check;
pub mod ingest;
pub mod maintenance;
pub mod maps;
pub mod migrate;
pub mod process;
pub mod purge;

/// An HTTP client for a running server's routes, sending `admin_token` (if any) as
/// `Authorization: Bearer` with every request.
pub fn server_client(
    agent: &str,
    admin_token: Option<&str>,
    timeout: Duration,
) -> Result<reqwest::Client, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(token) = admin_token {
        let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| "the admin token has characters a header cannot carry".to_string())?;
        value.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    reqwest::Client::builder()
        .default_headers(headers)
        .user_agent(format!("{agent}/{}", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(10))
        .timeout(timeout)
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {e}"))
}

/// The error a server answered, or one naming its status when the body is not docs/api.md's.
pub fn server_error(status: reqwest::StatusCode, body: &[u8]) -> ErrorBody {
    serde_json::from_slice::<ErrorAnswer>(body)
        .map(|a| a.error)
        .unwrap_or_else(|_| ErrorBody {
            code: "internal".into(),
            message: format!("the server answered {status}"),
        })
}

/// Where a command works: a running server, or the local data dir opened in this process.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerOrLocal {
    /// A running imgcas (e.g. http://127.0.0.1:8080); without it, the local data dir is
    /// opened directly (on the embedded maps, stop the server first).
    #[arg(long)]
    pub server: Option<url::Url>,
    /// The server's admin token (else IMGCAS_ADMIN_TOKEN), sent as `Authorization: Bearer`.
    #[arg(long, value_name = "TOKEN")]
    pub admin_token: Option<String>,
    /// Data directory, for local work (IMGCAS_DATA_DIR).
    #[arg(long)]
    pub data_dir: Option<std::path::PathBuf>,
}

impl ServerOrLocal {
    /// The token to present to the server: `--admin-token`, else the configured one.
    pub fn token<'a>(&'a self, config: &'a imgcas::config::Config) -> Option<&'a str> {
        self.admin_token
            .as_deref()
            .or(config.security.admin_token.as_deref())
    }
}

/// Sends a request to a server: `Err` when it cannot be reached or its answer is lost,
/// `Ok(Err)` for its error answer, else the body of its success.
pub async fn answer_of(
    base: &url::Url,
    request: reqwest::RequestBuilder,
) -> Result<Result<bytes::Bytes, ErrorBody>, String> {
    let response = request
        .send()
        .await
        .map_err(|e| format!("cannot reach {base}: {e}"))?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|e| format!("the answer from {base} was lost: {e}"))?;
    if !status.is_success() {
        return Ok(Err(server_error(status, &body)));
    }
    Ok(Ok(body))
}

/// The progress bar the long commands share: what, how far, rate and time left.
pub fn progress(len: usize, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    if let Ok(style) =
        ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} ({per_sec}, {eta} left)")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    bar
}
