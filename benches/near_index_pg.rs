//! The near-neighbour index on PostgreSQL at scale (`cargo bench --bench near_index_pg`, or
//! `bench/near_index_pg.sh`). The same hashes as `benches/near_index.rs` (the shared
//! photographs' DCT hashes, replicated with small perturbations) are loaded into
//! `imgcas_fingerprints` of a real server the harness starts; lookups at radius 8 go through
//! `PostgresMaps::near` (four band B-trees, verified by `bit_count` in the database), next to
//! the peer: the same question as one sequential scan. Also measured: the table's and the
//! band indexes' bytes per original. `NEAR_INDEX_PG_SIZES=250000,1000000` picks sizes; the
//! figures go to `bench/results/near-index-pg.json`.

#[path = "near_data.rs"]
mod near_data;
// The tests' harness for a real PostgreSQL server (Debian's package, on a loopback port).
#[allow(dead_code)]
#[path = "../tests/it/common/postgres.rs"]
mod postgres;

use std::time::{Duration, Instant};

use imgcas::maps::near::band_of;
use imgcas::maps::{Fingerprints, PostgresMaps};
use imgcas_processors::FINGERPRINT_VERSION;
use near_data::{percentile, seeds, Rng};

const RADIUS: u32 = 8;
const QUERIES: usize = 1_000;
const BATCH: usize = 20_000;

/// The harness's hook for a missing server (a test fails under CI, skips elsewhere): a
/// measurement says what is missing and stops.
fn skip_unless_ci(note: &str) {
    eprintln!("not measured: {note}");
}

fn main() {
    // `cargo test --benches` runs benches as tests: keep that quick.
    if std::env::args().any(|a| a == "--test") {
        return;
    }
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(near_index_on_postgres_at_scale());
}

async fn near_index_on_postgres_at_scale() {
    let Some(server) = postgres::PgServer::or_skip("near_index_pg") else {
        return;
    };
    let sizes: Vec<usize> = std::env::var("NEAR_INDEX_PG_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![250_000, 1_000_000]);
    let seeds = seeds();
    let mut rows = Vec::new();
    for size in sizes {
        let url = server.database(&format!("near_index_{size}"));
        let maps = PostgresMaps::open(&url).await.expect("maps open");
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(connection);
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ size as u64);
        let started = Instant::now();
        let mut loaded = 0;
        while loaded < size {
            let n = BATCH.min(size - loaded);
            let phashes: Vec<u64> = (0..n).map(|_| rng.replica(&seeds)).collect();
            let hashes: Vec<Vec<u8>> = (loaded..loaded + n)
                .map(|i| {
                    imgcas::hash::ContentHash::of(&(i as u64).to_be_bytes())
                        .as_bytes()
                        .to_vec()
                })
                .collect();
            let signed: Vec<i64> = phashes.iter().map(|h| *h as i64).collect();
            let band =
                |b: usize| -> Vec<i16> { phashes.iter().map(|h| band_of(*h, b) as i16).collect() };
            client
                .execute(
                    "INSERT INTO imgcas_fingerprints
                        (hash, version, phash, block_hash, colour, width, height,
                         band0, band1, band2, band3)
                     SELECT h, $2, p, 0, 0, 800, 600, b0, b1, b2, b3
                       FROM unnest($1::bytea[], $3::bigint[], $4::smallint[], $5::smallint[],
                                   $6::smallint[], $7::smallint[]) AS t(h, p, b0, b1, b2, b3)",
                    &[
                        &hashes,
                        &(FINGERPRINT_VERSION as i32),
                        &signed,
                        &band(0),
                        &band(1),
                        &band(2),
                        &band(3),
                    ],
                )
                .await
                .expect("load");
            loaded += n;
        }
        client
            .batch_execute("VACUUM ANALYZE imgcas_fingerprints")
            .await
            .expect("vacuum");
        let load = started.elapsed();
        let sizes = client
            .query_one(
                "SELECT pg_total_relation_size('imgcas_fingerprints'),
                        pg_indexes_size('imgcas_fingerprints'),
                        (SELECT sum(pg_relation_size(i)) FROM unnest(ARRAY[
                           'imgcas_fingerprints_band0', 'imgcas_fingerprints_band1',
                           'imgcas_fingerprints_band2', 'imgcas_fingerprints_band3']::regclass[]) i)::bigint",
                &[],
            )
            .await
            .expect("sizes");
        let (total, indexes, bands): (i64, i64, i64) = (sizes.get(0), sizes.get(1), sizes.get(2));
        let queries: Vec<u64> = (0..QUERIES).map(|_| rng.replica(&seeds)).collect();
        let mut times = Vec::with_capacity(QUERIES);
        let mut matches = 0;
        for q in &queries {
            let started = Instant::now();
            matches += maps.near(*q, RADIUS).await.expect("near").len();
            times.push(started.elapsed());
        }
        times.sort();
        let mut scans: Vec<Duration> = Vec::new();
        for q in &queries[..5] {
            let started = Instant::now();
            client
                .query(
                    "SELECT hash FROM imgcas_fingerprints
                      WHERE bit_count((phash # $1)::bit(64)) <= $2",
                    &[&(*q as i64), &i64::from(RADIUS)],
                )
                .await
                .expect("scan");
            scans.push(started.elapsed());
        }
        scans.sort();
        let row = serde_json::json!({
            "originals": size,
            "table_and_indexes_bytes_per_original": total as f64 / size as f64,
            "indexes_bytes_per_original": indexes as f64 / size as f64,
            "band_indexes_bytes_per_original": bands as f64 / size as f64,
            "load_seconds": load.as_secs_f64(),
            "lookup_p50_ms": percentile(&times, 0.5),
            "lookup_p99_ms": percentile(&times, 0.99),
            "matches_per_lookup": matches as f64 / QUERIES as f64,
            "sequential_scan_p50_ms": percentile(&scans, 0.5),
        });
        println!("{row}");
        rows.push(row);
        drop(maps);
    }
    let out = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/bench/results/near-index-pg.json"
    );
    let json = serde_json::json!({ "radius": RADIUS, "queries": QUERIES, "sizes": rows });
    std::fs::write(out, serde_json::to_vec_pretty(&json).expect("json")).expect("write");
}
