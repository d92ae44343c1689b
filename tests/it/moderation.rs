//! Moderation through HTTP (issue 32): the blocklist (`/v1/blocklist`) refusing exact and
//! near copies of listed pictures on every way in (download, upload, ingest) with 451
//! `blocked`, storing nothing and taking down what was stored, lifted by `DELETE`, carried
//! between deployments by `imgcas blocklist export|import`; and the validation hook, a real
//! HTTP service on loopback that allows, denies or does not answer in time (fail-closed and
//! fail-open). The copies are made from real photographs (`testdata/photos/`, Kodak PhotoCD).
//! The blocklist shared by nodes on PostgreSQL is `cluster.rs`'s.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::post;
use image::codecs::jpeg::JpegEncoder;
use image::DynamicImage;
use serde_json::{json as j, Value};

use crate::common;

use common::*;

const TOKEN: &str = "moderation-admin-token-0123456789";

fn photo(name: &str) -> Vec<u8> {
    testdata_photo(name)
}

/// A copy in other bytes: scaled by `scale` (1 keeps the size) and re-encoded as JPEG at
/// `quality`, or as PNG when `png`.
fn copy_of(bytes: &[u8], scale: f32, quality: u8, png: bool) -> Vec<u8> {
    let image = image::load_from_memory(bytes).unwrap();
    let (w, h) = (
        (image.width() as f32 * scale) as u32,
        (image.height() as f32 * scale) as u32,
    );
    let image = image.resize_exact(w, h, image::imageops::FilterType::Triangle);
    let mut out = Vec::new();
    if png {
        image
            .write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png)
            .unwrap();
    } else {
        JpegEncoder::new_with_quality(&mut out, quality)
            .encode_image(&DynamicImage::ImageRgb8(image.to_rgb8()))
            .unwrap();
    }
    out
}

fn sha(bytes: &[u8]) -> String {
    imgcas::hash::ContentHash::of(bytes).to_hex()
}

async fn post_block_image(app: &TestApp, bytes: Vec<u8>, query: &str) -> reqwest::Response {
    app.client
        .post(app.url(&format!("/v1/blocklist?{query}")))
        .bearer_auth(TOKEN)
        .header("content-type", "image/jpeg")
        .body(bytes)
        .send()
        .await
        .unwrap()
}

async fn ingest(app: &TestApp, urls: &[String]) -> Value {
    let r = app
        .post_json_as("/v1/ingest", TOKEN, &j!({ "urls": urls, "warm": ["w=64"] }))
        .await;
    assert_eq!(r.status(), 200);
    json(r).await
}

fn error_code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

