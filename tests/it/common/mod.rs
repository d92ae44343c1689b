//! Test harness: the whole app on a random loopback port (`spawn_app`), a counting origin
//! server (axum on 127.0.0.1:0), and generated images. Tests speak HTTP to both, like a
//! client and an origin would.

#![allow(dead_code)]

pub mod binary;
pub mod cdp;
pub mod nginx;
pub mod pgbouncer;
pub mod postgres;
pub mod relay;
pub mod s3;

use std::collections::HashMap;
use std::io::Cursor;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use image::{DynamicImage, ImageFormat, Rgb, RgbImage, Rgba, RgbaImage};

use imgcas::app::{self, RunningApp};
use imgcas::config::Config;
use imgcas::hash::ContentHash;
use imgcas::pipeline::Pipeline;
use imgcas::stats::StatsSnapshot;

/// A test whose outside dependency (a tool, a data set, a server) is missing: it passes with a
/// note on a developer's machine, and fails loudly under CI (`CI` set), where `.ci/run`
/// provides every dependency, so that nothing skips there unnoticed.
pub fn skip_unless_ci(what: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{what}: CI must run this test (.ci/run provides it)"
    );
    eprintln!("{what}: skipped");
}

/// The first of `names` on the PATH.
pub fn found(names: &[&str]) -> Option<String> {
    names.iter().find_map(|name| {
        let ok = std::process::Command::new("sh")
            .args(["-c", &format!("command -v {name}")])
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| name.to_string())
    })
}

pub fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("test client")
}

pub struct TestApp {
    pub addr: SocketAddr,
    /// The app's pipeline, for its public counters and read-only views.
    pub pipeline: Pipeline,
    pub client: reqwest::Client,
    pub dir: Arc<tempfile::TempDir>,
    /// The bucket (and in-process server) originals go to when the suite runs on S3.
    pub s3: Option<Arc<s3::S3Target>>,
    running: Option<RunningApp>,
}

/// The app on its defaults, except: a temp data dir, a random port, and loopback origins
/// allowed (every origin in these tests is on 127.0.0.1).
pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

/// A node named `name` of a cluster on the maps at `maps_url` and `bucket`, in a data dir of
/// its own (returned with it: the node's files live as long as it), `tweak` applied last.
pub async fn cluster_node(
    bucket: &Arc<s3::S3Target>,
    maps_url: &str,
    name: &str,
    tweak: impl FnOnce(&mut Config),
) -> (TestApp, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().to_path_buf();
    let app = spawn_app_with(|c| {
        c.data_dir = path;
        bucket.configure(c);
        c.storage.backend = imgcas::config::StorageBackend::S3;
        c.maps.url = Some(maps_url.to_string());
        c.cluster.node_id = Some(name.to_string());
        tweak(c);
    })
    .await;
    (app, dir)
}

pub async fn spawn_app_with(tweak: impl FnOnce(&mut Config)) -> TestApp {
    let dir = Arc::new(tempfile::tempdir().expect("temp dir"));
    let mut config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.path().to_path_buf(),
        ..Config::default()
    };
    config.fetch.allow_private_networks = true;
    let s3 = if s3::pipeline_on_s3() {
        let target = s3::S3Target::new().await;
        target.configure(&mut config);
        Some(Arc::new(target))
    } else {
        None
    };
    tweak(&mut config);
    // Shared maps go with a shared bucket: one database per data dir, so an app started
    // again on a data dir finds its maps.
    if config.storage.backend == imgcas::config::StorageBackend::S3 && config.maps.url.is_none() {
        config.maps.url = postgres::maps_url_for(&config.data_dir);
    }
    let running = app::start(config).await.expect("app starts");
    TestApp {
        addr: running.addr(),
        pipeline: running.pipeline().clone(),
        client: client(),
        dir,
        s3,
        running: Some(running),
    }
}

/// Storage that outlives one app: a data dir and, when the suite runs on S3, a bucket (its
/// in-process server serves while this lives). An app stopped and started again on it, with
/// other settings, finds what the first one stored.
pub struct Restartable {
    dir: tempfile::TempDir,
    bucket: Option<Arc<s3::S3Target>>,
}

impl Restartable {
    pub async fn new() -> Restartable {
        Restartable {
            dir: tempfile::tempdir().expect("temp dir"),
            bucket: match s3::pipeline_on_s3() {
                true => Some(Arc::new(s3::S3Target::new().await)),
                false => None,
            },
        }
    }

