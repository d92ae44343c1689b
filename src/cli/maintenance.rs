//! `imgcas stats`, `imgcas verify` and `imgcas gc`: the pipeline's maintenance walks, with a
//! progress bar, and the lines they print. They open the configured maps themselves: on the
//! embedded default, run them while `imgcas serve` is stopped (redb allows one process per
//! file); on PostgreSQL, while the nodes serve (gc spares what is younger than its grace).

use indicatif::ProgressBar;

use imgcas::config::Config;
use imgcas::error::Error;
use imgcas::metrics::Metrics;
use imgcas::pipeline::{GcReport, Pipeline, StatsReport, VerifyReport};

use super::progress;

async fn open(config: Config) -> Result<Pipeline, Error> {
    Pipeline::open(config, Metrics::default())
        .await
        .map_err(|e| Error::StorageUnavailable(e.to_string()))
}

/// The pipeline, and a progress bar named `what` for its walk.
async fn open_with_bar(config: Config, what: &str) -> Result<(Pipeline, ProgressBar), Error> {
    Ok((open(config).await?, progress(0, what)))
}

fn advance(bar: &ProgressBar) -> impl Fn(u64, u64) + Sync + '_ {
    move |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    }
}

pub async fn stats(config: Config) -> Result<StatsReport, Error> {
    open(config).await?.stored_stats().await
}

pub async fn verify(config: Config, repair: bool) -> Result<VerifyReport, Error> {
    let (pipeline, bar) = open_with_bar(config, "originals").await?;
    let report = pipeline.verify(repair, &advance(&bar)).await;
    bar.finish_and_clear();
    report
}

/// `imgcas verify --fingerprint`: fingerprints every original that has none. Returns how
/// many were computed.
pub async fn fingerprint(config: Config) -> Result<u64, Error> {
    let pipeline = open(config).await?;
    let bar = progress(0, "fingerprints");
    let done = pipeline
        .backfill_fingerprints(&|n| bar.set_position(n))
        .await;
    bar.finish_and_clear();
    done
}

pub async fn gc(config: Config, apply: bool) -> Result<GcReport, Error> {
    let (pipeline, bar) = open_with_bar(config, "blobs").await?;
    let report = pipeline.gc(apply, &advance(&bar)).await;
    bar.finish_and_clear();
    report
}

pub fn describe_stats(r: &StatsReport) -> String {
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    format!(
        "urls            {:>10}\n\
         originals       {:>10}   {:.1} MiB\n\
         variants        {:>10}   {:.1} MiB\n\
         cached errors   {:>10}\n\
         variant budget  {:>10.1} MiB of {:.1} MiB used\n\
         near-duplicates {:>10} clusters of {} originals, {:.1} MiB\n",
        r.urls,
        r.originals,
        mib(r.original_bytes),
        r.variants.images,
        mib(r.variants.image_bytes),
        r.variants.errors,
        mib(r.variant_bytes),
        mib(r.variants_max_bytes),
        r.near_clusters,
        r.near_clustered_originals,
        mib(r.near_clustered_bytes),
    )
}

/// The lines `imgcas verify` prints.
pub fn describe_verify(r: &VerifyReport) -> String {
    let mut out = format!(
        "{} originals checked: {} missing, {} corrupt; {} URL entries dangling",
        r.originals_checked,
        r.missing.len(),
        r.corrupt.len(),
        r.dangling_urls.len()
    );
    for h in &r.missing {
        out.push_str(&format!("\nmissing blob: {h}"));
    }
    for h in &r.corrupt {
        out.push_str(&format!(
            "\ncorrupt blob (bytes do not hash to the key): {h}"
        ));
    }
    for u in &r.dangling_urls {
        out.push_str(&format!("\ndangling URL entry: {u}"));
    }
    for h in &r.taken_down_stored {
        out.push_str(&format!(
            "\ntaken down but still stored (an unfinished takedown; repair finishes it): {h}"
        ));
    }
    if r.repaired && !r.is_clean() {
        out.push_str("\nrepaired: dangling entries dropped; they are downloaded afresh on request");
    } else if !r.is_clean() {
        out.push_str("\nrun `imgcas verify --repair` to drop the dangling entries");
    }
    out
}

/// The lines `imgcas gc` prints.
pub fn describe_gc(r: &GcReport) -> String {
    let verb = if r.applied { "removed" } else { "would remove" };
    let mut out = format!(
        "{verb} {} unreferenced blobs ({} bytes) and {} orphan variants\n\
         {verb} {} URL entries unused for fetch.forget_after",
        r.unreferenced_blobs.len(),
        r.bytes,
        r.orphan_variants,
        r.unused_urls,
    );
    if r.unreferenced_variant_objects > 0 {
        out.push_str(&format!(
            "\n{verb} {} variant objects no row names",
            r.unreferenced_variant_objects
        ));
    }
    if r.young > 0 {
        out.push_str(&format!(
            "\nkept {} unreferenced objects younger than maintenance.gc_grace",
            r.young
        ));
    }
    if r.applied {
        out.push_str(&format!(
            "\nevicted {} variants beyond limits.variants_max_bytes",
            r.evicted_variants
        ));
        if r.compacted {
            out.push_str("\ncompacted the maps' file");
        }
    } else if r.orphan_variants > 0
        || r.unused_urls > 0
        || r.unreferenced_variant_objects > 0
        || !r.unreferenced_blobs.is_empty()
    {
        out.push_str("\ndry run: `imgcas gc --apply` removes them");
    }
    out
}
