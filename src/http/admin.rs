//! Routes that remove stored data: `DELETE /v1/urls?url=<url>`. They are never open: with no
//! admin token configured they answer 403 `admin_disabled`, and with one they need it
//! (`Service::check_removal`).

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use super::Service;
use crate::error::Error;
use crate::fetch::client::canonical_url;
use crate::wire::ForgottenUrlAnswer;

#[derive(Deserialize)]
pub struct UrlQuery {
    url: Option<String>,
}

/// `DELETE /v1/urls?url=<url>`: forgets one URL's entry; its next request downloads again.
pub async fn forget_url(
    State(service): State<Service>,
    headers: HeaderMap,
    Query(query): Query<UrlQuery>,
) -> Response {
    if let Err(e) = service.check_removal(&headers) {
        return e.into_response();
    }
    let Some(raw) = query.url else {
        return Error::invalid_option("url", "the URL to forget is required").into_response();
    };
    let url = match canonical_url(&raw) {
        Ok(url) => url,
        Err(e) => return Error::from(e).into_response(),
    };
    match service.pipeline().forget_url(&url).await {
        Ok(hash) => Json(ForgottenUrlAnswer {
            url: url.to_string(),
            forgotten: hash.is_some(),
            hash,
        })
        .into_response(),
        Err(e) => e.into_response(),
    }
}
