//! The commands of the `imgcas` binary besides `serve`: `process` (one file, offline),
//! `ingest` (bulk loading, over HTTP or on the local data dir), and the maintenance commands
//! `stats`, `verify` and `gc`, and `maps copy` (a node's maps into a cluster's). They are the binary's own (not the library's): flags, progress
//! bars and printed tables stay out of the service's API.

use indicatif::{ProgressBar, ProgressStyle};

pub mod ingest;
pub mod maintenance;
pub mod maps;
pub mod process;

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
