//! Batch ingestion, shared by `POST /v1/ingest` and the offline `imgcas ingest`: many URLs
//! resolved through the URL map, each with one conditional request (a merchant pushing a URL
//! is telling us it may have changed), and variants built before their first request
//! ("warm"). Results are the `wire` types, so the command reads a server's answer with the
//! same types it fills in when it works on the local data dir.

use std::time::Duration;

use futures_util::stream::{self, StreamExt};

use imgcas_processors::Spec;

use crate::admission::Asker;
use crate::error::Error;
use crate::fetch::client::canonical_url;
use crate::hash::ContentHash;
use crate::pipeline::{Pipeline, Source, Target};
use crate::wire::{
    credit_first, IngestAnswer, IngestRequest, ItemResult, OriginalAnswer, StoredItem, Summary,
    WarmResult,
};

/// URLs per request: enough to amortise a round trip, small enough that one request
/// finishes well inside a client's timeout at origin speeds.
pub const MAX_URLS: usize = 1000;
/// Warm specs per request.
pub const MAX_WARM: usize = 16;
/// The JSON body of `POST /v1/ingest` (1000 long URLs fit several times over).
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// URLs of one batch worked on at once. Origins are also bounded per host by the fetcher,
/// and processing by admission control; this bounds the batch's own memory and tasks.
const CONCURRENCY: usize = 16;
/// How often a warm run refused as `overloaded` is tried again (after its `Retry-After`).
const WARM_ATTEMPTS: u32 = 4;

/// A warm spec, parsed once per batch.
#[derive(Debug, Clone)]
pub struct WarmSpec {
    /// As given (without a leading `?`): what a remote warm puts in its query.
    pub text: String,
    spec: Spec,
}

/// `Accept` headers standing for the clients a `format=auto` variant is negotiated for:
/// JPEG XL-capable (Safari's header lists every modern format), AVIF-capable, WebP-only, and
/// neither. Under an order that ranks them otherwise (`formats.auto`), two may negotiate to
/// one variant, which is then warmed once.
const AUTO_ACCEPTS: [Option<&str>; 4] = [
    Some("image/jxl,image/avif,image/webp,*/*"),
    Some("image/avif,image/webp,*/*"),
    Some("image/webp,*/*"),
    None,
];

impl WarmSpec {
    /// The `Accept` headers to build this spec for: one per output a `format=auto` spec can
    /// negotiate to, else just "no preference".
    pub fn accepts(&self) -> &'static [Option<&'static str>] {
        if self.spec.varies_by_accept() {
            &AUTO_ACCEPTS
        } else {
            &[None]
        }
    }
}

/// Parses the `warm` list; a bad spec refuses the whole batch, naming the spec and option.
pub fn parse_warm(specs: &[String]) -> Result<Vec<WarmSpec>, Error> {
    if specs.len() > MAX_WARM {
        return Err(Error::BatchTooLarge(format!(
            "{} warm specs in one batch; the limit is {MAX_WARM}",
            specs.len()
        )));
    }
    specs
        .iter()
        .map(|text| {
            let text = text.trim_start_matches('?');
            if text
                .split('&')
                .any(|pair| pair.starts_with("url=") || pair.starts_with("sig="))
            {
                return Err(Error::invalid_option(
                    "warm",
                    format!("`{text}`: a warm spec holds processing options only"),
                ));
            }
            Spec::parse(text)
                .map(|spec| WarmSpec {
                    text: text.to_string(),
                    spec,
                })
                .map_err(|e| {
                    Error::invalid_option(
                        "warm",
                        format!("`{text}`: invalid option `{}`: {}", e.option, e.message),
                    )
                })
        })
        .collect()
}

/// Checks a batch's shape before any work: count limits (413) and an empty list (400).
pub fn check_batch(request: &IngestRequest) -> Result<Vec<WarmSpec>, Error> {
    if request.urls.is_empty() {
        return Err(Error::invalid_option("urls", "the batch has no URL"));
    }
    if request.urls.len() > MAX_URLS {
        return Err(Error::BatchTooLarge(format!(
            "{} URLs in one batch; the limit is {MAX_URLS}: split it",
            request.urls.len()
        )));
    }
    parse_warm(&request.warm)
}

/// Ingests every URL of a checked batch, at most [`CONCURRENCY`] at once, in request order.
pub async fn ingest_urls(
    pipeline: &Pipeline,
    urls: Vec<String>,
    warm: &[WarmSpec],
    asker: &Asker,
) -> IngestAnswer {
    let mut results: Vec<ItemResult> = stream::iter(urls)
        .map(|raw| ingest_url(pipeline, raw, warm, asker))
        .buffered(CONCURRENCY)
        .collect()
        .await;
    credit_first(&mut results);
    let summary = Summary::of(&results);
    IngestAnswer { results, summary }
}

