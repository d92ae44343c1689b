//! Any query string: parsing never panics, and a parsed spec's canonical form parses back to
//! the same canonical form (what signatures and variant keys rely on).
#![no_main]

use imgcas_processors::Spec;
use libfuzzer_sys::fuzz_target;

fn parse(query: &str) -> Option<Spec> {
    let pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (p.to_string(), String::new()),
        })
        .collect();
    Spec::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))).ok()
}

fuzz_target!(|data: &[u8]| {
    let Ok(query) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(spec) = parse(query) {
        let canonical = spec.canonical();
        let again = parse(&canonical).expect("a canonical spec parses");
        assert_eq!(again.canonical(), canonical);
        for accept in [None, Some("image/avif,image/webp,*/*")] {
            let _ = spec.resolve(None, true, accept).canonical();
        }
    }
});
