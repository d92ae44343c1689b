//! One contract, every backend: the filesystem store, the S3 store against the in-process
//! `s3s-fs` server, and (when `IMGCAS_TEST_S3_ENDPOINT` names one, as CI does with `moto`)
//! the S3 store against that server. Plus what only S3 has: startup errors for a missing
//! bucket or wrong credentials, a server that goes away and comes back, multipart uploads.

use crate::common;

use std::sync::Arc;

use bytes::Bytes;
use common::s3::{self, InProcessS3, S3Target};
use imgcas::blob::{
    key_for, BlobError, BlobStore, FsBlobStore, PutOutcome, S3BlobStore, VariantObject,
};
use imgcas::config::S3Config;
use imgcas::hash::ContentHash;

fn s3_config(target: &S3Target) -> S3Config {
    S3Config {
        bucket: Some(target.bucket.clone()),
        endpoint: Some(target.endpoint.clone()),
        region: "us-east-1".into(),
        force_path_style: true,
        ..S3Config::default()
    }
}

/// The behaviour every backend owes the pipeline.
async fn contract(store: &dyn BlobStore) {
    store.check().await.expect("ready");
    let a = Bytes::from_static(b"\xFF\xD8\xFF\xE0 not really a jpeg, but bytes are bytes");
    let b = Bytes::from(vec![7u8; 300_000]);
    let (ha, hb) = (ContentHash::of(&a), ContentHash::of(&b));

    assert_eq!(store.get(&ha).await.unwrap(), None);
    assert_eq!(store.size(&ha).await.unwrap(), None);
    assert_eq!(
        store.put_if_absent(&ha, a.clone()).await.unwrap(),
        PutOutcome::Created
    );
    assert_eq!(
        store.put_if_absent(&ha, a.clone()).await.unwrap(),
        PutOutcome::AlreadyPresent
    );
    assert_eq!(
        store.put_if_absent(&hb, b.clone()).await.unwrap(),
        PutOutcome::Created
    );
    assert_eq!(store.get(&ha).await.unwrap(), Some(a.clone()));
    assert_eq!(store.get(&hb).await.unwrap(), Some(b.clone()));
    assert_eq!(store.size(&hb).await.unwrap(), Some(300_000));
    let mut both = vec![ha, hb];
    both.sort();
    assert_eq!(store.list().await.unwrap(), both);

    store.delete(&ha).await.unwrap();
    assert_eq!(store.get(&ha).await.unwrap(), None);
    assert_eq!(store.list().await.unwrap(), vec![hb]);
    store
        .delete(&ha)
        .await
        .expect("deleting a missing blob is not an error");

    // Variant bytes: named by the original's hash and a digest, replaced by a second put,
    // apart from the originals (never listed as one), deleted in batches.
    let v1 = VariantObject {
        hash: hb,
        digest: [1; 32],
    };
    let v2 = VariantObject {
        hash: hb,
        digest: [2; 32],
    };
    assert_eq!(store.get_variant(&v1).await.unwrap(), None);
    store.put_variant(&v1, a.clone()).await.unwrap();
    store.put_variant(&v2, b.clone()).await.unwrap();
    assert_eq!(store.get_variant(&v1).await.unwrap(), Some(a.clone()));
    store.put_variant(&v1, b.clone()).await.unwrap();
    assert_eq!(store.get_variant(&v1).await.unwrap(), Some(b.clone()));
    assert_eq!(store.get_variant(&v2).await.unwrap(), Some(b.clone()));
    assert_eq!(
        store.list().await.unwrap(),
        vec![hb],
        "variants are not originals"
    );
    let missing = VariantObject {
        hash: ha,
        digest: [3; 32],
    };
    store
        .delete_variants(&[v1, missing])
        .await
        .expect("deleting a missing variant is not an error");
    assert_eq!(store.get_variant(&v1).await.unwrap(), None);
    assert_eq!(store.get_variant(&v2).await.unwrap(), Some(b.clone()));
    store.delete_variants(&[v2]).await.unwrap();
    assert_eq!(store.get_variant(&v2).await.unwrap(), None);

    // Originals a page at a time, in hash order, after a cursor: across fan-out
    // directories, with sizes, never a variant, nothing twice.
    let mut sizes = std::collections::BTreeMap::from([(hb, 300_000u64)]);
    for n in 0..23u32 {
        let bytes = Bytes::from(format!("page {n}").into_bytes());
        let hash = ContentHash::of(&bytes);
        sizes.insert(hash, bytes.len() as u64);
        store.put_if_absent(&hash, bytes).await.unwrap();
    }
    let stored: Vec<ContentHash> = sizes.keys().copied().collect();
    store.put_variant(&v1, a.clone()).await.unwrap();
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store.originals_page(after, 5).await.unwrap();
        assert!(page.len() <= 5);
        let Some(last) = page.last() else { break };
        after = Some(last.hash);
        for blob in &page {
            assert_eq!(Some(&blob.size), sizes.get(&blob.hash), "{blob:?}");
            assert!(blob.modified_ms > 0);
        }
        seen.extend(page.iter().map(|b| b.hash));
    }
    assert_eq!(seen, stored);
    let from_middle = store.originals_page(Some(stored[10]), 100).await.unwrap();
    assert_eq!(
        from_middle.iter().map(|b| b.hash).collect::<Vec<_>>(),
        stored[11..].to_vec()
    );
    for hash in stored.iter().filter(|h| **h != hb) {
        store.delete(hash).await.unwrap();
    }
    store.delete_variants(&[v1]).await.unwrap();
    let left = store.originals_page(None, 10).await.unwrap();
    assert_eq!(left.iter().map(|b| b.hash).collect::<Vec<_>>(), vec![hb]);
}

