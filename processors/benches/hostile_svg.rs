//! What each hostile SVG document cost before its drawing was costed (its conversion and
//! drawing with the cost limit lifted, as the code before audit #3 did), against the time to
//! its refusal now, in the same run. `cargo bench -p imgcas-processors --bench hostile_svg`
//! prints the table and writes `bench/results/hostile-svg.json`. `text-400k.svg` is left out
//! of the "before" (minutes of layout; the audit measured 53 CPU s).

use std::time::Instant;

use imgcas_processors::{process, Limits, OutputFormat, Spec};

#[path = "../tests/it/svg_hostile.rs"]
mod svg_hostile;

fn main() {
    // `cargo test --benches` runs benches as tests: nothing to check here.
    if std::env::args().any(|a| a == "--test") {
        return;
    }
    let unlimited = Limits {
        max_cost: u64::MAX,
        ..Limits::default()
    };
    let mut rows = Vec::new();
    println!("| document | spec | before (s) | now (ms) |");
    for (name, bytes, spec) in svg_hostile::hostile_cases() {
        let resolved =
            Spec::parse(spec)
                .expect("a valid spec")
                .resolve(Some(OutputFormat::Png), true, None);
        let started = Instant::now();
        let refused = process(&bytes, &resolved, &Limits::default()).is_err();
        let now_ms = started.elapsed().as_secs_f64() * 1e3;
        let before_s = (name != "text-400k.svg").then(|| {
            let started = Instant::now();
            let _ = process(&bytes, &resolved, &unlimited);
            started.elapsed().as_secs_f64()
        });
        let before = before_s.map_or("not run".to_string(), |s| format!("{s:.2}"));
        println!("| {name} | {spec} | {before} | {now_ms:.1} (refused: {refused}) |");
        rows.push(serde_json::json!({
            "document": name, "spec": spec, "before_s": before_s,
            "now_ms": now_ms, "refused": refused,
        }));
    }
    let out = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../bench/results/hostile-svg.json"
    );
    let json = serde_json::to_vec_pretty(&serde_json::json!({ "documents": rows })).expect("json");
    std::fs::write(out, json).expect("write");
}
