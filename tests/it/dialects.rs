//! The peers' URLs (issue 30): an imgproxy URL and the native URL of the same output are one
//! variant, processed once; signatures are imgproxy's own; options imgcas cannot honour are
//! refused by name.

use crate::common;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use common::*;

/// imgproxy's signature of `path` under a key and salt (hex), computed here with the
/// crates directly, as imgproxy's documentation describes it.
fn imgproxy_signature(key_hex: &str, salt_hex: &str, path: &str) -> String {
    use hmac::{KeyInit, Mac};
    let key = hex::decode(key_hex).unwrap();
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(&hex::decode(salt_hex).unwrap());
    mac.update(path.as_bytes());
    URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

#[tokio::test]
async fn an_imgproxy_url_and_the_native_url_are_one_variant() {
    let app = spawn_app().await;
    let (_origin, source) = Origin::serving("/photo.jpg", jpeg(640, 480, 5)).await;

    let plain = app
        .get(&format!(
            "/imgproxy/insecure/rs:fill:200:100/g:sm/plain/{source}@webp"
        ))
        .await;
    assert_eq!(plain.status(), 200);
    assert_eq!(header(&plain, "content-type"), Some("image/webp"));
    let etag = header(&plain, "etag").unwrap().to_string();
    assert_eq!(dimensions(&plain.bytes().await.unwrap()), (200, 100));
    assert_eq!(app.processing_runs(), 1);

    let native = app
        .image_by_url(&source, "w=200&h=100&fit=crop&gravity=smart&format=webp")
        .await;
    assert_eq!(native.status(), 200);
    assert_eq!(header(&native, "etag"), Some(etag.as_str()));
    assert_eq!(app.processing_runs(), 1, "one variant, processed once");

    // The Base64 form, split in segments as imgproxy's examples write it.
    let encoded = URL_SAFE_NO_PAD.encode(source.as_bytes());
    let (a, b) = encoded.split_at(encoded.len() / 2);
    let base64 = app
        .get(&format!("/imgproxy/unsafe/w:160/q:70/{a}/{b}.jpg"))
        .await;
    assert_eq!(base64.status(), 200);
    let etag = header(&base64, "etag").unwrap().to_string();
    let native = app.image_by_url(&source, "w=160&q=70&format=jpeg").await;
    assert_eq!(header(&native, "etag"), Some(etag.as_str()));
    assert_eq!(app.processing_runs(), 2);
    app.stop().await;
}

#[tokio::test]
async fn imgproxy_signatures_are_checked_and_options_refused_by_name() {
    // imgproxy's documentation: key `secret`, salt `hello`.
    let (key, salt) = ("736563726574", "68656C6C6F");
    let app = spawn_app_with(|c| {
        c.imgproxy.key = Some(format!("{},{key}", "00".repeat(16)));
        c.imgproxy.salt = Some(format!("{},{salt}", "11".repeat(16)));
    })
    .await;
    let origin = Origin::start_with("/photo.jpg", jpeg(320, 240, 6)).await;
    let path = format!("/rs:fit:100:100/plain/{}@png", origin.url("/photo.jpg"));
    let signature = imgproxy_signature(key, salt, &path);

    let signed = app.get(&format!("/imgproxy/{signature}{path}")).await;
    assert_eq!(signed.status(), 200);
    assert_eq!(dimensions(&signed.bytes().await.unwrap()), (100, 75));

    let altered = app
        .get(&format!(
            "/imgproxy/{signature}{}",
            path.replace("100:100", "100:101")
        ))
        .await;
    assert_eq!(altered.status(), 403);
    assert_eq!(error_code_of(altered).await, "bad_signature");
    let unsigned = app.get(&format!("/imgproxy/insecure{path}")).await;
    assert_eq!(unsigned.status(), 403);

    let watermark = format!("/wm:0.5/plain/{}@png", origin.url("/photo.jpg"));
    let refused = app
        .get(&format!(
            "/imgproxy/{}{watermark}",
            imgproxy_signature(key, salt, &watermark)
        ))
        .await;
    assert_eq!(refused.status(), 400);
    let body = json(refused).await;
    assert_eq!(body["error"]["code"], "invalid_option");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("`wm`"),
        "{body}"
    );
    app.stop().await;
}

