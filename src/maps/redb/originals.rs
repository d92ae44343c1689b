//! The originals index's table: hash (32 bytes) → its [`OriginalInfo`], as JSON.

use redb::{ReadTransaction, ReadableTable, TableDefinition, WriteTransaction};

use super::super::{MapError, OriginalFacts, OriginalInfo};
use crate::hash::ContentHash;

pub(super) const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("originals");

pub(super) fn create(txn: &WriteTransaction) -> Result<(), MapError> {
    txn.open_table(TABLE)?;
    Ok(())
}

pub(super) fn get(
    txn: &ReadTransaction,
    hash: &ContentHash,
) -> Result<Option<OriginalInfo>, MapError> {
    let table = txn.open_table(TABLE)?;
    let raw = table.get(hash.as_bytes().as_slice())?;
    raw.map(|r| {
        serde_json::from_slice(r.value())
            .map_err(|e| MapError::Corrupt(format!("original {hash}: {e}")))
    })
    .transpose()
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

/// Replaces an indexed original's facts; returns the entry as now stored (`None`: not
/// indexed, nothing written).
pub(super) fn set_facts(
    txn: &WriteTransaction,
    hash: &ContentHash,
    facts: &OriginalFacts,
) -> Result<Option<OriginalInfo>, MapError> {
    let mut table = txn.open_table(TABLE)?;
    let current = match table.get(hash.as_bytes().as_slice())? {
        Some(raw) => serde_json::from_slice::<OriginalInfo>(raw.value())
            .map_err(|e| MapError::Corrupt(format!("original {hash}: {e}")))?,
        None => return Ok(None),
    };
    let info = OriginalInfo {
        facts: Some(facts.clone()),
        ..current
    };
    let value = serde_json::to_vec(&info).map_err(|e| MapError::Corrupt(e.to_string()))?;
    table.insert(hash.as_bytes().as_slice(), value.as_slice())?;
    Ok(Some(info))
}

pub(super) fn remove(txn: &WriteTransaction, hash: &ContentHash) -> Result<(), MapError> {
    txn.open_table(TABLE)?.remove(hash.as_bytes().as_slice())?;
    Ok(())
}

pub(super) fn hashes(txn: &ReadTransaction) -> Result<Vec<ContentHash>, MapError> {
    super::keys_of(txn, TABLE, "originals", ContentHash::from_slice)
}
