//! Removals an administrator asks for: what the service must stop serving or knowing on
//! request, rather than by its own bounded-growth rules (`walks/upkeep.rs`).
//!
//! - Forgetting a URL's entry (`DELETE /v1/urls`): its next request downloads it again.
//! - A takedown (`DELETE /v1/originals/<hash>`): the hash goes on the takedown list first,
//!   durably, so that from then on nothing of it is served (451 `taken_down`), stored or
//!   processed; then everything of it is removed — its index entry, the URL entries naming
//!   it (found through the maps' hash → URLs index), its variants (the mezzanine is one) and
//!   their bytes, the variants of other originals drawn with it as a configured watermark's
//!   overlay, the aliases naming it, and its bytes. Its fingerprint stays, so that
//!   canonical mode refuses a new copy of the picture; and the own bytes of every URL merged
//!   into it (canonical mode) are taken down with it. A takedown that a
//!   crash interrupted is finished by asking again: every step is idempotent. Writers of an
//!   original or a variant check the list again after writing
//!   ([`Pipeline::after_write`], `gate.rs`), so a write that raced a takedown is removed too.
//! - Lifting a takedown (`DELETE /v1/takedowns/<hash>`): the hash is off the list, and the
//!   URL entries that remembered it as taken down are forgotten, so they download again.
//!
//! Every removal ends the remembered requests and what this node holds in memory at once,
//! and moves the maps' purge generation forward: every other node sharing the maps sees it
//! within a quarter of a second and drops its memory too ([`Pipeline::follow_purges`]).
//! The takedown list itself is held in memory on every node (it is checked by every request
//! that locates a variant, so it must cost no round trip), reloaded whenever the generation
//! moves.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use url::Url;

use crate::error::Error;
use crate::hash::ContentHash;
use crate::maps::{now_ms, Fingerprinted, MapStore, VariantKey};
use crate::pipeline::Pipeline;
use crate::wire::{LiftedAnswer, TakedownAnswer};

/// The takedown list as this node last loaded it, and the purge generation it was loaded at.
pub(in crate::pipeline) struct Takedowns {
    listed: RwLock<HashSet<ContentHash>>,
    generation: AtomicU64,
    /// Held from a change of the list in the maps to the same change here, and by a reload
    /// from its read to its write: a reload cannot put back the list as it was before a
    /// takedown on this node.
    changing: tokio::sync::Mutex<()>,
}

impl Takedowns {
    /// Hashes on the takedown list, as this node holds it.
    pub(in crate::pipeline) fn len(&self) -> usize {
        self.listed.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Loads the list and the generation from the maps (at open).
    pub(in crate::pipeline) async fn load(maps: &dyn MapStore) -> Result<Takedowns, Error> {
        let generation = maps.purge_generation().await?;
        Ok(Takedowns {
            listed: RwLock::new(Self::read(maps).await?),
            generation: AtomicU64::new(generation),
            changing: tokio::sync::Mutex::new(()),
        })
    }

    /// The list as the maps hold it.
    async fn read(maps: &dyn MapStore) -> Result<HashSet<ContentHash>, Error> {
        Ok(maps
            .takedowns()
            .await?
            .into_iter()
            .map(|(h, _)| h)
            .collect())
    }

    pub(in crate::pipeline) fn contains(&self, hash: &ContentHash) -> bool {
        self.listed
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(hash)
    }

    pub(in crate::pipeline) fn set(&self, hash: ContentHash, listed: bool) {
        let mut set = self.listed.write().unwrap_or_else(|p| p.into_inner());
        if listed {
            set.insert(hash);
        } else {
            set.remove(&hash);
        }
    }
}

/// What a takedown removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakenDown {
    pub hash: ContentHash,
    /// The hash was not on the list before.
    pub newly_listed: bool,
    pub variants_removed: u64,
    pub urls_forgotten: u64,
    /// The original's bytes and the bytes its variants counted for.
    pub bytes_freed: u64,
}

/// What lifting a takedown did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lifted {
    pub hash: ContentHash,
    /// The hash was on the list.
    pub lifted: bool,
    /// URL entries that remembered the hash as taken down, now forgotten.
    pub urls_forgotten: u64,
}

impl From<TakenDown> for TakedownAnswer {
    fn from(r: TakenDown) -> Self {
        TakedownAnswer {
            hash: r.hash.to_hex(),
            newly_listed: r.newly_listed,
            variants_removed: r.variants_removed,
            urls_forgotten: r.urls_forgotten,
            bytes_freed: r.bytes_freed,
        }
    }
}

