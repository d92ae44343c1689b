//! The store's totals kept as it changes (issue 69): `GET /admin`, `imgcas stats` and the
//! metrics read a handful of numbers instead of walking the URL map and the originals. Every
//! write of a URL entry or an original moves them in its own transaction, by the rules of
//! [`StoreTotals`]: per original served, the URLs of its own bytes (`exact`) and of its
//! near-duplicates (`near`), and its bytes while it is indexed, in `url_counts` (hash →
//! (exact, near, bytes)); the sums in `kept_totals`. `imgcas verify --totals` recounts them by
//! a walk ([`super::super::MapStore::recount_totals`]). A file written before the totals were
//! kept gets them counted at its first open by this release (`mod.rs`).

use redb::{ReadTransaction, ReadableTable, TableDefinition, WriteTransaction};

use super::super::{MapError, StoreTotals, UrlEntry};
use crate::hash::ContentHash;

/// Hash served → URLs of its own bytes, URLs of near-duplicate bytes, its bytes while it is
/// indexed. A row of nothing is dropped.
const URL_COUNTS: TableDefinition<&[u8], (u64, u64, Option<u64>)> =
    TableDefinition::new("url_counts");
/// The totals, by field name; `counted` once they cover the file.
const TOTALS: TableDefinition<&str, u64> = TableDefinition::new("kept_totals");

pub(super) fn create(txn: &WriteTransaction) -> Result<(), MapError> {
    txn.open_table(URL_COUNTS)?;
    txn.open_table(TOTALS)?;
    Ok(())
}

/// Whether the totals cover the file (a file written before them has none yet).
pub(super) fn counted(txn: &ReadTransaction) -> Result<bool, MapError> {
    Ok(txn.open_table(TOTALS)?.get("counted")?.is_some())
}

/// Marks the totals as covering the file (after the first open's count).
pub(super) fn mark_counted(txn: &WriteTransaction) -> Result<(), MapError> {
    txn.open_table(TOTALS)?.insert("counted", 1)?;
    Ok(())
}

const FIELDS: [&str; 7] = [
    "originals",
    "original_bytes",
    "urls",
    "pointed_bytes",
    "exact_saved_bytes",
    "near_urls",
    "near_saved_bytes",
];

/// The totals as kept.
pub(super) fn read(txn: &ReadTransaction) -> Result<StoreTotals, MapError> {
    let table = txn.open_table(TOTALS)?;
    let mut v = [0u64; 7];
    for (slot, field) in v.iter_mut().zip(FIELDS) {
        *slot = table.get(field)?.map_or(0, |g| g.value());
    }
    Ok(StoreTotals {
        originals: v[0],
        original_bytes: v[1],
        urls: v[2],
        pointed_bytes: v[3],
        exact_saved_bytes: v[4],
        near_urls: v[5],
        near_saved_bytes: v[6],
    })
}

/// A change of the totals, field by field in [`FIELDS`]' order.
type Delta = [i128; 7];

fn apply(txn: &WriteTransaction, delta: Delta) -> Result<(), MapError> {
    let mut table = txn.open_table(TOTALS)?;
    for (field, d) in FIELDS.into_iter().zip(delta) {
        if d == 0 {
            continue;
        }
        let now = table.get(field)?.map_or(0, |g| g.value());
        let next = (i128::from(now) + d).clamp(0, i128::from(u64::MAX)) as u64;
        table.insert(field, next)?;
    }
    Ok(())
}

/// The counts of `hash`, and a function that writes them back (dropping an empty row).
fn counts(txn: &WriteTransaction, hash: &ContentHash) -> Result<(u64, u64, Option<u64>), MapError> {
    let table = txn.open_table(URL_COUNTS)?;
    let row = table.get(hash.as_bytes().as_slice())?;
    Ok(row.map_or((0, 0, None), |g| g.value()))
}

fn put_counts(
    txn: &WriteTransaction,
    hash: &ContentHash,
    row: (u64, u64, Option<u64>),
) -> Result<(), MapError> {
    let mut table = txn.open_table(URL_COUNTS)?;
    match row {
        (0, 0, None) => drop(table.remove(hash.as_bytes().as_slice())?),
        row => drop(table.insert(hash.as_bytes().as_slice(), row)?),
    }
    Ok(())
}

/// One URL entry more (`step` 1) or fewer (-1) served from `hash`, of near-duplicate bytes
/// or not.
fn url_step(
    txn: &WriteTransaction,
    hash: &ContentHash,
    near: bool,
    step: i128,
) -> Result<(), MapError> {
    let (exact, near_count, bytes) = counts(txn, hash)?;
    let moved = |n: u64| (i128::from(n) + step).max(0) as u64;
    let (exact_after, near_after) = match near {
        true => (exact, moved(near_count)),
        false => (moved(exact), near_count),
    };
    put_counts(txn, hash, (exact_after, near_after, bytes))?;
    let b = bytes.map_or(0, i128::from);
    let exact_saved = match (near, step > 0) {
        // The second URL of the bytes and on saves them once more; the last one leaving
        // past the first gives that back.
        (false, true) if exact_after >= 2 => b,
        (false, false) if exact_after >= 1 => -b,
        _ => 0,
    };
    let indexed = i128::from(bytes.is_some());
    apply(
        txn,
        [
            0,
            0,
            step,
            b * step,
            exact_saved,
            if near { indexed * step } else { 0 },
            if near { b * step } else { 0 },
        ],
    )
}

/// A URL entry changed from `old` to `new` (`None`: none).
pub(super) fn url_changed(
    txn: &WriteTransaction,
    old: Option<&UrlEntry>,
    new: Option<&UrlEntry>,
) -> Result<(), MapError> {
    let served = |e: &UrlEntry| (e.serving(), e.canonical.is_some());
    let (old, new) = (old.map(served), new.map(served));
    if old == new {
        return Ok(());
    }
    if let Some((hash, near)) = old {
        url_step(txn, &hash, near, -1)?;
    }
    if let Some((hash, near)) = new {
        url_step(txn, &hash, near, 1)?;
    }
    Ok(())
}

/// An original of `bytes` indexed (`step` 1) or dropped from the index (-1).
pub(super) fn original_changed(
    txn: &WriteTransaction,
    hash: &ContentHash,
    bytes: u64,
    step: i128,
) -> Result<(), MapError> {
    let (exact, near, _) = counts(txn, hash)?;
    put_counts(txn, hash, (exact, near, (step > 0).then_some(bytes)))?;
    let (b, e, n) = (i128::from(bytes), i128::from(exact), i128::from(near));
    apply(
        txn,
        [
            step,
            b * step,
            0,
            b * (e + n) * step,
            b * (e - 1).max(0) * step,
            n * step,
            b * n * step,
        ],
    )
}
