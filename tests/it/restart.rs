//! The real binary, stopped and started on the same data dir: what it learned survives.

use crate::common;

use common::binary::start;
use common::*;

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
