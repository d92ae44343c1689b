//! The operator's page (`GET /admin`, docs/operations.md "The operator's page"): refused
//! without a token, its figures and plots served as HTML and SVG without any script, each
//! plot holding the counters `/metrics` reports; in Debian's headless Chromium, the login
//! form, every section, the plots, a refresh in place, a blocklist listing made through its
//! form (the content answers 451 after), and a console without a CSP violation or an error.
//! `imgcas stats --server` prints the same savings. The fourth audit's low items (issue 67):
//! logout revokes the cookie, a login from another origin (or scheme) is refused, every
//! answer is `no-store`, and a URL no request can carry names no origin.

use std::time::Duration;

use serde_json::Value;

use crate::common;
use common::cdp::{chromium, Browser};
use common::*;

const ADMIN: &str = "console-admin-token-0123456789";
const UPLOADER: &str = "console-uploader-token-0123";

/// An app with the admin token, a named token that may only upload, and a one-second history
/// step; an origin with three pictures (two of the same bytes) and a missing one.
async fn app_with_traffic() -> (TestApp, Origin, String) {
    let app = spawn_app_with(|c| {
        c.security.admin_token = Some(ADMIN.into());
        c.security.tokens.insert(
            "uploader".into(),
            imgcas::config::tokens::NamedToken {
                token: UPLOADER.into(),
                scopes: imgcas::config::tokens::Scopes::parse_list(["upload"]).unwrap(),
            },
        );
        c.server.admin_sample_every = Duration::from_millis(500);
    })
    .await;
    let origin = Origin::start_with("/a.jpg", jpeg(320, 240, 3)).await;
    origin.put("/same.jpg", jpeg(320, 240, 3));
    origin.put("/b.jpg", jpeg(200, 300, 9));
    let mut hash = String::new();
    for round in 0..3 {
        for path in ["/a.jpg", "/same.jpg", "/b.jpg"] {
            let r = app.image_by_url(&origin.url(path), "w=40").await;
            assert_eq!(r.status(), 200, "{path}, round {round}");
            if path == "/b.jpg" {
                hash = header(&r, "x-imgcas-source-hash").unwrap().to_string();
            }
        }
        let missing = app.image_from(&origin, "/missing.jpg", "w=40").await;
        assert_eq!(missing.status(), 404);
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    (app, origin, hash)
}

/// Every plot of a page: its attributes and its points' (`data-total`, `data-v`).
#[derive(Debug)]
struct Plot {
    id: String,
    metric: String,
    labels: String,
    base: f64,
    last: f64,
    points: Vec<(f64, f64)>,
}

/// The plots of an HTML page, read from its SVG markup.
fn plots_of(html: &str) -> Vec<Plot> {
    let attr = |tag: &str, name: &str| -> String {
        let key = format!(" {name}=\"");
        tag.find(&key)
            .map(|at| {
                let rest = &tag[at + key.len()..];
                rest[..rest.find('"').unwrap_or(0)].replace("&quot;", "\"")
            })
            .unwrap_or_default()
    };
    let number = |text: String| text.parse::<f64>().unwrap_or(f64::NAN);
    html.split("<svg class=\"plot\"")
        .skip(1)
        .map(|svg| {
            let svg = &svg[..svg.find("</svg>").expect("the plot ends")];
            let head = &svg[..svg.find('>').unwrap()];
            Plot {
                id: attr(head, "id"),
                metric: attr(head, "data-metric"),
                labels: attr(head, "data-labels"),
                base: number(attr(head, "data-base")),
                last: number(attr(head, "data-last")),
                points: svg
                    .split("<circle")
                    .skip(1)
                    .map(|c| (number(attr(c, "data-total")), number(attr(c, "data-v"))))
                    .collect(),
            }
        })
        .collect()
}

/// What `/metrics` says of a plot's series: its samples summed, those of its labels only.
fn reported(scrape: &prometheus_parse::Scrape, plot: &Plot) -> f64 {
    let labels: Vec<(&str, &str)> = plot
        .labels
        .split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            Some((k.trim(), v.trim().trim_matches('"')))
        })
        .collect();
    metric_value(scrape, &plot.metric, &labels)
}

