//! The S3-compatible blob store (AWS S3, MinIO, any store speaking the S3 protocol).
//!
//! Keys are the filesystem store's (`originals/ab/cd/<sha256>`), so a data set moves between
//! backends by copying. Writes are conditional (`If-None-Match: *`), so two processes storing
//! the same content never race; stores that do not implement conditional writes get a HEAD
//! then a PUT, which is still correct because the key is the content's hash. A 412 counts as
//! "already present" only once a HEAD sees the whole object; a 409 (a concurrent conditional
//! write still under way) is retried, since that write may fail. Large originals
//! go up in parts. Credentials come from the standard AWS provider chain; the SDK retries
//! throttling and 5xx answers with backoff.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use aws_sdk_s3::Client;
use bytes::Bytes;

use super::{key_for, BlobError, BlobStore, PutOutcome, StoredBlob, VariantObject, KEY_PREFIX};
use crate::config::S3Config;
use crate::hash::ContentHash;

/// Originals above this size are uploaded in parts.
const MULTIPART_FROM: usize = 16 << 20;
/// Part size for multipart uploads (S3's minimum is 5 MiB).
const PART_SIZE: usize = 8 << 20;
/// Conditional PUTs tried while S3 answers 409 (another conditional write of the key is in
/// progress), with doubling waits from 50 ms: about 1.5 s in all.
const CONFLICT_ATTEMPTS: u32 = 6;

/// What one single-request PUT found.
#[derive(Debug)]
enum PutAnswer {
    Created,
    /// 412: S3 says the key exists (to be confirmed before anyone is told so).
    Exists,
    /// 409 `ConditionalRequestConflict`: a concurrent conditional write of the key is under
    /// way and may still fail, so nothing is known yet.
    Conflict,
}

pub struct S3BlobStore {
    client: Client,
    bucket: String,
    /// `storage.s3.timeout`, for what the SDK's own bound leaves out (a body's reading).
    operation_timeout: std::time::Duration,
}

/// Why a request failed, in the store's terms.
fn failure<E: ProvideErrorMetadata + std::fmt::Debug, R: std::fmt::Debug>(
    what: &str,
    e: &SdkError<E, R>,
) -> BlobError {
    let detail = match e {
        SdkError::ServiceError(s) => {
            let err = s.err();
            match (err.code(), err.message()) {
                (Some(code), Some(message)) => format!("{code} ({message})"),
                (Some(code), None) => code.to_string(),
                _ => format!("{err:?}"),
            }
        }
        SdkError::TimeoutError(_) => "timed out".into(),
        SdkError::DispatchFailure(d) => format!("cannot connect: {d:?}"),
        other => format!("{other:?}"),
    };
    BlobError::Unavailable(format!("S3 {what} failed: {detail}"))
}

fn status<E, R: HasStatus>(e: &SdkError<E, R>) -> Option<u16> {
    match e {
        SdkError::ServiceError(s) => Some(s.raw().status_code()),
        SdkError::ResponseError(r) => Some(r.raw().status_code()),
        _ => None,
    }
}

/// The HTTP status of a raw response, whatever its type parameter.
trait HasStatus {
    fn status_code(&self) -> u16;
}

impl HasStatus for aws_sdk_s3::config::http::HttpResponse {
    fn status_code(&self) -> u16 {
        self.status().as_u16()
    }
}

impl S3BlobStore {
    /// Builds the client and checks that the bucket answers, so that a wrong bucket or wrong
    /// credentials stop `imgcas serve` with one clear line instead of failing requests later.
    pub async fn connect(config: &S3Config) -> Result<S3BlobStore, BlobError> {
        let bucket = config
            .bucket
            .clone()
            .filter(|b| !b.is_empty())
            .ok_or_else(|| {
                BlobError::Io("storage.s3.bucket (IMGCAS_S3_BUCKET) is not set".into())
            })?;
        let client = crate::s3::client(crate::s3::Endpoint {
            url: config.endpoint.as_deref(),
            region: &config.region,
            force_path_style: config.force_path_style,
            keys: None,
            timeouts: crate::s3::Timeouts {
                connect: config.connect_timeout,
                first_byte: config.first_byte_timeout,
                operation: config.timeout,
            },
        })
        .await;
        let store = S3BlobStore {
            client,
            bucket,
            operation_timeout: config.timeout,
        };
        store.check().await?;
        Ok(store)
    }

