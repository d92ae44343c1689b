//! The originals index's table: hash (32 bytes) → its [`OriginalInfo`], as JSON. Every write
//! keeps the index by facts version (`by_version.rs`) in the same transaction.

use redb::{ReadTransaction, ReadableTable, TableDefinition, WriteTransaction};

use super::super::{Claim, Focus, MapError, OriginalFacts, OriginalInfo, Recorded, VersionCursor};
use super::by_version::{self, Computed};
use super::kept_totals;
use crate::hash::ContentHash;

pub(super) const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("originals");

pub(super) fn create(txn: &WriteTransaction) -> Result<(), MapError> {
    txn.open_table(TABLE)?;
    Ok(())
}

pub(super) fn decode(hash: &ContentHash, raw: &[u8]) -> Result<OriginalInfo, MapError> {
    serde_json::from_slice(raw).map_err(|e| MapError::Corrupt(format!("original {hash}: {e}")))
}

/// Whether the file holds no original, seen from a write.
pub(super) fn none(txn: &WriteTransaction) -> Result<bool, MapError> {
    use redb::ReadableTableMetadata;
    Ok(txn.open_table(TABLE)?.is_empty()?)
}

/// Every original's hash and bytes, from a write (the kept totals' count at an older file's
/// first open).
pub(super) fn sizes_in_write(txn: &WriteTransaction) -> Result<Vec<(ContentHash, u64)>, MapError> {
    let table = txn.open_table(TABLE)?;
    let mut out = Vec::new();
    for row in table.iter()? {
        let (k, v) = row?;
        let hash = ContentHash::from_slice(k.value())
            .ok_or_else(|| MapError::Corrupt("originals key".into()))?;
        out.push((hash, decode(&hash, v.value())?.bytes));
    }
    Ok(out)
}

/// Up to `chunk` originals after `cursor`, each with its facts version, from a write (the
/// indexes' build at the first open of an older file).
pub(super) fn facts_versions_after(
    txn: &WriteTransaction,
    cursor: Option<ContentHash>,
    chunk: usize,
) -> Result<Vec<(ContentHash, u32)>, MapError> {
    use std::ops::Bound;
    let table = txn.open_table(TABLE)?;
    let from = cursor.as_ref().map_or(Bound::Unbounded, |c| {
        Bound::Excluded(c.as_bytes().as_slice())
    });
    let mut found = Vec::new();
    for row in table.range::<&[u8]>((from, Bound::Unbounded))? {
        if found.len() == chunk {
            break;
        }
        let (k, v) = row?;
        let hash = ContentHash::from_slice(k.value())
            .ok_or_else(|| MapError::Corrupt("originals key".into()))?;
        found.push((hash, decode(&hash, v.value())?.facts_version()));
    }
    Ok(found)
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
    drop(table);
    kept_totals::original_changed(txn, hash, info.bytes, 1)?;
    by_version::set(txn, Computed::Facts, hash, None, Some(info.facts_version()))?;
    // A fingerprint may be kept already (computed before the entry was written).
    let fingerprinted = super::fingerprints::stored_version(txn, hash)?.unwrap_or(0);
    by_version::set(txn, Computed::Fingerprint, hash, None, Some(fingerprinted))?;
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
    let was = current.facts_version();
    let info = OriginalInfo {
        facts: Some(facts.clone()),
        ..current
    };
    let value = serde_json::to_vec(&info).map_err(|e| MapError::Corrupt(e.to_string()))?;
    table.insert(hash.as_bytes().as_slice(), value.as_slice())?;
    drop(table);
    by_version::set(txn, Computed::Facts, hash, Some(was), Some(facts.version))
}

/// Replaces an indexed original's focal point; whether the hash is indexed.
pub(super) fn set_focus(
    txn: &WriteTransaction,
    hash: &ContentHash,
    focus: Option<&Focus>,
) -> Result<bool, MapError> {
    let mut table = txn.open_table(TABLE)?;
    let current = match table.get(hash.as_bytes().as_slice())? {
        Some(raw) => decode(hash, raw.value())?,
        None => return Ok(false),
    };
    let info = OriginalInfo {
        focus: focus.copied(),
        ..current
    };
    let value = serde_json::to_vec(&info).map_err(|e| MapError::Corrupt(e.to_string()))?;
    table.insert(hash.as_bytes().as_slice(), value.as_slice())?;
    Ok(true)
}

pub(super) fn remove(txn: &WriteTransaction, hash: &ContentHash) -> Result<(), MapError> {
    let mut table = txn.open_table(TABLE)?;
    let removed = match table.remove(hash.as_bytes().as_slice())? {
        Some(raw) => Some(decode(hash, raw.value())?),
        None => None,
    };
    drop(table);
    if let Some(info) = removed {
        kept_totals::original_changed(txn, hash, info.bytes, -1)?;
        by_version::set(txn, Computed::Facts, hash, Some(info.facts_version()), None)?;
        let fingerprinted = super::fingerprints::stored_version(txn, hash)?.unwrap_or(0);
        by_version::set(txn, Computed::Fingerprint, hash, Some(fingerprinted), None)?;
    }
    Ok(())
}

pub(super) fn page(
    txn: &ReadTransaction,
    after: Option<ContentHash>,
    limit: usize,
) -> Result<Vec<(ContentHash, OriginalInfo)>, MapError> {
    let after = after.map(|h| h.0);
    super::page_of(
        txn,
        TABLE,
        after.as_ref().map(|a| a.as_slice()),
        limit,
        "originals",
        |k, v| {
            let hash = ContentHash::from_slice(k).ok_or_else(|| MapError::Corrupt("key".into()))?;
            Ok(Some((hash, decode(&hash, v)?)))
        },
    )
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

    async fn put_focus(&self, hash: &ContentHash, focus: Option<&Focus>) -> Result<bool, MapError> {
        let (hash, focus) = (*hash, focus.copied());
        self.db
            .run(move |db| db.write_durable(|txn| originals::set_focus(txn, &hash, focus.as_ref())))
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

    async fn originals_page(
        &self,
        after: Option<ContentHash>,
        limit: usize,
    ) -> Result<Vec<(ContentHash, OriginalInfo)>, MapError> {
        self.db
            .run(move |db| originals::page(&db.read()?, after, limit))
            .await
    }

    async fn lacking_facts(
        &self,
        version: u32,
        after: Option<VersionCursor>,
        limit: usize,
    ) -> Result<Vec<VersionCursor>, MapError> {
        self.db
            .run(move |db| by_version::lacking(&db.read()?, Computed::Facts, version, after, limit))
            .await
    }
}
