//! The URL map's table: canonical URL → its [`UrlEntry`], as JSON (the encoding every
//! release so far has written).

use redb::{ReadTransaction, ReadableTable, TableDefinition, WriteTransaction};

use super::super::{MapError, UrlEntry};

const TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("urls");

pub(super) fn create(txn: &WriteTransaction) -> Result<(), MapError> {
    txn.open_table(TABLE)?;
    Ok(())
}

fn decode(url: &str, raw: &[u8]) -> Result<UrlEntry, MapError> {
    serde_json::from_slice(raw)
        .map_err(|e| MapError::Corrupt(format!("url map entry for {url}: {e}")))
}

pub(super) fn get(txn: &ReadTransaction, url: &str) -> Result<Option<UrlEntry>, MapError> {
    let table = txn.open_table(TABLE)?;
    let raw = table.get(url)?;
    raw.map(|r| decode(url, r.value())).transpose()
}

pub(super) fn put(txn: &WriteTransaction, url: &str, entry: &UrlEntry) -> Result<(), MapError> {
    let value = serde_json::to_vec(entry).map_err(|e| MapError::Corrupt(e.to_string()))?;
    txn.open_table(TABLE)?.insert(url, value.as_slice())?;
    Ok(())
}

pub(super) fn remove(txn: &WriteTransaction, url: &str) -> Result<(), MapError> {
    txn.open_table(TABLE)?.remove(url)?;
    Ok(())
}

pub(super) fn all(txn: &ReadTransaction) -> Result<Vec<(String, UrlEntry)>, MapError> {
    let table = txn.open_table(TABLE)?;
    let mut out = Vec::new();
    for row in table.iter()? {
        let (k, v) = row?;
        out.push((k.value().to_string(), decode(k.value(), v.value())?));
    }
    Ok(out)
}