/// The plots drawn as increases per interval: each point the difference of the counter at it
/// and at the point before (the first, from the window's first sample).
const DELTA_PLOTS: [&str; 5] = ["requests", "runs", "dedup-saved", "shed", "errors"];

/// Checks a page's plots against a scrape taken right after it: the last value each holds is
/// what `/metrics` reports, and the increases drawn add up. `Err` names the first mismatch
/// (work finishing in the background between the two reads can cause one: callers retry).
fn check_plots(html: &str, scrape: &prometheus_parse::Scrape) -> Result<usize, String> {
    let plots = plots_of(html);
    if plots.len() != 14 {
        return Err(format!(
            "7 plots of 2 windows expected, found {}",
            plots.len()
        ));
    }
    for plot in &plots {
        let metrics = reported(scrape, plot);
        if plot.last != metrics {
            return Err(format!(
                "{}: the page holds {}, /metrics {metrics}",
                plot.id, plot.last
            ));
        }
        let Some(&(last_total, _)) = plot.points.last() else {
            return Err(format!("{}: no point drawn", plot.id));
        };
        if last_total != plot.last {
            return Err(format!(
                "{}: the last point is not the counter now",
                plot.id
            ));
        }
        let kind = plot.id.trim_start_matches("plot-");
        if DELTA_PLOTS
            .iter()
            .any(|d| kind.starts_with(&format!("{d}-")))
        {
            let mut before = plot.base;
            for &(total, v) in &plot.points {
                if total - before != v {
                    return Err(format!("{}: drew {v} for {before} → {total}", plot.id));
                }
                before = total;
            }
        }
    }
    Ok(plots.len())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_page_is_refused_without_a_token_and_shows_its_figures_without_a_script() {
    let (app, _origin, _) = app_with_traffic().await;
    let page = app.get("/admin").await;
    assert_eq!(page.status(), 401);
    let text = page.text().await.unwrap();
    assert!(text.contains("name=\"token\"") && !text.contains("id=\"savings\""));
    // The wrong token, and a token without the `metrics` scope, do not open it.
    let login = |token: &str| {
        app.client
            .post(app.url("/admin/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}"))
            .send()
    };
    assert_eq!(login("not-a-token-at-all-000").await.unwrap().status(), 401);
    assert_eq!(login(UPLOADER).await.unwrap().status(), 401);
    assert_eq!(get_as(&app, "/admin", UPLOADER).await.status(), 403);

    // The admin token: a session cookie, HttpOnly and SameSite=Strict, never the token.
    let ok = login(ADMIN).await.unwrap();
    assert_eq!(ok.status(), 303);
    let cookie = header(&ok, "set-cookie").unwrap().to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(!cookie.contains(ADMIN));
    let session = cookie.split(';').next().unwrap().to_string();
    let with_cookie = app
        .client
        .get(app.url("/admin"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(with_cookie.status(), 200);
    let csp = header(&with_cookie, "content-security-policy").unwrap();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    // The session does not act for a page of another origin.
    let forged = app
        .client
        .post(app.url("/v1/blocklist"))
        .header("cookie", &session)
        .header("origin", "https://elsewhere.example")
        .header("content-type", "application/json")
        .body(serde_json::json!({ "sha256": "00".repeat(32) }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);

    // The figures are in the HTML itself, as are the plots (no script needed), and the
    // plots hold what `/metrics` reports.
    let mut checked = Err(String::new());
    for _ in 0..5 {
        let html = get_as(&app, "/admin", ADMIN).await.text().await.unwrap();
        for id in [
            "savings",
            "now",
            "moderation-section",
            "tiers",
            "tenants",
            "slowest-origins",
        ] {
            assert!(html.contains(&format!("id=\"{id}\"")), "{id} missing");
        }
        // 9 pictures and 2 of the 3 missing one's answers (the failure held: `error-hit`).
        assert!(
            html.contains("<dt>Image requests</dt><dd>11</dd>"),
            "11 image answers: {html}"
        );
        assert!(html.contains("<dt>Processing runs</dt>"));
        let scrape = scrape_as(&app, ADMIN).await;
        checked = check_plots(&html, &scrape);
        if checked.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(checked, Ok(14));

    // The savings as JSON: 11 image answers, 6 of them hits; two runs (a.jpg and same.jpg
    // are the same bytes).
    let savings: Value = json(get_as(&app, "/admin/savings", ADMIN).await).await;
    assert_eq!(savings["node"]["requests"], 11);
    assert_eq!(savings["node"]["hits"], 6);
    assert_eq!(savings["node"]["processing_runs"], 2);
    assert_eq!(savings["node"]["requests_per_run"], 5.5);
    app.stop().await;
}

/// `GET path` with a bearer token.
async fn get_as(app: &TestApp, path: &str, token: &str) -> reqwest::Response {
    app.get_as(path, token).await
}

/// `/metrics` with a token.
async fn scrape_as(app: &TestApp, token: &str) -> prometheus_parse::Scrape {
    let text = get_as(app, "/metrics", token).await.text().await.unwrap();
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_store_totals_count_urls_against_originals() {
    let (app, _origin, _) = app_with_traffic().await;
    // Three URLs, two originals (a.jpg and same.jpg are the same bytes): one original's bytes
    // saved by exact dedup. The totals are read every six samples (3 s here).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let store = loop {
        let savings: Value = json(get_as(&app, "/admin/savings", ADMIN).await).await;
        let store = savings["store"].clone();
        if store["urls"] == 3 || tokio::time::Instant::now() > deadline {
            break store;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(store["urls"], 3, "{store}");
    assert_eq!(store["originals"], 2, "{store}");
    let a_bytes = jpeg(320, 240, 3).len() as u64;
    let b_bytes = jpeg(200, 300, 9).len() as u64;
    assert_eq!(store["original_bytes"], a_bytes + b_bytes);
    assert_eq!(store["pointed_bytes"], 2 * a_bytes + b_bytes);
    assert_eq!(store["exact_saved_bytes"], a_bytes);
    let m = scrape_as(&app, ADMIN).await;
    assert_eq!(metric_value(&m, "imgcas_store_urls", &[]), 3.0);
    assert_eq!(
        metric_value(&m, "imgcas_store_exact_saved_bytes", &[]),
        a_bytes as f64
    );
    assert_eq!(metric_value(&m, "imgcas_ready", &[]), 1.0);
    app.stop().await;
}

#[tokio::test]
async fn the_page_is_off_when_configured_off() {
    let app = spawn_app_with(|c| c.server.admin_page = false).await;
    assert_eq!(app.get("/admin").await.status(), 404);
    assert_eq!(app.get("/admin/savings").await.status(), 404);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stats_prints_the_savings_of_a_running_node() {
    let (app, _origin, _) = app_with_traffic().await;
    let base = format!("http://{}", app.addr);
    let dir = tempfile::tempdir().unwrap();
    let (code, out) = binary::run(
        dir.path(),
        &[],
        &["stats", "--server", &base, "--admin-token", ADMIN],
    );
    assert_eq!(code, 0, "{out}");
    let line = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no `{name}` line: {out}"))
            .to_string()
    };
    assert!(line("image requests").ends_with(" 11"), "{out}");
    assert!(line("processing runs").ends_with(" 2"), "{out}");
    assert!(line("requests per run").ends_with(" 5.5"), "{out}");
    let (code, out) = binary::run(
        dir.path(),
        &[],
        &["stats", "--server", &base, "--admin-token", ADMIN, "--json"],
    );
    assert_eq!(code, 0, "{out}");
    let json_start = out.find('{').expect("JSON printed");
    let parsed: Value = serde_json::from_str(&out[json_start..]).expect("savings JSON");
    assert_eq!(parsed["node"]["hits"], 6);
    // Without the token the node refuses, and the command says why.
    let (code, _) = binary::run(dir.path(), &[], &["stats", "--server", &base]);
    assert_ne!(code, 0, "refused without the token");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_page_in_chromium_logs_in_refreshes_and_lists_through_its_form() {
    let Some(program) = chromium() else {
        skip_unless_ci(
            "the_page_in_chromium_logs_in_refreshes_and_lists_through_its_form (chromium)",
        );
        return;
    };
    let (app, origin, hash) = app_with_traffic().await;
    let mut browser = Browser::start(&program, 1280, 900).await;

    // Without a session: the login form, and not a figure.
    browser.navigate(&app.url("/admin")).await;
    let shown = browser
        .eval(
            "[!!document.querySelector('input[name=token]'), !!document.getElementById('savings')]",
        )
        .await;
    assert_eq!(shown, serde_json::json!([true, false]));
    // (The 401 itself shows in the console as a failed load; what counts starts here.)
    browser.problems.clear();

    // Logging in through the form.
    browser.events_clear();
    browser
        .eval(&format!(
            "document.querySelector('input[name=token]').value = '{ADMIN}'; \
             document.querySelector('form').submit(); true"
        ))
        .await;
    browser.wait_for_event("Page.loadEventFired").await;
    let sections = browser
        .eval("['savings', 'now', 'moderation-section', 'tiers', 'tenants', 'slowest-origins', 'failing-origins', 'takedowns', 'blocklist'].filter(id => !document.getElementById(id))")
        .await;
    assert_eq!(sections, serde_json::json!([]), "sections missing");
    assert_eq!(
        browser.eval("document.cookie").await,
        "",
        "the cookie is HttpOnly"
    );

    // The plots as the browser holds them match /metrics (read right after).
    let mut checked = Err(String::new());
    for _ in 0..5 {
        let html = browser.eval("document.documentElement.outerHTML").await;
        let scrape = scrape_as(&app, ADMIN).await;
        checked = check_plots(html.as_str().unwrap(), &scrape);
        if checked.is_ok() {
            break;
        }
        browser.navigate(&app.url("/admin")).await;
    }
    assert_eq!(checked, Ok(14));
    let drawn = browser
        .eval("[...document.querySelectorAll('svg.plot')].every(s => s.querySelectorAll('circle').length > 0 && s.getBBox().width > 0)")
        .await;
    assert_eq!(drawn, true, "every plot drawn with points");

    // It refreshes in place: the live part is fetched again, the document is not reloaded.
    let loaded_at = browser.eval("document.body.dataset.loadedAt").await;
    assert!(
        browser
            .wait_until(
                "Number(document.body.dataset.refreshes) >= 2",
                Duration::from_secs(15)
            )
            .await,
        "no refresh in place"
    );
    assert_eq!(
        browser.eval("document.body.dataset.loadedAt").await,
        loaded_at
    );

    // A listing through the form: the picture answers 451 after, by hash and by URL.
    browser
        .eval(&format!(
            "const f = document.getElementById('block-form'); \
             f.querySelector('input[name=sha256]').value = '{hash}'; \
             f.querySelector('input[name=note]').value = 'listed from the page'; \
             f.requestSubmit(); true"
        ))
        .await;
    assert!(
        browser
            .wait_until(
                "(document.body.dataset.lastAction || '').startsWith('POST /v1/blocklist 200')",
                Duration::from_secs(20)
            )
            .await,
        "the listing did not answer 200: {}",
        browser.eval("document.body.dataset.lastAction || ''").await
    );
    let listed = browser
        .eval("document.getElementById('blocklist').textContent")
        .await;
    assert!(listed.as_str().unwrap().contains(&hash), "{listed}");
    let by_hash = app.get(&format!("/v1/image/{hash}?w=40")).await;
    assert_eq!(by_hash.status(), 451);
    let by_url = app.image_from(&origin, "/b.jpg", "w=40").await;
    assert_eq!(by_url.status(), 451);

    // A screenshot for the record (target/tmp), and a console without a problem.
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("admin-page.png");
    browser.screenshot(&shot).await;
    assert!(std::fs::metadata(&shot).unwrap().len() > 10_000);
    eprintln!("the admin page's screenshot: {}", shot.display());
    let noted = browser.eval("document.body.dataset.problems || ''").await;
    assert_eq!(noted, "", "the page noted problems");
    assert!(
        browser.problems.is_empty(),
        "console: {:#?}",
        browser.problems
    );
    app.stop().await;
}

/// An app with the admin token alone (no traffic).
async fn app_with_admin() -> TestApp {
    spawn_app_with(|c| c.security.admin_token = Some(ADMIN.into())).await
}

/// `POST /admin/login` with the admin token and `headers`.
async fn post_login(app: &TestApp, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = app
        .client
        .post(app.url("/admin/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={ADMIN}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// The session cookie (`name=value`) a login answer sets.
fn session_of(login: &reqwest::Response) -> String {
    assert_eq!(login.status(), 303);
    let cookie = header(login, "set-cookie").expect("a session cookie");
    cookie.split(';').next().unwrap().to_string()
}

/// `GET path` with the session cookie and `headers`.
async fn get_with_session(
    app: &TestApp,
    path: &str,
    session: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = app.client.get(app.url(path)).header("cookie", session);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// Audit #4 (issue 67), low items: `POST /admin/logout` only cleared the browser's cookie, and
/// a copy of the cookie replayed afterwards opened the page for the rest of its 12 hours.
/// Logging out now revokes it on the node; a new login is a new session.
#[tokio::test(flavor = "multi_thread")]
async fn logging_out_revokes_the_session() {
    let app = app_with_admin().await;
    let session = session_of(&post_login(&app, &[]).await);
    assert_eq!(
        get_with_session(&app, "/admin", &session, &[])
            .await
            .status(),
        200
    );
    assert_eq!(
        get_with_session(&app, "/metrics", &session, &[])
            .await
            .status(),
        200
    );

    let logout = app
        .client
        .post(app.url("/admin/logout"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(logout.status(), 303);
    assert!(header(&logout, "set-cookie").unwrap().contains("Max-Age=0"));

    // The same cookie, replayed: refused everywhere it opened.
    let replayed = get_with_session(&app, "/admin", &session, &[]).await;
    assert_eq!(replayed.status(), 401, "the page after logout");
    assert!(!replayed.text().await.unwrap().contains("id=\"savings\""));
    assert_eq!(
        get_with_session(&app, "/metrics", &session, &[])
            .await
            .status(),
        401
    );
    assert_eq!(
        get_with_session(&app, "/admin/savings", &session, &[])
            .await
            .status(),
        401
    );

    // Logging in again (in the same second, too) is another session, which works.
    let again = session_of(&post_login(&app, &[]).await);
    assert_ne!(again, session);
    assert_eq!(
        get_with_session(&app, "/admin", &again, &[]).await.status(),
        200
    );
    app.stop().await;
}

/// Audit #4 (issue 67): a form on another site posting to `/admin/login` (login CSRF) set a
/// session in the operator's browser, even as `text/plain`. A post from another origin is
/// refused now, as a session from one is: 401 `unauthorized`, and no cookie.
#[tokio::test(flavor = "multi_thread")]
async fn a_login_from_another_origin_is_refused() {
    let app = app_with_admin().await;
    let own = format!("http://{}", app.addr);
    for headers in [
        vec![("origin", "https://elsewhere.example")],
        vec![
            ("origin", "https://elsewhere.example"),
            ("content-type", "text/plain"),
        ],
        vec![("sec-fetch-site", "cross-site")],
        vec![("sec-fetch-site", "same-site")],
        vec![("origin", "null")],
    ] {
        let refused = post_login(&app, &headers).await;
        assert_eq!(refused.status(), 401, "{headers:?}");
        assert!(header(&refused, "set-cookie").is_none(), "{headers:?}");
        assert_eq!(header(&refused, "cache-control"), Some("no-store"));
        let body = json(refused).await;
        assert_eq!(body["error"]["code"], "unauthorized", "{headers:?}: {body}");
    }
    // The page's own origin, and a client that names none (curl, scripts), log in.
    let from_page = post_login(&app, &[("origin", &own), ("sec-fetch-site", "same-origin")]).await;
    let session = session_of(&from_page);
    assert_eq!(
        get_with_session(&app, "/admin", &session, &[])
            .await
            .status(),
        200
    );
    session_of(&post_login(&app, &[]).await);
    app.stop().await;
}

/// Audit #4 (issue 67): the origin check compared the host alone, so `Origin: http://host`
/// passed for a page served over HTTPS (as `X-Forwarded-Proto` says). The scheme counts now.
#[tokio::test(flavor = "multi_thread")]
async fn the_origin_check_compares_the_scheme() {
    let app = app_with_admin().await;
    let plain = format!("http://{}", app.addr);
    let secure = format!("https://{}", app.addr);
    let session = session_of(&post_login(&app, &[]).await);
    let https_origin = [("x-forwarded-proto", "https"), ("origin", secure.as_str())];
    let http_origin = [("x-forwarded-proto", "https"), ("origin", plain.as_str())];
    // Served over HTTPS: only the https origin acts through the session.
    let ok = get_with_session(&app, "/metrics", &session, &https_origin).await;
    assert_eq!(ok.status(), 200);
    let refused = get_with_session(&app, "/metrics", &session, &http_origin).await;
    assert_eq!(refused.status(), 401, "http origin for an https page");
    // Served over plain HTTP: the https origin is another one.
    let refused = get_with_session(&app, "/metrics", &session, &[("origin", &secure)]).await;
    assert_eq!(refused.status(), 401, "https origin for an http page");
    let ok = get_with_session(&app, "/metrics", &session, &[("origin", &plain)]).await;
    assert_eq!(ok.status(), 200);
    // The login form too; behind HTTPS its cookie is `Secure`.
    assert_eq!(post_login(&app, &http_origin).await.status(), 401);
    let secure_login = post_login(&app, &https_origin).await;
    assert_eq!(secure_login.status(), 303);
    assert!(header(&secure_login, "set-cookie")
        .unwrap()
        .contains("; Secure"));
    app.stop().await;
}

/// Audit #4 (issue 67): `/admin/savings` answered 200 with no `Cache-Control`, so a cache
/// between the operator and the node could keep the figures. Every answer of the page's
/// routes is `no-store` now, refusals included.
#[tokio::test(flavor = "multi_thread")]
async fn every_admin_answer_is_no_store() {
    let app = app_with_admin().await;
    let session = session_of(&post_login(&app, &[]).await);
    let mut answers = vec![
        ("GET /admin without a token", app.get("/admin").await),
        ("GET /admin", get_as(&app, "/admin", ADMIN).await),
        (
            "GET /admin?part=live",
            get_as(&app, "/admin?part=live", ADMIN).await,
        ),
        (
            "GET /admin/savings without a token",
            app.get("/admin/savings").await,
        ),
        (
            "GET /admin/savings",
            get_as(&app, "/admin/savings", ADMIN).await,
        ),
        (
            "GET /admin/savings with the session",
            get_with_session(&app, "/admin/savings", &session, &[]).await,
        ),
        ("POST /admin/login", post_login(&app, &[]).await),
        ("GET /admin/admin.js", app.get("/admin/admin.js").await),
        ("GET /admin/admin.css", app.get("/admin/admin.css").await),
    ];
    let wrong = app
        .post_body("/admin/login", "token=not-the-token-at-all-0000")
        .await;
    answers.push(("POST /admin/login with a wrong token", wrong));
    let logout = app
        .client
        .post(app.url("/admin/logout"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    answers.push(("POST /admin/logout", logout));
    for (what, answer) in answers {
        assert_eq!(
            header(&answer, "cache-control"),
            Some("no-store"),
            "{what}: {}",
            answer.status()
        );
    }
    app.stop().await;
}

/// Audit #4 (issue 67): a URL whose host the URL standard admits but an HTTP request cannot
/// carry (`http://a{1}.example/…`) failed in the client after its origin had been named on the
/// operator's page and in metrics, so anyone could fill the 50 named slots with such URLs.
/// They are refused as malformed now (400 `invalid_option`), and no origin is named for them.
#[tokio::test(flavor = "multi_thread")]
async fn urls_a_request_cannot_carry_name_no_origin() {
    let app = app_with_admin().await;
    for i in 0..3 {
        let bad = format!("http://slot{{{i}}}.example/a.jpg");
        let answer = app.image_by_url(&bad, "w=10").await;
        assert_eq!(answer.status(), 400, "{bad}");
        assert_eq!(error_code_of(answer).await, "invalid_option", "{bad}");
    }
    let text = get_as(&app, "/metrics", ADMIN).await.text().await.unwrap();
    let named: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("imgcas_origin_") && l.contains("slot"))
        .collect();
    assert!(named.is_empty(), "origins named: {named:?}");
    let page = get_as(&app, "/admin", ADMIN).await.text().await.unwrap();
    assert!(!page.contains("slot{"), "the page names a malformed origin");
    app.stop().await;
}
