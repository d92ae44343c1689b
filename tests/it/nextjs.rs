//! Next.js's `next/image` with imgcas as its loader, proven in a browser (issue 30): the
//! example app of `clients/next/example` is built with `next` from npm (`next build`), served
//! by `next start` on loopback, and loaded by Debian's headless Chromium at two viewport
//! widths. Every image the browser shows came from imgcas, the width it picked from the
//! srcset is an imgcas variant made for it, and the browser decoded it. The loaders' own
//! functions (Next.js, the signing route, Nuxt) pass their node tests (`clients/test/`).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::*;
use tokio::process::Command;

fn clients() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients")
}

/// Runs `program args` in `dir` with `envs`, within `limit`; panics with its output if it
/// fails.
async fn run(dir: &Path, program: &str, args: &[&str], envs: &[(&str, String)], limit: u64) {
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(dir)
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .env("NEXT_TELEMETRY_DISABLED", "1")
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(limit), command.output())
        .await
        .unwrap_or_else(|_| panic!("{program} {args:?} took over {limit} s"))
        .expect("starts");
    assert!(
        output.status.success(),
        "{program} {args:?}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Copies the example app (not what a build left in it) into `to`, with the loader beside
/// its config.
fn copy_app(to: &Path) {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name();
            if name == "node_modules" || name == ".next" {
                continue;
            }
            let target = to.join(&name);
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }
    copy(&clients().join("next/example"), to);
    std::fs::copy(
        clients().join("next/imgcas-loader.js"),
        to.join("imgcas-loader.js"),
    )
    .unwrap();
}

/// What the page's probe wrote of one image (`clients/next/example/app/probe.js`).
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Shown {
    current_src: String,
    srcset: String,
    natural_width: u32,
}

/// The page at a viewport `width` wide, as headless Chromium shows it.
async fn shown_at(chromium: &str, page: &str, width: u32) -> Vec<Shown> {
    let profile = tempfile::tempdir().unwrap();
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--no-first-run",
                &format!("--user-data-dir={}", profile.path().display()),
                &format!("--window-size={width},900"),
                "--virtual-time-budget=30000",
                "--dump-dom",
                page,
            ])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("Chromium answers within two minutes")
    .expect("Chromium starts");
    let dom = String::from_utf8_lossy(&output.stdout);
    let start = dom
        .find("data-images=\"")
        .unwrap_or_else(|| panic!("the probe wrote nothing at {width} px: {dom}"))
        + "data-images=\"".len();
    let end = start + dom[start..].find('"').expect("the attribute ends");
    let json = dom[start..end]
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    serde_json::from_str(&json).expect("the probe's JSON")
}

