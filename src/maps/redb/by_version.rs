//! The originals indexed by the version of what is computed from them once — their facts and
//! their fingerprint — so that the backfills find the originals lacking a current one without
//! reading the others (issue 69: a start on a store whose facts and fingerprints are current
//! reads nothing). One table per kind, `originals_by_<kind>_version`: version (u32 BE, 0 for
//! none) ‖ hash → nothing, kept by every write of an original, its facts or its fingerprint,
//! in that write's transaction. Files written before the indexes get both at their first open
//! by this release, a chunk per write (`mod.rs` walks the originals; [`state`] and
//! [`mark_built`] say how far it got, so an interrupted build goes on where it stopped).

use std::ops::Bound;

use redb::{ReadTransaction, ReadableTable, TableDefinition, WriteTransaction};

use super::super::{MapError, VersionCursor};
use crate::hash::ContentHash;

/// What an index is by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Computed {
    Facts,
    Fingerprint,
}

impl Computed {
    fn table(self) -> TableDefinition<'static, &'static [u8], ()> {
        match self {
            Computed::Facts => TableDefinition::new("originals_by_facts_version"),
            Computed::Fingerprint => TableDefinition::new("originals_by_fingerprint_version"),
        }
    }
}

/// `built`: both indexes cover every original; `cursor`: the last hash an interrupted build
/// had indexed.
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("originals_by_version_meta");

/// Originals indexed per transaction when an older file's indexes are built.
pub(super) const BUILD_CHUNK: usize = 10_000;

/// Opens the tables; `no_originals`: the file holds none, so the indexes cover them already.
pub(super) fn create(txn: &WriteTransaction, no_originals: bool) -> Result<(), MapError> {
    txn.open_table(Computed::Facts.table())?;
    txn.open_table(Computed::Fingerprint.table())?;
    let mut meta = txn.open_table(META)?;
    if meta.get("built")?.is_none() && no_originals {
        meta.insert("built", [1u8].as_slice())?;
    }
    Ok(())
}

fn key(version: u32, hash: &ContentHash) -> [u8; 36] {
    let mut key = [0u8; 36];
    key[..4].copy_from_slice(&version.to_be_bytes());
    key[4..].copy_from_slice(hash.as_bytes());
    key
}

/// Moves `hash` in the index by `kind` from version `was` to `now` (`None`: not in it).
pub(super) fn set(
    txn: &WriteTransaction,
    kind: Computed,
    hash: &ContentHash,
    was: Option<u32>,
    now: Option<u32>,
) -> Result<(), MapError> {
    if was == now {
        return Ok(());
    }
    let mut index = txn.open_table(kind.table())?;
    if let Some(was) = was {
        index.remove(key(was, hash).as_slice())?;
    }
    if let Some(now) = now {
        index.insert(key(now, hash).as_slice(), ())?;
    }
    Ok(())
}

/// Whether the indexes are built, and where an interrupted build stopped.
pub(super) fn state(txn: &ReadTransaction) -> Result<(bool, Option<ContentHash>), MapError> {
    let meta = txn.open_table(META)?;
    let built = meta.get("built")?.is_some();
    let cursor = meta
        .get("cursor")?
        .and_then(|c| ContentHash::from_slice(c.value()));
    Ok((built, cursor))
}

/// Notes how far a build got: up to `cursor` (`None`: all of it, the indexes built).
pub(super) fn mark_built(
    txn: &WriteTransaction,
    cursor: Option<&ContentHash>,
) -> Result<(), MapError> {
    let mut meta = txn.open_table(META)?;
    match cursor {
        Some(hash) => {
            meta.insert("cursor", hash.as_bytes().as_slice())?;
        }
        None => {
            meta.remove("cursor")?;
            meta.insert("built", [1u8].as_slice())?;
        }
    }
    Ok(())
}

/// Moves `hash` from version `was` to `now` in the index by `kind`, if it is there (an
/// indexed original is; bytes fingerprinted before their entry is written are not yet).
pub(super) fn follow(
    txn: &WriteTransaction,
    kind: Computed,
    hash: &ContentHash,
    was: u32,
    now: u32,
) -> Result<(), MapError> {
    let mut index = txn.open_table(kind.table())?;
    if index.remove(key(was, hash).as_slice())?.is_some() {
        index.insert(key(now, hash).as_slice(), ())?;
    }
    Ok(())
}

/// The originals whose `kind` is not of `version`, in (version, hash) order after `after`:
/// the index's two ranges either side of `version`, so that its rows are never read.
pub(super) fn lacking(
    txn: &ReadTransaction,
    kind: Computed,
    version: u32,
    after: Option<VersionCursor>,
    limit: usize,
) -> Result<Vec<VersionCursor>, MapError> {
    let index = txn.open_table(kind.table())?;
    let start = after.map(|a| key(a.version, &a.hash));
    let below = key(version, &ContentHash([0; 32]));
    let above = version
        .checked_add(1)
        .map(|v| key(v, &ContentHash([0; 32])));
    let mut ranges = vec![(Bound::Unbounded, Bound::Excluded(below.as_slice()))];
    if let Some(above) = &above {
        ranges.push((Bound::Included(above.as_slice()), Bound::Unbounded));
    }
    let mut out = Vec::new();
    for (lower, upper) in ranges {
        let lower = match (&start, lower) {
            // The cursor, where it is past this range's own start.
            (Some(s), Bound::Unbounded) => Bound::Excluded(s.as_slice()),
            (Some(s), Bound::Included(l)) if s.as_slice() >= l => Bound::Excluded(s.as_slice()),
            (_, l) => l,
        };
        let empty = match (lower, upper) {
            (Bound::Excluded(l), Bound::Excluded(u)) => l >= u,
            _ => false,
        };
        if empty {
            continue;
        }
        for row in index.range::<&[u8]>((lower, upper))? {
            if out.len() >= limit {
                return Ok(out);
            }
            let (k, _) = row?;
            let raw = k.value();
            let (Some(has), Some(hash)) = (
                raw.get(..4).and_then(|v| v.try_into().ok()),
                raw.get(4..).and_then(ContentHash::from_slice),
            ) else {
                return Err(MapError::Corrupt(format!("{:?} index key", kind)));
            };
            out.push(VersionCursor {
                version: u32::from_be_bytes(has),
                hash,
            });
        }
    }
    Ok(out)
}
