//! The embedded maps: one redb file (`<data_dir>/imgcas.redb`) holding the URL map, the
//! originals index and the variants. Each map has its own module with a typed API; nothing
//! outside this folder touches redb.
//!
//! Durability by group commit: every write commits without an fsync (`Durability::None`,
//! visible to readers at once) and gets a sequence number. [`Maps::sync`] makes all writes up
//! to a number durable with one empty durable commit; callers who find that a concurrent sync
//! already covered them skip theirs, so a burst of uploads shares fsyncs instead of paying ≈ 7 ms
//! each. Uploads sync before they are acknowledged; the URL map and the variants (rebuildable
//! from origins and originals) are synced by the periodic [`Maps::flush`] and at shutdown.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use redb::{Database, Durability, ReadTransaction, ReadableDatabase, WriteTransaction};

pub mod originals;
pub mod url_map;
pub mod variants;

pub use originals::{OriginalInfo, OriginalsIndex};
pub use url_map::{UrlEntry, UrlMap};
pub use variants::{StoredVariant, VariantKey, VariantMap, VariantTotals};

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
    /// Sequence number of the last committed (maybe not yet durable) write.
    written: Arc<AtomicU64>,
    /// Sequence number up to which writes are durable; the lock serializes syncs.
    durable: Arc<Mutex<u64>>,
}

impl Db {
    pub(crate) fn read(&self) -> Result<ReadTransaction, MapError> {
        Ok(self.db.begin_read()?)
    }

    /// Runs `f` in one write transaction and commits it without an fsync. Returns the value
    /// and the write's sequence number, for [`Db::sync`].
    pub(crate) fn write<T>(
        &self,
        f: impl FnOnce(&WriteTransaction) -> Result<T, MapError>,
    ) -> Result<(T, u64), MapError> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::None)?;
        let out = f(&txn)?;
        txn.commit()?;
        let seq = self.written.fetch_add(1, Ordering::AcqRel) + 1;
        Ok((out, seq))
    }

    /// Makes every write up to `seq` durable (group commit).
    pub(crate) fn sync(&self, seq: u64) -> Result<(), MapError> {
        let mut durable = self.durable.lock().unwrap_or_else(|p| p.into_inner());
        if *durable >= seq {
            return Ok(());
        }
        // Everything committed before this load is covered by the commit below.
        let covered = self.written.load(Ordering::Acquire);
        let txn = self.db.begin_write()?;
        txn.commit()?;
        *durable = covered;
        Ok(())
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
            written: Arc::new(AtomicU64::new(0)),
            durable: Arc::new(Mutex::new(0)),
        };
        // Readers expect every table to exist.
        let ((), seq) = db.write(|txn| {
            url_map::create(txn)?;
            originals::create(txn)?;
            variants::create(txn)?;
            Ok(())
        })?;
        db.sync(seq)?;
        Ok(Maps {
            urls: UrlMap { db: db.clone() },
            originals: OriginalsIndex::new(db.clone()),
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
        let (new, _) = self.db.write(|txn| {
            let new = originals::insert_if_absent(txn, &entry.hash, info)?;
            url_map::put(txn, url, entry)?;
            Ok(new)
        })?;
        Ok(new)
    }

    /// Makes every write so far durable (one empty durable commit, skipped when none is
    /// pending).
    pub fn flush(&self) -> Result<(), MapError> {
        self.db.sync(self.db.written.load(Ordering::Acquire))
    }

    /// Readiness: a read transaction opens and a table answers.
    pub fn check(&self) -> Result<(), MapError> {
        self.originals.get(&ContentHash([0; 32])).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(n: u64) -> OriginalInfo {
        OriginalInfo {
            format: Some("png".into()),
            width: Some(1),
            height: Some(1),
            has_alpha: false,
            bytes: n,
            first_seen_ms: now_ms(),
        }
    }

    #[test]
    fn synced_and_flushed_writes_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let hashes: Vec<ContentHash> = (0..64u32)
            .map(|i| ContentHash::of(&i.to_le_bytes()))
            .collect();
        let url_entry = UrlEntry {
            hash: hashes[0],
            etag: Some("\"e\"".into()),
            last_modified: None,
            checked_at_ms: 1,
        };
        {
            let maps = Maps::open(dir.path()).unwrap();
            // Concurrent durable inserts share syncs; every one must land.
            std::thread::scope(|s| {
                for chunk in hashes.chunks(8) {
                    let maps = maps.clone();
                    s.spawn(move || {
                        for h in chunk {
                            assert!(maps.originals.insert_durable(h, &info(1)).unwrap());
                        }
                    });
                }
            });
            assert!(!maps.originals.insert_durable(&hashes[0], &info(2)).unwrap());
            maps.urls.put("http://a.example/x", &url_entry).unwrap();
            assert_eq!(
                maps.urls.get("http://a.example/x").unwrap(),
                Some(url_entry.clone())
            );
            maps.flush().unwrap();
            maps.flush().unwrap();
        }
        let maps = Maps::open(dir.path()).unwrap();
        assert_eq!(maps.originals.hashes().unwrap().len(), 64);
        assert_eq!(maps.originals.get(&hashes[0]).unwrap().unwrap().bytes, 1);
        assert_eq!(
            maps.urls.get("http://a.example/x").unwrap(),
            Some(url_entry)
        );
        maps.check().unwrap();
    }
}
