//! The real binary, stopped and started on the same data dir: what it learned survives.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use common::*;

struct Server {
    child: Child,
    base: String,
}

/// The binary on `data_dir`, its originals in `s3`'s bucket when the suite runs on S3.
fn start(data_dir: &std::path::Path, s3: Option<&s3::S3Target>) -> Server {
    let mut command = Command::new(env!("CARGO_BIN_EXE_imgcas"));
    for (k, v) in s3.map(s3::S3Target::env).unwrap_or_default() {
        command.env(k, v);
    }
    let mut child = command
        .arg("serve")
        .env("IMGCAS_LISTEN", "127.0.0.1:0")
        .env("IMGCAS_DATA_DIR", data_dir)
        .env("IMGCAS_ALLOW_PRIVATE_NETWORKS", "true")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("imgcas starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("imgcas listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_string();
    Server { child, base }
}

impl Server {
    fn terminate(mut self) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "graceful exit, got {status}");
    }
}

#[tokio::test]
async fn a_restart_on_the_same_data_dir_serves_hits_without_downloads() {
    let dir = tempfile::tempdir().unwrap();
    let origin = Origin::start().await;
    let s3 = if s3::pipeline_on_s3() {
        Some(s3::S3Target::new().await)
    } else {
        None
    };
    origin.put("/a.jpg", jpeg(640, 480, 1));
    let client = client();
    let get = |base: String| {
        let mut url = reqwest::Url::parse(&format!("{base}/v1/image")).unwrap();
        url.query_pairs_mut()
            .append_pair("url", &origin.url("/a.jpg"))
            .append_pair("w", "160");
        client.get(url).send()
    };

    let server = start(dir.path(), s3.as_ref());
    let r = get(server.base.clone()).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-imgcas-cache"), Some("miss"));
    let etag = header(&r, "etag").unwrap().to_string();
    server.terminate();

    let server = start(dir.path(), s3.as_ref());
    let r = get(server.base.clone()).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-imgcas-cache"), Some("hit"));
    assert_eq!(header(&r, "etag"), Some(etag.as_str()));
    assert_eq!(dimensions(&r.bytes().await.unwrap()), (160, 120));
    assert_eq!(origin.requests(), 1, "no download after the restart");
    server.terminate();
}
