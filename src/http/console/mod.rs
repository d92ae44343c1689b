//! The operator's page, `GET /admin` (docs/operations.md "The operator's page"): what
//! deduplication saves and what the node is doing. Figures are HTML and plots SVG drawn here,
//! so the page needs no script and no outside resource; its own script and style sheet
//! (`admin.js`, `admin.css`, in the binary) refresh the sections in place and send the
//! moderation forms to the existing routes. It is guarded as `/metrics` is (the `metrics`
//! scope), by the bearer header or the session cookie its login form sets (`session.rs`),
//! and served with a `Content-Security-Policy` that allows nothing but its own files.
//!
//! This node's counters over time are `history.rs`'s (sampled by [`Console::sample`], which
//! the app runs every `server.admin_sample_every`); the markup is `page.rs`'s;
//! `GET /admin/savings` answers the savings figures as JSON (`imgcas stats --server`).

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use super::Service;
use crate::config::tokens::Scope;
use crate::error::Error;
use crate::maps::now_ms;
use crate::wire::{NodeSavings, SavingsAnswer, StoreSavings, WalkState};

pub mod history;
mod page;
pub mod session;

use history::{History, Sample, Window};

/// Samples between two readings of the store's totals (a minute at the default step): the
/// totals the maps keep, a read of a few rows on either backend.
const TOTALS_EVERY: u32 = 6;
/// How long the readiness sample waits for the stores (as `/readyz`).
const READY_WITHIN: Duration = Duration::from_millis(1500);

/// The page's state on this node: its history, the last readiness sample, and the sessions
/// logged out of here.
pub struct Console {
    history: History,
    /// 0: not sampled yet; 1: ready; 2: not ready.
    ready: AtomicU8,
    started_ms: u64,
    revoked: session::Revoked,
}

impl Console {
    pub fn new(step: Duration) -> Console {
        Console {
            history: History::new(step),
            ready: AtomicU8::new(0),
            started_ms: now_ms(),
            revoked: session::Revoked::default(),
        }
    }

    /// Whether `session` was logged out of on this node.
    pub fn revoked(&self, session: &session::Presented) -> bool {
        self.revoked.holds(session)
    }

    /// Revokes `session` on this node until its expiry.
    pub fn revoke(&self, session: &session::Presented, now_secs: u64) {
        self.revoked.revoke(session, now_secs);
    }

    /// The last readiness sample (none before the first).
    pub fn ready(&self) -> Option<bool> {
        match self.ready.load(Ordering::Relaxed) {
            1 => Some(true),
            2 => Some(false),
            _ => None,
        }
    }
}

impl Service {
    /// One sample of this node for the page's history, the readiness gauge and (at most
    /// once per [`TOTALS_EVERY`] samples) the store's totals. Run by the app on a timer.
    pub async fn sample(&self) {
        let console = &self.parts.console;
        let ready = tokio::time::timeout(READY_WITHIN, self.pipeline().check()).await;
        let ready = matches!(ready, Ok(Ok(())));
        console
            .ready
            .store(if ready { 1 } else { 2 }, Ordering::Relaxed);
        if ready {
            if let Err(e) = self.pipeline().store_reading(self.totals_max_age()).await {
                tracing::debug!(error = %e, "store totals not read");
            }
        }
        console.history.push(self.sample_now());
    }

    /// How old the store's totals may be before a sample reads them again.
    fn totals_max_age(&self) -> Duration {
        self.parts.console.history.step() * TOTALS_EVERY
    }

    /// This node's counters now.
    fn sample_now(&self) -> Sample {
        self.sample_of(&self.pipeline().readings())
    }

    /// This node's counters, with the pipeline's as `readings` has them.
    fn sample_of(&self, readings: &crate::metrics::Readings) -> Sample {
        let tally = self.series().tally();
        let s = &readings.stats;
        Sample {
            at_ms: now_ms(),
            requests: tally.outcomes.load(Ordering::Relaxed),
            hits: tally.hits.load(Ordering::Relaxed),
            runs: s.processing_runs,
            dedup_saved: s.dedup_bytes_saved,
            shed: readings.tenants.iter().map(|t| t.totals.refused).sum(),
            queue_waits: s.queue_waits,
            queue_wait_micros: s.queue_wait_micros,
            errors: tally.errors.load(Ordering::Relaxed),
        }
    }

    /// The readings `/metrics` renders: the pipeline's, with the readiness sample.
    pub(super) fn readings(&self) -> crate::metrics::Readings {
        let mut readings = self.pipeline().readings();
        readings.ready = self.parts.console.ready();
        readings
    }

