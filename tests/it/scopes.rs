//! Scopes of named tokens (issue 50, item 4). Audit #3 found that a tenant's token opened what
//! the admin token opens: tenant B listed a blocklist entry that took down tenant A's original
//! through a fingerprint match, and tenant A's token lifted it. A token given without scopes
//! now uploads and ingests only; moderation needs `moderate` (or `admin`), `/metrics` needs
//! `metrics`, and a token without the scope answers 403 `insufficient_scope` naming it.

use imgcas::config::tokens::{NamedToken, Scopes};
use serde_json::json as j;

use crate::common;
use common::*;

const ADMIN: &str = "scopes-admin-token-0123456789";
const SHOP_A: &str = "shop-a-token-0123456789abcdef";
const SHOP_B: &str = "shop-b-token-0123456789abcdef";
const MODERATOR: &str = "moderator-token-0123456789abc";
const OPS: &str = "ops-token-0123456789abcdefgh";

fn photo(name: &str) -> Vec<u8> {
    testdata_photo(name)
}

async fn scoped_app() -> TestApp {
    spawn_app_with(|c| {
        c.security.admin_token = Some(ADMIN.into());
        let tokens = &mut c.security.tokens;
        tokens.insert("shop-a".into(), NamedToken::tenant(SHOP_A));
        tokens.insert("shop-b".into(), NamedToken::tenant(SHOP_B));
        let moderate = Scopes::parse_list(["moderate"]).unwrap();
        tokens.insert(
            "moderator".into(),
            NamedToken {
                token: MODERATOR.into(),
                scopes: moderate,
            },
        );
        let metrics = Scopes::parse_list(["metrics"]).unwrap();
        tokens.insert(
            "ops".into(),
            NamedToken {
                token: OPS.into(),
                scopes: metrics,
            },
        );
    })
    .await
}

