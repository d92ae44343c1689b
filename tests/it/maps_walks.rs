//! The maps' walks, held on every backend (issue 69): each map is read in pages by key range
//! (`urls_page`, `originals_page`, `variant_keys_page`, `fingerprints_page`), a walk resumes
//! from the last key of a page (after a restart too) and sees every row exactly once, and the
//! facts backfill's index (`lacking_facts`) names exactly the originals without current facts,
//! so that a store whose facts are current reads nothing at start. Files and databases written
//! before the index get it (redb at its first open; PostgreSQL by its migration).
//!
//! The helpers at the top read a whole map through its pages, in pages of 2 so that every
//! contract that uses them walks across page boundaries.

use crate::common;
use crate::maps_contract::{postgres_at, redb_in, Opened};

use std::collections::BTreeSet;
use std::sync::Arc;

use imgcas::hash::ContentHash;
use imgcas::maps::{
    now_ms, Fingerprint, Fingerprinted, Fingerprints, MapStore, OriginalFacts, OriginalInfo,
    Originals, PostgresMaps, RedbMaps, UrlEntry, UrlMap, VariantKey, VariantRow, Variants,
    VersionCursor, WalkPosition,
};
use imgcas_processors::{ProcessFailure, FACTS_VERSION, FINGERPRINT_VERSION};

/// Rows per page the helpers ask for: small, so that walks cross page boundaries.
const SMALL_PAGE: usize = 2;

/// Every URL entry, through pages.
pub(crate) async fn all_urls(maps: &dyn MapStore) -> Vec<(String, UrlEntry)> {
    let mut out: Vec<(String, UrlEntry)> = Vec::new();
    loop {
        let after = out.last().map(|(u, _)| u.as_str());
        let page = maps.urls_page(after, SMALL_PAGE).await.unwrap();
        assert!(page.len() <= SMALL_PAGE);
        if page.is_empty() {
            return out;
        }
        out.extend(page);
    }
}

/// Every indexed hash, through pages (in hash order).
pub(crate) async fn all_hashes(maps: &dyn MapStore) -> Vec<ContentHash> {
    let mut out: Vec<ContentHash> = Vec::new();
    loop {
        let page = maps
            .originals_page(out.last().copied(), SMALL_PAGE)
            .await
            .unwrap();
        assert!(page.len() <= SMALL_PAGE);
        if page.is_empty() {
            return out;
        }
        out.extend(page.into_iter().map(|(h, _)| h));
    }
}

/// Every variant key, through pages.
pub(crate) async fn all_keys(maps: &dyn MapStore) -> Vec<VariantKey> {
    let mut out: Vec<VariantKey> = Vec::new();
    loop {
        let page = maps
            .variant_keys_page(out.last(), SMALL_PAGE)
            .await
            .unwrap();
        assert!(page.len() <= SMALL_PAGE);
        if page.is_empty() {
            return out;
        }
        out.extend(page);
    }
}

/// Every current fingerprint of a picture, through pages (in hash order).
pub(crate) async fn all_fingerprints(maps: &dyn MapStore) -> Vec<(ContentHash, Fingerprint)> {
    let mut out: Vec<(ContentHash, Fingerprint)> = Vec::new();
    loop {
        let after = out.last().map(|(h, _)| *h);
        let page = maps.fingerprints_page(after, SMALL_PAGE).await.unwrap();
        assert!(page.len() <= SMALL_PAGE);
        if page.is_empty() {
            return out;
        }
        out.extend(page);
    }
}

/// Every original lacking facts of `version`, through pages of `limit`.
async fn all_lacking(maps: &dyn MapStore, version: u32, limit: usize) -> Vec<VersionCursor> {
    let mut out: Vec<VersionCursor> = Vec::new();
    loop {
        let page = maps
            .lacking_facts(version, out.last().copied(), limit)
            .await
            .unwrap();
        assert!(page.len() <= limit);
        if page.is_empty() {
            return out;
        }
        out.extend(page);
    }
}

fn info(facts: Option<u32>) -> OriginalInfo {
    OriginalInfo {
        format: Some(imgcas_processors::SourceFormat::Jpeg),
        width: Some(8),
        height: Some(8),
        upright: None,
        has_alpha: false,
        bytes: 100,
        first_seen_ms: now_ms(),
        focus: None,
        facts: facts.map(|version| OriginalFacts {
            version,
            picture: None,
        }),
    }
}

