//! Routes that remove stored data: `DELETE /v1/urls?url=<url>`, `DELETE /v1/originals/<hash>`
//! (a takedown) and `DELETE /v1/takedowns/<hash>` (lifting it), with `GET /v1/takedowns`
//! listing what is taken down. They are never open: with no token configured they answer
//! 403 `admin_disabled`, and with tokens they need one with the `moderate` scope, the admin
//! token's included (`Service::check_removal`). `POST /admin/check` starts the online check
//! of the store (which deletes unreferenced blobs when asked to apply) and `GET /admin/check`
//! reads its report, under the same guard.

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use super::Service;
use crate::error::Error;
use crate::fetch::client::canonical_url;
use crate::hash::ContentHash;
use crate::wire::{
    ForgottenUrlAnswer, LiftedAnswer, TakedownAnswer, TakedownEntry, TakedownsAnswer,
};

#[derive(Deserialize)]
pub struct UrlQuery {
    url: Option<String>,
}

/// `DELETE /v1/urls?url=<url>`: forgets one URL's entry; its next request downloads again.
pub async fn forget_url(State(service): State<Service>, Query(query): Query<UrlQuery>) -> Response {
    removal(|| async {
        let raw = query
            .url
            .ok_or_else(|| Error::invalid_option("url", "the URL to forget is required"))?;
        let url =
            canonical_url(&raw, service.config().limits.max_url_bytes).map_err(Error::from)?;
        let hash = service.pipeline().forget_url(&url).await?;
        Ok(ForgottenUrlAnswer {
            url: url.to_string(),
            forgotten: hash.is_some(),
            hash,
        })
    })
    .await
}

/// A hash named in a removal's path: a malformed one is a bad request (not a 404: nothing by
/// that name can ever be stored, so the caller has the wrong name).
pub(super) fn path_hash(raw: &str) -> Result<ContentHash, Error> {
    raw.parse()
        .map_err(|()| Error::invalid_option("hash", "must be 64 hexadecimal digits (SHA-256)"))
}

