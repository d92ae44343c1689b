//! An image request, typed once: whichever route it came by (`/v1/image?url=…`,
//! `/v1/image/<sha256>`, a dialect's URL), its options are read here into one
//! [`ImageRequest`] — the source, the spec with the client's hints applied, the preset, and
//! whether facts are asked for — which the flow in `image.rs` and the fallback in
//! `fallback.rs` both take as it is: nothing is parsed twice.

use axum::http::HeaderMap;
use imgcas_processors::Spec;

use super::answer::client_hints;
use super::Service;
use crate::error::Error;
use crate::fetch::client::canonical_url;
use crate::pipeline::Source;

/// What an image route names its source by.
pub(super) enum Named<'a> {
    /// The `url` option of the query.
    UrlOption,
    /// The path's hash, as written.
    Hash(&'a str),
    /// A dialect's source URL, as its reader found it.
    Url(&'a str),
}

/// An image request, read.
pub(super) struct ImageRequest {
    /// `None`: a hash route whose path is no SHA-256 (answered 404, or by the fallback).
    pub source: Option<Source>,
    /// The options as asked (a preset expanded), with the client's hints applied.
    pub spec: Spec,
    /// `format=json`: the original's facts are asked for, not pixels.
    pub json: bool,
    /// The preset named, if any (its own fallback image answers its failures).
    pub preset: Option<String>,
}

impl ImageRequest {
    /// Reads a request's option pairs (a native query's, or a dialect's URL said in imgcas's
    /// options) and its source. Errors are the request's own (options, presets, the URL),
    /// which no fallback answers, and the 404 of a path that is no SHA-256 when its options
    /// do not read either.
    pub(super) fn read(
        service: &Service,
        pairs: &[(String, String)],
        named: Named<'_>,
        headers: &HeaderMap,
    ) -> Result<ImageRequest, Error> {
        // A path that is no SHA-256 names no original: a source's failure (404), which a
        // fallback answers when the options read; when they do not, the 404 stands.
        let hash = match named {
            Named::Hash(hash) => Some(hash.parse().ok()),
            _ => None,
        };
        let parsed = match parse_query(service, pairs, matches!(named, Named::UrlOption)) {
            Ok(parsed) => parsed,
            Err(_) if hash == Some(None) => return Err(not_a_hash()),
            Err(e) => return Err(e),
        };
        let dialect = matches!(named, Named::Url(_));
        let source = match (hash, named) {
            (Some(hash), _) => hash.map(Source::Hash),
            (None, Named::Url(raw)) => Some(Source::Url(url(service, raw)?)),
            (None, _) => {
                let raw = parsed
                    .url
                    .as_deref()
                    .ok_or_else(|| Error::invalid_option("url", "the source URL is required"))?;
                Some(Source::Url(url(service, raw)?))
            }
        };
        let mut spec = parsed.spec;
        // `quality.default`: a native request (or its preset) that names no `q`; a dialect's
        // URL keeps the numeric quality its own reader gave.
        if !dialect {
            service.config().quality.default.fill(&mut spec);
        }
        Ok(ImageRequest {
            source,
            spec: spec.with_hints(&client_hints(headers)),
            json: parsed.json,
            preset: parsed.preset,
        })
    }
}

/// The answer to a hash route whose path is no SHA-256.
pub(super) fn not_a_hash() -> Error {
    Error::NotFound("not a SHA-256 hex digest".into())
}

/// A source URL in its canonical form, within `limits.max_url_bytes`.
fn url(service: &Service, raw: &str) -> Result<url::Url, Error> {
    Ok(canonical_url(raw, service.config().limits.max_url_bytes)?)
}

/// A query as [`parse_query`] splits it.
struct Parsed {
    url: Option<String>,
    spec: Spec,
    /// `format=json`: the original's facts are asked for, not pixels.
    json: bool,
    /// The preset named, if any.
    preset: Option<String>,
}

/// Splits a request's option pairs (a native query's, or a dialect's URL said in imgcas's
/// options) into the source URL (if `url_param`) and the processing spec, expanding a `preset`
/// into its options (explicit options override them, unless only presets are allowed).
fn parse_query(
    service: &Service,
    pairs: &[(String, String)],
    url_param: bool,
) -> Result<Parsed, Error> {
    let json = pairs.iter().any(|(k, v)| k == "format" && v == "json");
    if pairs.iter().filter(|(k, _)| k == "format").count() > 1 {
        return Err(Error::invalid_option("format", "given more than once"));
    }
    let mut url = None;
    let mut preset = None;
    let mut explicit: Vec<(&str, &str)> = Vec::with_capacity(pairs.len());
    for (k, v) in pairs {
        match k.as_str() {
            "url" if url_param => {
                if url.replace(v.clone()).is_some() {
                    return Err(Error::invalid_option("url", "given more than once"));
                }
            }
            "preset" => {
                if preset.replace(v.as_str()).is_some() {
                    return Err(Error::invalid_option("preset", "given more than once"));
                }
            }
            // Checked before parsing, by `check_signature`.
            "sig" => {}
            // Facts, not pixels: no output format to parse.
            "format" if json => {}
            _ => explicit.push((k.as_str(), v.as_str())),
        }
    }
    if service.only_presets() {
        // `format=json` is an option like any other: facts are not a preset's output.
        let spelled = explicit.first().map(|(name, _)| *name);
        if let Some(name) = spelled.or(json.then_some("format")) {
            return Err(Error::PresetRequired(format!(
                "only presets are allowed here: `{name}` must come from a preset"
            )));
        }
        if preset.is_none() {
            return Err(Error::PresetRequired(
                "only presets are allowed here: name one with `preset=<name>`".into(),
            ));
        }
    }
    let mut options: Vec<(&str, &str)> = match preset {
        None => Vec::new(),
        Some(name) => service
            .preset(name)
            .ok_or_else(|| Error::invalid_option("preset", format!("no preset named `{name}`")))?
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .filter(|(k, _)| !explicit.iter().any(|(e, _)| e == k))
            .collect(),
    };
    options.extend(explicit);
    let spec = Spec::from_pairs(options)?;
    Ok(Parsed {
        url,
        spec,
        json,
        preset: preset.map(str::to_string),
    })
}
