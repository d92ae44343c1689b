//! Signed URLs: with keys configured, image requests need `sig`, the HMAC-SHA256 of
//! `<path>?<sorted, form-encoded query without sig>`. The signatures here are computed
//! independently of the service's code (by the `hmac` crate directly, and by `openssl` as the
//! recipe of docs/api.md ("Signed URLs") shows when it is installed).

use crate::common;

use std::process::Command;

use common::*;

const OLD: &str = "the-old-key-0123456789abcdef";
const NEW: &str = "the-new-key-fedcba9876543210";

fn encoded(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[tokio::test]
async fn good_bad_missing_and_rotated_signatures() {
    let app = spawn_app_with(|c| c.security.signing_key = Some(format!("{NEW},{OLD}"))).await;
    let origin = Origin::start_with("/a.jpg", jpeg(200, 100, 3)).await;
    // Already canonical: sorted by name, form-encoded.
    let query = format!("url={}&w=50", encoded(&origin.url("/a.jpg")));
    let get = |q: String| {
        let client = app.client.clone();
        let url = app.url(&format!("/v1/image?{q}"));
        async move { client.get(url).send().await.unwrap() }
    };

    for key in [NEW, OLD] {
        let sig = hmac_hex(key, &format!("/v1/image?{query}"));
        let r = get(format!("{query}&sig={sig}")).await;
        assert_eq!(r.status(), 200, "signed with {key}");
        // Parameter order does not matter: the signature covers the sorted query.
        let reordered = format!("w=50&sig={sig}&url={}", encoded(&origin.url("/a.jpg")));
        assert_eq!(get(reordered).await.status(), 200);
    }

    let good = hmac_hex(NEW, &format!("/v1/image?{query}"));
    let tampered = format!("{}&sig={good}", query.replace("w=50", "w=500"));
    let foreign = hmac_hex(
        "a-key-nobody-configured-here",
        &format!("/v1/image?{query}"),
    );
    for (case, q) in [
        ("missing", query.clone()),
        ("tampered", tampered),
        ("unknown key", format!("{query}&sig={foreign}")),
        ("not hex", format!("{query}&sig=xyz")),
    ] {
        let r = get(q).await;
        assert_eq!(r.status(), 403, "{case}");
        assert_eq!(error_code_of(r).await, "bad_signature", "{case}");
    }
    assert_eq!(origin.requests(), 1, "refused requests reach no origin");

    // By-hash URLs are signed over their own path.
    let hash = imgcas::hash::ContentHash::of(&jpeg(200, 100, 3)).to_hex();
    let path = format!("/v1/image/{hash}");
    let sig = hmac_hex(OLD, &format!("{path}?w=20"));
    let r = app.get(&format!("{path}?w=20&sig={sig}")).await;
    assert_eq!(r.status(), 200);
    let r = app.get(&format!("{path}?w=20")).await;
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn the_readme_openssl_one_liner_signs_correctly() {
    if Command::new("openssl").arg("version").output().is_err() {
        skip_unless_ci("openssl not installed");
        return;
    }
    let app = spawn_app_with(|c| c.security.signing_key = Some(NEW.into())).await;
    let origin = Origin::start_with("/b.jpg", jpeg(120, 80, 4)).await;
    let query = format!("format=webp&url={}&w=40", encoded(&origin.url("/b.jpg")));
    // The recipe of docs/api.md, verbatim apart from the variables.
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"printf '%s' "/v1/image?$QUERY" | openssl dgst -sha256 -hmac "$KEY" -r | cut -d' ' -f1"#)
        .env("QUERY", &query)
        .env("KEY", NEW)
        .output()
        .unwrap();
    let sig = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert_eq!(sig.len(), 64, "openssl printed {sig:?}");
    let r = app.get(&format!("/v1/image?{query}&sig={sig}")).await;
    assert_eq!(r.status(), 200);
}
