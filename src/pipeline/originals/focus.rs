//! Focal points set once per original (`PUT`/`DELETE /v1/originals/{hash}/focus`): kept in
//! its index entry, where every URL of its bytes, every spec and every node read it with the
//! original itself (`variant/locate.rs` places a request's window on it). A change removes
//! the variants a focal point placed (their keys name the point: a new point makes new
//! keys, and the old variants would only take room) and makes every node forget what it
//! remembers of requests and variants, through the purge generation, as a removal does.

use crate::error::Error;
use crate::hash::ContentHash;
use crate::maps::{Focus, VariantKey};
use crate::pipeline::Pipeline;

/// What setting (or clearing) a focal point did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FocusSet {
    pub hash: ContentHash,
    pub focus: Option<Focus>,
    /// Variants placed by a focal point, removed.
    pub variants_removed: u64,
}

/// Whether a variant's window was placed by a focal point (its canonical spec names one).
fn placed_by_a_focal_point(key: &VariantKey) -> bool {
    key.canonical_spec
        .split('&')
        .any(|part| part.starts_with("gravity=fp:"))
}

impl Pipeline {
    /// Sets `hash`'s focal point (`None`: clears it). A near-duplicate's own hash (canonical
    /// mode) sets it on the canonical original that serves it, the one its variants are made
    /// of. 404 for an original not stored, 451 for one taken down.
    pub async fn set_focus(
        &self,
        hash: &ContentHash,
        focus: Option<Focus>,
    ) -> Result<FocusSet, Error> {
        let s = &self.shared;
        self.may_serve(&[*hash]).map_err(|refused| refused.error)?;
        let hash = &match s.maps.put_focus(hash, focus.as_ref()).await? {
            true => *hash,
            false => {
                let not_found = || Error::NotFound(format!("no original with hash {hash}"));
                let canonical = s.maps.alias(hash).await?.ok_or_else(not_found)?;
                self.may_serve(&[canonical])
                    .map_err(|refused| refused.error)?;
                if !s.maps.put_focus(&canonical, focus.as_ref()).await? {
                    return Err(not_found());
                }
                canonical
            }
        };
        let placed: Vec<VariantKey> = s
            .maps
            .variants_of(hash)
            .await?
            .into_iter()
            .map(|(key, _)| key)
            .filter(placed_by_a_focal_point)
            .collect();
        let variants_removed = s.maps.remove_variants(&placed).await?;
        self.drop_variant_bytes(&placed).await?;
        // This node's memory of requests and variants, then every other node's.
        self.removed();
        s.maps.bump_purge_generation().await?;
        Ok(FocusSet {
            hash: *hash,
            focus,
            variants_removed,
        })
    }
}
