//! URL map: canonical source URL → the hash last seen there, the origin's validators and when
//! the URL was last checked.

use redb::{ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};

use super::{Db, MapError};
use crate::hash::ContentHash;

const TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("urls");

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UrlEntry {
    pub hash: ContentHash,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    /// When the origin last confirmed or served the content, ms since the epoch.
    pub checked_at_ms: u64,
}

#[derive(Clone)]
pub struct UrlMap {
    pub(crate) db: Db,
}

pub(super) fn create(txn: &WriteTransaction) -> Result<(), MapError> {
    txn.open_table(TABLE)?;
    Ok(())
}

pub(super) fn put(txn: &WriteTransaction, url: &str, entry: &UrlEntry) -> Result<(), MapError> {
    let value = serde_json::to_vec(entry).map_err(|e| MapError::Corrupt(e.to_string()))?;
    txn.open_table(TABLE)?.insert(url, value.as_slice())?;
    Ok(())
}

impl UrlMap {
    pub fn get(&self, url: &str) -> Result<Option<UrlEntry>, MapError> {
        let txn = self.db.read()?;
        let table = txn.open_table(TABLE)?;
        let Some(raw) = table.get(url)? else {
            return Ok(None);
        };
        serde_json::from_slice(raw.value())
            .map(Some)
            .map_err(|e| MapError::Corrupt(format!("url map entry for {url}: {e}")))
    }

    pub fn put(&self, url: &str, entry: &UrlEntry) -> Result<(), MapError> {
        self.db.write(|txn| put(txn, url, entry)).map(|((), _)| ())
    }

    /// Drops an entry: the URL is downloaded afresh on its next request.
    pub fn remove(&self, url: &str) -> Result<(), MapError> {
        self.db
            .write(|txn| {
                txn.open_table(TABLE)?.remove(url)?;
                Ok(())
            })
            .map(|((), _)| ())
    }

    /// Every entry, for `verify` and `gc`.
    pub fn all(&self) -> Result<Vec<(String, UrlEntry)>, MapError> {
        let txn = self.db.read()?;
        let table = txn.open_table(TABLE)?;
        let mut out = Vec::new();
        for row in table.iter()? {
            let (k, v) = row?;
            let entry = serde_json::from_slice(v.value())
                .map_err(|e| MapError::Corrupt(format!("url map entry for {}: {e}", k.value())))?;
            out.push((k.value().to_string(), entry));
        }
        Ok(out)
    }
}
