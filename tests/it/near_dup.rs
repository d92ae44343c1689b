//! Near-duplicates through HTTP: fingerprints stored once per original, `similar` and `info`,
//! `near_duplicate_of` in uploads and ingest, and canonical mode serving a re-encoded copy's
//! variants from the first original. The copies are made with the `image` crate from real
//! photographs (`testdata/photos/`, Kodak PhotoCD, unrestricted use). Runs on the embedded
//! maps, and on PostgreSQL + S3 with `IMGCAS_TEST_MAPS=postgres` (CI runs both).

use crate::common;

use common::{header, json, spawn_app, spawn_app_with, Origin};
use image::codecs::jpeg::JpegEncoder;
use image::DynamicImage;
use imgcas::config::NearDedup;
use imgcas::hash::ContentHash;
use serde_json::Value;

fn photo(name: &str) -> Vec<u8> {
    common::testdata_photo(name)
}

fn reencoded(bytes: &[u8], quality: u8, scale: u32) -> Vec<u8> {
    let image = image::load_from_memory(bytes).unwrap();
    let image = if scale > 1 {
        image.resize_exact(
            image.width() / scale,
            image.height() / scale,
            image::imageops::FilterType::Triangle,
        )
    } else {
        image
    };
    let mut out = Vec::new();
    JpegEncoder::new_with_quality(&mut out, quality)
        .encode_image(&DynamicImage::ImageRgb8(image.to_rgb8()))
        .unwrap();
    out
}

fn as_png(bytes: &[u8]) -> Vec<u8> {
    common::encode(
        &image::load_from_memory(bytes).unwrap(),
        image::ImageFormat::Png,
    )
}

/// A photograph and a re-encoded copy of it, served by `origin` as `/first.jpg` and
/// `/copy.jpg`.
fn original_and_copy(origin: &Origin) -> (Vec<u8>, Vec<u8>) {
    let original = photo("kodak-02.jpg");
    let copy = reencoded(&original, 80, 1);
    origin.put("/first.jpg", original.clone());
    origin.put("/copy.jpg", copy.clone());
    (original, copy)
}

fn hash(bytes: &[u8]) -> String {
    ContentHash::of(bytes).to_string()
}