    /// The savings figures: this node's since it started, and the store's as last read.
    pub fn savings(&self) -> SavingsAnswer {
        let readings = self.readings();
        self.savings_of(&readings, &self.sample_of(&readings))
    }

    /// The savings figures from one reading of the node (`now`, its sample).
    fn savings_of(&self, readings: &crate::metrics::Readings, now: &Sample) -> SavingsAnswer {
        let s = &readings.stats;
        let ratio = |a: u64, b: u64| (b > 0).then(|| a as f64 / b as f64);
        SavingsAnswer {
            node_id: readings.node_id.clone(),
            node: Some(NodeSavings {
                started_ms: self.parts.console.started_ms,
                requests: now.requests,
                hits: now.hits,
                processing_runs: now.runs,
                requests_per_run: ratio(now.requests, now.runs),
                hit_ratio: ratio(now.hits, now.requests),
                exact_saved_bytes: s.dedup_bytes_saved.saturating_sub(s.near_bytes_saved),
                near_saved_bytes: s.near_bytes_saved,
                downloads: s.downloads,
                downloaded_bytes: s.downloaded_bytes,
            }),
            store: readings.store.map(|reading| {
                StoreSavings::new(
                    &reading,
                    readings.variant_bytes,
                    readings.urls_max_bytes,
                    readings.variants_max_bytes,
                )
            }),
            // Read by the async callers, which may ask the maps ([`Service::walks`]).
            walks: Vec::new(),
        }
    }

    /// Where the walks stand, from the maps (nothing when they do not answer in time).
    async fn walks(&self) -> Vec<WalkState> {
        match tokio::time::timeout(READY_WITHIN, self.pipeline().walk_positions()).await {
            Ok(Ok(positions)) => WalkState::all(positions),
            _ => Vec::new(),
        }
    }
}

#[derive(Deserialize)]
pub struct PageQuery {
    /// `live` or `moderation`: that part alone, for the script's refresh.
    part: Option<String>,
}

