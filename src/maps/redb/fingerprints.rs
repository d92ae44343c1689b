//! The near-duplicate tables: `fingerprints` (hash → [`Fingerprinted::to_bytes`]),
//! `aliases` (a near-duplicate's own hash → its canonical original's) and `near_bands`, the
//! near-neighbour index over the fingerprints' DCT hashes, kept in the file beside them and
//! written in the same transactions.
//!
//! The index lives on disk, not in memory, so that what a node holds does not grow with the
//! originals it has stored (audit #3: the in-memory index cost about 55 bytes an original, a
//! bulk migration of millions of originals could not run in bounded memory); its pages are
//! read through the file's page cache (`maps.cache_bytes`) like every other table's. A key
//! per picture and band: band, band value, the whole DCT hash and the SHA-256's first 8
//! bytes ([`band_key`], 19 bytes, no value); a search reads, per band, the keys under each
//! probed band value ([`super::super::near::probes`]), which is how PostgreSQL's B-trees per
//! band are read too.

use redb::{
    ReadTransaction, ReadableTable, ReadableTableMetadata, TableDefinition, WriteTransaction,
};

use super::super::near::{band_of, prefix_of, probes, BANDS};
use super::super::{Fingerprint, Fingerprinted, ListedAtWrite, MapError, VersionCursor};
use super::by_version::{self, Computed};
use crate::hash::ContentHash;

const FINGERPRINTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("fingerprints");
const ALIASES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("aliases");
const NEAR_BANDS: TableDefinition<&[u8], ()> = TableDefinition::new("near_bands");
/// `built`: the index covers every fingerprint (files written before it existed get it at
/// their first open: [`build_index`]); `cursor`: the last fingerprint a build interrupted
/// had indexed.
const NEAR_META: TableDefinition<&str, &[u8]> = TableDefinition::new("near_meta");

/// Fingerprints indexed per transaction when an older file's index is built: bounded
/// memory for the write, whatever the file holds.
pub(super) const BUILD_CHUNK: usize = 20_000;

pub(super) fn create(txn: &WriteTransaction) -> Result<(), MapError> {
    txn.open_table(FINGERPRINTS)?;
    txn.open_table(ALIASES)?;
    txn.open_table(NEAR_BANDS)?;
    txn.open_table(NEAR_META)?;
    Ok(())
}

/// Calls `each` with the rows of a table keyed by hash that come after `after` (all when
/// `None`), in key order, while it answers `true`; keys that are no hash are passed over.
fn each_after<T: ReadableTable<&'static [u8], &'static [u8]>>(
    table: &T,
    after: Option<ContentHash>,
    mut each: impl FnMut(ContentHash, &[u8]) -> Result<bool, MapError>,
) -> Result<(), MapError> {
    let rows = match &after {
        Some(after) => table.range(after.as_bytes().as_slice()..)?,
        None => table.range::<&[u8]>(..)?,
    };
    for row in rows {
        let (k, v) = row?;
        let Some(hash) = ContentHash::from_slice(k.value()) else {
            continue;
        };
        if Some(hash) != after && !each(hash, v.value())? {
            break;
        }
    }
    Ok(())
}

/// The index key of `phash` in `band`, for the original whose SHA-256 starts with `prefix`.
fn band_key(band: usize, phash: u64, prefix: u64) -> [u8; 19] {
    let mut key = [0u8; 19];
    key[0] = band as u8;
    key[1..3].copy_from_slice(&band_of(phash, band).to_be_bytes());
    key[3..11].copy_from_slice(&phash.to_be_bytes());
    key[11..19].copy_from_slice(&prefix.to_be_bytes());
    key
}

/// `(phash, prefix)` of an index key; `None` for a key of another shape (a damaged file).
fn from_band_key(key: &[u8]) -> Option<(u64, u64)> {
    let key: &[u8; 19] = key.try_into().ok()?;
    let mut phash = [0u8; 8];
    let mut prefix = [0u8; 8];
    phash.copy_from_slice(&key[3..11]);
    prefix.copy_from_slice(&key[11..19]);
    Some((u64::from_be_bytes(phash), u64::from_be_bytes(prefix)))
}

