//! `imgcas verify --online` and `imgcas gc --online [--apply]`: the online check of the store
//! (`pipeline/walks/check.rs`) asked of a running server, which runs it (on the embedded maps no
//! other process may open the store), followed until it ends, and its report printed.

use std::time::Duration;

use imgcas::pipeline::{CheckReport, CheckState};
use serde::Deserialize;
use url::Url;

/// What `/admin/check` answers.
#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    started: Option<bool>,
    check: Option<CheckState>,
}

/// How often the command asks how far the check is.
const POLL: Duration = Duration::from_millis(500);

/// Starts the check on `server` (or joins the one under way) and waits for its end.
pub async fn run(server: &Url, token: Option<&str>, apply: bool) -> Result<CheckState, String> {
    let client = super::server_client("imgcas-check", token, Duration::from_secs(60))?;
    let url = server.join("/admin/check").map_err(|e| e.to_string())?;
    let mut start = url.clone();
    start.set_query(Some(if apply { "apply=true" } else { "apply=false" }));
    let request = client.post(start);
    let first = answer(server, request).await?;
    // A run this request started shows once its first page is written: until then the
    // maps still show the run before it.
    let before = match first.started {
        Some(true) => first.check.as_ref().map(|c| c.started_ms),
        _ => None,
    };
    let bar = super::progress(0, "checking");
    loop {
        let now = answer(server, client.get(url.clone())).await?;
        if let Some(state) = now.check {
            bar.set_position(state.rows);
            let this_run = before.is_none_or(|b| b != state.started_ms);
            if this_run && state.finished_ms.is_some() {
                bar.finish_and_clear();
                return Ok(state);
            }
            if this_run && !state.running {
                bar.finish_and_clear();
                return Err(format!(
                    "the check stopped on node `{}` after {} rows; it resumes when that node \
                     starts again (or run this again)",
                    state.node, state.rows
                ));
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn answer(server: &Url, request: reqwest::RequestBuilder) -> Result<Answer, String> {
    let body = super::answer_of(server, request)
        .await?
        .map_err(|e| format!("{}: {}", e.code, e.message))?;
    serde_json::from_slice(&body).map_err(|e| format!("{server} answered what is not a check: {e}"))
}

/// The lines the commands print.
pub fn describe(state: &CheckState) -> String {
    let r: &CheckReport = &state.report;
    let mut lines = vec![format!(
        "ranges       {} checked, {} with equal checksums, {} differing",
        r.ranges_checked, r.ranges_equal, r.differing_ranges
    )];
    for range in &r.differing {
        lines.push(format!(
            "  range {}: index {} rows (sum {:016x}), blobs {} rows (sum {:016x})",
            range.range, range.index_rows, range.index_sum, range.blob_rows, range.blob_sum
        ));
    }
    lines.push(format!(
        "originals    {} indexed, {} blobs listed",
        r.originals_checked, r.blobs_listed
    ));
    // Each finding's count, then its named hashes a line each.
    let hashes = |named: &[imgcas::hash::ContentHash]| -> String {
        named.iter().map(|h| format!("\n  {h}")).collect()
    };
    lines.push(format!(
        "missing      {}{}",
        r.missing,
        hashes(&r.missing_named)
    ));
    lines.push(format!(
        "mismatched   {}{}",
        r.mismatched,
        hashes(&r.mismatched_named)
    ));
    lines.push(format!(
        "unreferenced {} ({} bytes), {} deleted{}",
        r.unreferenced,
        r.unreferenced_bytes,
        r.deleted,
        hashes(&r.unreferenced_named)
    ));
    lines.push(format!(
        "young        {} (within maintenance.gc_grace)",
        r.young
    ));
    lines.push(format!(
        "run          on node `{}`, {} rows read",
        state.node, state.rows
    ));
    lines.join("\n")
}
