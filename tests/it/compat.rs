//! A data dir written by an earlier release opens and serves unchanged: its URL map entries,
//! originals, variants and cached errors are read back as they were written, with no download
//! and no processing. `testdata/datadir-v0.1` was written by the release before the maps moved
//! behind `MapStore` (`tests/fixtures/make-datadir.sh` with that release's binary); its
//! `manifest.json` holds what it served then.
//!
//! A change to a stored encoding must come with its migration, and this test keeps passing.

use crate::common;

use std::path::{Path, PathBuf};

use common::{header, spawn_app_with, TestApp};
use imgcas::config::StorageBackend;
use serde_json::Value;
use sha2::{Digest, Sha256};

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A copy of the fixture data dir (tests write to it), and its manifest.
fn fixture_copy() -> (tempfile::TempDir, Value) {
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/datadir-v0.1");
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("manifest.json")).unwrap())
            .unwrap();
    let data = tempfile::tempdir().unwrap();
    copy_dir(&fixture, data.path());
    (data, manifest)
}

/// The app on a copy of the fixture (on the filesystem store), configured further by
/// `tweak`, and the fixture's manifest.
async fn app_on_the_fixture(
    tweak: impl FnOnce(&mut imgcas::config::Config),
) -> (TestApp, Value, tempfile::TempDir) {
    let (data, manifest) = fixture_copy();
    let dir = data.path().to_path_buf();
    let app = spawn_app_with(move |c| {
        c.data_dir = dir;
        c.storage.backend = StorageBackend::Fs;
        tweak(c);
    })
    .await;
    (app, manifest, data)
}

#[tokio::test]
async fn a_data_dir_from_the_previous_release_serves_unchanged() {
    let (app, manifest, _data) = app_on_the_fixture(|c| {
        // The origin that served the URL is long gone: its mapping must be used as stored.
        c.fetch.revalidate_after = std::time::Duration::from_secs(100 * 365 * 86_400);
    })
    .await;
    serves_what_the_fixture_served(&app, &manifest).await;
}

/// What the fixture's node served, served again by `app` as stored: no download, no
/// processing.
async fn serves_what_the_fixture_served(app: &TestApp, manifest: &Value) {
    let text = |v: &Value| v.as_str().unwrap().to_string();

    // The uploaded original, by hash: its variant is a stored hit, byte for byte.
    let upload = text(&manifest["upload_hash"]);
    let query = text(&manifest["upload_variant"]["query"]);
    let get = |path: String| app.client.get(app.url(&path)).send();
    let r = get(format!("/v1/image/{upload}?{query}")).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-imgcas-cache"), Some("hit"));
    let body = r.bytes().await.unwrap();
    assert_eq!(
        sha256_hex(&body),
        text(&manifest["upload_variant"]["sha256"])
    );

    // Its bytes and facts.
    let r = get(format!("/v1/originals/{upload}")).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(sha256_hex(&r.bytes().await.unwrap()), upload);
    let r = get(format!("/v1/originals/{upload}/info")).await.unwrap();
    assert_eq!(r.status(), 200);
    let info: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(info["format"], "jpeg");
    assert!(info["first_seen"].as_str().is_some());

    // The downloaded URL: the URL map still points at its original, whose variant is stored.
    let url = text(&manifest["url"]);
    let query = text(&manifest["url_variant"]["query"]);
    let r = app.image_by_url(&url, &query).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-imgcas-cache"), Some("hit"));
    assert_eq!(
        header(&r, "x-imgcas-source-hash"),
        Some(text(&manifest["url_hash"]).as_str())
    );
    let body = r.bytes().await.unwrap();
    assert_eq!(sha256_hex(&body), text(&manifest["url_variant"]["sha256"]));

    // The cached processing error is answered from the variants map.
    let r = app
        .image_by_url(
            &text(&manifest["error_url"]),
            &text(&manifest["error_query"]),
        )
        .await;
    assert_eq!(
        u64::from(r.status().as_u16()),
        manifest["error_status"].as_u64().unwrap()
    );
    assert_eq!(header(&r, "x-imgcas-cache"), Some("error-hit"));

    assert_eq!(app.downloads(), 0, "nothing downloaded");
    assert_eq!(app.processing_runs(), 0, "nothing processed");
}