    /// The data dir every app spawned here shares.
    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// [`spawn_app_with`] on this storage, with `tweak` applied as well.
    pub async fn spawn(&self, tweak: impl FnOnce(&mut Config)) -> TestApp {
        let (dir, bucket) = (self.dir.path().to_path_buf(), self.bucket.clone());
        spawn_app_with(move |c| {
            c.data_dir = dir;
            match bucket {
                Some(bucket) => bucket.configure(c),
                None => c.storage.backend = imgcas::config::StorageBackend::Fs,
            }
            tweak(c);
        })
        .await
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// `GET /v1/image?url=<source>&<query>`.
    pub async fn image_by_url(&self, source: &str, query: &str) -> reqwest::Response {
        let mut url = reqwest::Url::parse(&self.url("/v1/image")).unwrap();
        url.query_pairs_mut().append_pair("url", source);
        let full = if query.is_empty() {
            url.to_string()
        } else {
            format!("{url}&{query}")
        };
        self.client.get(full).send().await.expect("request")
    }

    /// The status of `GET /v1/image?url=<source>&<query>`.
    pub async fn image_status(&self, source: &str, query: &str) -> reqwest::StatusCode {
        self.image_by_url(source, query).await.status()
    }

    /// `GET /v1/image?url=<origin's path>&<query>`.
    pub async fn image_from(&self, origin: &Origin, path: &str, query: &str) -> reqwest::Response {
        self.image_by_url(&origin.url(path), query).await
    }

    /// The status of `GET /v1/image?url=<origin's path>&<query>`.
    pub async fn image_from_status(
        &self,
        origin: &Origin,
        path: &str,
        query: &str,
    ) -> reqwest::StatusCode {
        self.image_status(&origin.url(path), query).await
    }

    /// `/v1/image` on the app with `pairs` as its query, each appended in order.
    pub fn image_url(&self, pairs: &[(&str, &str)]) -> reqwest::Url {
        let mut url = reqwest::Url::parse(&self.url("/v1/image")).unwrap();
        url.query_pairs_mut().extend_pairs(pairs);
        url
    }

    /// `POST <path>` on the app with `token` as the bearer and `value` as a JSON body.
    pub async fn post_json_as(
        &self,
        path: &str,
        token: &str,
        value: &serde_json::Value,
    ) -> reqwest::Response {
        let request = self.client.post(self.url(path)).bearer_auth(token);
        send_json(request, value).await
    }

    /// `GET <path>` on the app.
    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("request")
    }

    /// `GET <path>` on the app with `token` as the bearer.
    pub async fn get_as(&self, path: &str, token: &str) -> reqwest::Response {
        self.send_as(reqwest::Method::GET, self.url(path), token)
            .await
    }

    /// `DELETE <path>` on the app with `token` as the bearer.
    pub async fn delete_as(&self, path: &str, token: &str) -> reqwest::Response {
        self.send_as(reqwest::Method::DELETE, self.url(path), token)
            .await
    }

    /// `DELETE <url>` (a full URL, e.g. with a query) with `token` as the bearer.
    pub async fn delete_url_as(
        &self,
        url: impl reqwest::IntoUrl,
        token: &str,
    ) -> reqwest::Response {
        self.send_as(reqwest::Method::DELETE, url, token).await
    }

    /// `<method> <url>` with `token` as the bearer and no body.
    pub async fn send_as(
        &self,
        method: reqwest::Method,
        url: impl reqwest::IntoUrl,
        token: &str,
    ) -> reqwest::Response {
        send_as(&self.client, method, url, token).await
    }

    /// `POST <path>` on the app with `token` as the bearer and `body` (no headers of its own).
    pub async fn post_as(
        &self,
        path: &str,
        token: &str,
        body: impl Into<reqwest::Body>,
    ) -> reqwest::Response {
        post_as(&self.client, self.url(path), token, body).await
    }

    /// `POST <path>` on the app with `value` as a JSON body.
    pub async fn post_json(&self, path: &str, value: &serde_json::Value) -> reqwest::Response {
        send_json(self.client.post(self.url(path)), value).await
    }

    /// `POST <path>` on the app with `body` and no headers of its own.
    pub async fn post_body(&self, path: &str, body: impl Into<reqwest::Body>) -> reqwest::Response {
        let request = self.client.post(self.url(path)).body(body);
        request.send().await.expect("request")
    }

