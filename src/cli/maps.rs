//! `imgcas maps copy --to URL`: the maps this configuration names (the embedded ones under the
//! data dir, or PostgreSQL) copied into other maps, with the bytes they name. Into
//! `postgres://…` and the configured S3 bucket, to move a node into a cluster; into
//! `redb://<dir>` and that directory's blob store, to move a cluster's maps (or a node's) into
//! a node's data dir. Run it with the embedded maps involved stopped (redb admits one
//! process); run it again to resume or to pick up what changed.

use std::sync::Arc;

use imgcas::blob::{BlobStore, FsBlobStore};
use imgcas::config::{Config, MapsBackend, StorageBackend};
use imgcas::error::Error;
use imgcas::maps::open_backend;
use imgcas::pipeline::{copy_maps, CopyReport};

use super::progress;

/// Why the copy cannot start, before any work (exit 2).
pub fn refusal(config: &Config, to: &str) -> Option<String> {
    let from = match config.maps_backend() {
        Ok(from) => from,
        Err(e) => return Some(e.to_string()),
    };
    let target = match MapsBackend::of(Some(to)) {
        Ok(target) => target,
        Err(_) => {
            return Some(format!(
                "--to must be a postgres:// URL, libpq's key=value words or redb://<directory>, \
                 not `{}`",
                imgcas::config::maps::redacted(to)
            ))
        }
    };
    let same = match (
        from.embedded_dir(&config.data_dir),
        target.embedded_dir(&config.data_dir),
    ) {
        // Spelt differently, one directory all the same (a directory not made yet is not
        // the source's, which exists).
        (Some(a), Some(b)) => match (a.canonicalize(), b.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => a == b,
        },
        (None, None) => from == target,
        _ => false,
    };
    if same {
        return Some("--to names the maps being copied".into());
    }
    if matches!(target, MapsBackend::Postgres(_)) && config.storage.backend != StorageBackend::S3 {
        return Some(
            "maps copy puts every byte into the cluster's bucket: set IMGCAS_STORAGE=s3 and \
             IMGCAS_S3_BUCKET (and the endpoint) to it"
                .into(),
        );
    }
    if let Some(dir) = from.embedded_dir(&config.data_dir) {
        if !dir.join("imgcas.redb").is_file() {
            return Some(format!(
                "no embedded maps to copy: {} has no imgcas.redb",
                dir.display()
            ));
        }
    }
    None
}

pub async fn copy(config: Config, to: &str) -> Result<CopyReport, Error> {
    let unavailable = |what: &str, e: String| Error::StorageUnavailable(format!("{what}: {e}"));
    // Both checked by `refusal` before this runs.
    let from_backend = config
        .maps_backend()
        .map_err(|e| unavailable("maps.url", e.to_string()))?;
    let options = imgcas::maps::OpenOptions::of(&config.maps);
    let from = open_backend(&from_backend, &config.data_dir, &options)
        .await
        .map_err(|e| unavailable("the maps to copy", e.to_string()))?;
    // The source's bytes: the configured store, and before it, for a node now configured
    // for S3, the blob directory it kept under its data dir (a node on the filesystem has
    // that directory as its configured store already).
    let on_s3 = config.storage.backend == StorageBackend::S3;
    let local = match on_s3 && config.data_dir.join("originals").is_dir() {
        true => Some(
            FsBlobStore::open(&config.data_dir)
                .map_err(|e| unavailable("the local blob directory", e.to_string()))?,
        ),
        false => None,
    };
    let configured = imgcas::blob::open(&config).await?;
    let target_backend = MapsBackend::of(Some(to)).map_err(|e| unavailable("--to", e))?;
    let target = open_backend(&target_backend, &config.data_dir, &options)
        .await
        .map_err(|e| unavailable("the target maps", e.to_string()))?;
    // Shared maps read the shared bucket; a node's embedded maps its own directory.
    let to_blobs: Arc<dyn BlobStore> = match target_backend.embedded_dir(&config.data_dir) {
        Some(dir) => Arc::new(
            FsBlobStore::open(dir)
                .map_err(|e| unavailable("the target's blob directory", e.to_string()))?,
        ),
        None => configured.clone(),
    };
    let mut sources: Vec<&dyn BlobStore> = Vec::new();
    if let Some(local) = &local {
        sources.push(local);
    }
    sources.push(configured.as_ref());
    let bar = progress(0, "copying");
    let advance = |done: u64, total: u64| {
        bar.set_length(total);
        bar.set_position(done);
    };
    let report = copy_maps(
        from.as_ref(),
        &sources,
        target.as_ref(),
        to_blobs.as_ref(),
        &advance,
    )
    .await;
    bar.finish_and_clear();
    report
}

/// The lines `imgcas maps copy` prints.
pub fn describe(r: &CopyReport) -> String {
    format!(
        "originals  {} copied, {} already there, {} missing from the node\n\
         urls       {} copied, {} left out (their original is missing)\n\
         variants   {} copied, {} already there\n\
         uploaded   {} bytes",
        r.originals_copied,
        r.originals_present,
        r.originals_missing,
        r.urls_copied,
        r.urls_skipped,
        r.variants_copied,
        r.variants_present,
        r.bytes_uploaded
    )
}
