//! A download's bytes taken in, step by step (`resolve.rs` hands them over once the origin
//! answered with a body): described (hashed, sniffed); let through the gate or refused (a
//! takedown, the blocklist, the validation hook: the URL is still remembered as naming
//! them); in canonical mode (`dedup.near`), mapped to a stored near-duplicate rather than
//! stored, or refused as a copy of taken-down content; the bytes stored once per hash; the
//! original and the URL recorded (under the claim, when the maps are shared); and for a new
//! original, its facts and fingerprint started. Each step is one method of [`Intake`], the
//! download being taken in.

use bytes::Bytes;
use url::Url;

use crate::blob::PutOutcome;
use crate::config::NearDedup;
use crate::error::Error;
use crate::fetch::Validators;
use crate::hash::ContentHash;
use crate::maps::{now_ms, OriginalInfo, Recorded, UrlEntry};
use crate::pipeline::near::Canonical;
use crate::pipeline::Pipeline;
use crate::stats::Stats;

/// What a download that brought bytes may publish once stored.
pub(in crate::pipeline) enum Publish {
    /// The URL's entry (and the original's), under the claim when the maps are shared: the
    /// write that records them gives it up.
    Url(Option<crate::maps::Claim>),
    /// The original only: the claim was lost, another node may have published since.
    OriginalOnly,
}

/// What taking a download in came to.
pub(in crate::pipeline) struct Stored {
    /// The original the URL is served from: the bytes' own, or the near-duplicate's.
    pub serve: ContentHash,
    /// The hash of the bytes.
    pub source: ContentHash,
    /// No entry in the originals index before.
    pub new_original: bool,
    /// The URL's entry was recorded under the claim, which the write gave up.
    pub claim_spent: bool,
}

impl Stored {
    /// Bytes not stored (refused, or taken down while being stored).
    fn refused(hash: ContentHash) -> Stored {
        Stored {
            serve: hash,
            source: hash,
            new_original: false,
            claim_spent: false,
        }
    }
}

/// The download being taken in: its URL, bytes, what they are, and the URL entry that will
/// name them.
struct Intake<'a> {
    pipeline: &'a Pipeline,
    url: &'a Url,
    publish: &'a Publish,
    bytes: Bytes,
    hash: ContentHash,
    info: OriginalInfo,
    entry: UrlEntry,
}

impl Pipeline {
    /// Hashes a download, stores its bytes if new, then points the URL at it (unless
    /// `publish` is the original only: a node that lost its claim indexes the original
    /// only). In canonical mode, new bytes that are a near-duplicate of a stored original at
    /// least as large are not stored: the URL points at that original.
    pub(in crate::pipeline) async fn store_download(
        &self,
        url: &Url,
        bytes: Bytes,
        validators: Validators,
        began_ms: u64,
        publish: &Publish,
    ) -> Result<Stored, Error> {
        let (hash, info) = self.describe_in_turn(bytes.clone(), false).await?;
        let intake = Intake {
            pipeline: self,
            url,
            publish,
            bytes,
            hash,
            info,
            entry: UrlEntry {
                hash,
                etag: validators.etag,
                last_modified: validators.last_modified,
                checked_at_ms: began_ms,
                requested_at_ms: now_ms(),
                canonical: None,
            },
        };
        let Some((indexed, mut fingerprint)) = intake.through_the_gate().await? else {
            return Ok(Stored::refused(hash));
        };
        // Canonical mode decides before storing: a merge stores nothing.
        if !indexed && self.shared.config.dedup.near == NearDedup::Canonical {
            if let Some(stored) = intake.onto_a_near_duplicate(&mut fingerprint).await? {
                return Ok(stored);
            }
        }
        intake.store_bytes(indexed).await?;
        let recorded = intake.record().await?;
        if self.after_write(&hash, recorded.listed).await? {
            // Taken down while this download stored it: removed again, and refused.
            return Ok(Stored::refused(hash));
        }
        if recorded.new_original {
            intake.follow_up(fingerprint).await?;
        }
        Ok(Stored {
            serve: hash,
            source: hash,
            new_original: recorded.new_original,
            // The claim went with the URL entry (when there was one to give up).
            claim_spent: intake.publishes_url(),
        })
    }
}

