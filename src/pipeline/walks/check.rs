//! The online check of the store (issue 69, part 5): the originals index against the blob
//! store, while nodes serve, a page at a time, resumable and shared — `verify` and `gc` for
//! a store too large to stop for.
//!
//! The two sides are read in hash order, a page of each at a time, and merged: an original
//! indexed with no blob is **missing**, one whose blob's size is not the indexed size is
//! **mismatched**, and a blob the index does not name is **unreferenced** (deleted when the
//! check was asked to apply, once older than `maintenance.gc_grace`: a writer stores the blob
//! before the index entry, so a young one may be on its way). Each side also sums an
//! order-independent checksum per range (the hashes' first byte: 256 ranges), so the report
//! says which ranges agree as a whole, and what was found in those that do not.
//!
//! It runs as a walk (`walks.rs`): under the lease `walk:store_check`, its cursor — the last
//! hash handled, the open range's sums and the report so far — written to the maps after
//! every page, throttled by `maintenance.walk_rows_per_second`. A restart resumes it; every
//! node sees its report (`GET /admin/check`, `imgcas verify --online`).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Page, Walk};
use crate::blob::StoredBlob;
use crate::error::Error;
use crate::hash::ContentHash;
use crate::maps::{now_ms, OriginalInfo, WalkPosition, WALK_PAGE};
use crate::pipeline::Pipeline;

/// Ranges the hashes are checked in: by their first byte.
pub const CHECK_RANGES: u16 = 256;

/// Hashes a report names of each finding (the counts go on past it).
const NAMED: usize = 100;

/// Ranges whose checksums differ that a report describes (the count goes on past it).
const DIFFERING_NAMED: usize = 64;

/// What the check found, as far as it went.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckReport {
    /// Unreferenced blobs older than the grace were deleted.
    pub applied: bool,
    /// Ranges read to their end, and those whose two checksums were equal.
    pub ranges_checked: u32,
    pub ranges_equal: u32,
    /// The first ranges whose checksums differed, with both sides' figures.
    pub differing: Vec<RangeSums>,
    pub differing_ranges: u32,
    pub originals_checked: u64,
    pub blobs_listed: u64,
    /// Indexed originals with no blob.
    pub missing: u64,
    pub missing_named: Vec<ContentHash>,
    /// Indexed originals whose blob is not the indexed size.
    pub mismatched: u64,
    pub mismatched_named: Vec<ContentHash>,
    /// Blobs the index does not name, older than the grace (deleted when applied).
    pub unreferenced: u64,
    pub unreferenced_bytes: u64,
    pub unreferenced_named: Vec<ContentHash>,
    pub deleted: u64,
    /// Unreferenced blobs younger than the grace: left alone.
    pub young: u64,
}

impl CheckReport {
    /// Nothing found that a store should not hold (young blobs are writes on their way).
    pub fn is_clean(&self) -> bool {
        self.missing == 0 && self.mismatched == 0 && self.unreferenced == 0
    }
}

/// One range's two sides: rows and an order-independent checksum of each.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RangeSums {
    /// The range: the hashes' first byte, in hex.
    pub range: String,
    pub index_rows: u64,
    pub index_sum: u64,
    pub blob_rows: u64,
    pub blob_sum: u64,
}

/// Where the check stands: the walk's cursor, as the maps keep it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckCursor {
    /// The last hash handled on both sides.
    after: Option<ContentHash>,
    /// The range under way (its first byte), and its sums so far.
    range: u16,
    sums: RangeSums,
    /// Set by the page that reached the end.
    done: bool,
    pub report: CheckReport,
}

/// The check as `GET /admin/check` shows it: the walk's position and the report it keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckState {
    /// A run is under way on some node (its lease held, its end not reached).
    pub running: bool,
    pub node: String,
    pub started_ms: u64,
    pub updated_ms: u64,
    pub finished_ms: Option<u64>,
    /// Rows read by the run (index entries and blobs).
    pub rows: u64,
    pub report: CheckReport,
}

/// What a row of either side counts for in its range's checksum: hash and size, digested,
/// summed (so the order rows are read in does not matter, and a side read twice over a
/// page boundary would show).
fn row_sum(hash: &ContentHash, size: u64) -> u64 {
    let mut digest = Sha256::new();
    digest.update(hash.as_bytes());
    digest.update(size.to_le_bytes());
    let out = digest.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&out[..8]);
    u64::from_le_bytes(first)
}

fn range_of(hash: &ContentHash) -> u16 {
    u16::from(hash.as_bytes()[0])
}

