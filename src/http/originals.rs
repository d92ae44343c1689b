//! `POST /v1/originals` (raw or multipart upload), `GET/HEAD /v1/originals/<sha256>` (the
//! bytes) and `GET /v1/originals/<sha256>/info` (what they are).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Multipart, Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use imgcas_processors::SourceFormat;

use super::{etag_matches, Service};
use crate::error::Error;
use crate::hash::ContentHash;
use crate::maps::OriginalInfo;
use crate::pipeline::Uploaded;
use crate::wire::{
    AutoQualityAnswer, FactsAnswer, InfoAnswer, OriginalAnswer, SimilarAnswer, SimilarOriginal,
    UploadAnswer,
};

fn upload_answer(u: &Uploaded) -> UploadAnswer {
    UploadAnswer {
        original: OriginalAnswer::new(u.hash, &u.info),
        duplicate: u.duplicate,
        url: format!("/v1/image/{}", u.hash),
        near_duplicate_of: u.near_duplicate_of,
    }
}

fn too_large(service: &Service) -> Error {
    Error::SourceTooLarge {
        limit: service.pipeline().max_source_bytes(),
    }
}

/// How long an upload may take before its average rate is held against it.
const UPLOAD_GRACE: Duration = Duration::from_secs(10);

/// The request's body, ended with an error when it arrives slower than `min_rate` bytes per
/// second on average after [`UPLOAD_GRACE`] (a stalled client included: each chunk has a
/// deadline). `too_slow` is set when that happened.
fn paced(body: Body, min_rate: u64, too_slow: Arc<AtomicBool>) -> Body {
    let started = tokio::time::Instant::now();
    let rate = min_rate.max(1) as f64;
    let chunks =
        futures_util::stream::unfold(Some((body.into_data_stream(), 0u64)), move |state| {
            let too_slow = too_slow.clone();
            async move {
                let (mut stream, received) = state?;
                let due = UPLOAD_GRACE.max(Duration::from_secs_f64((received + 1) as f64 / rate));
                match tokio::time::timeout_at(started + due, stream.next()).await {
                    Ok(Some(Ok(chunk))) => {
                        let received = received + chunk.len() as u64;
                        Some((Ok(chunk), Some((stream, received))))
                    }
                    Ok(Some(Err(e))) => Some((Err(e), None)),
                    Ok(None) => None,
                    Err(_) => {
                        too_slow.store(true, Ordering::Relaxed);
                        Some((Err(axum::Error::new("upload too slow")), None))
                    }
                }
            }
        });
    Body::from_stream(chunks)
}

/// The bodies to store: the raw body, or every file part of a multipart form.
async fn bodies(service: &Service, request: Request) -> Result<Vec<Bytes>, Error> {
    let min_rate = service.config().server.min_upload_rate;
    let too_slow = Arc::new(AtomicBool::new(false));
    let request = request.map(|body| paced(body, min_rate, too_slow.clone()));
    let slow = || {
        too_slow.load(Ordering::Relaxed).then(|| {
            Error::TooSlow(format!(
                "the upload arrived slower than {min_rate} bytes/s after {}s",
                UPLOAD_GRACE.as_secs()
            ))
        })
    };
    read_bodies(service, request)
        .await
        .map_err(|e| slow().unwrap_or(e))
}

async fn read_bodies(service: &Service, request: Request) -> Result<Vec<Bytes>, Error> {
    let limit = service.pipeline().max_source_bytes();
    let is_multipart = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.to_ascii_lowercase().starts_with("multipart/form-data"));
    if !is_multipart {
        let body = axum::body::to_bytes(request.into_body(), limit as usize)
            .await
            .map_err(|_| too_large(service))?;
        return Ok(vec![body]);
    }
    let mut form = Multipart::from_request(request, &())
        .await
        .map_err(|e| Error::invalid_option("body", e.body_text()))?;
    let mut out = Vec::new();
    loop {
        let field = match form.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                return Err(too_large(service))
            }
            Err(e) => return Err(Error::invalid_option("body", e.body_text())),
        };
        if field.file_name().is_none() {
            continue;
        }
        let bytes = field.bytes().await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                too_large(service)
            } else {
                Error::invalid_option("body", e.body_text())
            }
        })?;
        if bytes.len() as u64 > limit {
            return Err(too_large(service));
        }
        out.push(bytes);
    }
    if out.is_empty() {
        return Err(Error::invalid_option("body", "the form has no file part"));
    }
    Ok(out)
}