fn index_insert(txn: &WriteTransaction, hash: &ContentHash, phash: u64) -> Result<(), MapError> {
    let mut bands = txn.open_table(NEAR_BANDS)?;
    let prefix = prefix_of(hash.as_bytes());
    for band in 0..BANDS {
        bands.insert(band_key(band, phash, prefix).as_slice(), ())?;
    }
    Ok(())
}

fn index_remove(txn: &WriteTransaction, hash: &ContentHash, phash: u64) -> Result<(), MapError> {
    let mut bands = txn.open_table(NEAR_BANDS)?;
    let prefix = prefix_of(hash.as_bytes());
    for band in 0..BANDS {
        bands.remove(band_key(band, phash, prefix).as_slice())?;
    }
    Ok(())
}

/// Whether the index covers every fingerprint; if not, where an interrupted build stopped.
pub(super) fn index_state(txn: &ReadTransaction) -> Result<(bool, Option<ContentHash>), MapError> {
    let meta = txn.open_table(NEAR_META)?;
    let built = meta.get("built")?.is_some();
    let cursor = meta
        .get("cursor")?
        .and_then(|c| ContentHash::from_slice(c.value()));
    Ok((built, cursor))
}

/// Indexes, in one write, up to `chunk` ([`BUILD_CHUNK`]) fingerprints after `cursor`;
/// returns the last one indexed, or `None` once every fingerprint is (the index is then
/// marked built). A file written before the index existed is indexed this way at its first
/// open.
pub(super) fn build_index(
    txn: &WriteTransaction,
    cursor: Option<ContentHash>,
    chunk_size: usize,
) -> Result<Option<ContentHash>, MapError> {
    let mut chunk = Vec::new();
    each_after(&txn.open_table(FINGERPRINTS)?, cursor, |hash, value| {
        let phash = match Fingerprinted::from_bytes(value) {
            Some(Fingerprinted::Picture(fp)) => Some(fp.phash),
            _ => None,
        };
        chunk.push((hash, phash));
        Ok(chunk.len() < chunk_size)
    })?;
    for (hash, phash) in &chunk {
        if let Some(phash) = phash {
            index_insert(txn, hash, *phash)?;
        }
    }
    let mut meta = txn.open_table(NEAR_META)?;
    match chunk.last() {
        Some((last, _)) if chunk.len() >= chunk_size => {
            meta.insert("cursor", last.as_bytes().as_slice())?;
            Ok(Some(*last))
        }
        _ => {
            meta.remove("cursor")?;
            meta.insert("built", [1u8].as_slice())?;
            Ok(None)
        }
    }
}

