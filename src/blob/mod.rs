//! The blob store: original bytes, stored once per SHA-256 under a content-addressed key, and
//! (when the maps are shared by many nodes and keep only rows) variant bytes under
//! `variants/<hash>/<digest of the variant's key>`.
//!
//! The trait is shaped for both backends: keys are the same on disk and in a bucket
//! (`originals/ab/cd/<sha256>`), so moving a data set between them is a copy; every call is
//! async and fallible because an object store is remote; `put_if_absent` is the only write,
//! since content addressing makes overwrites pointless.

use async_trait::async_trait;
use bytes::Bytes;

use crate::hash::ContentHash;

pub mod fs;
pub mod s3;

pub use fs::FsBlobStore;
pub use s3::S3BlobStore;

/// The store the configuration names: the data dir's `originals/`, or the S3 bucket (checked
/// to answer before this returns).
pub async fn open(
    config: &crate::config::Config,
) -> Result<std::sync::Arc<dyn BlobStore>, BlobError> {
    Ok(match config.storage.backend {
        crate::config::StorageBackend::Fs => {
            std::sync::Arc::new(FsBlobStore::open(&config.data_dir)?)
        }
        crate::config::StorageBackend::S3 => std::sync::Arc::new(
            S3BlobStore::connect(&config.storage.s3)
                .await
                .map_err(|e| {
                    BlobError::Unavailable(format!("cannot use the S3 blob store: {e}"))
                })?,
        ),
    })
}

/// Where originals live in either backend; everything else under the root is not theirs.
pub const KEY_PREFIX: &str = "originals/";
/// Where variant bytes live, when the maps do not hold them.
pub const VARIANT_PREFIX: &str = "variants/";

/// The name of one variant's bytes: the original's hash (so an original's variants share a
/// prefix) and a digest of the variant's identity, which the caller derives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VariantObject {
    pub hash: ContentHash,
    pub digest: [u8; 32],
}

impl VariantObject {
    /// The object's key, shared by every backend.
    pub fn key(&self) -> String {
        format!(
            "{VARIANT_PREFIX}{}/{}",
            self.hash.to_hex(),
            hex::encode(self.digest)
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    #[error("{0}")]
    Io(String),
    #[error("{0}")]
    Unavailable(String),
}

/// One stored original as a listing names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredBlob {
    pub hash: ContentHash,
    pub size: u64,
    /// When it was last written, ms since the epoch (to the second on object stores).
    pub modified_ms: u64,
}

/// What `put_if_absent` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    Created,
    AlreadyPresent,
}

#[async_trait]
pub trait BlobStore: Send + Sync + 'static {
    /// Stores `bytes` under `hash` unless a blob is there already. The caller guarantees that
    /// `hash` is the SHA-256 of `bytes`. Returns once the bytes are durable.
    async fn put_if_absent(
        &self,
        hash: &ContentHash,
        bytes: Bytes,
    ) -> Result<PutOutcome, BlobError>;

    async fn get(&self, hash: &ContentHash) -> Result<Option<Bytes>, BlobError>;

    /// The stored size, if present.
    async fn size(&self, hash: &ContentHash) -> Result<Option<u64>, BlobError>;

    async fn delete(&self, hash: &ContentHash) -> Result<(), BlobError>;

    /// Every stored hash (for the offline `verify` and `gc`).
    async fn list(&self) -> Result<Vec<ContentHash>, BlobError>;

    /// Up to `limit` stored originals in hash order, after `after` (from the first when
    /// `None`): the online check's side of the blob store, a page at a time (issue 69).
    async fn originals_page(
        &self,
        after: Option<ContentHash>,
        limit: usize,
    ) -> Result<Vec<StoredBlob>, BlobError>;

    /// Readiness: the store answers.
    async fn check(&self) -> Result<(), BlobError>;

    /// Stores a variant's bytes (replacing any: the same name holds the same result), durably
    /// before returning, since a map row that points at them follows.
    async fn put_variant(&self, name: &VariantObject, bytes: Bytes) -> Result<(), BlobError>;

    async fn get_variant(&self, name: &VariantObject) -> Result<Option<Bytes>, BlobError>;

    /// Deletes variants' bytes; names with nothing stored are fine.
    async fn delete_variants(&self, names: &[VariantObject]) -> Result<(), BlobError>;

    /// When an original's blob was last written (ms since the epoch), if present: `gc`
    /// spares blobs younger than its grace period, whose index entry may be on its way.
    async fn modified_ms(&self, hash: &ContentHash) -> Result<Option<u64>, BlobError>;

    /// Every stored variant object, with when it was last written (for `gc`).
    async fn list_variants(&self) -> Result<Vec<(VariantObject, u64)>, BlobError>;
}

impl VariantObject {
    /// The inverse of [`VariantObject::key`]; `None` for any other key.
    pub fn from_key(key: &str) -> Option<VariantObject> {
        let rest = key.strip_prefix(VARIANT_PREFIX)?;
        let (hash, digest) = rest.split_once('/')?;
        let mut raw = [0u8; 32];
        hex::decode_to_slice(digest, &mut raw).ok()?;
        Some(VariantObject {
            hash: hash.parse().ok()?,
            digest: raw,
        })
    }
}

/// The key of an original, shared by every backend.
pub fn key_for(hash: &ContentHash) -> String {
    let hex = hash.to_hex();
    format!("{KEY_PREFIX}{}/{}/{}", &hex[0..2], &hex[2..4], hex)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_fan_out_by_prefix() {
        let h = ContentHash::of(b"abc");
        assert_eq!(
            key_for(&h),
            "originals/ba/78/ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
