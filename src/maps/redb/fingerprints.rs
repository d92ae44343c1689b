//! The near-duplicate tables: `fingerprints` (hash → [`Fingerprinted::to_bytes`]) and
//! `aliases` (a near-duplicate's own hash → its canonical original's). The in-memory
//! [`NearIndex`] over the fingerprints is rebuilt from the first table at open.

use redb::{ReadTransaction, ReadableTable, TableDefinition, WriteTransaction};

use super::super::near::{prefix_of, NearIndex};
use super::super::{Fingerprint, Fingerprinted, ListedAtWrite, MapError};
use crate::hash::ContentHash;

const FINGERPRINTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("fingerprints");
const ALIASES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("aliases");

pub(super) fn create(txn: &WriteTransaction) -> Result<(), MapError> {
    txn.open_table(FINGERPRINTS)?;
    txn.open_table(ALIASES)?;
    Ok(())
}

pub(super) fn get(
    txn: &ReadTransaction,
    hash: &ContentHash,
) -> Result<Option<Fingerprinted>, MapError> {
    let table = txn.open_table(FINGERPRINTS)?;
    let raw = table.get(hash.as_bytes().as_slice())?;
    Ok(raw.and_then(|r| Fingerprinted::from_bytes(r.value())))
}

/// Stores a fingerprint; returns the picture's previous fingerprint, if any (for the index).
pub(super) fn put(
    txn: &WriteTransaction,
    hash: &ContentHash,
    fingerprint: &Fingerprinted,
) -> Result<Option<Fingerprint>, MapError> {
    let mut table = txn.open_table(FINGERPRINTS)?;
    let old = table
        .insert(
            hash.as_bytes().as_slice(),
            fingerprint.to_bytes().as_slice(),
        )?
        .and_then(|r| Fingerprinted::from_bytes(r.value()))
        .and_then(|f| f.picture().copied());
    Ok(old)
}

/// Drops an original's fingerprint; returns it, if it was a picture's.
pub(super) fn remove(
    txn: &WriteTransaction,
    hash: &ContentHash,
) -> Result<Option<Fingerprint>, MapError> {
    let mut table = txn.open_table(FINGERPRINTS)?;
    let old = table.remove(hash.as_bytes().as_slice())?;
    Ok(old
        .and_then(|r| Fingerprinted::from_bytes(r.value()))
        .and_then(|f| f.picture().copied()))
}

/// The fingerprints whose hash starts with `prefix` (the index's key): one, in practice.
pub(super) fn by_prefix(
    txn: &ReadTransaction,
    prefix: u64,
) -> Result<Vec<(ContentHash, Fingerprint)>, MapError> {
    let table = txn.open_table(FINGERPRINTS)?;
    let start = prefix.to_be_bytes();
    let mut out = Vec::new();
    for row in table.range(start.as_slice()..)? {
        let (k, v) = row?;
        let Some(hash) = ContentHash::from_slice(k.value()) else {
            continue;
        };
        if prefix_of(hash.as_bytes()) != prefix {
            break;
        }
        if let Some(Fingerprinted::Picture(fp)) = Fingerprinted::from_bytes(v.value()) {
            out.push((hash, fp));
        }
    }
    Ok(out)
}

/// Every picture's fingerprint.
pub(super) fn all(txn: &ReadTransaction) -> Result<Vec<(ContentHash, Fingerprint)>, MapError> {
    let table = txn.open_table(FINGERPRINTS)?;
    let mut out = Vec::new();
    for row in table.iter()? {
        let (k, v) = row?;
        if let (Some(hash), Some(Fingerprinted::Picture(fp))) = (
            ContentHash::from_slice(k.value()),
            Fingerprinted::from_bytes(v.value()),
        ) {
            out.push((hash, fp));
        }
    }
    Ok(out)
}

/// The index over every stored picture's DCT hash.
pub(super) fn index(txn: &ReadTransaction) -> Result<NearIndex, MapError> {
    let mut index = NearIndex::default();
    for (hash, fp) in all(txn)? {
        index.insert_new(prefix_of(hash.as_bytes()), fp.phash);
    }
    index.shrink();
    Ok(index)
}

/// Originals (in `originals`, keyed alike) without a current fingerprint, after `after`.
pub(super) fn missing(
    txn: &ReadTransaction,
    originals: TableDefinition<&[u8], &[u8]>,
    after: Option<ContentHash>,
    limit: usize,
) -> Result<Vec<ContentHash>, MapError> {
    let originals = txn.open_table(originals)?;
    let fingerprints = txn.open_table(FINGERPRINTS)?;
    let mut out = Vec::new();
    let rows = match &after {
        Some(after) => originals.range(after.as_bytes().as_slice()..)?,
        None => originals.range::<&[u8]>(..)?,
    };
    for row in rows {
        let (k, _) = row?;
        let Some(hash) = ContentHash::from_slice(k.value()) else {
            continue;
        };
        if Some(hash) == after {
            continue;
        }
        let current = fingerprints
            .get(k.value())?
            .and_then(|v| Fingerprinted::from_bytes(v.value()));
        if current.is_none() {
            out.push(hash);
            if out.len() >= limit {
                break;
            }
        }
    }
    Ok(out)
}

