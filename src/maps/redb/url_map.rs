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
    lookup(&txn.open_table(TABLE)?, url)
}

fn lookup(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    url: &str,
) -> Result<Option<UrlEntry>, MapError> {
    let raw = table.get(url)?;
    raw.map(|r| decode(url, r.value())).transpose()
}

fn encode(entry: &UrlEntry) -> Result<Vec<u8>, MapError> {
    serde_json::to_vec(entry).map_err(|e| MapError::Corrupt(e.to_string()))
}

pub(super) fn put(txn: &WriteTransaction, url: &str, entry: &UrlEntry) -> Result<(), MapError> {
    txn.open_table(TABLE)?
        .insert(url, encode(entry)?.as_slice())?;
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

/// Moves the request stamps of known URLs forward; returns the entries it changed.
pub(super) fn mark_requested(
    txn: &WriteTransaction,
    requested: &[(String, u64)],
) -> Result<Vec<(String, UrlEntry)>, MapError> {
    let mut table = txn.open_table(TABLE)?;
    let mut changed = Vec::new();
    for (url, at) in requested {
        let Some(mut entry) = lookup(&table, url)? else {
            continue;
        };
        if *at > entry.requested_at_ms {
            entry.requested_at_ms = *at;
            table.insert(url.as_str(), encode(&entry)?.as_slice())?;
            changed.push((url.clone(), entry));
        }
    }
    Ok(changed)
}

/// Drops the entries last used before `unused_since_ms`; returns their URLs.
pub(super) fn forget(
    txn: &WriteTransaction,
    unused_since_ms: u64,
) -> Result<Vec<String>, MapError> {
    let mut table = txn.open_table(TABLE)?;
    let mut doomed = Vec::new();
    for row in table.iter()? {
        let (k, v) = row?;
        if decode(k.value(), v.value())?.last_used_ms() < unused_since_ms {
            doomed.push(k.value().to_string());
        }
    }
    for url in &doomed {
        table.remove(url.as_str())?;
    }
    Ok(doomed)
}
