//! The online check of the store (issue 69, part 5), through the real binary and running
//! nodes: `imgcas verify --online` names the ranges whose checksums differ and what was
//! found in them (an original missing, one mismatched, a blob nothing names, one too young
//! to judge); `imgcas gc --online --apply` deletes the unreferenced blob older than the
//! grace and nothing else; a check killed with SIGKILL half way is taken up at the next
//! start from its last page, counting every row once; three nodes asked at once run it once,
//! under its lease.

use crate::common::binary::{run, start_with};
use crate::common::{self, s3};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use imgcas::blob::{key_for, BlobStore, S3BlobStore};
use imgcas::hash::ContentHash;
use imgcas::maps::{OriginalInfo, Originals, PostgresMaps, WalkLog};
use serde_json::Value;

const TOKEN: &str = "the-store-check-admin-token";

fn env(extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("IMGCAS_ADMIN_TOKEN", TOKEN.to_string()),
        ("IMGCAS_STORAGE", "fs".to_string()),
    ];
    env.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    env
}

/// A blob file written straight into the data dir's store, its write time `age` ago.
fn plant(dir: &Path, bytes: &[u8], age: Duration) -> (ContentHash, PathBuf) {
    let hash = ContentHash::of(bytes);
    let path = dir.join(key_for(&hash));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, bytes).unwrap();
    let file = std::fs::File::options().write(true).open(&path).unwrap();
    file.set_modified(SystemTime::now() - age).unwrap();
    (hash, path)
}

