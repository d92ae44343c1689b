//! `imgcas maps migrate`: the maps' online migration (`pipeline/migrate/`) asked of the running
//! server that owns them — started, moved on a phase, rolled back, or read — and where it
//! stands printed.

use std::time::Duration;

use imgcas::pipeline::MigrationState;
use serde::Deserialize;
use url::Url;

#[derive(Debug, Clone, clap::Args)]
pub struct MigrateOptions {
    /// The running imgcas whose maps move (e.g. http://127.0.0.1:8080).
    #[arg(long)]
    pub server: Url,
    /// Its admin token (else IMGCAS_ADMIN_TOKEN).
    #[arg(long, value_name = "TOKEN")]
    pub admin_token: Option<String>,
    /// Start: the target maps, `postgres://…` or `redb://<dir>`.
    #[arg(long, group = "step")]
    pub to: Option<String>,
    /// With `--to`: the bucket the blob store moves into (on the node's S3 settings).
    #[arg(long, requires = "to")]
    pub bucket: Option<String>,
    /// Where the migration stands.
    #[arg(long, group = "step")]
    pub status: bool,
    /// The target leads from now on (once every range is validated); the source is still
    /// written.
    #[arg(long, group = "step")]
    pub cutover: bool,
    /// Retire the source (after the cutover).
    #[arg(long, group = "step")]
    pub finish: bool,
    /// Back to the source alone.
    #[arg(long, group = "step")]
    pub rollback: bool,
    /// Wait until the migration reaches this phase before printing (`validated`,
    /// `rolled_back`).
    #[arg(long, value_name = "PHASE")]
    pub wait_for: Option<String>,
}

#[derive(Deserialize)]
struct Answer {
    migration: Option<MigrationState>,
}

pub async fn run(
    options: &MigrateOptions,
    token: Option<&str>,
) -> Result<Option<MigrationState>, String> {
    let client = super::server_client("imgcas-migrate", token, Duration::from_secs(120))?;
    let base = &options.server;
    let url = |path: &str| base.join(path).map_err(|e| e.to_string());
    let request = if let Some(to) = &options.to {
        let body = serde_json::json!({ "to": to, "bucket": options.bucket });
        client
            .post(url("/admin/migrate")?)
            .header("content-type", "application/json")
            .body(body.to_string())
    } else if options.cutover {
        client.post(url("/admin/migrate/cutover")?)
    } else if options.finish {
        client.post(url("/admin/migrate/finish")?)
    } else if options.rollback {
        client.post(url("/admin/migrate/rollback")?)
    } else {
        client.get(url("/admin/migrate")?)
    };
    let mut state = answer(base, request).await?;
    if let Some(phase) = &options.wait_for {
        loop {
            let now = state.as_ref().map(phase_name);
            if now.as_deref() == Some(phase.as_str()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
            state = answer(base, client.get(url("/admin/migrate")?)).await?;
        }
    }
    Ok(state)
}

async fn answer(
    base: &Url,
    request: reqwest::RequestBuilder,
) -> Result<Option<MigrationState>, String> {
    let body = super::answer_of(base, request)
        .await?
        .map_err(|e| format!("{}: {}", e.code, e.message))?;
    let answer: Answer = serde_json::from_slice(&body)
        .map_err(|e| format!("{base} answered what is not a migration: {e}"))?;
    Ok(answer.migration)
}

fn phase_name(state: &MigrationState) -> String {
    serde_json::to_value(state.phase)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The lines the command prints.
pub fn describe(state: Option<&MigrationState>) -> String {
    let Some(s) = state else {
        return "no migration".into();
    };
    let mut lines = vec![
        format!("phase      {}", phase_name(s)),
        format!(
            "target     {}{}",
            s.to,
            s.bucket
                .as_deref()
                .map(|b| format!(" (bucket {b})"))
                .unwrap_or_default()
        ),
    ];
    if let Some(b) = &s.backfill {
        let r = &b.report;
        lines.push(format!(
            "backfill   {} originals, {} copied, {} removed; ranges {} checked, {} equal{}",
            r.originals,
            r.copied,
            r.removed,
            r.ranges_checked,
            r.ranges_equal,
            if b.finished_ms.is_some() {
                ""
            } else {
                " (under way)"
            }
        ));
    }
    lines.push(format!(
        "mirrored   {} writes failed, {} queued; shadow reads {} same, {} different, {} absent",
        s.mirrored_writes_failed,
        s.mirrored_writes_queued,
        s.shadow_same,
        s.shadow_different,
        s.shadow_absent
    ));
    lines.push(format!("next       {}", s.next));
    lines.join("\n")
}