impl From<Lifted> for LiftedAnswer {
    fn from(r: Lifted) -> Self {
        LiftedAnswer {
            hash: r.hash.to_hex(),
            lifted: r.lifted,
            urls_forgotten: r.urls_forgotten,
        }
    }
}

/// The error every route answers for a listed hash.
pub fn taken_down(hash: &ContentHash) -> Error {
    Error::TakenDown(format!(
        "original {hash} has been taken down and cannot be served"
    ))
}

impl Pipeline {
    /// Forgets the URL map's entry of `url` (and any origin failure held for it): its next
    /// request downloads it again, without validators. Returns the hash it mapped to, or
    /// `None` when it had no entry. The original and its variants stay: other URLs may share
    /// them.
    pub async fn forget_url(&self, url: &Url) -> Result<Option<String>, Error> {
        let s = &self.shared;
        let entry = s.maps.url_now(url.as_str()).await?;
        if entry.is_some() {
            s.maps.remove_url(url.as_str()).await?;
        }
        self.forget_origin_failure(url.as_str());
        self.removed();
        s.maps.bump_purge_generation().await?;
        Ok(entry.map(|e| e.hash.to_hex()))
    }

    /// Takes `hash` down: lists it, then removes everything stored of it (see the module
    /// doc). A hash never stored may be taken down too: nothing is removed, and it is
    /// refused from then on. The work runs as a task of its own: a caller that goes away
    /// (a client hanging up, a request timeout) does not leave it half done.
    pub async fn take_down(&self, hash: &ContentHash) -> Result<TakenDown, Error> {
        let (this, hash) = (self.clone(), *hash);
        tokio::spawn(async move { this.take_down_now(&hash).await }).await?
    }

    async fn take_down_now(&self, hash: &ContentHash) -> Result<TakenDown, Error> {
        let s = &self.shared;
        let newly_listed = {
            let _changing = s.moderation.takedowns.changing.lock().await;
            let newly = s.maps.take_down(hash, now_ms()).await?;
            s.moderation.takedowns.set(*hash, true);
            newly
        };
        self.removed();
        // Other nodes refuse it from their next look at the generation, before the removal
        // below is done (and even if it fails half way).
        s.maps.bump_purge_generation().await?;
        let mut report = TakenDown {
            hash: *hash,
            newly_listed,
            variants_removed: 0,
            urls_forgotten: 0,
            bytes_freed: 0,
        };
        // The index entry first: a node that has not seen the generation yet then fails to
        // locate the content rather than making variants of it. Its fingerprint stays (put
        // back when there was one): canonical mode refuses a new copy of a taken-down
        // picture as it refuses the picture (issue 28).
        let fingerprint = s.maps.fingerprint(hash).await?;
        s.maps.remove_original(hash).await?;
        if let Some(kept @ Fingerprinted::Picture(_)) = &fingerprint {
            s.maps.put_fingerprint(hash, kept).await?;
        }
        // The URLs whose own bytes were merged into this original (canonical mode) name
        // those bytes too: they are taken down below, or the URL's next download would
        // store them and serve the picture again.
        let mut merged = Vec::new();
        for (url, entry) in s.maps.urls_of(hash).await? {
            s.maps.remove_url(&url).await?;
            self.forget_origin_failure(&url);
            report.urls_forgotten += 1;
            if entry.hash != *hash && !merged.contains(&entry.hash) {
                merged.push(entry.hash);
            }
        }
        let variants = s.maps.variants_of(hash).await?;
        let keys: Vec<_> = variants.iter().map(|(k, _)| k.clone()).collect();
        report.variants_removed = s.maps.remove_variants(&keys).await?;
        self.drop_variant_bytes(&keys).await?;
        report.bytes_freed += variants.iter().map(|(_, n)| n).sum::<u64>();
        // Variants of other originals drawn with it as a watermark's overlay.
        let marked = self.variants_marked_with(hash).await?;
        report.variants_removed += s.maps.remove_variants(&marked).await?;
        self.drop_variant_bytes(&marked).await?;
        s.maps.remove_aliases(hash).await?;
        if let Some(size) = s.blobs.size(hash).await? {
            s.blobs.delete(hash).await?;
            report.bytes_freed += size;
        }
        s.maps.flush().await?;
        for own in merged {
            if s.maps.is_taken_down(&own).await? {
                continue;
            }
            let also = Box::pin(self.take_down_now(&own)).await?;
            report.variants_removed += also.variants_removed;
            report.urls_forgotten += also.urls_forgotten;
            report.bytes_freed += also.bytes_freed;
        }
        s.maps.bump_purge_generation().await?;
        // A request that located the content while the removal ran remembers nothing (the
        // epoch moved), but its processing run may have filled the hot cache since, and a
        // read in flight may have put the removed index entry back in the maps' memory.
        s.maps.drop_memory();
        self.removed();
        tracing::info!(
            %hash,
            variants = report.variants_removed,
            urls = report.urls_forgotten,
            bytes = report.bytes_freed,
            "original taken down"
        );
        Ok(report)
    }

