//! Decode once (docs/performance.md, issues 15 and 27): a large original is decoded as few times
//! as its specs need however many are asked together, and none of that changes a variant's
//! bytes — a variant made inside a burst, after a mezzanine was stored, after the mezzanine
//! and the variant were evicted, in another app, or offline by `processors::process` is the
//! same bytes. Originals that cannot shrink on load (PNG here) are decoded once and their
//! mezzanine serves the small outputs; JPEG originals build no mezzanine: each output
//! decodes at its own DCT scale, and outputs at one scale share that decode. A new
//! original's facts and fingerprint take the reduction of the request's decode.

use crate::common;

use common::*;
use imgcas_processors::{OutputFormat, Spec};

/// Widths of one `srcset` of a 4000 px PNG: the two small ones are made from the mezzanine
/// (2000 wide), the larger ones (the mezzanine has less than four times their resolution)
/// from the original, whose whole decode the mezzanine's build shares.
const WIDTHS: [u32; 4] = [320, 480, 960, 1280];

/// Widths of one `srcset` of a 4000 px JPEG: they decode at 1/4, 1/2, 1/2 and 1 (twice the
/// output's resolution kept).
const JPEG_WIDTHS: [u32; 4] = [320, 640, 960, 1280];

/// A 12 MP PNG (4000×3000): large enough for a mezzanine.
fn large_photo(seed: u8) -> Vec<u8> {
    png(4000, 3000, seed)
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

/// The widths of one original asked all at once; their bodies, in order.
async fn burst(app: &TestApp, hash: &str, widths: &[u32]) -> Vec<Vec<u8>> {
    let tasks: Vec<_> = widths
        .iter()
        .map(|w| {
            let (client, url) = (
                app.client.clone(),
                app.url(&format!("/v1/image/{hash}?{}", query(*w))),
            );
            tokio::spawn(async move {
                let response = client.get(url).send().await.expect("request");
                assert_eq!(response.status(), 200);
                response.bytes().await.expect("body").to_vec()
            })
        })
        .collect();
    let mut made = Vec::new();
    for task in tasks {
        made.push(task.await.expect("task"));
    }
    made
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_srcset_burst_decodes_the_original_once_and_matches_offline_bytes() {
    let original = large_photo(7);
    let expected: Vec<Vec<u8>> = WIDTHS.iter().map(|w| offline(&original, *w)).collect();

    let app = spawn_app().await;
    let hash = upload_hash(&app, &original).await;
    // The upload's facts and fingerprint share a decode of their own, behind its answer.
    app.pipeline.settle().await;
    let before = app.stats();
    let made = burst(&app, &hash, &WIDTHS).await;
    let after = app.stats();
    assert_eq!(
        after.decodes_original - before.decodes_original,
        1,
        "one decode of the original for the whole burst"
    );
    assert_eq!(after.mezzanines_built - before.mezzanines_built, 1);
    // The two small widths decoded the mezzanine (each at its own scale, or shared).
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
    let second = variant(&app, &hash, 400).await;
    assert_eq!(app.stats().decodes_original, decodes);
    assert!(second == offline(&original, 400));

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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_jpeg_srcset_burst_builds_no_mezzanine_and_shares_decodes_of_one_scale() {
    let original = jpeg(4000, 3000, 9);
    let expected: Vec<Vec<u8>> = JPEG_WIDTHS.iter().map(|w| offline(&original, *w)).collect();
    let app = spawn_app().await;
    let hash = upload_hash(&app, &original).await;
    app.pipeline.settle().await;
    let before = app.stats();
    let made = burst(&app, &hash, &JPEG_WIDTHS).await;
    let after = app.stats();
    assert_eq!(
        after.mezzanines_built, 0,
        "JPEG originals have no mezzanine"
    );
    assert_eq!(after.decodes_mezzanine, 0);
    // Three scales (1/4, 1/2, 1): 640 and 960 share the decode at 1/2.
    assert_eq!(after.decodes_original - before.decodes_original, 3);
    for ((width, made), expected) in JPEG_WIDTHS.iter().zip(&made).zip(&expected) {
        assert_eq!(dimensions(made).0, *width);
        assert!(
            made == expected,
            "w={width}: the burst's bytes differ from offline"
        );
    }
    // One at a time, nothing shared: the same bytes again.
    let app2 = spawn_app_with(|c| c.limits.decode_cache_bytes = 0).await;
    let hash2 = upload_hash(&app2, &original).await;
    for (width, expected) in JPEG_WIDTHS.iter().zip(&expected) {
        assert!(
            variant(&app2, &hash2, *width).await == *expected,
            "w={width}"
        );
    }
    assert_eq!(app2.stats().mezzanines_built, 0);
    app2.stop().await;
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
    let first = variant(&app, &hash, 480).await;
    // The mezzanine is stored behind the answer (on shared maps, possibly after the
    // variant's own eviction pass): once it is, hold the store to the budget again, as the
    // next upkeep would, so the second request finds neither.
    app.pipeline.settle().await;
    app.pipeline.keep_variants_within_budget().await.unwrap();
    let again = variant(&app, &hash, 480).await;
    assert!(first == again && first == offline(&original, 480));
    assert!(
        app.stats().mezzanines_built >= 2,
        "the evicted mezzanine was rebuilt"
    );
    app.stop().await;
}

#[tokio::test]
async fn small_or_transparent_originals_have_no_mezzanine() {
    let app = spawn_app().await;
    let small = png(1600, 1200, 3);
    let hash = upload_hash(&app, &small).await;
    // The upload's facts and fingerprint are done (their decode dropped) before the run.
    app.pipeline.settle().await;
    let before = app.stats().decodes_original;
    variant(&app, &hash, 320).await;
    let first = app.stats().decodes_original;
    let alpha = encode(
        &image::DynamicImage::ImageRgba8(image::RgbaImage::from_pixel(
            3200,
            2400,
            image::Rgba([10, 20, 30, 128]),
        )),
        image::ImageFormat::Png,
    );
    let hash = upload_hash(&app, &alpha).await;
    app.pipeline.settle().await;
    let between = app.stats().decodes_original;
    let response = app.get(&format!("/v1/image/{hash}?w=320&format=png")).await;
    assert_eq!(response.status(), 200);
    let stats = app.stats();
    assert_eq!((stats.mezzanines_built, stats.decodes_mezzanine), (0, 0));
    // One decode each: the first run; the second upload's facts and fingerprint, which
    // share theirs; the second run.
    assert_eq!(
        (
            first - before,
            between - first,
            stats.decodes_original - between
        ),
        (1, 1, 1)
    );
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
    // The upload's facts and fingerprint each decode it too (nothing is shared here).
    app.pipeline.settle().await;
    let before = app.stats().decodes_original;
    for width in WIDTHS {
        variant(&app, &hash, width).await;
    }
    let stats = app.stats();
    assert_eq!(
        (stats.mezzanines_built, stats.decodes_original - before),
        (0, 4)
    );
    app.stop().await;
}

/// A new original's facts and fingerprint need its small decode (1/8 of a 4000 × 3000 JPEG);
/// the request that downloaded it decodes it larger (1/1 for 1280 px) and leaves them a
/// reduction of that decode: one decode in all, where there were two. The request's bytes,
/// and those of a width decoded at the small scale next, are offline's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_originals_facts_and_fingerprint_take_the_requests_decode() {
    let original = jpeg(4000, 3000, 13);
    let origin = Origin::start_with("/photo.jpg", original.clone()).await;
    let app = spawn_app().await;
    let response = app
        .image_by_url(&origin.url("/photo.jpg"), &query(1280))
        .await;
    assert_eq!(response.status(), 200);
    assert!(response.bytes().await.expect("body") == offline(&original, 1280));
    app.pipeline.settle().await;
    let stats = app.stats();
    assert_eq!((stats.facts_computed, stats.fingerprints_computed), (1, 1));
    assert_eq!(stats.small_decodes_spared, 1);
    assert_eq!(
        stats.decodes_original, 1,
        "the facts and the fingerprint decoded nothing of their own"
    );
    let response = app
        .image_by_url(&origin.url("/photo.jpg"), &query(200))
        .await;
    assert_eq!(response.status(), 200);
    assert!(response.bytes().await.expect("body") == offline(&original, 200));
    app.stop().await;
}

/// Which of an original's variants its mezzanine serves can hang on the orientation: at 450
/// px wide, a 4000 × 3000 picture upright keeps the margin the mezzanine needs, the same
/// picture turned a quarter does not. The originals index keeps the upright size, so routing
/// such a spec reads nothing of the original: with its blob gone, a fresh process (nothing
/// in memory) still makes the variant from the stored mezzanine, as offline makes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn routing_by_orientation_reads_nothing_of_the_original() {
    let original = large_photo(11);
    let storage = Restartable::new().await;
    let on_disk = |c: &mut imgcas::config::Config| {
        c.storage.backend = imgcas::config::StorageBackend::Fs;
        c.maps.url = None;
    };
    let app = storage.spawn(on_disk).await;
    let hash = upload_hash(&app, &original).await;
    // 300 px is made from the mezzanine whichever way the picture is turned: its build
    // stores the mezzanine.
    variant(&app, &hash, 300).await;
    assert_eq!(app.stats().mezzanines_built, 1);
    app.pipeline.settle().await;
    app.stop().await;

    let id: imgcas::hash::ContentHash = hash.parse().expect("a hash");
    std::fs::remove_file(storage.path().join(imgcas::blob::key_for(&id)))
        .expect("the original's blob");
    let app = storage.spawn(on_disk).await;
    let made = variant(&app, &hash, 450).await;
    assert!(made == offline(&original, 450), "w=450 as offline makes it");
    let stats = app.stats();
    assert_eq!(
        (stats.mezzanines_built, stats.decodes_original),
        (0, 0),
        "made from the stored mezzanine"
    );
    app.stop().await;
}

/// Issue 51: a variant's run is planned once (geometry, route, cost and processor version,
/// `processors::plan`) when it is located, and the run takes that plan: one plan for a cold
/// request by URL, none more for the same request again, and one per width of a srcset
/// burst — routed by mezzanine or not — however the runs share their decodes. (A burst's
/// answers may be 503 on a starved machine: a run refused or cut short was planned too.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_variant_is_planned_once() {
    let origin = Origin::start_with("/photo.jpg", jpeg(1600, 1200, 3)).await;
    let app = spawn_app().await;
    let before = app.stats().plans_made;
    let response = app
        .image_from(&origin, "/photo.jpg", "w=400&format=webp")
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(app.stats().plans_made - before, 1, "one cold request");
    assert_eq!(app.processing_runs(), 1);
    let response = app
        .image_from(&origin, "/photo.jpg", "w=400&format=webp")
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        app.stats().plans_made - before,
        1,
        "the same request again: remembered with its plan"
    );

    for original in [large_photo(11), jpeg(4000, 3000, 12)] {
        let hash = upload_hash(&app, &original).await;
        app.pipeline.settle().await;
        let before = app.stats().plans_made;
        let asked = WIDTHS.map(|w| {
            let url = app.url(&format!("/v1/image/{hash}?{}", query(w)));
            let client = app.client.clone();
            tokio::spawn(async move { client.get(url).send().await.map(|r| r.status()) })
        });
        for answer in asked {
            let status = answer.await.expect("task").expect("answer");
            assert!(status == 200 || status == 503, "{status}");
        }
        assert_eq!(
            app.stats().plans_made - before,
            4,
            "a srcset burst of four widths"
        );
    }
    app.stop().await;
}
