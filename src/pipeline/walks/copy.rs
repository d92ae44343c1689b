//! Moving maps between backends: [`copy_maps`] copies any maps into any other — a node's
//! embedded maps into a cluster's PostgreSQL, a cluster's maps into a node's data dir, one
//! node's into another's — and the bytes they name into the target's blob store: originals,
//! and variant bytes, which move between rows (maps that hold them, redb) and
//! `variants/<hash>/<key digest>` objects (maps that do not, PostgreSQL) as the target keeps
//! them.
//!
//! The write order is the pipeline's: bytes first, then the row that points at them. So a
//! row found in the target means its bytes are there, and a second run (after an
//! interruption, or to pick up what the node did since) skips every original and variant
//! already copied: the copy is idempotent and resumable. URL entries are upserted each run
//! (they may have changed since), after the originals they point at. Each map is read a page
//! at a time ([`crate::maps::WALK_PAGE`] rows), and what was copied is asked of the target (whose memory
//! of originals answers the repeats), so the copy's memory does not grow with the store.
//!
//! Takedowns go first: the node's list is added to the cluster's, and nothing listed in
//! either is copied, except the URL entries that remember a URL as taken down.

use crate::blob::BlobStore;
use crate::error::Error;
use crate::maps::{
    MapStore, OriginalPages, UrlPages, VariantBody, VariantKey, VariantKeyPages, VariantRow,
};

use super::maintenance::Progress;
use crate::pipeline::variant::{row_for, variant_object, with_bytes_in_hand};

/// What [`copy_maps`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CopyReport {
    pub originals_copied: u64,
    /// Found in the target already (an earlier run).
    pub originals_present: u64,
    /// Indexed by the source but in none of its blob stores (nor the target's): not copied
    /// (`imgcas verify` on the source names them).
    pub originals_missing: u64,
    pub urls_copied: u64,
    /// URL entries whose original could not be copied: left out.
    pub urls_skipped: u64,
    pub variants_copied: u64,
    pub variants_present: u64,
    /// Bytes put into the target's blob store (originals and variants).
    pub bytes_uploaded: u64,
}

/// Copies `from` into `to`, and every byte they name from the first of `sources` that has it
/// into `to_blobs` (where the target node reads its bytes; nothing is put that is there
/// already). An original whose bytes no source has is not copied, nor what names it.
pub async fn copy_maps(
    from: &dyn MapStore,
    sources: &[&dyn BlobStore],
    to: &dyn MapStore,
    to_blobs: &dyn BlobStore,
    progress: Progress<'_>,
) -> Result<CopyReport, Error> {
    let mut report = CopyReport::default();
    // The bar's length, from the source's own counts (read before the walk: the source may
    // grow meanwhile, and the bar says so by passing its length).
    let counted = from.totals().await?;
    let variants = from.variant_totals().await?;
    let total = counted.originals + counted.urls + variants.images + variants.errors;
    let mut done = 0;
    let mut step = || {
        done += 1;
        progress(done, total.max(done));
    };

    // Takedowns: the node's join the cluster's, before anything they name could be copied.
    let node_takedowns = from.takedowns().await?;
    for (hash, at) in &node_takedowns {
        to.take_down(hash, *at).await?;
    }
    if !node_takedowns.is_empty() {
        to.bump_purge_generation().await?;
    }
    let listed: std::collections::HashSet<_> =
        to.takedowns().await?.into_iter().map(|(h, _)| h).collect();

    // Originals: bytes into the target's store, then the index entry.
    let mut originals = OriginalPages::new(from);
    while let Some(page) = originals.next().await? {
        for (hash, info) in page {
            step();
            if listed.contains(&hash) {
                continue;
            }
            if to.original(&hash).await?.is_some() {
                report.originals_present += 1;
                continue;
            }
            if to_blobs.size(&hash).await?.is_none() {
                let mut found = None;
                for source in sources {
                    found = source.get(&hash).await?;
                    if found.is_some() {
                        break;
                    }
                }
                let Some(bytes) = found else {
                    tracing::warn!(%hash, "original missing from the source's blob stores; not copied");
                    report.originals_missing += 1;
                    continue;
                };
                report.bytes_uploaded += bytes.len() as u64;
                to_blobs.put_if_absent(&hash, bytes).await?;
            }
            to.add_original(&hash, &info).await?;
            if let Some(focus) = &info.focus {
                // PostgreSQL's index entry is written without it.
                to.put_focus(&hash, Some(focus)).await?;
            }
            report.originals_copied += 1;
        }
    }

    // URL entries, where their original made it.
    let mut urls = UrlPages::new(from);
    while let Some(page) = urls.next().await? {
        for (url, entry) in page {
            step();
            if listed.contains(&entry.hash) || listed.contains(&entry.serving()) {
                // Remembered as taken down: the entry keeps the cluster from downloading it.
                to.put_url(&url, &entry).await?;
                report.urls_copied += 1;
            } else if to.original(&entry.serving()).await?.is_some() {
                // A canonical mapping brings its alias (the own hash keeps serving by hash).
                if let Some(canonical) = entry.canonical {
                    to.put_alias(&entry.hash, &canonical).await?;
                }
                to.put_url(&url, &entry).await?;
                report.urls_copied += 1;
            } else {
                report.urls_skipped += 1;
            }
        }
    }

    // Variants: bytes where the target keeps them, then the row that names them.
    let mut keys = VariantKeyPages::new(from);
    while let Some(page) = keys.next().await? {
        for key in page {
            step();
            // Only where the original made it (listed ones never do).
            if listed.contains(&key.hash) || to.original(&key.hash).await?.is_none() {
                continue;
            }
            copy_variant(from, sources, to, to_blobs, &key, &mut report).await?;
        }
    }
    to.flush().await?;
    Ok(report)
}

/// One variant row into the target (unless there already), its bytes where the target keeps
/// them.
async fn copy_variant(
    from: &dyn MapStore,
    sources: &[&dyn BlobStore],
    to: &dyn MapStore,
    to_blobs: &dyn BlobStore,
    key: &VariantKey,
    report: &mut CopyReport,
) -> Result<(), Error> {
    if to.variant(key).await?.is_some() {
        report.variants_present += 1;
        return Ok(());
    }
    let Some(row) = from.variant(key).await? else {
        return Ok(());
    };
    // Bytes already where the target keeps them: the row as it is. Otherwise in hand,
    // from the source's stores, for `row_for` to put where the target keeps them.
    let kept_by_target = matches!(
        row,
        VariantRow::Image {
            body: VariantBody::InBlobStore { .. },
            ..
        }
    ) && !to.holds_variant_bytes()
        && to_blobs.get_variant(&variant_object(key)).await?.is_some();
    let row = match kept_by_target {
        true => row,
        false => match with_bytes_in_hand(row, key, sources).await? {
            Some(row) => row,
            None => return Ok(()),
        },
    };
    let row = row_for(to, to_blobs, key, row).await?;
    if let VariantRow::Image {
        body: VariantBody::InBlobStore { len },
        ..
    } = &row
    {
        report.bytes_uploaded += len;
    }
    to.put_variant(key, &row).await?;
    report.variants_copied += 1;
    Ok(())
}
