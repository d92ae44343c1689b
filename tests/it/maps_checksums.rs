//! The maps summed by hash range, held on every backend and across them (issue 69): what the
//! migration's validation and the online check rely on. Two stores given the same originals,
//! URL entries and variants — one in order, the other backwards and through detours (rows
//! written wrong first, rows added then removed) — read back through `originals_page` in small
//! pages to the same order-independent sum in each of the 256 ranges (the hashes' first byte),
//! whichever backend each is; and a row changed on one side makes its range, and only its
//! range, differ.

use crate::common;
use crate::maps_contract::{image, info, key, postgres_at, redb_in, url_entry, Opened};

use std::collections::BTreeMap;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use imgcas::hash::ContentHash;
use imgcas::maps::MapStore;

/// Rows per page the sums read: small, so that a page ends inside a range.
const PAGE: usize = 3;

/// Originals each store is given.
const ORIGINALS: u32 = 60;

/// Per range (the hash's first byte): rows, and the wrapping sum of each row's digest.
type RangeSums = BTreeMap<u8, (u64, u64)>;

/// Each original's state — its index entry, the URL entries naming it, its variants' keys —
/// digested (so that the sum does not depend on the order rows are read in), summed per range.
async fn range_sums(maps: &dyn MapStore) -> RangeSums {
    let mut sums = RangeSums::new();
    let mut after: Option<ContentHash> = None;
    loop {
        let page = maps.originals_page(after, PAGE).await.unwrap();
        assert!(page.len() <= PAGE);
        let Some((last, _)) = page.last() else {
            return sums;
        };
        assert!(
            page.windows(2).all(|w| w[0].0 < w[1].0),
            "a page is in hash order"
        );
        assert!(
            after.is_none_or(|a| page[0].0 > a),
            "a page starts past `after`"
        );
        after = Some(*last);
        for (hash, info) in page {
            let mut urls: Vec<String> = maps
                .urls_of(&hash)
                .await
                .unwrap()
                .into_iter()
                .map(|(url, e)| format!("{url} {} {:?} {:?}", e.hash, e.etag, e.last_modified))
                .collect();
            urls.sort();
            let mut variants: Vec<Vec<u8>> = maps
                .variants_of(&hash)
                .await
                .unwrap()
                .into_iter()
                .map(|(k, _)| k.to_bytes())
                .collect();
            variants.sort();
            let state = format!(
                "{hash} {} {:?} {:?} {:?} {urls:?} {variants:?}",
                info.bytes, info.format, info.width, info.height
            );
            let digest = Sha256::digest(state.as_bytes());
            let mut first = [0u8; 8];
            first.copy_from_slice(&digest[..8]);
            let row = sums.entry(hash.as_bytes()[0]).or_default();
            row.0 += 1;
            row.1 = row.1.wrapping_add(u64::from_le_bytes(first));
        }
    }
}

fn hash_of(n: u32) -> ContentHash {
    ContentHash::of(format!("checksum original {n}").as_bytes())
}

fn url_of(n: u32, i: u32) -> String {
    format!("https://merchant.example/{n}/{i}.png")
}

const SPECS: [&str; 2] = ["format=webp&w=400", "fit=cover&format=webp&h=300&w=300"];

/// Original `n`, its `n % 3` URLs and `n % 2 + 1` variants, written to `maps`.
async fn give(maps: &dyn MapStore, n: u32) {
    let hash = hash_of(n);
    maps.add_original(&hash, &info(1000 + u64::from(n)))
        .await
        .unwrap();
    for i in 0..n % 3 {
        maps.put_url(&url_of(n, i), &url_entry(hash)).await.unwrap();
    }
    for spec in &SPECS[..(n % 2 + 1) as usize] {
        maps.put_variant(&key(hash, spec), &image(maps, b"variant bytes"))
            .await
            .unwrap();
    }
}

/// The same store's content given twice: to `a` in order, to `b` backwards with detours. Then
/// the sums agree, range by range; changed on `b`, exactly the changed ranges differ.
async fn sums_agree(a: impl Fn() -> Opened, b: impl Fn() -> Opened) {
    let (a, b) = (a().await, b().await);
    for n in 0..ORIGINALS {
        give(a.as_ref(), n).await;
    }
    // `b`: a stray original with a URL and a variant, later removed; URL entries first
    // written naming the wrong original, then put right.
    let stray = ContentHash::of(b"checksum stray");
    b.add_original(&stray, &info(7)).await.unwrap();
    b.put_url("https://merchant.example/stray.png", &url_entry(stray))
        .await
        .unwrap();
    b.put_variant(&key(stray, SPECS[0]), &image(b.as_ref(), b"stray"))
        .await
        .unwrap();
    for n in (0..ORIGINALS).rev() {
        for i in 0..n % 3 {
            b.put_url(&url_of(n, i), &url_entry(stray)).await.unwrap();
        }
        give(b.as_ref(), n).await;
    }
    b.remove_url("https://merchant.example/stray.png")
        .await
        .unwrap();
    b.remove_variants(&[key(stray, SPECS[0])]).await.unwrap();
    b.remove_original(&stray).await.unwrap();

    let (sums_a, sums_b) = (range_sums(a.as_ref()).await, range_sums(b.as_ref()).await);
    assert_eq!(
        sums_a.values().map(|(rows, _)| rows).sum::<u64>(),
        u64::from(ORIGINALS)
    );
    assert_eq!(sums_a, sums_b, "the same content sums alike in every range");

    // One URL entry's validator changed, one variant removed: their ranges differ, no other.
    let (url_changed, variant_gone) = (4u32, 7u32);
    let mut entry = url_entry(hash_of(url_changed));
    entry.etag = Some("\"changed\"".into());
    b.put_url(&url_of(url_changed, 0), &entry).await.unwrap();
    b.remove_variants(&[key(hash_of(variant_gone), SPECS[0])])
        .await
        .unwrap();
    let sums_b = range_sums(b.as_ref()).await;
    let differing: Vec<u8> = sums_a
        .keys()
        .chain(sums_b.keys())
        .copied()
        .filter(|r| sums_a.get(r) != sums_b.get(r))
        .collect::<std::collections::BTreeSet<u8>>()
        .into_iter()
        .collect();
    let mut expected: Vec<u8> = [url_changed, variant_gone]
        .iter()
        .map(|n| hash_of(*n).as_bytes()[0])
        .collect();
    expected.sort();
    expected.dedup();
    assert_eq!(differing, expected, "exactly the changed ranges differ");
}

#[tokio::test(flavor = "multi_thread")]
async fn redb_stores_with_the_same_content_sum_alike_by_range() {
    sums_agree(
        redb_in(Arc::new(tempfile::tempdir().unwrap())),
        redb_in(Arc::new(tempfile::tempdir().unwrap())),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_stores_with_the_same_content_sum_alike_by_range_and_as_redb_does() {
    let Some(server) = common::postgres::PgServer::or_skip("postgres_stores_sum_alike") else {
        return;
    };
    sums_agree(
        postgres_at(server.database("checksums_a")),
        postgres_at(server.database("checksums_b")),
    )
    .await;
    // Across backends, as a migration compares them.
    sums_agree(
        redb_in(Arc::new(tempfile::tempdir().unwrap())),
        postgres_at(server.database("checksums_c")),
    )
    .await;
}
