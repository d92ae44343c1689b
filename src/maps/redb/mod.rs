//! The embedded map backend: one redb file (`<data_dir>/imgcas.redb`) holding the three maps.
//! `url_map.rs` owns the URL map and its index by hash, `originals.rs` a table, `variants.rs`
//! the variants' rows, the pieces of large images and the budget's bookkeeping,
//! `fingerprints.rs` the near-duplicate tables and their index, `by_version.rs` the originals'
//! indexes by facts and fingerprint version, `takedowns.rs` the takedown list,
//! `blocklist.rs` the moderation blocklist and `walk_log.rs` the walks' positions; each owns its encoding and implements its role of [`MapStore`] (claims keep the trait's
//! defaults: one process owns the file).
//! Nothing outside this folder touches redb.
//!
//! redb is a blocking library, so every operation that touches the file runs on tokio's
//! blocking pool. The two reads every request by URL makes (its URL entry, its original's
//! entry) are answered from memory by [`Cached`], which wears this store without a time
//! limit: one process owns the file, so every write goes through it.
//!
//! Durability by group commit: every write commits without an fsync (`Durability::None`,
//! visible to readers at once) and gets a sequence number. [`Db::sync`] makes all writes up
//! to a number durable with one empty durable commit; callers who find that a concurrent sync
//! already covered them skip theirs, so a burst of uploads shares fsyncs instead of paying ≈ 7 ms
//! each. Uploads sync before they are acknowledged; the URL map and the variants (rebuildable
//! from origins and originals) are synced by the periodic flush and at shutdown.
//!
//! Space: redb reuses a freed page only once no durable commit references it, so between two
//! syncs the file holds both the variants evicted and those that replaced them. Variant
//! writes therefore also sync after every [`SYNC_AFTER_BYTES`] written, which bounds that
//! overlap to a few MiB however fast variants churn under a small budget.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use redb::{Database, Durability, ReadTransaction, ReadableDatabase, WriteTransaction};

use super::cache::Cached;
use super::{
    now_ms, Blocklist, Bucket, Claims, Fingerprints, HeldFailure, MapError, MapStore, MemoryQuotas,
    NearFound, NearMatch, OriginSlot, OriginTurn, Originals, Quotas, SlotTake, Take, Takedowns,
    UrlEntry, UrlMap, Variants,
};
use crate::hash::ContentHash;

mod blocklist;
mod by_version;
mod fingerprints;
mod kept_totals;
mod originals;
mod takedowns;
mod url_map;
mod variants;
mod walk_log;

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
    redb::SetDurabilityError,
    redb::CompactionError
);

/// Whether a redb error is the file's I/O failing (a full disk, say), after which redb
/// refuses every transaction (`PreviousIo`) until the file is opened again.
trait IoFault {
    fn is_io(&self) -> bool;
}

impl IoFault for redb::StorageError {
    fn is_io(&self) -> bool {
        matches!(
            self,
            redb::StorageError::Io(_) | redb::StorageError::PreviousIo
        )
    }
}

impl IoFault for redb::TransactionError {
    fn is_io(&self) -> bool {
        matches!(self, redb::TransactionError::Storage(s) if s.is_io())
    }
}

impl IoFault for redb::CommitError {
    fn is_io(&self) -> bool {
        matches!(self, redb::CommitError::Storage(s) if s.is_io())
    }
}

/// Whether the file system holding `file` takes a write of a few pages now (a probe file
/// beside it, written, synced and removed).
fn room_to_write(file: &std::path::Path) -> bool {
    use std::io::Write;
    let probe = file.with_extension("space-probe");
    let written = std::fs::File::create(&probe)
        .and_then(|mut f| f.write_all(&[0u8; 1 << 20]).and_then(|()| f.sync_all()));
    let _ = std::fs::remove_file(&probe);
    written.is_ok()
}

