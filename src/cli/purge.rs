//! `imgcas purge <hash|url>`: takes content down — by hash, or the content a URL is served
//! from — on the local data dir (opened here: on the embedded maps, stop the server first) or
//! on a running server (`--server`, with the admin token). `--forget-url` only forgets a URL's
//! entry; `--lift` lifts a hash's takedown. Prints what went; exit 1 when the target names
//! nothing (a URL with no entry).

use std::time::Duration;

use url::Url;

use imgcas::config::Config;
use imgcas::error::Error;
use imgcas::fetch::client::canonical_url;
use imgcas::hash::ContentHash;
use imgcas::metrics::Metrics;
use imgcas::pipeline::Pipeline;
use imgcas::wire::{ErrorBody, ForgottenUrlAnswer, LiftedAnswer, TakedownAnswer};

#[derive(Debug, Clone, clap::Args)]
pub struct PurgeOptions {
    /// A SHA-256 (64 hexadecimal digits), or a source URL (its content is taken down).
    pub target: String,
    /// Only forget the URL's entry (its next request downloads again); nothing is taken down.
    #[arg(long, conflicts_with = "lift")]
    pub forget_url: bool,
    /// Lift the takedown of a hash instead (its URLs download again on their next request).
    #[arg(long)]
    pub lift: bool,
    #[command(flatten)]
    pub at: super::ServerOrLocal,
    /// Print the answer as JSON (the route's body) instead of a line.
    #[arg(long)]
    pub json: bool,
}

/// What was asked, decided from the arguments before any work.
enum Action {
    TakeDown(ContentHash),
    TakeDownUrl(Url),
    ForgetUrl(Url),
    Lift(ContentHash),
}

/// What was done: one of the routes' answers.
pub enum Done {
    TakenDown(TakedownAnswer),
    Forgotten(ForgottenUrlAnswer),
    Lifted(LiftedAnswer),
}

impl Done {
    /// The line printed (or the JSON with `--json`).
    pub fn describe(&self, json: bool) -> String {
        let text =
            match (self, json) {
                (Done::TakenDown(a), true) => serde_json::to_string_pretty(a),
                (Done::Forgotten(a), true) => serde_json::to_string_pretty(a),
                (Done::Lifted(a), true) => serde_json::to_string_pretty(a),
                (Done::TakenDown(a), false) => Ok(format!(
                "taken down {}{}: {} variants removed, {} URL entries forgotten, {} bytes freed",
                a.hash,
                if a.newly_listed { "" } else { " (listed before)" },
                a.variants_removed,
                a.urls_forgotten,
                a.bytes_freed
            )),
                (Done::Forgotten(a), false) => Ok(match &a.hash {
                    Some(h) => format!("forgot {} (it mapped to {h})", a.url),
                    None => format!("{} had no entry", a.url),
                }),
                (Done::Lifted(a), false) => Ok(match a.lifted {
                    true => format!(
                        "takedown of {} lifted; {} URL entries forgotten",
                        a.hash, a.urls_forgotten
                    ),
                    false => format!("{} was not taken down", a.hash),
                }),
            };
        text.unwrap_or_else(|e| format!("(answer not printable: {e})"))
    }
}

fn action(options: &PurgeOptions, max_url_bytes: usize) -> Result<Action, String> {
    let target = options.target.trim();
    let as_hash = target.parse::<ContentHash>().ok();
    let as_url = || {
        canonical_url(target, max_url_bytes).map_err(|e| {
            format!("{target} is neither a SHA-256 (64 hexadecimal digits) nor a source URL: {e}")
        })
    };
    Ok(match (as_hash, options.forget_url, options.lift) {
        (Some(hash), false, false) => Action::TakeDown(hash),
        (Some(hash), false, true) => Action::Lift(hash),
        (None, false, true) => return Err("--lift takes a hash".into()),
        (Some(_), true, _) => return Err("--forget-url takes a URL".into()),
        (None, true, _) => Action::ForgetUrl(as_url()?),
        (None, false, false) => Action::TakeDownUrl(as_url()?),
    })
}

/// Runs the command: `Err` for what stops it before any work (bad arguments, a data dir or
/// server that cannot be reached); `Ok(Err)` for a refusal of the work itself.
pub async fn run(
    config: Config,
    options: &PurgeOptions,
) -> Result<Result<Done, ErrorBody>, String> {
    let action = action(options, config.limits.max_url_bytes)?;
    match &options.at.server {
        Some(base) => remote(base, options.at.token(&config), action).await,
        None => {
            let pipeline = Pipeline::open(config, Metrics::default())
                .await
                .map_err(|e| e.to_string())?;
            let done = local(&pipeline, action).await;
            pipeline.flush().await.map_err(|e| e.to_string())?;
            Ok(done.map_err(|e| ErrorBody::from(&e)))
        }
    }
}

async fn local(pipeline: &Pipeline, action: Action) -> Result<Done, Error> {
    let taken_down = |r: imgcas::pipeline::TakenDown| Done::TakenDown(r.into());
    Ok(match action {
        Action::TakeDown(hash) => taken_down(pipeline.take_down(&hash).await?),
        Action::TakeDownUrl(url) => match pipeline.take_down_url(&url).await? {
            Some(r) => taken_down(r),
            None => {
                return Err(Error::NotFound(format!(
                    "no entry for {url}: take it down by hash"
                )))
            }
        },
        Action::ForgetUrl(url) => {
            let hash = pipeline.forget_url(&url).await?;
            Done::Forgotten(ForgottenUrlAnswer {
                url: url.to_string(),
                forgotten: hash.is_some(),
                hash,
            })
        }
        Action::Lift(hash) => Done::Lifted(pipeline.lift_takedown(&hash).await?.into()),
    })
}

async fn remote(
    base: &Url,
    token: Option<&str>,
    action: Action,
) -> Result<Result<Done, ErrorBody>, String> {
    let client = super::server_client("imgcas-purge", token, Duration::from_secs(600))?;
    let endpoint = |path: &str| {
        base.join(path)
            .map_err(|e| format!("bad server URL {base}: {e}"))
    };
    let with_url = |path: &str, url: &Url| -> Result<Url, String> {
        let mut e = endpoint(path)?;
        e.query_pairs_mut().append_pair("url", url.as_str());
        Ok(e)
    };
    let target = match &action {
        Action::TakeDown(hash) => endpoint(&format!("/v1/originals/{hash}"))?,
        Action::TakeDownUrl(url) => with_url("/v1/originals", url)?,
        Action::ForgetUrl(url) => with_url("/v1/urls", url)?,
        Action::Lift(hash) => endpoint(&format!("/v1/takedowns/{hash}"))?,
    };
    let body = match super::answer_of(base, client.delete(target)).await? {
        Ok(body) => body,
        Err(refused) => return Ok(Err(refused)),
    };
    let unreadable =
        |e: serde_json::Error| format!("{base} answered what is not a purge answer: {e}");
    Ok(Ok(match action {
        Action::TakeDown(_) | Action::TakeDownUrl(_) => {
            Done::TakenDown(serde_json::from_slice(&body).map_err(unreadable)?)
        }
        Action::ForgetUrl(_) => Done::Forgotten(serde_json::from_slice(&body).map_err(unreadable)?),
        Action::Lift(_) => Done::Lifted(serde_json::from_slice(&body).map_err(unreadable)?),
    }))
}