/// Runs a removal route's work (its guard passed: `routes.rs`) and answers its result as
/// JSON (or its error in docs/api.md's shape).
pub(super) async fn removal<T, F>(work: impl FnOnce() -> F) -> Response
where
    T: serde::Serialize,
    F: std::future::Future<Output = Result<T, Error>>,
{
    match work().await {
        Ok(answer) => Json(answer).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `DELETE /v1/originals/<hash>`: takes the content down everywhere (see
/// `pipeline/moderation/removal.rs`).
pub async fn take_down(State(service): State<Service>, Path(raw): Path<String>) -> Response {
    removal(|| async {
        let hash = path_hash(&raw)?;
        Ok(TakedownAnswer::from(
            service.pipeline().take_down(&hash).await?,
        ))
    })
    .await
}

/// `DELETE /v1/originals?url=<url>`: takes down the content a URL is served from (404 when
/// the URL has no entry).
pub async fn take_down_url(
    State(service): State<Service>,
    Query(query): Query<UrlQuery>,
) -> Response {
    removal(|| async {
        let raw = query.url.ok_or_else(|| {
            Error::invalid_option("url", "the URL whose content to take down is required")
        })?;
        let url =
            canonical_url(&raw, service.config().limits.max_url_bytes).map_err(Error::from)?;
        let done = service.pipeline().take_down_url(&url).await?;
        let done = done
            .ok_or_else(|| Error::NotFound(format!("no entry for {url}: take it down by hash")))?;
        Ok(TakedownAnswer::from(done))
    })
    .await
}

/// `DELETE /v1/takedowns/<hash>`: lifts a takedown.
pub async fn lift_takedown(State(service): State<Service>, Path(raw): Path<String>) -> Response {
    removal(|| async {
        let hash = path_hash(&raw)?;
        Ok(LiftedAnswer::from(
            service.pipeline().lift_takedown(&hash).await?,
        ))
    })
    .await
}

/// `GET /v1/takedowns`: every hash taken down.
pub async fn takedowns(State(service): State<Service>) -> Response {
    removal(|| async {
        let list = service.pipeline().takedowns().await?;
        Ok(TakedownsAnswer {
            takedowns: list
                .into_iter()
                .map(|(hash, at)| TakedownEntry {
                    hash: hash.to_hex(),
                    taken_down_ms: at,
                })
                .collect(),
        })
    })
    .await
}

#[derive(Deserialize)]
pub struct CheckQuery {
    apply: Option<bool>,
}

/// What `POST /admin/check` and `GET /admin/check` answer.
#[derive(serde::Serialize)]
pub struct CheckAnswer {
    /// This request started a run (`POST` only; a run already under way here is not
    /// started twice).
    #[serde(skip_serializing_if = "Option::is_none")]
    started: Option<bool>,
    /// The check as the maps keep it, whichever node ran it; `null` before the first.
    check: Option<crate::pipeline::CheckState>,
}

/// `POST /admin/check[?apply=true]`: starts the online check of the store in the background
/// (`pipeline/walks/check.rs`); 202 with where it stands.
pub async fn start_check(
    State(service): State<Service>,
    Query(query): Query<CheckQuery>,
) -> Response {
    let answer = async {
        let started = service.pipeline().start_check(query.apply.unwrap_or(false));
        Ok::<_, Error>(CheckAnswer {
            started: Some(started),
            check: service.pipeline().check_state().await?,
        })
    };
    match answer.await {
        Ok(answer) => (axum::http::StatusCode::ACCEPTED, Json(answer)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `GET /admin/check`: the online check's position and report.
pub async fn check(State(service): State<Service>) -> Response {
    removal(|| async {
        Ok(CheckAnswer {
            started: None,
            check: service.pipeline().check_state().await?,
        })
    })
    .await
}

/// What `/admin/migrate` answers.
#[derive(serde::Serialize)]
pub struct MigrationAnswer {
    migration: Option<crate::pipeline::MigrationState>,
}

/// What `POST /admin/migrate` is sent.
#[derive(Deserialize)]
pub struct MigrateRequest {
    to: String,
    #[serde(default)]
    bucket: Option<String>,
}

/// A migration route's work (its guard passed: a token configured and the admin scope
/// presented), answered with the migration's state.
async fn migration<F>(service: &Service, status: axum::http::StatusCode, work: F) -> Response
where
    F: std::future::Future<Output = Result<(), Error>>,
{
    let done = async {
        work.await?;
        Ok::<_, Error>(MigrationAnswer {
            migration: service.pipeline().migration_state().await?,
        })
    };
    match done.await {
        Ok(answer) => (status, Json(answer)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `GET /admin/migrate`: where the maps' migration stands.
pub async fn migration_status(State(service): State<Service>) -> Response {
    migration(&service, axum::http::StatusCode::OK, async { Ok(()) }).await
}

/// `POST /admin/migrate` (`{"to": …, "bucket": …}`): starts moving the maps (and the blob
/// store) while the node serves (`pipeline/migrate/`).
pub async fn migrate(State(service): State<Service>, body: axum::body::Bytes) -> Response {
    let pipeline = service.pipeline().clone();
    let work = async move {
        let asked: MigrateRequest = serde_json::from_slice(&body)
            .map_err(|e| Error::invalid_option("body", format!("{{\"to\": …}} expected: {e}")))?;
        pipeline
            .migrate_start(&asked.to, asked.bucket.as_deref())
            .await
    };
    migration(&service, axum::http::StatusCode::ACCEPTED, work).await
}

/// `POST /admin/migrate/{step}`: `cutover`, `finish` or `rollback`.
pub async fn migration_step(State(service): State<Service>, Path(step): Path<String>) -> Response {
    let pipeline = service.pipeline().clone();
    let work = async move {
        match step.as_str() {
            "cutover" => pipeline.migrate_cutover().await,
            "finish" => pipeline.migrate_finish().await,
            "rollback" => pipeline.migrate_rollback().await,
            other => Err(Error::NotFound(format!(
                "no migration step `{other}`: cutover, finish or rollback"
            ))),
        }
    };
    migration(&service, axum::http::StatusCode::OK, work).await
}