impl Intake<'_> {
    fn publishes_url(&self) -> bool {
        matches!(self.publish, Publish::Url(_))
    }

    /// Remembers the URL as naming bytes not stored, so that its requests answer without a
    /// download each (`locate` refuses them).
    async fn remember_unstored(&self, entry: &UrlEntry) -> Result<(), Error> {
        if self.publishes_url() {
            let maps = &self.pipeline.shared.maps;
            maps.put_url(self.url.as_str(), entry).await?;
        }
        Ok(())
    }

    /// The gate (`moderation/gate.rs`): whether the bytes are indexed already and their fingerprint if
    /// the gate computed one, or `None` for taken-down and blocked bytes (the blocklist, the
    /// validation hook), which are not stored. (Indexed bytes are in the blob store already
    /// — the blob is written before the index points at it — so a duplicate URL or a
    /// changed-validators 200 uploads nothing.)
    async fn through_the_gate(
        &self,
    ) -> Result<Option<(bool, Option<Option<imgcas_processors::Fingerprint>>)>, Error> {
        let (url, hash) = (self.url, self.hash);
        match self
            .pipeline
            .may_store(&hash, &self.info, &self.bytes)
            .await
        {
            Ok(allowed) => Ok(Some((allowed.indexed, allowed.fingerprint))),
            Err(Error::TakenDown(_)) => {
                self.remember_unstored(&self.entry).await?;
                Ok(None)
            }
            Err(Error::Blocked(why)) => {
                tracing::info!(%url, source = %hash, %why, "download refused");
                self.remember_unstored(&self.entry).await?;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Canonical mode: the URL mapped to the stored original these bytes are a near-duplicate
    /// of (its earlier mapping kept: a hash's alias is served as immutable), or the bytes
    /// refused as a copy of taken-down content; `None` to store them as their own.
    async fn onto_a_near_duplicate(
        &self,
        fingerprint: &mut Option<Option<imgcas_processors::Fingerprint>>,
    ) -> Result<Option<Stored>, Error> {
        let (pipeline, url, hash) = (self.pipeline, self.url, self.hash);
        let s = &pipeline.shared;
        let known = match s.maps.alias(&hash).await? {
            Some(c) if s.maps.original(&c).await?.is_some() => Some(c),
            _ => None,
        };
        let decided = match known {
            Some(c) => Some(c),
            None => {
                if fingerprint.is_none() {
                    let computed = pipeline.compute_fingerprint(&hash, self.bytes.clone());
                    *fingerprint = Some(computed.await?);
                }
                match fingerprint {
                    Some(Some(fp)) => {
                        match pipeline.canonical_decision(&hash, &self.bytes, fp).await? {
                            Canonical::TakenDown(gone) => {
                                // A copy of taken-down content: listed and refused like it,
                                // stored nowhere; the URL remembers it (as the gate's refusals).
                                tracing::info!(%url, source = %hash, taken_down = %gone, "a copy of taken-down content refused");
                                pipeline.list_as_taken_down(&hash).await?;
                                self.remember_unstored(&self.entry).await?;
                                return Ok(Some(Stored::refused(hash)));
                            }
                            Canonical::Merge(canonical) => Some(canonical),
                            Canonical::Own => None,
                        }
                    }
                    _ => None,
                }
            }
        };
        let Some(canonical) = decided else {
            return Ok(None);
        };
        let size = self.bytes.len() as u64;
        Stats::add(&s.stats.dedup_bytes_saved, size);
        Stats::add(&s.stats.near_bytes_saved, size);
        if known.is_none() {
            Stats::bump(&s.stats.near_duplicates_found);
            s.maps.put_alias(&hash, &canonical).await?;
        }
        let entry = UrlEntry {
            canonical: Some(canonical),
            ..self.entry.clone()
        };
        self.remember_unstored(&entry).await?;
        tracing::info!(%url, source = %hash, %canonical, "served from a near-duplicate original");
        Ok(Some(Stored {
            serve: canonical,
            source: hash,
            new_original: false,
            claim_spent: false,
        }))
    }

    /// The bytes into the blob store, once per hash (`indexed`: there already).
    async fn store_bytes(&self, indexed: bool) -> Result<(), Error> {
        let s = &self.pipeline.shared;
        let size = self.bytes.len() as u64;
        if indexed {
            Stats::add(&s.stats.dedup_bytes_saved, size);
            return Ok(());
        }
        match s
            .blobs
            .put_if_absent(&self.hash, self.bytes.clone())
            .await?
        {
            PutOutcome::Created => Stats::bump(&s.stats.originals_stored),
            PutOutcome::AlreadyPresent => Stats::add(&s.stats.dedup_bytes_saved, size),
        }
        Ok(())
    }

    /// The original in the index and the URL's entry, in one write (under the claim, when
    /// there is one); the original alone when the URL is not this node's to publish. The
    /// index, not the blob store's answer, decides "new": a blob a crash left without its
    /// index entry is still news to every reader of the maps.
    async fn record(&self) -> Result<Recorded, Error> {
        let maps = &self.pipeline.shared.maps;
        Ok(match self.publish {
            Publish::Url(claim) => {
                maps.record_download(self.url.as_str(), &self.entry, &self.info, claim.as_ref())
                    .await?
            }
            Publish::OriginalOnly => Recorded {
                new_original: maps.add_original(&self.hash, &self.info).await?,
                listed: None,
            },
        })
    }

    /// A new original's facts, and its fingerprint where near-duplicates are on (kept now
    /// when the gate or canonical mode computed it, else found in the background).
    async fn follow_up(
        &self,
        fingerprint: Option<Option<imgcas_processors::Fingerprint>>,
    ) -> Result<(), Error> {
        let (pipeline, hash) = (self.pipeline, self.hash);
        pipeline.facts_in_background(hash);
        if !pipeline.near_dedup_on() {
            return Ok(());
        }
        match fingerprint {
            Some(fp) => pipeline.keep_fingerprint(&hash, fp).await?,
            None => {
                // Off the request's path: the answer does not wait for it. (The task holds
                // the hash; the bytes are read again once a slot is free.) The facts' small
                // decode is kept for it meanwhile.
                pipeline.in_background_with_small_decode(
                    hash,
                    "fingerprint not stored",
                    move |this| async move { this.fingerprint_of(&hash).await.map(drop) },
                );
            }
        }
        Ok(())
    }
}