/// 201 when any original is new, 200 when all were stored already. One file answers with an
/// object, several with an array of them.
pub async fn upload(State(service): State<Service>, request: Request) -> Response {
    let _slot = match service.upload_slot() {
        Ok(slot) => slot,
        Err(e) => return e.into_response(),
    };
    let bodies = match bodies(&service, request).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let answers = match service.pipeline().upload_all(bodies).await {
        Ok(answers) => answers,
        Err(e) => return e.into_response(),
    };
    let status = if answers.iter().any(|u| !u.duplicate) {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut response = match answers.as_slice() {
        [one] => (status, Json(upload_answer(one))).into_response(),
        many => {
            let all: Vec<UploadAnswer> = many.iter().map(upload_answer).collect();
            (status, Json(all)).into_response()
        }
    };
    if let [one] = answers.as_slice() {
        if let Ok(v) = HeaderValue::from_str(&format!("/v1/originals/{}", one.hash)) {
            response.headers_mut().insert(header::LOCATION, v);
        }
    }
    response
}

async fn lookup(service: &Service, hash: &str) -> Result<(ContentHash, OriginalInfo), Error> {
    let not_found = || Error::NotFound(format!("no original with hash {hash}"));
    let hash: ContentHash = hash.parse().map_err(|()| not_found())?;
    service
        .pipeline()
        .may_serve(&[hash])
        .map_err(|refused| refused.error)?;
    let info = service
        .pipeline()
        .original(&hash)
        .await?
        .ok_or_else(not_found)?;
    Ok((hash, info))
}

pub async fn original(
    State(service): State<Service>,
    Path(hash): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    // The original is the full-size source: with signing on, it needs a signed URL as any
    // processed image does.
    if let Err(e) = service.check_signature(&uri) {
        return e.into_response();
    }
    let (hash, info) = match lookup(&service, &hash).await {
        Ok(found) => found,
        Err(e) => return e.into_response(),
    };
    let etag = format!("\"{hash}\"");
    let mut response = if etag_matches(&headers, &etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        match service.pipeline().original_bytes(&hash).await {
            Ok(bytes) => bytes.into_response(),
            Err(e) => return e.into_response(),
        }
    };
    let format = info.format;
    // A drawing (SVG) is a document that may carry script: its bytes go out as a download
    // in a sandbox, never as an image a browser would run.
    let document = format.is_some_and(SourceFormat::is_vector);
    let mime = match format {
        Some(f) if !document => f.mime(),
        _ => "application/octet-stream",
    };
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(mime));
    if document {
        let sandboxed = [
            (header::CONTENT_DISPOSITION, "attachment"),
            (
                header::CONTENT_SECURITY_POLICY,
                "sandbox; default-src 'none'",
            ),
        ];
        for (name, value) in sandboxed {
            h.insert(name, HeaderValue::from_static(value));
        }
    }
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    response
}