#[tokio::test]
async fn the_blocklist_refuses_exact_and_near_copies_everywhere_and_lifting_restores_them() {
    let origin = Origin::start().await;
    let listed = photo("kodak-02.jpg");
    let other = photo("kodak-15.jpg");
    let smaller = copy_of(&listed, 0.5, 80, false);
    let as_png = copy_of(&listed, 0.75, 0, true);
    origin.put("/listed.jpg", listed.clone());
    origin.put("/smaller.jpg", smaller.clone());
    origin.put("/copy.png", as_png.clone());
    origin.put("/other.jpg", other.clone());
    origin.put("/ingested.jpg", copy_of(&listed, 0.6, 70, false));
    let app = spawn_app_with(|c| c.security.admin_token = Some(TOKEN.into())).await;

    // Stored and served before it is listed.
    let r = app.image_from(&origin, "/listed.jpg", "w=100").await;
    assert_eq!(r.status(), 200);
    assert!(app
        .stored_blobs()
        .await
        .iter()
        .any(|h| h.to_hex() == sha(&listed)));

    // Listed by its image: both hashes are taken, and what is stored of it goes.
    let r = post_block_image(&app, listed.clone(), "note=reported").await;
    assert_eq!(r.status(), 200);
    let answer = json(r).await;
    assert_eq!(answer["entry"]["sha256"], sha(&listed));
    assert_eq!(answer["entry"]["fingerprint"].as_str().unwrap().len(), 64);
    assert_eq!(answer["entry"]["radius"], 8, "the configured default");
    assert_eq!(answer["taken_down"], j!([sha(&listed)]));
    let id = answer["entry"]["id"].as_str().unwrap().to_string();
    assert!(!app
        .stored_blobs()
        .await
        .iter()
        .any(|h| h.to_hex() == sha(&listed)));

    // Exact and near copies are refused by URL, by upload and by ingest, and stored nowhere.
    let before = app.stored_blobs().await.len();
    for path in ["/listed.jpg", "/smaller.jpg", "/copy.png"] {
        let r = app.image_by_url(&origin.url(path), "w=100").await;
        assert_eq!(r.status(), 451, "{path}");
        assert_eq!(error_code(&json(r).await), "blocked", "{path}");
    }
    let downloads = app.downloads();
    let r = app.image_from(&origin, "/smaller.jpg", "w=90").await;
    assert_eq!(r.status(), 451);
    assert_eq!(
        app.downloads(),
        downloads,
        "the refusal is remembered for the URL"
    );
    let r = app.upload_as(TOKEN, copy_of(&listed, 0.4, 85, false)).await;
    assert_eq!(r.status(), 451);
    assert_eq!(error_code(&json(r).await), "blocked");
    let report = ingest(
        &app,
        &[origin.url("/ingested.jpg"), origin.url("/other.jpg")],
    )
    .await;
    assert_eq!(report["results"][0]["error"]["code"], "blocked", "{report}");
    assert_eq!(report["results"][1]["status"], "new", "{report}");
    // Only the distinct photo was stored.
    assert_eq!(app.stored_blobs().await.len(), before + 1);
    let r = app.image_from(&origin, "/other.jpg", "w=100").await;
    assert_eq!(r.status(), 200, "a distinct photo is not refused");

    // The list names the entry and the copies it refused.
    let r = app.get_as("/v1/blocklist", TOKEN).await;
    let list = json(r).await;
    let entries = list["entries"].as_array().unwrap();
    assert!(entries
        .iter()
        .any(|e| e["id"] == id.as_str() && e["note"] == "reported"));
    let matched = entries
        .iter()
        .filter(|e| e["matched"] == id.as_str())
        .count();
    assert!(matched >= 3, "{list}");

    // Lifted: the entry and what its matches listed go, and every way in works again.
    let r = app.delete_as(&format!("/v1/blocklist/{id}"), TOKEN).await;
    assert_eq!(r.status(), 200);
    let lifted = json(r).await;
    assert_eq!(lifted["lifted"].as_array().unwrap().len(), 1 + matched);
    for path in ["/listed.jpg", "/smaller.jpg", "/copy.png"] {
        let r = app.image_by_url(&origin.url(path), "w=100").await;
        assert_eq!(r.status(), 200, "{path}");
    }
    let r = app.delete_as(&format!("/v1/blocklist/{id}"), TOKEN).await;
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn entries_by_hash_and_fingerprint_are_checked_and_need_the_token() {
    let bytes = jpeg(320, 240, 3);
    let origin = Origin::start_with("/a.jpg", bytes.clone()).await;
    let app = spawn_app_with(|c| c.security.admin_token = Some(TOKEN.into())).await;
    let post_json = |body: Value, token: Option<&'static str>| {
        let mut r = app
            .client
            .post(app.url("/v1/blocklist"))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    let r = post_json(j!({ "sha256": sha(&bytes) }), None)
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    for bad in [
        j!({ "sha256": "nope" }),
        j!({ "fingerprint": "123" }),
        j!({ "note": "nothing to match" }),
        j!({ "fingerprint": "0123456789abcdef", "radius": 40 }),
        j!({ "sha256": sha(&bytes), "colour": "red" }),
    ] {
        let r = post_json(bad.clone(), Some(TOKEN)).await.unwrap();
        assert_eq!(r.status(), 400, "{bad}");
        assert_eq!(error_code(&json(r).await), "invalid_option", "{bad}");
    }
    // By hash alone: those bytes are refused, by URL.
    let r = post_json(j!({ "sha256": sha(&bytes) }), Some(TOKEN))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = app.image_from(&origin, "/a.jpg", "w=50").await;
    assert_eq!(r.status(), 451);
    assert!(app.stored_blobs().await.is_empty(), "nothing stored");
    // Without any token configured, the routes that change the list are closed.
    let open = spawn_app().await;
    let r = open
        .post_json("/v1/blocklist", &j!({ "sha256": sha(&bytes) }))
        .await;
    assert_eq!(r.status(), 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_blocklist_is_exported_and_imported_as_a_file() {
    let listed = photo("kodak-02.jpg");
    let a = spawn_app_with(|c| c.security.admin_token = Some(TOKEN.into())).await;
    assert_eq!(
        post_block_image(&a, listed.clone(), "radius=6")
            .await
            .status(),
        200
    );
    let offline = tempfile::tempdir().unwrap();
    let file = offline.path().join("list.jsonl");
    let file_arg = file.to_str().unwrap();
    let (code, out) = binary::run(
        offline.path(),
        &[],
        &[
            "blocklist",
            "export",
            "--server",
            &a.url("/"),
            "--admin-token",
            TOKEN,
            "-o",
            file_arg,
        ],
    );
    assert_eq!(code, 0, "{out}");
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    // Another deployment, offline (its server stopped), imports it: a copy is refused there.
    let b_dir = tempfile::tempdir().unwrap();
    let data_dir = b_dir.path().to_str().unwrap();
    let (code, out) = binary::run(
        offline.path(),
        &[],
        &["blocklist", "import", file_arg, "--data-dir", data_dir],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("1 entries read, 1 newly listed"), "{out}");
    let b = spawn_app_with(|c| {
        c.data_dir = b_dir.path().to_path_buf();
        c.security.admin_token = Some(TOKEN.into());
    })
    .await;
    let r = b.upload_as(TOKEN, copy_of(&listed, 0.5, 75, false)).await;
    assert_eq!(r.status(), 451);
    // A line that is no entry stops the import.
    std::fs::write(&file, "{\"id\": 5}\n").unwrap();
    let (code, out) = binary::run(
        offline.path(),
        &[],
        &[
            "blocklist",
            "import",
            file_arg,
            "--server",
            &b.url("/"),
            "--admin-token",
            TOKEN,
        ],
    );
    assert_eq!(code, 1, "{out}");
}

/// A validation service on loopback: answers per its mode, and keeps what it was asked.
#[derive(Clone)]
struct Validator {
    base: String,
    asked: Arc<Mutex<Vec<Value>>>,
    calls: Arc<AtomicUsize>,
}

#[derive(Clone, Copy)]
enum Verdict {
    Allow,
    Deny,
    /// Answers after 3 s.
    Hang,
}

impl Validator {
    async fn start(verdict: Verdict) -> Validator {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let calls = Arc::new(AtomicUsize::new(0));
        let (a, c) = (asked.clone(), calls.clone());
        let app = axum::Router::new().route(
            "/check",
            post(move |axum::Json(body): axum::Json<Value>| {
                let (a, c) = (a.clone(), c.clone());
                async move {
                    c.fetch_add(1, Ordering::SeqCst);
                    a.lock().unwrap().push(body);
                    match verdict {
                        Verdict::Allow => axum::Json(j!({ "allow": true })),
                        Verdict::Deny => axum::Json(j!({ "allow": false, "reason": "policy 7" })),
                        Verdict::Hang => {
                            tokio::time::sleep(Duration::from_secs(3)).await;
                            axum::Json(j!({ "allow": true }))
                        }
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Validator { base, asked, calls }
    }
}

async fn app_with_hook(validator: &Validator, open: bool) -> TestApp {
    let url = format!("{}/check", validator.base);
    spawn_app_with(move |c| {
        c.security.admin_token = Some(TOKEN.into());
        c.moderation.validation_url = Some(url);
        c.moderation.validation_timeout = Duration::from_millis(500);
        if open {
            c.moderation.validation_on_error = imgcas::config::moderation::OnError::Open;
        }
    })
    .await
}

#[tokio::test]
async fn the_validation_hook_sees_each_new_original_once_and_its_allowance_stores_it() {
    let validator = Validator::start(Verdict::Allow).await;
    let bytes = jpeg(640, 480, 11);
    let origin = Origin::start_with("/a.jpg", bytes.clone()).await;
    origin.put("/same.jpg", bytes.clone());
    let app = app_with_hook(&validator, false).await;
    assert_eq!(app.image_from_status(&origin, "/a.jpg", "w=100").await, 200);
    assert_eq!(
        app.image_from_status(&origin, "/same.jpg", "w=90").await,
        200
    );
    assert!(app
        .upload_as(TOKEN, bytes.clone())
        .await
        .status()
        .is_success());
    assert_eq!(
        validator.calls.load(Ordering::SeqCst),
        1,
        "asked once per hash"
    );
    let asked = validator.asked.lock().unwrap()[0].clone();
    assert_eq!(asked["sha256"], sha(&bytes));
    assert_eq!(asked["format"], "jpeg");
    assert_eq!(
        (asked["width"].as_u64(), asked["height"].as_u64()),
        (Some(640), Some(480))
    );
    assert_eq!(asked["bytes"], bytes.len());
    assert_eq!(asked["fingerprint"].as_str().unwrap().len(), 64);
    use base64::Engine;
    let preview = base64::engine::general_purpose::STANDARD
        .decode(asked["preview"].as_str().unwrap())
        .unwrap();
    let small = image::load_from_memory_with_format(&preview, image::ImageFormat::Jpeg).unwrap();
    assert!(small.width() <= 256 && small.height() <= 256);
}

#[tokio::test]
async fn a_denial_refuses_and_lists_the_bytes_and_stores_nothing() {
    let validator = Validator::start(Verdict::Deny).await;
    let origin = Origin::start_with("/a.jpg", jpeg(320, 240, 12)).await;
    let app = app_with_hook(&validator, true).await;
    let r = app.image_from(&origin, "/a.jpg", "w=100").await;
    assert_eq!(r.status(), 451);
    let body = json(r).await;
    assert_eq!(error_code(&body), "blocked");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("policy 7"));
    let r = app.upload_as(TOKEN, jpeg(300, 200, 13)).await;
    assert_eq!(r.status(), 451);
    assert!(app.stored_blobs().await.is_empty());
    // Remembered: the same URL again asks neither the origin nor the service.
    let (downloads, calls) = (app.downloads(), validator.calls.load(Ordering::SeqCst));
    assert_eq!(app.image_from_status(&origin, "/a.jpg", "w=80").await, 451);
    assert_eq!(app.downloads(), downloads);
    assert_eq!(validator.calls.load(Ordering::SeqCst), calls);
}

#[tokio::test]
async fn a_service_that_does_not_answer_refuses_for_now_when_closed_and_stores_when_open() {
    let validator = Validator::start(Verdict::Hang).await;
    let origin = Origin::start_with("/a.jpg", jpeg(320, 240, 14)).await;
    let closed = app_with_hook(&validator, false).await;
    let started = std::time::Instant::now();
    let r = closed.image_from(&origin, "/a.jpg", "w=100").await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the timeout holds"
    );
    assert_eq!(r.status(), 503);
    assert!(header(&r, "retry-after").is_some());
    assert_eq!(error_code(&json(r).await), "validation_unavailable");
    assert_eq!(
        closed.upload_as(TOKEN, jpeg(300, 200, 15)).await.status(),
        503
    );
    assert!(closed.stored_blobs().await.is_empty());
    let open = app_with_hook(&validator, true).await;
    assert_eq!(
        open.image_from_status(&origin, "/a.jpg", "w=100").await,
        200
    );
    assert_eq!(
        open.upload_as(TOKEN, jpeg(300, 200, 15)).await.status(),
        201
    );
}

#[tokio::test]
async fn the_hook_alone_is_exempt_from_the_origin_guard() {
    let validator = Validator::start(Verdict::Allow).await;
    let origin = Origin::start_with("/a.jpg", jpeg(320, 240, 16)).await;
    let url = format!("{}/check", validator.base);
    let app = spawn_app_with(move |c| {
        c.security.admin_token = Some(TOKEN.into());
        c.fetch.allow_private_networks = false;
        c.moderation.validation_url = Some(url);
    })
    .await;
    // The guard refuses the loopback origin...
    let r = app.image_from(&origin, "/a.jpg", "w=100").await;
    assert_eq!(r.status(), 403);
    assert_eq!(origin.requests(), 0);
    // ...and the hook on loopback is asked all the same.
    assert_eq!(app.upload_as(TOKEN, jpeg(300, 200, 17)).await.status(), 201);
    assert_eq!(validator.calls.load(Ordering::SeqCst), 1);
}
