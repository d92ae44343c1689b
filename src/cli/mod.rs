//! Offline commands of the `imgcas` binary (everything but `serve`).

pub mod ingest;
pub mod maintenance;
pub mod process;
