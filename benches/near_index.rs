//! The near-neighbour index of the embedded maps (`src/maps/near.rs`) at scale, next to its
//! peer measured in the same run: a straight scan of the same hashes (popcount of the XOR, the
//! way a table without an index would answer).
//!
//! The hashes are not random bits, whose bands spread unrealistically well: they are the DCT
//! hashes of the 255 shared photographs and of their 15 transforms each
//! (`bench/results/near-dup.json`, written by the benchmark `processors/benches/near_dup.rs`),
//! replicated to each size with small perturbations: nine in ten replicas get 10–14 random
//! bits flipped (another picture of similar statistics), one in ten 0–4 (a near-duplicate).
//! Queries are drawn the same way, at radius 8.
//!
//! `cargo bench --bench near_index` runs the criterion groups at 1 M, then measures each size
//! (250 k, 1 M, 4 M, 10 M) directly: bytes of index per original (from the allocations'
//! capacities), p50/p99 of single lookups, matches per lookup, and the scan's p50 for the
//! ratio. `NEAR_INDEX_SIZES=250000,1000000` picks sizes; the figures go to
//! `bench/results/near-index.json`.
//!
//! The embedded maps keep that index on disk since audit #3 (`near_bands` in the redb file,
//! read through its page cache, so a node's memory does not grow with its originals);
//! the in-memory [`NearIndex`] is what reports scanning every fingerprint build. The second
//! part measures the embedded maps' search as the service calls it (`near_closest` through
//! the store, resolving each match's fingerprint), at `NEAR_INDEX_REDB_SIZES` (default 250 k
//! and 1 M) with the default page cache, beside the in-memory index and the scan of the same
//! hashes in the same run: `bench/results/near-index-redb.json`. The third
//! (`NEAR_INDEX_ONLY=lookalikes`) measures an upload's search among look-alike placeholders,
//! capped, against the same search uncapped: `bench/results/near-lookalikes.json`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use imgcas::hash::ContentHash;
use imgcas::maps::near::NearIndex;
use imgcas::maps::{Fingerprint, Fingerprinted, Fingerprints, RedbStore};

const RADIUS: u32 = 8;
const QUERIES: usize = 5_000;

#[path = "near_data.rs"]
mod near_data;

use near_data::{percentile, seeds, Rng};

struct Built {
    index: NearIndex,
    hashes: Vec<u64>,
    queries: Vec<u64>,
    build: Duration,
}

fn build(size: usize, seeds: &[u64]) -> Built {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ size as u64);
    let hashes: Vec<u64> = (0..size).map(|_| rng.replica(seeds)).collect();
    let started = Instant::now();
    let mut index = NearIndex::default();
    for (i, h) in hashes.iter().enumerate() {
        index.insert_new(i as u64, *h);
    }
    let build = started.elapsed();
    let queries = (0..QUERIES).map(|_| rng.replica(seeds)).collect();
    Built {
        index,
        hashes,
        queries,
        build,
    }
}

fn scan(hashes: &[u64], query: u64, radius: u32) -> usize {
    hashes
        .iter()
        .filter(|h| (**h ^ query).count_ones() <= radius)
        .count()
}

/// The median time of a straight scan for each of `queries`, in milliseconds.
fn scan_p50(hashes: &[u64], queries: &[u64]) -> f64 {
    let mut times: Vec<Duration> = queries
        .iter()
        .map(|q| {
            let started = Instant::now();
            black_box(scan(hashes, *q, RADIUS));
            started.elapsed()
        })
        .collect();
    times.sort();
    percentile(&times, 0.5)
}

fn criterion_groups(c: &mut Criterion) {
    let seeds = seeds();
    let built = build(1_000_000, &seeds);
    let mut group = c.benchmark_group("near_r8_1M");
    group.sample_size(20);
    let mut i = 0;
    group.bench_function("index", |b| {
        b.iter(|| {
            i = (i + 1) % built.queries.len();
            black_box(built.index.search(built.queries[i], RADIUS))
        })
    });
    group.bench_function("scan", |b| {
        b.iter(|| {
            i = (i + 1) % built.queries.len();
            black_box(scan(&built.hashes, built.queries[i], RADIUS))
        })
    });
    group.finish();
}

criterion_group!(benches, criterion_groups);

