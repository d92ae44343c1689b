//! One contract for every map backend ([`MapStore`]), run against each implementation the way
//! `blob_contract.rs` runs the blob stores: what the pipeline relies on — first sighting wins,
//! a download's two entries land together, durable writes survive a reopen, rows come back as
//! they went in, and the maintenance walks see everything.
//!
//! A new backend adds one `#[tokio::test]` that hands [`contract`] a way to open it.

use crate::common;
use crate::maps_walks::{all_fingerprints, all_hashes, all_keys, all_urls};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;

use imgcas::hash::ContentHash;
use imgcas::maps::{
    now_ms, BlockEntry, Claims, Fingerprint, Fingerprinted, Focus, MapStore, OriginalFacts,
    OriginalInfo, Originals, PictureFacts, PostgresMaps, RedbMaps, StoreTotals, UrlEntry, UrlMap,
    VariantBody, VariantKey, VariantRow, Variants, VersionCursor,
};
use imgcas_processors::{OutputFormat, ProcessFailure};

pub(crate) type Opened = Pin<Box<dyn Future<Output = Arc<dyn MapStore>>>>;

pub(crate) fn info(bytes: u64) -> OriginalInfo {
    OriginalInfo {
        format: Some(imgcas_processors::SourceFormat::Png),
        width: Some(3),
        height: Some(2),
        upright: Some((2, 3)),
        has_alpha: true,
        bytes,
        first_seen_ms: now_ms(),
        facts: None,
        focus: None,
    }
}

pub(crate) fn url_entry(hash: ContentHash) -> UrlEntry {
    UrlEntry {
        hash,
        etag: Some("\"e1\"".into()),
        last_modified: Some("Wed, 21 Oct 2015 07:28:00 GMT".into()),
        checked_at_ms: 42,
        requested_at_ms: 0,
        canonical: None,
    }
}

pub(crate) fn key(hash: ContentHash, spec: &str) -> VariantKey {
    VariantKey {
        hash,
        canonical_spec: spec.into(),
        processor_version: 3,
    }
}

/// An image's body as `maps` keeps it: the bytes themselves, or (for a store that keeps
/// them in the blob store) their length.
fn body(maps: &dyn MapStore, bytes: Bytes) -> VariantBody {
    if maps.holds_variant_bytes() {
        VariantBody::Inline(bytes)
    } else {
        VariantBody::InBlobStore {
            len: bytes.len() as u64,
        }
    }
}

