//! `q=auto` (issue 52): one variant per spec and level, whatever the request's spelling; the
//! quality chosen and its score answered as `X-Imgcas-Quality` and `X-Imgcas-Score` (and
//! in `format=json` and a warm spec's result); `Save-Data` lowering the level; `quality.default=auto`; the
//! search charged before any decode; the same bytes on a rerun, after a shared decode, and
//! on a second node.

use crate::common;

use common::*;

/// A real photograph (Kodak PhotoCD kodim15, 768×512).
fn photo() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/photos/kodak-15.jpg"
    ))
    .expect("testdata photo")
}

async fn stored(app: &TestApp) -> String {
    let body = json(app.upload(photo()).await).await;
    body["hash"].as_str().expect("hash").to_string()
}

/// A GET with `Save-Data: on`.
async fn saving_data(app: &TestApp, path: &str) -> reqwest::Response {
    app.client
        .get(app.url(path))
        .header("save-data", "on")
        .send()
        .await
        .unwrap()
}

/// The two headers of a `q=auto` answer: the quality and the score.
fn chosen(r: &reqwest::Response) -> (u8, f64) {
    let quality = header(r, "x-imgcas-quality").expect("X-Imgcas-Quality");
    let score = header(r, "x-imgcas-score").expect("X-Imgcas-Score");
    assert_eq!(
        score.split('.').nth(1).map(str::len),
        Some(1),
        "one decimal: {score}"
    );
    (quality.parse().unwrap(), score.parse().unwrap())
}

#[tokio::test]
async fn one_variant_serves_every_spelling_and_says_what_was_chosen() {
    let app = spawn_app().await;
    let hash = stored(&app).await;
    let mut seen = Vec::new();
    for format in ["jpeg", "webp", "avif"] {
        let first = app
            .get(&format!("/v1/image/{hash}?w=384&format={format}&q=auto"))
            .await;
        assert_eq!(first.status(), 200, "{format}");
        assert_eq!(header(&first, "x-imgcas-cache"), Some("miss"));
        let (quality, score) = chosen(&first);
        assert!(score >= 69.0, "{format}: the floor, {score}");
        let (floor, ceiling) = imgcas_processors::auto_quality::bounds(
            imgcas_processors::OutputFormat::from_name(format).unwrap(),
        );
        assert!((floor..=ceiling).contains(&quality), "{format}: {quality}");
        // No Save-Data was consulted for a request without it... but the answer varies by it.
        assert_eq!(header(&first, "vary"), Some("Save-Data"));
        let bytes = first.bytes().await.unwrap();
        let runs = app.stats().processing_runs;
        for spelling in ["q=auto:good", "q=auto"] {
            let again = app
                .get(&format!(
                    "/v1/image/{hash}?{spelling}&format={format}&w=384"
                ))
                .await;
            assert_eq!(header(&again, "x-imgcas-cache"), Some("hit"), "{spelling}");
            assert_eq!(chosen(&again), (quality, score), "{spelling}");
            assert_eq!(again.bytes().await.unwrap(), bytes, "{spelling}");
        }
        assert_eq!(
            app.stats().processing_runs,
            runs,
            "{format}: no run for a hit"
        );
        // A fixed quality is another variant, without the headers.
        let fixed = app
            .get(&format!("/v1/image/{hash}?w=384&format={format}"))
            .await;
        assert_eq!(header(&fixed, "x-imgcas-quality"), None);
        assert_eq!(header(&fixed, "x-imgcas-score"), None);
        assert_eq!(header(&fixed, "vary"), None);
        seen.push((format, quality, score, bytes.len()));
    }
    // Each level is a variant of its own; a lower level never takes more bytes here.
    let mut last = usize::MAX;
    for level in ["best", "good", "eco", "low"] {
        let r = app
            .get(&format!(
                "/v1/image/{hash}?w=384&format=webp&q=auto:{level}"
            ))
            .await;
        assert_eq!(r.status(), 200, "{level}");
        let target = match level {
            "best" => 80.0,
            "good" => 70.0,
            "eco" => 60.0,
            _ => 50.0,
        };
        let (_, score) = chosen(&r);
        assert!(score >= target - 1.0, "{level}: {score}");
        let len = r.bytes().await.unwrap().len();
        assert!(len <= last, "{level}: {len} bytes after {last}");
        last = len;
    }
    // format=json lists each stored q=auto variant with what its search chose, as the
    // headers said; the fixed-quality variants are not listed.
    let info = json(app.get(&format!("/v1/image/{hash}?format=json")).await).await;
    let listed = info["auto_quality"].as_array().expect("auto_quality");
    assert_eq!(
        listed.len(),
        6,
        "three formats, and WebP's other three levels: {info}"
    );
    for (format, quality, score, _) in &seen {
        let entry = listed
            .iter()
            .find(|e| {
                let spec = e["spec"].as_str().unwrap_or_default();
                spec.contains(&format!("format={format}")) && spec.contains("q=auto:good:70")
            })
            .unwrap_or_else(|| panic!("{format} listed: {info}"));
        assert_eq!(entry["quality"], u64::from(*quality), "{format}");
        assert_eq!(entry["score"].as_f64(), Some(*score), "{format}");
    }
    let by_info = json(app.get(&format!("/v1/originals/{hash}/info")).await).await;
    assert_eq!(by_info["auto_quality"], info["auto_quality"]);
    // An unknown level is the option's error.
    let bad = app.get(&format!("/v1/image/{hash}?q=auto:great")).await;
    assert_eq!(bad.status(), 400);
    assert_eq!(error_code_of(bad).await, "invalid_option");
    eprintln!("chosen: {seen:?}");
}

