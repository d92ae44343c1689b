//! Merchant uploads: raw and multipart, dedup by content, and reading originals back.

use crate::common;

use common::*;
use imgcas::hash::ContentHash;

#[tokio::test]
async fn the_same_bytes_uploaded_twice_are_one_original() {
    let app = spawn_app().await;
    let bytes = png(120, 80, 1);
    let first = app.upload(bytes.clone()).await;
    assert_eq!(first.status(), 201);
    let location = header(&first, "location").unwrap().to_string();
    let a = json(first).await;
    let hash = ContentHash::of(&bytes).to_hex();
    assert_eq!(a["hash"], hash.as_str());
    assert_eq!(a["format"], "png");
    assert_eq!(a["width"], 120);
    assert_eq!(a["height"], 80);
    assert_eq!(a["bytes"], bytes.len());
    assert_eq!(a["duplicate"], false);
    assert_eq!(a["url"], format!("/v1/image/{hash}"));
    assert_eq!(location, format!("/v1/originals/{hash}"));

    let second = app.upload(bytes.clone()).await;
    assert_eq!(second.status(), 200);
    let b = json(second).await;
    assert_eq!(b["hash"], a["hash"]);
    assert_eq!(b["duplicate"], true);
    assert_eq!(app.stored_blobs().await.len(), 1);
}

const MULTIPART: &str = "multipart/form-data; boundary=imgcas-test-boundary";

