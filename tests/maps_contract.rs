//! One contract for every map backend ([`MapStore`]), run against each implementation the way
//! `blob_contract.rs` runs the blob stores: what the pipeline relies on — first sighting wins,
//! a download's two entries land together, durable writes survive a reopen, rows come back as
//! they went in, and the maintenance walks see everything.
//!
//! A new backend adds one `#[tokio::test]` that hands [`contract`] a way to open it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;

use imgcas::hash::ContentHash;
use imgcas::maps::{
    now_ms, MapStore, OriginalInfo, RedbMaps, UrlEntry, VariantBody, VariantKey, VariantRow,
};
use imgcas_processors::{OutputFormat, ProcessFailure};

type Opened = Pin<Box<dyn Future<Output = Arc<dyn MapStore>>>>;

fn info(bytes: u64) -> OriginalInfo {
    OriginalInfo {
        format: Some("png".into()),
        width: Some(3),
        height: Some(2),
        has_alpha: true,
        bytes,
        first_seen_ms: now_ms(),
    }
}

fn url_entry(hash: ContentHash) -> UrlEntry {
    UrlEntry {
        hash,
        etag: Some("\"e1\"".into()),
        last_modified: Some("Wed, 21 Oct 2015 07:28:00 GMT".into()),
        checked_at_ms: 42,
    }
}

fn key(hash: ContentHash, spec: &str) -> VariantKey {
    VariantKey {
        hash,
        canonical_spec: spec.into(),
        processor_version: 3,
    }
}

fn image(bytes: &'static [u8]) -> VariantRow {
    VariantRow::Image {
        format: OutputFormat::Webp,
        width: 400,
        height: 300,
        body: VariantBody::Inline(Bytes::from_static(bytes)),
    }
}

