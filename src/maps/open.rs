//! Opening the maps: the one place a configured backend (PostgreSQL, or the embedded file
//! under a data dir) becomes a store, with what each needs to be opened (the pool's size and
//! password file, the embedded file's page cache), for the service and the commands alike.

use std::sync::Arc;

use super::cache::Cached;
use super::postgres::{self, PostgresStore};
use super::redb::RedbStore;
use super::{MapError, MapStore};
use crate::config::{Config, MapsBackend};

/// The maps the configuration names: PostgreSQL at `maps.url` when set, else the embedded
/// redb file under `data_dir`.
pub async fn open(config: &Config) -> Result<Arc<dyn MapStore>, MapError> {
    let backend = config
        .maps_backend()
        .map_err(|e| MapError::Store(e.to_string()))?;
    open_backend(&backend, &config.data_dir, &OpenOptions::of(&config.maps)).await
}

/// How a backend is opened: PostgreSQL's connection options, the embedded file's page
/// cache (`maps.cache_bytes`), and the bytes of entries remembered in front of either
/// (`maps.entries_cache_bytes`).
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    pub postgres: postgres::PgOptions,
    pub embedded_cache_bytes: Option<usize>,
    pub entries_cache_bytes: Option<usize>,
}

impl OpenOptions {
    /// The options the configuration's `maps` section gives.
    pub fn of(maps: &crate::config::MapsConfig) -> OpenOptions {
        OpenOptions {
            postgres: postgres::PgOptions::of(maps),
            embedded_cache_bytes: maps.cache_bytes,
            entries_cache_bytes: maps.entries_cache_bytes,
        }
    }
}

/// Opens the maps `backend` names (embedded ones under `data_dir` unless it names a
/// directory): the one place a backend becomes a store, for the service and the commands.
/// PostgreSQL is reached as `options` say (its password file, the pool's size), and the
/// embedded file opened with the page cache they give.
pub async fn open_backend(
    backend: &MapsBackend,
    data_dir: &std::path::Path,
    options: &OpenOptions,
) -> Result<Arc<dyn MapStore>, MapError> {
    let cache = options.embedded_cache_bytes;
    let entries = options.entries_cache_bytes;
    Ok(match backend {
        MapsBackend::Postgres(url) => Arc::new(Cached::sized(
            PostgresStore::open_with(url, &options.postgres).await?,
            entries,
        )),
        MapsBackend::Embedded => Arc::new(Cached::sized(
            RedbStore::open(data_dir.to_path_buf(), cache).await?,
            entries,
        )),
        MapsBackend::EmbeddedAt(dir) => Arc::new(Cached::sized(
            RedbStore::open(dir.clone(), cache).await?,
            entries,
        )),
    })
}