    pub async fn upload(&self, bytes: Vec<u8>) -> reqwest::Response {
        self.upload_request(bytes).send().await.expect("upload")
    }

    /// `POST /v1/originals` with `token` (uploads need one once a token is set).
    pub async fn upload_as(&self, token: &str, bytes: Vec<u8>) -> reqwest::Response {
        let request = self.upload_request(bytes).bearer_auth(token);
        request.send().await.expect("upload")
    }

    fn upload_request(&self, bytes: Vec<u8>) -> reqwest::RequestBuilder {
        self.client
            .post(self.url("/v1/originals"))
            .header("content-type", "application/octet-stream")
            .body(bytes)
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.pipeline.stats()
    }

    pub fn downloads(&self) -> u64 {
        self.stats().downloads
    }

    pub fn processing_runs(&self) -> u64 {
        self.stats().processing_runs
    }

    /// Every hash in the blob store.
    pub async fn stored_blobs(&self) -> Vec<ContentHash> {
        self.pipeline.stored_blobs().await.expect("list blobs")
    }

    /// `GET /metrics`, parsed with a Prometheus text-format parser.
    pub async fn metrics(&self) -> prometheus_parse::Scrape {
        scrape(&self.client, &self.url("")).await
    }

    /// Requests the app answered on the image routes, and how many of them were `304`s.
    /// (Read from the raw text: the Prometheus parser used elsewhere drops series whose
    /// label values hold braces, as the route pattern `/v1/image/{hash}` does.)
    pub async fn image_requests(&self) -> (u64, u64) {
        let text = metrics_text(&self.client, &self.url("")).await;
        let mut all = 0;
        let mut not_modified = 0;
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("imgcas_http_requests_total{") else {
                continue;
            };
            if !rest.contains("route=\"/v1/image") {
                continue;
            }
            let n: f64 = rest
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .expect("a sample value");
            all += n as u64;
            if rest.contains("status=\"304\"") {
                not_modified += n as u64;
            }
        }
        (all, not_modified)
    }

    pub async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.stop().await;
        }
    }
}

/// Sends `request` with `value` as its JSON body.
async fn send_json(
    request: reqwest::RequestBuilder,
    value: &serde_json::Value,
) -> reqwest::Response {
    let request = request.header("content-type", "application/json");
    request
        .body(value.to_string())
        .send()
        .await
        .expect("request")
}

/// `<method> <url>` through `client` with `token` as the bearer and no body.
pub async fn send_as(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: impl reqwest::IntoUrl,
    token: &str,
) -> reqwest::Response {
    let request = client.request(method, url).bearer_auth(token);
    request.send().await.expect("request")
}

/// `POST <url>` through `client` with `token` as the bearer and `body` (no headers of its own).
pub async fn post_as(
    client: &reqwest::Client,
    url: impl reqwest::IntoUrl,
    token: &str,
    body: impl Into<reqwest::Body>,
) -> reqwest::Response {
    let request = client.post(url).bearer_auth(token).body(body);
    request.send().await.expect("request")
}

/// `GET <url>` through a fresh [`client`] with `token` as the bearer.
pub async fn get_url_as(url: impl reqwest::IntoUrl, token: &str) -> reqwest::Response {
    send_as(&client(), reqwest::Method::GET, url, token).await
}

/// `POST <url>` through a fresh [`client`] with `token` as the bearer and `body`.
pub async fn post_url_as(
    url: impl reqwest::IntoUrl,
    token: &str,
    body: impl Into<reqwest::Body>,
) -> reqwest::Response {
    post_as(&client(), url, token, body).await
}

