//! Private sources: `url=s3://<bucket>/<key>` for the buckets `fetch.source_buckets` and
//! `[fetch.buckets.<name>]` name (any other is refused before any traffic), read with the
//! node's S3 configuration (`storage.s3`'s endpoint, region and path style; credentials from
//! the AWS chain), or with a bucket's own endpoint and keys where its table gives them, and
//! revalidated as an HTTP URL is: the object's `ETag` and `Last-Modified` are its validators,
//! sent back with `GetObject` as `If-None-Match` (or `If-Modified-Since` without an ETag). From there an S3
//! source is any source: the same URL map, dedup, error cache and takedowns.

use std::collections::BTreeMap;

use aws_sdk_s3::primitives::DateTime;
use aws_sdk_s3::Client;
use bytes::{Bytes, BytesMut};
use tokio::sync::OnceCell;
use url::Url;

use super::{FetchError, FetchOutcome, Validators};
use crate::config::{S3Config, SourceBucket};

/// The buckets sources may be read from, and the clients that read them (each made at its
/// first read: most nodes never need one).
pub struct Buckets {
    allowed: Vec<String>,
    s3: S3Config,
    /// The client of the buckets read with `storage.s3`'s settings.
    client: OnceCell<Client>,
    /// The buckets with settings of their own, and each one's client.
    own: BTreeMap<String, (SourceBucket, OnceCell<Client>)>,
}

impl Buckets {
    pub fn new(allowed: &[String], own: &BTreeMap<String, SourceBucket>, s3: &S3Config) -> Buckets {
        Buckets {
            allowed: allowed.iter().chain(own.keys()).cloned().collect(),
            s3: s3.clone(),
            client: OnceCell::new(),
            own: own
                .iter()
                .map(|(name, settings)| (name.clone(), (settings.clone(), OnceCell::new())))
                .collect(),
        }
    }

    /// The client that reads `bucket`: its own settings' where it has them (what they leave
    /// out is `storage.s3`'s), else the shared one.
    async fn client(&self, bucket: &str) -> &Client {
        let (settings, cell) = match self.own.get(bucket) {
            Some((settings, cell)) => (Some(settings), cell),
            None => (None, &self.client),
        };
        cell.get_or_init(|| {
            let endpoint = settings.and_then(|s| s.endpoint.as_deref());
            let keys = settings
                .and_then(|s| Some((s.access_key_id.as_deref()?, s.secret_access_key.as_deref()?)));
            crate::s3::client(crate::s3::Endpoint {
                url: endpoint.or(self.s3.endpoint.as_deref()),
                region: settings
                    .and_then(|s| s.region.as_deref())
                    .unwrap_or(&self.s3.region),
                force_path_style: settings
                    .and_then(|s| s.force_path_style)
                    .unwrap_or(self.s3.force_path_style),
                keys,
                timeouts: crate::s3::Timeouts {
                    connect: self.s3.connect_timeout,
                    first_byte: self.s3.first_byte_timeout,
                    operation: self.s3.timeout,
                },
            })
        })
        .await
    }

    /// Refuses an `s3://` URL whose bucket is not listed, or whose key is not a plain path,
    /// before any traffic.
    pub fn check(&self, url: &Url) -> Result<(), FetchError> {
        check_object_key(url)?;
        let bucket = url.host_str().unwrap_or("");
        match self.allowed.iter().any(|b| b == bucket) {
            true => Ok(()),
            false => Err(FetchError::NotAllowed(format!(
                "bucket {bucket} is not among the source buckets (IMGCAS_SOURCE_BUCKETS)"
            ))),
        }
    }

