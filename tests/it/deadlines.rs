//! Runs bounded in time (issue 50, item 2), through the real binary so that its CPU time can
//! be read from `/proc`: audit #3 found a run that went on after its request answered 503
//! (about 4.7 CPU s per 5 s for 40 s more), and a server that did not stop within 13 s of
//! SIGTERM while a run was drawing. A run past its deadline is now told to stop and stops at
//! its next check (here: between an animation's frames), its request answered at once, and
//! nothing cached; a shutdown stops runs the same way once requests had their time.

use std::time::{Duration, Instant};

use image::codecs::gif::{GifEncoder, Repeat};
use image::{Delay, Frame, RgbaImage};

use crate::common;
use common::*;

/// A 100×100 animated GIF of `frames` noisy frames: asked as a 560-pixel animated WebP, each
/// frame is an upscale and a WebP encode of tens of milliseconds, and the run seconds.
fn slow_animation(frames: u32) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut encoder = GifEncoder::new_with_speed(&mut out, 30);
        encoder.set_repeat(Repeat::Infinite).unwrap();
        let mut state = 0x2545_f491_u32;
        for _ in 0..frames {
            let picture = RgbaImage::from_fn(100, 100, |_, _| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                let [r, g, b, _] = state.to_le_bytes();
                image::Rgba([r, g, b, 255])
            });
            let frame = Frame::from_parts(picture, 0, 0, Delay::from_numer_denom_ms(40, 1));
            encoder.encode_frame(frame).unwrap();
        }
    }
    out
}

/// The CPU seconds (user + system) the process `pid` has used, from `/proc/<pid>/stat`.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are the 14th and 15th fields of the line, 12th and 13th here.
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    let per_second = clock_ticks();
    ticks / per_second
}

/// `getconf CLK_TCK` (100 on Linux almost everywhere), asked of the system.
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

fn image_path(origin: &Origin, path: &str, query: &str) -> String {
    let mut url = reqwest::Url::parse("http://x/v1/image").unwrap();
    url.query_pairs_mut().append_pair("url", &origin.url(path));
    format!("/v1/image?{}&{query}", url.query().unwrap())
}

const SLOW: &str = "w=560&enlarge=1&format=webp&animated=1";

#[tokio::test(flavor = "multi_thread")]
async fn a_run_past_the_request_limit_stops_frees_its_cpu_and_caches_nothing() {
    let origin = Origin::start_with("/slow.gif", slow_animation(150)).await;
    origin.put("/quick.jpg", jpeg(200, 100, 3));
    let dir = tempfile::tempdir().unwrap();
    let node = binary::start_with(dir.path(), None, &[("IMGCAS_REQUEST_TIMEOUT", "1s".into())]);
    let pid = node.child.id();
    let client = client();
    let get = |path: String| {
        let (client, base) = (client.clone(), node.base.clone());
        async move { client.get(format!("{base}{path}")).send().await.unwrap() }
    };

    for attempt in 0..2 {
        let started = Instant::now();
        let answer = get(image_path(&origin, "/slow.gif", SLOW)).await;
        let took = started.elapsed();
        assert_eq!(answer.status(), 503, "attempt {attempt}");
        assert_eq!(error_code_of(answer).await, "overloaded");
        // At the limit: a cached answer would come at once.
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(3),
            "answered after {took:?}"
        );
        // The run stops at its next frame: at most a second of CPU after the answer.
        let at_answer = cpu_seconds(pid);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after = cpu_seconds(pid) - at_answer;
        assert!(
            after <= 1.0,
            "attempt {attempt}: {after:.2} CPU s after the answer"
        );
    }
    // Nothing was cached for the deadline: the second attempt ran again (above), and a
    // quick request is served meanwhile.
    let quick = get(image_path(&origin, "/quick.jpg", "w=50")).await;
    assert_eq!(quick.status(), 200);
    let metrics = metrics_text(&client, &node.base).await;
    let stopped = text_metric(&metrics, "imgcas_runs_stopped_total ");
    assert_eq!(stopped, 2.0, "each attempt ran, and was stopped");
    node.terminate();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shutdown_stops_a_run_within_the_shutdown_timeout() {
    let origin = Origin::start_with("/slow.gif", slow_animation(150)).await;
    let dir = tempfile::tempdir().unwrap();
    let mut node = binary::start_with(
        dir.path(),
        None,
        &[("IMGCAS_SHUTDOWN_TIMEOUT", "1s".into())],
    );
    let (client, base) = (client(), node.base.clone());
    let path = image_path(&origin, "/slow.gif", SLOW);
    let request = tokio::spawn(async move { client.get(format!("{base}{path}")).send().await });
    // The run under way (the download is quick), then SIGTERM.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let pid = node.child.id().to_string();
    let asked = Instant::now();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = tokio::task::spawn_blocking(move || node.child.wait().unwrap())
        .await
        .unwrap();
    let took = asked.elapsed();
    assert!(status.success(), "{status}");
    // The shutdown timeout, the settling of background work, and a little.
    assert!(took < Duration::from_secs(4), "stopped after {took:?}");
    let _ = request.await;
}