/// A node on the shared maps and bucket alone (an empty data dir of its own), whose origins
/// are long gone: mappings are used as stored.
async fn cluster_node(
    bucket: &std::sync::Arc<common::s3::S3Target>,
    maps_url: String,
) -> (TestApp, tempfile::TempDir) {
    let empty = tempfile::tempdir().unwrap();
    let dir = empty.path().to_path_buf();
    let shared = bucket.clone();
    let app = spawn_app_with(move |c| {
        c.data_dir = dir;
        shared.configure(c);
        c.maps.url = Some(maps_url);
        c.fetch.revalidate_after = std::time::Duration::from_secs(100 * 365 * 86_400);
    })
    .await;
    (app, empty)
}

/// `imgcas maps copy --to postgres://…` moves the fixture's node into a cluster: its maps
/// into PostgreSQL, its originals and variant bytes into the bucket. A second run copies
/// nothing again; a node on the shared maps and bucket alone (an empty data dir) then
/// serves everything the fixture's node served, as stored. `--to redb://<dir>` then moves
/// the cluster's maps back into a node's own data dir, which serves it all again.
#[tokio::test(flavor = "multi_thread")]
async fn maps_copy_moves_a_node_into_a_cluster() {
    let Some(pg) = common::postgres::PgServer::or_skip("maps_copy") else {
        return;
    };
    let (data, manifest) = fixture_copy();
    let bucket = std::sync::Arc::new(common::s3::S3Target::new().await);
    let maps_url = pg.database("maps_copy");
    let args = ["maps", "copy", "--to", maps_url.as_str()];

    let (code, out) = common::binary::run(data.path(), &[], &args);
    assert_eq!(code, 2, "refused without a bucket to copy into: {out}");
    let env = bucket.env();
    let (code, out) = common::binary::run(data.path(), &env, &args);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("originals  3 copied, 0 already there, 0 missing"),
        "{out}"
    );
    assert!(out.contains("variants   3 copied"), "{out}");
    let keys = bucket.keys().await;
    assert_eq!(
        keys.iter().filter(|k| k.starts_with("originals/")).count(),
        3
    );
    assert_eq!(
        keys.iter().filter(|k| k.starts_with("variants/")).count(),
        2,
        "{keys:?}"
    );

    // Idempotent: a second run finds everything there.
    let (code, out) = common::binary::run(data.path(), &env, &args);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("originals  0 copied, 3 already there"),
        "{out}"
    );
    assert!(
        out.contains("variants   0 copied, 3 already there"),
        "{out}"
    );

    let (app, _empty) = cluster_node(&bucket, maps_url.clone()).await;
    serves_what_the_fixture_served(&app, &manifest).await;
    drop(app);

    // And back: the cluster's maps into a node's own data dir (`redb://<dir>`), its bytes
    // out of the bucket into that directory; the node, on the embedded default alone,
    // serves everything as stored.
    let node = tempfile::tempdir().unwrap();
    let cluster = tempfile::tempdir().unwrap();
    let mut env = bucket.env();
    env.push(("IMGCAS_MAPS_URL", maps_url.clone()));
    let to = format!("redb://{}", node.path().display());
    let args = ["maps", "copy", "--to", to.as_str()];
    let (code, out) = common::binary::run(cluster.path(), &env, &args);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("originals  3 copied, 0 already there, 0 missing"),
        "{out}"
    );
    assert!(out.contains("variants   3 copied"), "{out}");
    let copied = |dir: &str| {
        std::fs::read_dir(node.path().join(dir))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    assert!(copied("originals") > 0, "originals in the node's directory");
    // The copy into the maps being copied is refused.
    let (code, out) =
        common::binary::run(cluster.path(), &env, &["maps", "copy", "--to", &maps_url]);
    assert_eq!(code, 2, "{out}");

    let dir = node.path().to_path_buf();
    let app = spawn_app_with(move |c| {
        c.data_dir = dir;
        c.storage.backend = StorageBackend::Fs;
        c.fetch.revalidate_after = std::time::Duration::from_secs(100 * 365 * 86_400);
    })
    .await;
    serves_what_the_fixture_served(&app, &manifest).await;
}

