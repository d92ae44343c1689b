//! The server protects itself: a client that sends half a request line and stops is cut off
//! after `server.header_timeout`; hundreds of such clients do not delay a normal request;
//! `server.request_timeout` ends slow requests but not `/v1/ingest`; uploads are capped in
//! number and must keep a minimum rate after their first 10 s.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Opens a connection and sends the start of a request line, then nothing.
async fn half_request(app: &TestApp) -> TcpStream {
    let mut socket = TcpStream::connect(app.addr).await.unwrap();
    socket.write_all(b"GET /v1/ima").await.unwrap();
    socket
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_a_request_line_is_cut_off_and_idle_clients_do_not_block_others() {
    let app = spawn_app_with(|c| c.server.header_timeout = Duration::from_secs(2)).await;
    let started = Instant::now();
    let mut idle = half_request(&app).await;
    let mut rest = Vec::new();
    // Reads until the server closes (0 bytes) or resets the connection.
    let closed = tokio::time::timeout(Duration::from_secs(10), idle.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the server never closed the connection");
    let after = started.elapsed();
    assert!(
        after < Duration::from_secs(2 + 2),
        "closed after {after:?}, header timeout 2 s"
    );

    let mut crowd = Vec::new();
    for _ in 0..500 {
        crowd.push(half_request(&app).await);
    }
    let asked = Instant::now();
    let r = app.get("/healthz").await;
    assert_eq!(r.status(), 200);
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "answered in {:?} with 500 idle connections open",
        asked.elapsed()
    );
    drop(crowd);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_timeout_spares_ingest() {
    let app = spawn_app_with(|c| c.server.request_timeout = Duration::from_secs(1)).await;
    let origin = Origin::start().await;
    origin.put_slow("/slow.jpg", jpeg(100, 80, 1), Some(Duration::from_secs(2)));
    origin.put_slow("/slow2.jpg", jpeg(100, 80, 2), Some(Duration::from_secs(2)));

    let asked = Instant::now();
    let r = app.image_from(&origin, "/slow.jpg", "w=50").await;
    assert_eq!(r.status(), 503);
    assert!(
        asked.elapsed() < Duration::from_millis(1900),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(error_code_of(r).await, "overloaded");

    let body = serde_json::json!({ "urls": [origin.url("/slow2.jpg")] }).to_string();
    let r = app
        .client
        .post(app.url("/v1/ingest"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        200,
        "ingest may take longer than the request timeout"
    );
    assert_eq!(json(r).await["summary"]["new"], 1);
}

/// Sends the headers of an upload of `length` bytes and `sent` of them, then stalls.
async fn stalled_upload(app: &TestApp, length: usize, sent: usize) -> TcpStream {
    let mut socket = TcpStream::connect(app.addr).await.unwrap();
    let head = format!(
        "POST /v1/originals HTTP/1.1\r\nhost: imgcas\r\ncontent-type: application/octet-stream\r\ncontent-length: {length}\r\n\r\n"
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    socket.write_all(&vec![0u8; sent]).await.unwrap();
    socket
}

async fn answer(socket: &mut TcpStream) -> String {
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(20), socket.read(&mut buf))
        .await
        .expect("an answer")
        .unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_are_capped_and_a_stalled_one_is_ended() {
    let app = spawn_app_with(|c| c.server.max_concurrent_uploads = 1).await;
    let started = Instant::now();
    let mut stalled = stalled_upload(&app, 1 << 20, 1000).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let second = app.upload(jpeg(64, 64, 1)).await;
    assert_eq!(second.status(), 503, "one upload at a time");
    assert!(second.headers().contains_key("retry-after"));
    assert_eq!(error_code_of(second).await, "overloaded");

    // 1,000 bytes in 10 s is far under 64 KiB/s: ended once the grace period is over.
    let text = answer(&mut stalled).await;
    let after = started.elapsed();
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("request_timeout"), "{text}");
    assert!(
        after >= Duration::from_secs(10) && after < Duration::from_secs(13),
        "{after:?}"
    );
    assert!(app.stored_blobs().await.is_empty());

    // The slot is free again.
    assert_eq!(app.upload(jpeg(64, 64, 2)).await.status(), 201);
}
