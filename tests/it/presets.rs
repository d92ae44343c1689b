//! Presets (`[presets]`, `IMGCAS_PRESETS`) and the only-presets mode (`IMGCAS_ONLY_PRESETS`):
//! a preset stands for its options, shares the variant its options name, and in only-presets
//! mode nothing else may be asked for.

use crate::common;

use common::*;

fn with_presets(c: &mut imgcas::config::Config) {
    c.presets
        .insert("thumb".into(), "w=40&h=40&fit=cover&format=png".into());
    c.presets.insert("hero".into(), "w=120&format=webp".into());
}

#[tokio::test]
async fn a_preset_is_its_options_and_shares_their_variant() {
    let app = spawn_app_with(with_presets).await;
    let (_origin, source) = Origin::serving("/p.jpg", jpeg(300, 200, 7)).await;

    let by_preset = app.image_by_url(&source, "preset=thumb").await;
    assert_eq!(by_preset.status(), 200);
    assert_eq!(header(&by_preset, "x-imgcas-cache"), Some("miss"));
    assert_eq!(header(&by_preset, "content-type"), Some("image/png"));
    let etag = header(&by_preset, "etag").unwrap().to_string();
    assert_eq!(dimensions(&by_preset.bytes().await.unwrap()), (40, 40));

    // The same options spelled out, in another order: the same variant, already made.
    let spelled = app
        .image_by_url(&source, "format=png&fit=cover&h=40&w=40")
        .await;
    assert_eq!(spelled.status(), 200);
    assert_eq!(header(&spelled, "x-imgcas-cache"), Some("hit"));
    assert_eq!(header(&spelled, "etag"), Some(etag.as_str()));
    assert_eq!(app.processing_runs(), 1);

    // Explicit options override the preset's.
    let overridden = app.image_by_url(&source, "preset=thumb&format=jpeg").await;
    assert_eq!(overridden.status(), 200);
    assert_eq!(header(&overridden, "content-type"), Some("image/jpeg"));
    assert_eq!(dimensions(&overridden.bytes().await.unwrap()), (40, 40));

    let unknown = app.image_by_url(&source, "preset=nope").await;
    assert_eq!(unknown.status(), 400);
    let body = json(unknown).await;
    assert_eq!(body["error"]["code"], "invalid_option");
    assert!(body["error"]["message"].as_str().unwrap().contains("nope"));

    let twice = app.image_by_url(&source, "preset=thumb&preset=hero").await;
    assert_eq!(twice.status(), 400);
}

#[tokio::test]
async fn only_presets_refuses_everything_else_before_any_download() {
    let app = spawn_app_with(|c| {
        with_presets(c);
        c.security.only_presets = true;
    })
    .await;
    let (origin, source) = Origin::serving("/q.jpg", jpeg(300, 200, 8)).await;

    // Issue 28: `format=json` beside a preset is an option spelled out like any other.
    for query in [
        "w=100",
        "preset=thumb&w=100",
        "preset=hero&format=png",
        "preset=hero&format=json",
        "format=json",
        "",
    ] {
        let r = app.image_by_url(&source, query).await;
        assert_eq!(r.status(), 403, "{query:?}");
        assert_eq!(error_code_of(r).await, "preset_required", "{query:?}");
    }
    let unknown = app.image_by_url(&source, "preset=nope").await;
    assert_eq!(unknown.status(), 400);
    assert_eq!(origin.requests(), 0, "refused requests reach no origin");

    let ok = app.image_by_url(&source, "preset=hero").await;
    assert_eq!(ok.status(), 200);
    assert_eq!(header(&ok, "content-type"), Some("image/webp"));
    let hash = header(&ok, "x-imgcas-source-hash").unwrap().to_string();

    // By-hash routes obey the same rule.
    let by_hash = |q: &'static str| {
        let url = app.url(&format!("/v1/image/{hash}?{q}"));
        let client = app.client.clone();
        async move { client.get(url).send().await.unwrap().status() }
    };
    assert_eq!(by_hash("w=10").await, 403);
    assert_eq!(by_hash("preset=thumb").await, 200);
}

/// `IMGCAS_PRESETS` and `IMGCAS_ONLY_PRESETS` on the real binary, and a preset that does not
/// parse stops the server at start with the preset's name.
#[tokio::test]
async fn presets_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _) = binary::run(
        dir.path(),
        &[("IMGCAS_PRESETS", "bad=w=zero".into())],
        &["stats"],
    );
    assert_ne!(code, 0, "a preset that does not parse is refused at start");

    let mut command = binary::serve_command(dir.path());
    command
        .env(
            "IMGCAS_PRESETS",
            "thumb=w=30&h=30&fit=cover; hero=w=90&format=png",
        )
        .env("IMGCAS_ONLY_PRESETS", "true")
        .env("IMGCAS_ALLOW_PRIVATE_NETWORKS", "true");
    let server = binary::spawn(command);
    let origin = Origin::start_with("/r.jpg", jpeg(200, 100, 9)).await;
    let client = client();
    let get = |q: String| {
        let url = format!("{}/v1/image?url={}&{q}", server.base, origin.url("/r.jpg"));
        let client = client.clone();
        async move { client.get(url).send().await.unwrap() }
    };
    let r = get("preset=hero".into()).await;
    assert_eq!(r.status(), 200);
    assert_eq!(dimensions(&r.bytes().await.unwrap()), (90, 45));
    let r = get("preset=thumb".into()).await;
    assert_eq!(dimensions(&r.bytes().await.unwrap()), (30, 30));
    assert_eq!(get("w=30".into()).await.status(), 403);
    server.terminate();
}