fn entry(hash: ContentHash) -> UrlEntry {
    UrlEntry {
        hash,
        etag: None,
        last_modified: None,
        checked_at_ms: 1,
        requested_at_ms: 0,
        canonical: None,
    }
}

fn failed() -> VariantRow {
    VariantRow::Failed {
        kind: ProcessFailure::ALL[0],
        message: "no".into(),
    }
}

/// Paging, resuming and the facts index, on the store `open` opens afresh at each call.
async fn walks(open: impl Fn() -> Opened) {
    let maps = open().await;
    assert!(all_urls(maps.as_ref()).await.is_empty());
    assert!(all_hashes(maps.as_ref()).await.is_empty());
    assert!(all_keys(maps.as_ref()).await.is_empty());
    assert!(all_fingerprints(maps.as_ref()).await.is_empty());
    assert!(all_lacking(maps.as_ref(), FACTS_VERSION, 3)
        .await
        .is_empty());

    // The walks' positions: none, then each as written, replaced by a later write, and kept
    // across a restart (checked below, after the reopen).
    assert_eq!(maps.walk_position("facts_backfill").await.unwrap(), None);
    assert!(maps.walk_positions().await.unwrap().is_empty());
    let running = WalkPosition {
        cursor: Some("{\"version\":3,\"hash\":\"ab\"}".into()),
        rows: 1000,
        node: "node-1".into(),
        started_ms: 10,
        updated_ms: 20,
        finished_ms: None,
    };
    maps.put_walk_position("facts_backfill", &WalkPosition::default())
        .await
        .unwrap();
    maps.put_walk_position("facts_backfill", &running)
        .await
        .unwrap();
    let finished = WalkPosition {
        finished_ms: Some(30),
        ..running.clone()
    };
    maps.put_walk_position("fingerprint_backfill", &finished)
        .await
        .unwrap();

    // 21 originals: a third without facts, a third with current facts, a third with facts
    // of an older version.
    let hashes: Vec<ContentHash> = (0..21u32)
        .map(|n| ContentHash::of(format!("walk-{n}").as_bytes()))
        .collect();
    for (n, hash) in hashes.iter().enumerate() {
        let facts = match n % 3 {
            0 => None,
            1 => Some(FACTS_VERSION),
            _ => Some(FACTS_VERSION - 1),
        };
        maps.add_original(hash, &info(facts)).await.unwrap();
        // Three URLs and three variants of each; a fingerprint of every other one.
        for u in 0..3 {
            let url = format!("http://origin.test/{n}/{u}?q=é");
            maps.put_url(&url, &entry(*hash)).await.unwrap();
            let key = VariantKey {
                hash: *hash,
                canonical_spec: format!("w={}", 100 + u),
                processor_version: 11 + u,
            };
            maps.put_variant(&key, &failed()).await.unwrap();
        }
        let fingerprint = match n % 2 {
            0 => Fingerprinted::Picture(Fingerprint {
                phash: n as u64,
                block_hash: 0,
                colour: 0,
                width: 8,
                height: 8,
            }),
            _ => Fingerprinted::NotAPicture,
        };
        maps.put_fingerprint(hash, &fingerprint).await.unwrap();
    }

    // Every row once, originals and fingerprints in hash order.
    let mut sorted = hashes.clone();
    sorted.sort();
    assert_eq!(all_hashes(maps.as_ref()).await, sorted);
    let urls = all_urls(maps.as_ref()).await;
    let distinct: BTreeSet<&str> = urls.iter().map(|(u, _)| u.as_str()).collect();
    assert_eq!((urls.len(), distinct.len()), (63, 63));
    let keys = all_keys(maps.as_ref()).await;
    let distinct: BTreeSet<Vec<u8>> = keys.iter().map(VariantKey::to_bytes).collect();
    assert_eq!((keys.len(), distinct.len()), (63, 63));
    // One original's variants sit together, originals in hash order.
    let runs: Vec<ContentHash> = keys.iter().map(|k| k.hash).collect();
    let mut deduped = runs.clone();
    deduped.dedup();
    assert_eq!(
        deduped, sorted,
        "variants grouped by original, in hash order"
    );
    let pictures: Vec<ContentHash> = all_fingerprints(maps.as_ref())
        .await
        .into_iter()
        .map(|(h, _)| h)
        .collect();
    let mut expected: Vec<ContentHash> = hashes.iter().step_by(2).copied().collect();
    expected.sort();
    assert_eq!(pictures, expected, "pictures only, in hash order");

    // A walk resumes from the last key of a page: the next page is exactly what follows,
    // after a restart too.
    let page = maps.urls_page(Some(urls[9].0.as_str()), 5).await.unwrap();
    assert_eq!(page, urls[10..15].to_vec());
    let page = maps.variant_keys_page(Some(&keys[40]), 4).await.unwrap();
    assert_eq!(page, keys[41..45].to_vec());
    drop(maps);
    let maps = open().await;
    assert_eq!(
        maps.walk_positions().await.unwrap(),
        vec![
            ("facts_backfill".to_string(), running.clone()),
            ("fingerprint_backfill".to_string(), finished.clone())
        ]
    );
    assert_eq!(
        maps.walk_position("facts_backfill").await.unwrap(),
        Some(running)
    );
    let page = maps.originals_page(Some(sorted[6]), 3).await.unwrap();
    let got: Vec<ContentHash> = page.iter().map(|(h, _)| *h).collect();
    assert_eq!(got, sorted[7..10].to_vec());
    assert_eq!(page[0].1, maps.original(&sorted[7]).await.unwrap().unwrap());
    assert_eq!(
        maps.urls_page(Some(urls[62].0.as_str()), 5).await.unwrap(),
        vec![]
    );

    // Rows removed ahead of a walk are not seen; the rest still once.
    maps.remove_url(&urls[20].0).await.unwrap();
    let rest = {
        let mut out = Vec::new();
        let mut after = urls[9].0.clone();
        loop {
            let page = maps.urls_page(Some(after.as_str()), 4).await.unwrap();
            let Some((last, _)) = page.last() else { break };
            after = last.clone();
            out.extend(page.into_iter().map(|(u, _)| u));
        }
        out
    };
    let expected: Vec<String> = urls[10..]
        .iter()
        .filter(|(u, _)| *u != urls[20].0)
        .map(|(u, _)| u.clone())
        .collect();
    assert_eq!(rest, expected);

    // The facts index: exactly the originals without current facts, in (version, hash)
    // order, whatever the page size; a version above the current one counts as lacking.
    let newer = ContentHash::of(b"walk-newer");
    maps.add_original(&newer, &info(Some(FACTS_VERSION + 1)))
        .await
        .unwrap();
    let lacking = all_lacking(maps.as_ref(), FACTS_VERSION, 3).await;
    let mut expected: Vec<VersionCursor> = hashes
        .iter()
        .enumerate()
        .filter_map(|(n, hash)| match n % 3 {
            0 => Some(VersionCursor {
                version: 0,
                hash: *hash,
            }),
            2 => Some(VersionCursor {
                version: FACTS_VERSION - 1,
                hash: *hash,
            }),
            _ => None,
        })
        .chain([VersionCursor {
            version: FACTS_VERSION + 1,
            hash: newer,
        }])
        .collect();
    expected.sort();
    assert_eq!(lacking, expected);
    assert_eq!(
        all_lacking(maps.as_ref(), FACTS_VERSION, 100).await,
        expected
    );
    // Resumed from any cursor: what follows it.
    let from = maps
        .lacking_facts(FACTS_VERSION, Some(expected[5]), 4)
        .await
        .unwrap();
    assert_eq!(from, expected[6..10].to_vec());

    // Facts made current leave the index's lacking ranges; removal leaves the index.
    for cursor in &expected[..10] {
        let current = OriginalFacts {
            version: FACTS_VERSION,
            picture: None,
        };
        maps.put_facts(&cursor.hash, &current).await.unwrap();
    }
    maps.remove_original(&expected[10].hash).await.unwrap();
    drop(maps);
    let maps = open().await;
    assert_eq!(
        all_lacking(maps.as_ref(), FACTS_VERSION, 3).await,
        expected[11..].to_vec()
    );
    for cursor in &expected[11..] {
        let current = OriginalFacts {
            version: FACTS_VERSION,
            picture: None,
        };
        maps.put_facts(&cursor.hash, &current).await.unwrap();
    }
    assert_eq!(
        maps.lacking_facts(FACTS_VERSION, None, 1000).await.unwrap(),
        vec![],
        "a store whose facts are current lacks none"
    );
    // A release with a newer facts version finds every original lacking.
    assert_eq!(
        all_lacking(maps.as_ref(), FACTS_VERSION + 7, 5).await.len(),
        21
    );

    // The fingerprint index likewise: the originals fingerprinted above (pictures or not)
    // lack none; one stored without lacks one; one whose fingerprint was written before its
    // entry does not.
    let lacking_fingerprints = |version: u32| {
        let maps = maps.clone();
        async move {
            let mut out: Vec<VersionCursor> = Vec::new();
            loop {
                let page = maps
                    .lacking_fingerprints(version, out.last().copied(), 2)
                    .await
                    .unwrap();
                if page.is_empty() {
                    return out;
                }
                out.extend(page);
            }
        }
    };
    let lacking_one = lacking_fingerprints(FINGERPRINT_VERSION).await;
    assert_eq!(
        lacking_one,
        vec![VersionCursor {
            version: 0,
            hash: newer
        }],
        "only the original stored without one"
    );
    let early = ContentHash::of(b"walk-fingerprinted-first");
    maps.put_fingerprint(&early, &Fingerprinted::NotAPicture)
        .await
        .unwrap();
    maps.add_original(&early, &info(None)).await.unwrap();
    maps.put_fingerprint(&newer, &Fingerprinted::NotAPicture)
        .await
        .unwrap();
    drop(maps);
    let maps = open().await;
    assert_eq!(
        maps.lacking_fingerprints(FINGERPRINT_VERSION, None, 100)
            .await
            .unwrap(),
        vec![]
    );
    let all = maps
        .lacking_fingerprints(FINGERPRINT_VERSION + 1, None, 100)
        .await
        .unwrap();
    assert_eq!(all.len(), 22, "a newer release finds every one lacking");
    assert!(all.iter().all(|c| c.version == FINGERPRINT_VERSION));
}

