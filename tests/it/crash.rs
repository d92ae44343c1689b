//! Crash safety: the real binary is killed with SIGKILL in the middle of concurrent uploads and
//! fetches. Afterwards `imgcas verify` finds no map entry pointing at a missing or wrong blob,
//! and every upload the server acknowledged is there after a restart.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::binary::{self, start};
use common::*;
use imgcas::hash::ContentHash;

/// An upload the server answered 200/201: its hash and bytes.
type Acknowledged = (String, Vec<u8>);

#[tokio::test]
async fn kill_9_during_uploads_and_fetches_loses_no_acknowledged_upload() {
    let dir = tempfile::tempdir().unwrap();
    let s3 = if s3::pipeline_on_s3() {
        Some(s3::S3Target::new().await)
    } else {
        None
    };
    let env = s3.as_ref().map(s3::S3Target::env).unwrap_or_default();
    let origin = Origin::start().await;
    for i in 0..60u8 {
        origin.put(&format!("/{i}.jpg"), jpeg(96, 64, i));
    }
    let server = start(dir.path(), s3.as_ref());
    let base = server.base.clone();
    let client = client();
    let acknowledged: Arc<Mutex<Vec<Acknowledged>>> = Arc::default();

    let mut tasks = Vec::new();
    for worker in 0..4u8 {
        let (client, base, acknowledged) = (client.clone(), base.clone(), acknowledged.clone());
        tasks.push(tokio::spawn(async move {
            for n in 0..200u32 {
                let bytes = png(
                    48 + (n % 16),
                    48,
                    worker.wrapping_mul(50).wrapping_add(n as u8),
                );
                let sent = client
                    .post(format!("{base}/v1/originals"))
                    .header("content-type", "application/octet-stream")
                    .body(bytes.clone())
                    .send()
                    .await;
                let Ok(r) = sent else { return };
                if !r.status().is_success() {
                    continue;
                }
                let Ok(body) = r.bytes().await else { return };
                let Ok(body) = serde_json::from_slice::<serde_json::Value>(&body) else {
                    return;
                };
                let hash = body["hash"].as_str().unwrap_or_default().to_string();
                acknowledged.lock().unwrap().push((hash, bytes));
            }
        }));
    }
    for worker in 0..2u32 {
        let (client, base) = (client.clone(), base.clone());
        let urls: Vec<String> = (0..60).map(|i| origin.url(&format!("/{i}.jpg"))).collect();
        tasks.push(tokio::spawn(async move {
            for n in 0..400u32 {
                let url = &urls[((n * 7 + worker * 13) % 60) as usize];
                let w = (16 + n % 40).to_string();
                let mut target = reqwest::Url::parse(&format!("{base}/v1/image")).unwrap();
                target
                    .query_pairs_mut()
                    .append_pair("url", url)
                    .append_pair("w", &w);
                let sent = client.get(target).send().await;
                if sent.is_err() {
                    return;
                }
            }
        }));
    }

    // Kill once a fair amount of work was acknowledged, with more still under way.
    for _ in 0..200 {
        if acknowledged.lock().unwrap().len() >= 40 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    server.kill();
    for t in tasks {
        let _ = t.await;
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(acknowledged.len() >= 40, "work was under way when killed");
    eprintln!("killed after {} acknowledged uploads", acknowledged.len());

    // No map entry dangles.
    let (code, out) = binary::run(dir.path(), &env, &["verify"]);
    assert_eq!(code, 0, "verify after kill -9:\n{out}");

    // Every acknowledged upload is there, byte for byte.
    let server = start(dir.path(), s3.as_ref());
    for (hash, bytes) in &acknowledged {
        assert_eq!(hash, &ContentHash::of(bytes).to_hex());
        let r = client
            .get(format!("{}/v1/originals/{hash}", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "acknowledged upload {hash} is lost");
        assert_eq!(r.bytes().await.unwrap().as_ref(), bytes.as_slice());
    }
    server.terminate();
    let (code, out) = binary::run(dir.path(), &env, &["verify"]);
    assert_eq!(code, 0, "verify after a clean stop:\n{out}");
}