#[tokio::test]
async fn with_native_signing_on_unsigned_dialect_urls_are_refused() {
    let app = spawn_app_with(|c| c.security.signing_key = Some("k".repeat(32))).await;
    let origin = Origin::start_with("/photo.jpg", jpeg(64, 48, 2)).await;
    let answer = app
        .get(&format!(
            "/imgproxy/insecure/w:10/plain/{}",
            origin.url("/photo.jpg")
        ))
        .await;
    assert_eq!(answer.status(), 403);
    assert_eq!(origin.requests(), 0);
    app.stop().await;
}

/// thumbor's signature of `signed` (the path after the signature, without its `/`).
fn thumbor_signature(key: &str, signed: &str) -> String {
    use hmac::{KeyInit, Mac};
    let mut mac = hmac::Hmac::<sha1::Sha1>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(signed.as_bytes());
    base64::engine::general_purpose::URL_SAFE.encode(mac.finalize().into_bytes())
}

#[tokio::test]
async fn a_thumbor_url_an_imgproxy_url_and_the_native_url_are_one_run() {
    let app = spawn_app().await;
    let (_origin, source) = Origin::serving("/photo.jpg", jpeg(640, 480, 8)).await;

    let thumbor = app
        .get(&format!(
            "/thumbor/unsafe/fit-in/200x200/filters:format(webp):strip_exif()/{source}"
        ))
        .await;
    assert_eq!(thumbor.status(), 200);
    let etag = header(&thumbor, "etag").unwrap().to_string();
    assert_eq!(dimensions(&thumbor.bytes().await.unwrap()), (200, 150));
    let imgproxy = app
        .get(&format!(
            "/imgproxy/insecure/rs:fit:200:200/plain/{source}@webp"
        ))
        .await;
    assert_eq!(header(&imgproxy, "etag"), Some(etag.as_str()));
    let native = app
        .image_by_url(&source, "w=200&h=200&fit=contain&format=webp")
        .await;
    assert_eq!(header(&native, "etag"), Some(etag.as_str()));
    assert_eq!(app.processing_runs(), 1, "one run for the three dialects");
    app.stop().await;
}

#[tokio::test]
async fn thumbor_signatures_are_checked_and_filters_refused_by_name() {
    const KEY: &str = "my-security-key";
    let app = spawn_app_with(|c| c.thumbor.key = Some(KEY.into())).await;
    let origin = Origin::start_with("/photo.jpg", jpeg(320, 240, 7)).await;
    // thumbor's URLs name their source without a scheme as often as with one.
    let source = origin.url("/photo.jpg").replace("http://", "");
    let signed = format!("120x90/smart/{source}");
    let ok = app
        .get(&format!(
            "/thumbor/{}/{signed}",
            thumbor_signature(KEY, &signed)
        ))
        .await;
    assert_eq!(ok.status(), 200);
    assert_eq!(dimensions(&ok.bytes().await.unwrap()), (120, 90));
    let altered = app
        .get(&format!(
            "/thumbor/{}/{}",
            thumbor_signature(KEY, &signed),
            signed.replace("120x90", "121x90")
        ))
        .await;
    assert_eq!(altered.status(), 403);
    assert_eq!(
        app.get(&format!("/thumbor/unsafe/{signed}")).await.status(),
        403
    );
    let filtered = format!("120x90/filters:grayscale()/{source}");
    let refused = app
        .get(&format!(
            "/thumbor/{}/{filtered}",
            thumbor_signature(KEY, &filtered)
        ))
        .await;
    assert_eq!(refused.status(), 400);
    let body = json(refused).await;
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`grayscale`"),
        "{body}"
    );
    app.stop().await;
}

/// thumbor's `no_upscale()` clamps each side of the box to the source's (issue 51: thumbor 7.8
/// answered 640×960 for `3000x2000` on a 640×960 photo, imgcas cropped it to 640×427).
#[tokio::test]
async fn thumbor_no_upscale_clamps_each_side_to_the_source() {
    let app = spawn_app().await;
    let (_origin, source) = Origin::serving("/portrait.jpg", jpeg(640, 960, 3)).await;
    for (size, expected) in [
        // Larger both ways: the source whole.
        ("3000x2000", (640, 960)),
        // Larger one way: that side clamped, the other cut.
        ("500x2000", (500, 960)),
        ("1000x300", (640, 300)),
        // Smaller both ways: a crop to the box, as without the filter.
        ("320x320", (320, 320)),
    ] {
        let answer = app
            .get(&format!(
                "/thumbor/unsafe/{size}/filters:no_upscale()/{source}"
            ))
            .await;
        assert_eq!(answer.status(), 200, "{size}");
        assert_eq!(
            dimensions(&answer.bytes().await.unwrap()),
            expected,
            "{size}"
        );
    }
    // Without the filter thumbor upscales to the box.
    let upscaled = app
        .get(&format!("/thumbor/unsafe/3000x2000/{source}"))
        .await;
    assert_eq!(dimensions(&upscaled.bytes().await.unwrap()), (3000, 2000));
    app.stop().await;
}