/// One URL: a conditional request when known (a download when new), then the warm specs.
pub async fn ingest_url(
    pipeline: &Pipeline,
    raw: String,
    warm: &[WarmSpec],
    asker: &Asker,
) -> ItemResult {
    let url = match canonical_url(&raw, pipeline.max_url_bytes()) {
        Ok(url) => url,
        Err(e) => return ItemResult::failed(raw, &e.into()),
    };
    // A tenant over its budget downloads nothing more until it refills (issue 54).
    if let Err(e) = pipeline.check_budget(asker).await {
        return ItemResult::failed(raw, &e);
    }
    let resolved = match pipeline.resolve_url(&url, true).await {
        Ok(r) => r,
        Err(f) => return ItemResult::failed(raw, &f.error),
    };
    if resolved.downloaded {
        pipeline
            .charge_download(asker, resolved.fetched_bytes)
            .await;
    }
    if let Err(refused) = pipeline.may_serve(&[resolved.hash, resolved.source]) {
        return ItemResult::failed(raw, &refused.error);
    }
    let info = match pipeline.original(&resolved.hash).await {
        Ok(Some(info)) => info,
        Ok(None) => {
            let e = Error::Internal(format!("original {} is not indexed", resolved.hash));
            return ItemResult::failed(raw, &e);
        }
        Err(e) => return ItemResult::failed(raw, &e),
    };
    // A canonical mapping names its original; others are looked up (a failed lookup only
    // leaves the report without it).
    let near_duplicate_of = if resolved.source != resolved.hash {
        Some(resolved.hash)
    } else {
        pipeline.near_duplicate_report(&resolved.hash).await
    };
    let warm = warm_variants(pipeline, resolved.hash, warm, asker).await;
    ItemResult::stored(
        raw,
        StoredItem {
            original: OriginalAnswer::new(resolved.hash, &info),
            duplicate: !resolved.new_original,
            changed: resolved.changed,
            downloaded: resolved.downloaded,
            near_duplicate_of,
            warm,
        },
    )
}

/// Builds each warm spec's variant of `hash` (each output format of a `format=auto` spec),
/// going through the same single-flight and admission control as a request would, as
/// `asker`'s work (bulk).
pub async fn warm_variants(
    pipeline: &Pipeline,
    hash: ContentHash,
    warm: &[WarmSpec],
    asker: &Asker,
) -> Vec<WarmResult> {
    let mut out: Vec<WarmResult> = Vec::new();
    let source = Source::Hash(hash);
    for w in warm {
        // `quality.default` reaches a warm spec as it reaches the requests it warms for.
        let mut warm_spec = w.spec.clone();
        pipeline.quality_default().fill(&mut warm_spec);
        for accept in w.accepts() {
            let target = match pipeline.locate(&source, &warm_spec, *accept).await {
                Ok(t) => t,
                Err(f) => {
                    out.push(WarmResult::failed(w.spec.canonical(), (&f.error).into()));
                    continue;
                }
            };
            let spec = target.key.canonical_spec.clone();
            if out.iter().any(|r| r.spec == spec) {
                continue;
            }
            out.push(warm_one(pipeline, &target, spec, asker).await);
        }
    }
    out
}

async fn warm_one(pipeline: &Pipeline, target: &Target, spec: String, asker: &Asker) -> WarmResult {
    let mut attempt = 1;
    loop {
        match pipeline.variant_as(target, || asker.clone()).await {
            Ok(served) => {
                return WarmResult {
                    spec,
                    format: Some(served.format.name().to_string()),
                    bytes: Some(served.bytes.len() as u64),
                    quality: served.chosen.map(|c| c.quality),
                    score: served.chosen.and_then(|c| c.score()),
                    processed: served.ran_here,
                    error: None,
                }
            }
            // A batch can wait where an interactive request could not: retry after the
            // drain time admission control estimated, a few times.
            Err(f) if attempt < WARM_ATTEMPTS => match f.error {
                Error::Overloaded {
                    retry_after_secs, ..
                } => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_secs(retry_after_secs.clamp(1, 10))).await;
                }
                other => return WarmResult::failed(spec, (&other).into()),
            },
            Err(f) => return WarmResult::failed(spec, (&f.error).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first warm `Accept` lists every format `format=auto` may choose (those whose room
    /// has an `Accept` bit), so a new one is warmed for the clients that take it.
    #[test]
    fn the_widest_warm_accept_lists_every_offered_format() {
        let widest = AUTO_ACCEPTS[0].unwrap_or_default();
        for encoder in imgcas_processors::encoders::ENCODERS {
            let facts = encoder.facts();
            if facts.accept_bit != 0 {
                assert!(widest.contains(facts.media_type), "{}", facts.name);
            }
        }
    }

    #[test]
    fn warm_specs_are_checked_up_front() {
        assert!(parse_warm(&["w=400&format=webp".into(), "?h=10".into()]).is_ok());
        let bad = parse_warm(&["w=400&nope=1".into()]).unwrap_err();
        assert!(bad.to_string().contains("nope"), "{bad}");
        assert!(parse_warm(&["url=http://x/&w=1".into()]).is_err());
        let many: Vec<String> = (1..=17).map(|w| format!("w={w}")).collect();
        assert!(parse_warm(&many).is_err());
    }

    #[test]
    fn batch_limits() {
        let empty = IngestRequest::default();
        assert!(matches!(
            check_batch(&empty),
            Err(Error::InvalidOption { .. })
        ));
        let big = IngestRequest {
            urls: vec!["http://a/".into(); MAX_URLS + 1],
            warm: vec![],
        };
        assert!(matches!(check_batch(&big), Err(Error::BatchTooLarge(_))));
    }
}
