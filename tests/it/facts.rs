//! Placeholders and facts (issue 16, item 3): `info` and `format=json` answer `blurhash`,
//! `thumbhash`, `dominant_color`, `has_alpha`, `animated` and `frames`, computed once per
//! original in the background after it is stored and kept in the originals index: asking
//! for them decodes nothing.

use crate::common;

use std::path::Path;

use common::*;
use image::codecs::gif::GifEncoder;
use image::{Delay, Frame, Rgba, RgbaImage};

/// A 10-frame animated GIF, 60 × 40, each frame another shade, 100 ms apart.
fn animated_gif() -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut encoder = GifEncoder::new(&mut out);
        let frames = (0..10u8).map(|i| {
            let image = RgbaImage::from_pixel(60, 40, Rgba([i * 20, 100, 200 - i * 10, 255]));
            Frame::from_parts(image, 0, 0, Delay::from_numer_denom_ms(100, 1))
        });
        encoder.encode_frames(frames).unwrap();
    }
    out
}

/// Uploads `bytes`; their hash.
async fn stored(app: &TestApp, bytes: Vec<u8>) -> String {
    let r = app.upload(bytes).await;
    assert!(r.status().is_success(), "{}", r.status());
    json(r).await["hash"].as_str().unwrap().to_string()
}

fn has_placeholders(info: &serde_json::Value) -> bool {
    let blurhash = info["blurhash"].as_str().unwrap_or("");
    let thumbhash = info["thumbhash"].as_str().unwrap_or("");
    let colour = info["dominant_color"].as_str().unwrap_or("");
    blurhash.len() == 28 && !thumbhash.is_empty() && colour.len() == 7 && colour.starts_with('#')
}

#[tokio::test]
async fn facts_are_computed_once_when_stored_and_read_without_a_decode() {
    let origin = Origin::start().await;
    let app = spawn_app().await;
    let photo = stored(&app, jpeg(640, 480, 3)).await;
    let clear = stored(&app, png_rgba(64, 48)).await;
    let moving = stored(&app, animated_gif()).await;
    origin.put("/moving.gif", animated_gif());
    app.pipeline.settle().await;
    assert_eq!(app.stats().facts_computed, 3);

    let before = app.stats();
    let info = json(app.get(&format!("/v1/originals/{photo}/info")).await).await;
    assert!(has_placeholders(&info), "{info}");
    assert_eq!(
        (
            info["has_alpha"].clone(),
            info["animated"].clone(),
            info["frames"].clone()
        ),
        (false.into(), false.into(), 1.into())
    );
    let info = json(app.get(&format!("/v1/originals/{clear}/info")).await).await;
    assert!(has_placeholders(&info), "{info}");
    assert_eq!(info["has_alpha"], true);
    let info = json(app.get(&format!("/v1/originals/{moving}/info")).await).await;
    assert!(has_placeholders(&info), "{info}");
    assert_eq!(
        (info["animated"].clone(), info["frames"].clone()),
        (true.into(), 10.into())
    );

    // format=json by hash and by URL: the same facts, with the original's size.
    let by_hash = app.get(&format!("/v1/image/{moving}?format=json")).await;
    assert_eq!(by_hash.status(), 200);
    assert_eq!(header(&by_hash, "content-type"), Some("application/json"));
    let by_hash = json(by_hash).await;
    assert_eq!(by_hash, info);
    let by_url = app
        .image_from(&origin, "/moving.gif", "w=100&format=json")
        .await;
    assert_eq!(by_url.status(), 200);
    // Tagged like the original's images, so a CDN purge by tag drops it too.
    let tags = header(&by_url, "cache-tag").unwrap_or("").to_string();
    assert!(tags.starts_with(&format!("{moving},url-")), "{tags}");
    assert_eq!(
        header(&by_url, "x-imgcas-source-hash"),
        Some(moving.as_str())
    );
    let by_url = json(by_url).await;
    assert_eq!(
        (by_url["hash"].clone(), by_url["width"].clone()),
        (moving.as_str().into(), 60.into())
    );
    assert_eq!(by_url["blurhash"], info["blurhash"]);

    // None of that decoded or processed anything.
    let after = app.stats();
    assert_eq!(after.facts_computed, before.facts_computed);
    assert_eq!(after.decodes_original, before.decodes_original);
    assert_eq!(after.processing_runs, before.processing_runs);
}

/// One file of every format among the corpus's decodable rows: `info` has the placeholders.
#[tokio::test]
async fn every_format_of_the_corpus_gets_placeholders() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus");
    let Ok(text) = std::fs::read_to_string(root.join("EXPECTATIONS.tsv")) else {
        skip_unless_ci("every_format_of_the_corpus_gets_placeholders");
        return;
    };
    let mut picked: Vec<(String, String)> = Vec::new();
    for line in text.lines().skip(1) {
        let cols: Vec<&str> = line.split('\t').collect();
        let (Some(path), Some(expect), Some(format)) = (cols.first(), cols.get(1), cols.get(4))
        else {
            continue;
        };
        let decodable = matches!(*expect, "decode" | "decode_match_ref" | "decode_autorotate");
        if decodable && !format.is_empty() && !picked.iter().any(|(f, _)| f == format) {
            picked.push((format.to_string(), path.to_string()));
        }
    }
    assert!(picked.len() >= 8, "{picked:?}");
    let app = spawn_app().await;
    let mut hashes = Vec::new();
    for (format, path) in &picked {
        let bytes = std::fs::read(root.join(path)).unwrap();
        let r = app.upload(bytes).await;
        assert!(r.status().is_success(), "{format} {path}: {}", r.status());
        hashes.push((format, json(r).await["hash"].as_str().unwrap().to_string()));
    }
    app.pipeline.settle().await;
    for (format, hash) in hashes {
        let info = json(app.get(&format!("/v1/originals/{hash}/info")).await).await;
        assert!(has_placeholders(&info), "{format}: {info}");
    }
}

/// Audit #3, finding 8: every new original queued its facts and fingerprint as a task of its
/// own, and 100,000 uploads grew a node by hundreds of megabytes. Past
/// `limits.background_queue` waiting tasks, that work is left undone and counted; facts are
/// then computed when asked for.
#[tokio::test(flavor = "multi_thread")]
async fn background_work_past_its_bound_is_left_to_when_it_is_needed() {
    let app = spawn_app_with(|c| c.limits.background_queue = 1).await;
    let mut hashes = Vec::new();
    // Eight at a time (within the server's upload slots), so several wait behind the first.
    for batch in 0..3u8 {
        let uploads: Vec<_> = (0..8u8)
            .map(|i| app.upload(png(300, 200, batch * 8 + i)))
            .collect();
        for upload in futures_util::future::join_all(uploads).await {
            assert_eq!(upload.status(), 201);
            hashes.push(json(upload).await["hash"].as_str().unwrap().to_string());
        }
    }
    let dropped = metric_value(&app.metrics().await, "imgcas_background_dropped_total", &[]);
    assert!(dropped >= 1.0, "some background work was left: {dropped}");
    for hash in &hashes {
        let info = json(app.get(&format!("/v1/originals/{hash}/info")).await).await;
        assert!(has_placeholders(&info), "{hash}: {info}");
    }
    app.stop().await;
}
