//! `DELETE /v1/urls?url=<url>` (issue 16): forgets one URL's entry, so its next request
//! downloads it again; the original and its variants stay. Like every route that removes
//! stored data, it is closed (403 `admin_disabled`) until an admin token is configured, and
//! then needs that token.

use crate::common;

use common::*;

const TOKEN: &str = "forget-me-admin-token-0123456789";

async fn forget(app: &TestApp, source: &str, token: Option<&str>) -> reqwest::Response {
    let mut url = reqwest::Url::parse(&app.url("/v1/urls")).unwrap();
    url.query_pairs_mut().append_pair("url", source);
    let mut request = app.client.delete(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn without_an_admin_token_the_route_is_closed_and_nothing_is_forgotten() {
    let (origin, source) = Origin::serving("/kept.jpg", jpeg(120, 90, 1)).await;
    let app = spawn_app().await;
    assert_eq!(app.image_status(&source, "w=40").await, 200);
    let refused = forget(&app, &source, None).await;
    assert_eq!(refused.status(), 403);
    assert_eq!(error_code_of(refused).await, "admin_disabled");
    let again = app.image_by_url(&source, "w=40").await;
    assert_eq!(header(&again, "x-imgcas-cache"), Some("hit"));
    assert_eq!(origin.full(), 1);
}

#[tokio::test]
async fn a_forgotten_url_is_downloaded_again_on_its_next_request() {
    let (origin, source) = Origin::serving("/gone.jpg", jpeg(120, 90, 2)).await;
    let app = spawn_app_with(|c| c.security.admin_token = Some(TOKEN.into())).await;
    let first = app.image_by_url(&source, "w=40").await;
    assert_eq!(first.status(), 200);
    let hash = header(&first, "x-imgcas-source-hash").unwrap().to_string();
    // Remembered, and answered from memory, before the removal.
    for _ in 0..2 {
        let hit = app.image_by_url(&source, "w=40").await;
        assert_eq!(header(&hit, "x-imgcas-cache"), Some("hit"));
    }
    assert_eq!(origin.full(), 1);

    assert_eq!(forget(&app, &source, None).await.status(), 401);
    assert_eq!(forget(&app, &source, Some("wrong")).await.status(), 401);
    let forgotten = forget(&app, &source, Some(TOKEN)).await;
    assert_eq!(forgotten.status(), 200);
    let body = json(forgotten).await;
    assert_eq!(body["url"], source.as_str());
    assert_eq!(body["forgotten"], true);
    assert_eq!(body["hash"], hash.as_str());

    // The next request downloads afresh (no validators left to send), and finds the
    // variant already made: the original and its variants were kept.
    let runs = app.stats().processing_runs;
    let next = app.image_by_url(&source, "w=40").await;
    assert_eq!(next.status(), 200);
    assert_eq!(origin.full(), 2);
    assert_eq!(origin.conditional(), 0);
    assert_eq!(app.stats().processing_runs, runs);

    // Forgetting an unknown URL says so; a missing or bad URL is a 400.
    let unknown = forget(&app, &origin.url("/never.jpg"), Some(TOKEN)).await;
    let body = json(unknown).await;
    assert_eq!(
        (body["forgotten"].clone(), body["hash"].clone()),
        (false.into(), serde_json::Value::Null)
    );
    let missing = app.delete_as("/v1/urls", TOKEN).await;
    assert_eq!(missing.status(), 400);
    assert_eq!(error_code_of(missing).await, "invalid_option");
    let bad = forget(&app, "ftp://example.test/x.jpg", Some(TOKEN)).await;
    assert_eq!(bad.status(), 400);
}
