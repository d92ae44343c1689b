//! Online growth (issue 69, part 4), through the real binary: a node on the embedded maps and
//! a directory moves into PostgreSQL and a bucket (s3s-fs in process, or moto in CI) while
//! traffic goes on — uploads, new URLs, new variants, hits — and is killed with SIGKILL in
//! every phase: mid-backfill, validated, cut over, finished (and, in the rollback's test,
//! rolling back and rolled back). No request fails, and once finished a fresh
//! node configured on the target serves every acknowledged upload and URL. A rollback after the
//! cutover leaves the source holding what the target took while it led.

use crate::common::binary::{run, start_with, Server};
use crate::common::{self, postgres::PgServer, s3::S3Target, Origin};

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use imgcas::hash::ContentHash;
use serde_json::Value;

const TOKEN: &str = "the-migration-admin-token";

/// The node's environment: the embedded maps and a directory, the bucket's S3 settings (for
/// the migration's target only), the admin token.
fn node_env(bucket: &S3Target, extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut env: Vec<(&'static str, String)> = bucket
        .env()
        .into_iter()
        .filter(|(k, _)| *k != "IMGCAS_STORAGE" && *k != "IMGCAS_S3_BUCKET")
        .collect();
    env.push(("IMGCAS_STORAGE", "fs".into()));
    env.push(("IMGCAS_ADMIN_TOKEN", TOKEN.into()));
    env.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    env
}

/// `imgcas maps migrate --server … <args>`: its exit code and output.
fn migrate(dir: &Path, env: &[(&'static str, String)], base: &str, args: &[&str]) -> (i32, String) {
    let mut all = vec!["maps", "migrate", "--server", base];
    all.extend_from_slice(args);
    run(dir, env, &all)
}

/// `GET /admin/migrate`'s `migration`.
async fn status(base: &str) -> serde_json::Value {
    let r = common::get_url_as(format!("{base}/admin/migrate"), TOKEN).await;
    assert_eq!(r.status(), 200);
    common::json(r).await["migration"].clone()
}

async fn wait_for(base: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let limit = Duration::from_secs(180);
    common::poll_until(what, limit, || status(base), done).await
}

fn phase(s: &serde_json::Value) -> &str {
    s["phase"].as_str().unwrap_or("")
}

async fn upload(base: &str, bytes: Vec<u8>) -> Result<ContentHash, String> {
    let r = common::client()
        .post(format!("{base}/v1/originals"))
        .bearer_auth(TOKEN)
        .body(bytes)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !r.status().is_success() {
        return Err(r.status().to_string());
    }
    let body = common::json(r).await;
    body["hash"]
        .as_str()
        .and_then(|h| h.parse().ok())
        .ok_or_else(|| format!("{body}"))
}

async fn image(base: &str, url: &str, w: u32) -> Result<Vec<u8>, String> {
    let r = common::client()
        .get(image_url(base, url, w))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if r.status() != 200 {
        return Err(r.status().to_string());
    }
    Ok(r.bytes().await.map_err(|e| e.to_string())?.to_vec())
}

fn image_url(base: &str, source: &str, w: u32) -> reqwest::Url {
    let mut url = reqwest::Url::parse(&format!("{base}/v1/image")).unwrap();
    url.query_pairs_mut()
        .append_pair("url", source)
        .append_pair("w", &w.to_string());
    url
}

/// What the traffic wrote and was told was done.
#[derive(Default)]
struct Acknowledged {
    uploads: Mutex<Vec<(ContentHash, Vec<u8>)>>,
    urls: Mutex<Vec<String>>,
    /// Requests that failed while the node was up (a request cut by a kill is not one).
    failed: AtomicU64,
}

/// Steady traffic on whichever node is up (`base`: empty while it is down).
fn traffic(
    base: Arc<Mutex<String>>,
    origin: Arc<Origin>,
    done: Arc<Acknowledged>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut n = 0u32;
        while !stop.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(30)).await;
            let at = base.lock().unwrap().clone();
            if at.is_empty() {
                continue;
            }
            n += 1;
            let outcome = match n % 3 {
                0 => {
                    let bytes = common::png(9, 7, (n % 251) as u8 ^ 0x5a)
                        .into_iter()
                        .chain(n.to_le_bytes())
                        .collect::<Vec<u8>>();
                    upload(&at, bytes.clone())
                        .await
                        .map(|hash| done.uploads.lock().unwrap().push((hash, bytes)))
                }
                1 => {
                    let path = format!("/traffic/{n}.png");
                    origin.put(&path, common::png(12, 10, (n % 253) as u8));
                    let url = origin.url(&path);
                    image(&at, &url, 8)
                        .await
                        .map(|_| done.urls.lock().unwrap().push(url))
                }
                _ => {
                    let known = done.urls.lock().unwrap().last().cloned();
                    match known {
                        Some(url) => image(&at, &url, 8).await.map(|_| ()),
                        None => Ok(()),
                    }
                }
            };
            // A failure while this node was still the one up counts; one cut by a kill does not.
            if outcome.is_err() && *base.lock().unwrap() == at {
                done.failed.fetch_add(1, Ordering::SeqCst);
                eprintln!("traffic: {outcome:?}");
            }
        }
    })
}