/// The least time between two attempts to open a failed file again.
const REOPEN_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The database handle and its group-commit bookkeeping.
#[derive(Clone)]
struct Db {
    /// Transactions begin under the read lock (they do not borrow the database); compaction
    /// and reopening take the write lock, since they need the `Database` itself.
    db: Arc<RwLock<Database>>,
    /// The file, to open again after an I/O failure.
    path: Arc<PathBuf>,
    /// An I/O failure left the handle refusing every transaction (issue 28: one ENOSPC broke
    /// the maps until a restart, while `/readyz` said ready). Every operation then tries to
    /// open the file again first (at most once a second), and fails until it can.
    broken: Arc<AtomicBool>,
    /// Set while the failed handle is closed and the file not open again (an attempt that
    /// failed half way): reads refuse too, rather than read the empty stand-in.
    closed: Arc<AtomicBool>,
    last_reopen: Arc<Mutex<Option<std::time::Instant>>>,
    /// Sequence number of the last committed (maybe not yet durable) write.
    written: Arc<AtomicU64>,
    /// Sequence number up to which writes are durable; the lock serializes syncs.
    durable: Arc<Mutex<u64>>,
    /// Variant bytes written since the last sync.
    unsynced_bytes: Arc<AtomicU64>,
    /// The page cache the file is opened with (`maps.cache_bytes`), again when reopened.
    cache: usize,
}

/// Variant bytes written without a sync after which a variant write syncs.
const SYNC_AFTER_BYTES: u64 = 1 << 20;

impl Db {
    fn database(&self) -> std::sync::RwLockReadGuard<'_, Database> {
        self.db.read().unwrap_or_else(|p| p.into_inner())
    }

    /// A read transaction. Reads keep working on a handle a failed write broke (hits go on
    /// being served while the disk is full); only a handle closed for a reopen that failed
    /// refuses them.
    fn read(&self) -> Result<ReadTransaction, MapError> {
        if self.closed.load(Ordering::Acquire) {
            self.usable()?;
        }
        let txn = self.database().begin_read();
        self.watched(txn)
    }

    /// A redb result, noting an I/O failure (see `broken`).
    fn watched<T, E: IoFault + Into<MapError>>(&self, result: Result<T, E>) -> Result<T, MapError> {
        result.map_err(|e| {
            if e.is_io() && !self.broken.swap(true, Ordering::AcqRel) {
                let error: MapError = e.into();
                tracing::error!(%error, "the map file failed to write; refusing map work until it opens again");
                return error;
            }
            e.into()
        })
    }

    /// `Ok` when the handle works, after opening the file again if an I/O failure broke it.
    fn usable(&self) -> Result<(), MapError> {
        if !self.broken.load(Ordering::Acquire) {
            return Ok(());
        }
        let refused = || {
            MapError::Store(format!(
                "{} failed to write (a full disk?) and cannot be opened again yet",
                self.path.display()
            ))
        };
        {
            let mut last = self.last_reopen.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|at| at.elapsed() < REOPEN_EVERY) {
                return Err(refused());
            }
            *last = Some(std::time::Instant::now());
        }
        // Closing the handle cannot be undone, and opening the file again may need to write
        // (its recovery): tried only once the disk takes a write again.
        if !self.closed.load(Ordering::Acquire) && !room_to_write(&self.path) {
            return Err(refused());
        }
        let mut database = self.db.write().unwrap_or_else(|p| p.into_inner());
        if !self.broken.load(Ordering::Acquire) {
            return Ok(());
        }
        self.closed.store(true, Ordering::Release);
        // The file admits one handle: the failed one is closed first, an empty one in
        // memory standing in meanwhile (never used: `broken` stays set until the file is
        // open again).
        let stand_in = Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .map_err(|e| MapError::Store(e.to_string()))?;
        drop(std::mem::replace(&mut *database, stand_in));
        match Database::builder()
            .set_cache_size(self.cache)
            .create(self.path.as_ref())
        {
            Ok(reopened) => {
                *database = reopened;
                self.closed.store(false, Ordering::Release);
                self.broken.store(false, Ordering::Release);
                tracing::info!(path = %self.path.display(), "the map file is open again");
                Ok(())
            }
            Err(e) => {
                tracing::warn!(error = %e, "the map file cannot be opened again yet");
                Err(refused())
            }
        }
    }

    /// Runs `f` in one write transaction and commits it without an fsync. Returns the value
    /// and the write's sequence number, for [`Db::sync`].
    fn write<T>(
        &self,
        f: impl FnOnce(&WriteTransaction) -> Result<T, MapError>,
    ) -> Result<(T, u64), MapError> {
        self.usable()?;
        let txn = self.database().begin_write();
        let mut txn = self.watched(txn)?;
        txn.set_durability(Durability::None)?;
        let out = f(&txn)?;
        let committed = txn.commit();
        self.watched(committed)?;
        let seq = self.written.fetch_add(1, Ordering::AcqRel) + 1;
        Ok((out, seq))
    }

    /// A write made durable before returning.
    fn write_durable<T>(
        &self,
        f: impl FnOnce(&WriteTransaction) -> Result<T, MapError>,
    ) -> Result<T, MapError> {
        let (out, seq) = self.write(f)?;
        self.sync(seq)?;
        Ok(out)
    }

    /// Makes every write up to `seq` durable (group commit).
    fn sync(&self, seq: u64) -> Result<(), MapError> {
        let mut durable = self.durable.lock().unwrap_or_else(|p| p.into_inner());
        if *durable >= seq {
            return Ok(());
        }
        // Everything committed before this load is covered by the commit below.
        let covered = self.written.load(Ordering::Acquire);
        self.usable()?;
        let txn = self.database().begin_write();
        let committed = self.watched(txn)?.commit();
        self.watched(committed)?;
        *durable = covered;
        self.unsynced_bytes.store(0, Ordering::Relaxed);
        Ok(())
    }

    /// Runs blocking database work on the blocking pool.
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Db) -> Result<T, MapError> + Send + 'static,
    ) -> Result<T, MapError> {
        let db = self.clone();
        tokio::task::spawn_blocking(move || f(&db))
            .await
            .map_err(|e| MapError::Store(format!("map task failed: {e}")))?
    }
}