async fn upload(base: &str, bytes: Vec<u8>) -> ContentHash {
    let r = common::post_url_as(format!("{base}/v1/originals"), TOKEN, bytes).await;
    assert!(r.status().is_success(), "{}", r.status());
    common::json(r).await["hash"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// `GET /admin/check` as JSON.
async fn state(base: &str) -> serde_json::Value {
    let r = common::get_url_as(format!("{base}/admin/check"), TOKEN).await;
    assert_eq!(r.status(), 200);
    common::json(r).await["check"].clone()
}

fn range(hash: &ContentHash) -> String {
    format!("{:02x}", hash.as_bytes()[0])
}

#[tokio::test(flavor = "multi_thread")]
async fn the_online_check_names_what_differs_and_gc_deletes_only_the_unreferenced() {
    let dir = tempfile::tempdir().unwrap();
    let env = env(&[]);
    let server = start_with(dir.path(), None, &env);
    let base = server.base.clone();
    let mut uploaded = Vec::new();
    for seed in 0..5u8 {
        uploaded.push(upload(&base, common::png(20, 12, seed.wrapping_mul(41))).await);
    }
    // What the check must find: an original whose blob is gone, one whose blob is cut
    // short, a blob nothing names written two hours ago, and one written just now.
    let (missing, cut) = (uploaded[0], uploaded[1]);
    std::fs::remove_file(dir.path().join(key_for(&missing))).unwrap();
    let cut_path = dir.path().join(key_for(&cut));
    let whole = std::fs::read(&cut_path).unwrap();
    std::fs::write(&cut_path, &whole[..whole.len() / 2]).unwrap();
    let (old, old_path) = plant(dir.path(), b"left by a crash", Duration::from_secs(7200));
    let (young, young_path) = plant(dir.path(), b"on its way", Duration::ZERO);

    // Never open: no token, no check.
    let r = common::client()
        .get(format!("{base}/admin/check"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(state(&base).await, serde_json::Value::Null);

    let args = ["verify", "--online", "--server", base.as_str()];
    let (code, out) = run(dir.path(), &env, &args);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("ranges       256 checked"), "{out}");
    let mut differing: Vec<String> = [missing, cut, old, young].iter().map(range).collect();
    differing.sort();
    differing.dedup();
    assert!(
        out.contains(&format!(
            "{} with equal checksums, {} differing",
            256 - differing.len(),
            differing.len()
        )),
        "{out}"
    );
    for r in &differing {
        assert!(out.contains(&format!("  range {r}: ")), "{r}: {out}");
    }
    assert!(
        out.contains("originals    5 indexed, 6 blobs listed"),
        "{out}"
    );
    assert!(
        out.contains(&format!("missing      1\n  {missing}")),
        "{out}"
    );
    assert!(out.contains(&format!("mismatched   1\n  {cut}")), "{out}");
    assert!(
        out.contains("unreferenced 1 (15 bytes), 0 deleted"),
        "{out}"
    );
    assert!(out.contains(&format!("  {old}")), "{out}");
    assert!(out.contains("young        1"), "{out}");
    assert!(
        old_path.is_file(),
        "a check without --apply deletes nothing"
    );

    // gc without --apply reports the same and deletes nothing; with it, only the old blob.
    let (code, out) = run(dir.path(), &env, &["gc", "--online", "--server", &base]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("unreferenced 1 (15 bytes), 0 deleted"),
        "{out}"
    );
    assert!(old_path.is_file());
    let args = ["gc", "--online", "--apply", "--server", base.as_str()];
    let (code, out) = run(dir.path(), &env, &args);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("unreferenced 1 (15 bytes), 1 deleted"),
        "{out}"
    );
    assert!(
        !old_path.exists(),
        "the unreferenced blob older than the grace is gone"
    );
    assert!(young_path.is_file(), "the young one is left alone");
    assert!(
        cut_path.is_file(),
        "a mismatched blob is reported, not deleted"
    );
    for hash in &uploaded[2..] {
        assert!(dir.path().join(key_for(hash)).is_file());
    }
    let check = state(&base).await;
    assert_eq!(check["report"]["deleted"], 1);
    assert_eq!(check["report"]["applied"], true);
    assert_eq!(check["running"], false);
    server.terminate();
}

/// Polls `GET /admin/check` until `done` holds of the check.
async fn wait_for(base: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let limit = Duration::from_secs(120);
    common::poll_until(what, limit, || state(base), done).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_check_killed_half_way_resumes_from_its_last_page() {
    let dir = tempfile::tempdir().unwrap();
    // 2,500 blobs nothing names (young: kept) and 3 uploads: three pages and more, at 300
    // rows a second.
    for n in 0..2500u32 {
        plant(
            dir.path(),
            format!("young blob {n}").as_bytes(),
            Duration::ZERO,
        );
    }
    let env = env(&[("IMGCAS_WALK_ROWS_PER_SECOND", "300")]);
    let server = start_with(dir.path(), None, &env);
    let base = server.base.clone();
    for seed in 0..3u8 {
        upload(&base, common::png(16, 16, seed.wrapping_mul(29))).await;
    }
    let r = common::send_as(
        &common::client(),
        reqwest::Method::POST,
        format!("{base}/admin/check"),
        TOKEN,
    )
    .await;
    assert_eq!(r.status(), 202);
    assert_eq!(common::json(r).await["started"], true);
    let half = wait_for(&base, "a first page", |c| {
        c["rows"].as_u64().unwrap_or(0) >= 1000
    })
    .await;
    assert_eq!(half["running"], true, "{half}");
    // The embedded maps make a write durable within a second (`MapStore::flush`): the
    // page's position is on disk before the kill, the next page not yet done.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let half = state(&base).await;
    assert_eq!(half["rows"], 1000, "{half}");
    server.kill();

    // The next start takes the run up where its last page ended.
    let server = start_with(dir.path(), None, &env);
    let done = wait_for(&server.base, "the resumed check", |c| {
        c["finished_ms"].is_u64()
    })
    .await;
    assert_eq!(
        done["started_ms"], half["started_ms"],
        "the same run: {done}"
    );
    let report = &done["report"];
    assert_eq!(report["blobs_listed"], 2503, "every blob once: {done}");
    assert_eq!(report["originals_checked"], 3);
    assert_eq!(report["young"], 2500);
    assert_eq!(report["ranges_checked"], 256);
    assert_eq!(done["rows"], 2503, "{done}");
    assert_eq!(
        (report["missing"].clone(), report["unreferenced"].clone()),
        (0.into(), 0.into())
    );
    server.terminate();
}

/// Three nodes on PostgreSQL and one bucket, each asked to check at once: one runs it, the
/// others wait on its lease and find it done.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_asked_at_once_check_once() {
    let Some(pg) = common::postgres::PgServer::or_skip("three_nodes_asked_at_once_check_once")
    else {
        return;
    };
    let bucket = Arc::new(s3::S3Target::new().await);
    let maps_url = pg.database("store_check");
    let maps = PostgresMaps::open(&maps_url).await.unwrap();
    let mut config = imgcas::config::Config::default();
    bucket.configure(&mut config);
    let blobs = S3BlobStore::connect(&config.storage.s3).await.unwrap();
    for n in 0..1200u32 {
        let bytes = Bytes::from(format!("stored {n}").into_bytes());
        let hash = ContentHash::of(&bytes);
        blobs.put_if_absent(&hash, bytes.clone()).await.unwrap();
        if n % 2 == 0 {
            let info = OriginalInfo {
                format: None,
                width: None,
                height: None,
                upright: None,
                has_alpha: false,
                bytes: bytes.len() as u64,
                first_seen_ms: 1,
                facts: None,
                focus: None,
            };
            maps.add_original(&hash, &info).await.unwrap();
        }
    }
    let node = |name: &'static str| {
        common::cluster_node(&bucket, &maps_url, name, |c| {
            c.cluster.claim_ttl = Duration::from_secs(2);
            c.security.admin_token = Some(TOKEN.into());
        })
    };
    let ((a, _da), (b, _db), (c, _dc)) = tokio::join!(node("a"), node("b"), node("c"));
    let ask = |node: &common::TestApp| {
        common::client()
            .post(node.url("/admin/check"))
            .bearer_auth(TOKEN)
            .send()
    };
    let (ra, rb, rc) = tokio::join!(ask(&a), ask(&b), ask(&c));
    for r in [ra, rb, rc] {
        assert_eq!(r.unwrap().status(), 202);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let p = maps.walk_position("store_check").await.unwrap();
        if let Some(p) = p.filter(|p| p.finished_ms.is_some()) {
            break p;
        }
        assert!(Instant::now() < deadline, "the check did not finish");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(["a", "b", "c"].contains(&done.node.as_str()), "{done:?}");
    assert_eq!(done.rows, 1200);
    // The others take the lease in their turn, see it finished while they waited, and
    // leave it as it is.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = maps.walk_position("store_check").await.unwrap().unwrap();
    assert_eq!(after, done, "run once");
    let check = state(&a.url("")).await;
    assert_eq!(check["report"]["originals_checked"], 600);
    assert_eq!(check["report"]["blobs_listed"], 1200);
    // The other 600 were just written: young, whichever node looked.
    assert_eq!(check["report"]["young"], 600);
    assert_eq!(check["report"]["ranges_checked"], 256);
    for node in [a, b, c] {
        node.stop().await;
    }
    drop(maps);
}
