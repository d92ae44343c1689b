//! The Grafana dashboard (`deploy/grafana/imgcas.json`) and the Prometheus rules
//! (`deploy/prometheus/imgcas.rules.yml`) against a real Prometheus (Debian's) scraping a node
//! under traffic: every metric either names exists in its database with data, every panel's
//! query is valid PromQL that Prometheus answers, every rule evaluates without error, and
//! every recording rule records a series. (`promtool test rules` holds the rules' logic:
//! .ci/run runs it.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::common;
use common::*;

const TOKEN: &str = "prometheus-scrape-token-0123";

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path)
}

/// The metric names (`imgcas_…`) an expression names; recorded names (`imgcas:…`) aside.
fn names_in(expr: &str, into: &mut BTreeSet<String>) {
    let bytes = expr.as_bytes();
    let mut at = 0;
    while let Some(found) = expr[at..].find("imgcas_") {
        let start = at + found;
        let before = start.checked_sub(1).map(|i| bytes[i]);
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        if !before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':') {
            into.insert(expr[start..end].to_string());
        }
        at = end;
    }
}

/// Every `expr` of the dashboard's panels.
fn dashboard_exprs() -> Vec<String> {
    fn walk(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(expr)) = map.get("expr") {
                    out.push(expr.clone());
                }
                map.values().for_each(|v| walk(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let text = std::fs::read_to_string(deploy("grafana/imgcas.json")).expect("the dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// The rules' expressions, and the names the recording rules record.
fn rules() -> (Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string(deploy("prometheus/imgcas.rules.yml")).expect("the rules");
    let docs = yaml_rust2::YamlLoader::load_from_str(&text).expect("the rules are YAML");
    let (mut exprs, mut recorded) = (Vec::new(), Vec::new());
    for group in docs[0]["groups"].as_vec().expect("groups") {
        for rule in group["rules"].as_vec().expect("rules") {
            exprs.push(rule["expr"].as_str().expect("an expr").to_string());
            if let Some(name) = rule["record"].as_str() {
                recorded.push(name.to_string());
            }
        }
    }
    (exprs, recorded)
}

/// A dashboard query as Grafana would send it: its variables given values.
fn as_sent(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m").replace("$job", ".+")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `GET /api/v1/query?query=…` of the Prometheus at `base`: its `data.result`.
async fn query(client: &reqwest::Client, base: &str, promql: &str) -> Result<Vec<Value>, String> {
    let mut url =
        reqwest::Url::parse(&format!("{base}/api/v1/query")).map_err(|e| e.to_string())?;
    url.query_pairs_mut().append_pair("query", promql);
    let body = client
        .get(url)
        .send()
        .await
        .map_err(|e| e.to_string())?
        .bytes()
        .await
        .map_err(|e| e.to_string())?;
    let answer: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    if answer["status"] != "success" {
        return Err(format!("{promql}: {answer}"));
    }
    Ok(answer["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_prometheus_finds_every_metric_the_dashboard_and_rules_name() {
    let Some(prometheus) = found(&["prometheus"]) else {
        skip_unless_ci(
            "a_real_prometheus_finds_every_metric_the_dashboard_and_rules_name (prometheus)",
        );
        return;
    };
    let app = spawn_app_with(|c| {
        c.security.admin_token = Some(TOKEN.into());
        c.server.admin_sample_every = Duration::from_millis(500);
    })
    .await;
    let origin = Origin::start_with("/a.jpg", jpeg(320, 240, 5)).await;
    origin.put("/b.jpg", jpeg(320, 240, 5));
    origin.put("/c.png", png(64, 48, 7));

    // Prometheus on loopback, scraping the node every second with the admin token, with the
    // rules evaluated every second (their file's 30 s is for production).
    let dir = tempfile::tempdir().unwrap();
    let every_second = std::fs::read_to_string(deploy("prometheus/imgcas.rules.yml"))
        .unwrap()
        .replace("interval: 30s", "interval: 1s");
    std::fs::write(dir.path().join("rules.yml"), every_second).unwrap();
    let config = format!(
        "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
         rule_files: [{rules}]\n\
         scrape_configs:\n\
         - job_name: imgcas\n\
         \x20 authorization: {{credentials: \"{TOKEN}\"}}\n\
         \x20 static_configs: [{{targets: [\"{addr}\"]}}]\n",
        rules = dir.path().join("rules.yml").display(),
        addr = app.addr,
    );
    std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let _server = tokio::process::Command::new(&prometheus)
        .arg(format!(
            "--config.file={}",
            dir.path().join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("prometheus starts");
    let client = common::client();
    let mut ready = false;
    for _ in 0..300 {
        let answer = client.get(format!("{base}/-/ready")).send().await;
        if answer.is_ok_and(|r| r.status() == 200) {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "Prometheus did not become ready within 30 s");

    // Traffic for a few scrapes: misses, hits, the same bytes at another URL, a missing
    // source (an origin failure, a held one), a bad option, a page view.
    for round in 0..6 {
        for path in ["/a.jpg", "/b.jpg", "/c.png"] {
            let r = app.image_by_url(&origin.url(path), "w=30").await;
            assert_eq!(r.status(), 200, "{path} in round {round}");
        }
        let missing = app.image_from(&origin, "/missing.jpg", "w=30").await;
        assert_eq!(missing.status(), 404);
        let bad = app.image_from(&origin, "/a.jpg", "w=-1").await;
        assert_eq!(bad.status(), 400);
        let page = client
            .get(app.url("/admin"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 200);
        tokio::time::sleep(Duration::from_millis(700)).await;
    }

    let exprs = dashboard_exprs();
    let (rule_exprs, recorded) = rules();
    assert!(
        exprs.len() >= 20,
        "the dashboard's queries: {}",
        exprs.len()
    );
    let mut names = BTreeSet::new();
    for expr in exprs.iter().chain(&rule_exprs) {
        names_in(expr, &mut names);
    }
    assert!(names.len() >= 25, "names: {names:?}");

    // Every name has samples in the database (waiting for the store's totals to be read and
    // scraped), every recorded name too.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let missing = loop {
        let mut missing = Vec::new();
        for name in names.iter().chain(&recorded) {
            let promql = format!("count(count_over_time({{__name__=\"{name}\"}}[5m]))");
            let found = query(&client, &base, &promql).await.unwrap_or_default();
            if found.is_empty() {
                missing.push(name.clone());
            }
        }
        if missing.is_empty() || tokio::time::Instant::now() > deadline {
            break missing;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert!(missing.is_empty(), "no data in Prometheus for {missing:?}");

    // Every panel's query is one Prometheus answers (a typo in PromQL is an error here).
    for expr in &exprs {
        query(&client, &base, &as_sent(expr))
            .await
            .unwrap_or_else(|e| panic!("the dashboard's query fails: {e}"));
    }
    // Every rule evaluates without error.
    let body = client
        .get(format!("{base}/api/v1/rules"))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let loaded: Value = serde_json::from_slice(&body).unwrap();
    let mut evaluated = 0;
    for group in loaded["data"]["groups"].as_array().expect("rule groups") {
        for rule in group["rules"].as_array().expect("rules") {
            assert_eq!(rule["health"], "ok", "{rule}");
            evaluated += 1;
        }
    }
    assert_eq!(evaluated, rule_exprs.len());
    // What the node sampled reached it: ready, and the store's three URLs.
    let ready = query(&client, &base, "max(imgcas_ready) == 1")
        .await
        .unwrap();
    assert_eq!(ready.len(), 1, "imgcas_ready: {ready:?}");
    let urls = query(&client, &base, "max(imgcas_store_urls)")
        .await
        .unwrap();
    assert_eq!(urls[0]["value"][1], "3", "imgcas_store_urls: {urls:?}");
    app.stop().await;
}

#[test]
fn names_are_read_from_expressions() {
    let mut names = BTreeSet::new();
    names_in(
        "sum(rate(imgcas_a_total[5m])) / imgcas:b:rate5m + histogram_quantile(0.9, imgcas_c_bucket)",
        &mut names,
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["imgcas_a_total", "imgcas_c_bucket"]
    );
}
