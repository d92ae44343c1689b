//! `imgcas stats`, `imgcas verify` and `imgcas gc`: the maps and the blob store counted and
//! checked against each other, on either backend. They open the data dir's maps themselves,
//! so run them while `imgcas serve` is stopped (redb allows one process per file).
//!
//! - `stats`: what is stored — URLs, originals and their bytes, variants and cached errors.
//! - `verify`: every originals-index entry has a blob whose SHA-256 is its key, and every URL
//!   map entry points at an indexed original. `--repair` drops what dangles (the index entry
//!   and a corrupt blob, the URL entries pointing at it, its variants): the next request
//!   downloads afresh instead of failing.
//! - `gc`: blobs the index does not know (left by a crash between blob write and index write)
//!   and variants of unindexed originals. Dry run unless `--apply`.

use std::sync::Arc;

use super::progress;
use crate::blob::{self, BlobStore};
use crate::config::Config;
use crate::error::Error;
use crate::hash::ContentHash;
use crate::maps::Maps;

/// What `verify` found (and, with repair, dropped).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    pub originals_checked: u64,
    /// Indexed originals whose blob is absent.
    pub missing: Vec<ContentHash>,
    /// Indexed originals whose blob's bytes do not hash to the key.
    pub corrupt: Vec<ContentHash>,
    /// URL map entries pointing at an original the index does not hold.
    pub dangling_urls: Vec<String>,
    pub repaired: bool,
}

impl VerifyReport {
    pub fn is_clean(&self) -> bool {
        self.missing.is_empty() && self.corrupt.is_empty() && self.dangling_urls.is_empty()
    }
}

/// What `gc` found (and, when applied, removed).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    pub unreferenced_blobs: Vec<ContentHash>,
    pub bytes: u64,
    pub orphan_variants: u64,
    pub applied: bool,
}

async fn open(config: &Config) -> Result<(Maps, Arc<dyn BlobStore>), Error> {
    let maps = Maps::open(&config.data_dir)?;
    let blobs = blob::open(config).await?;
    Ok((maps, blobs))
}

/// What `stats` counts.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct StatsReport {
    pub urls: u64,
    pub originals: u64,
    pub original_bytes: u64,
    pub variants: crate::maps::VariantTotals,
}

pub async fn stats(config: &Config) -> Result<StatsReport, Error> {
    let maps = Maps::open(&config.data_dir)?;
    let mut report = StatsReport {
        urls: maps.urls.all()?.len() as u64,
        variants: maps.variants.totals()?,
        ..StatsReport::default()
    };
    for hash in maps.originals.hashes()? {
        report.originals += 1;
        report.original_bytes += maps.originals.get(&hash)?.map_or(0, |i| i.bytes);
    }
    Ok(report)
}

pub fn describe_stats(r: &StatsReport) -> String {
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    format!(
        "urls            {:>10}\n\
         originals       {:>10}   {:.1} MiB\n\
         variants        {:>10}   {:.1} MiB\n\
         cached errors   {:>10}\n",
        r.urls,
        r.originals,
        mib(r.original_bytes),
        r.variants.images,
        mib(r.variants.image_bytes),
        r.variants.errors,
    )
}

pub async fn verify(config: &Config, repair: bool) -> Result<VerifyReport, Error> {
    let (maps, blobs) = open(config).await?;
    let mut report = VerifyReport {
        repaired: repair,
        ..VerifyReport::default()
    };
    let hashes = maps.originals.hashes()?;
    let bar = progress(hashes.len(), "originals");
    for hash in &hashes {
        match blobs.get(hash).await? {
            None => report.missing.push(*hash),
            Some(bytes) if ContentHash::of(&bytes) != *hash => report.corrupt.push(*hash),
            Some(_) => {}
        }
        report.originals_checked += 1;
        bar.inc(1);
    }
    bar.finish_and_clear();
    let bad: Vec<ContentHash> = report
        .missing
        .iter()
        .chain(&report.corrupt)
        .copied()
        .collect();
    for (url, entry) in maps.urls.all()? {
        let indexed = maps.originals.get(&entry.hash)?.is_some();
        if !indexed || bad.contains(&entry.hash) {
            report.dangling_urls.push(url);
        }
    }
    if repair {
        for url in &report.dangling_urls {
            maps.urls.remove(url)?;
        }
        for hash in &bad {
            maps.originals.remove_durable(hash)?;
        }
        for hash in &report.corrupt {
            blobs.delete(hash).await?;
        }
        maps.variants.sweep_sources(|h| !bad.contains(h), true)?;
        maps.flush()?;
    }
    Ok(report)
}

pub async fn gc(config: &Config, apply: bool) -> Result<GcReport, Error> {
    let (maps, blobs) = open(config).await?;
    let mut indexed = maps.originals.hashes()?;
    indexed.sort();
    let stored = blobs.list().await?;
    let mut report = GcReport {
        applied: apply,
        ..GcReport::default()
    };
    let bar = progress(stored.len(), "blobs");
    for hash in stored {
        if indexed.binary_search(&hash).is_err() {
            report.bytes += blobs.size(&hash).await?.unwrap_or(0);
            if apply {
                blobs.delete(&hash).await?;
            }
            report.unreferenced_blobs.push(hash);
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    report.orphan_variants = maps
        .variants
        .sweep_sources(|h| indexed.binary_search(h).is_ok(), apply)?;
    maps.flush()?;
    Ok(report)
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
        "{verb} {} unreferenced blobs ({} bytes) and {} orphan variants",
        r.unreferenced_blobs.len(),
        r.bytes,
        r.orphan_variants
    );
    if !r.applied && (r.orphan_variants > 0 || !r.unreferenced_blobs.is_empty()) {
        out.push_str("\ndry run: `imgcas gc --apply` removes them");
    }
    out
}
