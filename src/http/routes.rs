//! The route table: every route the service answers, one row each, with its method, path
//! pattern, handler, guard, whether a request timeout bounds it and whether it answers
//! images. The router (`mod.rs`), the metrics' `route` labels (`observe.rs`), the front's
//! image routes (`front.rs`) and the guards are all read from it, so a route is added in one
//! row (plus its handler), and `docs/api.md`'s table is held equal to it by a test here.
//!
//! A guard runs before the handler's extractors: a request its token may not make is refused
//! before its body or query is read.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodFilter, MethodRouter};

use super::{admin, console, focus, image, ingest, moderation, ops, originals, Service};
use crate::config::tokens::Scope;

/// The methods routes are declared with (`GET` answers `HEAD` too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verb {
    Get,
    Post,
    Put,
    Delete,
}

impl Verb {
    fn filter(self) -> MethodFilter {
        match self {
            Verb::Get => MethodFilter::GET,
            Verb::Post => MethodFilter::POST,
            Verb::Put => MethodFilter::PUT,
            Verb::Delete => MethodFilter::DELETE,
        }
    }

    #[cfg(test)]
    fn name(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Post => "POST",
            Verb::Put => "PUT",
            Verb::Delete => "DELETE",
        }
    }
}

/// Who may make a request to a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Guard {
    /// Anyone.
    Open,
    /// With tokens configured, a token (or a session of one) whose scopes allow it: 401
    /// without one, 403 `insufficient_scope` with one that may not.
    Scope(Scope),
    /// Removes stored data or reads other tenants': never open. 403 `admin_disabled` with no
    /// token configured, else a token with `moderate` (`Service::check_removal`).
    Removal,
    /// As a removal, and the `admin` scope: the maps' migration.
    Migration,
    /// The operator's page: 404 with `server.admin_page` off, else `metrics`, refused with
    /// the login form.
    Page,
    /// The page's figures as JSON: 404 with the page off, else `metrics`.
    PageData,
    /// The login form: 404 with the page off (the form checks the token itself).
    PageOn,
}

/// One route.
pub(super) struct Route {
    pub method: Verb,
    /// The pattern, as the router matches it and as the `route` label of its metrics.
    pub path: &'static str,
    pub handler: fn(MethodFilter) -> MethodRouter<Service>,
    pub guard: Guard,
    /// Ended with 503 `overloaded` past `server.request_timeout` (an ingest batch may take
    /// minutes: not bounded).
    pub timed: bool,
    /// An image route: answers carry the client-hint headers, and the front may answer
    /// repeated hits from memory. `by_url`: the source is named by URL.
    pub image: Option<ByUrl>,
}

/// Whether an image route names its source by URL (else by hash).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ByUrl(pub bool);

const fn route(method: Verb, path: &'static str, handler: Handler, guard: Guard) -> Route {
    Route {
        method,
        path,
        handler,
        guard,
        timed: true,
        image: None,
    }
}

const fn image_route(path: &'static str, handler: Handler, by_url: bool) -> Route {
    Route {
        image: Some(ByUrl(by_url)),
        ..route(Verb::Get, path, handler, Guard::Open)
    }
}

type Handler = fn(MethodFilter) -> MethodRouter<Service>;

use Guard::{Migration, Open, Page, PageData, PageOn, Removal};
use Verb::{Delete, Get, Post, Put};

