//! The hostile SVG documents (audit #3's, in `testdata/svg/hostile/`, and the gradient of
//! 90,000 stops made here): shared by the test that they are refused before any pixel is
//! drawn (`svg.rs`) and the benchmark of what they cost before and after
//! (`benches/hostile_svg.rs`, which includes this file).

use std::path::Path;

pub const HOSTILE: &[(&str, &str)] = &[
    ("text-400k.svg", "w=50&format=png"),
    ("text-90k.svg", "w=1000&format=png"),
    ("text-used-1000.svg", "w=100&format=png"),
    ("gradient-24k-stops.svg", "w=1000&format=png"),
    ("gradient-painted-30.svg", "w=1000&format=png"),
    ("path-zigzag-90k.svg", "w=1000&format=png"),
    ("path-dashes.svg", "w=1000&format=png"),
    ("groups-opacity-90.svg", "w=2000&format=png"),
    ("masks-3000.svg", "w=1000&format=png"),
    ("clip-paths-5000.svg", "w=1000&format=png"),
    ("pattern-1000.svg", "w=1000&format=png"),
    ("filter-dilate-60.svg", "w=400&format=png"),
];

/// The audit's gradient: 90,000 stops over 1000×1000 (3.8 MB, made here rather than kept).
pub fn gradient_90k() -> Vec<u8> {
    let mut svg = String::from(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="1000" height="1000"><linearGradient id="g">"#,
    );
    for i in 0..90_000 {
        let color = if i % 2 == 1 { "f00" } else { "00f" };
        svg.push_str(&format!(
            r##"<stop offset="{:.5}" stop-color="#{color}"/>"##,
            f64::from(i) / 90_000.0
        ));
    }
    svg.push_str(r#"</linearGradient><rect width="1000" height="1000" fill="url(#g)"/></svg>"#);
    svg.into_bytes()
}

pub fn hostile(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/svg/hostile")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every hostile document with its spec: the corpus, and the audit's gradient made here.
pub fn hostile_cases() -> Vec<(String, Vec<u8>, &'static str)> {
    let mut cases: Vec<(String, Vec<u8>, &str)> = HOSTILE
        .iter()
        .map(|(name, spec)| (name.to_string(), hostile(name), *spec))
        .collect();
    cases.push((
        "gradient-90k (made)".into(),
        gradient_90k(),
        "w=1000&format=png",
    ));
    cases
}
