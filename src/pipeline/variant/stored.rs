//! The variants map's rows with their bytes in hand: where the maps keep no variant bytes,
//! a row names an object in the blob store, written before the row and read after it. Also
//! what the rows say of `q=auto`'s choices for one original, read back for `format=json`.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::blob::{BlobStore, VariantObject};
use crate::error::Error;
use crate::hash::ContentHash;
use crate::maps::{Claim, ListedAtWrite, MapStore, VariantBody, VariantKey, VariantRow};
use crate::pipeline::Pipeline;
use crate::stats::Stats;
use imgcas_processors::Chosen;

/// The most `q=auto` variants [`Pipeline::auto_qualities`] lists for one original: each is a
/// row read, and an answer about an original should not grow with a site's every width.
pub const AUTO_QUALITIES_LISTED: usize = 100;

/// SHA-256 of a variant's key: its ETag (the first half) and its blob-store name.
pub(super) fn key_digest(key: &VariantKey) -> [u8; 32] {
    Sha256::digest(key.to_bytes()).into()
}

/// `row` as `maps` stores it: unchanged where the maps hold variant bytes; otherwise its image
/// bytes put in `blobs` first, and the row naming them returned.
pub(in crate::pipeline) async fn row_for(
    maps: &dyn MapStore,
    blobs: &dyn BlobStore,
    key: &VariantKey,
    row: VariantRow,
) -> Result<VariantRow, Error> {
    match row {
        VariantRow::Image {
            format,
            width,
            height,
            chosen,
            body: VariantBody::Inline(bytes),
        } if !maps.holds_variant_bytes() => {
            let len = bytes.len() as u64;
            blobs.put_variant(&variant_object(key), bytes).await?;
            Ok(VariantRow::Image {
                format,
                width,
                height,
                chosen,
                body: VariantBody::InBlobStore { len },
            })
        }
        row => Ok(row),
    }
}

/// `row` with its image bytes in hand: a row whose bytes sit in a blob store is completed
/// from the first of `stores` that has them whole. `None` when none has (evicted by another
/// node between the two reads, or lost): the variant is made again, or not copied.
pub(in crate::pipeline) async fn with_bytes_in_hand(
    row: VariantRow,
    key: &VariantKey,
    stores: &[&dyn BlobStore],
) -> Result<Option<VariantRow>, Error> {
    let VariantRow::Image {
        format,
        width,
        height,
        chosen,
        body: VariantBody::InBlobStore { len },
    } = row
    else {
        return Ok(Some(row));
    };
    let object = variant_object(key);
    let mut found = None;
    for store in stores {
        match store.get_variant(&object).await? {
            Some(bytes) if bytes.len() as u64 == len => {
                return Ok(Some(VariantRow::Image {
                    format,
                    width,
                    height,
                    chosen,
                    body: VariantBody::Inline(bytes),
                }))
            }
            other => found = other.map(|b| b.len()).or(found),
        }
    }
    tracing::warn!(
        key = %object.key(),
        expected = len,
        found,
        "variant bytes missing or short in the blob store"
    );
    Ok(None)
}

/// Where a variant's bytes live in the blob store, when the maps keep none.
pub(in crate::pipeline) fn variant_object(key: &VariantKey) -> VariantObject {
    VariantObject {
        hash: key.hash,
        digest: key_digest(key),
    }
}

impl Pipeline {
    /// The variants map's row for `key`, with its image bytes in hand: rows of maps that keep
    /// bytes in the blob store are completed from there. A row whose bytes are gone (evicted
    /// by another node between the two reads, or lost) counts as absent: it is made again.
    pub(super) async fn stored_variant(
        &self,
        key: &VariantKey,
    ) -> Result<Option<VariantRow>, Error> {
        let s = &self.shared;
        let Some(row) = s.maps.variant(key).await? else {
            return Ok(None);
        };
        if matches!(
            row,
            VariantRow::Image {
                body: VariantBody::InBlobStore { .. },
                ..
            }
        ) {
            Stats::bump(&s.stats.variant_object_reads);
        }
        with_bytes_in_hand(row, key, &[s.blobs.as_ref()]).await
    }

