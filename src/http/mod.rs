//! The HTTP face of the service (docs/api.md "HTTP API"): one file per resource, and `error.rs`
//! as the one place errors become statuses, headers and JSON bodies. Handlers share a
//! [`Service`] and reach the stored state only through its [`Pipeline`]. In front of the
//! router, `front.rs` answers repeated hits held in memory (the same answers, sooner).

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, Uri};
use axum::middleware::{self, Next};
use axum::response::IntoResponse;
use axum::response::Response;
use axum::Router;

use crate::admission::{Asker, Payer, Tier};
use crate::config::tokens::{Scope, Scopes};
use crate::config::Config;
use crate::error::Error;
use crate::metrics::Metrics;
use crate::pipeline::Pipeline;

pub mod admin;
mod answer;
pub mod console;
pub mod error;
mod focus;
mod front;
pub use fallback::Fallbacks;
pub use front::Front;
mod dialects;
mod fallback;
pub mod image;
pub mod ingest;
mod moderation;
mod observe;
pub mod ops;
pub mod originals;
mod request;
mod routes;

/// What every handler shares: the pipeline, the settings HTTP reads, the signing keys, the
/// presets, the admin token and the metrics recorder. Clones share one state.
#[derive(Clone)]
pub struct Service {
    parts: Arc<Parts>,
}

struct Parts {
    pipeline: Pipeline,
    config: Config,
    /// Signing keys (`security.signing_key`); empty: URLs need no `sig`.
    signing_keys: Vec<Vec<u8>>,
    /// The fallback images (`fallback.rs`).
    fallbacks: Fallbacks,
    /// What the peers' URL dialects need of the configuration (`dialects/`).
    dialect: dialects::Dialect,
    /// The tokens that open the guarded routes, by name (the admin token's is `admin`), as
    /// SHA-256 digests with what each may do; none: the routes are open (those that remove
    /// stored data aside).
    tokens: Vec<(String, [u8; 32], Scopes)>,
    /// Uploads receiving their bodies now (`server.max_concurrent_uploads`).
    upload_slots: Arc<tokio::sync::Semaphore>,
    metrics: Metrics,
    /// `Cache-Control` of an image named by URL: fresh while its mapping is.
    url_cache_control: String,
    /// Metric handles by labels, registered once (`observe.rs`).
    series: observe::Series,
    /// The operator's page: its history of this node's counters (`console/`).
    console: console::Console,
}

impl Service {
    pub fn new(
        pipeline: Pipeline,
        config: Config,
        metrics: Metrics,
        fallbacks: Fallbacks,
    ) -> Service {
        let dialect = dialects::Dialect::of(&config, pipeline.structured());
        Service {
            parts: Arc::new(Parts {
                pipeline,
                signing_keys: config.security.signing_keys(),
                fallbacks,
                dialect,
                tokens: config
                    .security
                    .admin_token
                    .iter()
                    .map(|t| ("admin".to_string(), digest(t), Scopes::ADMIN))
                    .chain(
                        config
                            .security
                            .tokens
                            .iter()
                            .map(|(name, t)| (name.clone(), digest(&t.token), t.scopes)),
                    )
                    .collect(),
                upload_slots: Arc::new(tokio::sync::Semaphore::new(
                    config.server.max_concurrent_uploads,
                )),
                url_cache_control: {
                    let revalidate = config.fetch.revalidate_after.as_secs();
                    format!(
                        "public, max-age={revalidate}, stale-while-revalidate={}",
                        revalidate.max(60)
                    )
                },
                console: console::Console::new(config.server.admin_sample_every),
                config,
                metrics,
                series: observe::Series::default(),
            }),
        }
    }

    pub fn pipeline(&self) -> &Pipeline {
        &self.parts.pipeline
    }

    pub fn config(&self) -> &Config {
        &self.parts.config
    }

    pub fn metrics(&self) -> &Metrics {
        &self.parts.metrics
    }

    fn dialect(&self) -> &dialects::Dialect {
        &self.parts.dialect
    }

    fn fallbacks(&self) -> &Fallbacks {
        &self.parts.fallbacks
    }

    fn url_cache_control(&self) -> &str {
        &self.parts.url_cache_control
    }

    fn series(&self) -> &observe::Series {
        &self.parts.series
    }

    /// With signing keys configured, the path and query must carry a valid `sig`.
    fn check_signature(&self, uri: &Uri) -> Result<(), Error> {
        if self.parts.signing_keys.is_empty() {
            return Ok(());
        }
        crate::signing::verify(
            &self.parts.signing_keys,
            uri.path(),
            uri.query().unwrap_or(""),
        )
        .map_err(|refusal| Error::BadSignature(refusal.message().into()))
    }