/// `(prefix, distance)` of the `limit` pictures closest to `phash` within `radius`, closest
/// first (then by prefix), holding at most about four times `limit` hits while it reads,
/// and whether the answer is partial: at most `read_cap` index keys are read (issue 69: the
/// work of a search does not grow with the look-alikes stored). A search stops early, its
/// answer exact, once it holds `limit` pictures at distance 0 (none can be closer).
pub(super) fn search(
    txn: &ReadTransaction,
    phash: u64,
    radius: u32,
    limit: usize,
    read_cap: usize,
) -> Result<(Vec<(u64, u32)>, bool), MapError> {
    let bands = txn.open_table(NEAR_BANDS)?;
    let mut hits: Vec<(u32, u64)> = Vec::new();
    let (mut read_keys, mut exact_hits) = (0usize, 0usize);
    // Why a read stopped before the end of its ranges.
    #[derive(PartialEq)]
    enum Stop {
        No,
        Enough,
        Capped,
    }
    let mut stop = Stop::No;
    let compact_at = limit.saturating_mul(4).max(1024);
    let keep_closest = |hits: &mut Vec<(u32, u64)>| {
        hits.sort_unstable();
        hits.dedup();
        hits.truncate(limit);
    };
    let probes = probes(phash, radius);
    let flips = radius / BANDS as u32;
    let visits: u64 = probes.iter().map(|p| p.len() as u64).sum();
    // Past about one probe per 64 pictures, reading band 0 whole (every picture once) reads
    // fewer pages than the probes would.
    let pictures = bands.len()? / BANDS as u64;
    let scan = visits > pictures / 64 + 64;
    let mut read = |from: [u8; 19], to: [u8; 19], band: usize| -> Result<(), MapError> {
        for row in bands.range(from.as_slice()..=to.as_slice())? {
            if stop != Stop::No {
                return Ok(());
            }
            if read_keys >= read_cap {
                stop = Stop::Capped;
                return Ok(());
            }
            read_keys += 1;
            let (k, _) = row?;
            let Some((h, prefix)) = from_band_key(k.value()) else {
                return Err(MapError::Corrupt("near_bands key".into()));
            };
            let d = (h ^ phash).count_ones();
            // A picture some earlier band is within reach of was found there already.
            let found_before =
                (0..band).any(|b| (band_of(h, b) ^ band_of(phash, b)).count_ones() <= flips);
            if d <= radius && !found_before {
                hits.push((d, prefix));
                if d == 0 {
                    exact_hits += 1;
                    if exact_hits >= limit {
                        stop = Stop::Enough;
                    }
                }
                if hits.len() > compact_at {
                    keep_closest(&mut hits);
                }
            }
        }
        Ok(())
    };
    if scan {
        let mut to = [0xffu8; 19];
        to[0] = 0;
        read([0u8; 19], to, 0)?;
    } else {
        for (band, values) in probes.iter().enumerate() {
            for value in values {
                let mut from = [0u8; 19];
                from[0] = band as u8;
                from[1..3].copy_from_slice(&value.to_be_bytes());
                let mut to = [0xffu8; 19];
                to[..3].copy_from_slice(&from[..3]);
                read(from, to, band)?;
            }
        }
    }
    keep_closest(&mut hits);
    let partial = stop == Stop::Capped;
    Ok((
        hits.into_iter().map(|(d, prefix)| (prefix, d)).collect(),
        partial,
    ))
}

pub(super) fn get(
    txn: &ReadTransaction,
    hash: &ContentHash,
) -> Result<Option<Fingerprinted>, MapError> {
    let table = txn.open_table(FINGERPRINTS)?;
    let raw = table.get(hash.as_bytes().as_slice())?;
    Ok(raw.and_then(|r| Fingerprinted::from_bytes(r.value())))
}

/// Stores a fingerprint, and indexes it in place of the picture's previous one; returns
/// that previous one, if any.
pub(super) fn put(
    txn: &WriteTransaction,
    hash: &ContentHash,
    fingerprint: &Fingerprinted,
) -> Result<Option<Fingerprint>, MapError> {
    let (was, old) = {
        let mut table = txn.open_table(FINGERPRINTS)?;
        let replaced = table.insert(
            hash.as_bytes().as_slice(),
            fingerprint.to_bytes().as_slice(),
        )?;
        let was = replaced.as_ref().map_or(0, |r| version_of(r.value()));
        let old = replaced
            .and_then(|r| Fingerprinted::from_bytes(r.value()))
            .and_then(|f| f.picture().copied());
        (was, old)
    };
    if let Some(old) = old {
        index_remove(txn, hash, old.phash)?;
    }
    if let Fingerprinted::Picture(fp) = fingerprint {
        index_insert(txn, hash, fp.phash)?;
    }
    // The originals' index by fingerprint version follows, for an indexed original.
    let now = imgcas_processors::FINGERPRINT_VERSION;
    by_version::follow(txn, Computed::Fingerprint, hash, was, now)?;
    Ok(old)
}

/// The version a stored fingerprint was computed with (its first four bytes; 0 for bytes too
/// short to hold one).
fn version_of(raw: &[u8]) -> u32 {
    raw.get(..4)
        .and_then(|v| v.try_into().ok())
        .map_or(0, u32::from_be_bytes)
}

