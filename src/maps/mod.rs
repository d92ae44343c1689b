//! The embedded maps: one redb file (`<data_dir>/imgcas.redb`) holding the URL map, the
//! originals index and the variants. Each map has its own module with a typed API; nothing
//! outside this folder touches redb.
//!
//! Durability: the URL map and the variants can be rebuilt from origins and originals, so
//! their commits skip the fsync (`Durability::None`) and are made durable by the next durable
//! commit: an upload's, the periodic [`Maps::flush`], or the one at shutdown. An acknowledged
//! upload's index entry is committed durably before the answer goes out.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use redb::{Database, Durability, ReadTransaction, ReadableDatabase, WriteTransaction};

pub mod originals;
pub mod url_map;
pub mod variants;

pub use originals::{OriginalInfo, OriginalsIndex};
pub use url_map::{UrlEntry, UrlMap};
pub use variants::{StoredVariant, VariantKey, VariantMap};

use crate::hash::ContentHash;

#[derive(Debug, thiserror::Error)]
pub enum MapError {
    #[error("{0}")]
    Store(String),
    #[error("corrupt entry: {0}")]
    Corrupt(String),
}

macro_rules! store_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for MapError {
            fn from(e: $t) -> Self {
                MapError::Store(e.to_string())
            }
        }
    )*};
}
store_errors!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::SetDurabilityError
);

/// Milliseconds since the Unix epoch: the time stamps the maps keep.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The shared database handle every map holds.
#[derive(Clone)]
pub(crate) struct Db {
    db: Arc<Database>,
    /// Set by non-durable commits, cleared by a durable one.
    dirty: Arc<AtomicBool>,
}

impl Db {
    pub(crate) fn read(&self) -> Result<ReadTransaction, MapError> {
        Ok(self.db.begin_read()?)
    }

    /// Runs `f` in one write transaction and commits it, durably or not.
    pub(crate) fn write<T>(
        &self,
        durable: bool,
        f: impl FnOnce(&WriteTransaction) -> Result<T, MapError>,
    ) -> Result<T, MapError> {
        let mut txn = self.db.begin_write()?;
        if !durable {
            txn.set_durability(Durability::None)?;
        }
        let out = f(&txn)?;
        if !durable {
            self.dirty.store(true, Ordering::Release);
        }
        txn.commit()?;
        if durable {
            self.dirty.store(false, Ordering::Release);
        }
        Ok(out)
    }
}

/// All maps of one data dir.
#[derive(Clone)]
pub struct Maps {
    db: Db,
    pub urls: UrlMap,
    pub originals: OriginalsIndex,
    pub variants: VariantMap,
}

impl Maps {
    pub fn open(data_dir: &Path) -> Result<Maps, MapError> {
        std::fs::create_dir_all(data_dir)
            .map_err(|e| MapError::Store(format!("cannot create {}: {e}", data_dir.display())))?;
        let database = Database::create(data_dir.join("imgcas.redb"))?;
        let db = Db {
            db: Arc::new(database),
            dirty: Arc::new(AtomicBool::new(false)),
        };
        // Readers expect every table to exist.
        db.write(true, |txn| {
            url_map::create(txn)?;
            originals::create(txn)?;
            variants::create(txn)?;
            Ok(())
        })?;
        Ok(Maps {
            urls: UrlMap { db: db.clone() },
            originals: OriginalsIndex { db: db.clone() },
            variants: VariantMap { db: db.clone() },
            db,
        })
    }

    /// Records a download in one transaction: the original's index entry (if new) and the URL
    /// pointing at it. The blob must already be stored. Returns whether the hash was new.
    pub fn record_download(
        &self,
        url: &str,
        entry: &UrlEntry,
        info: &OriginalInfo,
    ) -> Result<bool, MapError> {
        self.db.write(false, |txn| {
            let new = originals::insert_if_absent(txn, &entry.hash, info)?;
            url_map::put(txn, url, entry)?;
            Ok(new)
        })
    }

    /// Makes every earlier non-durable commit durable (an empty durable commit), if any.
    pub fn flush(&self) -> Result<(), MapError> {
        if self.db.dirty.load(Ordering::Acquire) {
            self.db.write(true, |_| Ok(()))?;
        }
        Ok(())
    }

    /// Readiness: a read transaction opens and a table answers.
    pub fn check(&self) -> Result<(), MapError> {
        self.originals.get(&ContentHash([0; 32])).map(|_| ())
    }
}
