//! The URL map's table: canonical URL → its [`UrlEntry`], as JSON (the encoding every
//! release so far has written); and its index by hash, `urls_by_hash`: a key per URL and hash
//! it names (its own bytes' and, in canonical mode, the original it is served from), written
//! in the same transaction as the entry; and, in `url_meta`, the bytes the entries count
//! against `limits.urls_max_bytes` ([`url_row_bytes`]), kept by every write. Files written
//! before the index or the count existed get them at their first open by this release.

use redb::{ReadTransaction, ReadableTable, Table, TableDefinition, WriteTransaction};

use super::super::{url_row_bytes, MapError, UrlEntry};
use super::kept_totals;
use crate::hash::ContentHash;

const TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("urls");
/// Hash (32 bytes) ‖ URL → nothing.
const BY_HASH: TableDefinition<&[u8], &[u8]> = TableDefinition::new("urls_by_hash");
/// `url_meta` key: present once `urls_by_hash` covers every entry.
const META: TableDefinition<&str, u64> = TableDefinition::new("url_meta");
const INDEX_BUILT: &str = "by_hash_index_version";
/// `url_meta` key: the bytes the entries count ([`url_row_bytes`]), kept by every write.
const BYTES: &str = "bytes";

/// Opens the tables; on a file written before the index, builds it from every entry.
pub(super) fn create(txn: &WriteTransaction) -> Result<(), MapError> {
    let table = txn.open_table(TABLE)?;
    let mut index = txn.open_table(BY_HASH)?;
    let mut meta = txn.open_table(META)?;
    // Files written before the byte count get it counted once.
    if meta.get(BYTES)?.is_none() {
        let mut bytes = 0u64;
        for row in table.iter()? {
            let (k, v) = row?;
            bytes += url_row_bytes(k.value(), &decode(k.value(), v.value())?);
        }
        meta.insert(BYTES, bytes)?;
    }
    if meta.get(INDEX_BUILT)?.is_some() {
        return Ok(());
    }
    let mut built = 0u64;
    for row in table.iter()? {
        let (k, v) = row?;
        reindex(
            &mut index,
            k.value(),
            &decode(k.value(), v.value())?,
            Index::Add,
        )?;
        built += 1;
    }
    meta.insert(INDEX_BUILT, 1)?;
    if built > 0 {
        tracing::info!(urls = built, "URL map indexed by hash");
    }
    Ok(())
}

/// The index keys of one entry: one per hash it names.
fn index_keys(url: &str, entry: &UrlEntry) -> Vec<Vec<u8>> {
    let key = |hash: &ContentHash| {
        let mut k = Vec::with_capacity(32 + url.len());
        k.extend_from_slice(hash.as_bytes());
        k.extend_from_slice(url.as_bytes());
        k
    };
    let mut keys = vec![key(&entry.hash)];
    if let Some(c) = entry.canonical.filter(|c| *c != entry.hash) {
        keys.push(key(&c));
    }
    keys
}

/// What to do with a URL's keys in the index by hash.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Index {
    Add,
    Remove,
}

/// Adds or removes the index-by-hash keys of a URL's entry.
fn reindex(
    index: &mut Table<&[u8], &[u8]>,
    url: &str,
    entry: &UrlEntry,
    what: Index,
) -> Result<(), MapError> {
    for k in index_keys(url, entry) {
        match what {
            Index::Add => drop(index.insert(k.as_slice(), [].as_slice())?),
            Index::Remove => drop(index.remove(k.as_slice())?),
        }
    }
    Ok(())
}