/// What one page of the merge holds on each side, up to the same hash.
enum Side {
    Index(ContentHash, u64),
    Blob(StoredBlob),
    Both(ContentHash, u64, StoredBlob),
}

impl CheckCursor {
    /// Closes ranges before `range` (those with no rows on either side are equal, and empty).
    fn close_until(&mut self, range: u16) {
        while self.range < range {
            let sums = std::mem::take(&mut self.sums);
            let report = &mut self.report;
            report.ranges_checked += 1;
            if sums.index_rows == sums.blob_rows && sums.index_sum == sums.blob_sum {
                report.ranges_equal += 1;
            } else {
                report.differing_ranges += 1;
                if report.differing.len() < DIFFERING_NAMED {
                    report.differing.push(RangeSums {
                        range: format!("{:02x}", self.range),
                        ..sums
                    });
                }
            }
            self.range += 1;
        }
    }
}

impl Pipeline {
    /// Runs the online check to its end (or takes up the one a restart interrupted, as it
    /// was asked); `apply` deletes unreferenced blobs older than the grace. Returns the
    /// rows it read.
    pub async fn check_store(&self, apply: bool) -> Result<u64, Error> {
        self.run_walk(Walk::Check, |cursor: Option<CheckCursor>| {
            let cursor = cursor.unwrap_or_else(|| CheckCursor {
                report: CheckReport {
                    applied: apply,
                    ..CheckReport::default()
                },
                ..CheckCursor::default()
            });
            self.check_page(cursor)
        })
        .await
    }

    /// Starts [`Pipeline::check_store`] in the background unless this node runs one
    /// already; returns whether it started one. (Another node's run holds the lease: this
    /// one then waits for it and finds it finished, or takes it up if that node stopped.)
    pub fn start_check(&self, apply: bool) -> bool {
        use std::sync::atomic::Ordering;
        if self.shared.walks.checking.swap(true, Ordering::SeqCst) {
            return false;
        }
        let pipeline = self.clone();
        tokio::spawn(async move {
            match pipeline.check_store(apply).await {
                Ok(rows) => tracing::info!(rows, "store check finished"),
                Err(e) => {
                    tracing::warn!(error = %e, "store check stopped; it resumes at the next start")
                }
            }
            pipeline
                .shared
                .walks
                .checking
                .store(false, Ordering::SeqCst);
        });
        true
    }

    /// Takes up a check a stop interrupted (at a node's start): its kept cursor says how it
    /// was asked.
    pub async fn resume_check(&self) -> Result<(), Error> {
        let kept = self.shared.maps.walk_position(Walk::Check.name()).await?;
        if kept.is_some_and(|p| p.finished_ms.is_none() && p.cursor.is_some()) {
            self.start_check(false);
        }
        Ok(())
    }

    /// The check as the maps keep it (any node's run), `None` before the first.
    pub async fn check_state(&self) -> Result<Option<CheckState>, Error> {
        let Some(position) = self.shared.maps.walk_position(Walk::Check.name()).await? else {
            return Ok(None);
        };
        let WalkPosition {
            cursor,
            rows,
            node,
            started_ms,
            updated_ms,
            finished_ms,
        } = position;
        let report = match cursor.as_deref() {
            Some(text) => {
                serde_json::from_str::<CheckCursor>(text)
                    .map_err(|e| Error::Internal(format!("the check's kept cursor: {e}")))?
                    .report
            }
            None => CheckReport::default(),
        };
        // A run whose node stopped writing for longer than the lease is no longer under way.
        let stale = now_ms().saturating_sub(updated_ms.max(started_ms))
            > self.shared.config.cluster.claim_ttl.as_millis() as u64 * 2;
        Ok(Some(CheckState {
            running: finished_ms.is_none() && !stale,
            node,
            started_ms,
            updated_ms,
            finished_ms,
            rows,
            report,
        }))
    }

