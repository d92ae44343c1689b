//! The default blob store: a directory tree under the data dir.
//!
//! Writes go to a temp file in the same filesystem, are fsynced, then renamed into place and
//! the parent directory fsynced (and each directory the write created, in its own parent), so
//! a blob is either whole or absent after a crash. Temp files a crash left behind are removed
//! when the store opens: the data dir's maps admit one process, and they are opened first.

use std::io::Write;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use bytes::Bytes;

use super::{key_for, BlobError, BlobStore, PutOutcome, StoredBlob, VariantObject};
use crate::hash::ContentHash;

pub struct FsBlobStore {
    root: PathBuf,
}

fn io(context: &str, path: &Path, e: std::io::Error) -> BlobError {
    BlobError::Io(format!("{context} {}: {e}", path.display()))
}

/// What `op` on `path` gave, or `None` when the file is not there: absence is an answer
/// here (a miss, or a delete already done), never an error.
async fn unless_absent<T>(
    op: impl std::future::Future<Output = std::io::Result<T>>,
    context: &str,
    path: &Path,
) -> Result<Option<T>, BlobError> {
    match op.await {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(context, path, e)),
    }
}

impl FsBlobStore {
    /// Opens (creating if needed) a store rooted at `root`.
    pub fn open(root: &Path) -> Result<FsBlobStore, BlobError> {
        for dir in ["originals", "tmp"] {
            let path = root.join(dir);
            std::fs::create_dir_all(&path).map_err(|e| io("cannot create", &path, e))?;
        }
        let tmp = root.join("tmp");
        let leftovers = std::fs::read_dir(&tmp).map_err(|e| io("cannot list", &tmp, e))?;
        for entry in leftovers.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_file()) {
                let path = entry.path();
                std::fs::remove_file(&path).map_err(|e| io("cannot remove", &path, e))?;
            }
        }
        Ok(FsBlobStore {
            root: root.to_path_buf(),
        })
    }

    /// Creates `dir` and any missing parent, fsyncing each new directory's parent so the new
    /// entry itself survives a crash.
    fn create_dir_durably(dir: &Path) -> Result<(), BlobError> {
        if dir.is_dir() {
            return Ok(());
        }
        let parent = dir
            .parent()
            .ok_or_else(|| BlobError::Io(format!("{} has no parent", dir.display())))?;
        Self::create_dir_durably(parent)?;
        match std::fs::create_dir(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
            Err(e) => return Err(io("cannot create", dir, e)),
        }
        std::fs::File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(|e| io("cannot sync", parent, e))
    }

    fn path(&self, hash: &ContentHash) -> PathBuf {
        self.root.join(key_for(hash))
    }

    fn write_atomically(&self, target: &Path, bytes: &[u8]) -> Result<(), BlobError> {
        let parent = target
            .parent()
            .ok_or_else(|| BlobError::Io("blob path has no parent".into()))?;
        Self::create_dir_durably(parent)?;
        let tmp_dir = self.root.join("tmp");
        let mut tmp = tempfile::NamedTempFile::new_in(&tmp_dir)
            .map_err(|e| io("cannot create temp file in", &tmp_dir, e))?;
        tmp.write_all(bytes)
            .and_then(|()| tmp.as_file().sync_all())
            .map_err(|e| io("cannot write", tmp.path(), e))?;
        tmp.persist(target)
            .map_err(|e| io("cannot move blob to", target, e.error))?;
        std::fs::File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(|e| io("cannot sync", parent, e))?;
        Ok(())
    }
}

/// A file's modification time, ms since the epoch (0 when the platform cannot say).
fn modified(meta: &std::fs::Metadata) -> u64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64)
}

/// The names in `dir` in order (none when it does not exist).
fn sorted_names(dir: &Path) -> Result<Vec<String>, BlobError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("cannot list", dir, e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io("cannot list", dir, e))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