/// A `multipart/form-data` body (boundary as in [`MULTIPART`]) of one file part per
/// (name, bytes, content type).
fn multipart(files: &[(&str, &[u8], &str)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, bytes, ct) in files {
        body.extend_from_slice(
            format!(
                "--imgcas-test-boundary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: {ct}\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"--imgcas-test-boundary--\r\n");
    body
}

#[tokio::test]
async fn multipart_uploads_answer_per_file() {
    let app = spawn_app().await;
    let (one, two) = (jpeg(64, 64, 2), png(32, 16, 3));
    let body = multipart(&[("a.jpg", &one, "image/jpeg"), ("b.png", &two, "image/png")]);
    let post = || {
        app.client
            .post(app.url("/v1/originals"))
            .header("content-type", MULTIPART)
            .body(body.clone())
            .send()
    };
    let r = post().await.unwrap();
    assert_eq!(r.status(), 201);
    let v = json(r).await;
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(v[0]["format"], "jpeg");
    assert_eq!(v[1]["width"], 32);
    let again = post().await.unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(json(again).await[1]["duplicate"], true);
}

/// Issue 28: a multipart upload refused for one file stores none of them (it used to keep
/// the files sent before the bad one while answering 415).
#[tokio::test]
async fn a_multipart_upload_refused_for_one_file_stores_none() {
    let app = spawn_app().await;
    let good = jpeg(64, 48, 12);
    let body = multipart(&[
        ("a.jpg", &good, "image/jpeg"),
        ("b.txt", b"no image at all", "text/plain"),
    ]);
    let r = app
        .client
        .post(app.url("/v1/originals"))
        .header("content-type", MULTIPART)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    assert_eq!(error_code_of(r).await, "unsupported_format");
    assert!(app.stored_blobs().await.is_empty(), "nothing stored");
    let hash = ContentHash::of(&good).to_hex();
    let r = app.get(&format!("/v1/originals/{hash}")).await;
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn originals_read_back_byte_for_byte_and_by_hash_images_are_immutable() {
    let app = spawn_app().await;
    let bytes = png(90, 60, 4);
    let hash = ContentHash::of(&bytes).to_hex();
    app.upload(bytes.clone()).await;

    let r = app.get(&format!("/v1/originals/{hash}")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), Some("image/png"));
    assert_eq!(
        header(&r, "cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    let etag = header(&r, "etag").unwrap().to_string();
    assert_eq!(r.bytes().await.unwrap().as_ref(), bytes.as_slice());
    let cached = app
        .client
        .get(app.url(&format!("/v1/originals/{hash}")))
        .header("if-none-match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(cached.status(), 304);

    let info = json(app.get(&format!("/v1/originals/{hash}/info")).await).await;
    assert_eq!(info["format"], "png");
    assert_eq!(info["width"], 90);
    assert!(info["first_seen"].as_str().unwrap().ends_with('Z'));

    let img = app.get(&format!("/v1/image/{hash}?w=30")).await;
    assert_eq!(img.status(), 200);
    assert_eq!(
        header(&img, "cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    assert_eq!(header(&img, "x-imgcas-source-hash"), Some(hash.as_str()));
    assert_eq!(dimensions(&img.bytes().await.unwrap()), (30, 20));
}

#[tokio::test]
async fn bad_uploads_are_refused_and_store_nothing() {
    let app = spawn_app_with(|c| c.fetch.max_bytes = 10_000).await;
    let r = app.upload(b"<html>hello</html>".to_vec()).await;
    assert_eq!(r.status(), 415);
    assert_eq!(error_code_of(r).await, "unsupported_format");

    let mut corrupt = jpeg(50, 50, 5);
    corrupt.truncate(40);
    let r = app.upload(corrupt).await;
    assert_eq!(r.status(), 422);
    assert_eq!(error_code_of(r).await, "undecodable");

    let r = app.upload(vec![0xFF; 20_000]).await;
    assert_eq!(r.status(), 413);
    assert_eq!(error_code_of(r).await, "source_too_large");

    let lottapixel = std::fs::read("testdata/malicious/lottapixel.jpg").unwrap();
    let r = app.upload(lottapixel).await;
    assert_eq!(r.status(), 422);
    assert_eq!(error_code_of(r).await, "too_many_pixels");

    // An AVIF whose `ipma` declares 2^32 - 1 entries in 106 bytes: refused from its header
    // (its walk once read zeros past the box's end for seconds, outside admission).
    let ipma_bomb = std::fs::read("testdata/crafted/avif-ipma-count.avif").unwrap();
    let r = app.upload(ipma_bomb).await;
    assert_eq!(r.status(), 422);
    let body = json(r).await;
    assert_eq!(body["error"]["code"], "undecodable");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("ipma"),
        "{body}"
    );
    // The other walkers' bounds (issue 35): each refused from its header.
    for (name, says) in [
        ("ico-65535-entries.ico", "directory entries"),
        ("tiff-ifd-65535-entries.tif", "IFD entries"),
        ("apng-actl-2pow31-frames.png", "acTL frames"),
        ("webp-anmf-4gb.webp", "ANMF"),
    ] {
        let bytes = std::fs::read(format!("testdata/crafted/{name}")).unwrap();
        let r = app.upload(bytes).await;
        assert_eq!(r.status(), 422, "{name}");
        let body = json(r).await;
        assert_eq!(body["error"]["code"], "undecodable", "{name}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{name}: {body}");
    }

    assert!(app.stored_blobs().await.is_empty());
}

#[tokio::test]
async fn unknown_and_malformed_hashes_are_404() {
    let app = spawn_app().await;
    for path in [
        format!("/v1/originals/{}", "ab".repeat(32)),
        format!("/v1/originals/{}/info", "ab".repeat(32)),
        format!("/v1/image/{}?w=10", "ab".repeat(32)),
        "/v1/originals/not-a-hash".to_string(),
        "/v1/image/zz".to_string(),
        "/no/such/route".to_string(),
    ] {
        let r = app.get(&path).await;
        assert_eq!(r.status(), 404, "{path}");
        assert_eq!(error_code_of(r).await, "not_found", "{path}");
    }
}

/// Issue 35: 32 uploads of crafted containers at once (each a copy differing in its last
/// byte, so none is answered from a cache) take no CPU the admission queue does not see,
/// and a normal cold request made among them answers within 2 s. The AVIF's `ipma` walk
/// alone once kept a core busy 7–11 s per upload, outside admission.
#[tokio::test]
async fn a_flood_of_crafted_uploads_leaves_a_cold_request_its_answer() {
    let app = spawn_app().await;
    let origin = Origin::start_with("/photo.jpg", jpeg(1200, 900, 7)).await;
    let crafted = [
        "avif-ipma-count.avif",
        "webp-anmf-4gb.webp",
        "apng-actl-2pow31-frames.png",
        "tiff-ifd-65535-entries.tif",
        "webp-anmf-smaller-than-vp8.webp",
        "gif-endless-sub-blocks.gif",
        "ico-65535-entries.ico",
    ]
    .map(|name| std::fs::read(format!("testdata/crafted/{name}")).unwrap());
    let uploads: Vec<_> = (0..32u8)
        .map(|i| {
            let mut bytes = crafted[usize::from(i) % crafted.len()].clone();
            if let Some(last) = bytes.last_mut() {
                *last ^= i.wrapping_add(1);
            }
            let client = client();
            let url = app.url("/v1/originals");
            tokio::spawn(async move {
                client
                    .post(url)
                    .header("content-type", "application/octet-stream")
                    .body(bytes)
                    .send()
                    .await
            })
        })
        .collect();
    let started = std::time::Instant::now();
    let r = app
        .image_from(&origin, "/photo.jpg", "w=300&format=webp")
        .await;
    let took = started.elapsed();
    assert_eq!(r.status(), 200);
    assert!(took < std::time::Duration::from_secs(2), "{took:?}");
    for upload in uploads {
        let r = upload.await.unwrap().unwrap();
        let status = r.status().as_u16();
        let body = json(r).await;
        // Refused from their headers, stored (the ANMF/ALPH WebP and the endless GIF read
        // as pictures until decoded), or told to come back (uploads at once are bounded).
        match status {
            422 => assert_eq!(body["error"]["code"], "undecodable", "{body}"),
            503 => assert_eq!(body["error"]["code"], "overloaded", "{body}"),
            _ => assert_eq!(status, 201, "{body}"),
        }
    }
}
