//! `imgcas maps copy --to postgres://…`: a node's embedded maps (the redb file under its data
//! dir) and its bytes copied into PostgreSQL and the configured bucket, so the node can join
//! a cluster. Run it with the node stopped (redb admits one process); run it again to resume
//! or to pick up what changed.

use imgcas::blob::{BlobStore, FsBlobStore};
use imgcas::config::{Config, MapsBackend, StorageBackend};
use imgcas::error::Error;
use imgcas::maps::{PostgresMaps, RedbMaps};
use imgcas::pipeline::{copy_maps, CopyReport};

use super::progress;

/// Why the copy cannot start, before any work (exit 2).
pub fn refusal(config: &Config, to: &str) -> Option<String> {
    if config.maps_backend().ok() != Some(MapsBackend::Embedded) {
        return Some(
            "maps copy reads the embedded maps under the data dir: unset maps.url \
             (IMGCAS_MAPS_URL) and name the target with --to"
                .into(),
        );
    }
    if !matches!(MapsBackend::of(Some(to)), Ok(MapsBackend::Postgres(_))) {
        return Some(format!("--to must be a postgres:// URL, not `{to}`"));
    }
    if config.storage.backend != StorageBackend::S3 {
        return Some(
            "maps copy puts every byte into the cluster's bucket: set IMGCAS_STORAGE=s3 and \
             IMGCAS_S3_BUCKET (and the endpoint) to it"
                .into(),
        );
    }
    if !config.data_dir.join("imgcas.redb").is_file() {
        return Some(format!(
            "no embedded maps to copy: {} has no imgcas.redb",
            config.data_dir.display()
        ));
    }
    None
}

pub async fn copy(config: Config, to: &str) -> Result<CopyReport, Error> {
    let unavailable = |what: &str, e: String| Error::StorageUnavailable(format!("{what}: {e}"));
    let from = RedbMaps::open(config.data_dir.clone())
        .await
        .map_err(|e| unavailable("the embedded maps", e.to_string()))?;
    let local = if config.data_dir.join("originals").is_dir() {
        Some(
            FsBlobStore::open(&config.data_dir)
                .map_err(|e| unavailable("the local blob directory", e.to_string()))?,
        )
    } else {
        None
    };
    let target = PostgresMaps::open(to)
        .await
        .map_err(|e| unavailable("the PostgreSQL maps", e.to_string()))?;
    let bucket = imgcas::blob::open(&config).await?;
    let bar = progress(0, "copying");
    let advance = |done: u64, total: u64| {
        bar.set_length(total);
        bar.set_position(done);
    };
    let report = copy_maps(
        &from,
        local.as_ref().map(|s| s as &dyn BlobStore),
        &target,
        bucket.as_ref(),
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
