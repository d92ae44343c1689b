//! Real S3 servers for tests: `s3s-fs` in-process on 127.0.0.1:0 (it checks SigV4), or an
//! external one (CI starts `moto` from PyPI on loopback) named by `IMGCAS_TEST_S3_ENDPOINT`.
//! Every `S3Target` gets a bucket of its own, so tests never see each other's objects.
//!
//! `IMGCAS_TEST_STORAGE=s3` makes `spawn_app` (and the restart test's real binary) store
//! originals through S3 instead of the filesystem: the pipeline suites then run unchanged
//! against S3.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use imgcas::config::{Config, StorageBackend};

pub const ACCESS_KEY: &str = "imgcas-test-access";
pub const SECRET_KEY: &str = "imgcas-test-secret-key-for-sigv4";

/// Whether the pipeline suites should run on S3 (`IMGCAS_TEST_STORAGE=s3`, or maps on
/// PostgreSQL, which need a bucket).
pub fn pipeline_on_s3() -> bool {
    std::env::var("IMGCAS_TEST_STORAGE").is_ok_and(|v| v == "s3")
        || super::postgres::pipeline_on_postgres()
}

/// The external S3 endpoint to test against, if one is named.
pub fn external_endpoint() -> Option<String> {
    std::env::var("IMGCAS_TEST_S3_ENDPOINT")
        .ok()
        .filter(|v| !v.is_empty())
}

/// The AWS provider chain reads these; every server here accepts them.
pub fn set_credentials() {
    // Tests in one binary share one set of keys, so a race between setters is harmless.
    std::env::set_var("AWS_ACCESS_KEY_ID", ACCESS_KEY);
    std::env::set_var("AWS_SECRET_ACCESS_KEY", SECRET_KEY);
    std::env::remove_var("AWS_SESSION_TOKEN");
    std::env::remove_var("AWS_PROFILE");
}

/// An in-process `s3s-fs` server on a thread and runtime of its own (so that a test blocked on
/// a child process still has an S3 server answering). Dropping it stops it.
pub struct InProcessS3 {
    pub addr: SocketAddr,
    pub root: Arc<tempfile::TempDir>,
    /// Answers to inject in front of the real server, and what reached it.
    pub faults: Arc<Faults>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl InProcessS3 {
    pub fn start() -> InProcessS3 {
        let root = Arc::new(tempfile::tempdir().expect("s3 root"));
        InProcessS3::start_on(root, "127.0.0.1:0".parse().expect("addr"))
    }

    /// Starts a server that accepts only `access_key` and `secret_key` (a merchant's own).
    pub fn start_keyed(access_key: &'static str, secret_key: &'static str) -> InProcessS3 {
        let root = Arc::new(tempfile::tempdir().expect("s3 root"));
        let any = "127.0.0.1:0".parse().expect("addr");
        InProcessS3::start_serving(root, any, (access_key, secret_key))
    }

    /// Starts a server over `root` on `addr` (port 0 = any): also to bring a stopped one back.
    pub fn start_on(root: Arc<tempfile::TempDir>, addr: SocketAddr) -> InProcessS3 {
        InProcessS3::start_serving(root, addr, (ACCESS_KEY, SECRET_KEY))
    }

    fn start_serving(
        root: Arc<tempfile::TempDir>,
        addr: SocketAddr,
        (access_key, secret_key): (&'static str, &'static str),
    ) -> InProcessS3 {
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let (shutdown, mut stop) = tokio::sync::oneshot::channel::<()>();
        let fs_root = root.path().to_path_buf();
        let faults = Arc::new(Faults::default());
        let injected = faults.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("s3 runtime");
            runtime.block_on(async move {
                let fs = s3s_fs::FileSystem::new(&fs_root).expect("s3s-fs root");
                let service = {
                    let mut b = s3s::service::S3ServiceBuilder::new(fs);
                    b.set_auth(s3s::auth::SimpleAuth::from_single(access_key, secret_key));
                    b.build()
                };
                let listener = tokio::net::TcpListener::bind(addr).await.expect("bind s3");
                let _ = bound_tx.send(listener.local_addr().expect("s3 addr"));
                let http = ConnBuilder::new(TokioExecutor::new());
                loop {
                    let socket = tokio::select! {
                        accepted = listener.accept() => match accepted {
                            Ok((socket, _)) => socket,
                            Err(_) => continue,
                        },
                        _ = &mut stop => break,
                    };
                    let (faults, service) = (injected.clone(), service.clone());
                    let answer = hyper::service::service_fn(
                        move |request: axum::http::Request<hyper::body::Incoming>| {
                            let (faults, service) = (faults.clone(), service.clone());
                            async move {
                                if let Some(injected) = faults.intercept(&request) {
                                    return Ok(injected);
                                }
                                hyper::service::Service::call(&service, request).await
                            }
                        },
                    );
                    let conn = http
                        .serve_connection(TokioIo::new(socket), answer)
                        .into_owned();
                    tokio::spawn(async move {
                        let _ = conn.await;
                    });
                }
            });
            // Dropping the runtime ends every open connection.
        });
        let addr = bound_rx.recv().expect("s3 server bound");
        InProcessS3 {
            addr,
            root,
            faults,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops the server: the port is closed and open connections end.
    pub fn stop(&mut self) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Where a bucket's objects live on disk.
    pub fn bucket_dir(&self, bucket: &str) -> PathBuf {
        self.root.path().join(bucket)
    }
}

/// Faults injected in front of the real server (the answers S3 gives under races that a
/// single test process cannot provoke), and a count of the object PUTs that reached it.
#[derive(Default)]
pub struct Faults {
    /// Conditional PUTs still to be answered 409 `ConditionalRequestConflict` (as S3 does
    /// while another conditional write of the key is in progress).
    pub conflicts: AtomicU64,
    /// PUTs still to be answered 412 whether or not the object exists (a stale view).
    pub false_exists: AtomicU64,
    /// Object PUTs (not parts, not bucket creation) that reached the server.
    pub object_puts: AtomicU64,
}

impl Faults {
    fn take(counter: &AtomicU64) -> bool {
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    fn intercept<B>(&self, request: &axum::http::Request<B>) -> Option<s3s::HttpResponse> {
        let is_object = request.uri().path().trim_matches('/').contains('/');
        let is_part = request
            .uri()
            .query()
            .is_some_and(|q| q.contains("partNumber"));
        if request.method() != axum::http::Method::PUT || !is_object || is_part {
            return None;
        }
        self.object_puts.fetch_add(1, Ordering::SeqCst);
        let conditional = request.headers().contains_key("if-none-match");
        let (status, code) = if conditional && Faults::take(&self.conflicts) {
            (409, "ConditionalRequestConflict")
        } else if Faults::take(&self.false_exists) {
            (412, "PreconditionFailed")
        } else {
            return None;
        };
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code>\
             <Message>injected by the test</Message></Error>"
        );
        axum::http::Response::builder()
            .status(status)
            .header("content-type", "application/xml")
            .body(s3s::Body::from(body))
            .ok()
    }
}

impl Drop for InProcessS3 {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A bucket of its own on a real S3 server: the in-process one unless an external endpoint
/// is named.
pub struct S3Target {
    pub endpoint: String,
    pub bucket: String,
    pub server: Option<InProcessS3>,
}

static BUCKETS: AtomicU64 = AtomicU64::new(0);

impl S3Target {
    pub async fn new() -> S3Target {
        match external_endpoint() {
            Some(endpoint) => S3Target::create(endpoint, None).await,
            None => S3Target::on(InProcessS3::start()).await,
        }
    }

