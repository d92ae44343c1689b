//! Near-duplicate accuracy on the 255 shared photographs, as numbers: the measurement of the
//! accuracy test (`processors/tests/it/near_dup_corpus.rs`, shared), run in release and
//! written to `bench/results/near-dup.json` (every count, and the DCT hashes, which seed the
//! index benchmark `benches/near_index.rs`). `bench/near_dup.py` runs it and renders the table
//! with exact confidence bounds.
//!
//!     cargo bench -p imgcas-processors --bench near_dup

#[allow(dead_code)]
#[path = "../tests/it/near_dup_corpus.rs"]
mod near_dup_corpus;

use near_dup_corpus::{
    measure_all, photos_dir, tally, CANONICAL_RADIUS, REPORT_RADIUS, TRANSFORMS,
};

fn main() {
    // `cargo test --benches` runs bench targets once as tests: nothing to measure then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let dir = photos_dir();
    if !dir.join("SOURCES.tsv").exists() {
        eprintln!("no ../shared/corpus/photos: nothing to measure");
        std::process::exit(1);
    }
    let started = std::time::Instant::now();
    let photos = measure_all(&dir);
    let tally = tally(&photos);
    let recall: Vec<_> = tally
        .transforms
        .iter()
        .map(|t| {
            let (min, median, max) = t.difference;
            serde_json::json!({
                "transform": t.name, "n": tally.photos, "found_report": t.at_report,
                "found_canonical": t.at_canonical, "merged_canonical": t.merged,
                "target": t.target, "missed": t.missed,
                "local_difference": {"min": min, "median": median, "max": max},
            })
        })
        .collect();
    let json = serde_json::json!({
        "report_radius": REPORT_RADIUS, "canonical_radius": CANONICAL_RADIUS,
        "photos": tally.photos, "recall": recall,
        "distinct_pairs": {"pairs": tally.pairs,
            "unguarded_within_report_radius": tally.unguarded_within_report,
            "false_report": tally.false_report.len(), "false_canonical": tally.false_canonical,
            "false_report_pairs": tally.false_report},
        "photo_vs_other_transforms": {"pairs": tally.cross[0], "false_report": tally.cross[1],
            "false_canonical": tally.cross[2]},
        // The DCT hashes themselves: the seeds of the index benchmark.
        "phashes": photos.iter().map(|p| serde_json::json!({
            "photo": p.name,
            "original": format!("{:016x}", p.original.phash),
            "transforms": p.transformed.iter().map(|f| format!("{:016x}", f.phash))
                .collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "transforms": TRANSFORMS.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
    });
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../bench/results/near-dup.json"
    );
    let text = serde_json::to_vec_pretty(&json).expect("json");
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{path}: {e}"));
    eprintln!(
        "{} photos measured in {:.0} s; written to bench/results/near-dup.json",
        tally.photos,
        started.elapsed().as_secs_f64()
    );
}