    /// [`Pipeline::stored_variant`] for a request's miss: concurrent misses of one key on
    /// this node share one read of the maps and the bucket (issue 54: 200 requests for one
    /// stored variant a node had not served made up to 100 GETs of one object). Only where
    /// a read that began before a write may answer for a caller that came after it: a
    /// request, which takes what is stored when it asks; never a claim's waiter, which
    /// reads again to see a result published since.
    pub(super) async fn stored_variant_shared(
        &self,
        key: &VariantKey,
    ) -> Result<Option<VariantRow>, Error> {
        let (this, k) = (self.clone(), key.clone());
        self.shared
            .variants
            .variant_reads
            .run(
                key.clone(),
                async move {
                    // A flight that ended a moment ago put its row in memory before it
                    // ended: a caller that missed it there and came after reads nothing.
                    if let Some(row) = this.shared.variants.hot.get(&k) {
                        return Ok(Some(row));
                    }
                    Stats::bump(&this.shared.stats.variant_map_reads);
                    let row = this.stored_variant(&k).await?;
                    if let Some(row) = &row {
                        this.shared.variants.hot.insert(k.clone(), row.clone());
                    }
                    Ok(row)
                },
                |m| Err(Error::Internal(format!("variant read failed: {m}"))),
            )
            .await
    }

    /// Stores a processed result: where the maps keep no bytes, the bytes go to the blob
    /// store first and the row that names them after (under `claim`, when shared, so a
    /// node that lost its claim writes nothing over a newer owner's row). Returns what the
    /// write saw of the takedown list.
    pub(super) async fn store_variant(
        &self,
        key: &VariantKey,
        row: &VariantRow,
        claim: Option<&Claim>,
    ) -> Result<ListedAtWrite, Error> {
        let s = &self.shared;
        let row = row_for(s.maps.as_ref(), s.blobs.as_ref(), key, row.clone()).await?;
        Ok(match claim {
            Some(claim) => s.maps.put_variant_claimed(key, &row, claim).await?,
            None => {
                s.maps.put_variant(key, &row).await?;
                None
            }
        })
    }

    /// What the `q=auto` searches of one original chose, variant by variant (the newest
    /// processor's row of each spec, at most [`AUTO_QUALITIES_LISTED`], by canonical spec): what `format=json`
    /// tells a merchant of the qualities its picture was given. Reads rows; makes nothing.
    pub async fn auto_qualities(&self, hash: &ContentHash) -> Result<Vec<(String, Chosen)>, Error> {
        let s = &self.shared;
        // Per spec, the newest processor's row: an older one is what a rebuild replaced.
        let mut newest: BTreeMap<String, VariantKey> = BTreeMap::new();
        for (key, _) in s.maps.variants_of(hash).await? {
            if !key.canonical_spec.contains("q=auto") {
                continue;
            }
            match newest.get(&key.canonical_spec) {
                Some(kept) if kept.processor_version >= key.processor_version => {}
                _ => {
                    newest.insert(key.canonical_spec.clone(), key);
                }
            }
        }
        let mut chosen = Vec::new();
        for key in newest.into_values().take(AUTO_QUALITIES_LISTED) {
            // A row evicted since the listing, or an error cached for the spec, chose nothing.
            if let Some(VariantRow::Image {
                chosen: Some(c), ..
            }) = s.maps.variant(&key).await?
            {
                chosen.push((key.canonical_spec, c));
            }
        }
        Ok(chosen)
    }

    /// Deletes the blob-store bytes of variants whose rows are gone, where the maps keep
    /// none themselves.
    pub(in crate::pipeline) async fn drop_variant_bytes(
        &self,
        keys: &[VariantKey],
    ) -> Result<(), Error> {
        let s = &self.shared;
        if s.maps.holds_variant_bytes() || keys.is_empty() {
            return Ok(());
        }
        let names: Vec<VariantObject> = keys.iter().map(variant_object).collect();
        Ok(s.blobs.delete_variants(&names).await?)
    }
}