    /// One page of the check: a page of the index and one of the blob store after the
    /// cursor, merged up to the first hash past which either page cannot vouch.
    async fn check_page(&self, mut cursor: CheckCursor) -> Result<Page<CheckCursor>, Error> {
        if cursor.done {
            return Ok(None);
        }
        let (maps, blobs) = (&self.shared.maps, &self.shared.blobs);
        let indexed: Vec<(ContentHash, OriginalInfo)> =
            maps.originals_page(cursor.after, WALK_PAGE).await?;
        let stored = blobs.originals_page(cursor.after, WALK_PAGE).await?;
        // A full page vouches for nothing past its last hash: the merge stops at the lower
        // of the two bounds.
        let bound = [
            (indexed.len() >= WALK_PAGE).then(|| indexed.last().map(|(h, _)| *h)),
            (stored.len() >= WALK_PAGE).then(|| stored.last().map(|b| b.hash)),
        ]
        .into_iter()
        .flatten()
        .flatten()
        .min();
        let merged = merge(&indexed, &stored, bound);
        let rows = merged.len() as u64;
        let written_before = self.gc_written_before();
        let mut doomed = Vec::new();
        for side in &merged {
            let hash = match side {
                Side::Index(h, _) | Side::Both(h, _, _) => *h,
                Side::Blob(b) => b.hash,
            };
            cursor.close_until(range_of(&hash));
            cursor.after = Some(hash);
            let (sums, report) = (&mut cursor.sums, &mut cursor.report);
            if let Side::Index(h, n) | Side::Both(h, n, _) = side {
                sums.index_rows += 1;
                sums.index_sum = sums.index_sum.wrapping_add(row_sum(h, *n));
                report.originals_checked += 1;
            }
            if let Side::Blob(b) | Side::Both(_, _, b) = side {
                sums.blob_rows += 1;
                sums.blob_sum = sums.blob_sum.wrapping_add(row_sum(&b.hash, b.size));
                report.blobs_listed += 1;
            }
            match side {
                Side::Both(h, n, b) if *n != b.size => {
                    report.mismatched += 1;
                    name(&mut report.mismatched_named, *h);
                }
                Side::Both(..) => {}
                Side::Index(h, _) => {
                    // Asked again: the listing may have been read before a write landed.
                    if blobs.size(h).await?.is_none() && maps.original(h).await?.is_some() {
                        report.missing += 1;
                        name(&mut report.missing_named, *h);
                    }
                }
                Side::Blob(b) if b.modified_ms > written_before => report.young += 1,
                Side::Blob(b) => {
                    if maps.original(&b.hash).await?.is_some() {
                        // Indexed since the page was read.
                        continue;
                    }
                    report.unreferenced += 1;
                    report.unreferenced_bytes += b.size;
                    name(&mut report.unreferenced_named, b.hash);
                    if report.applied {
                        doomed.push(b.hash);
                    }
                }
            }
        }
        for hash in &doomed {
            // Asked once more just before: an upload may have indexed it meanwhile.
            if maps.original(hash).await?.is_none() {
                blobs.delete(hash).await?;
                cursor.report.deleted += 1;
            }
        }
        if bound.is_none() {
            // Both sides read to their end: the open range and every later one close.
            cursor.close_until(CHECK_RANGES);
            cursor.done = true;
        }
        Ok(Some((cursor, rows)))
    }

    /// Blobs written after this (ms since the epoch) are spared by `gc` and the check: their
    /// index entries may be on their way. Object stores report write times to the second,
    /// rounded down, so a second is added; a grace of 0 (an offline store) means none.
    pub(in crate::pipeline) fn gc_written_before(&self) -> u64 {
        let grace = match self.shared.config.maintenance.gc_grace.as_millis() as u64 {
            0 => 0,
            ms => ms + 1000,
        };
        now_ms().saturating_sub(grace)
    }
}

/// The two pages merged in hash order, up to `bound` (to their ends without one).
fn merge(
    indexed: &[(ContentHash, OriginalInfo)],
    stored: &[StoredBlob],
    bound: Option<ContentHash>,
) -> Vec<Side> {
    let within = |h: &ContentHash| bound.is_none_or(|b| *h <= b);
    let mut index = indexed
        .iter()
        .filter(|(h, _)| within(h))
        .map(|(h, info)| (*h, info.bytes))
        .peekable();
    let mut blob = stored
        .iter()
        .filter(|b| within(&b.hash))
        .copied()
        .peekable();
    let mut merged = Vec::new();
    loop {
        let side = match (index.peek(), blob.peek()) {
            (None, None) => break,
            (Some(_), None) => index.next().map(|(h, n)| Side::Index(h, n)),
            (None, Some(_)) => blob.next().map(Side::Blob),
            (Some((h, _)), Some(b)) => match h.cmp(&b.hash) {
                std::cmp::Ordering::Less => index.next().map(|(h, n)| Side::Index(h, n)),
                std::cmp::Ordering::Greater => blob.next().map(Side::Blob),
                std::cmp::Ordering::Equal => match (index.next(), blob.next()) {
                    (Some((h, n)), Some(b)) => Some(Side::Both(h, n, b)),
                    _ => None,
                },
            },
        };
        merged.extend(side);
    }
    merged
}

fn name(named: &mut Vec<ContentHash>, hash: ContentHash) {
    if named.len() < NAMED {
        named.push(hash);
    }
}
