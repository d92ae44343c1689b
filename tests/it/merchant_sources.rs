//! The sources merchants send (issues 31 and 53): HEIC photos from phones, SVG logos and JPEG
//! XL pictures, through HTTP from a real origin, come out upright at the asked size in a
//! format browsers show.

use crate::common;

use std::path::PathBuf;

use common::*;

fn testdata(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn content_type(response: &reqwest::Response) -> String {
    header(response, "content-type")
        .unwrap_or_default()
        .to_string()
}

/// The type `format=auto` answers a client whose `Accept` is `accept` (asserted 200).
async fn auto_format(app: &TestApp, source: &str, accept: &str) -> String {
    let mut url = reqwest::Url::parse(&app.url("/v1/image")).unwrap();
    url.query_pairs_mut()
        .append_pair("url", source)
        .append_pair("w", "120")
        .append_pair("format", "auto");
    let r = app
        .client
        .get(url)
        .header("accept", accept)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{accept}");
    content_type(&r)
}

/// A source through a query: asserted 200, its type and size.
async fn served(app: &TestApp, source: &str, query: &str) -> (String, (u32, u32)) {
    let r = app.image_by_url(source, query).await;
    assert_eq!(r.status(), 200, "{query}");
    let kind = content_type(&r);
    (kind, dimensions(&r.bytes().await.unwrap()))
}

#[tokio::test]
async fn a_portrait_heic_from_a_phone_comes_out_upright_as_webp_and_jpeg() {
    let origin = Origin::start().await;
    // iPhone 8 Plus: stored 4032×3024 with `irot` (and an EXIF orientation saying the same).
    origin.put("/arrow.heic", testdata("heic/arrow.heic"));
    let app = spawn_app().await;
    let source = origin.url("/arrow.heic");

    let webp = served(&app, &source, "w=300&format=webp").await;
    assert_eq!(webp, ("image/webp".into(), (300, 400)));

    // `auto` never answers HEIC, even to a client that says it takes it.
    let auto = auto_format(&app, &source, "image/heic,image/avif,image/webp,*/*").await;
    assert_eq!(auto, "image/avif");

    // `original` of a HEIC source answers JPEG.
    let original = served(&app, &source, "w=150&format=original").await;
    assert_eq!(original, ("image/jpeg".into(), (150, 200)));
    assert_eq!(origin.full(), 1, "one download for every variant");

    // An upload reports the format and the stored size.
    let uploaded = json(app.upload(testdata("heic/pug.heic")).await).await;
    assert_eq!(uploaded["format"], "heic");
    let hash = uploaded["hash"].as_str().unwrap().to_string();
    let jpeg = app
        .get(&format!("/v1/image/{hash}?w=400&format=jpeg"))
        .await;
    assert_eq!(jpeg.status(), 200);
    assert_eq!(dimensions(&jpeg.bytes().await.unwrap()), (400, 300));
}

#[tokio::test]
async fn a_damaged_heic_is_refused_in_the_spec_shape() {
    let origin = Origin::start().await;
    let whole = testdata("heic/pug.heic");
    origin.put("/cut.heic", whole[..whole.len() / 3].to_vec());
    let app = spawn_app().await;
    let refused = app
        .image_from(&origin, "/cut.heic", "w=200&format=webp")
        .await;
    assert_eq!(refused.status(), 422);
    let body = json(refused).await;
    assert_eq!(body["error"]["code"], "undecodable", "{body}");
}

/// A 120×40 logo: a blue bar, a black edge at x = 60, and a line of text.
const LOGO: &str = r##"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">
<svg xmlns="http://www.w3.org/2000/svg" width="120" height="40" viewBox="0 0 120 40">
  <rect width="120" height="40" fill="#1040c0"/>
  <rect width="60" height="40" fill="#000000"/>
  <text x="64" y="26" font-size="12" fill="#ffffff">Soda</text>
</svg>"##;

#[tokio::test]
async fn an_svg_logo_comes_out_as_webp_and_jpeg_at_the_asked_size() {
    let (_origin, source) = Origin::serving("/logo.svg", LOGO.as_bytes().to_vec()).await;
    let app = spawn_app().await;
    // Larger than its declared 120 pixels, without `enlarge`: drawn at 600.
    let webp = served(&app, &source, "w=600&format=webp").await;
    assert_eq!(webp, ("image/webp".into(), (600, 200)));
    let jpeg = served(&app, &source, "w=60&format=jpeg").await;
    assert_eq!(jpeg, ("image/jpeg".into(), (60, 20)));
    // Never SVG: `original` answers PNG (it has alpha).
    let original = served(&app, &source, "format=original").await;
    assert_eq!(original, ("image/png".into(), (120, 40)));

    // Its stored bytes go out as a sandboxed download, not as an image a browser runs.
    let uploaded = json(app.upload(LOGO.as_bytes().to_vec()).await).await;
    assert_eq!(uploaded["format"], "svg");
    let hash = uploaded["hash"].as_str().unwrap();
    let raw = app.get(&format!("/v1/originals/{hash}")).await;
    assert_eq!(raw.status(), 200);
    assert_eq!(content_type(&raw), "application/octet-stream");
    assert_eq!(header(&raw, "content-disposition"), Some("attachment"));
    let policy = header(&raw, "content-security-policy").unwrap_or_default();
    assert!(policy.starts_with("sandbox"), "{policy}");
}

/// Documents of the kinds reported against peers' SVG sanitisers (imgproxy #1599: an iframe in
/// `<foreignObject>`; imgproxy #1708: `@import` and `url()` in `<style>`, `<image>` and
/// `<feImage>` links; ipx #318: SMIL `<set>` writing an `on*` attribute, `javascript:`
/// links, `<base>`/`<link>`), each pointing at `{CANARY}`, an origin that must never be asked.
fn hostile_documents(canary: &str) -> Vec<(&'static str, String)> {
    let svg = |body: &str| {
        format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="64" height="64">{body}<rect width="10" height="10" fill="red"/></svg>"#
        )
    };
    let kinds: Vec<(&'static str, String)> = vec![
        ("script and handlers", svg(r#"<script>fetch('{CANARY}/script')</script><rect width="5" height="5" onload="fetch('{CANARY}/onload')" onclick="alert(1)"/>"#)),
        ("smil sets a handler", svg(r#"<rect width="5" height="5"><set attributeName="onmouseover" to="fetch('{CANARY}/set')"/><animate attributeName="href" values="javascript:alert(1)"/></rect>"#)),
        ("javascript link", svg(r#"<a href="javascript:fetch('{CANARY}/js')"><circle r="5"/></a><a xlink:href="javascript&#9;:alert(1)"><circle r="3"/></a>"#)),
        ("image over http", svg(r#"<image href="{CANARY}/image.png" width="10" height="10"/>"#)),
        ("image over xlink and https", svg(r#"<image xlink:href="https://127.0.0.1:9/x.png" width="10" height="10"/><image xlink:href="{CANARY}/xlink.png" width="10" height="10"/>"#)),
        ("image from a file path", svg(r#"<image href="file:///etc/hostname" width="10" height="10"/><image href="../../../../etc/hostname" width="10" height="10"/><image href="/etc/hostname" width="10" height="10"/>"#)),
        ("image over ftp", svg(r#"<image href="ftp://127.0.0.1/x.png" width="10" height="10"/>"#)),
        ("feImage", svg(r#"<filter id="f"><feImage href="{CANARY}/feimage.png"/></filter><rect width="20" height="20" filter="url(#f)"/>"#)),
        ("style import and urls", svg(r#"<style>@import url({CANARY}/import.css); rect { fill: url({CANARY}/fill.png); background: url('{CANARY}/bg.png') } @font-face { font-family: x; src: url({CANARY}/font.woff) } text { font-family: x }</style><text y="20">hi</text>"#)),
        ("inline style url", svg(r#"<rect width="5" height="5" style="fill:url({CANARY}/inline.png)"/>"#)),
        ("foreignObject iframe", svg(r#"<foreignObject width="64" height="64"><body xmlns="http://www.w3.org/1999/xhtml"><iframe src="{CANARY}/iframe"></iframe><img src="{CANARY}/img.png"/><link rel="stylesheet" href="{CANARY}/link.css"/><base href="{CANARY}/"/></body></foreignObject>"#)),
        ("external use", svg(r#"<use href="{CANARY}/sprite.svg#icon"/><use xlink:href="{CANARY}/other.svg#x"/>"#)),
        ("nested svg image", svg(&format!(r#"<image width="10" height="10" href="data:image/svg+xml;utf8,{}"/>"#, "%3Csvg xmlns='http://www.w3.org/2000/svg'%3E%3Cimage href='{CANARY}/nested.png'/%3E%3C/svg%3E"))),
        ("xml stylesheet", format!("<?xml-stylesheet href=\"{{CANARY}}/pi.css\" type=\"text/css\"?>{}", svg(""))),
        ("external entity", format!("<!DOCTYPE svg [ <!ENTITY x SYSTEM \"{{CANARY}}/entity\"> ]>{}", svg("<text>&x;</text>"))),
        ("billion laughs", format!("<!DOCTYPE svg [ <!ENTITY a \"aaaaaaaaaa\"> <!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\"> <!ENTITY c \"&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;\"> <!ENTITY d \"&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;\"> ]>{}", svg("<text>&d;&d;&d;&d;</text>"))),
        ("huge declared size", r#"<svg xmlns="http://www.w3.org/2000/svg" width="99999999" height="99999999"><rect width="10" height="10"/></svg>"#.to_string()),
        ("deep nesting", svg(&format!("{}{}", "<g>".repeat(5000), "</g>".repeat(5000)))),
    ];
    kinds
        .into_iter()
        .map(|(name, body)| (name, body.replace("{CANARY}", canary)))
        .collect()
}

#[tokio::test]
async fn hostile_svgs_never_make_a_request_and_are_never_served_as_svg() {
    let origin = Origin::start().await;
    let canary = Origin::start().await;
    let documents = hostile_documents(&canary.url(""));
    let app = spawn_app().await;
    // The canary counts what reaches it: one request of the test's own.
    app.client.get(canary.url("/control")).send().await.unwrap();
    assert_eq!(canary.requests(), 1);
    let mut refused = Vec::new();
    for (i, (name, body)) in documents.iter().enumerate() {
        let path = format!("/hostile-{i}.svg");
        origin.put(&path, body.as_bytes().to_vec());
        for query in ["w=64&format=webp", "format=original", "w=32&format=auto"] {
            let r = app.image_by_url(&origin.url(&path), query).await;
            let status = r.status().as_u16();
            let kind = content_type(&r);
            assert!(
                !kind.contains("svg") && !kind.contains("xml") && !kind.contains("html"),
                "{name} ({query}): served as {kind}"
            );
            match status {
                200 => assert!(kind.starts_with("image/"), "{name}: {kind}"),
                422 => {
                    assert_eq!(error_code_of(r).await, "undecodable", "{name}");
                    if !refused.contains(name) {
                        refused.push(*name);
                    }
                }
                other => panic!("{name} ({query}): {other}"),
            }
        }
        // Uploaded, the same bytes are stored and described, or refused; never fetched from.
        let uploaded = app.upload(body.as_bytes().to_vec()).await;
        assert!(
            [201, 200, 422].contains(&uploaded.status().as_u16()),
            "{name}: upload {}",
            uploaded.status()
        );
    }
    assert_eq!(canary.requests(), 1, "a document made a request");
    // Entities and nesting past the bound are refused; every other document is drawn
    // (without what it points at).
    assert_eq!(
        refused,
        ["external entity", "billion laughs", "deep nesting"],
        "refused"
    );
}

/// Audit #3, findings 1 and 2: 400 KB of text drawn at 50 pixels took 53 CPU s and made a
/// normal request answer 503 meanwhile; a gradient of 90,000 stops took 13.5 s a variant.
/// Drawings are costed before any pixel is drawn, charged at the drawn size, and these are
/// refused 422 `too_costly` at once, with no run, while an ordinary request is served.
#[tokio::test(flavor = "multi_thread")]
async fn hostile_drawings_are_refused_at_once_and_others_are_served_meanwhile() {
    let origin = Origin::start_with("/text.svg", testdata("svg/hostile/text-400k.svg")).await;
    origin.put(
        "/gradient.svg",
        testdata("svg/hostile/gradient-24k-stops.svg"),
    );
    origin.put("/masks.svg", testdata("svg/hostile/masks-3000.svg"));
    origin.put("/photo.jpg", jpeg(640, 480, 4));
    let app = spawn_app().await;
    for (path, query) in [
        ("/text.svg", "w=50&format=png"),
        ("/text.svg", "w=1000&format=png"),
        ("/gradient.svg", "w=1000&format=png"),
        ("/gradient.svg", "w=600&format=webp"),
        ("/masks.svg", "w=1000&format=png"),
    ] {
        let (source, photo_url) = (origin.url(path), origin.url("/photo.jpg"));
        let width = format!("w={}", 100 + path.len());
        let started = std::time::Instant::now();
        let (refused, photo) = tokio::join!(
            app.image_by_url(&source, query),
            app.image_by_url(&photo_url, &width),
        );
        let took = started.elapsed();
        assert_eq!(refused.status(), 422, "{path} {query}");
        assert_eq!(error_code_of(refused).await, "too_costly");
        assert_eq!(photo.status(), 200, "served beside {path} {query}");
        assert!(took.as_secs_f64() < 2.0, "{path} {query}: {took:?}");
    }
    // Three widths of the photo; no drawing ran.
    assert_eq!(app.processing_runs(), 3, "only the photo ran");
    // Uploaded, the text is refused as it is read, before anything is stored.
    let upload = app.upload(testdata("svg/hostile/text-400k.svg")).await;
    assert_eq!(upload.status(), 422);
    assert_eq!(error_code_of(upload).await, "too_costly");
}

/// JPEG XL sources (issue 53): a lossy photo, an animation and a JPEG recompressed into JPEG
/// XL through a real origin and an upload, at the asked size in formats browsers show; the
/// animation stays one in WebP, and its frames are in `format=json`; `imgcas process` reads
/// it offline on the same code.
#[tokio::test]
async fn jpeg_xl_sources_come_out_in_formats_browsers_show() {
    let origin = Origin::start_with("/bicycles.jxl", testdata("jxl/bicycles.jxl")).await;
    origin.put("/spline.jxl", testdata("jxl/animation_spline.jxl"));
    let app = spawn_app().await;
    let photo = origin.url("/bicycles.jxl");
    assert_eq!(
        served(&app, &photo, "w=512&format=webp").await,
        ("image/webp".into(), (512, 316))
    );
    // `original` of a JPEG XL source answers JPEG (as imgproxy does: a JPEG XL is served to
    // clients that say they take it).
    assert_eq!(
        served(&app, &photo, "w=256&format=original").await,
        ("image/jpeg".into(), (256, 158))
    );

    // The animation stays one, every frame, and its facts say so.
    let animated = app
        .image_from(&origin, "/spline.jxl", "w=100&format=webp&animated=1")
        .await;
    assert_eq!(animated.status(), 200);
    let frames = imgcas_processors::animation::header(&animated.bytes().await.unwrap())
        .expect("an animated WebP")
        .frames;
    assert!(frames > 1, "{frames}");
    let facts = json(app.image_from(&origin, "/spline.jxl", "format=json").await).await;
    assert_eq!(facts["format"], "jxl", "{facts}");
    assert_eq!(facts["frames"], frames, "{facts}");
    assert_eq!(facts["animated"], true, "{facts}");
    let header = imgcas_processors::animation::header(&testdata("jxl/animation_spline.jxl"))
        .expect("an animation");
    assert!(header.duration_ms > 0);
    assert_eq!(facts["duration_ms"], header.duration_ms, "{facts}");

    // An upload of a JPEG recompressed into JPEG XL.
    let uploaded = json(app.upload(testdata("jxl/grayscale_jpeg.jxl")).await).await;
    assert_eq!(uploaded["format"], "jxl", "{uploaded}");
    let hash = uploaded["hash"].as_str().unwrap().to_string();
    let png = app.get(&format!("/v1/image/{hash}?w=100&format=png")).await;
    assert_eq!(png.status(), 200);
    assert_eq!(dimensions(&png.bytes().await.unwrap()), (100, 100));

    // Damaged bytes are refused in the documented shape.
    let whole = testdata("jxl/bicycles.jxl");
    origin.put("/cut.jxl", whole[..whole.len() / 3].to_vec());
    let refused = app
        .image_from(&origin, "/cut.jxl", "w=200&format=webp")
        .await;
    assert_eq!(refused.status(), 422);
    assert_eq!(error_code_of(refused).await, "undecodable");
}

/// JPEG XL out (issue 53): `format=jxl` through HTTP, checked by libjxl's `djxl` where it is
/// installed (always under CI); `format=auto` offers it to clients whose `Accept` lists
/// `image/jxl`, in the order `formats.auto` gives, and keys its variants by what the client
/// takes; lossless as `lossless=1` or `q=100` is one variant; `q=auto` answers its choice.
#[tokio::test]
async fn jpeg_xl_is_served_to_clients_that_take_it_in_the_order_configured() {
    let (_origin, photo) = Origin::serving("/photo.jpg", testdata("photos/kodak-15.jpg")).await;
    let app = spawn_app().await;
    let r = app.image_by_url(&photo, "w=320&format=jxl").await;
    assert_eq!(r.status(), 200);
    assert_eq!(content_type(&r), "image/jxl");
    let bytes = r.bytes().await.unwrap();
    assert_eq!(&bytes[..2], [0xFF, 0x0A]);
    djxl_reads(&bytes, 320);

    // The default order offers JPEG XL first, then AVIF, then WebP; the fallback is JPEG.
    for (accept, kind) in [
        ("image/webp,image/avif,image/jxl,*/*", "image/jxl"),
        ("image/avif,image/webp,*/*", "image/avif"),
        ("image/jxl;q=0,image/webp,*/*", "image/webp"),
        ("*/*", "image/jpeg"),
    ] {
        assert_eq!(auto_format(&app, &photo, accept).await, kind, "{accept}");
    }
    // Each class of client was one run; asking again is a hit.
    let runs = app.processing_runs();
    assert_eq!(
        auto_format(&app, &photo, "image/jxl,*/*").await,
        "image/jxl"
    );
    assert_eq!(app.processing_runs(), runs);

    // Lossless, asked either way, is one variant.
    let lossless = app.image_by_url(&photo, "w=64&format=jxl&lossless=1").await;
    assert_eq!(lossless.status(), 200);
    assert_eq!(header(&lossless, "x-imgcas-cache"), Some("miss"));
    let again = app.image_by_url(&photo, "w=64&format=jxl&q=100").await;
    assert_eq!(header(&again, "x-imgcas-cache"), Some("hit"));

    // q=auto reports the quality it chose and the score reached.
    let auto = app.image_by_url(&photo, "w=256&format=jxl&q=auto").await;
    assert_eq!(auto.status(), 200);
    let quality: u8 = header(&auto, "x-imgcas-quality").unwrap().parse().unwrap();
    assert!((30..=95).contains(&quality), "{quality}");

    // An operator who ranks WebP first (`IMGCAS_AUTO_FORMATS=webp,jxl`) gets WebP for a client
    // that takes both, JPEG XL for one that takes only it, and never AVIF.
    let ranked = spawn_app_with(|c| {
        c.formats.auto = imgcas_processors::AutoFormats::parse("webp,jxl").unwrap()
    })
    .await;
    for (accept, kind) in [
        ("image/jxl,image/avif,image/webp,*/*", "image/webp"),
        ("image/jxl,image/avif,*/*", "image/jxl"),
        ("image/avif,*/*", "image/jpeg"),
    ] {
        assert_eq!(auto_format(&ranked, &photo, accept).await, kind, "{accept}");
    }
}

/// `bytes` read as a picture `width` wide by imgcas's JPEG XL decoder and by libjxl's
/// `djxl` (skipped where djxl is not installed, on a developer's machine; under CI its
/// absence fails).
fn djxl_reads(bytes: &[u8], width: u32) {
    let info = imgcas_processors::probe(bytes, &imgcas_processors::Limits::default()).unwrap();
    assert_eq!(info.width, width);
    if std::process::Command::new("djxl")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(std::env::var_os("CI").is_none(), "CI installs djxl");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in.jxl"), dir.path().join("out.png"));
    std::fs::write(&input, bytes).unwrap();
    let done = std::process::Command::new("djxl")
        .arg(&input)
        .arg(&output)
        .output()
        .unwrap();
    assert!(done.status.success(), "{done:?}");
    assert_eq!(dimensions(&std::fs::read(&output).unwrap()).0, width);
}

/// `imgcas process` writes JPEG XL offline, on the server's code path, and `--accept` follows
/// the configured order.
#[test]
fn imgcas_process_writes_jpeg_xl() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jpg");
    std::fs::write(&input, testdata("photos/kodak-02.jpg")).unwrap();
    for (spec, accept, env) in [
        ("w=200&format=jxl", None, None),
        ("w=200&format=auto", Some("image/jxl,image/avif"), None),
        (
            "w=200&format=auto",
            Some("image/jxl,image/avif"),
            Some("avif,jxl"),
        ),
    ] {
        let output = dir.path().join("out.img");
        let mut args = vec!["process", "--spec", spec, "-o", output.to_str().unwrap()];
        if let Some(accept) = accept {
            args.extend(["--accept", accept]);
        }
        args.push(input.to_str().unwrap());
        let env: Vec<(&str, String)> = env
            .map(|v| vec![("IMGCAS_AUTO_FORMATS", v.to_string())])
            .unwrap_or_default();
        let (code, _) = binary::run(dir.path(), &env, &args);
        assert_eq!(code, 0, "{spec}");
        let written = std::fs::read(&output).unwrap();
        let expected = match env.is_empty() {
            true => Some(imgcas_processors::SourceFormat::Jxl),
            false => Some(imgcas_processors::SourceFormat::Avif),
        };
        assert_eq!(
            imgcas_processors::sniff(&written),
            expected,
            "{spec} {env:?}"
        );
        if expected == Some(imgcas_processors::SourceFormat::Jxl) {
            djxl_reads(&written, 200);
        }
    }
}

/// `imgcas process` reads JPEG XL offline, on the server's code path.
#[test]
fn imgcas_process_reads_jpeg_xl() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jxl");
    std::fs::write(&input, testdata("jxl/bench_oriented_brg.jxl")).unwrap();
    let output = dir.path().join("out.png");
    let (code, _) = binary::run(
        dir.path(),
        &[],
        &[
            "process",
            "--spec",
            "w=303&format=png",
            "-o",
            output.to_str().unwrap(),
            input.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0);
    // The oriented picture comes out upright: 606 × 500 halved.
    assert_eq!(dimensions(&std::fs::read(&output).unwrap()), (303, 250));
}
