//! Uploads (`POST /v1/originals`, `imgcas ingest` of files): bytes that must be a readable
//! image, stored once per hash and indexed durably before the caller is answered.

use bytes::Bytes;

use crate::pipeline::Pipeline;
use imgcas_processors::Fingerprint;

use crate::blob::PutOutcome;
use crate::error::Error;
use crate::hash::ContentHash;
use crate::maps::OriginalInfo;
use crate::stats::Stats;

/// An original as the upload answer describes it.
#[derive(Debug, Clone)]
pub struct Uploaded {
    pub hash: ContentHash,
    pub info: OriginalInfo,
    pub duplicate: bool,
    /// The best other original within the report radius (largest, then oldest), if any.
    pub near_duplicate_of: Option<ContentHash>,
}

/// Bytes an upload accepted (a readable image, not taken down), not yet stored.
struct Accepted {
    bytes: Bytes,
    hash: ContentHash,
    info: OriginalInfo,
    /// The fingerprint the checks computed, if they did (`Some(None)`: no picture).
    fingerprint: Option<Option<Fingerprint>>,
}

impl Pipeline {
    /// Validates that the bytes are a readable image and stores them once.
    pub async fn upload(&self, bytes: Bytes) -> Result<Uploaded, Error> {
        let accepted = self.accept(bytes).await?;
        self.store_upload(accepted).await
    }

    /// The files of one request (a multipart form), all or none: every one is validated
    /// before any is stored, so a request refused for its third file leaves nothing of the
    /// first two behind (issue 28). (A storage failure part way through leaves what was
    /// stored before it: valid originals, which the retry finds as duplicates.)
    pub async fn upload_all(&self, files: Vec<Bytes>) -> Result<Vec<Uploaded>, Error> {
        let mut accepted = Vec::with_capacity(files.len());
        for bytes in files {
            accepted.push(self.accept(bytes).await?);
        }
        let mut uploaded = Vec::with_capacity(accepted.len());
        for one in accepted {
            uploaded.push(self.store_upload(one).await?);
        }
        Ok(uploaded)
    }

    /// An upload's checks, before anything is written: readable, not taken down, not blocked
    /// (nor refused by the validation hook).
    async fn accept(&self, bytes: Bytes) -> Result<Accepted, Error> {
        if bytes.is_empty() {
            return Err(Error::invalid_option("body", "the upload is empty"));
        }
        let (hash, info) = self.describe_in_turn(bytes.clone(), true).await?;
        let fingerprint = self.may_store(&hash, &info, &bytes).await?.fingerprint;
        Ok(Accepted {
            bytes,
            hash,
            info,
            fingerprint,
        })
    }

    /// Stores an accepted upload once.
    async fn store_upload(&self, accepted: Accepted) -> Result<Uploaded, Error> {
        let s = &self.shared;
        let Accepted {
            bytes,
            hash,
            info,
            fingerprint,
        } = accepted;
        if let Some(existing) = s.maps.original(&hash).await? {
            // The entry may come from a download, committed without fsync: the answer
            // promises the original is kept, so make it durable first (a no-op when nothing
            // is pending).
            s.maps.flush().await?;
            Stats::add(&s.stats.dedup_bytes_saved, bytes.len() as u64);
            return Ok(Uploaded {
                hash,
                info: existing,
                duplicate: true,
                near_duplicate_of: self.near_duplicate_report(&hash).await,
            });
        }
        let created = s.blobs.put_if_absent(&hash, bytes.clone()).await? == PutOutcome::Created;
        if created {
            Stats::bump(&s.stats.originals_stored);
        }
        let inserted = match s.maps.add_original(&hash, &info).await {
            Ok(inserted) => inserted,
            Err(e) => {
                // The upload is refused: its blob goes too, rather than waiting unindexed for
                // gc's grace (issue 28: a full disk left the blobs of refused uploads). One
                // another request stored first is left to it.
                if created {
                    if let Err(gone) = s.blobs.delete(&hash).await {
                        tracing::warn!(%hash, error = %gone, "blob of a refused upload not removed; gc removes it after its grace");
                    } else if matches!(s.maps.original(&hash).await, Ok(Some(_))) {
                        // Another request indexed the same bytes meanwhile: they stay.
                        let _ = s.blobs.put_if_absent(&hash, bytes).await;
                    }
                }
                return Err(e.into());
            }
        };
        if self.after_write(&hash, None).await? {
            return Err(crate::pipeline::taken_down(&hash));
        }
        if inserted {
            // The facts (behind the answer) and the fingerprint (before it) share one small
            // decode, kept for the facts from here (`facts_in_background` holds it).
            self.facts_in_background(hash);
            // An upload keeps its own bytes even in canonical mode (a deliberate act); its
            // answer names the match.
            if let Err(e) = self.fingerprint_new(&hash, bytes, fingerprint).await {
                tracing::warn!(%hash, error = %e, "fingerprint not stored; the backfill retries");
            }
        }
        let info = if inserted {
            info
        } else {
            s.maps.original(&hash).await?.unwrap_or(info)
        };
        Ok(Uploaded {
            hash,
            info,
            duplicate: !inserted,
            near_duplicate_of: self.near_duplicate_report(&hash).await,
        })
    }
}