/// [`BlobStore::originals_page`] over `originals/<2 hex>/<2 hex>/<hex>`: the fan-out
/// directories in order from the one `after` is in, each leaf read whole (a few thousand
/// names at most where the store holds billions).
fn originals_page_in(
    root: &Path,
    after: Option<ContentHash>,
    limit: usize,
) -> Result<Vec<StoredBlob>, BlobError> {
    let after_hex = after.map(|h| h.to_hex());
    let (first, second) = match &after_hex {
        Some(hex) => (hex[0..2].to_string(), hex[2..4].to_string()),
        None => (String::new(), String::new()),
    };
    let mut out = Vec::new();
    for top in sorted_names(root)?.into_iter().filter(|n| *n >= first) {
        let top_dir = root.join(&top);
        for mid in sorted_names(&top_dir)? {
            if top == first && mid < second {
                continue;
            }
            let leaf = top_dir.join(&mid);
            for name in sorted_names(&leaf)? {
                if after_hex.as_ref().is_some_and(|a| name <= *a) {
                    continue;
                }
                let Ok(hash) = name.parse::<ContentHash>() else {
                    continue;
                };
                let path = leaf.join(&name);
                let meta = match std::fs::metadata(&path) {
                    Ok(meta) => meta,
                    // Deleted since the directory was read.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(io("cannot stat", &path, e)),
                };
                out.push(StoredBlob {
                    hash,
                    size: meta.len(),
                    modified_ms: modified(&meta),
                });
                if out.len() >= limit {
                    return Ok(out);
                }
            }
        }
    }
    Ok(out)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, BlobError> + Send + 'static,
) -> Result<T, BlobError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| BlobError::Io(format!("blob task failed: {e}")))?
}

#[async_trait]
impl BlobStore for FsBlobStore {
    async fn put_if_absent(
        &self,
        hash: &ContentHash,
        bytes: Bytes,
    ) -> Result<PutOutcome, BlobError> {
        let target = self.path(hash);
        if tokio::fs::try_exists(&target).await.unwrap_or(false) {
            return Ok(PutOutcome::AlreadyPresent);
        }
        let store = FsBlobStore {
            root: self.root.clone(),
        };
        blocking(move || store.write_atomically(&target, &bytes)).await?;
        Ok(PutOutcome::Created)
    }

    async fn get(&self, hash: &ContentHash) -> Result<Option<Bytes>, BlobError> {
        let path = self.path(hash);
        let bytes = unless_absent(tokio::fs::read(&path), "cannot read", &path).await?;
        Ok(bytes.map(Bytes::from))
    }

    async fn size(&self, hash: &ContentHash) -> Result<Option<u64>, BlobError> {
        let path = self.path(hash);
        let meta = unless_absent(tokio::fs::metadata(&path), "cannot stat", &path).await?;
        Ok(meta.map(|m| m.len()))
    }

    async fn delete(&self, hash: &ContentHash) -> Result<(), BlobError> {
        let path = self.path(hash);
        unless_absent(tokio::fs::remove_file(&path), "cannot delete", &path).await?;
        Ok(())
    }

    async fn list(&self) -> Result<Vec<ContentHash>, BlobError> {
        let root = self.root.join("originals");
        blocking(move || {
            let mut out = Vec::new();
            let mut stack = vec![root];
            while let Some(dir) = stack.pop() {
                let entries = std::fs::read_dir(&dir).map_err(|e| io("cannot list", &dir, e))?;
                for entry in entries {
                    let entry = entry.map_err(|e| io("cannot list", &dir, e))?;
                    let path = entry.path();
                    if path.is_dir() {
                        stack.push(path);
                    } else if let Some(hash) = path
                        .file_name()
                        .and_then(|n| n.to_str())
                        .and_then(|n| n.parse().ok())
                    {
                        out.push(hash);
                    }
                }
            }
            out.sort();
            Ok(out)
        })
        .await
    }

    async fn originals_page(
        &self,
        after: Option<ContentHash>,
        limit: usize,
    ) -> Result<Vec<StoredBlob>, BlobError> {
        let root = self.root.join("originals");
        blocking(move || originals_page_in(&root, after, limit)).await
    }

    async fn check(&self) -> Result<(), BlobError> {
        let dir = self.root.join("originals");
        match tokio::fs::metadata(&dir).await {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(BlobError::Unavailable(format!(
                "{} is not a directory",
                dir.display()
            ))),
            Err(e) => Err(BlobError::Unavailable(format!("{}: {e}", dir.display()))),
        }
    }