/// Every route. The peers' dialects are each one image route (`dialects::PREFIXES`).
// One row per line: the table reads as a table.
#[rustfmt::skip]
pub(super) const ROUTES: &[Route] = &[
    image_route("/v1/image", |m| on(m, image::by_url), true),
    image_route("/v1/image/{hash}", |m| on(m, image::by_hash), false),
    image_route("/imgproxy/{*path}", |m| on(m, image::by_dialect), true),
    image_route("/thumbor/{*path}", |m| on(m, image::by_dialect), true),
    route(Post, "/v1/originals", |m| on(m, originals::upload), Guard::Scope(Scope::Upload)),
    route(Delete, "/v1/originals", |m| on(m, admin::take_down_url), Removal),
    Route { timed: false, ..route(Post, "/v1/ingest", |m| on(m, ingest::ingest), Guard::Scope(Scope::Ingest)) },
    route(Get, "/v1/originals/{hash}", |m| on(m, originals::original), Open),
    route(Delete, "/v1/originals/{hash}", |m| on(m, admin::take_down), Removal),
    route(Get, "/v1/originals/{hash}/info", |m| on(m, originals::info), Open),
    route(Put, "/v1/originals/{hash}/focus", |m| on(m, focus::put), Guard::Scope(Scope::Upload)),
    route(Delete, "/v1/originals/{hash}/focus", |m| on(m, focus::clear), Guard::Scope(Scope::Upload)),
    route(Get, "/v1/originals/{hash}/similar", |m| on(m, originals::similar), Guard::Scope(Scope::Moderate)),
    route(Delete, "/v1/urls", |m| on(m, admin::forget_url), Removal),
    route(Get, "/v1/takedowns", |m| on(m, admin::takedowns), Removal),
    route(Delete, "/v1/takedowns/{hash}", |m| on(m, admin::lift_takedown), Removal),
    route(Get, "/v1/blocklist", |m| on(m, moderation::list), Removal),
    route(Post, "/v1/blocklist", |m| on(m, moderation::block), Removal),
    route(Delete, "/v1/blocklist/{id}", |m| on(m, moderation::unblock), Removal),
    route(Get, "/healthz", |m| on(m, ops::healthz), Open),
    route(Get, "/readyz", |m| on(m, ops::readyz), Open),
    route(Get, "/metrics", |m| on(m, ops::metrics), Guard::Scope(Scope::Metrics)),
    route(Get, "/admin", |m| on(m, console::page), Page),
    route(Post, "/admin/login", |m| on(m, console::login), PageOn),
    route(Post, "/admin/logout", |m| on(m, console::logout), Open),
    route(Get, "/admin/savings", |m| on(m, console::savings), PageData),
    route(Get, "/admin/check", |m| on(m, admin::check), Removal),
    route(Post, "/admin/check", |m| on(m, admin::start_check), Removal),
    route(Get, "/admin/migrate", |m| on(m, admin::migration_status), Migration),
    route(Post, "/admin/migrate", |m| on(m, admin::migrate), Migration),
    route(Post, "/admin/migrate/{step}", |m| on(m, admin::migration_step), Migration),
    route(Get, "/admin/admin.js", |m| on(m, console::script), Open),
    route(Get, "/admin/admin.css", |m| on(m, console::style), Open),
];

/// The row's method router: its handler, with the image routes' header layer and its guard.
pub(super) fn method_router(service: &Service, route: &Route) -> MethodRouter<Service> {
    let mut handler = (route.handler)(route.method.filter());
    if route.image.is_some() {
        handler = handler.layer(axum::middleware::map_response(
            super::answer::advertise_hints,
        ));
    }
    match route.guard {
        Guard::Open => handler,
        guard => handler.route_layer(axum::middleware::from_fn_with_state(
            (service.clone(), guard),
            check,
        )),
    }
}

/// Refuses a request its guard does not let through, before its extractors run.
async fn check(
    State((service, guard)): State<(Service, Guard)>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let refused = match guard {
        Guard::Open => None,
        Guard::Scope(needed) => service
            .check_scope(headers, needed)
            .err()
            .map(IntoResponse::into_response),
        Guard::Removal => service
            .check_removal(headers)
            .err()
            .map(IntoResponse::into_response),
        Guard::Migration => service
            .check_removal(headers)
            .and_then(|()| service.check_scope(headers, Scope::Admin))
            .err()
            .map(IntoResponse::into_response),
        Guard::Page => console::refuse_page(&service, headers),
        Guard::PageData => console::refuse_data(&service, headers),
        Guard::PageOn => console::page_off(&service),
    };
    match refused {
        Some(refusal) => refusal,
        None => next.run(request).await,
    }
}

