//! Originals and uploads: the role that owns what is kept of each original beyond its bytes
//! and index entry — one read of its bytes per hash at a time, and one facts computation per
//! original at a time — and the way new bytes come in by upload.
//!
//! - `upload.rs`: bytes in → an indexed original;
//! - `facts.rs`: placeholders and frames of each original, computed once and kept.

use bytes::Bytes;

use crate::coalesce::SingleFlight;
use crate::error::Error;
use crate::hash::ContentHash;
use crate::maps::{OriginalInfo, PictureFacts};
use crate::pipeline::Pipeline;
use crate::stats::Stats;

mod facts;
mod focus;
mod upload;

pub use focus::FocusSet;
pub use upload::Uploaded;

/// The originals' own state, composed into the pipeline.
#[derive(Default)]
pub(super) struct Originals {
    /// One read of an original's bytes per hash at a time.
    original_reads: SingleFlight<ContentHash, Result<Bytes, Error>>,
    /// One facts computation per original at a time (`facts.rs`).
    facts_flights: SingleFlight<ContentHash, Result<Option<PictureFacts>, Error>>,
}

impl Originals {
    /// Facts computations under way (at shutdown, waited for: they write when done).
    pub(super) fn facts_under_way(&self) -> usize {
        self.facts_flights.in_flight()
    }
}

impl Pipeline {
    /// What the originals index says of a hash.
    pub async fn original(&self, hash: &ContentHash) -> Result<Option<OriginalInfo>, Error> {
        Ok(self.shared.maps.original(hash).await?)
    }

    /// An indexed original's bytes; their absence is answered by the gate
    /// ([`Pipeline::bytes_missing`]).
    pub async fn original_bytes(&self, hash: &ContentHash) -> Result<Bytes, Error> {
        // Concurrent reads of one original share one GET (bytes by hash never change).
        let this = self.clone();
        let h = *hash;
        self.shared
            .originals
            .original_reads
            .run(
                *hash,
                async move {
                    Stats::bump(&this.shared.stats.original_reads);
                    match this.shared.blobs.get(&h).await? {
                        Some(bytes) => Ok(bytes),
                        None => Err(this.bytes_missing(&h).await?),
                    }
                },
                |m| Err(Error::Internal(format!("original read failed: {m}"))),
            )
            .await
    }
}