    /// An object's bytes, `None` when there is no such object.
    /// The whole of it, body included, within `storage.s3.timeout`: the SDK's operation
    /// timeout ends when the answer's head arrives, and a body that stalls would hold the
    /// request for as long as the bucket is silent.
    async fn get_key(&self, key: &str) -> Result<Option<Bytes>, BlobError> {
        let whole = async {
            let got = self
                .client
                .get_object()
                .bucket(&self.bucket)
                .key(key)
                .send()
                .await;
            let object = match got {
                Ok(o) => o,
                Err(e) if status(&e) == Some(404) => return Ok(None),
                Err(e) => return Err(failure("GET", &e)),
            };
            let body = object
                .body
                .collect()
                .await
                .map_err(|e| BlobError::Unavailable(format!("S3 GET body failed: {e}")))?;
            Ok(Some(body.into_bytes()))
        };
        self.within("GET", whole).await
    }

    /// One operation on the bucket, bounded by `storage.s3.timeout` whatever the SDK does
    /// (its operation timeout did not bound a PUT to a silent bucket: 14.5 s where 8 were
    /// set, each attempt waiting out its first-byte timeout in turn; and a `GetObject`'s body
    /// is read after the operation returns). Its own result, or `Unavailable` past the bound.
    async fn sent<T>(
        &self,
        what: &str,
        op: impl std::future::Future<Output = T>,
    ) -> Result<T, BlobError> {
        tokio::time::timeout(self.operation_timeout, op)
            .await
            .map_err(|_| {
                BlobError::Unavailable(format!(
                    "S3 {what} took longer than storage.s3.timeout ({:?})",
                    self.operation_timeout
                ))
            })
    }

    /// [`S3BlobStore::sent`] for an operation whose result is the store's already.
    async fn within<T>(
        &self,
        what: &str,
        op: impl std::future::Future<Output = Result<T, BlobError>>,
    ) -> Result<T, BlobError> {
        self.sent(what, op).await?
    }

    /// Gives a multipart upload up (its parts are the store's to drop), within the bound.
    async fn abort_parts(&self, key: &str, upload_id: &str) {
        let abort = self
            .client
            .abort_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .send();
        let _ = self.sent("multipart abort", abort).await;
    }

    /// Deletes an object (S3 answers success for a missing one too).
    async fn delete_key(&self, key: &str) -> Result<(), BlobError> {
        let deleted = self
            .client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send();
        self.sent("DELETE", deleted)
            .await?
            .map_err(|e| failure("DELETE", &e))?;
        Ok(())
    }

    /// The object's size, `None` when there is no such object.
    async fn head_size(&self, key: &str) -> Result<Option<u64>, BlobError> {
        let head = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send();
        match self.sent("HEAD", head).await? {
            Ok(h) => Ok(Some(
                h.content_length()
                    .and_then(|n| u64::try_from(n).ok())
                    .unwrap_or(0),
            )),
            Err(e) if status(&e) == Some(404) => Ok(None),
            Err(e) => Err(failure("HEAD", &e)),
        }
    }

    async fn exists(&self, key: &str) -> Result<bool, BlobError> {
        Ok(self.head_size(key).await?.is_some())
    }

    async fn stored_size(&self, key: &str) -> Option<u64> {
        self.head_size(key).await.ok().flatten()
    }

