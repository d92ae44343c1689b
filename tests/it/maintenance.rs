//! `imgcas verify` and `imgcas gc` as a user runs them: the real binary on a data dir the app
//! filled, after blobs were deleted, altered and left behind its back, on the filesystem
//! store and on S3 (the in-process `s3s-fs` server).

use crate::common;

use std::sync::Arc;

use common::s3::{InProcessS3, S3Target};
use common::*;
use imgcas::blob::key_for;
use imgcas::hash::ContentHash;

/// Where the originals live, and how to tamper with them.
enum Backend {
    Fs(std::path::PathBuf),
    S3(S3Target),
}

impl Backend {
    async fn delete(&self, hash: &ContentHash) {
        match self {
            Backend::Fs(dir) => std::fs::remove_file(dir.join(key_for(hash))).unwrap(),
            Backend::S3(t) => {
                t.client()
                    .delete_object()
                    .bucket(&t.bucket)
                    .key(key_for(hash))
                    .send()
                    .await
                    .unwrap();
            }
        }
    }

    async fn write(&self, hash: &ContentHash, bytes: &[u8]) {
        match self {
            Backend::Fs(dir) => {
                let path = dir.join(key_for(hash));
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, bytes).unwrap();
            }
            Backend::S3(t) => {
                t.client()
                    .put_object()
                    .bucket(&t.bucket)
                    .key(key_for(hash))
                    .body(bytes.to_vec().into())
                    .send()
                    .await
                    .unwrap();
            }
        }
    }

    async fn has(&self, hash: &ContentHash) -> bool {
        match self {
            Backend::Fs(dir) => dir.join(key_for(hash)).exists(),
            Backend::S3(t) => t.keys().await.contains(&key_for(hash)),
        }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Backend::Fs(_) => vec![("IMGCAS_STORAGE", "fs".into())],
            Backend::S3(t) => t.env(),
        }
    }
}

/// `imgcas <args>` on `data_dir`: exit code and stdout.
fn imgcas(data_dir: &std::path::Path, backend: &Backend, args: &[&str]) -> (i32, String) {
    imgcas_with(data_dir, backend, &[], args)
}

/// [`imgcas`] with more environment.
fn imgcas_with(
    data_dir: &std::path::Path,
    backend: &Backend,
    extra: &[(&'static str, String)],
    args: &[&str],
) -> (i32, String) {
    let mut env = backend.env();
    env.extend(extra.iter().cloned());
    common::binary::run(data_dir, &env, args)
}

async fn tampered_data_dir_is_found_and_repaired(s3: Option<S3Target>) {
    let app = match &s3 {
        Some(t) => spawn_app_with(|c| t.configure(c)).await,
        None => spawn_app_with(|c| c.storage.backend = imgcas::config::StorageBackend::Fs).await,
    };
    let origin = Origin::start().await;
    let (a, b, c) = (jpeg(64, 64, 1), jpeg(64, 64, 2), jpeg(64, 64, 3));
    origin.put("/a.jpg", a.clone());
    for bytes in [&b, &c] {
        assert_eq!(app.upload(bytes.clone()).await.status(), 201);
    }
    assert_eq!(app.image_from_status(&origin, "/a.jpg", "w=32").await, 200);
    let dir: Arc<tempfile::TempDir> = app.dir.clone();
    app.stop().await;
    let backend = match s3 {
        Some(t) => Backend::S3(t),
        None => Backend::Fs(dir.path().to_path_buf()),
    };
    let (ha, hb, hc) = (
        ContentHash::of(&a),
        ContentHash::of(&b),
        ContentHash::of(&c),
    );
    let stray = ContentHash::of(b"left behind by a crash");

    let (code, out) = imgcas(dir.path(), &backend, &["verify"]);
    assert_eq!(code, 0, "a clean data dir verifies: {out}");
    assert!(
        out.contains("3 originals checked: 0 missing, 0 corrupt"),
        "{out}"
    );

    backend.delete(&ha).await;
    backend
        .write(&hb, b"not the bytes that hash to this key")
        .await;
    backend.write(&stray, b"left behind by a crash").await;

    let (code, out) = imgcas(dir.path(), &backend, &["verify"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("missing blob: {ha}")), "{out}");
    assert!(
        out.contains(&format!(
            "corrupt blob (bytes do not hash to the key): {hb}"
        )),
        "{out}"
    );
    assert!(
        out.contains("dangling URL entry: http://127.0.0.1"),
        "{out}"
    );

    // Just written: within the grace period (default 1 h), a writer may still be about to
    // index it, so gc spares it.
    let (code, out) = imgcas(dir.path(), &backend, &["gc", "--apply"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("removed 0 unreferenced blobs"), "{out}");
    assert!(
        out.contains("kept 1 unreferenced objects younger than maintenance.gc_grace"),
        "{out}"
    );
    assert!(backend.has(&stray).await);
    let no_grace = [("IMGCAS_GC_GRACE", "0".to_string())];
    let (code, out) = imgcas_with(dir.path(), &backend, &no_grace, &["gc"]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("would remove 1 unreferenced blobs"),
        "{out}"
    );
    assert!(backend.has(&stray).await, "a dry run removes nothing");
    let (_, out) = imgcas_with(dir.path(), &backend, &no_grace, &["gc", "--apply"]);
    assert!(out.starts_with("removed 1 unreferenced blobs"), "{out}");
    assert!(!backend.has(&stray).await);

    let (code, out) = imgcas(dir.path(), &backend, &["verify", "--repair"]);
    assert_eq!(code, 0, "{out}");
    assert!(!backend.has(&hb).await, "the corrupt blob is gone");
    let (code, out) = imgcas(dir.path(), &backend, &["verify"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("1 originals checked: 0 missing, 0 corrupt; 0 URL entries dangling"),
        "{out}"
    );
    assert!(backend.has(&hc).await, "the intact original stays");
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_and_gc_on_the_filesystem_store() {
    tampered_data_dir_is_found_and_repaired(None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_and_gc_on_s3() {
    tampered_data_dir_is_found_and_repaired(Some(S3Target::on(InProcessS3::start()).await)).await;
}

/// Audit #3, finding 9: `verify --help` said to stop the server while docs/operations.md said
/// PostgreSQL maps are checked while nodes serve. Both say the one true thing now.
#[test]
fn the_help_and_the_operations_guide_say_when_to_run_verify_alike() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .unwrap();
    assert!(docs.contains("the maps on PostgreSQL, run them while the nodes serve"));
    for command in ["verify", "stats", "gc"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_imgcas"))
            .args([command, "--help"])
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&out.stdout).replace('\n', " ");
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            help.contains("server is stopped; on PostgreSQL, while nodes serve"),
            "{command}: {help}"
        );
    }
}
