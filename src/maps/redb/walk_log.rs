//! The walks' positions: walk name → its [`WalkPosition`] as JSON. Written without a sync of
//! its own (the periodic flush makes it durable): a position lost to a crash sends the walk
//! back at most a second's pages.

use redb::{ReadTransaction, ReadableTable, TableDefinition, WriteTransaction};

use super::super::walk_log::{decode, encode, WalkLog, WalkPosition};
use super::super::MapError;

const TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("walks");

pub(super) fn create(txn: &WriteTransaction) -> Result<(), MapError> {
    txn.open_table(TABLE)?;
    Ok(())
}

fn all(txn: &ReadTransaction) -> Result<Vec<(String, WalkPosition)>, MapError> {
    let table = txn.open_table(TABLE)?;
    let mut out = Vec::new();
    for row in table.iter()? {
        let (k, v) = row?;
        out.push((k.value().to_string(), decode(k.value(), v.value())?));
    }
    Ok(out)
}

use super::*;

#[async_trait]
impl WalkLog for RedbStore {
    async fn walk_position(&self, name: &str) -> Result<Option<WalkPosition>, MapError> {
        let name = name.to_string();
        self.db
            .run(move |db| {
                let txn = db.read()?;
                let table = txn.open_table(TABLE)?;
                let raw = table.get(name.as_str())?;
                raw.map(|r| decode(&name, r.value())).transpose()
            })
            .await
    }

    async fn put_walk_position(&self, name: &str, position: &WalkPosition) -> Result<(), MapError> {
        let (name, json) = (name.to_string(), encode(position)?);
        self.db
            .run(move |db| {
                db.write(|txn| {
                    txn.open_table(TABLE)?
                        .insert(name.as_str(), json.as_bytes())?;
                    Ok(())
                })
                .map(|_| ())
            })
            .await
    }

    async fn walk_positions(&self) -> Result<Vec<(String, WalkPosition)>, MapError> {
        self.db.run(|db| all(&db.read()?)).await
    }
}