    /// A slot for one upload's body, or 503 `overloaded` when all are taken: an upload is
    /// bytes held in memory until it is stored, so their number is bounded.
    pub(super) fn upload_slot(&self) -> Result<tokio::sync::OwnedSemaphorePermit, Error> {
        self.parts
            .upload_slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| Error::Overloaded {
                message: format!(
                    "{} uploads are being received already; try again shortly",
                    self.parts.config.server.max_concurrent_uploads
                ),
                retry_after_secs: 1,
            })
    }

    /// The options a preset stands for.
    fn preset(&self, name: &str) -> Option<&[(String, String)]> {
        let presets = &self.parts.pipeline.structured().presets;
        presets.get(name).map(|p| p.options.as_slice())
    }

    fn only_presets(&self) -> bool {
        self.parts.config.security.only_presets
    }

    /// For routes that remove stored data or read other tenants' (takedowns, the blocklist,
    /// forgetting URLs): they need a token configured (403 `admin_disabled` without one,
    /// rather than open to all) and presented, with the `moderate` scope (or `admin`).
    fn check_removal(&self, headers: &axum::http::HeaderMap) -> Result<(), Error> {
        if self.parts.tokens.is_empty() {
            return Err(Error::AdminDisabled(
                "this route removes stored data: it needs an admin token (`IMGCAS_ADMIN_TOKEN`)"
                    .into(),
            ));
        }
        self.check_scope(headers, Scope::Moderate)
    }

    /// With an admin token (or named tokens) configured, the request must carry
    /// `Authorization: Bearer <token>` with one of them whose scopes allow `needed`: 401
    /// without a matching token, 403 `insufficient_scope` naming the scope with one that
    /// may not.
    fn check_scope(&self, headers: &axum::http::HeaderMap, needed: Scope) -> Result<(), Error> {
        if self.parts.tokens.is_empty() {
            return Ok(());
        }
        let (name, scopes) = self.presented(headers)?;
        match scopes.allow(needed) {
            true => Ok(()),
            false => Err(Error::InsufficientScope {
                scope: needed.name(),
                message: format!(
                    "this route needs the `{needed}` scope; the token `{name}` has {}",
                    scopes.names()
                ),
            }),
        }
    }

    /// The name and scopes of the token the request presents (`admin` for the admin token).
    fn presented(&self, headers: &axum::http::HeaderMap) -> Result<(&str, Scopes), Error> {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            });
        let Some(token) = presented else {
            return self.session(headers);
        };
        let presented = digest(token);
        // Every token is compared, so the time taken does not say which one matched.
        let mut matched = None;
        for (name, expected, scopes) in &self.parts.tokens {
            if same_bytes(&presented, expected) {
                matched = Some((name.as_str(), *scopes));
            }
        }
        matched.ok_or_else(|| Error::Unauthorized("the admin token does not match".into()))
    }

    /// The name and scopes of the token whose session cookie (`console/session.rs`) the
    /// request carries, from the page's own origin.
    fn session(&self, headers: &axum::http::HeaderMap) -> Result<(&str, Scopes), Error> {
        let refused =
            || Error::Unauthorized("this route needs `Authorization: Bearer <admin token>`".into());
        let presented = console::session::presented(headers).ok_or_else(refused)?;
        let (name, scopes) = self
            .session_token(&presented)
            .ok_or_else(|| Error::Unauthorized("the session has expired or is not valid".into()))?;
        if self.parts.console.revoked(&presented) {
            return Err(Error::Unauthorized(
                "the session was ended (`POST /admin/logout`)".into(),
            ));
        }
        if !console::session::same_origin(headers) {
            return Err(Error::Unauthorized(
                "a session is only accepted from the admin page's own origin".into(),
            ));
        }
        Ok((name, scopes))
    }

    /// Learns whether the session cookie a request carries was ended on another node (its
    /// logout is shared through the maps), before any check reads this node's list.
    async fn learn_revocation(&self, headers: &axum::http::HeaderMap) {
        let Some(presented) = console::session::presented(headers) else {
            return;
        };
        if !self.session_valid(&presented) || self.parts.console.revoked(&presented) {
            return;
        }
        if self.pipeline().session_revoked(&presented.key()).await {
            let now_secs = crate::maps::now_ms() / 1000;
            self.parts.console.revoke(&presented, now_secs);
        }
    }

    /// The name and scopes of the token `presented` was signed with, while it has not expired.
    fn session_token(&self, presented: &console::session::Presented) -> Option<(&str, Scopes)> {
        let now_secs = crate::maps::now_ms() / 1000;
        self.parts
            .tokens
            .iter()
            .find(|(name, key, _)| *name == presented.name && presented.valid(key, now_secs))
            .map(|(name, _, scopes)| (name.as_str(), *scopes))
    }

    /// Whether `presented` is a session some configured token signed and that has not expired
    /// (revoked or not).
    fn session_valid(&self, presented: &console::session::Presented) -> bool {
        self.session_token(presented).is_some()
    }

    /// The name and digest of the configured token `token` is, when its scopes allow
    /// `needed` (the login form's check).
    fn session_key(&self, token: &str, needed: Scope) -> Option<(String, [u8; 32])> {
        let presented = digest(token);
        let mut matched = None;
        for (name, expected, scopes) in &self.parts.tokens {
            if same_bytes(&presented, expected) && scopes.allow(needed) {
                matched = Some((name.clone(), *expected));
            }
        }
        matched
    }

    /// Who a request asks as: the tier it names in `X-Imgcas-Tier` (a request may lower its
    /// own, never raise it above `default`'s), and the tenant its token names, else
    /// `default`'s (the source's host).
    pub(super) fn asker(&self, headers: &axum::http::HeaderMap, default: Asker) -> Asker {
        let tier = headers
            .get("x-imgcas-tier")
            .and_then(|v| v.to_str().ok())
            .and_then(Tier::parse)
            .map_or(default.tier, |asked| asked.max(default.tier));
        match self.presented(headers) {
            Ok((name, _)) => Asker {
                tier,
                tenant: name.into(),
                payer: Payer::Tenant,
            },
            // Nobody named: the client pays, by the address the front found for it.
            Err(_) => Asker {
                tier,
                tenant: default.tenant,
                payer: match default.payer {
                    Payer::Tenant => Payer::Tenant,
                    Payer::Anonymous(_) => Payer::Anonymous(front::client_of(headers)),
                },
            },
        }
    }
}