    /// The variants drawn with `hash` as a watermark's overlay, when a configured watermark
    /// names it (their keys hold `wm=<hash>`): found by a walk over every variant key, which
    /// only a takedown of an overlay pays for.
    async fn variants_marked_with(&self, hash: &ContentHash) -> Result<Vec<VariantKey>, Error> {
        let s = &self.shared;
        let hex = hash.to_string();
        let is_overlay = s.structured.watermarks.values().any(|w| w.overlay == *hash);
        if !is_overlay {
            return Ok(Vec::new());
        }
        let mark = format!("wm={hex}");
        self.variant_keys_where(|k| k.canonical_spec.split('&').any(|part| part == mark))
            .await
    }

    /// Takes down the content `url` is served from (its canonical original in canonical
    /// mode, else its bytes). `None` when the URL has no entry: there is nothing to name.
    /// In canonical mode the URL's own bytes are taken down with it, as the own bytes of
    /// every URL merged into that original are (see `take_down_now`).
    pub async fn take_down_url(&self, url: &Url) -> Result<Option<TakenDown>, Error> {
        let Some(entry) = self.shared.maps.url_now(url.as_str()).await? else {
            return Ok(None);
        };
        Ok(Some(self.take_down(&entry.serving()).await?))
    }

    /// Lists `hash` as taken down, with nothing of it stored to remove: bytes a download
    /// just brought that are a copy of taken-down content (canonical mode). Other nodes
    /// follow at their next look at the generation.
    pub(in crate::pipeline) async fn list_as_taken_down(
        &self,
        hash: &ContentHash,
    ) -> Result<(), Error> {
        let s = &self.shared;
        {
            let _changing = s.moderation.takedowns.changing.lock().await;
            s.maps.take_down(hash, now_ms()).await?;
            s.moderation.takedowns.set(*hash, true);
        }
        self.removed();
        s.maps.bump_purge_generation().await?;
        Ok(())
    }

    /// Lifts the takedown of `hash`; the URLs that remembered it as taken down download
    /// again on their next request.
    pub async fn lift_takedown(&self, hash: &ContentHash) -> Result<Lifted, Error> {
        let s = &self.shared;
        let lifted = {
            let _changing = s.moderation.takedowns.changing.lock().await;
            let lifted = s.maps.lift_takedown(hash).await?;
            s.moderation.takedowns.set(*hash, false);
            lifted
        };
        let mut urls_forgotten = 0;
        for (url, _) in s.maps.urls_of(hash).await? {
            s.maps.remove_url(&url).await?;
            urls_forgotten += 1;
        }
        self.removed();
        s.maps.bump_purge_generation().await?;
        if lifted {
            tracing::info!(%hash, urls = urls_forgotten, "takedown lifted");
        }
        Ok(Lifted {
            hash: *hash,
            lifted,
            urls_forgotten,
        })
    }

    /// Every listed hash, with when it was taken down.
    pub async fn takedowns(&self) -> Result<Vec<(ContentHash, u64)>, Error> {
        Ok(self.shared.maps.takedowns().await?)
    }

    /// Drops what this node holds in memory that a removal may have made wrong.
    pub(in crate::pipeline) fn removed(&self) {
        let s = &self.shared;
        self.forget_requests();
        self.forget_hot_variants();
        s.decodes.clear();
    }

    /// Follows removals made on other nodes: when the maps' purge generation has moved
    /// since this node last looked, reloads the takedown list and drops its memory (the app
    /// calls this four times a second). Maps no other process shares have no other nodes:
    /// nothing to follow.
    pub async fn follow_purges(&self) -> Result<(), Error> {
        let s = &self.shared;
        if !s.maps.shared() {
            return Ok(());
        }
        let now = s.maps.purge_generation().await?;
        if now == s.moderation.takedowns.generation.load(Ordering::Acquire) {
            return Ok(());
        }
        {
            let _changing = s.moderation.takedowns.changing.lock().await;
            let listed = Takedowns::read(s.maps.as_ref()).await?;
            *s.moderation
                .takedowns
                .listed
                .write()
                .unwrap_or_else(|p| p.into_inner()) = listed;
            self.reload_blocklist().await?;
        }
        s.maps.drop_memory();
        self.removed();
        s.moderation
            .takedowns
            .generation
            .store(now, Ordering::Release);
        tracing::debug!(generation = now, "removals on another node followed");
        Ok(())
    }
}
