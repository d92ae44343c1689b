//! The checks of the service's fuzz targets (URL canonicalisation, signatures), shared by
//! `fuzz/fuzz_targets/*.rs` and the replay of found inputs in plain `cargo test`
//! (`tests/it/fuzz_replay.rs`). Each takes any bytes and returns what they must give.
// Each target uses one check of this file.
#![allow(dead_code)]

/// A source URL: refused or canonical, and a canonical URL is its own canonical form (the
/// URL map is keyed by it).
pub fn url(data: &[u8]) -> String {
    let Ok(raw) = std::str::from_utf8(data) else {
        return "not utf-8".into();
    };
    // The default `limits.max_url_bytes`.
    const LIMIT: usize = 8 << 10;
    match imgcas::fetch::client::canonical_url(raw, LIMIT) {
        Ok(url) => {
            let again = imgcas::fetch::client::canonical_url(url.as_str(), LIMIT)
                .expect("a canonical URL parses");
            assert_eq!(again.as_str(), url.as_str());
            "ok".into()
        }
        Err(_) => "bad_url".into(),
    }
}

/// A signed path and query: checking any `sig` never panics, and the signature made for a
/// path and query verifies (and only under its key).
pub fn signature(data: &[u8]) -> String {
    let text = String::from_utf8_lossy(data);
    let (path, query) = text.split_once('?').unwrap_or((&text, ""));
    let keys = [b"fuzzing key".to_vec()];
    let checked = imgcas::signing::verify(&keys, path, query);
    let unsigned: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k != "sig")
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let unsigned = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(&unsigned)
        .finish();
    let sig = imgcas::signing::sign(&keys[0], path, &unsigned);
    let signed = if unsigned.is_empty() {
        format!("sig={sig}")
    } else {
        format!("{unsigned}&sig={sig}")
    };
    assert!(
        imgcas::signing::verify(&keys, path, &signed).is_ok(),
        "{path}?{signed}"
    );
    assert!(imgcas::signing::verify(&[b"another key".to_vec()], path, &signed).is_err());
    match checked {
        Ok(()) => "ok".into(),
        Err(refusal) => refusal.message().into(),
    }
}
