//! `imgcas stats`, `imgcas verify` and `imgcas gc`: the pipeline's maintenance walks, with a
//! progress bar, and the lines they print. They open the configured maps themselves: on the
//! embedded default, run them while `imgcas serve` is stopped (redb allows one process per
//! file); on PostgreSQL, while the nodes serve (gc spares what is younger than its grace).
//! `imgcas stats --server` asks a running node instead (`GET /admin/savings`): the savings
//! figures of the operator's page, the node's own among them.

use indicatif::ProgressBar;

use imgcas::config::Config;
use imgcas::error::Error;
use imgcas::maps::StoreTotals;
use imgcas::metrics::Metrics;
use imgcas::pipeline::{GcReport, Pipeline, StatsReport, VerifyReport};
use imgcas::wire::{SavingsAnswer, StoreSavings, WalkState};

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

/// `imgcas stats`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct StatsOptions {
    #[command(flatten)]
    pub at: super::ServerOrLocal,
    /// Print the savings figures as JSON (`GET /admin/savings`'s body) instead of lines.
    #[arg(long)]
    pub json: bool,
}

/// What is stored (locally; none from a server) and the savings figures.
pub async fn stats(
    config: Config,
    options: &StatsOptions,
) -> Result<(Option<StatsReport>, SavingsAnswer), Error> {
    if let Some(base) = &options.at.server {
        let token = options.at.token(&config);
        let client =
            super::server_client("imgcas-stats", token, std::time::Duration::from_secs(30))
                .map_err(Error::Internal)?;
        let url = base
            .join("admin/savings")
            .map_err(|e| Error::invalid_option("server", e.to_string()))?;
        let body = super::answer_of(base, client.get(url))
            .await
            .map_err(Error::StorageUnavailable)?
            .map_err(|e| Error::Internal(format!("{}: {}", e.code, e.message)))?;
        let savings = serde_json::from_slice(&body).map_err(|e| {
            Error::Internal(format!(
                "{base} answered savings this command cannot read: {e}"
            ))
        })?;
        return Ok((None, savings));
    }
    let (urls_max_bytes, variants_max_bytes) = (
        config.limits.urls_max_bytes,
        config.limits.variants_max_bytes,
    );
    let pipeline = open(config).await?;
    let node_id = pipeline.readings().node_id;
    let stored = pipeline.stored_stats().await?;
    let reading = pipeline.store_reading(std::time::Duration::ZERO).await?;
    let walks = WalkState::all(pipeline.walk_positions().await?);
    let savings = SavingsAnswer {
        node_id,
        node: None,
        walks,
        store: Some(StoreSavings::new(
            &reading,
            stored.variant_bytes,
            urls_max_bytes,
            variants_max_bytes,
        )),
    };
    Ok((Some(stored), savings))
}

/// The savings lines: the store's (every node's), then the node's own when a node answered.
pub fn describe_savings(s: &SavingsAnswer) -> String {
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let mut out = String::new();
    if let Some(st) = &s.store {
        out.push_str(&format!(
            "savings (the store, every node's)\n\
             originals stored    {:>10}   {:.1} MiB\n\
             urls pointing       {:>10}   {:.1} MiB pointed at\n\
             saved by exact      {:>10.1} MiB\n\
             saved by near-dup   {:>10.1} MiB   {} URLs\n\
             url map budget      {:>10.1} MiB of {:.1} MiB used\n",
            st.totals.originals,
            mib(st.totals.original_bytes),
            st.totals.urls,
            mib(st.totals.pointed_bytes),
            mib(st.totals.exact_saved_bytes),
            mib(st.totals.near_saved_bytes),
            st.totals.near_urls,
            mib(st.url_bytes),
            mib(st.urls_max_bytes),
        ));
    }
    if let Some(n) = &s.node {
        let ratio = |v: Option<f64>, scale: f64| {
            v.map_or_else(|| "-".to_string(), |v| format!("{:.1}", v * scale))
        };
        out.push_str(&format!(
            "node {} (since it started)\n\
             image requests      {:>10}\n\
             processing runs     {:>10}\n\
             requests per run    {:>10}\n\
             hit ratio           {:>10} %\n\
             saved by exact      {:>10.1} MiB\n\
             saved by near-dup   {:>10.1} MiB\n",
            s.node_id,
            n.requests,
            n.processing_runs,
            ratio(n.requests_per_run, 1.0),
            ratio(n.hit_ratio, 100.0),
            mib(n.exact_saved_bytes),
            mib(n.near_saved_bytes),
        ));
    }
    for w in &s.walks {
        let state = match w.position.finished_ms {
            Some(_) => "finished",
            None => "under way or stopped",
        };
        out.push_str(&format!(
            "walk {:<20} {:>10} rows   {state}, on {}\n",
            w.walk, w.position.rows, w.position.node
        ));
    }
    out
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

/// `imgcas verify --totals`: the totals the maps keep, and the same counted afresh.
pub async fn totals(config: Config) -> Result<(StoreTotals, StoreTotals), Error> {
    open(config).await?.check_totals().await
}

/// The lines `imgcas verify --totals` prints: each figure kept and counted, and whether
/// they agree.
pub fn describe_totals(kept: &StoreTotals, counted: &StoreTotals) -> String {
    let rows = [
        ("originals", kept.originals, counted.originals),
        (
            "original bytes",
            kept.original_bytes,
            counted.original_bytes,
        ),
        ("urls", kept.urls, counted.urls),
        ("pointed bytes", kept.pointed_bytes, counted.pointed_bytes),
        (
            "exact saved bytes",
            kept.exact_saved_bytes,
            counted.exact_saved_bytes,
        ),
        ("near urls", kept.near_urls, counted.near_urls),
        (
            "near saved bytes",
            kept.near_saved_bytes,
            counted.near_saved_bytes,
        ),
    ];
    let mut out = String::from("totals              kept       counted\n");
    for (name, k, c) in rows {
        let mark = if k == c { "" } else { "   differs" };
        out.push_str(&format!("{name:<18} {k:>12} {c:>12}{mark}\n"));
    }
    out.push_str(match kept == counted {
        true => "the kept totals are exact",
        false => "the kept totals differ from a count of the entries",
    });
    out
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