/// The `w` an imgcas image URL asks for.
fn width_of(url: &str) -> u32 {
    let parsed = reqwest::Url::parse(url).expect("a URL");
    let w = parsed
        .query_pairs()
        .find(|(k, _)| k == "w")
        .expect("a width")
        .1;
    w.parse().expect("a number")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn next_image_shows_imgcas_variants_in_chromium() {
    let (Some(npm), Some(chromium)) = (found(&["npm"]), found(&["chromium", "chromium-browser"]))
    else {
        skip_unless_ci("next_image_shows_imgcas_variants_in_chromium (npm and chromium)");
        return;
    };
    let app = spawn_app().await;
    let origin = Origin::start_with("/photo.jpg", jpeg(2000, 1500, 3)).await;
    let imgcas = app.url("");

    let work = tempfile::tempdir().unwrap();
    copy_app(work.path());
    run(
        work.path(),
        &npm,
        &["ci", "--no-audit", "--no-fund"],
        &[],
        600,
    )
    .await;
    let build_env = [("NEXT_PUBLIC_IMGCAS_URL", imgcas.clone())];
    run(work.path(), &npm, &["run", "build"], &build_env, 600).await;

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // `next` itself, not through npm: dropping the handle then stops the server (npm's
    // child would outlive it).
    let _server = Command::new(work.path().join("node_modules/.bin/next"))
        .args(["start", "-p", &port.to_string(), "-H", "127.0.0.1"])
        .current_dir(work.path())
        .env("IMGCAS_EXAMPLE_IMAGE", origin.url("/photo.jpg"))
        .env("NEXT_TELEMETRY_DISABLED", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("next start");
    let page = format!("http://127.0.0.1:{port}/");
    let mut up = false;
    for _ in 0..120 {
        if let Ok(r) = app.client.get(&page).send().await {
            up = r.status() == 200;
            if up {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(up, "next start answers");

    let mut chosen = Vec::new();
    for viewport in [600, 1400] {
        let before = app.image_requests().await.0;
        let shown = shown_at(&chromium, &page, viewport).await;
        assert_eq!(shown.len(), 2, "the page's two images: {shown:?}");
        for image in &shown {
            assert!(
                image
                    .current_src
                    .starts_with(&format!("{imgcas}/v1/image?")),
                "from imgcas: {image:?}"
            );
            assert!(image.natural_width > 0, "decoded by the browser: {image:?}");
            let candidates: Vec<u32> = image
                .srcset
                .split(", ")
                .map(|c| width_of(c.split(' ').next().unwrap_or("")))
                .collect();
            assert!(candidates.len() >= 2, "a srcset: {image:?}");
            assert!(candidates.contains(&width_of(&image.current_src)));
            // The variant the browser asked for was made, at its width, and is stored
            // (asked as Chromium asks: `format=auto` reads `Accept`; a Chromium that decodes
            // JPEG XL lists it, and got one).
            let mut again = None;
            for accept in [
                "image/jxl,image/avif,image/webp,image/apng,*/*;q=0.8",
                "image/avif,image/webp,image/apng,*/*;q=0.8",
            ] {
                let r = app
                    .client
                    .get(&image.current_src)
                    .header("accept", accept)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
                if header(&r, "x-imgcas-cache") == Some("hit") {
                    again = Some(r);
                    break;
                }
            }
            let again = again.expect("the browser's variant is stored");
            let w = width_of(&image.current_src);
            let bytes = again.bytes().await.unwrap();
            // AVIF or JPEG XL for Chromium: read by imgcas's own header reader.
            let info = imgcas_processors::probe(&bytes, &Default::default()).expect("an image");
            assert_eq!(info.width, w);
        }
        let full_width = width_of(&shown[0].current_src);
        assert!(full_width >= viewport, "{full_width} px for {viewport} px");
        chosen.push(full_width);
        // The browser's requests (one at least: both images may share a candidate), and
        // this test's own.
        let after = app.image_requests().await.0;
        assert!(
            after - before > shown.len() as u64,
            "the browser's requests reached imgcas ({before} → {after})"
        );
    }
    assert!(
        chosen[0] < chosen[1],
        "the wider viewport took a wider variant: {chosen:?}"
    );
    app.stop().await;
}

#[tokio::test]
async fn the_loaders_pass_their_node_tests() {
    let Some(node) = found(&["node"]) else {
        skip_unless_ci("the_loaders_pass_their_node_tests (node)");
        return;
    };
    run(
        &clients(),
        &node,
        &["--test", "test/clients.test.mjs"],
        &[],
        120,
    )
    .await;
}

/// The signing route's rule is imgcas's: a URL it signs, imgcas serves; one it did not, it
/// refuses.
#[tokio::test]
async fn the_signing_routes_urls_are_accepted_by_imgcas() {
    const KEY: &str = "a-signing-key-of-at-least-16-bytes";
    let Some(node) = found(&["node"]) else {
        skip_unless_ci("the_signing_routes_urls_are_accepted_by_imgcas (node)");
        return;
    };
    let app = spawn_app_with(|c| c.security.signing_key = Some(KEY.into())).await;
    let origin = Origin::start_with("/photo.jpg", jpeg(320, 240, 4)).await;
    let script = format!(
        "import('./next/imgcas-sign-route.js').then((m) => console.log(m.signedPath(\
         new URLSearchParams({{ url: {url:?}, w: '100', q: '75', format: 'auto' }}), {KEY:?})))",
        url = origin.url("/photo.jpg"),
    );
    let output = Command::new(&node)
        .args(["--input-type=module", "-e", &script])
        .current_dir(clients())
        .output()
        .await
        .expect("node runs");
    assert!(output.status.success(), "{output:?}");
    let path = String::from_utf8(output.stdout).unwrap().trim().to_string();
    assert!(
        path.starts_with("/v1/image?") && path.contains("&sig="),
        "{path}"
    );
    let signed = app.get(&path).await;
    assert_eq!(signed.status(), 200, "{path}");
    assert_eq!(dimensions(&signed.bytes().await.unwrap()), (100, 75));
    let tampered = app.get(&path.replace("w=100", "w=101")).await;
    assert_eq!(tampered.status(), 403);
    app.stop().await;
}
