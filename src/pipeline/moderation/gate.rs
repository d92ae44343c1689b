//! The one gate of takedowns and the blocklist: whether content may be served or stored is
//! decided here, at the three points of the flow that must decide, and nowhere else.
//!
//! - [`Pipeline::may_serve`]: before anything of content leaves the service (a variant,
//!   an original's bytes or facts, a watermark's overlay drawn into a variant) and before a
//!   run's output is kept in memory. It reads this node's memory of both lists, which costs
//!   no round trip (every request asks) and follows another node's change within a second
//!   (`Pipeline::follow_purges`).
//! - [`Pipeline::may_store`]: before new bytes are stored (downloads, uploads, ingest). It
//!   reads the takedown list as the maps hold it this instant (this node's memory may lag
//!   another node's takedown), then the blocklist (exact; by fingerprint) and the validation
//!   hook for bytes not indexed yet.
//!   Bytes an index entry names but the blob store lacks are answered here too
//!   ([`Pipeline::bytes_missing`]).
//! - [`Pipeline::after_write`]: after an original, a fingerprint or a variant was written.
//!   A takedown that raced the write may have run before the write landed, so it runs again
//!   and removes what the write left.
//!
//! What the lists hold and how they change is `removal.rs` (takedowns) and `blocklist.rs`.

use bytes::Bytes;

use imgcas_processors::Fingerprint;

use crate::error::Error;
use crate::hash::ContentHash;
use crate::maps::{ListedAtWrite, OriginalInfo};
use crate::pipeline::{taken_down, Failure, Pipeline};

/// What [`Pipeline::may_store`] found of bytes it let through.
pub(in crate::pipeline) struct StoreAllowed {
    /// The originals index has the hash already (its bytes are in the blob store).
    pub indexed: bool,
    /// The fingerprint the checks computed, when they did (`Some(None)`: no picture), for
    /// the caller to keep.
    pub fingerprint: Option<Option<Fingerprint>>,
}

impl Pipeline {
    /// `Ok` when nothing of `hashes` is listed, in the order given; else the first listed
    /// one's failure, about that hash: `blocked` for a hash on the blocklist, `taken_down`
    /// for one taken down (a blocked original that was stored is both: the blocklist's
    /// answer says why).
    pub fn may_serve(&self, hashes: &[ContentHash]) -> Result<(), Failure> {
        for hash in hashes {
            let refused = match self.refuse_blocked(hash) {
                Err(e) => e,
                Ok(()) if self.is_taken_down(hash) => taken_down(hash),
                Ok(()) => continue,
            };
            return Err(Failure::from(refused).with_hash(*hash));
        }
        Ok(())
    }

    /// Whether new bytes may be stored: `taken_down` when the maps list them now, `blocked`
    /// by the blocklist or the validation hook, `validation_unavailable` when the hook did
    /// not answer (fail-closed). The blocklist's fingerprints and the hook are asked only
    /// of bytes the originals index does not have.
    pub(in crate::pipeline) async fn may_store(
        &self,
        hash: &ContentHash,
        info: &OriginalInfo,
        bytes: &Bytes,
    ) -> Result<StoreAllowed, Error> {
        let (listed, indexed) = self.listed_now_and_indexed(hash).await?;
        if listed {
            return Err(taken_down(hash));
        }
        if indexed {
            self.refuse_blocked(hash)?;
            return Ok(StoreAllowed {
                indexed,
                fingerprint: None,
            });
        }
        let fingerprint = self.check_blocklist(hash, bytes).await?;
        self.validate(hash, info, bytes, fingerprint).await?;
        Ok(StoreAllowed {
            indexed,
            fingerprint,
        })
    }

    /// Undoes a write of taken-down content that raced its takedown: a writer passed
    /// [`Pipeline::may_store`] (or `may_serve`) before it wrote, and asks again after; if
    /// the hash was listed in between, the takedown may have run before the write landed,
    /// so it runs again. Returns whether the hash is listed. `seen` is what the write saw
    /// of the list, when it read it in its own statement ([`ListedAtWrite`]): a takedown
    /// that ran later removes what it wrote.
    pub(in crate::pipeline) async fn after_write(
        &self,
        hash: &ContentHash,
        seen: ListedAtWrite,
    ) -> Result<bool, Error> {
        let listed = match seen {
            Some(true) => {
                self.shared.moderation.takedowns.set(*hash, true);
                true
            }
            Some(false) => false,
            None => self.listed_now(hash).await?,
        };
        if !listed {
            return Ok(false);
        }
        tracing::info!(%hash, "content stored while being taken down; removing it again");
        self.take_down(hash).await?;
        Ok(true)
    }

    /// The answer for an indexed original whose bytes the blob store lacks: a storage fault
    /// (503), unless the hash is on the takedown list as the maps hold it now: another
    /// node's takedown removes the bytes before this node's memory of the list follows (up
    /// to a second), and in that window the answer is the takedown's.
    pub(in crate::pipeline) async fn bytes_missing(
        &self,
        hash: &ContentHash,
    ) -> Result<Error, Error> {
        Ok(match self.listed_now(hash).await? {
            true => taken_down(hash),
            false => {
                Error::StorageUnavailable(format!("original {hash} is missing from the blob store"))
            }
        })
    }

    /// Whether this node holds `hash` as taken down: a question, not a decision (canonical
    /// mode asks it of the near-duplicates of new bytes).
    pub(in crate::pipeline) fn is_taken_down(&self, hash: &ContentHash) -> bool {
        self.shared.moderation.takedowns.contains(hash)
    }

    /// Whether `hash` is listed as the maps hold it this instant; a listed hash is added to
    /// this node's memory at once.
    async fn listed_now(&self, hash: &ContentHash) -> Result<bool, Error> {
        let listed = self.shared.maps.is_taken_down(hash).await?;
        if listed {
            self.shared.moderation.takedowns.set(*hash, true);
        }
        Ok(listed)
    }

    /// [`Pipeline::listed_now`], and whether the originals index has `hash`: one read.
    async fn listed_now_and_indexed(&self, hash: &ContentHash) -> Result<(bool, bool), Error> {
        let (listed, original) = self.shared.maps.listed_and_original(hash).await?;
        if listed {
            self.shared.moderation.takedowns.set(*hash, true);
        }
        Ok((listed, original.is_some()))
    }
}
