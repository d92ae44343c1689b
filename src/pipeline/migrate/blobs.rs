//! The blob store while a migration moves it (a node's directory into a bucket, or back): the
//! leading store takes every write first and answers every read; while the migration
//! mirrors, the follower takes the originals written (queued, in their hash's lane: `follow.rs`)
//! and the deletes too, and a read the
//! leading store cannot answer is asked of the follower (a byte whose mirrored write failed
//! is still served while the backfill has not copied it again). Variant bytes follow with
//! their rows (`mirror.rs`).

use std::sync::Arc;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use bytes::Bytes;

use super::follow::{FollowQueue, Sides};
use crate::blob::{BlobError, BlobStore, PutOutcome, StoredBlob, VariantObject};
use crate::hash::ContentHash;

pub(in crate::pipeline) struct MirroredBlobs {
    sides: Arc<ArcSwap<Sides>>,
    follow: Arc<FollowQueue>,
}

impl MirroredBlobs {
    pub(in crate::pipeline) fn new(sides: Arc<ArcSwap<Sides>>, follow: Arc<FollowQueue>) -> Self {
        MirroredBlobs { sides, follow }
    }

    /// The leading store, and the follower's when it is another store.
    fn stores(&self) -> (Arc<dyn BlobStore>, Option<Arc<dyn BlobStore>>) {
        let sides = self.sides.load();
        let follow = sides
            .follow
            .as_ref()
            .filter(|f| !f.same_blobs)
            .map(|f| f.blobs.clone());
        (sides.lead_blobs.clone(), follow)
    }
}

#[async_trait]
impl BlobStore for MirroredBlobs {
    async fn put_if_absent(
        &self,
        hash: &ContentHash,
        bytes: Bytes,
    ) -> Result<PutOutcome, BlobError> {
        let _turn = self.follow.write_turn().await;
        let (lead, follow) = self.stores();
        let out = lead.put_if_absent(hash, bytes.clone()).await?;
        if let Some(follow) = follow {
            let (size, owned) = (bytes.len(), *hash);
            let write = async move {
                let put = follow.put_if_absent(&owned, bytes).await;
                put.map(|_| ()).map_err(|e| e.to_string())
            };
            let queue = self
                .follow
                .queue(*hash, "put_original", size, Box::pin(write));
            queue.await;
        }
        Ok(out)
    }

    async fn get(&self, hash: &ContentHash) -> Result<Option<Bytes>, BlobError> {
        let (lead, follow) = self.stores();
        match (lead.get(hash).await?, follow) {
            (None, Some(follow)) => follow.get(hash).await,
            (found, _) => Ok(found),
        }
    }

    async fn size(&self, hash: &ContentHash) -> Result<Option<u64>, BlobError> {
        let (lead, follow) = self.stores();
        match (lead.size(hash).await?, follow) {
            (None, Some(follow)) => follow.size(hash).await,
            (found, _) => Ok(found),
        }
    }

    async fn delete(&self, hash: &ContentHash) -> Result<(), BlobError> {
        let _turn = self.follow.write_turn().await;
        let (lead, follow) = self.stores();
        lead.delete(hash).await?;
        if let Some(follow) = follow {
            // After the writes queued before it (its original's bytes among them).
            self.follow.settled().await;
            follow.delete(hash).await?;
        }
        Ok(())
    }

    async fn list(&self) -> Result<Vec<ContentHash>, BlobError> {
        self.stores().0.list().await
    }

    async fn originals_page(
        &self,
        after: Option<ContentHash>,
        limit: usize,
    ) -> Result<Vec<StoredBlob>, BlobError> {
        self.stores().0.originals_page(after, limit).await
    }

    async fn check(&self) -> Result<(), BlobError> {
        self.stores().0.check().await
    }

    async fn put_variant(&self, name: &VariantObject, bytes: Bytes) -> Result<(), BlobError> {
        self.stores().0.put_variant(name, bytes).await
    }

    async fn get_variant(&self, name: &VariantObject) -> Result<Option<Bytes>, BlobError> {
        let (lead, follow) = self.stores();
        match (lead.get_variant(name).await?, follow) {
            (None, Some(follow)) => follow.get_variant(name).await,
            (found, _) => Ok(found),
        }
    }

    async fn delete_variants(&self, names: &[VariantObject]) -> Result<(), BlobError> {
        let _turn = self.follow.write_turn().await;
        let (lead, follow) = self.stores();
        lead.delete_variants(names).await?;
        if let Some(follow) = follow {
            self.follow.settled().await;
            follow.delete_variants(names).await?;
        }
        Ok(())
    }

    async fn modified_ms(&self, hash: &ContentHash) -> Result<Option<u64>, BlobError> {
        self.stores().0.modified_ms(hash).await
    }

    async fn list_variants(&self) -> Result<Vec<(VariantObject, u64)>, BlobError> {
        self.stores().0.list_variants().await
    }
}
