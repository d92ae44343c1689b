//! Offline commands of the `imgcas` binary (everything but `serve`).

pub mod process;