/// Polls `fetch` every 100 ms until `done` holds of its answer, failing with `what` after `limit`.
pub async fn poll_until<F: std::future::Future<Output = serde_json::Value>>(
    what: &str,
    limit: Duration,
    fetch: impl Fn() -> F,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let value = fetch().await;
        if done(&value) {
            return value;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {value}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The value of the line of `text` starting with `prefix` (a metric's name and a space), or 0.
pub fn text_metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The `error.message` of a JSON error answer (empty when it has none).
pub async fn error_message_of(response: reqwest::Response) -> String {
    let body = json(response).await;
    body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `GET <base>/metrics`'s text (a 200 expected).
pub async fn metrics_text(client: &reqwest::Client, base: &str) -> String {
    let r = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics");
    assert_eq!(r.status(), 200);
    r.text().await.expect("metrics body")
}

/// `GET <base>/metrics` of any server (an app or a child process), parsed.
pub async fn scrape(client: &reqwest::Client, base: &str) -> prometheus_parse::Scrape {
    let text = metrics_text(client, base).await;
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("valid Prometheus text")
}

/// The value of the sample `name` whose labels include all of `labels` (summed).
/// [`metric_value`] of `name` for the anonymous tenant (`tenant="-"`).
pub fn anonymous_metric(scrape: &prometheus_parse::Scrape, name: &str) -> f64 {
    metric_value(scrape, name, &[("tenant", "-")])
}

pub fn metric_value(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    use prometheus_parse::Value;
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
            Value::Summary(_) => f64::NAN,
        })
        .sum()
}

/// One thing the origin serves at a path.
#[derive(Clone)]
enum Resource {
    Body {
        bytes: Bytes,
        /// `None`: the origin sends no ETag (Last-Modified only).
        etag: Option<String>,
        /// Older tags the origin still answers 304 to (it answers with its current one).
        accepts: Vec<String>,
        last_modified: String,
        content_type: &'static str,
        delay: Option<Duration>,
    },
    Status(u16),
    /// A status with a `Retry-After` header.
    RetryAfter(u16, String),
    Redirect(String),
    Slow(Duration),
    /// A 200 whose body comes one byte every so often (a drip: issue 67).
    Drip(Bytes, Duration),
}

/// An origin server that counts what it is asked.
#[derive(Default)]
pub struct OriginState {
    resources: Mutex<HashMap<String, Resource>>,
    /// Every request received.
    pub requests: AtomicU64,
    /// 200 answers with a full body.
    pub full: AtomicU64,
    /// 304 answers to conditional requests.
    pub not_modified: AtomicU64,
    /// Requests that carried If-None-Match or If-Modified-Since.
    pub conditional: AtomicU64,
    /// Requests being answered now, and the most ever at once.
    pub in_flight: AtomicU64,
    pub max_in_flight: AtomicU64,
    /// When each request arrived.
    pub arrivals: Mutex<Vec<std::time::Instant>>,
}

pub struct Origin {
    pub addr: SocketAddr,
    pub state: Arc<OriginState>,
}

impl Origin {
    /// Starts an origin serving `bytes` at `path`.
    pub async fn start_with(path: &str, bytes: Vec<u8>) -> Origin {
        let origin = Origin::start().await;
        origin.put(path, bytes);
        origin
    }

    /// Starts an origin serving `bytes` at `path`; returns it and that path's URL.
    pub async fn serving(path: &str, bytes: Vec<u8>) -> (Origin, String) {
        let origin = Origin::start().await;
        origin.put(path, bytes);
        let url = origin.url(path);
        (origin, url)
    }

    pub async fn start() -> Origin {
        let state = Arc::new(OriginState::default());
        let s = state.clone();
        let router = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap| {
            let s = s.clone();
            async move { serve(&s, uri, headers).await }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        Origin { addr, state }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    fn set(&self, path: &str, r: Resource) {
        self.state
            .resources
            .lock()
            .unwrap()
            .insert(path.to_string(), r);
    }

    /// Serves `bytes` at `path` with an ETag and Last-Modified derived from the content.
    pub fn put(&self, path: &str, bytes: Vec<u8>) {
        self.put_slow(path, bytes, None);
    }

    /// Like `put`, but every answer is delayed (to make concurrent requests overlap).
    pub fn put_slow(&self, path: &str, bytes: Vec<u8>, delay: Option<Duration>) {
        let digest = imgcas::hash::ContentHash::of(&bytes).to_hex();
        self.set(
            path,
            Resource::Body {
                etag: Some(format!("\"{}\"", &digest[..16])),
                accepts: Vec::new(),
                last_modified: "Wed, 21 Oct 2026 07:28:00 GMT".into(),
                bytes: Bytes::from(bytes),
                content_type: "image/jpeg",
                delay,
            },
        );
    }

    /// Like `put`, but the origin sends no ETag: only Last-Modified.
    pub fn put_without_etag(&self, path: &str, bytes: Vec<u8>) {
        self.put(path, bytes);
        if let Some(Resource::Body { etag, .. }) =
            self.state.resources.lock().unwrap().get_mut(path)
        {
            *etag = None;
        }
    }

    /// Gives the resource at `path` a new ETag (same bytes); with `accept_old`, conditional
    /// requests naming the old tag are still answered 304 (with the new tag).
    pub fn retag(&self, path: &str, new: &str, accept_old: bool) {
        if let Some(Resource::Body { etag, accepts, .. }) =
            self.state.resources.lock().unwrap().get_mut(path)
        {
            if accept_old {
                accepts.extend(etag.take());
            } else {
                accepts.clear();
            }
            *etag = Some(new.to_string());
        }
    }

    pub fn status(&self, path: &str, status: u16) {
        self.set(path, Resource::Status(status));
    }

    pub fn status_retry_after(&self, path: &str, status: u16, retry_after: &str) {
        self.set(path, Resource::RetryAfter(status, retry_after.to_string()));
    }

    pub fn max_in_flight(&self) -> u64 {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }

    pub fn redirect(&self, path: &str, to: &str) {
        self.set(path, Resource::Redirect(to.to_string()));
    }

    pub fn slow(&self, path: &str, delay: Duration) {
        self.set(path, Resource::Slow(delay));
    }

    /// Serves `bytes` at `path` one byte every `every` (with their length declared).
    pub fn drip(&self, path: &str, bytes: Vec<u8>, every: Duration) {
        self.set(path, Resource::Drip(Bytes::from(bytes), every));
    }

    pub fn requests(&self) -> u64 {
        self.state.requests.load(Ordering::SeqCst)
    }

    pub fn full(&self) -> u64 {
        self.state.full.load(Ordering::SeqCst)
    }

    pub fn not_modified(&self) -> u64 {
        self.state.not_modified.load(Ordering::SeqCst)
    }

    pub fn conditional(&self) -> u64 {
        self.state.conditional.load(Ordering::SeqCst)
    }

    /// The most requests that arrived within any `window`.
    pub fn most_within(&self, window: Duration) -> usize {
        let arrivals = self.state.arrivals.lock().unwrap().clone();
        (0..arrivals.len())
            .map(|i| {
                arrivals[i..]
                    .iter()
                    .take_while(|t| t.duration_since(arrivals[i]) < window)
                    .count()
            })
            .max()
            .unwrap_or(0)
    }

    /// Requests that arrived at or after `since`.
    pub fn arrived_since(&self, since: std::time::Instant) -> usize {
        let arrivals = self.state.arrivals.lock().unwrap();
        arrivals.iter().filter(|t| **t >= since).count()
    }
}

async fn serve(state: &OriginState, uri: Uri, headers: HeaderMap) -> Response {
    state.requests.fetch_add(1, Ordering::SeqCst);
    state
        .arrivals
        .lock()
        .unwrap()
        .push(std::time::Instant::now());
    let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    state.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let response = answer(state, uri, headers).await;
    state.in_flight.fetch_sub(1, Ordering::SeqCst);
    response
}

async fn answer(state: &OriginState, uri: Uri, headers: HeaderMap) -> Response {
    let resource = state.resources.lock().unwrap().get(uri.path()).cloned();
    let inm = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok());
    let ims = headers
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok());
    if inm.is_some() || ims.is_some() {
        state.conditional.fetch_add(1, Ordering::SeqCst);
    }
    match resource {
        None => StatusCode::NOT_FOUND.into_response(),
        Some(Resource::Status(code)) => StatusCode::from_u16(code).unwrap().into_response(),
        Some(Resource::RetryAfter(code, after)) => (
            StatusCode::from_u16(code).unwrap(),
            [(header::RETRY_AFTER, after)],
        )
            .into_response(),
        Some(Resource::Redirect(to)) => {
            (StatusCode::FOUND, [(header::LOCATION, to)]).into_response()
        }
        Some(Resource::Slow(delay)) => {
            tokio::time::sleep(delay).await;
            StatusCode::OK.into_response()
        }
        Some(Resource::Drip(bytes, every)) => {
            let length = bytes.len();
            let drops = futures_util::stream::unfold(bytes, move |rest| async move {
                if rest.is_empty() {
                    return None;
                }
                tokio::time::sleep(every).await;
                let byte = rest.slice(..1);
                Some((Ok::<_, std::io::Error>(byte), rest.slice(1..)))
            });
            (
                [(header::CONTENT_LENGTH, length.to_string())],
                axum::body::Body::from_stream(drops),
            )
                .into_response()
        }
        Some(Resource::Body {
            bytes,
            etag,
            accepts,
            last_modified,
            content_type,
            delay,
        }) => {
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            let unchanged = match inm {
                Some(v) => etag.as_deref() == Some(v) || accepts.iter().any(|a| a == v),
                None => ims == Some(last_modified.as_str()),
            };
            let mut response = if unchanged {
                state.not_modified.fetch_add(1, Ordering::SeqCst);
                StatusCode::NOT_MODIFIED.into_response()
            } else {
                state.full.fetch_add(1, Ordering::SeqCst);
                let mut r = bytes.into_response();
                let h = r.headers_mut();
                h.insert(header::LAST_MODIFIED, last_modified.parse().unwrap());
                h.insert(header::CONTENT_TYPE, content_type.parse().unwrap());
                r
            };
            if let Some(etag) = etag {
                response
                    .headers_mut()
                    .insert(header::ETAG, etag.parse().unwrap());
            }
            response
        }
    }
}

/// A smooth, photo-like RGB picture; `seed` makes distinct pictures (distinct bytes).
pub fn rgb_image(w: u32, h: u32, seed: u8) -> DynamicImage {
    DynamicImage::ImageRgb8(RgbImage::from_fn(w, h, |x, y| {
        Rgb([
            ((x * 255) / w.max(1)) as u8 ^ seed,
            ((y * 255) / h.max(1)) as u8,
            (((x + y) * 127) / (w + h).max(1)) as u8 + seed / 2,
        ])
    }))
}

/// A client whose connections come from `ip` (any 127/8 address reaches an app on
/// 127.0.0.1): another client, by address, for per-client budgets.
pub fn client_from(ip: &str) -> reqwest::Client {
    let ip: std::net::IpAddr = ip.parse().expect("an address");
    reqwest::Client::builder()
        .local_address(ip)
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("test client")
}

pub fn encode(image: &DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    image.write_to(&mut out, format).expect("encode fixture");
    out.into_inner()
}

pub fn jpeg(w: u32, h: u32, seed: u8) -> Vec<u8> {
    encode(&rgb_image(w, h, seed), ImageFormat::Jpeg)
}

/// A `w` × `h` JPEG zeroed from byte 600 to its end and cut to half its length.
pub fn corrupt_jpeg(w: u32, h: u32, seed: u8) -> Vec<u8> {
    let mut corrupt = jpeg(w, h, seed);
    let len = corrupt.len();
    corrupt[600..len - 2].fill(0x00);
    corrupt.truncate(len / 2);
    corrupt
}

pub fn png(w: u32, h: u32, seed: u8) -> Vec<u8> {
    encode(&rgb_image(w, h, seed), ImageFormat::Png)
}

pub fn png_rgba(w: u32, h: u32) -> Vec<u8> {
    let img = RgbaImage::from_fn(w, h, |x, _| Rgba([200, 10, 10, ((x * 255) / w) as u8]));
    encode(&DynamicImage::ImageRgba8(img), ImageFormat::Png)
}

/// Decodes a response body and returns its dimensions.
pub fn dimensions(bytes: &[u8]) -> (u32, u32) {
    let img = image::load_from_memory(bytes).expect("response decodes");
    (img.width(), img.height())
}

/// The `error.code` of a JSON error answer.
pub async fn error_code_of(response: reqwest::Response) -> serde_json::Value {
    json(response).await["error"]["code"].clone()
}

/// The bytes of `testdata/photos/<name>`.
pub fn testdata_photo(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/testdata/photos/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

pub async fn json(response: reqwest::Response) -> serde_json::Value {
    let bytes = response.bytes().await.expect("body");
    serde_json::from_slice(&bytes).expect("JSON body")
}

/// An answer's headers but `Date`, sorted: what two answers of one request share.
pub fn answer_headers(response: &reqwest::Response) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = response
        .headers()
        .iter()
        .filter(|(name, _)| *name != "date")
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
        .collect();
    headers.sort();
    headers
}

pub fn header<'a>(response: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    response.headers().get(name).and_then(|v| v.to_str().ok())
}

/// HMAC-SHA256 in hex, computed with the `hmac` crate directly (not the service's code).
pub fn hmac_hex(key: &str, message: &str) -> String {
    use hmac::{KeyInit, Mac};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).expect("any key");
    mac.update(message.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}
