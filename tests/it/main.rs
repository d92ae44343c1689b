//! The integration tests, one binary with a module per capability (one link of the whole
//! stack instead of one per file). Each module speaks to the app as a client and an origin
//! would: the whole app on a random loopback port (`common::spawn_app`), a counting origin,
//! real S3 (s3s-fs in process, moto in CI) and a real PostgreSQL the harness starts.
//!
//! Run one capability with a filter: `cargo test --test it -- dedup::`.

mod common;

mod admin;
mod animation;
mod auto_quality;
mod blob_contract;
mod bounded_growth;
mod budgets;
mod cache_tags;
mod cdn;
mod client_hints;
mod cluster;
mod compat;
mod compose;
mod console;
mod corpus;
mod crash;
mod deadlines;
mod decode_once;
mod dedup;
mod dialects;
mod errors;
mod facts;
mod fallback;
mod focus;
mod forget_url;
mod fuzz_replay;
mod hit_path;
mod ingest;
mod layering;
mod maintenance;
mod maps_checksums;
mod maps_contract;
mod maps_walks;
mod merchant_sources;
mod metrics;
mod migrate;
mod moderation;
mod near_bound;
mod near_dup;
mod negative_cache;
mod nextjs;
mod overload;
mod pg_tls;
mod politeness;
mod presets;
mod prometheus;
mod proxy;
mod restart;
mod revalidation;
mod round_trips;
mod s3_outage;
mod s3_sources;
mod s3_writes;
mod scopes;
mod server_limits;
mod signing;
mod ssrf;
mod store_check;
mod takedown;
mod tiers;
mod totals;
mod upload;
mod walks;
mod watermarks;
