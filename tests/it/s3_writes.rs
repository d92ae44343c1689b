//! How the S3 store writes: a 409 `ConditionalRequestConflict` is retried (the other writer
//! may fail), a 412 means "already present" only once the object is seen, and bytes the
//! originals index already holds are never PUT again. The faults are injected in front of
//! the real in-process S3 server (`common::s3::Faults`), which also counts the PUTs.

use crate::common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::s3::{InProcessS3, S3Target};
use common::*;
use imgcas::hash::ContentHash;

async fn app_on_s3(revalidate_after: Duration) -> (TestApp, S3Target) {
    let target = S3Target::on(InProcessS3::start()).await;
    let app = spawn_app_with(|c| {
        target.configure(c);
        c.fetch.revalidate_after = revalidate_after;
    })
    .await;
    (app, target)
}

async fn original_is_served(app: &TestApp, bytes: &[u8]) {
    let hash = ContentHash::of(bytes).to_hex();
    let r = app.get(&format!("/v1/originals/{hash}")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().as_ref(), bytes);
}

#[tokio::test]
async fn a_conflict_is_retried_and_a_412_is_confirmed() {
    let (app, target) = app_on_s3(Duration::from_secs(300)).await;
    let faults = target.server.as_ref().unwrap().faults.clone();

    // Two 409s in a row: the upload still stores its bytes.
    faults.conflicts.store(2, Ordering::SeqCst);
    let first = jpeg(120, 80, 1);
    assert_eq!(app.upload(first.clone()).await.status(), 201);
    assert_eq!(faults.conflicts.load(Ordering::SeqCst), 0, "both were met");
    original_is_served(&app, &first).await;

    // A 412 for an object that is not there: not taken for "present".
    faults.false_exists.store(1, Ordering::SeqCst);
    let second = jpeg(120, 80, 2);
    assert_eq!(app.upload(second.clone()).await.status(), 201);
    original_is_served(&app, &second).await;
    let keys = target.keys().await;
    for bytes in [&first, &second] {
        let hex = ContentHash::of(bytes).to_hex();
        assert!(keys.iter().any(|k| k.ends_with(&hex)), "{hex} in {keys:?}");
    }

    // A 412 for an object that is there (a second node on the same bucket, which has not
    // indexed it): a duplicate, after one HEAD.
    let app2 = spawn_app_with(|c| target.configure(c)).await;
    let puts = faults.object_puts.load(Ordering::SeqCst);
    let r = app2.upload(first.clone()).await;
    assert!(r.status().is_success());
    assert_eq!(faults.object_puts.load(Ordering::SeqCst), puts + 1);
    original_is_served(&app2, &first).await;
}

#[tokio::test]
async fn indexed_bytes_are_not_put_again() {
    let (app, target) = app_on_s3(Duration::ZERO).await;
    let faults = target.server.as_ref().unwrap().faults.clone();
    let origin = Origin::start().await;
    let bytes = jpeg(200, 150, 3);
    for i in 0..20 {
        origin.put(&format!("/copy-{i}.jpg"), bytes.clone());
    }
    for i in 0..20 {
        let r = app
            .image_by_url(&origin.url(&format!("/copy-{i}.jpg")), "w=50")
            .await;
        assert_eq!(r.status(), 200);
    }
    assert_eq!(
        faults.object_puts.load(Ordering::SeqCst),
        1,
        "20 URLs, one content: one PUT"
    );
    // The origin answers 200 to the conditional request (new validators, same bytes).
    origin.retag("/copy-0.jpg", "\"fresh-tag\"", false);
    let r = app.image_from(&origin, "/copy-0.jpg", "w=50").await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        origin.full(),
        21,
        "the revalidation downloaded the body again"
    );
    assert_eq!(
        faults.object_puts.load(Ordering::SeqCst),
        1,
        "and did not upload it again"
    );
}