pub async fn info(State(service): State<Service>, Path(hash): Path<String>, uri: Uri) -> Response {
    if let Err(e) = service.check_signature(&uri) {
        return e.into_response();
    }
    let answer = async {
        let (hash, info) = lookup(&service, &hash).await?;
        info_answer(&service, hash, &info).await
    };
    match answer.await {
        Ok(answer) => Json(answer).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The most near-duplicates `info` counts (each is looked up in the index): a count that
/// reaches it means as many or more.
const NEAR_DUPLICATES_COUNTED: usize = 1000;

/// What `info` (and `format=json`) answer of an indexed original.
pub(super) async fn info_answer(
    service: &Service,
    hash: ContentHash,
    info: &OriginalInfo,
) -> Result<InfoAnswer, Error> {
    let pipeline = service.pipeline();
    // What the original is answers even when its fingerprint cannot be had (its bytes
    // missing from the blob store, say).
    let near = if pipeline.near_dedup_on() {
        pipeline
            .similar(&hash, pipeline.report_radius(), NEAR_DUPLICATES_COUNTED)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(%hash, error = %e, "fingerprint unavailable");
                None
            })
    } else {
        None
    };
    let (fingerprint, near_duplicates) = match near {
        Some((fp, similar, _)) => (Some(fp.hex()), similar.len() as u64),
        None => (None, 0),
    };
    // Kept with the entry (read, not decoded), unless not computed yet; like the
    // fingerprint, their absence (bytes missing from the blob store, say) leaves them null.
    let facts = pipeline.facts_of(&hash).await.unwrap_or_else(|e| {
        tracing::warn!(%hash, error = %e, "facts unavailable");
        None
    });
    let facts = match facts {
        Some(f) => FactsAnswer {
            blurhash: Some(f.blurhash),
            thumbhash: Some(f.thumbhash),
            dominant_color: Some(f.dominant_color),
            has_alpha: f.has_alpha,
            animated: f.frames > 1,
            frames: f.frames,
            duration_ms: (f.frames > 1).then_some(f.duration_ms),
        },
        None => FactsAnswer {
            blurhash: None,
            thumbhash: None,
            dominant_color: None,
            has_alpha: info.has_alpha,
            animated: false,
            frames: 1,
            duration_ms: None,
        },
    };
    // Like the facts, a listing that fails leaves the rest of the answer standing.
    let auto_quality = pipeline
        .auto_qualities(&hash)
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(%hash, error = %e, "q=auto choices unavailable");
            Vec::new()
        })
        .into_iter()
        .map(|(spec, chosen)| AutoQualityAnswer {
            spec,
            quality: chosen.quality,
            score: chosen.score(),
        })
        .collect();
    let first_seen = UNIX_EPOCH + Duration::from_millis(info.first_seen_ms);
    Ok(InfoAnswer {
        original: OriginalAnswer::new(hash, info),
        first_seen: humantime::format_rfc3339_seconds(first_seen).to_string(),
        fingerprint,
        near_duplicates,
        facts,
        auto_quality,
        focus: info.focus.as_ref().map(crate::wire::FocusAnswer::from),
    })
}

/// The largest `max_distance` accepted: 16 of the hash's 64 bits (past it, unrelated
/// pictures start to share hashes).
const MAX_DISTANCE: u32 = 16;

/// `GET /v1/originals/<hash>/similar?max_distance=N&limit=M`: other originals within N bits
/// (default the report radius), closest first. Behind the admin token when one is set: the
/// list names other merchants' originals.
pub async fn similar(
    State(service): State<Service>,
    Path(hash): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    let answer = async {
        let pipeline = service.pipeline();
        let (mut max_distance, mut limit) = (pipeline.report_radius(), 100usize);
        for (key, value) in &query {
            let number = |what: &str| {
                value.parse::<u64>().map_err(|_| {
                    Error::invalid_option(what, format!("`{value}` is not a whole number"))
                })
            };
            match key.as_str() {
                "max_distance" => {
                    let n = number("max_distance")?;
                    if n > u64::from(MAX_DISTANCE) {
                        return Err(Error::invalid_option(
                            "max_distance",
                            format!("must be at most {MAX_DISTANCE} (bits of 64)"),
                        ));
                    }
                    max_distance = n as u32;
                }
                "limit" => {
                    let n = number("limit")?;
                    if n == 0 || n > 1000 {
                        return Err(Error::invalid_option("limit", "must be 1 to 1000"));
                    }
                    limit = n as usize;
                }
                other => {
                    return Err(Error::invalid_option(
                        other,
                        "is not an option of this route",
                    ))
                }
            }
        }
        let (hash, _) = lookup(&service, &hash).await?;
        // With `dedup.near = off` no fingerprint is computed: nothing is similar.
        let found = match pipeline.near_dedup_on() {
            true => pipeline.similar(&hash, max_distance, limit).await?,
            false => None,
        };
        let (found, partial) = found
            .map(|(_, found, partial)| (found, partial))
            .unwrap_or_default();
        Ok::<_, Error>(SimilarAnswer {
            hash,
            max_distance,
            partial,
            similar: found
                .into_iter()
                .map(|s| SimilarOriginal {
                    hash: s.found.hash,
                    distance: s.found.distance,
                    width: s.info.width,
                    height: s.info.height,
                    bytes: s.info.bytes,
                    format: s.info.format.map(|f| f.name().to_string()),
                })
                .collect(),
        })
    };
    match answer.await {
        Ok(answer) => Json(answer).into_response(),
        Err(e) => e.into_response(),
    }
}