    /// A bucket on the given in-process server.
    pub async fn on(server: InProcessS3) -> S3Target {
        S3Target::create(server.endpoint(), Some(server)).await
    }

    async fn create(endpoint: String, server: Option<InProcessS3>) -> S3Target {
        set_credentials();
        let bucket = format!(
            "imgcas-test-{}-{}",
            std::process::id(),
            BUCKETS.fetch_add(1, Ordering::Relaxed)
        );
        let target = S3Target {
            endpoint,
            bucket,
            server,
        };
        target
            .client()
            .create_bucket()
            .bucket(&target.bucket)
            .send()
            .await
            .expect("create test bucket");
        target
    }

    /// A plain SDK client on the same server, for looking behind the store's back.
    pub fn client(&self) -> aws_sdk_s3::Client {
        client_with(&self.endpoint, (ACCESS_KEY, SECRET_KEY))
    }

    /// Points a config at this bucket.
    pub fn configure(&self, config: &mut Config) {
        config.storage.backend = StorageBackend::S3;
        config.storage.s3.bucket = Some(self.bucket.clone());
        config.storage.s3.endpoint = Some(self.endpoint.clone());
        config.storage.s3.region = "us-east-1".into();
        config.storage.s3.force_path_style = true;
    }

    /// The same settings as environment variables, for the real binary.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("IMGCAS_STORAGE", "s3".into()),
            ("IMGCAS_S3_BUCKET", self.bucket.clone()),
            ("IMGCAS_S3_ENDPOINT", self.endpoint.clone()),
            ("IMGCAS_S3_REGION", "us-east-1".into()),
            ("IMGCAS_S3_FORCE_PATH_STYLE", "true".into()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.into()),
        ]
    }

    /// The bytes of the objects whose keys start with `prefix`.
    pub async fn bytes_under(&self, prefix: &str) -> u64 {
        let mut total = 0;
        let mut pages = self
            .client()
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.expect("list bucket");
            total += page
                .contents()
                .iter()
                .map(|o| o.size().unwrap_or(0) as u64)
                .sum::<u64>();
        }
        total
    }

    /// Every object key in the bucket.
    pub async fn keys(&self) -> Vec<String> {
        let listed = self
            .client()
            .list_objects_v2()
            .bucket(&self.bucket)
            .send()
            .await
            .expect("list bucket");
        let mut keys: Vec<String> = listed
            .contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_string))
            .collect();
        keys.sort();
        keys
    }
}

/// A plain SDK client of `endpoint` with `keys`.
pub fn client_with(endpoint: &str, (id, secret): (&str, &str)) -> aws_sdk_s3::Client {
    let config = aws_sdk_s3::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .credentials_provider(Credentials::new(id, secret, None, None, "test"))
        .http_client(
            aws_smithy_http_client::Builder::new()
                .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                    aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
                ))
                .build_https(),
        )
        .build();
    aws_sdk_s3::Client::from_conf(config)
}