#[tokio::test]
async fn crops_in_either_dialect_are_the_native_crop() {
    let app = spawn_app().await;
    let (_origin, source) = Origin::serving("/photo.jpg", jpeg(640, 480, 9)).await;

    // thumbor's manual crop: the corners (100, 50) and (500, 350), then fit in 200 × 200.
    let thumbor = app
        .get(&format!(
            "/thumbor/unsafe/100x50:500x350/fit-in/200x200/{source}"
        ))
        .await;
    assert_eq!(thumbor.status(), 200);
    let etag = header(&thumbor, "etag").unwrap().to_string();
    assert_eq!(dimensions(&thumbor.bytes().await.unwrap()), (200, 150));
    let native = app
        .image_by_url(&source, "crop=400,300,100,50&w=200&h=200")
        .await;
    assert_eq!(header(&native, "etag"), Some(etag.as_str()));

    // imgproxy's crop: 400 × 300 by gravity (the centre), then fit in 200 × 200.
    let imgproxy = app
        .get(&format!(
            "/imgproxy/insecure/c:400:300/rs:fit:200:200/plain/{source}@jpg"
        ))
        .await;
    assert_eq!(imgproxy.status(), 200);
    let etag = header(&imgproxy, "etag").unwrap().to_string();
    let native = app
        .image_by_url(&source, "crop=400,300&w=200&h=200&format=jpeg")
        .await;
    assert_eq!(header(&native, "etag"), Some(etag.as_str()));
    assert_eq!(app.processing_runs(), 2, "one run per output");
    app.stop().await;
}

/// A dialect URL asked again is a remembered hit, answered before the router as a native one
/// is, the same answer each time, and counted under the dialect's route.
#[tokio::test]
async fn a_dialect_url_asked_again_is_a_remembered_hit() {
    let app = spawn_app().await;
    let origin = Origin::start_with("/photo.jpg", jpeg(320, 240, 11)).await;
    let path = format!(
        "/imgproxy/insecure/rs:fit:90:90/plain/{}@webp",
        origin.url("/photo.jpg")
    );
    let made = app.get(&path).await;
    assert_eq!(header(&made, "x-imgcas-cache"), Some("miss"));
    let again = app.get(&path).await;
    let front = app.get(&path).await;
    assert_eq!(answer_headers(&front), answer_headers(&again));
    assert_eq!(header(&front, "x-imgcas-cache"), Some("hit"));
    assert_eq!(front.bytes().await.unwrap(), again.bytes().await.unwrap());
    let text = metrics_text(&app.client, &app.url("")).await;
    let counted = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "imgcas_http_requests_total{route=\"/imgproxy/{*path}\",method=\"GET\",status=\"200\"} ",
            )
        })
        .map_or(0.0, |v| v.trim().parse::<f64>().unwrap());
    assert_eq!(counted, 3.0, "{text}");
    app.stop().await;
}

#[tokio::test]
async fn trim_by_url_and_thumbors_trim_are_one_variant() {
    let app = spawn_app().await;
    let origin = Origin::start().await;
    // A 120 × 60 picture in a 40 px white frame.
    let framed =
        image::DynamicImage::ImageRgb8(image::RgbImage::from_fn(200, 140, |x, y| {
            match (40..160).contains(&x) && (40..100).contains(&y) {
                true => image::Rgb([30, 90, 200]),
                false => image::Rgb([255, 255, 255]),
            }
        }));
    origin.put("/framed.png", encode(&framed, image::ImageFormat::Png));
    let source = origin.url("/framed.png");
    let native = app.image_by_url(&source, "trim=0&format=png").await;
    assert_eq!(native.status(), 200);
    let etag = header(&native, "etag").unwrap().to_string();
    assert_eq!(dimensions(&native.bytes().await.unwrap()), (120, 60));
    let thumbor = app
        .get(&format!(
            "/thumbor/unsafe/trim/filters:format(png)/{source}"
        ))
        .await;
    assert_eq!(header(&thumbor, "etag"), Some(etag.as_str()));
    assert_eq!(app.processing_runs(), 1);
    app.stop().await;
}