#[tokio::test(flavor = "multi_thread")]
async fn redb_walks_in_pages_and_resumes() {
    walks(redb_in(Arc::new(tempfile::tempdir().unwrap()))).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_walks_in_pages_and_resumes() {
    let Some(server) = common::postgres::PgServer::or_skip("postgres_walks_in_pages_and_resumes")
    else {
        return;
    };
    walks(postgres_at(server.database("walks"))).await;
}

/// A redb file written before the index by facts version and the kept totals (the originals
/// table only, as that release wrote it) gets both at its first open: its originals without
/// current facts are found, the others not, and its totals are counted.
#[tokio::test]
async fn redb_builds_the_facts_index_of_an_older_file() {
    let dir = tempfile::tempdir().unwrap();
    let (bare, current) = (
        ContentHash::of(b"old-bare"),
        ContentHash::of(b"old-current"),
    );
    {
        let db = redb::Database::create(dir.path().join("imgcas.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let table: redb::TableDefinition<&[u8], &[u8]> =
                redb::TableDefinition::new("originals");
            let mut originals = txn.open_table(table).unwrap();
            for (hash, facts) in [(bare, None), (current, Some(FACTS_VERSION))] {
                let row = serde_json::to_vec(&info(facts)).unwrap();
                originals
                    .insert(hash.as_bytes().as_slice(), row.as_slice())
                    .unwrap();
            }
        }
        txn.commit().unwrap();
    }
    let maps = RedbMaps::open(dir.path().to_path_buf()).await.unwrap();
    assert_eq!(
        maps.lacking_facts(FACTS_VERSION, None, 10).await.unwrap(),
        vec![VersionCursor {
            version: 0,
            hash: bare
        }]
    );
    assert_eq!(all_hashes(&maps).await.len(), 2);
    assert_eq!(
        maps.lacking_fingerprints(FINGERPRINT_VERSION, None, 10)
            .await
            .unwrap()
            .len(),
        2,
        "neither has a fingerprint"
    );
    // And its totals counted at that open, as a walk counts them.
    let totals = maps.totals().await.unwrap();
    assert_eq!((totals.originals, totals.original_bytes), (2, 200));
    assert_eq!(totals, maps.recount_totals().await.unwrap());
}

/// A database at the schema before the indexes by version (9) is migrated into them: the
/// facts' version read from the facts kept, the fingerprint's from the fingerprints table.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_migrates_an_older_schema_into_the_version_indexes() {
    let Some(server) = common::postgres::PgServer::or_skip(
        "postgres_migrates_an_older_schema_into_the_version_indexes",
    ) else {
        return;
    };
    let url = server.database("older_schema");
    let (done, bare) = (ContentHash::of(b"mig-done"), ContentHash::of(b"mig-bare"));
    {
        let maps = PostgresMaps::open(&url).await.unwrap();
        maps.add_original(&done, &info(Some(FACTS_VERSION)))
            .await
            .unwrap();
        maps.put_fingerprint(&done, &Fingerprinted::NotAPicture)
            .await
            .unwrap();
        maps.add_original(&bare, &info(None)).await.unwrap();
        // URLs, for the totals the migration counts: two of one original's bytes, one
        // mapped to it as a near-duplicate, one of bytes not indexed.
        for (n, e) in [entry(done), entry(done), entry(bare)].iter().enumerate() {
            maps.put_url(&format!("http://origin.test/m{n}"), e)
                .await
                .unwrap();
        }
        let near = UrlEntry {
            canonical: Some(done),
            ..entry(ContentHash::of(b"mig-near"))
        };
        maps.put_url("http://origin.test/near", &near)
            .await
            .unwrap();
        let key = VariantKey {
            hash: done,
            canonical_spec: "w=10".into(),
            processor_version: 12,
        };
        maps.put_variant(&key, &failed()).await.unwrap();
        maps.put_url(
            "http://origin.test/gone",
            &entry(ContentHash::of(b"mig-gone")),
        )
        .await
        .unwrap();
    }
    server
        .psql(
            "older_schema",
            "ALTER TABLE imgcas_originals DROP COLUMN facts_version,
                 DROP COLUMN fingerprint_version, DROP COLUMN focus;
             DROP TABLE imgcas_walks;
             DROP TRIGGER imgcas_count_urls ON imgcas_urls;
             DROP TRIGGER imgcas_count_originals ON imgcas_originals;
             DROP TRIGGER imgcas_count_variants ON imgcas_variants;
             DROP FUNCTION imgcas_count_url_row(), imgcas_count_original_row(),
                 imgcas_count_url(bytea, boolean, bigint), imgcas_serving(bytea, bytea),
                 imgcas_url_row_bytes(text, text, text), imgcas_count_variant_row();
             DROP TABLE imgcas_url_counts, imgcas_totals;
             UPDATE imgcas_schema SET version = 9;",
        )
        .unwrap();
    let maps = PostgresMaps::open(&url).await.unwrap();
    let totals = maps.totals().await.unwrap();
    assert_eq!(totals, maps.recount_totals().await.unwrap());
    assert_eq!(
        (totals.originals, totals.urls, totals.pointed_bytes),
        (2, 5, 4 * 100)
    );
    assert_eq!(
        (totals.exact_saved_bytes, totals.near_saved_bytes),
        (100, 100)
    );
    let urls: u64 = ["m0", "m1", "m2", "near", "gone"]
        .iter()
        .map(|u| 2 * format!("http://origin.test/{u}").len() as u64 + 160)
        .sum();
    assert_eq!(maps.url_bytes().await.unwrap(), urls, "the URL map's bytes");
    let variants = maps.variant_totals().await.unwrap();
    assert_eq!((variants.images, variants.errors), (0, 1), "{variants:?}");
    let only_bare = vec![VersionCursor {
        version: 0,
        hash: bare,
    }];
    assert_eq!(
        maps.lacking_facts(FACTS_VERSION, None, 10).await.unwrap(),
        only_bare
    );
    assert_eq!(
        maps.lacking_fingerprints(FINGERPRINT_VERSION, None, 10)
            .await
            .unwrap(),
        only_bare
    );
}