    async fn put_whole(
        &self,
        key: &str,
        bytes: Bytes,
        conditional: bool,
    ) -> Result<PutAnswer, BlobError> {
        let size = bytes.len();
        let mut put = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type(&bytes))
            .metadata("imgcas-size", size.to_string())
            .body(ByteStream::from(bytes));
        if conditional {
            put = put.if_none_match("*");
        }
        match self.sent("PUT", put.send()).await? {
            Ok(_) => Ok(PutAnswer::Created),
            Err(e) if status(&e) == Some(412) => Ok(PutAnswer::Exists),
            Err(e) if status(&e) == Some(409) => Ok(PutAnswer::Conflict),
            Err(e) if conditional && matches!(status(&e), Some(501 | 400)) => {
                Err(BlobError::Io(format!("conditional PUT refused: {e:?}")))
            }
            Err(e) => Err(failure("PUT", &e)),
        }
    }

    async fn put_in_parts(&self, key: &str, bytes: Bytes) -> Result<(), BlobError> {
        let created = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type(&bytes))
            .metadata("imgcas-size", bytes.len().to_string())
            .send();
        let created = self
            .sent("multipart start", created)
            .await?
            .map_err(|e| failure("multipart start", &e))?;
        let upload_id = created
            .upload_id()
            .ok_or_else(|| BlobError::Unavailable("S3 multipart start gave no upload id".into()))?
            .to_string();
        let mut parts = Vec::new();
        for (i, chunk) in bytes.chunks(PART_SIZE).enumerate() {
            let number =
                i32::try_from(i + 1).map_err(|_| BlobError::Io("too many parts".into()))?;
            let sent = self
                .client
                .upload_part()
                .bucket(&self.bucket)
                .key(key)
                .upload_id(&upload_id)
                .part_number(number)
                .body(ByteStream::from(bytes.slice_ref(chunk)))
                .send();
            let sent = match self.sent("multipart part", sent).await {
                Ok(sent) => sent,
                Err(timed_out) => {
                    self.abort_parts(key, &upload_id).await;
                    return Err(timed_out);
                }
            };
            match sent {
                Ok(part) => parts.push(
                    CompletedPart::builder()
                        .part_number(number)
                        .set_e_tag(part.e_tag().map(str::to_string))
                        .build(),
                ),
                Err(e) => {
                    self.abort_parts(key, &upload_id).await;
                    return Err(failure("multipart part", &e));
                }
            }
        }
        let completed = self
            .client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(&upload_id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
            .send();
        match self.sent("multipart completion", completed).await? {
            Ok(_) => Ok(()),
            // Some S3-compatible servers (moto) answer 200 with a body the SDK cannot parse:
            // the object itself, whole, is what counts.
            Err(e) if self.stored_size(key).await == Some(bytes.len() as u64) => {
                tracing::debug!("multipart completion answer unreadable, object complete: {e:?}");
                Ok(())
            }
            Err(e) => Err(failure("multipart completion", &e)),
        }
    }
}

/// The original's media type from its bytes, for whoever reads the bucket directly.
/// An S3 time stamp as ms since the epoch (0 before it).
fn epoch_ms(t: &aws_sdk_s3::primitives::DateTime) -> u64 {
    u64::try_from(t.to_millis().unwrap_or(0)).unwrap_or(0)
}

fn content_type(bytes: &[u8]) -> &'static str {
    imgcas_processors::sniff(bytes).map_or("application/octet-stream", |f| f.mime())
}

#[async_trait]
impl BlobStore for S3BlobStore {
    async fn put_if_absent(
        &self,
        hash: &ContentHash,
        bytes: Bytes,
    ) -> Result<PutOutcome, BlobError> {
        let key = key_for(hash);
        if bytes.len() >= MULTIPART_FROM {
            if self.exists(&key).await? {
                return Ok(PutOutcome::AlreadyPresent);
            }
            self.put_in_parts(&key, bytes).await?;
            return Ok(PutOutcome::Created);
        }
        let mut wait = Duration::from_millis(50);
        for _ in 0..CONFLICT_ATTEMPTS {
            match self.put_whole(&key, bytes.clone(), true).await {
                Ok(PutAnswer::Created) => return Ok(PutOutcome::Created),
                // "Already present" is a promise that the bytes are kept: it is made only
                // once the object is seen whole. A 412 for an object that is not there
                // (a store answering from a stale view) is tried again.
                Ok(PutAnswer::Exists) => match self.head_size(&key).await? {
                    Some(n) if n == bytes.len() as u64 => return Ok(PutOutcome::AlreadyPresent),
                    Some(n) => {
                        return Err(BlobError::Unavailable(format!(
                            "S3 object {key} holds {n} bytes, not {}: run `imgcas verify`",
                            bytes.len()
                        )))
                    }
                    None => {}
                },
                // Another writer's conditional PUT is in flight and may yet fail: taking the
                // key as stored would index bytes that may never land.
                Ok(PutAnswer::Conflict) => {}
                Err(BlobError::Io(_)) => {
                    // A store without conditional writes: look, then write.
                    if self.exists(&key).await? {
                        return Ok(PutOutcome::AlreadyPresent);
                    }
                    return match self.put_whole(&key, bytes, false).await? {
                        PutAnswer::Created => Ok(PutOutcome::Created),
                        PutAnswer::Exists | PutAnswer::Conflict => Err(BlobError::Unavailable(
                            format!("S3 refused an unconditional PUT of {key}"),
                        )),
                    };
                }
                Err(e) => return Err(e),
            }
            tokio::time::sleep(wait).await;
            wait *= 2;
        }
        Err(BlobError::Unavailable(format!(
            "S3 PUT of {key}: still conflicting after {CONFLICT_ATTEMPTS} attempts"
        )))
    }

    async fn get(&self, hash: &ContentHash) -> Result<Option<Bytes>, BlobError> {
        self.get_key(&key_for(hash)).await
    }

    async fn size(&self, hash: &ContentHash) -> Result<Option<u64>, BlobError> {
        self.head_size(&key_for(hash)).await
    }