/// The headers every answer of the page carries: nothing may load from elsewhere, run
/// inline, frame it, or keep it, and no other origin learns the page's address.
fn guarded(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Not `no-referrer`: under it a browser sends `Origin: null` with the login form's post,
    // which the login's origin check (`session::same_origin`) cannot tell from another
    // site's. `same-origin` sends nothing to other origins and the real origin to this one.
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

fn html(status: StatusCode, body: String) -> Response {
    guarded(
        (
            status,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            body,
        )
            .into_response(),
    )
}

/// 404 while `server.admin_page` is off.
/// The page's guard (`routes.rs`): 404 with `server.admin_page` off.
pub(super) fn page_off(service: &Service) -> Option<Response> {
    (!service.config().server.admin_page).then(|| {
        guarded(
            Error::NotFound("the admin page is off (`server.admin_page`)".into()).into_response(),
        )
    })
}

/// The page's guard: off, or a request without a token or session allowing `metrics`,
/// answered with the login form (401; 403 with the reason for a token without the scope).
pub(super) fn refuse_page(service: &Service, headers: &HeaderMap) -> Option<Response> {
    if let Some(off) = page_off(service) {
        return Some(off);
    }
    let e = service.check_scope(headers, Scope::Metrics).err()?;
    let status = match &e {
        Error::Unauthorized(_) => StatusCode::UNAUTHORIZED,
        _ => StatusCode::FORBIDDEN,
    };
    let message = match &e {
        Error::Unauthorized(_) => None,
        other => Some(other.to_string()),
    };
    Some(html(status, page::login(message.as_deref())))
}

/// The guard of the page's figures: as the page's, refused as JSON.
pub(super) fn refuse_data(service: &Service, headers: &HeaderMap) -> Option<Response> {
    if let Some(off) = page_off(service) {
        return Some(off);
    }
    let e = service.check_scope(headers, Scope::Metrics).err()?;
    Some(guarded(e.into_response()))
}

/// `GET /admin`: the page (or one part of it), or the login form (401) for a request that
/// presents no token or session allowing `metrics`.
pub async fn page(
    State(service): State<Service>,
    headers: HeaderMap,
    Query(query): Query<PageQuery>,
) -> Response {
    // The store's totals for a page opened before the first sample read them.
    if service.pipeline().last_store_reading().is_none() {
        let _ = tokio::time::timeout(
            READY_WITHIN,
            service.pipeline().store_reading(service.totals_max_age()),
        )
        .await;
    }
    // The live part, refreshed every few seconds, reads no list from the maps.
    let with_moderation = query.part.as_deref() != Some("live");
    let view = view(&service, &headers, with_moderation).await;
    match query.part.as_deref() {
        Some("live") => html(StatusCode::OK, page::live(&view)),
        Some("moderation") => html(StatusCode::OK, page::moderation(&view)),
        _ => html(StatusCode::OK, page::document(&view)),
    }
}

/// Everything the page shows, read now (the moderation lists only `with_moderation`).
async fn view(service: &Service, headers: &HeaderMap, with_moderation: bool) -> page::View {
    // One reading of the node for every figure and plot, so that they agree.
    let readings = service.readings();
    let now = service.sample_of(&readings);
    let console = &service.parts.console;
    let moderation = match service.check_removal(headers) {
        Ok(()) if !with_moderation => Ok(Default::default()),
        Ok(()) => {
            let pipeline = service.pipeline();
            match (pipeline.takedowns().await, pipeline.blocklist().await) {
                (Ok(takedowns), Ok(blocklist)) => Ok((takedowns, blocklist)),
                (Err(e), _) | (_, Err(e)) => Err(e.to_string()),
            }
        }
        Err(e) => Err(e.to_string()),
    };
    let mut savings = service.savings_of(&readings, &now);
    savings.walks = service.walks().await;
    page::View {
        savings,
        readings,
        origins: service.pipeline().origin_tallies(),
        hour: console.history.series(Window::Hour, now),
        day: console.history.series(Window::Day, now),
        hour_span: console.history.span(Window::Hour),
        day_span: console.history.span(Window::Day),
        refresh_secs: console.history.step().as_secs().clamp(1, 60),
        moderation,
        now_ms: now.at_ms,
    }
}

/// `POST /admin/login`: a form with `token`. A token allowing `metrics` sets the session
/// cookie and goes back to the page (303); any other answer is the form again (401). A post
/// from another origin is refused (401 `unauthorized`) before the token is looked at: another
/// site's form must not log the operator's browser in under a token of its choosing.
pub async fn login(State(service): State<Service>, headers: HeaderMap, body: Bytes) -> Response {
    if !session::same_origin(&headers) {
        return guarded(
            Error::Unauthorized(
                "the login form is only accepted from the admin page's own origin".into(),
            )
            .into_response(),
        );
    }
    let token = url::form_urlencoded::parse(&body)
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    let Some((name, key)) = service.session_key(token.trim(), Scope::Metrics) else {
        return html(
            StatusCode::UNAUTHORIZED,
            page::login(Some("that token does not open this page")),
        );
    };
    let expires = now_ms() / 1000 + session::LIFETIME.as_secs();
    let value = session::value(&name, &key, expires, &session::nonce());
    let cookie = session::set_cookie(&value, session::served_over_https(&headers));
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/admin")]).into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    guarded(response)
}

/// `POST /admin/logout`: ends the session, in the browser (the cookie cleared) and on every
/// node sharing the maps (the cookie revoked until its expiry, should a copy of it be
/// replayed: on this node at once, on the others the first time it is presented there).
pub async fn logout(State(service): State<Service>, headers: HeaderMap) -> Response {
    if let Some(presented) = session::presented(&headers) {
        // Only a valid session is remembered: the list holds what was once a login.
        if service.session_valid(&presented) {
            let now_secs = now_ms() / 1000;
            service.parts.console.revoke(&presented, now_secs);
            let left = presented.expires_secs().saturating_sub(now_secs);
            service
                .pipeline()
                .revoke_session(&presented.key(), std::time::Duration::from_secs(left))
                .await;
        }
    }
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/admin")]).into_response();
    if let Ok(v) = HeaderValue::from_str(&session::clear_cookie()) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    guarded(response)
}

/// `GET /admin/savings`: the savings figures as JSON (guarded as the page is).
pub async fn savings(State(service): State<Service>) -> Response {
    if service.pipeline().last_store_reading().is_none() {
        let _ = tokio::time::timeout(
            READY_WITHIN,
            service.pipeline().store_reading(service.totals_max_age()),
        )
        .await;
    }
    let mut answer = service.savings();
    answer.walks = service.walks().await;
    // The figures are the operator's: no cache along the way keeps them.
    guarded(Json(answer).into_response())
}

/// `GET /admin/admin.js` and `/admin/admin.css`: the page's own files, from the binary. They
/// hold nothing secret, but a cached copy would outlive an upgrade of the page they drive,
/// and they are a few KB: guarded (`no-store`) as the page is.
pub async fn script() -> Response {
    guarded(
        (
            [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
            include_str!("admin.js"),
        )
            .into_response(),
    )
}

pub async fn style() -> Response {
    guarded(
        (
            [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
            include_str!("admin.css"),
        )
            .into_response(),
    )
}