#[tokio::test]
async fn save_data_lowers_the_level_by_one() {
    let app = spawn_app().await;
    let hash = stored(&app).await;
    let eco = app
        .get(&format!("/v1/image/{hash}?w=320&format=jpeg&q=auto:eco"))
        .await;
    let eco_chosen = chosen(&eco);
    let eco_bytes = eco.bytes().await.unwrap();
    let runs = app.stats().processing_runs;
    let saving = saving_data(&app, &format!("/v1/image/{hash}?w=320&format=jpeg&q=auto")).await;
    assert_eq!(header(&saving, "vary"), Some("Save-Data"));
    assert_eq!(
        header(&saving, "x-imgcas-cache"),
        Some("hit"),
        "good lowered is eco"
    );
    assert_eq!(chosen(&saving), eco_chosen);
    assert_eq!(saving.bytes().await.unwrap(), eco_bytes);
    assert_eq!(app.stats().processing_runs, runs);
    // Without Save-Data, `q=auto` is good: another variant, more bytes.
    let good = app
        .get(&format!("/v1/image/{hash}?w=320&format=jpeg&q=auto"))
        .await;
    assert!(chosen(&good).0 > eco_chosen.0);
    // `low` stays low.
    let low = app
        .get(&format!("/v1/image/{hash}?w=320&format=jpeg&q=auto:low"))
        .await;
    let low_bytes = low.bytes().await.unwrap();
    let lowest = saving_data(
        &app,
        &format!("/v1/image/{hash}?w=320&format=jpeg&q=auto:low"),
    )
    .await;
    assert_eq!(lowest.bytes().await.unwrap(), low_bytes);
    // A numeric q does not read Save-Data.
    let numeric = saving_data(&app, &format!("/v1/image/{hash}?w=320&format=jpeg&q=70")).await;
    assert_eq!(header(&numeric, "vary"), None);
}

#[tokio::test]
async fn quality_default_auto_applies_to_native_requests_only() {
    let app = spawn_app_with(|c| {
        c.quality.default = imgcas::config::QualityDefault::parse("auto:eco").unwrap();
    })
    .await;
    let hash = stored(&app).await;
    let plain = app
        .get(&format!("/v1/image/{hash}?w=300&format=webp"))
        .await;
    assert_eq!(plain.status(), 200);
    let (_, score) = chosen(&plain);
    assert!(score >= 59.0, "{score}");
    let plain_bytes = plain.bytes().await.unwrap();
    let runs = app.stats().processing_runs;
    let explicit = app
        .get(&format!("/v1/image/{hash}?w=300&format=webp&q=auto:eco"))
        .await;
    assert_eq!(header(&explicit, "x-imgcas-cache"), Some("hit"));
    assert_eq!(explicit.bytes().await.unwrap(), plain_bytes);
    assert_eq!(app.stats().processing_runs, runs);
    // Its answers vary by Save-Data, which takes it one level down (low), also when the
    // request is remembered (its key holds the hint).
    let again = app
        .get(&format!("/v1/image/{hash}?w=300&format=webp"))
        .await;
    assert_eq!(header(&again, "vary"), Some("Save-Data"));
    assert_eq!(again.bytes().await.unwrap(), plain_bytes);
    let saving = saving_data(&app, &format!("/v1/image/{hash}?w=300&format=webp")).await;
    let low = app
        .get(&format!("/v1/image/{hash}?w=300&format=webp&q=auto:low"))
        .await;
    assert_eq!(saving.bytes().await.unwrap(), low.bytes().await.unwrap());
    // A numeric q still wins.
    let numeric = app
        .get(&format!("/v1/image/{hash}?w=300&format=webp&q=80"))
        .await;
    assert_eq!(header(&numeric, "x-imgcas-quality"), None);
    // imgproxy's URL keeps its numeric quality (none given: the format's own).
    let (_origin, source) = Origin::serving("/p.jpg", photo()).await;
    let dialect = app
        .get(&format!(
            "/imgproxy/insecure/rs:fit:300:0/plain/{source}@webp"
        ))
        .await;
    assert_eq!(dialect.status(), 200);
    assert_eq!(header(&dialect, "x-imgcas-quality"), None);
    // By URL, the same original and spec: the same variant.
    let native_by_url = app.image_by_url(&source, "w=300&format=webp").await;
    assert_eq!(header(&native_by_url, "x-imgcas-cache"), Some("hit"));
}

