//! Decode once (SPEC extension, issue 15): a large original is decoded once however many specs
//! of it are asked together, its mezzanine serves the small outputs, and none of that changes
//! a variant's bytes — a variant made inside a burst, after its mezzanine was stored, after
//! the mezzanine and the variant were evicted, in another app, or offline by
//! `processors::process` is the same bytes.

mod common;

use common::*;
use imgcas_processors::{OutputFormat, Spec};

/// Widths of one `srcset`: the three small ones are made from the mezzanine (2000 wide), the
/// largest (1280: the mezzanine has less than twice its resolution) from the original, at
/// the scale the mezzanine's build decodes it at (full: both reduce by less than 4).
const WIDTHS: [u32; 4] = [320, 640, 960, 1280];

/// A 12 MP JPEG (4000×3000): large enough for a mezzanine.
fn large_photo(seed: u8) -> Vec<u8> {
    encode(&rgb_image(4000, 3000, seed), image::ImageFormat::Jpeg)
}

fn query(width: u32) -> String {
    format!("w={width}&format=jpeg")
}

/// What `imgcas process` makes of the original for one width: the bytes every path must give.
fn offline(original: &[u8], width: u32) -> Vec<u8> {
    let spec = Spec::from_pairs([("w", width.to_string().as_str()), ("format", "jpeg")])
        .unwrap()
        .resolve(Some(OutputFormat::Jpeg), false, None);
    imgcas_processors::process(original, &spec, &Default::default())
        .expect("processes")
        .bytes
}

async fn upload_hash(app: &TestApp, bytes: &[u8]) -> String {
    let response = app.upload(bytes.to_vec()).await;
    assert_eq!(response.status(), 201, "upload");
    json(response).await["hash"]
        .as_str()
        .expect("hash")
        .to_string()
}

async fn variant(app: &TestApp, hash: &str, width: u32) -> Vec<u8> {
    let response = app.get(&format!("/v1/image/{hash}?{}", query(width))).await;
    assert_eq!(response.status(), 200, "w={width}");
    response.bytes().await.expect("body").to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_srcset_burst_decodes_the_original_once_and_matches_offline_bytes() {
    let original = large_photo(7);
    let expected: Vec<Vec<u8>> = WIDTHS.iter().map(|w| offline(&original, *w)).collect();

    let app = spawn_app().await;
    let hash = upload_hash(&app, &original).await;
    let before = app.stats();
    let burst = WIDTHS.map(|w| {
        let (client, url) = (
            app.client.clone(),
            app.url(&format!("/v1/image/{hash}?{}", query(w))),
        );
        tokio::spawn(async move {
            let response = client.get(url).send().await.expect("request");
            assert_eq!(response.status(), 200);
            response.bytes().await.expect("body").to_vec()
        })
    });
    let mut made = Vec::new();
    for task in burst {
        made.push(task.await.expect("task"));
    }
    let after = app.stats();
    assert_eq!(
        after.decodes_original - before.decodes_original,
        1,
        "one decode of the original for the whole burst"
    );
    assert_eq!(after.mezzanines_built - before.mezzanines_built, 1);
    // The three small widths decoded the mezzanine (each at its own scale, or shared).
    assert!(after.decodes_mezzanine - before.decodes_mezzanine >= 1);
    for ((width, made), expected) in WIDTHS.iter().zip(&made).zip(&expected) {
        assert_eq!(dimensions(made).0, *width);
        assert!(
            made == expected,
            "w={width}: the burst's bytes differ from offline"
        );
    }

    // A second spec of the stored original: from the mezzanine, no decode of the original.
    let decodes = app.stats().decodes_original;
    let second = variant(&app, &hash, 480).await;
    assert_eq!(app.stats().decodes_original, decodes);
    assert!(second == offline(&original, 480));

    let metrics = app.metrics().await;
    assert_eq!(
        metric_value(
            &metrics,
            "imgcas_source_decodes_total",
            &[("from", "original")]
        ),
        app.stats().decodes_original as f64
    );
    app.stop().await;
}

#[tokio::test]
async fn one_at_a_time_in_another_order_and_after_eviction_the_bytes_are_the_same() {
    let original = large_photo(11);
    // One at a time, the largest first: the mezzanine is built by the first small width.
    let app = spawn_app().await;
    let hash = upload_hash(&app, &original).await;
    for width in WIDTHS.iter().rev() {
        let made = variant(&app, &hash, *width).await;
        assert!(made == offline(&original, *width), "w={width}");
    }
    assert_eq!(app.stats().mezzanines_built, 1);
    app.stop().await;

    // With room for almost nothing, each variant and the mezzanine are evicted as soon as
    // they are stored: every request rebuilds them, to the same bytes.
    let app = spawn_app_with(|c| {
        c.limits.variants_max_bytes = 1;
        c.limits.hot_cache_bytes = 0;
    })
    .await;
    let hash = upload_hash(&app, &original).await;
    let first = variant(&app, &hash, 640).await;
    // The mezzanine is stored behind the answer (on shared maps, possibly after the
    // variant's own eviction pass): once it is, hold the store to the budget again, as the
    // next upkeep would, so the second request finds neither.
    app.pipeline.settle().await;
    app.pipeline.keep_variants_within_budget().await.unwrap();
    let again = variant(&app, &hash, 640).await;
    assert!(first == again && first == offline(&original, 640));
    assert!(
        app.stats().mezzanines_built >= 2,
        "the evicted mezzanine was rebuilt"
    );
    app.stop().await;
}

#[tokio::test]
async fn small_or_transparent_originals_have_no_mezzanine() {
    let app = spawn_app().await;
    let small = jpeg(1600, 1200, 3);
    let hash = upload_hash(&app, &small).await;
    variant(&app, &hash, 320).await;
    let alpha = encode(
        &image::DynamicImage::ImageRgba8(image::RgbaImage::from_pixel(
            3200,
            2400,
            image::Rgba([10, 20, 30, 128]),
        )),
        image::ImageFormat::Png,
    );
    let hash = upload_hash(&app, &alpha).await;
    let response = app.get(&format!("/v1/image/{hash}?w=320&format=png")).await;
    assert_eq!(response.status(), 200);
    let stats = app.stats();
    assert_eq!((stats.mezzanines_built, stats.decodes_mezzanine), (0, 0));
    assert_eq!(stats.decodes_original, 2);
    app.stop().await;
}

#[tokio::test]
async fn with_the_mezzanine_off_every_width_decodes_the_original() {
    let original = large_photo(5);
    let app = spawn_app_with(|c| {
        c.limits.mezzanine = false;
        c.limits.decode_cache_bytes = 0;
    })
    .await;
    let hash = upload_hash(&app, &original).await;
    for width in WIDTHS {
        variant(&app, &hash, width).await;
    }
    let stats = app.stats();
    assert_eq!((stats.mezzanines_built, stats.decodes_original), (0, 4));
    app.stop().await;
}
