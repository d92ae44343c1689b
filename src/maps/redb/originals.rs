//! The originals index's table: hash (32 bytes) → its [`OriginalInfo`], as JSON.

use redb::{ReadTransaction, ReadableTable, TableDefinition, WriteTransaction};

use super::super::{Claim, MapError, OriginalFacts, OriginalInfo, Recorded};
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

/// Replaces an indexed original's facts (nothing for a hash not indexed).
pub(super) fn set_facts(
    txn: &WriteTransaction,
    hash: &ContentHash,
    facts: &OriginalFacts,
) -> Result<(), MapError> {
    let mut table = txn.open_table(TABLE)?;
    let current = match table.get(hash.as_bytes().as_slice())? {
        Some(raw) => serde_json::from_slice::<OriginalInfo>(raw.value())
            .map_err(|e| MapError::Corrupt(format!("original {hash}: {e}")))?,
        None => return Ok(()),
    };
    let info = OriginalInfo {
        facts: Some(facts.clone()),
        ..current
    };
    let value = serde_json::to_vec(&info).map_err(|e| MapError::Corrupt(e.to_string()))?;
    table.insert(hash.as_bytes().as_slice(), value.as_slice())?;
    Ok(())
}

pub(super) fn remove(txn: &WriteTransaction, hash: &ContentHash) -> Result<(), MapError> {
    txn.open_table(TABLE)?.remove(hash.as_bytes().as_slice())?;
    Ok(())
}

pub(super) fn hashes(txn: &ReadTransaction) -> Result<Vec<ContentHash>, MapError> {
    super::keys_of(txn, TABLE, "originals", ContentHash::from_slice)
}

use super::*;

#[async_trait]
impl Originals for RedbStore {
    async fn original(&self, hash: &ContentHash) -> Result<Option<OriginalInfo>, MapError> {
        let key = *hash;
        self.db
            .run(move |db| originals::get(&db.read()?, &key))
            .await
    }

    async fn add_original(
        &self,
        hash: &ContentHash,
        info: &OriginalInfo,
    ) -> Result<bool, MapError> {
        let (hash, info) = (*hash, info.clone());
        self.db
            .run(move |db| db.write_durable(|txn| originals::insert_if_absent(txn, &hash, &info)))
            .await
    }

    async fn record_download(
        &self,
        url: &str,
        entry: &UrlEntry,
        info: &OriginalInfo,
        // Claims on a file of one process's own are granted without a write.
        _claim: Option<&Claim>,
    ) -> Result<Recorded, MapError> {
        let (url, entry, info) = (url.to_string(), entry.clone(), info.clone());
        self.db
            .run(move |db| {
                db.write(|txn| {
                    let new = originals::insert_if_absent(txn, &entry.hash, &info)?;
                    url_map::put(txn, &url, &entry)?;
                    Ok(new)
                })
                .map(|(new_original, _)| Recorded {
                    new_original,
                    // The pipeline reads the list after the write (a read of this file).
                    listed: None,
                })
            })
            .await
    }

    async fn put_facts(&self, hash: &ContentHash, facts: &OriginalFacts) -> Result<(), MapError> {
        let (hash, facts) = (*hash, facts.clone());
        self.db
            .run(move |db| {
                db.write(|txn| originals::set_facts(txn, &hash, &facts))
                    .map(|_| ())
            })
            .await
    }

    async fn remove_original(&self, hash: &ContentHash) -> Result<(), MapError> {
        let hash = *hash;
        self.db
            .run(move |db| {
                db.write_durable(|txn| {
                    originals::remove(txn, &hash)?;
                    fingerprints::remove(txn, &hash)
                })?;
                Ok(())
            })
            .await
    }

    async fn original_hashes(&self) -> Result<Vec<ContentHash>, MapError> {
        self.db.run(|db| originals::hashes(&db.read()?)).await
    }
}
