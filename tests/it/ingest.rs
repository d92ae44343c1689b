//! Merchant ingest: `POST /v1/ingest` spoken to like a pipeline would, and the real
//! `imgcas ingest` binary against a running app (`--server`) and on a data dir of its own.

use crate::common;

use std::path::Path;

use common::*;
use serde_json::{json, Value};

pub(crate) async fn ingest(app: &TestApp, body: Value) -> (u16, Value) {
    let r = app
        .client
        .post(app.url("/v1/ingest"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("ingest");
    let status = r.status().as_u16();
    (status, json(r).await)
}

fn statuses(answer: &Value) -> Vec<String> {
    answer["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["status"].as_str().unwrap_or("?").to_string())
        .collect()
}

async fn blob_count(app: &TestApp) -> usize {
    app.stored_blobs().await.len()
}

#[tokio::test]
async fn a_batch_reports_new_duplicate_changed_and_failed_per_url() {
    let origin = Origin::start().await;
    let app = spawn_app().await;
    let photo = jpeg(320, 240, 1);
    origin.put("/a.jpg", photo.clone());
    origin.put("/same-as-a.jpg", photo.clone());
    origin.put("/b.jpg", jpeg(200, 100, 2));
    let urls = [
        origin.url("/a.jpg"),
        origin.url("/same-as-a.jpg"),
        origin.url("/b.jpg"),
        origin.url("/gone.jpg"),
        "ftp://example.invalid/x.jpg".to_string(),
    ];
    let (status, answer) = ingest(
        &app,
        json!({ "urls": urls, "warm": ["w=64&format=webp", "w=32&format=auto"] }),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        statuses(&answer),
        ["new", "duplicate", "new", "failed", "failed"]
    );
    let results = answer["results"].as_array().unwrap();
    assert_eq!(results[0]["source"], urls[0]);
    assert_eq!(results[0]["hash"], results[1]["hash"]);
    assert_eq!(results[0]["width"], 320);
    assert_eq!(results[1]["duplicate"], true);
    assert_eq!(results[3]["error"]["code"], "not_found");
    assert_eq!(results[4]["error"]["code"], "invalid_option");
    // Warm: one webp, and format=auto once per output it negotiates to (jxl, avif, webp,
    // jpeg); its webp at w=32 is distinct from the w=64 one.
    let warm = results[0]["warm"].as_array().unwrap();
    assert_eq!(warm.len(), 5, "{warm:?}");
    assert!(warm.iter().all(|w| w["error"].is_null()), "{warm:?}");
    let formats: Vec<&str> = warm.iter().map(|w| w["format"].as_str().unwrap()).collect();
    assert_eq!(formats, ["webp", "jxl", "avif", "webp", "jpeg"]);
    let s = &answer["summary"];
    assert_eq!(
        (s["new"].as_u64(), s["duplicate"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(
        (s["failed"].as_u64(), s["changed"].as_u64()),
        (Some(2), Some(0))
    );
    assert_eq!(s["bytes_saved"].as_u64(), Some(photo.len() as u64));
    assert_eq!(s["warmed"].as_u64(), Some(10), "{s}");
    assert_eq!(blob_count(&app).await, 2);

    // Requests for the warmed variants need no processing.
    let runs = app.processing_runs();
    for query in ["w=64&format=webp", "w=32&format=auto"] {
        let r = app.image_by_url(&urls[1], query).await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "x-imgcas-cache"), Some("hit"));
    }
    assert_eq!(app.processing_runs(), runs);

    // The same batch again: a conditional request per known URL, all 304, nothing new.
    let before = origin.full();
    let (_, again) = ingest(&app, json!({ "urls": &urls[..3] })).await;
    assert_eq!(statuses(&again), ["duplicate", "duplicate", "duplicate"]);
    assert!(again["results"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["downloaded"] == false));
    assert_eq!(origin.full(), before);
    assert_eq!(origin.not_modified(), 3);

    // The merchant replaces b.jpg: reported changed, its new bytes stored.
    origin.put("/b.jpg", jpeg(200, 100, 3));
    let (_, changed) = ingest(&app, json!({ "urls": [&urls[2]] })).await;
    assert_eq!(statuses(&changed), ["changed"]);
    assert_eq!(changed["results"][0]["duplicate"], false);
    assert_ne!(changed["results"][0]["hash"], results[2]["hash"]);
    assert_eq!(blob_count(&app).await, 3);
}

#[tokio::test]
async fn bad_batches_are_refused_whole_with_the_spec_error_shape() {
    let app = spawn_app().await;
    let cases = [
        (json!({ "urls": [] }), 400, "invalid_option"),
        (json!({ "url": ["x"] }), 400, "invalid_option"),
        (
            json!({ "urls": ["http://127.0.0.1/x"], "warm": ["w=0"] }),
            400,
            "invalid_option",
        ),
        (
            json!({ "urls": vec!["http://127.0.0.1/x"; 1001] }),
            413,
            "batch_too_large",
        ),
    ];
    for (body, status, code) in cases {
        let (got, answer) = ingest(&app, body.clone()).await;
        assert_eq!(got, status, "{body} → {answer}");
        assert_eq!(answer["error"]["code"], code, "{answer}");
        assert!(answer["error"]["message"].as_str().unwrap().len() > 10);
    }
    let (_, answer) = ingest(
        &app,
        json!({ "urls": ["http://127.0.0.1/x"], "warm": ["w=0"] }),
    )
    .await;
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("w=0") && message.contains("`w`"),
        "{message}"
    );
    let r = app.post_body("/v1/ingest", "{not json").await;
    assert_eq!(r.status(), 400);
    let huge = format!("{{\"urls\": [\"{}\"]}}", "a".repeat(2 << 20));
    let r = app.post_body("/v1/ingest", huge).await;
    assert_eq!(r.status(), 413);
    assert_eq!(error_code_of(r).await, "batch_too_large");
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// Runs `imgcas ingest --json …` and parses its report.
async fn run_ingest(data_dir: &Path, args: Vec<String>) -> (i32, Value) {
    let data_dir = data_dir.to_path_buf();
    let (code, stdout) = tokio::task::spawn_blocking(move || {
        let mut all = vec!["ingest".to_string(), "--json".to_string()];
        all.extend(args);
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        binary::run(&data_dir, &[], &refs)
    })
    .await
    .unwrap();
    let report: Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("report is JSON ({e}): {stdout}"));
    (code, report)
}

fn summary(report: &Value) -> (u64, u64, u64, u64) {
    let s = &report["summary"];
    let n = |k: &str| s[k].as_u64().unwrap();
    (n("new"), n("duplicate"), n("changed"), n("failed"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_command_ingests_a_directory_twice_against_a_server() {
    let app = spawn_app().await;
    let photos = tempfile::tempdir().unwrap();
    let dir = photos.path();
    write(dir, "a.jpg", &jpeg(300, 200, 1));
    write(dir, "copy-of-a.jpg", &jpeg(300, 200, 1));
    write(dir, "nested/b.png", &png(120, 90, 2));
    write(
        dir,
        "nested/c.webp",
        &encode(&rgb_image(64, 64, 3), image::ImageFormat::WebP),
    );
    write(dir, "readme.txt", b"not an image, not picked up");
    let server = format!("http://{}", app.addr);
    let args = vec![
        dir.display().to_string(),
        "--server".into(),
        server.clone(),
        "--warm".into(),
        "w=50&format=webp".into(),
    ];
    let (code, first) = run_ingest(app.dir.path(), args.clone()).await;
    assert_eq!(code, 0, "{first}");
    assert_eq!(summary(&first), (3, 1, 0, 0), "{first}");
    assert_eq!(first["results"].as_array().unwrap().len(), 4);
    assert_eq!(first["summary"]["warmed"], 3, "{first}");
    let blobs = blob_count(&app).await;
    assert_eq!(blobs, 3);

    let (code, second) = run_ingest(app.dir.path(), args.clone()).await;
    assert_eq!(code, 0);
    assert_eq!(summary(&second), (0, 4, 0, 0), "{second}");
    assert_eq!(second["summary"]["warmed"], 0, "variants were built once");
    assert_eq!(blob_count(&app).await, blobs, "0 new blobs");

    // One file edited: it is new content; a corrupt file fails alone.
    write(dir, "nested/b.png", &png(120, 90, 9));
    write(dir, "broken.jpg", b"\xff\xd8\xff\xe0 truncated");
    let (code, third) = run_ingest(app.dir.path(), args).await;
    assert_eq!(code, 1, "a failed item makes the exit code 1");
    assert_eq!(summary(&third), (1, 3, 0, 1), "{third}");
    let failed = third["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["status"] == "failed")
        .unwrap();
    assert!(failed["source"].as_str().unwrap().ends_with("broken.jpg"));
    assert_eq!(blob_count(&app).await, blobs + 1);

    // The table a person reads.
    let out = tokio::task::spawn_blocking(move || {
        let d = tempfile::tempdir().unwrap();
        binary::run(
            d.path(),
            &[],
            &["ingest", &dir_string(&photos), "--server", &server],
        )
    })
    .await
    .unwrap();
    for needle in [
        "new",
        "duplicate",
        "changed",
        "failed",
        "dedup saved",
        "broken.jpg",
    ] {
        assert!(out.1.contains(needle), "{needle} in {}", out.1);
    }
}

fn dir_string(d: &tempfile::TempDir) -> String {
    d.path().display().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_command_works_on_the_local_data_dir_without_a_server() {
    let origin = Origin::start_with("/p.jpg", jpeg(160, 120, 4)).await;
    origin.put("/q.jpg", jpeg(160, 120, 5));
    let data = tempfile::tempdir().unwrap();
    let photos = tempfile::tempdir().unwrap();
    write(photos.path(), "p.jpg", &jpeg(160, 120, 4));
    let list = photos.path().join("urls.txt");
    std::fs::write(
        &list,
        format!(
            "# merchant feed\n{}\n{}\n",
            origin.url("/p.jpg"),
            origin.url("/q.jpg")
        ),
    )
    .unwrap();
    let args = vec![
        photos.path().display().to_string(),
        "--url-list".into(),
        list.display().to_string(),
        "--allow-private-networks".into(),
        "--warm".into(),
        "w=40".into(),
    ];
    let (code, first) = run_ingest(data.path(), args.clone()).await;
    assert_eq!(code, 0, "{first}");
    // The file came first; the URL with the same bytes is a duplicate of it.
    assert_eq!(summary(&first), (2, 1, 0, 0), "{first}");
    assert_eq!(first["summary"]["warmed"], 2);
    let blobs = std::fs::read_dir(data.path().join("originals"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert!(blobs > 0, "blobs are under the data dir");

    origin.put("/q.jpg", jpeg(160, 120, 6));
    let (code, second) = run_ingest(data.path(), args).await;
    assert_eq!(code, 0);
    assert_eq!(summary(&second), (0, 2, 1, 0), "{second}");
    assert_eq!(origin.not_modified(), 1, "p.jpg was asked conditionally");

    // `imgcas stats` counts it: 2 URLs, 3 contents (p, q, q's replacement), 3 warmed variants.
    let data_dir = data.path().to_path_buf();
    let (code, stats) =
        tokio::task::spawn_blocking(move || binary::run(&data_dir, &[], &["stats"]))
            .await
            .unwrap();
    assert_eq!(code, 0);
    let count = |name: &str| -> u64 {
        let line = stats
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in {stats}"));
        line.split_whitespace()
            .rev()
            .find_map(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("{line}"))
    };
    assert_eq!(count("urls"), 2, "{stats}");
    assert_eq!(count("cached errors"), 0, "{stats}");
    assert!(stats.contains("originals                3"), "{stats}");
    assert!(stats.contains("variants                 3"), "{stats}");

    // What was ingested offline is served by the server afterwards.
    let server = binary::start(data.path(), None);
    let hash = second["results"][0]["hash"].as_str().unwrap().to_string();
    let r = client()
        .get(format!("{}/v1/image/{hash}?w=40", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-imgcas-cache"), Some("hit"), "warmed offline");
    server.terminate();
}
