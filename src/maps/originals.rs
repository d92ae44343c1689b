//! Originals index: content hash → what the original is (format, size, dimensions) and when
//! it was first seen. The bytes themselves live in the blob store.

use redb::{ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

use super::{Db, MapError};
use crate::hash::ContentHash;

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("originals");

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginalInfo {
    /// Sniffed format name (`jpeg`, …); `None` when the bytes are no image imgcas knows.
    pub format: Option<String>,
    /// Stored dimensions from the header (before EXIF orientation), when readable.
    pub width: Option<u32>,
    pub height: Option<u32>,
    pub has_alpha: bool,
    pub bytes: u64,
    pub first_seen_ms: u64,
}

/// Entries kept in memory after a read: every request reads its original's entry, and an
/// entry never changes once written (content-addressed), so only removal must forget one.
const RECENT_ENTRIES: u64 = 100_000;

#[derive(Clone)]
pub struct OriginalsIndex {
    pub(crate) db: Db,
    recent: moka::sync::Cache<ContentHash, OriginalInfo>,
}

pub(super) fn create(txn: &WriteTransaction) -> Result<(), MapError> {
    txn.open_table(TABLE)?;
    Ok(())
}

/// Inserts unless present (the first sighting wins). Returns whether it was inserted.
pub(super) fn insert_if_absent(
    txn: &WriteTransaction,
    hash: &ContentHash,
    info: &OriginalInfo,
) -> Result<bool, MapError> {
    let mut table = txn.open_table(TABLE)?;
    if table.get(hash.as_bytes().as_slice())?.is_some() {
        return Ok(false);
    }
    let value = serde_json::to_vec(info).map_err(|e| MapError::Corrupt(e.to_string()))?;
    table.insert(hash.as_bytes().as_slice(), value.as_slice())?;
    Ok(true)
}

fn decode(hash: &ContentHash, raw: &[u8]) -> Result<OriginalInfo, MapError> {
    serde_json::from_slice(raw).map_err(|e| MapError::Corrupt(format!("original {hash}: {e}")))
}

impl OriginalsIndex {
    pub(super) fn new(db: Db) -> Self {
        OriginalsIndex {
            db,
            recent: moka::sync::Cache::new(RECENT_ENTRIES),
        }
    }

    pub fn get(&self, hash: &ContentHash) -> Result<Option<OriginalInfo>, MapError> {
        if let Some(info) = self.recent.get(hash) {
            return Ok(Some(info));
        }
        let txn = self.db.read()?;
        let table = txn.open_table(TABLE)?;
        let raw = table.get(hash.as_bytes().as_slice())?;
        let info = raw.map(|r| decode(hash, r.value())).transpose()?;
        if let Some(info) = &info {
            self.recent.insert(*hash, info.clone());
        }
        Ok(info)
    }

    /// Insert-if-absent made durable before returning (group commit), for uploads that are
    /// acknowledged right after. Returns whether it was inserted.
    pub fn insert_durable(
        &self,
        hash: &ContentHash,
        info: &OriginalInfo,
    ) -> Result<bool, MapError> {
        let (inserted, seq) = self.db.write(|txn| insert_if_absent(txn, hash, info))?;
        self.db.sync(seq)?;
        Ok(inserted)
    }

    /// Drops an entry, durably (for `verify --repair`, when its blob is gone or wrong).
    pub fn remove_durable(&self, hash: &ContentHash) -> Result<(), MapError> {
        let ((), seq) = self.db.write(|txn| {
            txn.open_table(TABLE)?.remove(hash.as_bytes().as_slice())?;
            Ok(())
        })?;
        self.recent.invalidate(hash);
        self.db.sync(seq)
    }

    /// Every hash in the index, for `verify` and `gc`.
    pub fn hashes(&self) -> Result<Vec<ContentHash>, MapError> {
        let txn = self.db.read()?;
        let table = txn.open_table(TABLE)?;
        let mut out = Vec::new();
        for row in table.iter()? {
            let (k, _) = row?;
            let hash = ContentHash::from_slice(k.value())
                .ok_or_else(|| MapError::Corrupt("originals key is not 32 bytes".into()))?;
            out.push(hash);
        }
        Ok(out)
    }
}