#[tokio::test]
async fn uploads_report_near_duplicates_and_similar_finds_them() {
    let app = spawn_app().await;
    let original = photo("kodak-02.jpg");
    let copy = reencoded(&original, 70, 1);
    let other = photo("kodak-15.jpg");

    let first = json(app.upload(original.clone()).await).await;
    assert_eq!(first["near_duplicate_of"], Value::Null, "{first}");
    let second = app.upload(copy.clone()).await;
    assert_eq!(second.status(), 201, "an upload keeps its own bytes");
    let second = json(second).await;
    assert_eq!(second["duplicate"], false);
    assert_eq!(second["near_duplicate_of"], hash(&original), "{second}");
    let third = json(app.upload(other.clone()).await).await;
    assert_eq!(third["near_duplicate_of"], Value::Null, "{third}");
    // Uploading the copy again: still a duplicate of itself, still near the original.
    let again = json(app.upload(copy.clone()).await).await;
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["near_duplicate_of"], hash(&original));

    let similar = json(
        app.get(&format!("/v1/originals/{}/similar", hash(&original)))
            .await,
    )
    .await;
    assert_eq!(similar["hash"], hash(&original));
    assert_eq!(similar["max_distance"], 8);
    let found = similar["similar"].as_array().unwrap();
    assert_eq!(
        found.len(),
        1,
        "the copy and not the other photo: {similar}"
    );
    assert_eq!(found[0]["hash"], hash(&copy));
    assert!(found[0]["distance"].as_u64().unwrap() <= 8);
    assert_eq!(found[0]["width"], 768);
    assert_eq!(found[0]["format"], "jpeg");
    assert_eq!(found[0]["bytes"], copy.len());

    let info = json(
        app.get(&format!("/v1/originals/{}/info", hash(&copy)))
            .await,
    )
    .await;
    assert_eq!(info["fingerprint"].as_str().unwrap().len(), 16, "{info}");
    assert_eq!(info["near_duplicates"], 1, "{info}");
    let info = json(
        app.get(&format!("/v1/originals/{}/info", hash(&other)))
            .await,
    )
    .await;
    assert_eq!(info["near_duplicates"], 0, "{info}");

    // One fingerprint per original, computed when it was first stored: the lookups since
    // computed none.
    assert_eq!(app.stats().fingerprints_computed, 3);
    assert_eq!(app.stats().near_duplicates_found, 1);
    let scrape = app.metrics().await;
    assert_eq!(
        common::metric_value(&scrape, "imgcas_near_duplicates_found_total", &[]),
        1.0
    );

    for (query, option) in [
        ("max_distance=17", "max_distance"),
        ("max_distance=x", "max_distance"),
        ("limit=0", "limit"),
        ("colour=red", "colour"),
    ] {
        let r = app
            .get(&format!(
                "/v1/originals/{}/similar?{query}",
                hash(&original)
            ))
            .await;
        assert_eq!(r.status(), 400, "{query}");
        let body = json(r).await;
        assert_eq!(body["error"]["code"], "invalid_option", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("`{option}`")), "{body}");
    }
    let r = app
        .get(&format!("/v1/originals/{}/similar", "0".repeat(64)))
        .await;
    assert_eq!(r.status(), 404);
    let stats = app.pipeline.stored_stats().await.unwrap();
    assert_eq!(
        (stats.near_clusters, stats.near_clustered_originals),
        (1, 2),
        "one cluster: the photo and its copy"
    );
    assert_eq!(
        stats.near_clustered_bytes,
        (original.len() + copy.len()) as u64
    );
    let limited = json(
        app.get(&format!(
            "/v1/originals/{}/similar?max_distance=16&limit=1",
            hash(&copy)
        ))
        .await,
    )
    .await;
    assert_eq!(limited["similar"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn similar_needs_the_admin_token_when_one_is_set() {
    let app =
        spawn_app_with(|c| c.security.admin_token = Some("near-dup-admin-token-0123456789".into()))
            .await;
    let original = photo("kodak-02.jpg");
    // Uploads are admin routes too.
    let r = app
        .client
        .post(app.url("/v1/originals"))
        .bearer_auth("near-dup-admin-token-0123456789")
        .body(original.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let path = format!("/v1/originals/{}/similar", hash(&original));
    assert_eq!(app.get(&path).await.status(), 401);
    let r = app
        .client
        .get(app.url(&path))
        .bearer_auth("near-dup-admin-token-0123456789")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn ingest_reports_near_duplicate_of() {
    let app = spawn_app().await;
    let origin = Origin::start().await;
    let original = photo("kodak-15.jpg");
    let half_png = as_png(&reencoded(&original, 92, 2));
    origin.put("/a.jpg", original.clone());
    origin.put("/b.png", half_png.clone());
    origin.put("/c.jpg", photo("kodak-02.jpg"));
    let ingest = |urls: Vec<String>| {
        let app = &app;
        async move {
            let r = app
                .post_json("/v1/ingest", &serde_json::json!({ "urls": urls }))
                .await;
            json(r).await
        }
    };
    let first = ingest(vec![origin.url("/a.jpg")]).await;
    assert_eq!(
        first["results"][0]["near_duplicate_of"],
        Value::Null,
        "{first}"
    );
    let second = ingest(vec![origin.url("/b.png"), origin.url("/c.jpg")]).await;
    assert_eq!(second["results"][0]["hash"], hash(&half_png), "{second}");
    assert_eq!(
        second["results"][0]["near_duplicate_of"],
        hash(&original),
        "{second}"
    );
    assert_eq!(second["results"][1]["near_duplicate_of"], Value::Null);
    assert_eq!(second["summary"]["near_duplicates"], 1, "{second}");
}

#[tokio::test]
async fn canonical_mode_serves_a_copy_from_the_first_original() {
    let app = spawn_app_with(|c| c.dedup.near = NearDedup::Canonical).await;
    let origin = Origin::start().await;
    let original = photo("kodak-02.jpg");
    let copy = reencoded(&original, 80, 1);
    let smaller = reencoded(&original, 90, 2);
    origin.put("/first.jpg", original.clone());
    origin.put("/copy.jpg", copy.clone());

    let a = app
        .image_from(&origin, "/first.jpg", "w=200&format=png")
        .await;
    assert_eq!(a.status(), 200);
    assert_eq!(header(&a, "x-imgcas-canonical"), None);
    let a_bytes = a.bytes().await.unwrap();
    assert_eq!(app.processing_runs(), 1);

    let b = app
        .image_from(&origin, "/copy.jpg", "w=200&format=png")
        .await;
    assert_eq!(b.status(), 200);
    assert_eq!(
        header(&b, "x-imgcas-canonical"),
        Some(hash(&original).as_str())
    );
    assert_eq!(
        header(&b, "x-imgcas-source-hash"),
        Some(hash(&copy).as_str())
    );
    assert_eq!(
        b.bytes().await.unwrap(),
        a_bytes,
        "the first original's variant"
    );
    assert_eq!(app.processing_runs(), 1, "one processing run for both URLs");
    let stored = app.stored_blobs().await;
    assert!(stored.contains(&ContentHash::of(&original)));
    assert!(
        !stored.contains(&ContentHash::of(&copy)),
        "the copy's bytes are not stored"
    );
    assert_eq!(app.downloads(), 2);

    // The copy's own hash is an alias of the original's.
    let by_hash = app
        .get(&format!("/v1/image/{}?w=200&format=png", hash(&copy)))
        .await;
    assert_eq!(by_hash.status(), 200);
    assert_eq!(
        header(&by_hash, "x-imgcas-canonical"),
        Some(hash(&original).as_str())
    );
    assert_eq!(by_hash.bytes().await.unwrap(), a_bytes);
    assert_eq!(app.processing_runs(), 1);

    // A smaller copy is served from the larger original too; a larger one never is from
    // a smaller (here: the original served first at half size).
    origin.put("/small.jpg", smaller.clone());
    let c = app
        .image_from(&origin, "/small.jpg", "w=100&format=png")
        .await;
    assert_eq!(
        header(&c, "x-imgcas-canonical"),
        Some(hash(&original).as_str())
    );

    // Decided afresh when the origin's bytes change: other pictures map to themselves.
    origin.put("/copy.jpg", photo("kodak-15.jpg"));
    let fresh = app
        .post_json(
            "/v1/ingest",
            &serde_json::json!({ "urls": [origin.url("/copy.jpg")] }),
        )
        .await;
    let fresh = json(fresh).await;
    assert_eq!(fresh["results"][0]["status"], "changed", "{fresh}");
    let d = app
        .image_from(&origin, "/copy.jpg", "w=200&format=png")
        .await;
    assert_eq!(d.status(), 200);
    assert_eq!(header(&d, "x-imgcas-canonical"), None);
    assert_eq!(
        header(&d, "x-imgcas-source-hash"),
        Some(hash(&photo("kodak-15.jpg")).as_str())
    );
}

#[tokio::test]
async fn report_mode_never_maps_a_url_elsewhere() {
    let app = spawn_app().await;
    let origin = Origin::start().await;
    let original = photo("kodak-02.jpg");
    let copy = reencoded(&original, 80, 1);
    origin.put("/first.jpg", original);
    origin.put("/copy.jpg", copy.clone());
    app.image_from(&origin, "/first.jpg", "w=200").await;
    let b = app.image_from(&origin, "/copy.jpg", "w=200").await;
    assert_eq!(b.status(), 200);
    assert_eq!(header(&b, "x-imgcas-canonical"), None);
    assert_eq!(
        header(&b, "x-imgcas-source-hash"),
        Some(hash(&copy).as_str())
    );
    assert_eq!(app.processing_runs(), 2);
}

/// Issue 28, item 8: in canonical mode a takedown of an original holds for the copies merged
/// into it, and for new copies of it. Before, after `DELETE /v1/originals/<C>`, a URL whose
/// bytes O had been merged into C downloaded O again and served it (200), as did
/// `/v1/image/<O>` and `/v1/originals/<O>`.
#[tokio::test]
async fn a_takedown_in_canonical_mode_holds_for_merged_and_new_copies() {
    const TOKEN: &str = "near-dup-admin-token-0123456789";
    let app = spawn_app_with(|c| {
        c.dedup.near = NearDedup::Canonical;
        c.security.admin_token = Some(TOKEN.into());
    })
    .await;
    let origin = Origin::start().await;
    let (original, copy) = original_and_copy(&origin);
    let a = app.image_from(&origin, "/first.jpg", "w=200").await;
    assert_eq!(a.status(), 200);
    let b = app.image_from(&origin, "/copy.jpg", "w=200").await;
    assert_eq!(
        header(&b, "x-imgcas-canonical"),
        Some(hash(&original).as_str())
    );

    let r = app
        .delete_as(&format!("/v1/originals/{}", hash(&original)), TOKEN)
        .await;
    assert_eq!(r.status(), 200);

    // The merged URL, its own bytes by hash, and its original: all refused.
    let r = app.image_from(&origin, "/copy.jpg", "w=200").await;
    assert_eq!(r.status(), 451, "the merged URL");
    let r = app.get(&format!("/v1/image/{}?w=200", hash(&copy))).await;
    assert_eq!(r.status(), 451, "the merged bytes by hash");
    let r = app.get(&format!("/v1/originals/{}", hash(&copy))).await;
    assert_eq!(r.status(), 451, "the merged bytes as an original");
    let r = app.image_from(&origin, "/first.jpg", "w=200").await;
    assert_eq!(r.status(), 451, "the original's own URL");

    // A copy never seen before (another re-encode, a PNG of it) is refused too, and stored
    // nowhere; another picture is served.
    for (path, bytes) in [
        ("/third.jpg", reencoded(&original, 60, 1)),
        ("/fourth.png", as_png(&reencoded(&original, 95, 2))),
    ] {
        origin.put(path, bytes.clone());
        let r = app.image_by_url(&origin.url(path), "w=200").await;
        assert_eq!(r.status(), 451, "{path}");
        assert!(!app.stored_blobs().await.contains(&ContentHash::of(&bytes)));
    }
    origin.put("/other.jpg", photo("kodak-15.jpg"));
    let r = app.image_from(&origin, "/other.jpg", "w=200").await;
    assert_eq!(r.status(), 200);
}

/// Issue 71: in canonical mode a focal point set by a merged copy's own hash is set on the
/// canonical original, whose variants that hash is served from.
#[tokio::test]
async fn a_focal_point_set_by_a_merged_copys_hash_is_the_canonical_originals() {
    let app = spawn_app_with(|c| c.dedup.near = NearDedup::Canonical).await;
    let origin = Origin::start().await;
    let (original, copy) = original_and_copy(&origin);
    assert_eq!(
        app.image_from(&origin, "/first.jpg", "w=200")
            .await
            .status(),
        200
    );
    let b = app.image_from(&origin, "/copy.jpg", "w=200").await;
    assert_eq!(
        header(&b, "x-imgcas-canonical"),
        Some(hash(&original).as_str())
    );
    let cover = format!("/v1/image/{}?w=100&h=100&fit=cover", hash(&copy));
    let etag = |r: &reqwest::Response| header(r, "etag").map(str::to_string);
    let before = etag(&app.get(&cover).await);
    let focus = app.url(&format!("/v1/originals/{}/focus", hash(&copy)));
    let set = app.client.put(focus).body(r#"{"x": 0.1, "y": 0.5}"#);
    let set = set.send().await.expect("request");
    assert_eq!(set.status(), 200);
    assert_eq!(json(set).await["hash"], Value::from(hash(&original)));
    let info = json(
        app.get(&format!("/v1/originals/{}/info", hash(&original)))
            .await,
    )
    .await;
    assert_eq!(info["focus"]["x"], Value::from(0.1));
    let after = etag(&app.get(&cover).await);
    assert!(
        after.is_some() && after != before,
        "the copy's crop is placed on the point"
    );
}

/// `bytes` decoded, with a filled rectangle of `area` of the picture at (`fx`, `fy`) of its
/// free width and height, drawn by `paint(x, y)` relative to the rectangle, as a JPEG q90.
fn edited(
    bytes: &[u8],
    area: f64,
    (fx, fy): (f64, f64),
    paint: impl Fn(u32, u32) -> [u8; 3],
) -> Vec<u8> {
    let mut rgb = image::load_from_memory(bytes).unwrap().to_rgb8();
    let (w, h) = rgb.dimensions();
    let (pw, ph) = (
        (f64::from(w) * area.sqrt()) as u32,
        (f64::from(h) * area.sqrt()) as u32,
    );
    let (x0, y0) = (
        (f64::from(w - pw) * fx) as u32,
        (f64::from(h - ph) * fy) as u32,
    );
    for y in 0..ph {
        for x in 0..pw {
            rgb.put_pixel(x0 + x, y0 + y, image::Rgb(paint(x, y)));
        }
    }
    let mut out = Vec::new();
    JpegEncoder::new_with_quality(&mut out, 90)
        .encode_image(&DynamicImage::ImageRgb8(rgb))
        .unwrap();
    out
}

/// Issue 28, item 7: canonical mode merges a copy only when its pixels are the same picture
/// everywhere. Edited copies that the fingerprint alone would merge (checked here: each is
/// within the canonical guards of the photo) — a line of text, a white box, a logo, over 1–2 %
/// of the picture — are stored and served as themselves; a re-encode still merges.
#[tokio::test]
async fn canonical_mode_never_merges_an_edited_copy() {
    use imgcas_processors::fingerprint::{fingerprint, Guards};
    use imgcas_processors::{Decode, Limits};
    let app = spawn_app_with(|c| c.dedup.near = NearDedup::Canonical).await;
    let original = photo("kodak-02.jpg");
    let origin = Origin::start_with("/photo.jpg", original.clone()).await;
    let r = app.image_from(&origin, "/photo.jpg", "w=64").await;
    assert_eq!(r.status(), 200);

    let fp = |b: &[u8]| fingerprint(b, &Limits::default(), &Decode).unwrap();
    let guards = Guards::canonical(4);
    // Each within the canonical guards of the photo (asserted below): a merge the
    // fingerprint alone would have made. (The corpus measure covers boxes and other places:
    // `processors/tests/it/near_dup_accuracy.rs`.)
    let text = |x: u32, y: u32| {
        if (x / 3 + y / 5).is_multiple_of(3) {
            [15, 15, 15]
        } else {
            [235, 235, 235]
        }
    };
    let logo = |x: u32, y: u32| {
        if (x / 6 + y / 6).is_multiple_of(2) {
            [200, 30, 40]
        } else {
            [250, 210, 40]
        }
    };
    let edits = [
        (
            "text-2pct-corner",
            edited(&original, 0.02, (0.97, 0.03), text),
        ),
        (
            "text-1pct-corner",
            edited(&original, 0.01, (0.97, 0.03), text),
        ),
        (
            "logo-1pct-centre",
            edited(&original, 0.01, (0.5, 0.5), logo),
        ),
        (
            "logo-2pct-corner",
            edited(&original, 0.02, (0.97, 0.03), logo),
        ),
    ];
    for (name, bytes) in &edits {
        assert!(
            fp(&original).matches(&fp(bytes), &guards),
            "{name}: no longer a fingerprint match"
        );
        origin.put(&format!("/{name}.jpg"), bytes.clone());
        let r = app
            .image_by_url(&origin.url(&format!("/{name}.jpg")), "w=64")
            .await;
        assert_eq!(r.status(), 200, "{name}");
        assert_eq!(
            header(&r, "x-imgcas-canonical"),
            None,
            "{name} was merged into the photo"
        );
        assert_eq!(
            header(&r, "x-imgcas-source-hash"),
            Some(hash(bytes).as_str())
        );
    }
    // At least one refusal each (an edit stored before is a candidate for the next too).
    let refused = app.metrics().await;
    let refused = common::metric_value(&refused, "imgcas_near_merges_refused_total", &[]);
    assert!(refused >= edits.len() as f64, "{refused}");
    // A re-encode is the same picture: merged.
    origin.put("/copy.jpg", reencoded(&original, 75, 1));
    let r = app.image_from(&origin, "/copy.jpg", "w=64").await;
    assert_eq!(
        header(&r, "x-imgcas-canonical"),
        Some(hash(&original).as_str())
    );
}