/// The sizes listed in the environment variable `var` (comma-separated), else `default`.
fn sizes_from(var: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(var)
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

fn sizes() -> Vec<usize> {
    sizes_from(
        "NEAR_INDEX_SIZES",
        &[250_000, 1_000_000, 4_000_000, 10_000_000],
    )
}

/// Writes `json` to `bench/results/<name>`.
fn write_results(name: &str, json: &serde_json::Value) {
    let out = format!("{}/bench/results/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::write(out, serde_json::to_vec_pretty(json).expect("json")).expect("write");
}

/// Each size measured directly, written to `bench/results/near-index.json`.
fn at_each_size() {
    let seeds = seeds();
    let mut rows = Vec::new();
    for size in sizes() {
        let built = build(size, &seeds);
        let mut times = Vec::with_capacity(QUERIES);
        let mut matches = 0usize;
        for q in &built.queries {
            let started = Instant::now();
            matches += black_box(built.index.search(*q, RADIUS)).len();
            times.push(started.elapsed());
        }
        times.sort();
        // The scan is slow at 10 M: a tenth of the queries suffice for its median.
        let scan_p50 = scan_p50(&built.hashes, &built.queries[..QUERIES / 10]);
        let bytes = built.index.heap_bytes() as f64 / size as f64;
        let row = serde_json::json!({
            "originals": size,
            "index_bytes_per_original": (bytes * 10.0).round() / 10.0,
            "build_seconds": built.build.as_secs_f64(),
            "lookup_p50_ms": percentile(&times, 0.5),
            "lookup_p99_ms": percentile(&times, 0.99),
            "lookup_max_ms": percentile(&times, 1.0),
            "matches_per_lookup": matches as f64 / QUERIES as f64,
            "scan_p50_ms": scan_p50,
        });
        println!("{row}");
        rows.push(row);
    }
    let json = serde_json::json!({
        "radius": RADIUS, "queries": QUERIES, "sizes": rows,
        "note": "in-memory index of the embedded maps; peer: a straight scan of the same hashes",
    });
    write_results("near-index.json", &json);
}

/// Stores original `i`'s fingerprint: a square picture of `side` pixels with DCT hash `phash`.
async fn put_picture(store: &RedbStore, i: usize, phash: u64, side: u32) {
    let fp = Fingerprinted::Picture(Fingerprint {
        phash,
        block_hash: 0,
        colour: 0,
        width: side,
        height: side,
    });
    store
        .put_fingerprint(&ContentHash::of(&(i as u64).to_le_bytes()), &fp)
        .await
        .expect("put");
}

/// The embedded maps' on-disk index as the service searches it, beside the in-memory index
/// and the scan of the same hashes, at each of `NEAR_INDEX_REDB_SIZES`.
fn embedded_at_each_size() {
    let sizes = sizes_from("NEAR_INDEX_REDB_SIZES", &[250_000, 1_000_000]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let seeds = seeds();
    let mut rows = Vec::new();
    for size in sizes {
        let built = build(size, &seeds);
        let dir = tempfile::tempdir().expect("tempdir");
        let row = runtime.block_on(async {
            let store = RedbStore::open(dir.path().to_path_buf(), None)
                .await
                .expect("open");
            let started = Instant::now();
            for (i, h) in built.hashes.iter().enumerate() {
                put_picture(&store, i, *h, 100).await;
            }
            let fill = started.elapsed();
            let queries = &built.queries[..QUERIES / 5];
            let mut times = Vec::new();
            let mut memory_times = Vec::new();
            let mut matches = 0usize;
            for q in queries {
                let started = Instant::now();
                matches += black_box(store.near_closest(*q, RADIUS, usize::MAX, usize::MAX).await)
                    .expect("search")
                    .matches
                    .len();
                times.push(started.elapsed());
                let started = Instant::now();
                black_box(built.index.search(*q, RADIUS));
                memory_times.push(started.elapsed());
            }
            times.sort();
            memory_times.sort();
            let scan_p50 = scan_p50(&built.hashes, &queries[..QUERIES / 50]);
            let file = std::fs::metadata(dir.path().join("imgcas.redb"))
                .map(|m| m.len())
                .unwrap_or(0);
            serde_json::json!({
                "originals": size,
                "fill_seconds": fill.as_secs_f64(),
                "file_bytes_per_original": (file as f64 / size as f64).round(),
                "lookup_p50_ms": percentile(&times, 0.5),
                "lookup_p99_ms": percentile(&times, 0.99),
                "in_memory_p50_ms": percentile(&memory_times, 0.5),
                "scan_p50_ms": scan_p50,
                "matches_per_lookup": matches as f64 / queries.len() as f64,
            })
        });
        println!("{row}");
        rows.push(row);
    }
    let json = serde_json::json!({
        "radius": RADIUS, "sizes": rows,
        "note": "the embedded maps' index on disk (near_closest through the store, matches resolved); \
                 peers in the same run: the in-memory index it replaced, and a straight scan",
    });
    write_results("near-index-redb.json", &json);
}

/// Look-alikes (issue 69): the store holding `n` placeholders whose hashes all lie within a
/// bit or two of one another (16×16 single-colour placeholders, by the hundred thousand on a
/// marketplace), and an upload of one more searched as the service searches it (the closest
/// `BEST_AMONG`, at most `NEAR_READ_CAP` rows read), at each of `NEAR_LOOKALIKE_SIZES`
/// (default 10 k and 1 M). Peer in the same run: the same search uncapped, as every search
/// read before the cap (every look-alike, each resolved). `bench/results/near-lookalikes.json`.
fn lookalikes_at_each_size() {
    const BEST_AMONG: usize = 64; // src/pipeline/near.rs
    let sizes = sizes_from("NEAR_LOOKALIKE_SIZES", &[10_000, 1_000_000]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let base = 0x8000_0000_0000_0000u64;
    let mut rows = Vec::new();
    for size in sizes {
        let mut rng = Rng(0x5EED ^ size as u64);
        let dir = tempfile::tempdir().expect("tempdir");
        let row = runtime.block_on(async {
            let store = RedbStore::open(dir.path().to_path_buf(), None)
                .await
                .expect("open");
            let started = Instant::now();
            for i in 0..size {
                // Zero to two bits of 64 flipped: placeholders a JPEG's noise tells apart.
                let mut phash = base;
                for _ in 0..(rng.next() % 3) {
                    phash ^= 1 << (rng.next() % 64);
                }
                put_picture(&store, i, phash, 16).await;
            }
            let fill = started.elapsed();
            let (mut capped, mut uncapped) = (Vec::new(), Vec::new());
            let mut partial = 0usize;
            for n in 0..200u64 {
                let q = base ^ (1 << (n % 64));
                let started = Instant::now();
                let found = black_box(
                    store
                        .near_closest(q, RADIUS, BEST_AMONG, imgcas::maps::NEAR_READ_CAP)
                        .await,
                )
                .expect("search");
                capped.push(started.elapsed());
                partial += usize::from(found.partial);
                // Uncapped reads every look-alike: a few suffice at the large sizes.
                if n < 5 || size <= 100_000 && n < 50 {
                    let started = Instant::now();
                    black_box(store.near_closest(q, RADIUS, usize::MAX, usize::MAX).await)
                        .expect("search");
                    uncapped.push(started.elapsed());
                }
            }
            capped.sort();
            uncapped.sort();
            serde_json::json!({
                "lookalikes": size,
                "fill_seconds": fill.as_secs_f64(),
                "capped_p50_ms": percentile(&capped, 0.5),
                "capped_p99_ms": percentile(&capped, 0.99),
                "capped_partial": partial as f64 / capped.len() as f64,
                "uncapped_p50_ms": percentile(&uncapped, 0.5),
            })
        });
        println!("{row}");
        rows.push(row);
    }
    let json = serde_json::json!({
        "radius": RADIUS, "read_cap": imgcas::maps::NEAR_READ_CAP, "sizes": rows,
        "note": "the embedded maps' search of an upload among look-alikes, capped as the service \
                 searches; peer in the same run: the same search uncapped (before the cap)",
    });
    write_results("near-lookalikes.json", &json);
}

fn main() {
    // `cargo test --benches` runs benches as tests: keep that quick.
    if std::env::args().any(|a| a == "--test") {
        return;
    }
    match std::env::var("NEAR_INDEX_ONLY").as_deref() {
        Ok("embedded") => return embedded_at_each_size(),
        Ok("lookalikes") => return lookalikes_at_each_size(),
        _ => {}
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
    at_each_size();
    embedded_at_each_size();
    lookalikes_at_each_size();
}