async fn send(app: &TestApp, method: &str, path: &str, token: &str) -> reqwest::Response {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    app.client
        .request(method, app.url(path))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

/// 403 `insufficient_scope` naming `scope`, with RFC 6750's `WWW-Authenticate`.
async fn refused_for(response: reqwest::Response, scope: &str, what: &str) {
    assert_eq!(response.status(), 403, "{what}");
    let challenge = header(&response, "www-authenticate")
        .unwrap_or("")
        .to_string();
    assert!(
        challenge.contains("insufficient_scope") && challenge.contains(scope),
        "{what}: {challenge}"
    );
    let body = json(response).await;
    assert_eq!(body["error"]["code"], "insufficient_scope", "{what}");
    let message = body["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains(&format!("`{scope}`")), "{what}: {message}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenants_token_cannot_take_down_or_lift_another_tenants_content() {
    let app = scoped_app().await;
    let a_photo = photo("kodak-02.jpg");
    let uploaded = app.upload_as(SHOP_A, a_photo.clone()).await;
    assert_eq!(uploaded.status(), 201);
    let hash = json(uploaded).await["hash"].as_str().unwrap().to_string();

    // The audit's reproduction: tenant B lists A's picture on the blocklist by its image.
    let listing = app
        .client
        .post(app.url("/v1/blocklist?note=competitor"))
        .bearer_auth(SHOP_B)
        .header("content-type", "image/jpeg")
        .body(a_photo.clone())
        .send()
        .await
        .unwrap();
    refused_for(listing, "moderate", "tenant B listing").await;
    let json_listing = app
        .post_json_as("/v1/blocklist", SHOP_B, &j!({ "sha256": hash }))
        .await;
    refused_for(json_listing, "moderate", "tenant B listing by hash").await;
    let served = app.get(&format!("/v1/image/{hash}?w=64")).await;
    assert_eq!(served.status(), 200, "A's original is still served");

    // Nor a takedown, a URL forgotten, the lists read, or similar originals listed.
    for (method, path) in [
        ("DELETE", format!("/v1/originals/{hash}")),
        ("GET", "/v1/takedowns".to_string()),
        ("GET", "/v1/blocklist".to_string()),
        (
            "DELETE",
            "/v1/urls?url=http://example.com/a.jpg".to_string(),
        ),
        (
            "DELETE",
            "/v1/originals?url=http://example.com/a.jpg".to_string(),
        ),
        ("GET", format!("/v1/originals/{hash}/similar")),
    ] {
        refused_for(send(&app, method, &path, SHOP_B).await, "moderate", &path).await;
    }

    // A moderator lists it; neither tenant can lift it; the moderator can.
    let listed = app
        .post_json_as("/v1/blocklist", MODERATOR, &j!({ "sha256": hash }))
        .await;
    assert_eq!(listed.status(), 200);
    let id = json(listed).await["entry"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        app.get(&format!("/v1/image/{hash}?w=64")).await.status(),
        451
    );
    for token in [SHOP_A, SHOP_B] {
        let path = format!("/v1/blocklist/{id}");
        refused_for(send(&app, "DELETE", &path, token).await, "moderate", &path).await;
        let path = format!("/v1/takedowns/{hash}");
        refused_for(send(&app, "DELETE", &path, token).await, "moderate", &path).await;
    }
    let lifted = send(&app, "DELETE", &format!("/v1/blocklist/{id}"), MODERATOR).await;
    assert_eq!(lifted.status(), 200);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn each_route_opens_to_its_scope_and_the_admin_token_opens_all() {
    let app = scoped_app().await;
    let picture = photo("kodak-15.jpg");

    // Upload: tenants and admin; a moderator or ops token lacks `upload`.
    assert_eq!(app.upload_as(SHOP_A, picture.clone()).await.status(), 201);
    assert_eq!(app.upload_as(ADMIN, picture.clone()).await.status(), 200);
    refused_for(
        app.upload_as(MODERATOR, picture.clone()).await,
        "upload",
        "moderator upload",
    )
    .await;

    // Ingest: tenants; ops lacks it. An empty batch is enough to pass the guard.
    let ingest = |token: &'static str| {
        app.client
            .post(app.url("/v1/ingest"))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(j!({ "urls": [] }).to_string())
            .send()
    };
    assert_ne!(ingest(SHOP_B).await.unwrap().status(), 403);
    refused_for(ingest(OPS).await.unwrap(), "ingest", "ops ingest").await;

    // Metrics: ops and admin; a tenant lacks it.
    assert_eq!(send(&app, "GET", "/metrics", OPS).await.status(), 200);
    assert_eq!(send(&app, "GET", "/metrics", ADMIN).await.status(), 200);
    refused_for(
        send(&app, "GET", "/metrics", SHOP_A).await,
        "metrics",
        "tenant metrics",
    )
    .await;

    // Moderation: the moderator and admin.
    assert_eq!(
        send(&app, "GET", "/v1/takedowns", MODERATOR).await.status(),
        200
    );
    assert_eq!(
        send(&app, "GET", "/v1/blocklist", ADMIN).await.status(),
        200
    );

    // A token that matches nothing is still 401, not 403.
    let unknown = send(&app, "GET", "/metrics", "no-such-token-0123456789").await;
    assert_eq!(unknown.status(), 401);
    app.stop().await;
}

#[test]
fn the_environment_gives_scopes_after_the_token() {
    let load = |value: String| {
        imgcas::config::Config::load(
            None,
            |name: &str| (name == "IMGCAS_TOKENS").then(|| value.clone()),
            &imgcas::config::Flags::default(),
        )
    };
    let config = load(format!(
        "shop={SHOP_A}; mod={MODERATOR}&scopes=moderate,metrics"
    ))
    .expect("loads");
    assert_eq!(config.security.tokens["shop"].scopes, Scopes::TENANT);
    assert_eq!(
        config.security.tokens["mod"].scopes.names(),
        "metrics,moderate"
    );
    let bad = load(format!("mod={MODERATOR}&scopes=moderation"))
        .unwrap_err()
        .to_string();
    assert!(
        bad.contains("IMGCAS_TOKENS") && bad.contains("moderation"),
        "{bad}"
    );
    assert!(!bad.contains(MODERATOR), "{bad}");
}
