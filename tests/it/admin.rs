//! Who may do what: with `IMGCAS_SIGNING_KEY` set, the routes that hand out an original need a
//! signature like the image routes; with `IMGCAS_ADMIN_TOKEN` set, uploads, ingest and
//! `/metrics` need `Authorization: Bearer <token>`, from HTTP clients and from
//! `imgcas ingest --server`.

use crate::common;

use common::*;

const KEY: &str = "a-signing-key-0123456789abcdef";
const TOKEN: &str = "an-admin-token-0123456789abcdef";

#[tokio::test]
async fn signing_covers_the_originals_routes() {
    let app = spawn_app_with(|c| c.security.signing_key = Some(KEY.into())).await;
    let original = jpeg(160, 90, 5);
    assert_eq!(app.upload(original.clone()).await.status(), 201);
    let hash = imgcas::hash::ContentHash::of(&original).to_hex();

    for path in [
        format!("/v1/originals/{hash}"),
        format!("/v1/originals/{hash}/info"),
    ] {
        let unsigned = app.get(&path).await;
        assert_eq!(unsigned.status(), 403, "{path}");
        assert_eq!(error_code_of(unsigned).await, "bad_signature");
        let head = app.client.head(app.url(&path)).send().await.unwrap();
        assert_eq!(head.status(), 403, "HEAD {path}");
        let wrong = hmac_hex(KEY, &format!("{path}x?"));
        let r = app.get(&format!("{path}?sig={wrong}")).await;
        assert_eq!(r.status(), 403, "{path} signed for another path");

        let sig = hmac_hex(KEY, &format!("{path}?"));
        let signed = app.get(&format!("{path}?sig={sig}")).await;
        assert_eq!(signed.status(), 200, "{path}");
    }
    let sig = hmac_hex(KEY, &format!("/v1/originals/{hash}?"));
    let bytes = app
        .get(&format!("/v1/originals/{hash}?sig={sig}"))
        .await
        .bytes()
        .await
        .unwrap();
    assert_eq!(bytes.as_ref(), original.as_slice());
}

async fn status_of(request: reqwest::RequestBuilder) -> (u16, Option<String>, serde_json::Value) {
    let r = request.send().await.unwrap();
    let status = r.status().as_u16();
    let challenge = header(&r, "www-authenticate").map(str::to_string);
    let bytes = r.bytes().await.unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    (status, challenge, body)
}

#[tokio::test]
async fn the_admin_token_guards_uploads_ingest_and_metrics() {
    let app = spawn_app_with(|c| c.security.admin_token = Some(TOKEN.into())).await;
    let origin = Origin::start_with("/i.jpg", jpeg(100, 80, 6)).await;
    let upload = || {
        app.client
            .post(app.url("/v1/originals"))
            .header("content-type", "application/octet-stream")
            .body(jpeg(120, 60, 4))
    };
    let ingest = || {
        app.client
            .post(app.url("/v1/ingest"))
            .header("content-type", "application/json")
            .body(serde_json::json!({ "urls": [origin.url("/i.jpg")] }).to_string())
    };
    let metrics = || app.client.get(app.url("/metrics"));

    for (route, request) in [
        ("upload", &upload as &dyn Fn() -> reqwest::RequestBuilder),
        ("ingest", &ingest),
        ("metrics", &metrics),
    ] {
        let (status, challenge, body) = status_of(request()).await;
        assert_eq!(status, 401, "{route} without a token");
        assert_eq!(challenge.as_deref(), Some("Bearer"), "{route}");
        assert_eq!(body["error"]["code"], "unauthorized", "{route}");
        for wrong in [
            "Bearer not-the-token-at-all-000000".to_string(),
            format!("Basic {TOKEN}"),
            format!("Bearer {TOKEN}x"),
            format!("Bearer {}", &TOKEN[..TOKEN.len() - 1]),
        ] {
            let (status, _, _) = status_of(request().header("authorization", wrong)).await;
            assert_eq!(status, 401, "{route} with a wrong token");
        }
    }
    assert!(app.stored_blobs().await.is_empty(), "nothing was stored");
    assert_eq!(origin.requests(), 0, "nothing was fetched");

    let bearer = format!("Bearer {TOKEN}");
    let (status, _, _) = status_of(upload().header("authorization", &bearer)).await;
    assert_eq!(status, 201);
    let (status, _, body) = status_of(ingest().header("authorization", &bearer)).await;
    assert_eq!(status, 200, "{body}");
    let r = metrics()
        .header("authorization", &bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // Serving images needs no token.
    let r = app.image_from(&origin, "/i.jpg", "w=20").await;
    assert_eq!(r.status(), 200);
    assert_eq!(app.get("/healthz").await.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ingest_command_sends_the_admin_token() {
    let app = spawn_app_with(|c| c.security.admin_token = Some(TOKEN.into())).await;
    let files = tempfile::tempdir().unwrap();
    std::fs::write(files.path().join("a.jpg"), jpeg(90, 60, 1)).unwrap();
    let server = format!("http://{}", app.addr);
    let input = files.path().display().to_string();
    let run = move |env: Vec<(&'static str, String)>, extra: Vec<String>| {
        let data = tempfile::tempdir().unwrap();
        let mut args = vec![
            "ingest".to_string(),
            "--json".into(),
            input.clone(),
            "--server".into(),
            server.clone(),
        ];
        args.extend(extra);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out) = binary::run(data.path(), &env, &refs);
        let report: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        (code, report)
    };
    let (code, report) = tokio::task::spawn_blocking({
        let run = run.clone();
        move || run(vec![], vec![])
    })
    .await
    .unwrap();
    assert_eq!(code, 1, "without the token every item fails: {report}");
    assert_eq!(report["summary"]["failed"], 1, "{report}");
    assert_eq!(report["results"][0]["error"]["code"], "unauthorized");

    let (code, report) = tokio::task::spawn_blocking({
        let run = run.clone();
        move || run(vec![], vec!["--admin-token".into(), TOKEN.into()])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["summary"]["new"], 1, "{report}");

    let (code, report) = tokio::task::spawn_blocking(move || {
        run(vec![("IMGCAS_ADMIN_TOKEN", TOKEN.into())], vec![])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["summary"]["duplicate"], 1, "{report}");
}