#[tokio::test]
async fn the_filesystem_store_keeps_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsBlobStore::open(dir.path()).unwrap();
    contract(&store).await;
    let h = ContentHash::of(&[7u8; 300_000]);
    assert!(
        dir.path().join(key_for(&h)).is_file(),
        "the shared key layout"
    );
}

#[tokio::test]
async fn the_s3_store_keeps_the_contract_on_the_in_process_server() {
    s3::set_credentials();
    // Always the in-process server here, whatever IMGCAS_TEST_S3_ENDPOINT says.
    let server = InProcessS3::start();
    let target = S3Target::on(server).await;
    let store = S3BlobStore::connect(&s3_config(&target)).await.unwrap();
    contract(&store).await;
    let h = ContentHash::of(&[7u8; 300_000]);
    assert_eq!(
        target.keys().await,
        vec![key_for(&h)],
        "the shared key layout"
    );
    let dir = target.server.as_ref().unwrap().bucket_dir(&target.bucket);
    assert!(
        dir.join(key_for(&h)).is_file(),
        "a real object on the server's disk"
    );
}

#[tokio::test]
async fn the_s3_store_keeps_the_contract_on_an_external_server() {
    if s3::external_endpoint().is_none() {
        common::skip_unless_ci(
            "IMGCAS_TEST_S3_ENDPOINT not set: no external S3 server (CI runs moto)",
        );
        return;
    }
    let target = S3Target::new().await;
    let store = S3BlobStore::connect(&s3_config(&target)).await.unwrap();
    contract(&store).await;
    multipart(&store, &target).await;
}

async fn multipart(store: &S3BlobStore, target: &S3Target) {
    // Above the multipart threshold: uploaded in parts, read back whole.
    let big = Bytes::from(
        (0..17 << 20)
            .map(|i: u32| (i % 251) as u8)
            .collect::<Vec<u8>>(),
    );
    let h = ContentHash::of(&big);
    assert_eq!(
        store.put_if_absent(&h, big.clone()).await.unwrap(),
        PutOutcome::Created
    );
    assert_eq!(
        store.put_if_absent(&h, big.clone()).await.unwrap(),
        PutOutcome::AlreadyPresent
    );
    assert_eq!(store.get(&h).await.unwrap().as_deref(), Some(&big[..]));
    assert!(target.keys().await.contains(&key_for(&h)));
}

#[tokio::test]
async fn large_originals_go_up_in_parts() {
    s3::set_credentials();
    let target = S3Target::on(InProcessS3::start()).await;
    let store = S3BlobStore::connect(&s3_config(&target)).await.unwrap();
    multipart(&store, &target).await;
}

/// `imgcas serve` with these extra variables: its exit status and stderr.
fn serve_exits(env: &[(&str, String)]) -> (Option<i32>, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_imgcas"));
    let dir = tempfile::tempdir().unwrap();
    command
        .arg("serve")
        .env("IMGCAS_LISTEN", "127.0.0.1:0")
        .env("IMGCAS_DATA_DIR", dir.path())
        .env("IMGCAS_LOG", "off");
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().expect("imgcas runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_stops_with_one_clear_line_for_a_missing_bucket_or_wrong_credentials() {
    let target = S3Target::on(InProcessS3::start()).await;
    let with = |key: &str, value: &str| {
        let mut env = target.env();
        env.retain(|(k, _)| *k != key);
        env.push((
            match key {
                "IMGCAS_S3_BUCKET" => "IMGCAS_S3_BUCKET",
                _ => "AWS_SECRET_ACCESS_KEY",
            },
            value.to_string(),
        ));
        env
    };
    let (code, stderr) = serve_exits(&with("IMGCAS_S3_BUCKET", "no-such-bucket"));
    assert_eq!(code, Some(1));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("no-such-bucket") && stderr.contains("does not exist"),
        "{stderr}"
    );

    let (code, stderr) = serve_exits(&with("AWS_SECRET_ACCESS_KEY", "wrong-secret"));
    assert_eq!(code, Some(1));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("credentials"), "{stderr}");
}

#[tokio::test]
async fn a_store_whose_server_went_away_is_unavailable_then_recovers() {
    s3::set_credentials();
    let root = Arc::new(tempfile::tempdir().unwrap());
    let server = InProcessS3::start_on(root.clone(), "127.0.0.1:0".parse().unwrap());
    let addr = server.addr;
    let target = S3Target::on(server).await;
    let store = S3BlobStore::connect(&s3_config(&target)).await.unwrap();
    let a = Bytes::from_static(b"some bytes");
    let h = ContentHash::of(&a);
    store.put_if_absent(&h, a.clone()).await.unwrap();

    let mut target = target;
    if let Some(mut s) = target.server.take() {
        s.stop();
    }
    assert!(matches!(
        store.get(&h).await,
        Err(BlobError::Unavailable(_))
    ));
    assert!(store.check().await.is_err());

    target.server = Some(InProcessS3::start_on(root, addr));
    assert_eq!(store.get(&h).await.unwrap(), Some(a));
    store.check().await.expect("ready again, same client");
}
