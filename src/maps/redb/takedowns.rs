//! The takedown list (hash → when it was taken down, ms since the epoch) and the purge
//! generation. One process owns the file, so no other node follows the generation; it is
//! kept anyway, so that both backends answer the same.

use redb::{ReadTransaction, ReadableTable, TableDefinition, WriteTransaction};

use super::super::MapError;
use crate::hash::ContentHash;

const TABLE: TableDefinition<&[u8], u64> = TableDefinition::new("takedowns");
const META: TableDefinition<&str, u64> = TableDefinition::new("purge_meta");
const GENERATION: &str = "generation";

pub(super) fn create(txn: &WriteTransaction) -> Result<(), MapError> {
    txn.open_table(TABLE)?;
    txn.open_table(META)?;
    Ok(())
}

/// Lists `hash`; returns whether it was not listed (a listed hash keeps its first stamp).
pub(super) fn put(
    txn: &WriteTransaction,
    hash: &ContentHash,
    at_ms: u64,
) -> Result<bool, MapError> {
    let mut table = txn.open_table(TABLE)?;
    if table.get(hash.as_bytes().as_slice())?.is_some() {
        return Ok(false);
    }
    table.insert(hash.as_bytes().as_slice(), at_ms)?;
    Ok(true)
}

pub(super) fn remove(txn: &WriteTransaction, hash: &ContentHash) -> Result<bool, MapError> {
    let removed = txn
        .open_table(TABLE)?
        .remove(hash.as_bytes().as_slice())?
        .is_some();
    Ok(removed)
}

pub(super) fn get(txn: &ReadTransaction, hash: &ContentHash) -> Result<bool, MapError> {
    Ok(txn
        .open_table(TABLE)?
        .get(hash.as_bytes().as_slice())?
        .is_some())
}

pub(super) fn all(txn: &ReadTransaction) -> Result<Vec<(ContentHash, u64)>, MapError> {
    let table = txn.open_table(TABLE)?;
    let mut out = Vec::new();
    for row in table.iter()? {
        let (k, v) = row?;
        let hash = ContentHash::from_slice(k.value())
            .ok_or_else(|| MapError::Corrupt("takedowns key".into()))?;
        out.push((hash, v.value()));
    }
    Ok(out)
}

pub(super) fn generation(txn: &ReadTransaction) -> Result<u64, MapError> {
    Ok(txn
        .open_table(META)?
        .get(GENERATION)?
        .map_or(0, |g| g.value()))
}

pub(super) fn bump(txn: &WriteTransaction) -> Result<u64, MapError> {
    let mut meta = txn.open_table(META)?;
    let next = meta.get(GENERATION)?.map_or(0, |g| g.value()) + 1;
    meta.insert(GENERATION, next)?;
    Ok(next)
}

use super::*;

#[async_trait]
impl Takedowns for RedbStore {
    async fn take_down(&self, hash: &ContentHash, at_ms: u64) -> Result<bool, MapError> {
        let hash = *hash;
        self.db
            .run(move |db| db.write_durable(|txn| takedowns::put(txn, &hash, at_ms)))
            .await
    }

    async fn lift_takedown(&self, hash: &ContentHash) -> Result<bool, MapError> {
        let hash = *hash;
        self.db
            .run(move |db| db.write_durable(|txn| takedowns::remove(txn, &hash)))
            .await
    }

    async fn takedowns(&self) -> Result<Vec<(ContentHash, u64)>, MapError> {
        self.db.run(|db| takedowns::all(&db.read()?)).await
    }

    async fn is_taken_down(&self, hash: &ContentHash) -> Result<bool, MapError> {
        let hash = *hash;
        self.db
            .run(move |db| takedowns::get(&db.read()?, &hash))
            .await
    }

    async fn purge_generation(&self) -> Result<u64, MapError> {
        self.db.run(|db| takedowns::generation(&db.read()?)).await
    }

    async fn bump_purge_generation(&self) -> Result<u64, MapError> {
        self.db.run(|db| db.write_durable(takedowns::bump)).await
    }
}
