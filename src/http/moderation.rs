//! The moderation blocklist's routes: `POST /v1/blocklist` (an entry as JSON, or an image
//! whose hashes are listed), `DELETE /v1/blocklist/<id>` (lifting it) and
//! `GET /v1/blocklist`. Listing takes stored content down and lifting gives it back, so
//! both are removals (never open: `Service::check_removal`), and the list is guarded as the
//! takedown list is. The work is `pipeline/moderation/blocklist.rs`'s.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap};
use axum::response::Response;
use serde::Deserialize;

use super::admin::removal;
use super::Service;
use crate::error::Error;
use crate::maps::BlockEntry;
use crate::wire::{BlockAnswer, BlocklistAnswer, UnblockAnswer};

#[derive(Deserialize)]
pub struct ImageQuery {
    radius: Option<u32>,
    note: Option<String>,
}

/// `POST /v1/blocklist`: JSON `{"sha256", "fingerprint", "radius", "note"}`, or an image
/// body (any other content type) with `radius` and `note` in the query.
pub async fn block(
    State(service): State<Service>,
    headers: HeaderMap,
    Query(query): Query<ImageQuery>,
    body: Bytes,
) -> Response {
    removal(|| async {
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.trim_start().starts_with("application/json"));
        let (asked, image) = if json {
            let asked: BlockEntry = serde_json::from_slice(&body).map_err(|e| {
                Error::invalid_option(
                    "body",
                    format!("expected {{\"sha256\", \"fingerprint\", \"radius\", \"note\"}}: {e}"),
                )
            })?;
            (asked, None)
        } else {
            if body.is_empty() {
                return Err(Error::invalid_option(
                    "body",
                    "send an image, or JSON with a sha256 or a fingerprint",
                ));
            }
            let asked = BlockEntry {
                radius: query.radius,
                note: query.note,
                ..BlockEntry::default()
            };
            (asked, Some(body))
        };
        let listed = service.pipeline().block(asked, image).await?;
        Ok(BlockAnswer {
            entry: listed.entry,
            newly_listed: listed.newly_listed,
            taken_down: listed.taken_down.iter().map(|h| h.to_hex()).collect(),
        })
    })
    .await
}

/// `DELETE /v1/blocklist/<id>`: 404 when no entry has that id.
pub async fn unblock((State(service), Path(id)): (State<Service>, Path<String>)) -> Response {
    let pipeline = service.pipeline().clone();
    removal(|| async move {
        match pipeline.unblock(&id).await? {
            none if none.is_empty() => Err(Error::NotFound(format!("no blocklist entry `{id}`"))),
            lifted => Ok(UnblockAnswer { id, lifted }),
        }
    })
    .await
}

/// `GET /v1/blocklist`: every entry, by id (guarded as the takedown list is).
pub async fn list(State(service): State<Service>) -> Response {
    removal(|| async {
        Ok(BlocklistAnswer {
            entries: service.pipeline().blocklist().await?,
        })
    })
    .await
}