pub(super) fn alias(
    txn: &ReadTransaction,
    hash: &ContentHash,
) -> Result<Option<ContentHash>, MapError> {
    let table = txn.open_table(ALIASES)?;
    let raw = table.get(hash.as_bytes().as_slice())?;
    Ok(raw.and_then(|r| ContentHash::from_slice(r.value())))
}

pub(super) fn put_alias(
    txn: &WriteTransaction,
    own: &ContentHash,
    canonical: &ContentHash,
) -> Result<(), MapError> {
    txn.open_table(ALIASES)?
        .insert(own.as_bytes().as_slice(), canonical.as_bytes().as_slice())?;
    Ok(())
}

/// Drops the aliases that name `hash`, as own hash or as canonical; returns how many.
pub(super) fn remove_aliases(txn: &WriteTransaction, hash: &ContentHash) -> Result<u64, MapError> {
    let mut table = txn.open_table(ALIASES)?;
    let mut doomed = Vec::new();
    for row in table.iter()? {
        let (k, v) = row?;
        if k.value() == hash.as_bytes().as_slice() || v.value() == hash.as_bytes().as_slice() {
            doomed.push(k.value().to_vec());
        }
    }
    for k in &doomed {
        table.remove(k.as_slice())?;
    }
    Ok(doomed.len() as u64)
}

use super::*;

#[async_trait]
impl Fingerprints for RedbStore {
    async fn fingerprint(&self, hash: &ContentHash) -> Result<Option<Fingerprinted>, MapError> {
        let hash = *hash;
        self.db
            .run(move |db| fingerprints::get(&db.read()?, &hash))
            .await
    }

    async fn put_fingerprint(
        &self,
        hash: &ContentHash,
        fingerprint: &Fingerprinted,
    ) -> Result<ListedAtWrite, MapError> {
        let (hash, fingerprint, near) = (*hash, *fingerprint, self.near.clone());
        self.db
            .run(move |db| {
                let (old, _) = db.write(|txn| fingerprints::put(txn, &hash, &fingerprint))?;
                // The index follows the table once the write is committed.
                let mut index = write_index(&near);
                let prefix = prefix_of(hash.as_bytes());
                if let Some(old) = old {
                    index.remove_known(prefix, old.phash);
                }
                if let Fingerprinted::Picture(fp) = fingerprint {
                    index.insert_new(prefix, fp.phash);
                }
                Ok(None)
            })
            .await
    }

    async fn near(&self, phash: u64, radius: u32) -> Result<Vec<NearMatch>, MapError> {
        self.near_closest(phash, radius, usize::MAX).await
    }

    async fn near_closest(
        &self,
        phash: u64,
        radius: u32,
        limit: usize,
    ) -> Result<Vec<NearMatch>, MapError> {
        let found = self
            .near
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .search_closest(phash, radius, limit);
        if found.is_empty() {
            return Ok(Vec::new());
        }
        self.db
            .run(move |db| {
                let txn = db.read()?;
                let mut out = Vec::with_capacity(found.len());
                for (prefix, _) in found {
                    for (hash, fingerprint) in fingerprints::by_prefix(&txn, prefix)? {
                        let distance = (fingerprint.phash ^ phash).count_ones();
                        if distance <= radius {
                            out.push(NearMatch {
                                hash,
                                fingerprint,
                                distance,
                            });
                        }
                    }
                }
                out.sort_by_key(|m| (m.distance, m.hash));
                out.truncate(limit);
                Ok(out)
            })
            .await
    }

    async fn unfingerprinted(
        &self,
        after: Option<ContentHash>,
        limit: usize,
    ) -> Result<Vec<ContentHash>, MapError> {
        self.db
            .run(move |db| fingerprints::missing(&db.read()?, originals::TABLE, after, limit))
            .await
    }

    async fn fingerprints(&self) -> Result<Vec<(ContentHash, Fingerprint)>, MapError> {
        self.db.run(|db| fingerprints::all(&db.read()?)).await
    }

    async fn alias(&self, hash: &ContentHash) -> Result<Option<ContentHash>, MapError> {
        let hash = *hash;
        self.db
            .run(move |db| fingerprints::alias(&db.read()?, &hash))
            .await
    }

    async fn put_alias(&self, own: &ContentHash, canonical: &ContentHash) -> Result<(), MapError> {
        let (own, canonical) = (*own, *canonical);
        self.db
            .run(move |db| {
                db.write(|txn| fingerprints::put_alias(txn, &own, &canonical))
                    .map(|_| ())
            })
            .await
    }

    async fn remove_aliases(&self, hash: &ContentHash) -> Result<u64, MapError> {
        let hash = *hash;
        self.db
            .run(move |db| {
                db.write(|txn| fingerprints::remove_aliases(txn, &hash))
                    .map(|(n, _)| n)
            })
            .await
    }
}
