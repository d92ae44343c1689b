//! The commands of the `imgcas` binary besides `serve`: `process` (one file, offline),
//! `ingest` (bulk loading, over HTTP or on the local data dir), `purge` (takedowns, likewise),
//! the maintenance commands `stats`, `verify` and `gc`, and `maps copy` (a node's maps into a
//! cluster's). They are the binary's own (not the library's): flags, progress bars and
//! printed tables stay out of the service's API.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use imgcas::wire::{ErrorAnswer, ErrorBody};

pub mod ingest;
pub mod maintenance;
pub mod maps;
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

/// The error a server answered, or one naming its status when the body is not docs/spec.md's.
pub fn server_error(status: reqwest::StatusCode, body: &[u8]) -> ErrorBody {
    serde_json::from_slice::<ErrorAnswer>(body)
        .map(|a| a.error)
        .unwrap_or_else(|_| ErrorBody {
            code: "internal".into(),
            message: format!("the server answered {status}"),
        })
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