/// Up to `limit` rows of a table keyed by bytes, after the key `after` (from the first when
/// `None`), in key order, decoded by `decode`; a row it refuses is corruption (named `what`).
/// `keep` picks the rows a page holds (a page is `limit` rows kept, however many it skips).
fn page_of<T>(
    txn: &ReadTransaction,
    table: redb::TableDefinition<&[u8], &[u8]>,
    after: Option<&[u8]>,
    limit: usize,
    what: &str,
    decode: impl Fn(&[u8], &[u8]) -> Result<Option<T>, MapError>,
) -> Result<Vec<T>, MapError> {
    use std::ops::Bound;
    let table = txn.open_table(table)?;
    let from = after.map_or(Bound::Unbounded, Bound::Excluded);
    let mut out = Vec::new();
    for row in table.range::<&[u8]>((from, Bound::Unbounded))? {
        if out.len() >= limit {
            break;
        }
        let (k, v) = row?;
        match decode(k.value(), v.value()) {
            Ok(Some(item)) => out.push(item),
            Ok(None) => {}
            Err(MapError::Corrupt(why)) => return Err(MapError::Corrupt(format!("{what}: {why}"))),
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// The three maps in one redb file. Its memory of rows is [`Cached`]'s, which every
/// handle given out wears ([`RedbMaps`]).
#[derive(Clone)]
pub struct RedbStore {
    db: Db,
    /// The quotas of the one process the file admits, in its memory.
    quotas: std::sync::Arc<MemoryQuotas>,
}

/// The embedded maps as the service uses them: the file, with its memory.
pub type RedbMaps = Cached<RedbStore>;

/// The page cache of the embedded file unless `maps.cache_bytes` says otherwise: redb's own
/// default (1 GiB) filled as the file grew and was never given back (audit #3: 100,000
/// uploads took a node from 100 MB to 529 MB).
pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;

impl RedbMaps {
    /// Opens (or creates) `<data_dir>/imgcas.redb`. Fails while another process holds it.
    pub async fn open(data_dir: PathBuf) -> Result<RedbMaps, MapError> {
        Self::open_with(data_dir, None).await
    }

    /// [`RedbMaps::open`] with a page cache of `cache_bytes` (unset: the default).
    pub async fn open_with(
        data_dir: PathBuf,
        cache_bytes: Option<usize>,
    ) -> Result<RedbMaps, MapError> {
        Ok(Cached::new(RedbStore::open(data_dir, cache_bytes).await?))
    }
}

impl RedbStore {
    /// Opens (or creates) `<data_dir>/imgcas.redb`, without memory, with a page cache of
    /// `cache_bytes` (unset: [`DEFAULT_CACHE_BYTES`]). Fails while another process holds it.
    pub async fn open(
        data_dir: PathBuf,
        cache_bytes: Option<usize>,
    ) -> Result<RedbStore, MapError> {
        let cache = cache_bytes.unwrap_or(DEFAULT_CACHE_BYTES);
        tokio::task::spawn_blocking(move || Self::open_blocking(&data_dir, cache))
            .await
            .map_err(|e| MapError::Store(format!("map task failed: {e}")))?
    }

    fn open_blocking(data_dir: &std::path::Path, cache: usize) -> Result<RedbStore, MapError> {
        std::fs::create_dir_all(data_dir)
            .map_err(|e| MapError::Store(format!("cannot create {}: {e}", data_dir.display())))?;
        let database = Database::builder()
            .set_cache_size(cache)
            .create(data_dir.join("imgcas.redb"))?;
        let db = Db {
            db: Arc::new(RwLock::new(database)),
            path: Arc::new(data_dir.join("imgcas.redb")),
            broken: Arc::new(AtomicBool::new(false)),
            closed: Arc::new(AtomicBool::new(false)),
            last_reopen: Arc::new(Mutex::new(None)),
            written: Arc::new(AtomicU64::new(0)),
            durable: Arc::new(Mutex::new(0)),
            unsynced_bytes: Arc::new(AtomicU64::new(0)),
            cache,
        };
        // Readers expect every table to exist.
        db.write_durable(|txn| {
            url_map::create(txn)?;
            originals::create(txn)?;
            by_version::create(txn, originals::none(txn)?)?;
            variants::create(txn, now_ms())?;
            fingerprints::create(txn)?;
            takedowns::create(txn)?;
            blocklist::create(txn)?;
            walk_log::create(txn)?;
            kept_totals::create(txn)?;
            Ok(())
        })?;
        // A file written before the near-neighbour index was kept on disk gets it now, a
        // chunk per write (an interrupted build goes on where it stopped).
        let (built, mut cursor) = fingerprints::index_state(&db.read()?)?;
        if !built {
            loop {
                cursor = db.write_durable(|txn| {
                    fingerprints::build_index(txn, cursor, fingerprints::BUILD_CHUNK)
                })?;
                if cursor.is_none() {
                    break;
                }
            }
        }
        // A file written before the totals were kept gets them counted (one write).
        if !kept_totals::counted(&db.read()?)? {
            db.write_durable(|txn| {
                for (hash, bytes) in originals::sizes_in_write(txn)? {
                    kept_totals::original_changed(txn, &hash, bytes, 1)?;
                }
                for entry in url_map::all_in_write(txn)? {
                    kept_totals::url_changed(txn, None, Some(&entry))?;
                }
                kept_totals::mark_counted(txn)
            })?;
        }
        // Likewise the originals' indexes by facts and fingerprint version.
        let (built, mut cursor) = by_version::state(&db.read()?)?;
        if !built {
            loop {
                cursor = db.write_durable(|txn| build_version_indexes(txn, cursor))?;
                if cursor.is_none() {
                    break;
                }
            }
        }
        Ok(RedbStore {
            db,
            quotas: Default::default(),
        })
    }
}

/// Indexes a chunk of an older file's originals by facts and fingerprint version, after
/// `cursor`; returns where to go on (`None`: done, the indexes marked built).
fn build_version_indexes(
    txn: &WriteTransaction,
    cursor: Option<ContentHash>,
) -> Result<Option<ContentHash>, MapError> {
    use by_version::Computed;
    let found = originals::facts_versions_after(txn, cursor, by_version::BUILD_CHUNK)?;
    for (hash, facts) in &found {
        by_version::set(txn, Computed::Facts, hash, None, Some(*facts))?;
        let fingerprinted = fingerprints::stored_version(txn, hash)?.unwrap_or(0);
        by_version::set(txn, Computed::Fingerprint, hash, None, Some(fingerprinted))?;
    }
    let next = match found.last() {
        Some((hash, _)) if found.len() == by_version::BUILD_CHUNK => Some(*hash),
        _ => None,
    };
    by_version::mark_built(txn, next.as_ref())?;
    Ok(next)
}

impl RedbStore {
    /// Runs a removal of URL entries (`doom` returns the URLs it removed) in one write;
    /// returns how many.
    async fn drop_urls(
        &self,
        doom: impl FnOnce(&WriteTransaction) -> Result<Vec<String>, MapError> + Send + 'static,
    ) -> Result<u64, MapError> {
        self.db
            .run(move |db| {
                let (dropped, _) = db.write(|txn| Ok(doom(txn)?.len() as u64))?;
                Ok(dropped)
            })
            .await
    }
}

/// One process owns the file: every claim is granted (the trait's defaults).
impl Claims for RedbStore {}

/// One process owns the file: its quotas are that process's, kept in its memory.
#[async_trait]
impl Quotas for RedbStore {
    async fn take_origin_turn(
        &self,
        turn: &OriginTurn<'_>,
    ) -> Result<(SlotTake, Option<HeldFailure>), MapError> {
        self.quotas.take_origin_turn(turn).await
    }

    async fn release_origin_slot(&self, slot: &OriginSlot) -> Result<(), MapError> {
        self.quotas.release_origin_slot(slot).await
    }

    async fn origin_slots_held(&self, origin: &str) -> Result<u32, MapError> {
        self.quotas.origin_slots_held(origin).await
    }

    async fn pause_origin(&self, origin: &str, length: Duration) -> Result<(), MapError> {
        self.quotas.pause_origin(origin, length).await
    }

    async fn origin_pause(&self, origin: &str) -> Result<Option<Duration>, MapError> {
        self.quotas.origin_pause(origin).await
    }

    async fn take_tokens(
        &self,
        key: &str,
        bucket: Bucket,
        need: f64,
        cost: f64,
    ) -> Result<Take, MapError> {
        self.quotas.take_tokens(key, bucket, need, cost).await
    }

    async fn held_failure(&self, url: &str) -> Result<Option<HeldFailure>, MapError> {
        self.quotas.held_failure(url).await
    }

    async fn hold_failure(
        &self,
        url: &str,
        error: &str,
        streak: u32,
        hold: Duration,
        remember: Duration,
    ) -> Result<(), MapError> {
        let quotas = &self.quotas;
        quotas
            .hold_failure(url, error, streak, hold, remember)
            .await
    }

    async fn clear_failure(&self, url: &str) -> Result<(), MapError> {
        self.quotas.clear_failure(url).await
    }
}

#[async_trait]
impl MapStore for RedbStore {
    async fn flush(&self) -> Result<(), MapError> {
        self.db
            .run(|db| db.sync(db.written.load(Ordering::Acquire)))
            .await
    }

    /// The totals as kept by every write (`kept_totals.rs`): a read of seven numbers.
    async fn totals(&self) -> Result<super::StoreTotals, MapError> {
        self.db.run(|db| kept_totals::read(&db.read()?)).await
    }

    async fn compact(&self) -> Result<bool, MapError> {
        self.db
            .run(|db| {
                // Compaction rewrites from the last durable state: make everything durable.
                db.sync(db.written.load(Ordering::Acquire))?;
                let mut database = db.db.write().unwrap_or_else(|p| p.into_inner());
                Ok(database.compact()?)
            })
            .await
    }

    /// Ready when a read answers and the handle is not broken by a failed write (a full
    /// disk): `/readyz` then says not ready until the file opens again.
    async fn check(&self) -> Result<(), MapError> {
        self.db
            .run(|db| {
                db.usable()?;
                originals::get(&db.read()?, &ContentHash([0; 32])).map(|_| ())
            })
            .await
    }
}
