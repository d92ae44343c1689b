//! imgcas: a content-addressable image dedup and processing service.
//!
//! A request walks down this list and nothing reaches back up:
//! `http` → `pipeline` → { `maps`, `fetch`, `blob` } → `imgcas_processors`.
//! `app` builds the one shared state; `config` reads settings; `coalesce` makes concurrent
//! identical work run once; `admission` bounds processing by cost; `hot` keeps recent variants
//! in memory; `negative` holds origin failures per URL; `signing` checks `sig`; `metrics`
//! renders `/metrics`; `cli` holds the offline commands.

#![forbid(unsafe_code)]

pub mod admission;
pub mod app;
pub mod blob;
pub mod cli;
pub mod coalesce;
pub mod config;
pub mod error;
pub mod fetch;
pub mod hash;
pub mod hot;
pub mod http;
pub mod ingest;
pub mod maps;
pub mod metrics;
pub mod negative;
pub mod pipeline;
pub mod signing;
pub mod stats;