/// The route label of a matched pattern: the table's own string, so labels are `'static`.
pub(super) fn label(pattern: &str) -> Option<&'static str> {
    ROUTES.iter().map(|r| r.path).find(|p| *p == pattern)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Every (method, pattern) pair named once; every dialect an image route by URL.
    #[test]
    fn each_route_is_one_row_and_each_dialect_an_image_route() {
        let mut seen = BTreeSet::new();
        for r in ROUTES {
            assert!(
                seen.insert((r.method.name(), r.path)),
                "{} {} twice",
                r.method.name(),
                r.path
            );
            assert!(r.path.starts_with('/'), "{}", r.path);
        }
        for peer in super::super::dialects::PREFIXES {
            let row = ROUTES.iter().find(|r| r.path == peer.pattern);
            assert_eq!(
                row.and_then(|r| r.image),
                Some(ByUrl(true)),
                "{}",
                peer.pattern
            );
        }
    }

    /// The routes as docs/api.md's table names them: its first column's `METHOD /path`
    /// pairs, `HEAD` left out (a `GET` route answers it), the doc's placeholders read as the
    /// router's.
    fn documented() -> BTreeSet<(String, String)> {
        let doc = include_str!("../../docs/api.md");
        let table = doc
            .split("## HTTP API (v1)")
            .nth(1)
            .and_then(|rest| rest.split("\n\n").nth(1))
            .unwrap_or_default();
        let mut routes = BTreeSet::new();
        for row in table.lines().skip(2) {
            let first = row
                .trim_start_matches('|')
                .split(" | ")
                .next()
                .unwrap_or("")
                .trim();
            // `GET`/`HEAD /path…`, possibly two forms separated by ", ".
            for form in first.split("`, `") {
                let form = form.trim_matches('`');
                let Some((methods, path)) = form
                    .split_once(' ')
                    .map(|(m, p)| (m.replace('`', ""), p.trim_matches('`')))
                else {
                    continue;
                };
                for method in methods.split('/').filter(|m| *m != "HEAD") {
                    for path in router_paths(path) {
                        routes.insert((method.to_string(), path));
                    }
                }
            }
        }
        routes
    }

    /// A documented path as the router's patterns: the query and optional parts dropped,
    /// `<sha256>` as `{hash}`, `<id>` as `{id}`, a `{a,b}` choice as `{step}`, a dialect's
    /// path as its catch-all, and `/admin/admin.js`, `GET /admin/admin.css` as two.
    fn router_paths(path: &str) -> Vec<String> {
        let path = path
            .split(['?', '['])
            .next()
            .unwrap_or(path)
            .trim_end_matches('`');
        if let Some(peer) = super::super::dialects::PREFIXES
            .iter()
            .find(|p| path.starts_with(&format!("{}/", p.prefix)))
        {
            return vec![peer.pattern.to_string()];
        }
        let segments: Vec<String> = path
            .split('/')
            .map(|s| match s {
                "<sha256>" => "{hash}".to_string(),
                "<id>" => "{id}".to_string(),
                s if s.starts_with('{') && s.contains(',') => "{step}".to_string(),
                s => s.to_string(),
            })
            .collect();
        vec![segments.join("/")]
    }

    #[test]
    fn the_api_reference_names_every_route_and_no_other() {
        let table: BTreeSet<(String, String)> = ROUTES
            .iter()
            .map(|r| (r.method.name().to_string(), r.path.to_string()))
            .collect();
        let documented = documented();
        let undocumented: Vec<_> = table.difference(&documented).collect();
        let unrouted: Vec<_> = documented.difference(&table).collect();
        assert!(
            undocumented.is_empty() && unrouted.is_empty(),
            "routed, not in docs/api.md: {undocumented:?}; in docs/api.md, not routed: {unrouted:?}"
        );
    }
}