    /// Reads the object `url` names, conditionally when `validators` are given; at most
    /// `max_bytes` of it.
    pub async fn get(
        &self,
        url: &Url,
        validators: Option<&Validators>,
        max_bytes: u64,
    ) -> Result<FetchOutcome, FetchError> {
        let bucket = url.host_str().unwrap_or("");
        let key = percent_encoding::percent_decode_str(url.path().trim_start_matches('/'))
            .decode_utf8()
            .map_err(|_| FetchError::BadUrl("the object key is not UTF-8".into()))?;
        let client = self.client(bucket).await;
        let mut request = client.get_object().bucket(bucket).key(key.as_ref());
        // The ETag alone when there is one: S3 answers 304 when `If-Modified-Since` holds even
        // if `If-None-Match` does not (an object replaced within the same second).
        match validators {
            Some(Validators {
                etag: Some(etag), ..
            }) => request = request.if_none_match(etag),
            Some(Validators {
                last_modified: Some(date),
                ..
            }) => {
                if let Ok(since) = httpdate::parse_http_date(date) {
                    request = request.if_modified_since(DateTime::from(since));
                }
            }
            _ => {}
        }
        let answer = match request.send().await {
            Ok(answer) => answer,
            Err(e) => {
                let status = e.raw_response().map(|r| r.status().as_u16());
                return match status {
                    Some(304) if validators.is_some() => Ok(FetchOutcome::NotModified {
                        validators: Validators {
                            etag: e
                                .raw_response()
                                .and_then(|r| r.headers().get("etag"))
                                .map(str::to_string),
                            last_modified: None,
                        },
                    }),
                    Some(304) => Err(FetchError::UnexpectedNotModified),
                    Some(404) => Err(FetchError::NotFound(404)),
                    Some(code) => Err(FetchError::Status(code)),
                    None => Err(FetchError::Connect(format!("S3: {e}"))),
                };
            }
        };
        if answer
            .content_length()
            .is_some_and(|n| n > 0 && n as u64 > max_bytes)
        {
            return Err(FetchError::TooLarge { limit: max_bytes });
        }
        let validators = Validators {
            etag: answer.e_tag().map(str::to_string),
            last_modified: answer
                .last_modified()
                .and_then(|d| std::time::SystemTime::try_from(*d).ok())
                .map(httpdate::fmt_http_date),
        };
        let mut body = answer.body;
        let mut bytes = BytesMut::new();
        while let Some(chunk) = body
            .try_next()
            .await
            .map_err(|e| FetchError::Body(format!("S3: {e}")))?
        {
            if (bytes.len() + chunk.len()) as u64 > max_bytes {
                return Err(FetchError::TooLarge { limit: max_bytes });
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(FetchOutcome::Fetched {
            bytes: Bytes::from(bytes),
            validators,
        })
    }
}

/// An `s3://` URL's key as the client wrote it (`raw`, the whole URL) must be a plain path
/// too: the URL parser removes `.` and `..` segments (written as such or as `%2e`), so that
/// [`check_object_key`], which sees the parsed URL, would find `a/../b.png` to be `b.png`
/// and a request for one object would read another. The parser also drops tabs and newlines
/// anywhere in a URL (`.\t.` is `..` to it), so they are dropped here first as well.
pub(crate) fn check_given_key(raw: &str) -> Result<(), FetchError> {
    let text: String = raw
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .collect();
    // `s3:` is not a special scheme: its authority ends at the first `/`, `?` or `#`, and
    // its path at the first `?` or `#`.
    let Some((_, rest)) = text.split_once("://") else {
        return Ok(());
    };
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    let Some((_, path)) = rest.split_once('/') else {
        return Ok(());
    };
    let dotted = path.split('/').find_map(|segment| {
        let decoded = percent_encoding::percent_decode_str(segment).decode_utf8_lossy();
        match decoded.as_ref() {
            "." => Some("a '.'"),
            ".." => Some("a '..'"),
            _ => None,
        }
    });
    match dotted {
        None => Ok(()),
        Some(which) => Err(FetchError::BadUrl(format!(
            "the object key has {which} segment; keys are plain paths"
        ))),
    }
}

/// An `s3://` URL's object key, percent-decoded, must be a plain path: no empty, `.` or `..`
/// segment. The SDK sends a key's dots and slashes as they are, so `..%2F` would reach the
/// endpoint as `/bucket/../other/…`, and a proxy or store that normalises paths would read
/// another bucket than the one the allow-list checked.
pub(crate) fn check_object_key(url: &Url) -> Result<(), FetchError> {
    let raw = url.path().strip_prefix('/').unwrap_or(url.path());
    if raw.is_empty() {
        return Err(FetchError::BadUrl("an s3 URL names an object key".into()));
    }
    let key = percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| FetchError::BadUrl("the object key is not UTF-8".into()))?;
    match key
        .split('/')
        .find(|segment| matches!(*segment, "" | "." | ".."))
    {
        None => Ok(()),
        Some(segment) => Err(FetchError::BadUrl(format!(
            "the object key has {} segment; keys are plain paths",
            match segment {
                "" => "an empty",
                "." => "a '.'",
                _ => "a '..'",
            }
        ))),
    }
}