/// Kills the node (SIGKILL) and starts it again on the same directory.
async fn kill_and_restart(
    server: Server,
    dir: &Path,
    env: &[(&'static str, String)],
    base: &Arc<Mutex<String>>,
) -> Server {
    base.lock().unwrap().clear();
    // The traffic pauses, and the embedded maps make what they acknowledged durable within a
    // second (`MapStore::flush`): after this, everything acknowledged must survive the kill.
    // The backfill runs on through the pause, and the kill cuts it off.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.kill();
    let server = start_with(dir, None, env);
    *base.lock().unwrap() = server.base.clone();
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_moves_into_postgres_and_a_bucket_while_it_serves_and_is_killed_in_every_phase() {
    let Some(pg) = PgServer::or_skip("a_node_moves_into_postgres_and_a_bucket") else {
        return;
    };
    let bucket = S3Target::new().await;
    let maps_url = pg.database("migrate_online");
    let dir = tempfile::tempdir().unwrap();
    let origin = Arc::new(Origin::start().await);
    // A backfill slow enough to be killed half way: 50 originals a second, 200 a page (a
    // page's pause, 4 s, outlasts the kill's 1.5 s).
    let env = node_env(&bucket, &[("IMGCAS_WALK_ROWS_PER_SECOND", "50")]);
    let server = start_with(dir.path(), None, &env);
    let done = Arc::new(Acknowledged::default());
    // More than two pages of originals before the migration (uploads, and URLs with a
    // variant), so that the run taken up after the kill at the first page has a whole page
    // and its pause (4 s) to go: the status read after the restart sees that run, not the
    // one after it (with one page, CI once read it after the taken-up run had ended).
    for n in 0..430u32 {
        let bytes = common::png(8, 8, (n % 251) as u8)
            .into_iter()
            .chain(n.to_le_bytes())
            .collect::<Vec<u8>>();
        let hash = upload(&server.base, bytes.clone()).await.unwrap();
        done.uploads.lock().unwrap().push((hash, bytes));
    }
    for n in 0..10u32 {
        let path = format!("/before/{n}.png");
        origin.put(&path, common::png(16, 12, n as u8 * 13));
        let url = origin.url(&path);
        image(&server.base, &url, 8).await.unwrap();
        done.urls.lock().unwrap().push(url);
    }
    let base = Arc::new(Mutex::new(server.base.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let load = traffic(base.clone(), origin.clone(), done.clone(), stop.clone());

    // Started through the command; mirrored and backfilling.
    let (code, out) = migrate(
        dir.path(),
        &env,
        &server.base,
        &["--to", &maps_url, "--bucket", &bucket.bucket],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("phase      backfilling"), "{out}");
    assert!(
        !out.contains("postgres://") || !out.contains(":imgcas@"),
        "no password shown: {out}"
    );
    // A second start is refused while one is under way.
    let (code, out) = migrate(
        dir.path(),
        &env,
        &server.base,
        &["--to", &maps_url, "--bucket", &bucket.bucket],
    );
    assert_eq!(code, 1, "{out}");

    // Killed half way through the backfill: it resumes from its last page.
    let half = wait_for(&server.base, "the backfill's first page", |s| {
        s["backfill"]["report"]["originals"].as_u64().unwrap_or(0) >= 200
    })
    .await;
    assert_eq!(phase(&half), "backfilling");
    let server = kill_and_restart(server, dir.path(), &env, &base).await;
    let taken_up = status(&server.base).await;
    assert_eq!(
        taken_up["backfill"]["started_ms"], half["backfill"]["started_ms"],
        "the same run, taken up: {taken_up}"
    );
    assert!(
        taken_up["backfill"]["report"]["originals"]
            .as_u64()
            .unwrap()
            >= 200,
        "from its last page: {taken_up}"
    );
    let validated = wait_for(&server.base, "validated", |s| phase(s) == "validated").await;
    let report = &validated["backfill"]["report"];
    assert_eq!(report["ranges_checked"], 256, "{validated}");
    assert_eq!(
        report["ranges_equal"], 256,
        "every range's checksums equal: {validated}"
    );

    // Killed once validated: a start backfills again (a mirrored write may have been cut off).
    let server = kill_and_restart(server, dir.path(), &env, &base).await;
    let again = status(&server.base).await;
    assert_ne!(phase(&again), "validated", "{again}");
    wait_for(&server.base, "validated again", |s| phase(s) == "validated").await;

    // The cutover: the target leads; killed, the node comes back with it leading.
    let (code, out) = migrate(dir.path(), &env, &server.base, &["--cutover"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("phase      cut_over"), "{out}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let server = kill_and_restart(server, dir.path(), &env, &base).await;
    assert_eq!(phase(&status(&server.base).await), "cut_over");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let s = status(&server.base).await;
    assert!(
        s["shadow_same"].as_u64().unwrap() > 0,
        "shadow reads compared: {s}"
    );

    // Finished: the source retired.
    let (code, out) = migrate(dir.path(), &env, &server.base, &["--finish"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("phase      finished"), "{out}");
    assert!(out.contains("set maps.url to the target"), "{out}");
    // Killed once finished: the node comes back on the target alone, and serves.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let server = kill_and_restart(server, dir.path(), &env, &base).await;
    let s = status(&server.base).await;
    assert_eq!(phase(&s), "finished", "{s}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    load.await.unwrap();
    base.lock().unwrap().clear();
    server.terminate();
    assert_eq!(done.failed.load(Ordering::SeqCst), 0, "no request failed");

    // A fresh node on the target alone serves every acknowledged upload and URL, without
    // downloading a URL again.
    let fresh = tempfile::tempdir().unwrap();
    let mut target_env = bucket.env();
    target_env.push(("IMGCAS_MAPS_URL", maps_url.clone()));
    target_env.push(("IMGCAS_ADMIN_TOKEN", TOKEN.into()));
    let node = start_with(fresh.path(), None, &target_env);
    let uploads = done.uploads.lock().unwrap().clone();
    assert!(uploads.len() > 240, "{}", uploads.len());
    for (hash, bytes) in &uploads {
        let r = common::get_url_as(format!("{}/v1/originals/{hash}", node.base), TOKEN).await;
        assert_eq!(r.status(), 200, "{hash}");
        assert_eq!(r.bytes().await.unwrap().to_vec(), *bytes, "{hash}");
    }
    let urls = done.urls.lock().unwrap().clone();
    let downloads = origin.full();
    let mut missed = Vec::new();
    for url in &urls {
        let r = common::client()
            .get(image_url(&node.base, url, 8))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{url}");
        let outcome = r
            .headers()
            .get("x-imgcas-cache")
            .and_then(|v| v.to_str().ok());
        if outcome != Some("hit") {
            missed.push(url.clone());
        }
    }
    assert!(
        missed.is_empty(),
        "variants missing on the target: {missed:?}"
    );
    assert_eq!(origin.full(), downloads, "no URL downloaded again");
    node.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rollback_after_the_cutover_keeps_what_the_target_took_through_a_kill() {
    let Some(pg) = PgServer::or_skip("a_rollback_after_the_cutover") else {
        return;
    };
    let bucket = S3Target::new().await;
    let maps_url = pg.database("migrate_rollback");
    let dir = tempfile::tempdir().unwrap();
    // Walks slow enough (2 rows a second: a page of eight waits 4 s) for the rollback to be
    // killed before it is done.
    let env = node_env(&bucket, &[("IMGCAS_WALK_ROWS_PER_SECOND", "2")]);
    let server = start_with(dir.path(), None, &env);
    let mut uploads = Vec::new();
    for n in 0..5u8 {
        uploads.push(
            upload(&server.base, common::png(10, 10, n * 17))
                .await
                .unwrap(),
        );
    }
    // Before anything: a cutover or a finish is refused, a status says there is none.
    let (code, out) = migrate(dir.path(), &env, &server.base, &["--status"]);
    assert_eq!((code, out.trim()), (0, "no migration"));
    let (code, out) = migrate(dir.path(), &env, &server.base, &["--cutover"]);
    assert_eq!(code, 1, "{out}");
    let (code, out) = migrate(
        dir.path(),
        &env,
        &server.base,
        &["--to", &maps_url, "--bucket", &bucket.bucket],
    );
    assert_eq!(code, 0, "{out}");
    let (code, out) = migrate(dir.path(), &env, &server.base, &["--finish"]);
    assert_eq!(code, 1, "finish before the cutover: {out}");
    let (code, out) = migrate(
        dir.path(),
        &env,
        &server.base,
        &["--status", "--wait-for", "validated"],
    );
    assert_eq!(code, 0, "{out}");
    let (code, out) = migrate(dir.path(), &env, &server.base, &["--cutover"]);
    assert_eq!(code, 0, "{out}");
    // Written while the target leads.
    for n in 5..8u8 {
        uploads.push(
            upload(&server.base, common::png(10, 10, n * 17))
                .await
                .unwrap(),
        );
    }
    let (code, out) = migrate(dir.path(), &env, &server.base, &["--rollback"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("phase      rolling_back"), "{out}");
    // Killed while rolling back (after the embedded maps' second to make writes durable): it
    // comes back rolling back, and the backfill runs again to its end.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.kill();
    let server = start_with(dir.path(), None, &env);
    let s = status(&server.base).await;
    assert_eq!(phase(&s), "rolling_back", "{s}");
    let (code, out) = migrate(
        dir.path(),
        &env,
        &server.base,
        &["--status", "--wait-for", "rolled_back"],
    );
    assert_eq!(code, 0, "{out}");
    // Killed once rolled back too (after the maps' second): the node on its own maps again,
    // all eight there, without the target.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.kill();
    let server = start_with(dir.path(), None, &env);
    assert_eq!(phase(&status(&server.base).await), "rolled_back");
    for hash in &uploads {
        let r = common::client()
            .get(format!("{}/v1/originals/{hash}", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{hash}");
    }
    server.terminate();
}
