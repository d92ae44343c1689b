//! Moving a node into a cluster: [`copy_maps`] copies one node's embedded maps into shared
//! maps, and its bytes into the shared bucket — originals from its local blob directory,
//! variant bytes out of its redb rows into `variants/<hash>/<key digest>`.
//!
//! The write order is the pipeline's: bytes first, then the row that points at them. So a
//! row found in the target means its bytes are there, and a second run (after an
//! interruption, or to pick up what the node did since) skips every original and variant
//! already copied: the copy is idempotent and resumable. URL entries are upserted each run
//! (they may have changed since), after the originals they point at.
//!
//! Takedowns go first: the node's list is added to the cluster's, and nothing listed in
//! either is copied, except the URL entries that remember a URL as taken down.

use crate::blob::BlobStore;
use crate::error::Error;
use crate::maps::{MapStore, VariantBody, VariantRow};

use super::maintenance::Progress;
use super::variant::row_for;

/// What [`copy_maps`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CopyReport {
    pub originals_copied: u64,
    /// Found in the target already (an earlier run).
    pub originals_present: u64,
    /// Indexed by the source but in neither the local directory nor the bucket: not copied
    /// (`imgcas verify` on the source names them).
    pub originals_missing: u64,
    pub urls_copied: u64,
    /// URL entries whose original could not be copied: left out.
    pub urls_skipped: u64,
    pub variants_copied: u64,
    pub variants_present: u64,
    /// Bytes put into the bucket (originals and variants).
    pub bytes_uploaded: u64,
}

/// Copies `from` (and the originals in `local_originals`, when the node kept them in a local
/// directory) into `to` and `bucket`. `to` keeps variant bytes in `bucket`, unless it holds
/// them itself.
pub async fn copy_maps(
    from: &dyn MapStore,
    local_originals: Option<&dyn BlobStore>,
    to: &dyn MapStore,
    bucket: &dyn BlobStore,
    progress: Progress<'_>,
) -> Result<CopyReport, Error> {
    let mut report = CopyReport::default();
    let hashes = from.original_hashes().await?;
    let urls = from.urls().await?;
    let keys = from.variant_keys().await?;
    let total = (hashes.len() + urls.len() + keys.len()) as u64;
    let mut done = 0;
    let mut step = || {
        done += 1;
        progress(done, total);
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

    // Originals: bytes into the bucket, then the index entry.
    let mut copied = std::collections::HashSet::new();
    for hash in hashes {
        step();
        if listed.contains(&hash) {
            continue;
        }
        if to.original(&hash).await?.is_some() {
            report.originals_present += 1;
            copied.insert(hash);
            continue;
        }
        let Some(info) = from.original(&hash).await? else {
            continue;
        };
        let local = match local_originals {
            Some(store) => store.get(&hash).await?,
            None => None,
        };
        match local {
            Some(bytes) => {
                report.bytes_uploaded += bytes.len() as u64;
                bucket.put_if_absent(&hash, bytes).await?;
            }
            // A node that kept its originals in this bucket already.
            None if bucket.size(&hash).await?.is_some() => {}
            None => {
                tracing::warn!(%hash, "original missing from the node's blob store; not copied");
                report.originals_missing += 1;
                continue;
            }
        }
        to.add_original(&hash, &info).await?;
        copied.insert(hash);
        report.originals_copied += 1;
    }

    // URL entries, where their original made it.
    for (url, entry) in urls {
        step();
        if listed.contains(&entry.hash) || listed.contains(&entry.serving()) {
            // Remembered as taken down: the entry keeps the cluster from downloading it.
            to.put_url(&url, &entry).await?;
            report.urls_copied += 1;
        } else if copied.contains(&entry.serving()) {
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

    // Variants: bytes into the bucket, then the row that names them.
    for key in keys {
        step();
        if !copied.contains(&key.hash) {
            continue;
        }
        if to.variant(&key).await?.is_some() {
            report.variants_present += 1;
            continue;
        }
        let Some(row) = from.variant(&key).await? else {
            continue;
        };
        let row = row_for(to, bucket, &key, row).await?;
        if let VariantRow::Image {
            body: VariantBody::InBlobStore { len },
            ..
        } = &row
        {
            report.bytes_uploaded += len;
        }
        to.put_variant(&key, &row).await?;
        report.variants_copied += 1;
    }
    to.flush().await?;
    Ok(report)
}