    async fn put_variant(&self, name: &VariantObject, bytes: Bytes) -> Result<(), BlobError> {
        let target = self.root.join(name.key());
        let store = FsBlobStore {
            root: self.root.clone(),
        };
        blocking(move || store.write_atomically(&target, &bytes)).await
    }

    async fn get_variant(&self, name: &VariantObject) -> Result<Option<Bytes>, BlobError> {
        let path = self.root.join(name.key());
        let bytes = unless_absent(tokio::fs::read(&path), "cannot read", &path).await?;
        Ok(bytes.map(Bytes::from))
    }

    async fn modified_ms(&self, hash: &ContentHash) -> Result<Option<u64>, BlobError> {
        let path = self.path(hash);
        let meta = unless_absent(tokio::fs::metadata(&path), "cannot stat", &path).await?;
        Ok(meta.map(|m| modified(&m)))
    }

    async fn list_variants(&self) -> Result<Vec<(VariantObject, u64)>, BlobError> {
        let root = self.root.clone();
        blocking(move || {
            let mut out = Vec::new();
            let top = root.join(super::VARIANT_PREFIX);
            let Ok(originals) = std::fs::read_dir(&top) else {
                return Ok(out);
            };
            for dir in originals.flatten() {
                let path = dir.path();
                let entries = std::fs::read_dir(&path).map_err(|e| io("cannot list", &path, e))?;
                for entry in entries.flatten() {
                    let key = format!(
                        "{}{}/{}",
                        super::VARIANT_PREFIX,
                        dir.file_name().to_string_lossy(),
                        entry.file_name().to_string_lossy()
                    );
                    if let (Some(name), Ok(meta)) =
                        (VariantObject::from_key(&key), entry.metadata())
                    {
                        out.push((name, modified(&meta)));
                    }
                }
            }
            Ok(out)
        })
        .await
    }

    async fn delete_variants(&self, names: &[VariantObject]) -> Result<(), BlobError> {
        for name in names {
            let path = self.root.join(name.key());
            unless_absent(tokio::fs::remove_file(&path), "cannot delete", &path).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store in a fresh temp dir (kept alive by the dir returned with it).
    fn store_in_temp() -> (tempfile::TempDir, FsBlobStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = FsBlobStore::open(dir.path()).unwrap();
        (dir, store)
    }

    #[tokio::test]
    async fn put_is_idempotent_and_content_addressed() {
        let (dir, store) = store_in_temp();
        let bytes = Bytes::from_static(b"hello blob");
        let hash = ContentHash::of(&bytes);
        assert_eq!(store.get(&hash).await.unwrap(), None);
        assert_eq!(
            store.put_if_absent(&hash, bytes.clone()).await.unwrap(),
            PutOutcome::Created
        );
        assert_eq!(
            store.put_if_absent(&hash, bytes.clone()).await.unwrap(),
            PutOutcome::AlreadyPresent
        );
        assert_eq!(store.get(&hash).await.unwrap(), Some(bytes.clone()));
        assert_eq!(store.size(&hash).await.unwrap(), Some(10));
        assert_eq!(store.list().await.unwrap(), vec![hash]);
        assert!(dir.path().join(key_for(&hash)).is_file());
        store.delete(&hash).await.unwrap();
        assert_eq!(store.get(&hash).await.unwrap(), None);
        store.check().await.unwrap();
    }

    #[test]
    fn temp_files_a_crash_left_are_removed_when_the_store_opens() {
        let dir = tempfile::tempdir().unwrap();
        drop(FsBlobStore::open(dir.path()).unwrap());
        // What a writer killed between its temp file and the rename leaves behind.
        let leftover = dir.path().join("tmp").join(".tmpAbC123");
        std::fs::write(&leftover, vec![0u8; 4096]).unwrap();
        let _store = FsBlobStore::open(dir.path()).unwrap();
        assert!(!leftover.exists(), "the crashed write's temp file is gone");
    }

    #[tokio::test]
    async fn new_fan_out_directories_are_created_on_the_way() {
        let (dir, store) = store_in_temp();
        let bytes = Bytes::from_static(b"fan out");
        let hash = ContentHash::of(&bytes);
        store.put_if_absent(&hash, bytes).await.unwrap();
        let path = dir.path().join(key_for(&hash));
        assert!(path.is_file());
        assert!(path.parent().unwrap().is_dir());
    }
}