/// The version of `hash`'s stored fingerprint, if one is stored (of any version).
pub(super) fn stored_version(
    txn: &WriteTransaction,
    hash: &ContentHash,
) -> Result<Option<u32>, MapError> {
    let table = txn.open_table(FINGERPRINTS)?;
    let raw = table.get(hash.as_bytes().as_slice())?;
    Ok(raw.map(|r| version_of(r.value())))
}

/// Drops an original's fingerprint and its index keys; returns it, if it was a picture's.
pub(super) fn remove(
    txn: &WriteTransaction,
    hash: &ContentHash,
) -> Result<Option<Fingerprint>, MapError> {
    let old = txn
        .open_table(FINGERPRINTS)?
        .remove(hash.as_bytes().as_slice())?
        .and_then(|r| Fingerprinted::from_bytes(r.value()))
        .and_then(|f| f.picture().copied());
    if let Some(old) = old {
        index_remove(txn, hash, old.phash)?;
    }
    Ok(old)
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
/// Up to `limit` current fingerprints of pictures after `after`, in hash order.
pub(super) fn page(
    txn: &ReadTransaction,
    after: Option<ContentHash>,
    limit: usize,
) -> Result<Vec<(ContentHash, Fingerprint)>, MapError> {
    let after = after.map(|h| h.0);
    super::page_of(
        txn,
        FINGERPRINTS,
        after.as_ref().map(|a| a.as_slice()),
        limit,
        "fingerprints",
        |k, v| {
            Ok(
                match (ContentHash::from_slice(k), Fingerprinted::from_bytes(v)) {
                    (Some(hash), Some(Fingerprinted::Picture(fp))) => Some((hash, fp)),
                    _ => None,
                },
            )
        },
    )
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
        let (hash, fingerprint) = (*hash, *fingerprint);
        self.db
            .run(move |db| {
                db.write(|txn| fingerprints::put(txn, &hash, &fingerprint))?;
                Ok(None)
            })
            .await
    }

    async fn near_closest(
        &self,
        phash: u64,
        radius: u32,
        limit: usize,
        read_cap: usize,
    ) -> Result<NearFound, MapError> {
        self.db
            .run(move |db| {
                let txn = db.read()?;
                let (found, partial) = fingerprints::search(&txn, phash, radius, limit, read_cap)?;
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
                Ok(NearFound {
                    matches: out,
                    partial,
                })
            })
            .await
    }

    async fn lacking_fingerprints(
        &self,
        version: u32,
        after: Option<VersionCursor>,
        limit: usize,
    ) -> Result<Vec<VersionCursor>, MapError> {
        let kind = Computed::Fingerprint;
        self.db
            .run(move |db| by_version::lacking(&db.read()?, kind, version, after, limit))
            .await
    }

    async fn fingerprints_page(
        &self,
        after: Option<ContentHash>,
        limit: usize,
    ) -> Result<Vec<(ContentHash, Fingerprint)>, MapError> {
        self.db
            .run(move |db| fingerprints::page(&db.read()?, after, limit))
            .await
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maps::Fingerprint;

    fn picture(phash: u64) -> Fingerprinted {
        Fingerprinted::Picture(Fingerprint {
            phash,
            block_hash: 0,
            colour: 0,
            width: 10,
            height: 10,
        })
    }

    fn hashes(count: usize) -> Vec<u64> {
        crate::maps::near::sample::hashes(
            &mut crate::maps::near::sample::XorShift(0x1234_5678_9abc_def0),
            count,
        )
    }

    fn scan(stored: &[(ContentHash, u64)], query: u64, radius: u32) -> Vec<(u64, u32)> {
        let mut out: Vec<(u64, u32)> = stored
            .iter()
            .map(|(h, p)| (prefix_of(h.as_bytes()), (p ^ query).count_ones()))
            .filter(|(_, d)| *d <= radius)
            .collect();
        out.sort_by_key(|&(p, d)| (d, p));
        out
    }

    /// Enough pictures for the search to read by probes up to radius 8 (not band 0 whole:
    /// radius 11 is read that way), some replaced
    /// and some dropped: what it finds is what a scan of every hash finds, to the limit.
    #[test]
    fn probes_find_what_a_scan_finds() {
        let dir = tempfile::tempdir().unwrap();
        let db = redb::Database::create(dir.path().join("f.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        create(&txn).unwrap();
        let mut stored: Vec<(ContentHash, u64)> = hashes(40_000)
            .into_iter()
            .enumerate()
            .map(|(i, p)| (ContentHash::of(&(i as u64).to_le_bytes()), p))
            .collect();
        for (h, p) in &stored {
            put(&txn, h, &picture(*p)).unwrap();
        }
        for (i, (h, p)) in stored.iter_mut().enumerate() {
            if i % 11 == 0 {
                *p = !*p;
                put(&txn, h, &picture(*p)).unwrap();
            }
        }
        for (h, _) in stored.iter().step_by(7) {
            remove(&txn, h).unwrap();
        }
        stored = stored
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % 7 != 0)
            .map(|(_, s)| s)
            .collect();
        txn.commit().unwrap();
        let read = db.begin_read().unwrap();
        assert_eq!(
            read.open_table(NEAR_BANDS).unwrap().len().unwrap(),
            4 * stored.len() as u64
        );
        for (q, (_, p)) in stored.iter().enumerate().step_by(37) {
            let query = p ^ (1 << (q % 64));
            for radius in [0, 4, 8, 11] {
                let expected = scan(&stored, query, radius);
                assert_eq!(
                    search(&read, query, radius, usize::MAX, usize::MAX).unwrap(),
                    (expected.clone(), false)
                );
                let few = expected.len().min(3);
                let (closest, partial) = search(&read, query, radius, 3, usize::MAX).unwrap();
                assert!(!partial);
                assert_eq!(closest, expected[..few]);
            }
        }
    }

    /// A file whose fingerprints were written before the index existed (an interrupted
    /// build too) is indexed at open, a chunk per write.
    #[test]
    fn an_older_file_is_indexed_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let stored: Vec<(ContentHash, u64)> = hashes(500)
            .into_iter()
            .enumerate()
            .map(|(i, p)| (ContentHash::of(&(i as u64).to_le_bytes()), p))
            .collect();
        {
            let db = redb::Database::create(dir.path().join("imgcas.redb")).unwrap();
            let txn = db.begin_write().unwrap();
            {
                // As an earlier release wrote it: the fingerprints table alone.
                let mut table = txn.open_table(FINGERPRINTS).unwrap();
                for (h, p) in &stored {
                    table
                        .insert(h.as_bytes().as_slice(), picture(*p).to_bytes().as_slice())
                        .unwrap();
                }
                let text = ContentHash::of(b"text");
                let bytes = Fingerprinted::NotAPicture.to_bytes();
                table
                    .insert(text.as_bytes().as_slice(), bytes.as_slice())
                    .unwrap();
            }
            txn.commit().unwrap();
            // A build that stopped after its first chunk.
            let txn = db.begin_write().unwrap();
            create(&txn).unwrap();
            assert!(build_index(&txn, None, 64).unwrap().is_some());
            txn.commit().unwrap();
            assert!(!index_state(&db.begin_read().unwrap()).unwrap().0);
        }
        let store = super::super::RedbStore::open_blocking(dir.path(), 1 << 20).unwrap();
        let read = store.db.read().unwrap();
        assert_eq!(index_state(&read).unwrap(), (true, None));
        assert_eq!(
            read.open_table(NEAR_BANDS).unwrap().len().unwrap(),
            4 * stored.len() as u64
        );
        for (_, p) in stored.iter().step_by(13) {
            assert_eq!(
                search(&read, *p, 8, usize::MAX, usize::MAX).unwrap(),
                (scan(&stored, *p, 8), false)
            );
        }
    }
}
