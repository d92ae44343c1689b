//! The address guard, end to end. Every target here is loopback: the guard must refuse it by
//! default (the origin sees no request), in every textual form, and on every redirect hop.

use crate::common;

use common::*;

#[tokio::test]
async fn the_default_config_refuses_loopback_origins_without_traffic() {
    let app = spawn_app_with(|c| c.fetch.allow_private_networks = false).await;
    let origin = Origin::start_with("/a.jpg", jpeg(100, 100, 1)).await;
    let port = origin.addr.port();
    for source in [
        format!("http://127.0.0.1:{port}/a.jpg"),
        format!("http://localhost:{port}/a.jpg"),
        format!("http://localhost.:{port}/a.jpg"),
        format!("http://127.1:{port}/a.jpg"),
        format!("http://2130706433:{port}/a.jpg"),
        format!("http://0x7f000001:{port}/a.jpg"),
        format!("http://[::1]:{port}/a.jpg"),
        format!("http://[::ffff:127.0.0.1]:{port}/a.jpg"),
        format!("http://[::ffff:7f00:1]:{port}/a.jpg"),
        format!("http://[0:0:0:0:0:ffff:127.0.0.1]:{port}/a.jpg"),
        format!("http://[::]:{port}/a.jpg"),
        format!("http://127.0.0.1.:{port}/a.jpg"),
        format!("http://0177.0.0.1:{port}/a.jpg"),
        format!("http://0x7f.0.0.1:{port}/a.jpg"),
        format!("http://127.0.1:{port}/a.jpg"),
        format!("http://0:{port}/a.jpg"),
        format!("http://0.0.0.0:{port}/a.jpg"),
        format!("http://LocalHost:{port}/a.jpg"),
        format!("http://api.localhost:{port}/a.jpg"),
        format!("http://%31%32%37.0.0.1:{port}/a.jpg"),
        format!("http://\u{ff11}\u{ff12}\u{ff17}.0.0.1:{port}/a.jpg"),
        format!("http://127.0.0.1:{port}#@images.example/a.jpg"),
        format!("http://127.0.0.1:{port}\\@images.example/a.jpg"),
    ] {
        let r = app.image_by_url(&source, "w=10").await;
        assert_eq!(r.status(), 403, "{source}");
        assert_eq!(error_code_of(r).await, "source_not_allowed", "{source}");
    }
    // Credentials in the URL (`trusted@127.0.0.1`) are refused outright, whatever the host.
    for source in [
        format!("http://images.example@127.0.0.1:{port}/a.jpg"),
        format!("http://images.example:x@localhost:{port}/a.jpg"),
    ] {
        let r = app.image_by_url(&source, "w=10").await;
        assert_eq!(r.status(), 400, "{source}");
    }
    assert_eq!(origin.requests(), 0, "the origin must see no request");
}

#[tokio::test]
async fn every_redirect_hop_is_checked() {
    let origin = Origin::start().await;
    let app = spawn_app_with(|c| c.fetch.allowed_hosts = vec!["127.0.0.1".into()]).await;
    origin.put("/a.jpg", jpeg(100, 100, 2));
    let port = origin.addr.port();
    origin.redirect("/hop", &format!("http://localhost:{port}/a.jpg"));
    origin.redirect("/ok", "/a.jpg");
    let r = app.image_from(&origin, "/hop", "w=10").await;
    assert_eq!(r.status(), 403);
    assert_eq!(error_code_of(r).await, "source_not_allowed");
    assert_eq!(origin.requests(), 1, "the refused hop is never requested");

    let r = app.image_from(&origin, "/ok", "w=10").await;
    assert_eq!(r.status(), 200, "a same-host redirect is followed");

    // Issue 28: credentials in a redirect target are refused as they are in a URL given
    // directly, and the hop is never requested.
    let requests = origin.requests();
    origin.redirect("/cred", &format!("http://user:pw@127.0.0.1:{port}/a.jpg"));
    let r = app.image_from(&origin, "/cred", "w=11").await;
    assert_eq!(r.status(), 502);
    assert_eq!(error_code_of(r).await, "origin_error");
    assert_eq!(
        origin.requests(),
        requests + 1,
        "only the redirect was requested"
    );

    for i in 0..7 {
        origin.redirect(&format!("/loop{i}"), &format!("/loop{}", i + 1));
    }
    let r = app.image_from(&origin, "/loop0", "w=10").await;
    assert_eq!(r.status(), 502);
}

#[tokio::test]
async fn hosts_outside_the_allow_list_are_refused() {
    let origin = Origin::start().await;
    let app = spawn_app_with(|c| c.fetch.allowed_hosts = vec!["images.example".into()]).await;
    origin.put("/a.jpg", jpeg(10, 10, 3));
    let r = app.image_from(&origin, "/a.jpg", "").await;
    assert_eq!(r.status(), 403);
    assert_eq!(origin.requests(), 0);
}
