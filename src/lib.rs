//! imgcas: a content-addressable image dedup and processing service.
//!
//! A request walks down these layers and nothing reaches back up (`tests/it/layering.rs`
//! enforces it; `docs/architecture.md` draws it):
//!
//! 1. `hash`, `config`: plain values every layer may use.
//! 2. `blob`, `maps`, `fetch` (storage and the origin client), and the small parts the
//!    pipeline is built of: `coalesce` (single flight), `admission` (processing by cost),
//!    `signing`, `stats`.
//! 3. `hot` (recent variants), `negative` (origin failures), `metrics` (the recorder and
//!    page), `error` (the service's error and its code in docs/api.md).
//! 4. `wire`: the JSON answers the server writes and its own client reads.
//! 5. `pipeline`: the decision flow and the one owner of the maps, blobs, fetcher and caches.
//! 6. `ingest`: batches of URLs and warm specs, through the pipeline.
//! 7. `http`: the routes. 8. `app`: the server's lifecycle.
//!
//! The command line (`src/main.rs`, `src/cli/`) is the binary's, not part of this library.
//!
//! No unsafe code, but for a few system calls: a thread's priority and CPU clock
//! (`admission/niced.rs`) and the allocators' tuning (`admission/memory.rs`), each saying
//! why it is sound.

#![deny(unsafe_code)]

pub mod admission;
pub mod app;
pub mod blob;
pub mod coalesce;
pub mod config;
pub mod error;
pub mod fetch;
pub mod hash;
pub mod hot;
pub mod http;
pub mod ingest;
pub mod log;
pub mod maps;
pub mod metrics;
pub mod negative;
pub mod pipeline;
pub mod s3;
pub mod signing;
pub mod stats;
pub mod wire;
