//! The long walks over the store (issue 69), through running nodes: the facts backfill a node
//! runs at start takes up an interrupted run from the last page it wrote down (the others it
//! leaves to the next run), reads nothing but one empty page on a store whose facts are
//! current, shows where it stands in `/metrics`, and in a cluster runs on one node at a time
//! under its lease, each original's facts computed once whichever node starts first.

use crate::common::{self, TestApp};

use std::sync::Arc;
use std::time::{Duration, Instant};

use imgcas::config::StorageBackend;
use imgcas::hash::ContentHash;
use imgcas::maps::{
    MapStore, OriginalFacts, Originals, PostgresMaps, RedbMaps, VersionCursor, WalkLog,
    WalkPosition,
};
use imgcas_processors::FACTS_VERSION;

/// Uploads `n` distinct pictures; their hashes, in hash order.
async fn upload(app: &TestApp, n: u8) -> Vec<ContentHash> {
    let mut hashes = Vec::new();
    for seed in 0..n {
        let r = app.upload(common::png(24, 16, seed.wrapping_mul(37))).await;
        assert!(r.status().is_success(), "{}", r.status());
        let body = common::json(r).await;
        hashes.push(body["hash"].as_str().unwrap().parse().unwrap());
    }
    hashes.sort();
    hashes
}

/// Makes the facts of `hashes` an older version's: the backfill's to compute again.
async fn age_facts(maps: &dyn MapStore, hashes: &[ContentHash]) {
    for hash in hashes {
        let older = OriginalFacts {
            version: FACTS_VERSION - 1,
            picture: None,
        };
        maps.put_facts(hash, &older).await.unwrap();
    }
}

/// A node on the embedded maps and a directory, whatever store the suite runs on (the test
/// opens the maps' file itself while the node is stopped).
fn embedded(c: &mut imgcas::config::Config) {
    c.storage.backend = StorageBackend::Fs;
    c.maps.url = None;
}

/// The facts backfill's position, as a running node reads it from its maps.
async fn position(app: &TestApp) -> Option<WalkPosition> {
    app.pipeline
        .walk_positions()
        .await
        .unwrap()
        .into_iter()
        .find(|(name, _)| name == "facts_backfill")
        .map(|(_, p)| p)
}

/// An interrupted run is taken up from its last page: a node starting on a position written
/// half way computes the facts after it (and counts the rows the run had), leaving those
/// before it to the next run, which starts over and finds only them.
#[tokio::test(flavor = "multi_thread")]
async fn a_walk_resumes_from_the_last_page_it_wrote_down() {
    let storage = common::Restartable::new().await;
    let app = storage.spawn(embedded).await;
    let hashes = upload(&app, 6).await;
    app.stop().await;
    // Offline, on the embedded maps: every original's facts aged, and a run written down as
    // stopped after the third (in the index's order: one version, so hash order).
    {
        let maps = RedbMaps::open(storage.path().to_path_buf()).await.unwrap();
        age_facts(&maps, &hashes).await;
        let stopped = WalkPosition {
            cursor: Some(
                serde_json::to_string(&VersionCursor {
                    version: FACTS_VERSION - 1,
                    hash: hashes[2],
                })
                .unwrap(),
            ),
            rows: 3,
            node: "an earlier run".into(),
            started_ms: 1,
            updated_ms: 2,
            finished_ms: None,
        };
        maps.put_walk_position("facts_backfill", &stopped)
            .await
            .unwrap();
        maps.flush().await.unwrap();
    }
    let app = storage.spawn(embedded).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        match position(&app).await {
            Some(p) if p.finished_ms.is_some() => break p,
            _ => {}
        }
        assert!(Instant::now() < deadline, "the resumed walk did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        done.rows, 6,
        "three rows of the earlier run and three of this one"
    );
    assert_eq!(done.started_ms, 1, "the same run, taken up");
    assert_eq!(
        app.stats().facts_computed,
        3,
        "only those after the position"
    );
    let scrape = app.metrics().await;
    assert_eq!(
        common::metric_value(&scrape, "imgcas_walk_rows", &[("walk", "facts_backfill")]),
        6.0
    );
    assert_eq!(
        common::metric_value(
            &scrape,
            "imgcas_walk_running",
            &[("walk", "facts_backfill")]
        ),
        0.0
    );
    app.stop().await;

    // The next start begins a run of its own: the three left behind, and nothing else.
    let app = storage.spawn(embedded).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let again = loop {
        match position(&app).await {
            Some(p) if p.finished_ms.is_some() && p.started_ms != 1 => break p,
            _ => {}
        }
        assert!(Instant::now() < deadline, "the next walk did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(again.rows, 3);
    assert_eq!(app.stats().facts_computed, 3);
    app.stop().await;

    // And a start on a store whose facts are all current reads one empty page.
    let app = storage.spawn(embedded).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let third = loop {
        match position(&app).await {
            Some(p) if p.finished_ms.is_some() && p.started_ms != again.started_ms => break p,
            _ => {}
        }
        assert!(Instant::now() < deadline, "the third walk did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!((third.rows, app.stats().facts_computed), (0, 0));
    app.stop().await;
}

/// Three nodes on one database start together over originals whose facts are an older
/// version's: one runs the walk under its lease, the others wait for it, and every
/// original's facts are computed once in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_share_one_walk_by_lease() {
    let Some(pg) = common::postgres::PgServer::or_skip("three_nodes_share_one_walk_by_lease")
    else {
        return;
    };
    let bucket = Arc::new(common::s3::S3Target::new().await);
    let maps_url = pg.database("walk_lease");
    let node = |name: &'static str| {
        common::cluster_node(&bucket, &maps_url, name, |c| {
            c.cluster.claim_ttl = Duration::from_secs(2);
        })
    };
    let (first, _dir) = node("first").await;
    let hashes = upload(&first, 8).await;
    first.stop().await;
    let maps = PostgresMaps::open(&maps_url).await.unwrap();
    age_facts(&maps, &hashes).await;
    maps.put_walk_position("facts_backfill", &WalkPosition::default())
        .await
        .unwrap();

    let ((a, _da), (b, _db), (c, _dc)) = tokio::join!(node("a"), node("b"), node("c"));
    let nodes = [&a, &b, &c];
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let p = maps.walk_position("facts_backfill").await.unwrap();
        if let Some(p) = p.filter(|p| p.finished_ms.is_some()) {
            break p;
        }
        assert!(Instant::now() < deadline, "the walk did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(["a", "b", "c"].contains(&done.node.as_str()), "{done:?}");
    assert_eq!(done.rows, 8);
    // The others take the lease in their turn and find nothing left.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let computed: u64 = nodes.iter().map(|n| n.stats().facts_computed).sum();
    assert_eq!(computed, 8, "each original's facts once in the cluster");
    let runner = nodes
        .iter()
        .find(|n| n.stats().facts_computed > 0)
        .expect("a node ran the walk");
    assert_eq!(runner.stats().facts_computed, 8, "on one node");
    assert!(maps
        .lacking_facts(FACTS_VERSION, None, 10)
        .await
        .unwrap()
        .is_empty());
    for n in [a, b, c] {
        n.stop().await;
    }
}
