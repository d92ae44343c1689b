//! Client hints (issue 16): `dpr=auto` and `w=auto` read `Sec-CH-DPR`, `Sec-CH-Width` and
//! `Save-Data`, resolved to concrete options before the variant is looked up, so a hint equal
//! to an explicit value is that value's variant (one processing run between them), and widths
//! are rounded up to a ladder. Image routes advertise the hints (`Accept-CH`) and answers list
//! the ones their options consulted in `Vary`.

use crate::common;

use common::*;

const ACCEPT_CH: &str = "Sec-CH-DPR, Sec-CH-Width, Save-Data";

async fn get_with(app: &TestApp, path: &str, hints: &[(&str, &str)]) -> reqwest::Response {
    let mut request = app.client.get(app.url(path));
    for (name, value) in hints {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

async fn stored(app: &TestApp, w: u32, h: u32) -> String {
    let r = app.upload(jpeg(w, h, 7)).await;
    let body = json(r).await;
    body["hash"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn dpr_auto_with_a_hint_of_two_is_dpr_two() {
    let app = spawn_app().await;
    let hash = stored(&app, 1200, 800).await;
    let explicit = get_with(&app, &format!("/v1/image/{hash}?w=200&dpr=2"), &[]).await;
    assert_eq!(explicit.status(), 200);
    assert_eq!(header(&explicit, "vary"), None);
    assert_eq!(header(&explicit, "accept-ch"), Some(ACCEPT_CH));
    let runs = app.stats().processing_runs;
    let auto = format!("/v1/image/{hash}?w=200&dpr=auto");
    let hinted = get_with(&app, &auto, &[("sec-ch-dpr", "2")]).await;
    assert_eq!(hinted.status(), 200);
    assert_eq!(app.stats().processing_runs, runs, "the same variant");
    assert_eq!(header(&hinted, "etag"), header(&explicit, "etag"));
    assert_eq!(header(&hinted, "x-imgcas-cache"), Some("hit"));
    assert_eq!(header(&hinted, "vary"), Some("Sec-CH-DPR, Save-Data"));
    assert_eq!(header(&hinted, "accept-ch"), Some(ACCEPT_CH));
    let bytes = hinted.bytes().await.unwrap();
    assert_eq!(bytes, explicit.bytes().await.unwrap());
    assert_eq!(dimensions(&bytes), (400, 267));

    // Without the hint: a ratio of 1. Odd ratios round up (2.625 → 3).
    let plain = get_with(&app, &auto, &[]).await;
    assert_eq!(dimensions(&plain.bytes().await.unwrap()), (200, 133));
    let odd = get_with(&app, &auto, &[("sec-ch-dpr", "2.625")]).await;
    assert_eq!(dimensions(&odd.bytes().await.unwrap()), (600, 400));
    // Repeats of each are answered alike (the request cache keys on the hints too).
    for (hints, size) in [
        (&[("sec-ch-dpr", "2")][..], (400, 267)),
        (&[][..], (200, 133)),
        (&[("sec-ch-dpr", "2.625")][..], (600, 400)),
    ] {
        let again = get_with(&app, &auto, hints).await;
        assert_eq!(header(&again, "x-imgcas-cache"), Some("hit"));
        assert_eq!(header(&again, "vary"), Some("Sec-CH-DPR, Save-Data"));
        assert_eq!(header(&again, "accept-ch"), Some(ACCEPT_CH));
        assert_eq!(dimensions(&again.bytes().await.unwrap()), size);
    }
}

#[tokio::test]
async fn w_auto_takes_the_width_hint_in_device_pixels_rounded_up_to_the_ladder() {
    let app = spawn_app().await;
    let hash = stored(&app, 1600, 1000).await;
    let auto = format!("/v1/image/{hash}?w=auto&format=png");
    // 700 device pixels → 750 on the ladder; a DPR hint does not multiply it.
    let hints = [("sec-ch-width", "700"), ("sec-ch-dpr", "2")];
    let hinted = get_with(&app, &auto, &hints).await;
    assert_eq!(hinted.status(), 200);
    assert_eq!(header(&hinted, "vary"), Some("Sec-CH-Width"));
    let explicit = get_with(&app, &format!("/v1/image/{hash}?w=750&format=png"), &[]).await;
    assert_eq!(header(&hinted, "etag"), header(&explicit, "etag"));
    assert_eq!(dimensions(&hinted.bytes().await.unwrap()), (750, 469));
    // Widths between two steps share the upper one's variant.
    let runs = app.stats().processing_runs;
    let near = get_with(&app, &auto, &[("sec-ch-width", "701")]).await;
    assert_eq!(dimensions(&near.bytes().await.unwrap()), (750, 469));
    assert_eq!(app.stats().processing_runs, runs);
    // No hint: the source's width.
    let plain = get_with(&app, &auto, &[]).await;
    assert_eq!(dimensions(&plain.bytes().await.unwrap()), (1600, 1000));
    // With both auto: the width is the hint's; the height is in CSS pixels, times the ratio.
    let both = format!("/v1/image/{hash}?w=auto&h=100&dpr=auto&fit=fill&format=png");
    let r = get_with(&app, &both, &hints).await;
    // PNG has no quality: Save-Data is not consulted.
    assert_eq!(header(&r, "vary"), Some("Sec-CH-DPR, Sec-CH-Width"));
    assert_eq!(dimensions(&r.bytes().await.unwrap()), (750, 200));
}

#[tokio::test]
async fn save_data_lowers_the_default_quality_of_requests_that_ask_for_hints() {
    let app = spawn_app().await;
    let hash = stored(&app, 1200, 800).await;
    let auto = format!("/v1/image/{hash}?w=auto&dpr=auto&format=jpeg");
    let hints = [("sec-ch-width", "300"), ("save-data", "on")];
    let saving = get_with(&app, &auto, &hints).await;
    let lowered = get_with(
        &app,
        &format!("/v1/image/{hash}?w=320&format=jpeg&q=67"),
        &[],
    )
    .await;
    assert_eq!(header(&saving, "etag"), header(&lowered, "etag"));
    let normal = get_with(&app, &auto, &hints[..1]).await;
    let default = get_with(&app, &format!("/v1/image/{hash}?w=320&format=jpeg"), &[]).await;
    assert_eq!(header(&normal, "etag"), header(&default, "etag"));
    assert_ne!(header(&normal, "etag"), header(&saving, "etag"));
    let (small, large) = (saving.bytes().await.unwrap(), normal.bytes().await.unwrap());
    assert!(
        small.len() < large.len(),
        "{} < {}",
        small.len(),
        large.len()
    );
    // An explicit q wins, and Save-Data is then not consulted.
    let fixed = format!("/v1/image/{hash}?w=auto&format=jpeg&q=90");
    let a = get_with(&app, &fixed, &hints).await;
    let b = get_with(&app, &fixed, &hints[..1]).await;
    assert_eq!(header(&a, "etag"), header(&b, "etag"));
    assert_eq!(header(&a, "vary"), Some("Sec-CH-Width"));
    // A fixed request reads no hints at all.
    let c = get_with(&app, &format!("/v1/image/{hash}?w=320&format=jpeg"), &hints).await;
    assert_eq!(header(&c, "etag"), header(&default, "etag"));
    assert_eq!(header(&c, "vary"), None);
}

#[tokio::test]
async fn image_routes_advertise_the_hints_on_errors_too_and_refuse_bad_values() {
    let app = spawn_app().await;
    let hash = stored(&app, 64, 48).await;
    let bad = get_with(&app, &format!("/v1/image/{hash}?w=wide"), &[]).await;
    assert_eq!(bad.status(), 400);
    assert_eq!(header(&bad, "accept-ch"), Some(ACCEPT_CH));
    let body = json(bad).await;
    assert_eq!(body["error"]["code"], "invalid_option");
    let auto_h = get_with(&app, &format!("/v1/image/{hash}?h=auto"), &[]).await;
    assert_eq!(auto_h.status(), 400);
    // Nonsense hints are as if absent.
    let odd = get_with(
        &app,
        &format!("/v1/image/{hash}?w=auto&dpr=auto&format=png"),
        &[("sec-ch-width", "-5"), ("sec-ch-dpr", "NaN")],
    )
    .await;
    assert_eq!(odd.status(), 200);
    assert_eq!(dimensions(&odd.bytes().await.unwrap()), (64, 48));
    // Other routes do not advertise them.
    let health = app.get("/healthz").await;
    assert_eq!(header(&health, "accept-ch"), None);
}