/// The whole contract. `open` opens the same store afresh each call (a restart).
async fn contract(open: impl Fn() -> Opened) {
    let maps = open().await;
    maps.check().await.expect("a new store answers");
    let a = ContentHash::of(b"a");
    let b = ContentHash::of(b"b");

    // URL map.
    assert_eq!(maps.url("http://127.0.0.1/x").await.unwrap(), None);
    maps.put_url("http://127.0.0.1/x", &url_entry(a))
        .await
        .unwrap();
    assert_eq!(
        maps.url("http://127.0.0.1/x").await.unwrap(),
        Some(url_entry(a))
    );
    let mut moved = url_entry(b);
    moved.etag = None;
    maps.put_url("http://127.0.0.1/x", &moved).await.unwrap();
    assert_eq!(maps.url("http://127.0.0.1/x").await.unwrap(), Some(moved));
    maps.put_url("http://127.0.0.1/gone", &url_entry(a))
        .await
        .unwrap();
    maps.remove_url("http://127.0.0.1/gone").await.unwrap();
    assert_eq!(maps.url("http://127.0.0.1/gone").await.unwrap(), None);

    // Originals: the first sighting wins, and it is durable at once.
    assert_eq!(maps.original(&a).await.unwrap(), None);
    assert!(maps.add_original(&a, &info(10)).await.unwrap());
    assert!(!maps.add_original(&a, &info(99)).await.unwrap());
    assert_eq!(maps.original(&a).await.unwrap().unwrap().bytes, 10);

    // A download records its original (new or not) and its URL together.
    let new = maps
        .record_download("http://127.0.0.1/b", &url_entry(b), &info(20))
        .await
        .unwrap();
    assert!(new, "b was not indexed");
    let again = maps
        .record_download("http://127.0.0.1/b2", &url_entry(b), &info(21))
        .await
        .unwrap();
    assert!(!again, "b is indexed now");
    assert_eq!(maps.original(&b).await.unwrap().unwrap().bytes, 20);
    assert_eq!(
        maps.url("http://127.0.0.1/b2").await.unwrap(),
        Some(url_entry(b))
    );

    // Variants: images and each kind of cached error come back as stored.
    let rows = [
        (key(a, "w=400"), image(b"RIFF....WEBP")),
        (key(a, "w=200"), image(b"")),
        (key(b, "w=400"), image(b"RIFF")),
    ];
    for (k, row) in &rows {
        assert_eq!(maps.variant(k).await.unwrap(), None);
        maps.put_variant(k, row).await.unwrap();
        assert_eq!(maps.variant(k).await.unwrap().as_ref(), Some(row));
    }
    for (i, kind) in ProcessFailure::ALL.into_iter().enumerate() {
        let k = key(b, &format!("h={i}"));
        let row = VariantRow::Failed {
            kind,
            message: format!("failure {i}"),
        };
        maps.put_variant(&k, &row).await.unwrap();
        assert_eq!(maps.variant(&k).await.unwrap(), Some(row));
    }
    let totals = maps.variant_totals().await.unwrap();
    assert_eq!((totals.images, totals.errors), (3, 4));
    assert!(totals.image_bytes >= 16, "{totals:?}");

    // The maintenance walks see everything, and removal takes exactly what it names.
    let mut hashes = maps.original_hashes().await.unwrap();
    hashes.sort();
    let mut expected = vec![a, b];
    expected.sort();
    assert_eq!(hashes, expected);
    let urls: Vec<String> = maps
        .urls()
        .await
        .unwrap()
        .into_iter()
        .map(|(u, _)| u)
        .collect();
    assert_eq!(urls.len(), 3, "{urls:?}");
    let keys = maps.variant_keys().await.unwrap();
    assert_eq!(keys.len(), 7);
    assert!(keys.contains(&key(a, "w=400")));
    let of_a: Vec<VariantKey> = keys.into_iter().filter(|k| k.hash == a).collect();
    assert_eq!(maps.remove_variants(&of_a).await.unwrap(), 2);
    assert_eq!(
        maps.remove_variants(&of_a).await.unwrap(),
        0,
        "already gone"
    );
    assert_eq!(maps.variant(&key(a, "w=400")).await.unwrap(), None);
    maps.remove_original(&a).await.unwrap();
    assert_eq!(maps.original(&a).await.unwrap(), None);

    // Everything flushed survives a restart.
    maps.flush().await.unwrap();
    maps.flush().await.unwrap();
    drop(maps);
    let maps = open().await;
    assert_eq!(maps.original(&a).await.unwrap(), None);
    assert_eq!(maps.original(&b).await.unwrap().unwrap().bytes, 20);
    assert_eq!(
        maps.url("http://127.0.0.1/b").await.unwrap(),
        Some(url_entry(b))
    );
    assert_eq!(
        maps.variant(&key(b, "w=400")).await.unwrap(),
        Some(image(b"RIFF"))
    );
    assert_eq!(maps.variant_keys().await.unwrap().len(), 5);
    maps.check().await.unwrap();
}

/// Concurrent durable inserts share their syncs; every one lands and survives a restart.
async fn concurrent_durable_inserts(open: impl Fn() -> Opened) {
    let maps = open().await;
    let hashes: Vec<ContentHash> = (0..64u32)
        .map(|i| ContentHash::of(&i.to_le_bytes()))
        .collect();
    let mut tasks = Vec::new();
    for chunk in hashes.chunks(8) {
        let (maps, chunk) = (maps.clone(), chunk.to_vec());
        tasks.push(tokio::spawn(async move {
            for h in chunk {
                assert!(maps.add_original(&h, &info(1)).await.unwrap());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    drop(maps);
    let maps = open().await;
    assert_eq!(maps.original_hashes().await.unwrap().len(), 64);
}

/// Opens the redb maps in `dir` afresh at each call.
fn redb_in(dir: Arc<tempfile::TempDir>) -> impl Fn() -> Opened {
    move || -> Opened {
        let path = dir.path().to_path_buf();
        Box::pin(async move {
            Arc::new(RedbMaps::open(path).await.expect("redb opens")) as Arc<dyn MapStore>
        })
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn redb_keeps_the_contract() {
    contract(redb_in(Arc::new(tempfile::tempdir().unwrap()))).await;
    concurrent_durable_inserts(redb_in(Arc::new(tempfile::tempdir().unwrap()))).await;
}

#[tokio::test]
async fn redb_admits_one_process_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let first = RedbMaps::open(dir.path().to_path_buf()).await.unwrap();
    let second = RedbMaps::open(dir.path().to_path_buf()).await;
    assert!(second.is_err(), "a second handle on one file is refused");
    drop(first);
}