    async fn delete(&self, hash: &ContentHash) -> Result<(), BlobError> {
        self.delete_key(&key_for(hash)).await
    }

    async fn list(&self) -> Result<Vec<ContentHash>, BlobError> {
        let mut hashes = Vec::new();
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(KEY_PREFIX)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| failure("LIST", &e))?;
            for object in page.contents() {
                let name = object.key().and_then(|k| k.rsplit('/').next());
                if let Some(hash) = name.and_then(|n| n.parse::<ContentHash>().ok()) {
                    hashes.push(hash);
                }
            }
        }
        hashes.sort();
        Ok(hashes)
    }

    async fn originals_page(
        &self,
        after: Option<ContentHash>,
        limit: usize,
    ) -> Result<Vec<StoredBlob>, BlobError> {
        // Keys spell the hash in hex after a fan-out of its own first digits, so the bucket's
        // key order is the hashes' order and `start-after` is a keyset cursor.
        let mut out = Vec::new();
        let mut start_after = after.as_ref().map(super::key_for);
        while out.len() < limit {
            let mut request = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(KEY_PREFIX)
                .max_keys(i32::try_from(limit - out.len()).unwrap_or(1000).min(1000));
            if let Some(key) = &start_after {
                request = request.start_after(key);
            }
            let page = self.sent("LIST", request.send()).await?;
            let page = page.map_err(|e| failure("LIST", &e))?;
            let mut last = None;
            for object in page.contents() {
                let Some(key) = object.key() else { continue };
                last = Some(key.to_string());
                let name = key.rsplit('/').next();
                if let Some(hash) = name.and_then(|n| n.parse::<ContentHash>().ok()) {
                    out.push(StoredBlob {
                        hash,
                        size: u64::try_from(object.size().unwrap_or(0)).unwrap_or(0),
                        modified_ms: object.last_modified().map_or(0, epoch_ms),
                    });
                }
            }
            match (last, page.is_truncated().unwrap_or(false)) {
                (Some(key), true) => start_after = Some(key),
                _ => break,
            }
        }
        Ok(out)
    }

    async fn check(&self) -> Result<(), BlobError> {
        let head = self.client.head_bucket().bucket(&self.bucket).send();
        match self.sent("HEAD bucket", head).await? {
            Ok(_) => Ok(()),
            Err(e) => Err(match status(&e) {
                Some(404) => {
                    BlobError::Unavailable(format!("S3 bucket `{}` does not exist", self.bucket))
                }
                Some(403 | 401) => BlobError::Unavailable(format!(
                    "S3 refused access to bucket `{}`: check the credentials",
                    self.bucket
                )),
                _ => failure("HEAD bucket", &e),
            }),
        }
    }

    async fn put_variant(&self, name: &VariantObject, bytes: Bytes) -> Result<(), BlobError> {
        let key = name.key();
        match self.put_whole(&key, bytes, false).await? {
            PutAnswer::Created => Ok(()),
            other => Err(BlobError::Unavailable(format!(
                "S3 PUT of {key} answered {other:?}"
            ))),
        }
    }

    async fn get_variant(&self, name: &VariantObject) -> Result<Option<Bytes>, BlobError> {
        self.get_key(&name.key()).await
    }

    async fn modified_ms(&self, hash: &ContentHash) -> Result<Option<u64>, BlobError> {
        let head = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key_for(hash))
            .send();
        match self.sent("HEAD", head).await? {
            Ok(h) => Ok(Some(h.last_modified().map_or(0, epoch_ms))),
            Err(e) if status(&e) == Some(404) => Ok(None),
            Err(e) => Err(failure("HEAD", &e)),
        }
    }

    async fn list_variants(&self) -> Result<Vec<(VariantObject, u64)>, BlobError> {
        let mut out = Vec::new();
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(super::VARIANT_PREFIX)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| failure("LIST", &e))?;
            for object in page.contents() {
                if let Some(name) = object.key().and_then(VariantObject::from_key) {
                    out.push((name, object.last_modified().map_or(0, epoch_ms)));
                }
            }
        }
        Ok(out)
    }

    async fn delete_variants(&self, names: &[VariantObject]) -> Result<(), BlobError> {
        use futures_util::{StreamExt, TryStreamExt};
        let keys: Vec<String> = names.iter().map(VariantObject::key).collect();
        futures_util::stream::iter(keys)
            .map(|key| async move { self.delete_key(&key).await })
            .buffer_unordered(16)
            .try_collect::<()>()
            .await
    }
}