pub(crate) fn image(maps: &dyn MapStore, bytes: &'static [u8]) -> VariantRow {
    VariantRow::Image {
        format: OutputFormat::Webp,
        width: 400,
        height: 300,
        chosen: None,
        body: body(maps, Bytes::from_static(bytes)),
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
    // URLs of any length (longer than an index entry may be, in some engines).
    let long = format!("http://127.0.0.1/{}", "x".repeat(6000));
    maps.put_url(&long, &url_entry(a)).await.unwrap();
    assert_eq!(maps.url(&long).await.unwrap(), Some(url_entry(a)));
    maps.remove_url(&long).await.unwrap();

    // Originals: the first sighting wins, and it is durable at once.
    assert_eq!(maps.original(&a).await.unwrap(), None);
    assert!(maps.add_original(&a, &info(10)).await.unwrap());
    assert!(!maps.add_original(&a, &info(99)).await.unwrap());
    assert_eq!(maps.original(&a).await.unwrap().unwrap().bytes, 10);
    assert_eq!(
        maps.original(&a).await.unwrap().unwrap().upright,
        Some((2, 3)),
        "the size once orientation is applied is kept"
    );

    // A download records its original (new or not) and its URL together.
    let new = maps
        .record_download("http://127.0.0.1/b", &url_entry(b), &info(20), None)
        .await
        .unwrap()
        .new_original;
    assert!(new, "b was not indexed");
    let again = maps
        .record_download("http://127.0.0.1/b2", &url_entry(b), &info(21), None)
        .await
        .unwrap()
        .new_original;
    assert!(!again, "b is indexed now");
    assert_eq!(maps.original(&b).await.unwrap().unwrap().bytes, 20);
    assert_eq!(
        maps.url("http://127.0.0.1/b2").await.unwrap(),
        Some(url_entry(b))
    );

    // Variants: images and each kind of cached error come back as stored.
    let rows = [
        (key(a, "w=400"), image(&*maps, b"RIFF....WEBP")),
        (key(a, "w=200"), image(&*maps, b"")),
        (key(b, "w=400"), image(&*maps, b"RIFF")),
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
    let kinds = ProcessFailure::ALL.len() as u64;
    assert_eq!((totals.images, totals.errors), (3, kinds));
    assert!(totals.image_bytes >= 16, "{totals:?}");

    // The maintenance walks see everything, and removal takes exactly what it names.
    let hashes = all_hashes(maps.as_ref()).await;
    let mut expected = vec![a, b];
    expected.sort();
    assert_eq!(hashes, expected);
    let urls: Vec<String> = all_urls(maps.as_ref())
        .await
        .into_iter()
        .map(|(u, _)| u)
        .collect();
    assert_eq!(urls.len(), 3, "{urls:?}");
    let keys = all_keys(maps.as_ref()).await;
    assert_eq!(keys.len() as u64, 3 + kinds);
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
        Some(image(&*maps, b"RIFF"))
    );
    assert_eq!(all_keys(maps.as_ref()).await.len() as u64, 1 + kinds);
    maps.check().await.unwrap();
}

/// What bounded growth relies on: the variants' bytes counted exactly once per stored row,
/// eviction in order of last use (stamps only move forward), request stamps on URL entries,
/// and forgetting by last use; all of it surviving a restart.
async fn bounded_growth(open: impl Fn() -> Opened) {
    let maps = open().await;
    let a = ContentHash::of(b"a");
    assert_eq!(maps.variant_bytes().await.unwrap(), 0);
    let (k1, k2, k3) = (key(a, "w=1"), key(a, "w=2"), key(a, "w=3"));
    maps.put_variant(&k1, &image(&*maps, &[1; 1000]))
        .await
        .unwrap();
    let one = maps.variant_bytes().await.unwrap();
    assert!(one >= 1000, "{one}");
    // Storing a key again replaces its count.
    maps.put_variant(&k1, &image(&*maps, &[1; 1000]))
        .await
        .unwrap();
    assert_eq!(maps.variant_bytes().await.unwrap(), one);
    maps.put_variant(&k2, &image(&*maps, &[2; 1000]))
        .await
        .unwrap();
    maps.put_variant(&k3, &image(&*maps, &[3; 1000]))
        .await
        .unwrap();
    assert_eq!(maps.variant_bytes().await.unwrap(), 3 * one);
    let error = VariantRow::Failed {
        kind: ProcessFailure::Undecodable,
        message: "x".repeat(500),
    };
    let k4 = key(a, "w=4");
    maps.put_variant(&k4, &error).await.unwrap();
    let four = maps.variant_bytes().await.unwrap();
    assert!(four >= 3 * one + 500, "cached errors count too");
    maps.remove_variants(std::slice::from_ref(&k4))
        .await
        .unwrap();
    assert_eq!(maps.variant_bytes().await.unwrap(), 3 * one);

    // Large images (stored in pieces by some backends) whose keys share a prefix stay apart.
    let (short, long) = (key(a, "w=100"), key(a, "w=1000"));
    let big = |fill: u8| VariantRow::Image {
        format: OutputFormat::Jpeg,
        width: 1,
        height: 1,
        chosen: None,
        body: body(&*maps, Bytes::from(vec![fill; 50_000])),
    };
    maps.put_variant(&short, &big(1)).await.unwrap();
    maps.put_variant(&long, &big(2)).await.unwrap();
    assert_eq!(maps.variant(&short).await.unwrap(), Some(big(1)));
    // What a `q=auto` search chose comes back with the row, small or in pieces, with a score
    // or without one (an animation's).
    let mut searched = Vec::new();
    for (i, (len, score)) in [(10, Some(712)), (50_000, Some(-35)), (10, None)]
        .into_iter()
        .enumerate()
    {
        let k = key(a, &format!("q=auto:good:70&w={i}"));
        searched.push(k.clone());
        let row = VariantRow::Image {
            format: OutputFormat::Avif,
            width: 2,
            height: 3,
            chosen: Some(imgcas_processors::Chosen {
                quality: 57,
                score_tenths: score,
            }),
            body: body(&*maps, Bytes::from(vec![7u8; len])),
        };
        maps.put_variant(&k, &row).await.unwrap();
        assert_eq!(
            maps.variant(&k).await.unwrap(),
            Some(row),
            "{len} {score:?}"
        );
    }
    maps.remove_variants(&searched).await.unwrap();
    assert_eq!(maps.variant(&long).await.unwrap(), Some(big(2)));
    maps.put_variant(&short, &big(3)).await.unwrap();
    maps.remove_variants(std::slice::from_ref(&short))
        .await
        .unwrap();
    assert_eq!(maps.variant(&long).await.unwrap(), Some(big(2)));
    maps.remove_variants(std::slice::from_ref(&long))
        .await
        .unwrap();
    assert_eq!(maps.variant_bytes().await.unwrap(), 3 * one);

    // Served stamps: k1 most recently, then k3; k2 least. A stamp never moves back, and an
    // unknown key is skipped.
    let now = now_ms();
    maps.mark_variants_served(&[
        (k1.clone(), now + 20_000),
        (k3.clone(), now + 10_000),
        (key(a, "w=unknown"), now),
    ])
    .await
    .unwrap();
    maps.mark_variants_served(&[(k1.clone(), 1)]).await.unwrap();
    let evicted = maps.evict_variants(2 * one).await.unwrap();
    assert_eq!(evicted.keys, vec![k2.clone()]);
    assert_eq!(evicted.remaining_bytes, 2 * one);
    assert_eq!(maps.variant(&k2).await.unwrap(), None);
    let evicted = maps.evict_variants(2 * one).await.unwrap();
    assert!(evicted.keys.is_empty(), "within the target already");

    // URL entries: a request stamp moves forward only; forgetting goes by last use.
    let hash = ContentHash::of(b"u");
    maps.put_url("http://127.0.0.1/used", &url_entry(hash))
        .await
        .unwrap();
    maps.put_url("http://127.0.0.1/unused", &url_entry(hash))
        .await
        .unwrap();
    maps.mark_urls_requested(&[
        ("http://127.0.0.1/used".into(), now),
        ("http://127.0.0.1/none".into(), now),
    ])
    .await
    .unwrap();
    maps.mark_urls_requested(&[("http://127.0.0.1/used".into(), 7)])
        .await
        .unwrap();
    let used = maps.url("http://127.0.0.1/used").await.unwrap().unwrap();
    assert_eq!((used.requested_at_ms, used.last_used_ms()), (now, now));
    assert_eq!(maps.url("http://127.0.0.1/none").await.unwrap(), None);
    assert_eq!(maps.forget_urls(now - 1000).await.unwrap(), 1);
    assert_eq!(maps.url("http://127.0.0.1/unused").await.unwrap(), None);

    // All of it survives a restart.
    maps.flush().await.unwrap();
    drop(maps);
    let maps = open().await;
    assert_eq!(maps.variant_bytes().await.unwrap(), 2 * one);
    let used = maps.url("http://127.0.0.1/used").await.unwrap().unwrap();
    assert_eq!(used.requested_at_ms, now);
    assert_eq!(all_urls(maps.as_ref()).await.len(), 1);
    let evicted = maps.evict_variants(one).await.unwrap();
    assert_eq!(evicted.keys, vec![k3], "k3 was served before k1");
    let evicted = maps.evict_variants(0).await.unwrap();
    assert_eq!((evicted.keys, evicted.remaining_bytes), (vec![k1], 0));
    assert!(all_keys(maps.as_ref()).await.is_empty());
    maps.compact().await.unwrap();
    maps.check().await.unwrap();
}

/// The URL map's byte budget (issue 28): every write keeps the count (`url_row_bytes` of what
/// is stored), eviction drops the least recently used first down to the target, and the count
/// survives a restart.
async fn url_budget(open: impl Fn() -> Opened) {
    let maps = open().await;
    assert_eq!(maps.url_bytes().await.unwrap(), 0);
    let a = ContentHash::of(b"a");
    let url = |i: usize| format!("http://127.0.0.1/{i}/{}", "x".repeat(100 * i));
    let mut expected = 0;
    for i in 0..10 {
        let mut entry = url_entry(a);
        entry.checked_at_ms = 1000 + i as u64;
        maps.put_url(&url(i), &entry).await.unwrap();
        expected += imgcas::maps::url_row_bytes(&url(i), &entry);
    }
    assert_eq!(maps.url_bytes().await.unwrap(), expected);
    // Writing an entry again replaces its count; a use stamp moves it to the back.
    let again = maps.url(&url(0)).await.unwrap().unwrap();
    maps.put_url(&url(0), &again).await.unwrap();
    assert_eq!(maps.url_bytes().await.unwrap(), expected);
    maps.mark_urls_requested(&[(url(0), 5000)]).await.unwrap();
    maps.remove_url(&url(9)).await.unwrap();
    expected -= imgcas::maps::url_row_bytes(&url(9), &url_entry(a));
    assert_eq!(maps.url_bytes().await.unwrap(), expected);

    maps.flush().await.unwrap();
    drop(maps);
    let maps = open().await;
    assert_eq!(maps.url_bytes().await.unwrap(), expected);
    // Down to a third: the oldest go (1, 2, …), the one just used (0) stays.
    let target = expected / 3;
    let evicted = maps.evict_urls(target).await.unwrap();
    assert!(evicted >= 1, "{evicted}");
    let left = maps.url_bytes().await.unwrap();
    assert!(left <= target, "{left} > {target}");
    assert!(
        maps.url(&url(0)).await.unwrap().is_some(),
        "the most recently used stays"
    );
    assert_eq!(
        maps.url(&url(1)).await.unwrap(),
        None,
        "the least recently used goes"
    );
    let kept = all_urls(maps.as_ref()).await;
    let counted: u64 = kept
        .iter()
        .map(|(u, e)| imgcas::maps::url_row_bytes(u, e))
        .sum();
    assert_eq!(counted, left);
    assert_eq!(
        maps.evict_urls(left).await.unwrap(),
        0,
        "within the target: nothing to do"
    );
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
    assert_eq!(all_hashes(maps.as_ref()).await.len(), 64);
}

/// Variants written and URLs recorded while others evict variants, from many tasks: every
/// call succeeds (on PostgreSQL an eviction and the writes it made room for once deadlocked,
/// and a write lost that way left its bytes in the bucket with no row), and the counts come
/// back to nothing when everything is evicted.
async fn writes_while_evicting(open: impl Fn() -> Opened) {
    let maps = open().await;
    let hashes: Vec<ContentHash> = (0..6u32)
        .map(|i| ContentHash::of(&i.to_le_bytes()))
        .collect();
    let mut tasks = Vec::new();
    for writer in 0..4u32 {
        let (maps, hashes) = (maps.clone(), hashes.clone());
        tasks.push(tokio::spawn(async move {
            for n in 0..60u32 {
                let hash = hashes[((writer + n) % 6) as usize];
                let k = key(hash, &format!("w={writer}-{n}"));
                let row = VariantRow::Image {
                    format: OutputFormat::Jpeg,
                    width: 1,
                    height: 1,
                    chosen: None,
                    body: body(&*maps, Bytes::from(vec![n as u8; 700])),
                };
                maps.put_variant(&k, &row).await.unwrap();
                maps.put_url(&format!("http://o/{writer}/{n}"), &url_entry(hash))
                    .await
                    .unwrap();
            }
        }));
    }
    for _ in 0..2 {
        let maps = maps.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..40 {
                maps.evict_variants(5_000).await.unwrap();
                maps.evict_urls(2_000).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    maps.evict_variants(0).await.unwrap();
    assert_eq!(maps.variant_bytes().await.unwrap(), 0);
    let left = maps.variant_totals().await.unwrap();
    assert_eq!((left.images, left.image_bytes, left.errors), (0, 0, 0));
    assert_eq!(
        maps.totals().await.unwrap(),
        maps.recount_totals().await.unwrap()
    );
}

fn fingerprint(phash: u64, width: u32) -> Fingerprint {
    Fingerprint {
        phash,
        block_hash: 0x0f0f_0f0f_0f0f_0f0f,
        colour: 0x8080_8080_8080_8080,
        width,
        height: 600,
    }
}

/// Fingerprints, the near-neighbour search by radius, the backfill's list, aliases and a
/// canonical URL entry: as written, after a reopen too.
async fn near_duplicates(open: impl Fn() -> Opened) {
    let maps = open().await;
    let hashes: Vec<ContentHash> = (0..6u8).map(|i| ContentHash::of(&[i])).collect();
    for h in &hashes {
        maps.add_original(h, &info(10)).await.unwrap();
    }
    let base = 0x0123_4567_89ab_cdefu64;
    // Distances from `base`: 0, 3, 8 (two bits in every band: the pigeonhole's worst case),
    // 9, and far; the sixth original is no picture.
    let hashes_at = [base, base ^ 0b111, base ^ 0xff, base ^ 0x1ff, !base];
    let mut sorted = hashes.clone();
    sorted.sort();
    let lacking = |hashes: &[ContentHash]| -> Vec<VersionCursor> {
        hashes
            .iter()
            .map(|&hash| VersionCursor { version: 0, hash })
            .collect()
    };
    let version = imgcas_processors::FINGERPRINT_VERSION;
    assert_eq!(
        maps.lacking_fingerprints(version, None, 100).await.unwrap(),
        lacking(&sorted)
    );
    assert_eq!(
        maps.lacking_fingerprints(version, Some(lacking(&sorted)[2]), 2)
            .await
            .unwrap(),
        lacking(&sorted[3..5])
    );
    for (h, phash) in hashes.iter().zip(hashes_at) {
        let fp = Fingerprinted::Picture(fingerprint(phash, 800));
        maps.put_fingerprint(h, &fp).await.unwrap();
    }
    maps.put_fingerprint(&hashes[5], &Fingerprinted::NotAPicture)
        .await
        .unwrap();
    assert_eq!(
        maps.lacking_fingerprints(version, None, 100).await.unwrap(),
        vec![]
    );
    assert_eq!(
        maps.fingerprint(&hashes[1]).await.unwrap(),
        Some(Fingerprinted::Picture(fingerprint(base ^ 0b111, 800)))
    );
    assert_eq!(
        maps.fingerprint(&hashes[5]).await.unwrap(),
        Some(Fingerprinted::NotAPicture)
    );
    let near = |radius| {
        let maps = maps.clone();
        async move {
            maps.near(base, radius)
                .await
                .unwrap()
                .into_iter()
                .map(|m| (m.hash, m.distance))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        near(8).await,
        vec![(hashes[0], 0), (hashes[1], 3), (hashes[2], 8)]
    );
    assert_eq!(near(2).await, vec![(hashes[0], 0)]);
    assert_eq!(near(9).await.len(), 4);
    // A replaced fingerprint is found by its new hash only.
    maps.put_fingerprint(&hashes[1], &Fingerprinted::Picture(fingerprint(!base, 800)))
        .await
        .unwrap();
    assert_eq!(near(8).await, vec![(hashes[0], 0), (hashes[2], 8)]);
    maps.remove_original(&hashes[2]).await.unwrap();
    assert_eq!(near(8).await, vec![(hashes[0], 0)]);
    assert_eq!(all_fingerprints(maps.as_ref()).await.len(), 4);

    assert_eq!(maps.alias(&hashes[3]).await.unwrap(), None);
    maps.put_alias(&hashes[3], &hashes[0]).await.unwrap();
    let mut canonical = url_entry(hashes[3]);
    canonical.canonical = Some(hashes[0]);
    maps.put_url("http://127.0.0.1/copy", &canonical)
        .await
        .unwrap();
    drop(maps);
    let maps = open().await;
    assert_eq!(maps.alias(&hashes[3]).await.unwrap(), Some(hashes[0]));
    let entry = maps.url("http://127.0.0.1/copy").await.unwrap().unwrap();
    assert_eq!(entry.serving(), hashes[0]);
    assert_eq!(entry, canonical);
    let found: Vec<_> = maps
        .near(base, 8)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.hash)
        .collect();
    assert_eq!(found, vec![hashes[0]], "the index is rebuilt at open");
    let closest = maps.near_closest(base, 8, 1, 1000).await.unwrap();
    assert!(!closest.partial);
    let closest = closest.matches;
    assert_eq!(closest.len(), 1);
    assert_eq!(
        closest[0].hash, hashes[0],
        "the closest, as `near` gives it first"
    );
}

/// Takedowns: the hash → URLs index follows every write of the URL map (own bytes and
/// canonical original, replaced, removed, forgotten), a hash's variants are found by hash,
/// aliases naming a hash go, the takedown list survives a reopen, and the purge generation
/// only moves forward.
async fn takedowns(open: impl Fn() -> Opened) {
    let maps = open().await;
    let (x, y, z) = (
        ContentHash::of(b"td-x"),
        ContentHash::of(b"td-y"),
        ContentHash::of(b"td-z"),
    );
    let sorted = |mut v: Vec<(String, UrlEntry)>| {
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v.into_iter().map(|(u, _)| u).collect::<Vec<_>>()
    };
    maps.put_url("http://o/1", &url_entry(x)).await.unwrap();
    maps.record_download("http://o/2", &url_entry(x), &info(5), None)
        .await
        .unwrap();
    let near = UrlEntry {
        canonical: Some(x),
        ..url_entry(y)
    };
    maps.put_url("http://o/3", &near).await.unwrap();
    maps.put_url("http://o/4", &url_entry(z)).await.unwrap();
    assert_eq!(
        sorted(maps.urls_of(&x).await.unwrap()),
        ["http://o/1", "http://o/2", "http://o/3"]
    );
    assert_eq!(sorted(maps.urls_of(&y).await.unwrap()), ["http://o/3"]);
    // Replaced: the index follows the new entry.
    maps.put_url("http://o/1", &url_entry(z)).await.unwrap();
    maps.remove_url("http://o/2").await.unwrap();
    assert_eq!(sorted(maps.urls_of(&x).await.unwrap()), ["http://o/3"]);
    assert_eq!(
        sorted(maps.urls_of(&z).await.unwrap()),
        ["http://o/1", "http://o/4"]
    );
    // Forgotten for disuse: out of the index too.
    maps.forget_urls(now_ms() + 1).await.unwrap();
    assert!(maps.urls_of(&x).await.unwrap().is_empty());
    assert!(maps.urls_of(&z).await.unwrap().is_empty());

    // Variants by hash, with what they count for.
    for spec in ["w=1", "w=2"] {
        let row = VariantRow::Failed {
            kind: ProcessFailure::Undecodable,
            message: format!("bad {spec}"),
        };
        maps.put_variant(&key(x, spec), &row).await.unwrap();
    }
    let row = VariantRow::Failed {
        kind: ProcessFailure::Undecodable,
        message: "other".into(),
    };
    maps.put_variant(&key(z, "w=1"), &row).await.unwrap();
    let mut of_x = maps.variants_of(&x).await.unwrap();
    of_x.sort_by(|a, b| a.0.canonical_spec.cmp(&b.0.canonical_spec));
    assert_eq!(
        of_x.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        [key(x, "w=1"), key(x, "w=2")]
    );
    assert!(of_x.iter().all(|(_, n)| *n > 0));

    // Aliases naming a hash, either way.
    maps.put_alias(&y, &x).await.unwrap();
    maps.put_alias(&x, &z).await.unwrap();
    maps.put_alias(&z, &y).await.unwrap();
    assert_eq!(maps.remove_aliases(&x).await.unwrap(), 2);
    assert_eq!(maps.alias(&y).await.unwrap(), None);
    assert_eq!(maps.alias(&z).await.unwrap(), Some(y));

    // The list, durable; the generation moves forward only.
    let generation = maps.purge_generation().await.unwrap();
    assert!(maps.take_down(&x, 7).await.unwrap());
    assert!(!maps.take_down(&x, 8).await.unwrap(), "listed once");
    assert!(maps.is_taken_down(&x).await.unwrap());
    assert!(!maps.is_taken_down(&y).await.unwrap());
    assert_eq!(maps.bump_purge_generation().await.unwrap(), generation + 1);
    drop(maps);
    let maps = open().await;
    assert_eq!(maps.takedowns().await.unwrap(), vec![(x, 7)]);
    assert_eq!(maps.purge_generation().await.unwrap(), generation + 1);
    assert!(maps.lift_takedown(&x).await.unwrap());
    assert!(!maps.lift_takedown(&x).await.unwrap());
    assert!(maps.takedowns().await.unwrap().is_empty());
}

/// The blocklist: entries by id, replaced by a later listing of the same id, durable
/// across a reopen, lifted once.
async fn blocklist(open: impl Fn() -> Opened) {
    let maps = open().await;
    assert!(maps.blocklist().await.unwrap().is_empty());
    let exact = BlockEntry {
        id: "ab".repeat(32),
        sha256: Some("ab".repeat(32)),
        fingerprint: Some("0123456789abcdef".into()),
        radius: Some(6),
        note: Some("reported twice".into()),
        matched: None,
        took_down: false,
        listed_ms: 5,
    };
    let near = BlockEntry {
        id: "fp-0123456789abcdef".into(),
        sha256: None,
        fingerprint: Some("0123456789abcdef".into()),
        radius: Some(4),
        note: None,
        matched: None,
        took_down: false,
        listed_ms: 6,
    };
    assert!(maps.block(&exact).await.unwrap());
    assert!(maps.block(&near).await.unwrap());
    let wider = BlockEntry {
        radius: Some(8),
        ..near.clone()
    };
    assert!(
        !maps.block(&wider).await.unwrap(),
        "the same id is replaced"
    );
    drop(maps);
    let maps = open().await;
    let mut listed = maps.blocklist().await.unwrap();
    listed.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(listed, vec![exact.clone(), wider]);
    assert!(maps.unblock(&near.id).await.unwrap());
    assert!(!maps.unblock(&near.id).await.unwrap());
    assert_eq!(maps.blocklist().await.unwrap(), vec![exact]);
}

/// An original's facts are kept with its index entry, replaced by a later write, survive a
/// reopen, and are not written for a hash not indexed.
async fn original_facts(open: impl Fn() -> Opened) {
    let maps = open().await;
    let hash = ContentHash::of(b"facts");
    let facts = |frames: u32| OriginalFacts {
        version: imgcas_processors::FACTS_VERSION,
        picture: Some(PictureFacts {
            blurhash: "K0000000000000000000000000".into(),
            thumbhash: "AAAAAAAAAAAAAAAAAAAAAAAA".into(),
            dominant_color: "#123456".into(),
            has_alpha: false,
            frames,
            duration_ms: u64::from(frames - 1) * 40,
        }),
    };
    maps.put_facts(&hash, &facts(1)).await.unwrap();
    assert_eq!(
        maps.original(&hash).await.unwrap(),
        None,
        "not indexed: nothing written"
    );
    maps.add_original(&hash, &info(9)).await.unwrap();
    assert_eq!(maps.original(&hash).await.unwrap().unwrap().facts, None);
    maps.put_facts(&hash, &facts(1)).await.unwrap();
    maps.put_facts(&hash, &facts(4)).await.unwrap();
    assert_eq!(
        maps.original(&hash).await.unwrap().unwrap().facts,
        Some(facts(4))
    );
    // The focal point set for it: kept with the entry, through a facts write and a reopen.
    let focus = Focus {
        x: 2500,
        y: 7000,
        region: Some([1000, 4000, 3000, 6000]),
    };
    let stranger = ContentHash::of(b"not indexed");
    assert!(!maps.put_focus(&stranger, Some(&focus)).await.unwrap());
    assert_eq!(maps.original(&stranger).await.unwrap(), None);
    assert!(maps.put_focus(&hash, Some(&focus)).await.unwrap());
    maps.put_facts(&hash, &facts(4)).await.unwrap();
    drop(maps);
    let maps = open().await;
    let kept = maps.original(&hash).await.unwrap().unwrap();
    assert_eq!((kept.facts, kept.bytes), (Some(facts(4)), 9));
    assert_eq!(kept.focus, Some(focus));
    // Read with a URL's entry too, where a backend reads both at once (PostgreSQL).
    let entry = url_entry(hash);
    maps.put_url("https://focus.test/a.jpg", &entry)
        .await
        .unwrap();
    let (found, with) = maps
        .url_with_original("https://focus.test/a.jpg")
        .await
        .unwrap();
    assert!(found.is_some(), "the URL's entry");
    if let Some(info) = with {
        assert_eq!(info.focus, Some(focus));
    }
    assert!(maps.put_focus(&hash, None).await.unwrap());
    assert_eq!(maps.original(&hash).await.unwrap().unwrap().focus, None);
}

/// A redb file written before the hash → URLs index existed gets it built at its first open
/// by this release: its URL table, as that release wrote it, is found by hash.
#[tokio::test]
async fn redb_builds_the_url_index_of_an_older_file() {
    let dir = tempfile::tempdir().unwrap();
    let hash = ContentHash::of(b"older");
    {
        let db = redb::Database::create(dir.path().join("imgcas.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let table: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("urls");
            let mut urls = txn.open_table(table).unwrap();
            let entry = serde_json::to_vec(&url_entry(hash)).unwrap();
            urls.insert("http://old/1", entry.as_slice()).unwrap();
            urls.insert("http://old/2", entry.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    let maps = RedbMaps::open(dir.path().to_path_buf()).await.unwrap();
    let mut found: Vec<String> = maps
        .urls_of(&hash)
        .await
        .unwrap()
        .into_iter()
        .map(|(u, _)| u)
        .collect();
    found.sort();
    assert_eq!(found, ["http://old/1", "http://old/2"]);
}

/// The quotas the nodes spend together (issue 54): slots per origin that expire, pauses, token
/// buckets (strict and into debt), and held failures with their streak. On one store's
/// clock, whatever the backend.
async fn quotas(open: impl Fn() -> Opened) {
    use imgcas::maps::{Bucket, OriginSlot, OriginTurn, SlotTake, Take};
    use std::time::Duration;
    let maps = open().await;
    let origin = "http://127.0.0.1:1";
    let ttl = Duration::from_secs(30);
    let fast = Bucket {
        rate: 1000.0,
        burst: 1000.0,
    };
    let turn = |origin: &'static str, limit: u32, token: i64, ttl: Duration| OriginTurn {
        origin,
        limit,
        owner: "n",
        token,
        ttl,
        rate_key: "rate:o",
        rate: fast,
        url_key: None,
    };
    // Slots: two of two, then busy; a release frees one; only with its token.
    let mut held = Vec::new();
    for token in [1, 2] {
        match maps
            .take_origin_turn(&turn(origin, 2, token, ttl))
            .await
            .unwrap()
        {
            (SlotTake::Granted(slot), None) => held.push(slot),
            other => panic!("{other:?}"),
        }
    }
    assert_ne!(held[0].slot, held[1].slot);
    assert_eq!(maps.origin_slots_held(origin).await.unwrap(), 2);
    assert_eq!(
        maps.take_origin_turn(&turn(origin, 2, 3, ttl))
            .await
            .unwrap()
            .0,
        SlotTake::Busy
    );
    let stranger = OriginSlot {
        token: 99,
        ..held[0].clone()
    };
    maps.release_origin_slot(&stranger).await.unwrap();
    assert_eq!(
        maps.origin_slots_held(origin).await.unwrap(),
        2,
        "not its token"
    );
    maps.release_origin_slot(&held[0]).await.unwrap();
    assert!(matches!(
        maps.take_origin_turn(&turn(origin, 2, 4, ttl))
            .await
            .unwrap()
            .0,
        SlotTake::Granted(_)
    ));
    // Another origin has slots of its own; an expired slot is taken over.
    let other = "http://127.0.0.1:2";
    let short = Duration::from_millis(200);
    assert!(matches!(
        maps.take_origin_turn(&turn(other, 1, 5, short))
            .await
            .unwrap()
            .0,
        SlotTake::Granted(_)
    ));
    assert_eq!(
        maps.take_origin_turn(&turn(other, 1, 6, ttl))
            .await
            .unwrap()
            .0,
        SlotTake::Busy
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        matches!(
            maps.take_origin_turn(&turn(other, 1, 7, ttl))
                .await
                .unwrap()
                .0,
            SlotTake::Granted(_)
        ),
        "a dead node's slot comes back"
    );
    // A slot free but the origin's rate spent: a wait, and no slot taken.
    let slow_rate = OriginTurn {
        rate_key: "rate:slow",
        rate: Bucket {
            rate: 2.0,
            burst: 1.0,
        },
        ..turn("http://127.0.0.1:3", 4, 8, ttl)
    };
    assert!(matches!(
        maps.take_origin_turn(&slow_rate).await.unwrap().0,
        SlotTake::Granted(_)
    ));
    match maps.take_origin_turn(&slow_rate).await.unwrap().0 {
        SlotTake::RateWait(wait) => assert!(wait <= Duration::from_millis(510), "{wait:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        maps.origin_slots_held("http://127.0.0.1:3").await.unwrap(),
        1
    );
    // A pause holds every slot back, for its length; a shorter one does not cut it.
    maps.pause_origin(origin, Duration::from_secs(5))
        .await
        .unwrap();
    maps.pause_origin(origin, Duration::from_secs(1))
        .await
        .unwrap();
    let left = maps.origin_pause(origin).await.unwrap().expect("paused");
    assert!(
        left > Duration::from_secs(4) && left <= Duration::from_secs(5),
        "{left:?}"
    );
    match maps
        .take_origin_turn(&turn(origin, 8, 9, ttl))
        .await
        .unwrap()
        .0
    {
        SlotTake::Paused(left) => assert!(left > Duration::from_secs(4)),
        other => panic!("{other:?}"),
    }
    assert_eq!(maps.origin_pause(other).await.unwrap(), None);
    // A URL's held failure holds its turn back, and its streak comes with a turn after.
    let failing = OriginTurn {
        url_key: Some("f1f1"),
        ..turn(other, 8, 10, ttl)
    };
    maps.hold_failure("f1f1", "{}", 2, short, ttl)
        .await
        .unwrap();
    match maps.take_origin_turn(&failing).await.unwrap() {
        (SlotTake::Held(held), Some(_)) => assert_eq!(held.streak, 2),
        other => panic!("{other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    match maps.take_origin_turn(&failing).await.unwrap() {
        (SlotTake::Granted(_), Some(remembered)) => assert_eq!(remembered.streak, 2),
        other => panic!("{other:?}"),
    }
    // A strict bucket: a burst of 3, then refused with the wait its rate gives.
    let bucket = Bucket {
        rate: 10.0,
        burst: 3.0,
    };
    for _ in 0..3 {
        assert!(matches!(
            maps.take_tokens("rate:x", bucket, 1.0, 1.0).await.unwrap(),
            Take::Granted { .. }
        ));
    }
    match maps.take_tokens("rate:x", bucket, 1.0, 1.0).await.unwrap() {
        Take::Refused { wait } => assert!(wait <= Duration::from_millis(110), "{wait:?}"),
        other => panic!("{other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert!(matches!(
        maps.take_tokens("rate:x", bucket, 1.0, 1.0).await.unwrap(),
        Take::Granted { .. }
    ));
    // A budget taken into debt: admitted while above zero, then refused until repaid.
    let budget = Bucket {
        rate: 100.0,
        burst: 50.0,
    };
    match maps
        .take_tokens("tenant:t", budget, 1.0, 250.0)
        .await
        .unwrap()
    {
        Take::Granted { left } => assert!((left + 200.0).abs() < 1.0, "{left}"),
        other => panic!("{other:?}"),
    }
    match maps
        .take_tokens("tenant:t", budget, 1.0, 10.0)
        .await
        .unwrap()
    {
        Take::Refused { wait } => {
            assert!(
                wait > Duration::from_millis(1900) && wait <= Duration::from_millis(2010),
                "{wait:?}"
            )
        }
        other => panic!("{other:?}"),
    }
    // Charged whatever the level (the lowest need).
    assert!(matches!(
        maps.take_tokens("tenant:t", budget, f64::MIN, 5.0)
            .await
            .unwrap(),
        Take::Granted { .. }
    ));
    // Held failures: held, then remembered for their streak, then cleared.
    let url = "f0f0";
    assert_eq!(maps.held_failure(url).await.unwrap(), None);
    maps.hold_failure(url, "{}", 3, short, ttl).await.unwrap();
    let held = maps.held_failure(url).await.unwrap().unwrap();
    assert_eq!((held.error.as_str(), held.streak), ("{}", 3));
    assert!(held.left > Duration::ZERO && held.left <= short);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let remembered = maps.held_failure(url).await.unwrap().unwrap();
    assert_eq!((remembered.streak, remembered.left), (3, Duration::ZERO));
    maps.clear_failure(url).await.unwrap();
    assert_eq!(maps.held_failure(url).await.unwrap(), None);
}

/// Opens the redb maps in `dir` afresh at each call.
pub(crate) fn redb_in(dir: Arc<tempfile::TempDir>) -> impl Fn() -> Opened {
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
    writes_while_evicting(redb_in(Arc::new(tempfile::tempdir().unwrap()))).await;
    bounded_growth(redb_in(Arc::new(tempfile::tempdir().unwrap()))).await;
    url_budget(redb_in(Arc::new(tempfile::tempdir().unwrap()))).await;
    near_duplicates(redb_in(Arc::new(tempfile::tempdir().unwrap()))).await;
    takedowns(redb_in(Arc::new(tempfile::tempdir().unwrap()))).await;
    blocklist(redb_in(Arc::new(tempfile::tempdir().unwrap()))).await;
    original_facts(redb_in(Arc::new(tempfile::tempdir().unwrap()))).await;
    quotas(redb_in(Arc::new(tempfile::tempdir().unwrap()))).await;
    totals(redb_in(Arc::new(tempfile::tempdir().unwrap()))).await;
}

#[tokio::test]
async fn redb_admits_one_process_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let first = RedbMaps::open(dir.path().to_path_buf()).await.unwrap();
    let second = RedbMaps::open(dir.path().to_path_buf()).await;
    assert!(second.is_err(), "a second handle on one file is refused");
    drop(first);
}

/// What the URL map points at against what is stored: three URLs of one original's bytes,
/// one URL of its near-duplicate (canonical mode), one of another original, an original no
/// URL names (an upload), and a URL whose original is gone (counted, pointing at nothing).
async fn totals(open: impl Fn() -> Opened) {
    let maps = open().await;
    assert_eq!(maps.totals().await.unwrap(), StoreTotals::default());
    let (a, b, upload, near_own, gone) = (
        ContentHash::of(b"tot-a"),
        ContentHash::of(b"tot-b"),
        ContentHash::of(b"tot-upload"),
        ContentHash::of(b"tot-near"),
        ContentHash::of(b"tot-gone"),
    );
    maps.add_original(&a, &info(1000)).await.unwrap();
    maps.add_original(&b, &info(300)).await.unwrap();
    maps.add_original(&upload, &info(70)).await.unwrap();
    for n in 0..3 {
        maps.put_url(&format!("http://o/a{n}"), &url_entry(a))
            .await
            .unwrap();
    }
    let near = UrlEntry {
        canonical: Some(a),
        ..url_entry(near_own)
    };
    maps.put_url("http://o/near", &near).await.unwrap();
    maps.put_url("http://o/b", &url_entry(b)).await.unwrap();
    maps.put_url("http://o/gone", &url_entry(gone))
        .await
        .unwrap();
    let totals = maps.totals().await.unwrap();
    assert_eq!(
        totals,
        StoreTotals {
            originals: 3,
            original_bytes: 1370,
            urls: 6,
            pointed_bytes: 4 * 1000 + 300,
            exact_saved_bytes: 2 * 1000,
            near_urls: 1,
            near_saved_bytes: 1000,
        }
    );
    assert_eq!(
        maps.recount_totals().await.unwrap(),
        totals,
        "kept = counted afresh"
    );
    // The same after a restart (nothing of it is memory).
    drop(maps);
    let maps = open().await;
    assert_eq!(maps.totals().await.unwrap(), totals);

    // A mixed workload: URLs rewritten (to other bytes, to a near-duplicate mapping and
    // back), removed one by one and in bulk (forgotten, evicted), originals removed and
    // indexed again, a URL written before its original: the kept totals equal a recount
    // after every step.
    let step = |what: &'static str| {
        let maps = maps.clone();
        async move {
            let kept = maps.totals().await.unwrap();
            assert_eq!(kept, maps.recount_totals().await.unwrap(), "after {what}");
            kept
        }
    };
    maps.put_url("http://o/a0", &url_entry(b)).await.unwrap();
    step("a URL rewritten to other bytes").await;
    let to_near = UrlEntry {
        canonical: Some(b),
        ..url_entry(a)
    };
    maps.put_url("http://o/a1", &to_near).await.unwrap();
    step("a URL mapped to a near-duplicate").await;
    maps.put_url("http://o/a1", &url_entry(a)).await.unwrap();
    step("and back").await;
    maps.remove_url("http://o/a2").await.unwrap();
    step("a URL removed").await;
    maps.remove_original(&a).await.unwrap();
    step("an original removed").await;
    maps.add_original(&a, &info(1000)).await.unwrap();
    step("indexed again").await;
    let late = ContentHash::of(b"tot-late");
    maps.put_url("http://o/late", &url_entry(late))
        .await
        .unwrap();
    maps.put_url("http://o/late2", &url_entry(late))
        .await
        .unwrap();
    step("URLs before their original").await;
    maps.add_original(&late, &info(5)).await.unwrap();
    let kept = step("their original").await;
    assert_eq!(kept.urls, 7);
    maps.evict_urls(0).await.unwrap();
    let kept = step("every URL evicted").await;
    assert_eq!((kept.urls, kept.pointed_bytes, kept.originals), (0, 0, 4));
    for n in 0..4 {
        maps.put_url(&format!("http://o/again{n}"), &url_entry(upload))
            .await
            .unwrap();
    }
    maps.forget_urls(now_ms() + 1).await.unwrap();
    let kept = step("every URL forgotten").await;
    assert_eq!(
        (kept.urls, kept.exact_saved_bytes, kept.original_bytes),
        (0, 0, 1375)
    );
}

/// Opens the PostgreSQL maps in database `url` afresh at each call (a node restarting).
pub(crate) fn postgres_at(url: String) -> impl Fn() -> Opened {
    move || -> Opened {
        let url = url.clone();
        Box::pin(async move {
            Arc::new(
                PostgresMaps::open(&url)
                    .await
                    .expect("PostgreSQL maps open"),
            ) as Arc<dyn MapStore>
        })
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_keeps_the_contract() {
    let Some(server) = common::postgres::PgServer::or_skip("postgres_keeps_the_contract") else {
        return;
    };
    contract(postgres_at(server.database("contract"))).await;
    concurrent_durable_inserts(postgres_at(server.database("durable_inserts"))).await;
    writes_while_evicting(postgres_at(server.database("writes_while_evicting"))).await;
    bounded_growth(postgres_at(server.database("bounded_growth"))).await;
    url_budget(postgres_at(server.database("url_budget"))).await;
    near_duplicates(postgres_at(server.database("near_duplicates"))).await;
    takedowns(postgres_at(server.database("takedowns"))).await;
    blocklist(postgres_at(server.database("blocklist"))).await;
    original_facts(postgres_at(server.database("original_facts"))).await;
    quotas(postgres_at(server.database("quotas"))).await;
    totals(postgres_at(server.database("totals"))).await;
}

/// Nodes starting together on an empty database all come up (the migrations serialise on a
/// row), and later starts find the schema in place.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_nodes_starting_at_once_all_come_up() {
    let Some(server) = common::postgres::PgServer::or_skip("postgres_nodes_starting") else {
        return;
    };
    let url = server.database("starting_at_once");
    let starts: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { PostgresMaps::open(&url).await.map(|_| ()) })
        })
        .collect();
    for start in starts {
        start.await.unwrap().expect("every node comes up");
    }
    PostgresMaps::open(&url).await.expect("and again");
    let version = server
        .psql("starting_at_once", "SELECT version FROM imgcas_schema")
        .unwrap();
    assert!(version.parse::<u32>().unwrap() >= 1, "{version}");
    let tables = server
        .psql(
            "starting_at_once",
            "SELECT count(*) FROM information_schema.tables WHERE table_name LIKE 'imgcas_%'",
        )
        .unwrap();
    assert!(tables.parse::<u32>().unwrap() >= 5, "{tables} tables");
}

/// Two nodes storing the same variant at once count its bytes once; one node's upload is
/// the other's at once (nothing cached that another node could change).
#[tokio::test(flavor = "multi_thread")]
async fn postgres_nodes_share_one_truth() {
    let Some(server) = common::postgres::PgServer::or_skip("postgres_nodes_share") else {
        return;
    };
    let url = server.database("one_truth");
    let a = Arc::new(PostgresMaps::open(&url).await.unwrap());
    let b = Arc::new(PostgresMaps::open(&url).await.unwrap());
    let hash = ContentHash::of(b"shared");
    let k = key(hash, "w=1");
    let row = image(&*a, &[7; 900]);
    let mut writers = Vec::new();
    for i in 0..16 {
        let (node, k, row) = (
            if i % 2 == 0 { a.clone() } else { b.clone() },
            k.clone(),
            row.clone(),
        );
        writers.push(tokio::spawn(
            async move { node.put_variant(&k, &row).await },
        ));
    }
    for w in writers {
        w.await.unwrap().unwrap();
    }
    let counted = a.variant_bytes().await.unwrap();
    assert!(counted >= 900, "{counted}");
    assert_eq!(b.variant_bytes().await.unwrap(), counted);
    b.remove_variants(std::slice::from_ref(&k)).await.unwrap();
    assert_eq!(
        a.variant_bytes().await.unwrap(),
        0,
        "counted once, so gone at once"
    );

    // What one node writes, another reads at once (`url_now`), or within a second (`url`,
    // which a node answers from memory that long).
    assert_eq!(b.url("http://127.0.0.1/u").await.unwrap(), None);
    a.put_url("http://127.0.0.1/u", &url_entry(hash))
        .await
        .unwrap();
    assert_eq!(
        b.url_now("http://127.0.0.1/u").await.unwrap(),
        Some(url_entry(hash))
    );
    let mut moved = url_entry(ContentHash::of(b"new"));
    moved.checked_at_ms = 43;
    b.put_url("http://127.0.0.1/u", &moved).await.unwrap();
    assert_eq!(
        a.url_now("http://127.0.0.1/u").await.unwrap(),
        Some(moved.clone())
    );
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(a.url("http://127.0.0.1/u").await.unwrap(), Some(moved));
    assert!(a.add_original(&hash, &info(5)).await.unwrap());
    assert_eq!(b.original(&hash).await.unwrap().unwrap().bytes, 5);
    // Rows naming bytes kept in the row are refused: this store keeps none.
    let inline = VariantRow::Image {
        format: OutputFormat::Png,
        width: 1,
        height: 1,
        chosen: None,
        body: VariantBody::Inline(Bytes::from_static(b"x")),
    };
    assert!(a.put_variant(&k, &inline).await.is_err());
}

/// Claims: one owner at a time, renewals only by the token holder, takeover only after
/// expiry (on the database's clock), and no publishing under a lost claim.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_claims_follow_the_lease_rules() {
    use imgcas::maps::{Claim, ClaimOutcome};
    use std::time::Duration;
    let Some(server) = common::postgres::PgServer::or_skip("postgres_claims") else {
        return;
    };
    let url = server.database("claims");
    let a = PostgresMaps::open(&url).await.unwrap();
    let b = PostgresMaps::open(&url).await.unwrap();
    assert!(a.shared(), "PostgreSQL maps are shared");
    let ttl = Duration::from_millis(600);
    let job = "variant:job";
    assert_eq!(
        a.try_claim(job, "a", 1, ttl).await.unwrap(),
        ClaimOutcome::Won
    );
    assert_eq!(
        b.try_claim(job, "b", 2, ttl).await.unwrap(),
        ClaimOutcome::HeldBy("a".into())
    );
    let held = Claim {
        key: job.into(),
        token: 1,
    };
    assert!(a.renew_claim(&held, 3, ttl).await.unwrap());
    let stale = held.clone();
    let held = Claim {
        key: job.into(),
        token: 3,
    };
    assert!(
        !b.renew_claim(&stale, 4, ttl).await.unwrap(),
        "an old token renews nothing"
    );

    // Expired: the next try takes it over, and the old owner can neither renew nor publish.
    tokio::time::sleep(ttl + Duration::from_millis(200)).await;
    assert_eq!(
        b.try_claim(job, "b", 5, ttl).await.unwrap(),
        ClaimOutcome::Won
    );
    assert!(!a.renew_claim(&held, 6, ttl).await.unwrap());
    let k = key(ContentHash::of(b"claimed"), "w=1");
    let row = image(&a, b"RIFF");
    let refused = a.put_variant_claimed(&k, &row, &held).await;
    assert!(
        matches!(refused, Err(imgcas::maps::MapError::ClaimLost(_))),
        "{refused:?}"
    );
    assert_eq!(a.variant(&k).await.unwrap(), None, "nothing written");
    let mine = Claim {
        key: job.into(),
        token: 5,
    };
    b.put_variant_claimed(&k, &row, &mine).await.unwrap();
    assert_eq!(b.variant(&k).await.unwrap(), Some(row));

    // Published: the write gave the claim up, leaving a tombstone for a few seconds, so a
    // node that missed the row a moment ago is refused (and reads it) rather than granted.
    assert_eq!(
        a.try_claim(job, "a", 7, ttl).await.unwrap(),
        ClaimOutcome::Published
    );
    // Work to be done again however fresh the result (a recheck) takes the tombstone over.
    assert_eq!(
        a.try_claim_past_published(job, "a", 8, ttl).await.unwrap(),
        ClaimOutcome::Won
    );

    // Released: free at once; a release with a stale token releases nothing.
    let download = "url:job";
    assert_eq!(
        a.try_claim(download, "a", 9, ttl).await.unwrap(),
        ClaimOutcome::Won
    );
    let theirs = Claim {
        key: download.into(),
        token: 10,
    };
    b.release_claim(&theirs).await.unwrap();
    assert_eq!(
        b.try_claim(download, "b", 11, ttl).await.unwrap(),
        ClaimOutcome::HeldBy("a".into())
    );
    let ours = Claim {
        key: download.into(),
        token: 9,
    };
    a.release_claim(&ours).await.unwrap();
    assert_eq!(
        b.try_claim(download, "b", 12, ttl).await.unwrap(),
        ClaimOutcome::Won
    );
}

/// Embedded maps are one process's own: every claim is granted, with nothing written.
#[tokio::test]
async fn redb_grants_every_claim() {
    use imgcas::maps::ClaimOutcome;
    let dir = tempfile::tempdir().unwrap();
    let maps = RedbMaps::open(dir.path().to_path_buf()).await.unwrap();
    assert!(!maps.shared());
    let ttl = std::time::Duration::from_secs(1);
    assert_eq!(
        maps.try_claim("k", "a", 1, ttl).await.unwrap(),
        ClaimOutcome::Won
    );
    assert_eq!(
        maps.try_claim("k", "b", 2, ttl).await.unwrap(),
        ClaimOutcome::Won
    );
}

/// Issue 34: a node whose pool is larger than what the server lets it open (here a database
/// role limited to 2 connections, a pool of 6) meets `too many connections` (SQLSTATE 53300) and
/// waits for a connection to come free, asking again, instead of failing the statement:
/// 40 concurrent reads all answer.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_waits_for_a_connection_at_the_servers_limit() {
    use imgcas::maps::postgres::PgOptions;
    let Some(server) = common::postgres::PgServer::or_skip("postgres_connection_limit") else {
        return;
    };
    // (A superuser, as the harness's own user is, is not held to connection limits.)
    let url = server
        .database("connection_limit")
        .replace("imgcas@", "limited@");
    for sql in [
        "DROP ROLE IF EXISTS limited",
        "CREATE ROLE limited LOGIN CONNECTION LIMIT 2",
        "ALTER DATABASE connection_limit OWNER TO limited",
    ] {
        let _ = server.psql("postgres", sql);
    }
    let maps = Arc::new(
        PostgresMaps::open_with(
            &url,
            &PgOptions {
                pool_size: 6,
                ..PgOptions::default()
            },
        )
        .await
        .unwrap(),
    );
    let mut reads = Vec::new();
    for i in 0..40u8 {
        let maps = maps.clone();
        reads.push(tokio::spawn(async move {
            maps.variant(&key(ContentHash::of(&[i]), "w=1")).await
        }));
    }
    for read in reads {
        assert_eq!(read.await.unwrap().unwrap(), None);
    }
    let trips = maps.round_trips();
    assert!(
        trips.iter().any(|(op, n)| *op == "variant" && *n == 40),
        "{trips:?}"
    );
}