/// Variants written before the byte budget existed count against it from the first start:
/// under a budget smaller than any of them, the first upkeep evicts them all, and a request
/// makes its variant again.
#[tokio::test]
async fn variants_of_the_previous_release_count_against_the_budget() {
    let (app, manifest, _data) = app_on_the_fixture(|c| {
        c.limits.variants_max_bytes = 10;
        c.limits.hot_cache_bytes = 0;
    })
    .await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while app.stats().variants_evicted < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the stored variants were not evicted: {:?}",
            app.stats()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let upload = manifest["upload_hash"].as_str().unwrap();
    let query = manifest["upload_variant"]["query"].as_str().unwrap();
    let r = app.get(&format!("/v1/image/{upload}?{query}")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        header(&r, "x-imgcas-cache"),
        Some("miss"),
        "evicted, made again"
    );
    let body = r.bytes().await.unwrap();
    assert_eq!(
        sha256_hex(&body),
        manifest["upload_variant"]["sha256"].as_str().unwrap()
    );
}

/// Originals stored before fingerprints existed get theirs from `imgcas verify
/// --fingerprint` (once: a second run finds none left), and the data dir still serves.
#[tokio::test]
async fn originals_of_the_previous_release_are_backfilled() {
    let (data, manifest) = fixture_copy();
    let (code, out) = common::binary::run(data.path(), &[], &["verify", "--fingerprint"]);
    assert_eq!(code, 0, "{out}");
    // Two pictures and a line of text (fingerprinted as no picture, never again).
    assert!(out.contains("3 originals fingerprinted"), "{out}");
    let (code, out) = common::binary::run(data.path(), &[], &["verify", "--fingerprint"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("0 originals fingerprinted"), "{out}");

    let dir = data.path().to_path_buf();
    let app = spawn_app_with(move |c| {
        c.data_dir = dir;
        c.storage.backend = StorageBackend::Fs;
        c.fetch.revalidate_after = std::time::Duration::from_secs(100 * 365 * 86_400);
    })
    .await;
    serves_what_the_fixture_served(&app, &manifest).await;
    let jpeg = sha256_hex(
        &std::fs::read(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("testdata/exif-orientation/Landscape_6.jpg"),
        )
        .unwrap(),
    );
    let info = common::json(app.get(&format!("/v1/originals/{jpeg}/info")).await).await;
    let fingerprint = info["fingerprint"].as_str().expect("a fingerprint");
    assert_eq!(fingerprint.len(), 16, "{info}");
    assert_eq!(info["near_duplicates"], 0, "{info}");
}

/// The server backfills by itself, in the background, at start.
#[tokio::test]
async fn the_server_backfills_fingerprints_at_start() {
    let (app, _manifest, data) = app_on_the_fixture(|_| {}).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while app.stats().fingerprints_computed < 3 {
        assert!(std::time::Instant::now() < deadline, "no backfill");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    app.stop().await;
    let (code, out) = common::binary::run(data.path(), &[], &["verify", "--fingerprint"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("0 originals fingerprinted"), "{out}");
}

/// A takedown on a data dir of the previous release (offline, with `imgcas purge`) finds the
/// URL entries that release wrote, through the hash → URLs index this release builds at its
/// first open; verify is clean after, and a server on the data dir refuses the content and
/// serves the rest.
#[tokio::test]
async fn a_takedown_finds_the_url_entries_the_previous_release_wrote() {
    let (data, manifest) = fixture_copy();
    let url_hash = manifest["url_hash"].as_str().unwrap().to_string();
    let (code, out) = common::binary::run(data.path(), &[], &["purge", &url_hash]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!(
            "taken down {url_hash}: 1 variants removed, 1 URL entries forgotten"
        )),
        "{out}"
    );
    let (code, out) = common::binary::run(data.path(), &[], &["verify"]);
    assert_eq!(code, 0, "{out}");

    let dir = data.path().to_path_buf();
    let app = spawn_app_with(move |c| {
        c.data_dir = dir;
        c.storage.backend = StorageBackend::Fs;
    })
    .await;
    let query = manifest["url_variant"]["query"].as_str().unwrap();
    let r = app.get(&format!("/v1/image/{url_hash}?{query}")).await;
    assert_eq!(r.status(), 451);
    let upload = manifest["upload_hash"].as_str().unwrap();
    let query = manifest["upload_variant"]["query"].as_str().unwrap();
    let r = app.get(&format!("/v1/image/{upload}?{query}")).await;
    assert_eq!(header(&r, "x-imgcas-cache"), Some("hit"));
}

/// `maps copy` carries the node's takedowns into the cluster and copies nothing they name:
/// the taken-down original, its variant and its bytes stay behind, and a cluster node
/// refuses the content.
#[tokio::test(flavor = "multi_thread")]
async fn maps_copy_carries_takedowns_and_copies_nothing_taken_down() {
    let Some(pg) = common::postgres::PgServer::or_skip("maps_copy_takedowns") else {
        return;
    };
    let (data, manifest) = fixture_copy();
    let url_hash = manifest["url_hash"].as_str().unwrap().to_string();
    let (code, out) = common::binary::run(data.path(), &[], &["purge", &url_hash]);
    assert_eq!(code, 0, "{out}");
    let bucket = std::sync::Arc::new(common::s3::S3Target::new().await);
    let maps_url = pg.database("maps_copy_takedowns");
    let (code, out) = common::binary::run(
        data.path(),
        &bucket.env(),
        &["maps", "copy", "--to", maps_url.as_str()],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("originals  2 copied"), "{out}");
    let keys = bucket.keys().await;
    assert!(!keys.iter().any(|k| k.contains(&url_hash)), "{keys:?}");
    let listed = pg
        .psql(
            "maps_copy_takedowns",
            &format!(
                "SELECT count(*) FROM imgcas_takedowns WHERE hash = decode('{url_hash}', 'hex')"
            ),
        )
        .unwrap();
    assert_eq!(listed, "1");

    let (app, _empty) = cluster_node(&bucket, maps_url).await;
    let r = app.get(&format!("/v1/image/{url_hash}?w=10")).await;
    assert_eq!(r.status(), 451);
}

/// Originals stored by the previous release get their facts (backfilled at start, or
/// computed on demand when asked first), once: asking again computes nothing.
#[tokio::test]
async fn originals_of_the_previous_release_get_their_facts_once() {
    let (app, manifest, _data) = app_on_the_fixture(|_| {}).await;
    let upload = manifest["upload_hash"].as_str().unwrap();
    let info: Value = common::json(app.get(&format!("/v1/originals/{upload}/info")).await).await;
    assert_eq!(info["blurhash"].as_str().map(str::len), Some(28), "{info}");
    assert!(info["dominant_color"].as_str().is_some(), "{info}");
    // The backfill gets to all three originals (the one asked for first is not done twice).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while app.stats().facts_computed < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "backfill did not finish"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let again: Value = common::json(app.get(&format!("/v1/originals/{upload}/info")).await).await;
    assert_eq!(again, info);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(app.stats().facts_computed, 3);
}