/// The entries that name `hash` (their own bytes' or their canonical original's).
pub(super) fn by_hash(
    txn: &ReadTransaction,
    hash: &ContentHash,
) -> Result<Vec<(String, UrlEntry)>, MapError> {
    let index = txn.open_table(BY_HASH)?;
    let table = txn.open_table(TABLE)?;
    let mut out = Vec::new();
    for row in index.range(hash.as_bytes().as_slice()..)? {
        let (k, _) = row?;
        let Some(url) = k.value().strip_prefix(hash.as_bytes().as_slice()) else {
            break;
        };
        let url =
            std::str::from_utf8(url).map_err(|_| MapError::Corrupt("urls_by_hash key".into()))?;
        // The index is written with the entries, so it names only entries that name the hash.
        if let Some(entry) = lookup(&table, url)? {
            out.push((url.to_string(), entry));
        }
    }
    Ok(out)
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

/// Moves the byte count by what was added and removed.
fn count(txn: &WriteTransaction, added: u64, removed: u64) -> Result<(), MapError> {
    let mut meta = txn.open_table(META)?;
    let now = meta.get(BYTES)?.map_or(0, |v| v.value());
    meta.insert(BYTES, (now + added).saturating_sub(removed))?;
    Ok(())
}

/// The bytes the entries count.
pub(super) fn bytes(txn: &ReadTransaction) -> Result<u64, MapError> {
    Ok(txn.open_table(META)?.get(BYTES)?.map_or(0, |v| v.value()))
}

pub(super) fn put(txn: &WriteTransaction, url: &str, entry: &UrlEntry) -> Result<(), MapError> {
    let mut table = txn.open_table(TABLE)?;
    let mut index = txn.open_table(BY_HASH)?;
    let mut removed = 0;
    let old = lookup(&table, url)?;
    if let Some(old) = &old {
        reindex(&mut index, url, old, Index::Remove)?;
        removed = url_row_bytes(url, old);
    }
    table.insert(url, encode(entry)?.as_slice())?;
    reindex(&mut index, url, entry, Index::Add)?;
    drop((table, index));
    kept_totals::url_changed(txn, old.as_ref(), Some(entry))?;
    count(txn, url_row_bytes(url, entry), removed)
}

pub(super) fn remove(txn: &WriteTransaction, url: &str) -> Result<(), MapError> {
    let mut table = txn.open_table(TABLE)?;
    let old = lookup(&table, url)?;
    table.remove(url)?;
    drop(table);
    if let Some(old) = old {
        reindex(&mut txn.open_table(BY_HASH)?, url, &old, Index::Remove)?;
        count(txn, 0, url_row_bytes(url, &old))?;
        kept_totals::url_changed(txn, Some(&old), None)?;
    }
    Ok(())
}

/// Every entry, from a write (the kept totals' count at an older file's first open).
pub(super) fn all_in_write(txn: &WriteTransaction) -> Result<Vec<UrlEntry>, MapError> {
    let table = txn.open_table(TABLE)?;
    let mut out = Vec::new();
    for row in table.iter()? {
        let (k, v) = row?;
        out.push(decode(k.value(), v.value())?);
    }
    Ok(out)
}

/// Up to `limit` entries after the URL `after`, in URL order.
pub(super) fn page(
    txn: &ReadTransaction,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<(String, UrlEntry)>, MapError> {
    use std::ops::Bound;
    let table = txn.open_table(TABLE)?;
    let from = after.map_or(Bound::Unbounded, Bound::Excluded);
    let mut out = Vec::new();
    for row in table.range::<&str>((from, Bound::Unbounded))? {
        if out.len() >= limit {
            break;
        }
        let (k, v) = row?;
        out.push((k.value().to_string(), decode(k.value(), v.value())?));
    }
    Ok(out)
}

/// Every entry of the table, decoded, in URL order.
fn entries(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<Vec<(String, UrlEntry)>, MapError> {
    let mut out = Vec::new();
    for row in table.iter()? {
        let (k, v) = row?;
        out.push((k.value().to_string(), decode(k.value(), v.value())?));
    }
    Ok(out)
}

/// Moves the request stamps of known URLs forward.
pub(super) fn mark_requested(
    txn: &WriteTransaction,
    requested: &[(String, u64)],
) -> Result<(), MapError> {
    let mut table = txn.open_table(TABLE)?;
    for (url, at) in requested {
        let Some(mut entry) = lookup(&table, url)? else {
            continue;
        };
        if *at > entry.requested_at_ms {
            entry.requested_at_ms = *at;
            table.insert(url.as_str(), encode(&entry)?.as_slice())?;
        }
    }
    // (A stamp changes no counted byte.)
    Ok(())
}

/// Drops the least recently used entries until the entries count at most `target`; returns
/// their URLs. One pass over the table, sorted by last use: the upkeep runs it only when the
/// count is over the budget.
pub(super) fn evict(txn: &WriteTransaction, target: u64) -> Result<Vec<String>, MapError> {
    let mut over = {
        let meta = txn.open_table(META)?;
        let now = meta.get(BYTES)?.map_or(0, |v| v.value());
        now.saturating_sub(target)
    };
    if over == 0 {
        return Ok(Vec::new());
    }
    let mut rows = entries(&txn.open_table(TABLE)?)?;
    rows.sort_by(|(a_url, a), (b_url, b)| {
        (a.last_used_ms(), a_url).cmp(&(b.last_used_ms(), b_url))
    });
    let mut doomed = Vec::new();
    for (url, entry) in rows {
        if over == 0 {
            break;
        }
        over = over.saturating_sub(url_row_bytes(&url, &entry));
        doomed.push((url, entry));
    }
    remove_rows(txn, doomed)
}

/// Removes rows read from the table (entry, index keys, byte count); returns their URLs.
fn remove_rows(
    txn: &WriteTransaction,
    rows: Vec<(String, UrlEntry)>,
) -> Result<Vec<String>, MapError> {
    let mut table = txn.open_table(TABLE)?;
    let mut index = txn.open_table(BY_HASH)?;
    let mut freed = 0;
    for (url, entry) in &rows {
        table.remove(url.as_str())?;
        reindex(&mut index, url, entry, Index::Remove)?;
        freed += url_row_bytes(url, entry);
    }
    drop((table, index));
    count(txn, 0, freed)?;
    for (_, entry) in &rows {
        kept_totals::url_changed(txn, Some(entry), None)?;
    }
    Ok(rows.into_iter().map(|(url, _)| url).collect())
}

/// Drops the entries last used before `unused_since_ms`; returns their URLs.
pub(super) fn forget(
    txn: &WriteTransaction,
    unused_since_ms: u64,
) -> Result<Vec<String>, MapError> {
    let doomed = entries(&txn.open_table(TABLE)?)?
        .into_iter()
        .filter(|(_, entry)| entry.last_used_ms() < unused_since_ms)
        .collect();
    remove_rows(txn, doomed)
}

use super::*;

#[async_trait]
impl UrlMap for RedbStore {
    async fn url(&self, url: &str) -> Result<Option<UrlEntry>, MapError> {
        let key = url.to_string();
        self.db.run(move |db| url_map::get(&db.read()?, &key)).await
    }

    async fn put_url(&self, url: &str, entry: &UrlEntry) -> Result<(), MapError> {
        let (url, entry) = (url.to_string(), entry.clone());
        self.db
            .run(move |db| db.write(|txn| url_map::put(txn, &url, &entry)).map(|_| ()))
            .await
    }

    async fn remove_url(&self, url: &str) -> Result<(), MapError> {
        let url = url.to_string();
        self.db
            .run(move |db| db.write(|txn| url_map::remove(txn, &url)).map(|_| ()))
            .await
    }

    async fn urls_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, UrlEntry)>, MapError> {
        let after = after.map(str::to_string);
        self.db
            .run(move |db| url_map::page(&db.read()?, after.as_deref(), limit))
            .await
    }

    async fn urls_of(&self, hash: &ContentHash) -> Result<Vec<(String, UrlEntry)>, MapError> {
        let hash = *hash;
        self.db
            .run(move |db| url_map::by_hash(&db.read()?, &hash))
            .await
    }

    async fn mark_urls_requested(&self, requested: &[(String, u64)]) -> Result<(), MapError> {
        if requested.is_empty() {
            return Ok(());
        }
        let requested = requested.to_vec();
        self.db
            .run(move |db| {
                db.write(|txn| url_map::mark_requested(txn, &requested))
                    .map(|_| ())
            })
            .await
    }

    async fn forget_urls(&self, unused_since_ms: u64) -> Result<u64, MapError> {
        self.drop_urls(move |txn| url_map::forget(txn, unused_since_ms))
            .await
    }

    async fn url_bytes(&self) -> Result<u64, MapError> {
        self.db.run(|db| url_map::bytes(&db.read()?)).await
    }

    async fn evict_urls(&self, target_bytes: u64) -> Result<u64, MapError> {
        self.drop_urls(move |txn| url_map::evict(txn, target_bytes))
            .await
    }
}