#[tokio::test]
async fn a_search_too_costly_is_refused_before_any_decode() {
    // A cost limit that a 1800×1200 JPEG takes at a fixed quality (2.2 M) but not with a
    // search's encodes and scorings charged (33 times as much).
    let app = spawn_app_with(|c| c.limits.max_cost = 20_000_000).await;
    let hash = stored(&app).await;
    let decodes = app.stats().decodes_original;
    let query = "w=1800&enlarge=1&format=jpeg";
    let searched = app.get(&format!("/v1/image/{hash}?{query}&q=auto")).await;
    assert_eq!(searched.status(), 422);
    assert_eq!(error_code_of(searched).await, "too_costly");
    assert_eq!(
        app.stats().decodes_original,
        decodes,
        "refused before any decode"
    );
    assert_eq!(app.stats().processing_runs, 0);
    let fixed = app.get(&format!("/v1/image/{hash}?{query}")).await;
    assert_eq!(fixed.status(), 200);
    // An output over the searched size (2.5 MP) is not searched: the level's starting
    // quality, no score, and no search charged.
    let large = app
        .get(&format!(
            "/v1/image/{hash}?w=2100&enlarge=1&format=jpeg&q=auto"
        ))
        .await;
    assert_eq!(large.status(), 200);
    let start = imgcas_processors::auto_quality::starting_quality(
        imgcas_processors::OutputFormat::Jpeg,
        70,
    );
    assert_eq!(
        header(&large, "x-imgcas-quality"),
        Some(start.to_string().as_str())
    );
    assert_eq!(header(&large, "x-imgcas-score"), None);
}

#[tokio::test]
async fn the_same_bytes_on_a_rerun_after_a_shared_decode_and_on_a_second_node() {
    let query = "w=400&format=webp&q=auto";
    // Node one: the decode first made for another output, then shared by the search.
    let one = spawn_app().await;
    let hash = stored(&one).await;
    let other = one.get(&format!("/v1/image/{hash}?w=400&format=png")).await;
    assert_eq!(other.status(), 200);
    let shared = one.get(&format!("/v1/image/{hash}?{query}")).await;
    assert_eq!(header(&shared, "x-imgcas-cache"), Some("miss"));
    let shared_chosen = chosen(&shared);
    let shared_bytes = shared.bytes().await.unwrap();
    // Node two: its own data, the search's decode its own.
    let two = spawn_app().await;
    assert_eq!(stored(&two).await, hash);
    let alone = two.get(&format!("/v1/image/{hash}?{query}")).await;
    assert_eq!(header(&alone, "x-imgcas-cache"), Some("miss"));
    assert_eq!(chosen(&alone), shared_chosen);
    assert_eq!(alone.bytes().await.unwrap(), shared_bytes);
    // A rerun of the variant (forgotten, made again) makes the same bytes.
    let three = spawn_app().await;
    assert_eq!(stored(&three).await, hash);
    let again = three.get(&format!("/v1/image/{hash}?{query}")).await;
    assert_eq!(again.bytes().await.unwrap(), shared_bytes);
}

#[tokio::test]
async fn a_warm_spec_reports_the_quality_and_score() {
    let app = spawn_app().await;
    let origin = Origin::start_with("/p.jpg", photo()).await;
    let body = serde_json::json!({
        "urls": [origin.url("/p.jpg")],
        "warm": ["w=256&format=avif&q=auto"],
    });
    let (status, v) = crate::ingest::ingest(&app, body).await;
    assert_eq!(status, 200);
    let warm = &v["results"][0]["warm"][0];
    assert_eq!(warm["format"], "avif", "{v}");
    let quality = warm["quality"].as_u64().expect("quality");
    let score = warm["score"].as_f64().expect("score");
    assert!(score >= 69.0, "{v}");
    let (floor, ceiling) =
        imgcas_processors::auto_quality::bounds(imgcas_processors::OutputFormat::Avif);
    assert!((u64::from(floor)..=u64::from(ceiling)).contains(&quality));
}
