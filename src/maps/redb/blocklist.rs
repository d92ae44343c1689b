//! The moderation blocklist: entry id → the entry as JSON. Written durably, like the
//! takedown list: a listing must survive a crash that follows its answer.

use redb::{ReadTransaction, ReadableTable, TableDefinition, WriteTransaction};

use super::super::{BlockEntry, MapError};

const TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("blocklist");

pub(super) fn create(txn: &WriteTransaction) -> Result<(), MapError> {
    txn.open_table(TABLE)?;
    Ok(())
}

fn put(txn: &WriteTransaction, entry: &BlockEntry) -> Result<bool, MapError> {
    let json = serde_json::to_vec(entry).map_err(|e| MapError::Corrupt(e.to_string()))?;
    let mut table = txn.open_table(TABLE)?;
    let old = table.insert(entry.id.as_str(), json.as_slice())?;
    Ok(old.is_none())
}

fn remove(txn: &WriteTransaction, id: &str) -> Result<bool, MapError> {
    Ok(txn.open_table(TABLE)?.remove(id)?.is_some())
}

fn all(txn: &ReadTransaction) -> Result<Vec<BlockEntry>, MapError> {
    let table = txn.open_table(TABLE)?;
    let mut out = Vec::new();
    for row in table.iter()? {
        let (_, v) = row?;
        let entry = serde_json::from_slice(v.value())
            .map_err(|e| MapError::Corrupt(format!("blocklist entry: {e}")))?;
        out.push(entry);
    }
    Ok(out)
}

use super::*;

#[async_trait]
impl Blocklist for RedbStore {
    async fn block(&self, entry: &BlockEntry) -> Result<bool, MapError> {
        let entry = entry.clone();
        self.db
            .run(move |db| db.write_durable(|txn| put(txn, &entry)))
            .await
    }

    async fn unblock(&self, id: &str) -> Result<bool, MapError> {
        let id = id.to_string();
        self.db
            .run(move |db| db.write_durable(|txn| remove(txn, &id)))
            .await
    }

    async fn blocklist(&self) -> Result<Vec<BlockEntry>, MapError> {
        self.db.run(|db| all(&db.read()?)).await
    }
}
