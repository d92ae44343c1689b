//! Offline commands of the `imgcas` binary (everything but `serve`).

pub mod maintenance;
pub mod process;