fn digest(token: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes()).into()
}

/// Compares two secrets' digests (or signatures) in time that does not depend on where they
/// differ. Comparing digests rather than the tokens also hides the token's length.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let difference = a
        .iter()
        .zip(b)
        .fold(0u8, |acc, (x, y)| acc | std::hint::black_box(x ^ y));
    a.len() == b.len() && difference == 0
}

/// Before any route reads a session cookie: whether another node ended it (one look-up in
/// the maps for a request that carries a valid, unrevoked session; none for any other).
async fn learn_revocation(
    State(service): State<Service>,
    request: Request,
    next: Next,
) -> Response {
    service.learn_revocation(request.headers()).await;
    next.run(request).await
}

/// The router, read from the route table (`routes.rs`): each row's handler under its guard,
/// every route but the ingest's bounded by the request timeout, and every one counted and
/// bounded in its target's length.
pub fn router(service: Service) -> Router {
    // Multipart framing needs a little room beyond the largest accepted source.
    let body_limit = usize::try_from(service.config().fetch.max_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(64 << 10);
    let (timed, untimed) =
        routes::ROUTES
            .iter()
            .fold((Router::new(), Router::new()), |(timed, untimed), route| {
                let handler = routes::method_router(&service, route);
                match route.timed {
                    true => (timed.route(route.path, handler), untimed),
                    false => (timed, untimed.route(route.path, handler)),
                }
            });
    timed
        .route_layer(middleware::from_fn_with_state(service.clone(), limit_time))
        .merge(untimed)
        .route_layer(middleware::from_fn_with_state(service.clone(), limit_url))
        .route_layer(middleware::from_fn_with_state(
            service.clone(),
            observe::observe,
        ))
        .fallback(ops::not_found)
        .layer(middleware::from_fn_with_state(
            service.clone(),
            learn_revocation,
        ))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(service)
}

/// Answers 414 `url_too_long` to a request target (path and query) longer than
/// `limits.max_url_bytes`, before any handler, cache or map sees it (issue 28: caches keyed by
/// such URLs held hundreds of megabytes).
async fn limit_url(State(service): State<Service>, request: Request, next: Next) -> Response {
    if target_too_long(&service, request.uri()) {
        let limit = service.config().limits.max_url_bytes;
        return Error::UrlTooLong { limit }.into_response();
    }
    next.run(request).await
}

/// Whether a request's path and query are longer than `limits.max_url_bytes`.
fn target_too_long(service: &Service, uri: &Uri) -> bool {
    uri.path_and_query()
        .is_some_and(|pq| pq.as_str().len() > service.config().limits.max_url_bytes)
}

/// Ends a request that takes longer than `server.request_timeout` with 503 `overloaded`.
/// The work it started (a download, a processing run) belongs to its flight and goes on,
/// so a retry finds it done.
async fn limit_time(State(service): State<Service>, request: Request, next: Next) -> Response {
    let limit = service.config().server.request_timeout;
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => Error::Overloaded {
            message: format!("the request took longer than the limit of {limit:?}"),
            retry_after_secs: 1,
        }
        .into_response(),
    }
}

/// Whether an `If-None-Match` header matches `etag` (weak comparison, as RFC 9110 asks).
pub fn etag_matches(headers: &axum::http::HeaderMap, etag: &str) -> bool {
    let bare = etag.trim_start_matches("W/");
    headers
        .get_all(axum::http::header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|candidate| candidate == "*" || candidate.trim_start_matches("W/") == bare)
}
