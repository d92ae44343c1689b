//! Per-request accounting: the request counter, the latency histogram and the cache-outcome
//! counter of every routed request, and one access line. It owns the metric handles: each
//! combination of labels is registered with the recorder once and kept, so a request costs
//! a read-locked map lookup and two atomic adds, not a registry lookup with label strings
//! built for it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use metrics::{Counter, Histogram};

use super::Service;
use crate::metrics::Metrics;

/// `X-Imgcas-Cache` values (`image.rs`, `error.rs`), as `cache` labels.
const OUTCOMES: &[&str] = &["hit", "miss", "revalidated", "stale", "error-hit"];

/// The labels of one series set.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Labels {
    route: &'static str,
    method: &'static str,
    status: u16,
    cache: Option<&'static str>,
}

#[derive(Clone)]
struct Handles {
    requests: Counter,
    duration: Histogram,
    outcome: Option<Counter>,
    tally: Arc<Tally>,
}

/// Totals the operator's page reads (`console/`), counted with the series above: image
/// answers with a cache outcome, the hits among them, and error answers.
#[derive(Debug, Default)]
pub(super) struct Tally {
    pub outcomes: AtomicU64,
    pub hits: AtomicU64,
    pub errors: AtomicU64,
}

/// The handles registered so far, by labels. Bounded: routes × methods × statuses × outcomes,
/// and error codes (a fixed set).
#[derive(Default)]
pub(super) struct Series {
    registered: RwLock<HashMap<Labels, Handles>>,
    errors: RwLock<HashMap<&'static str, Counter>>,
    tally: Arc<Tally>,
}

impl Series {
    fn handles(&self, metrics: &Metrics, labels: Labels) -> Handles {
        let known = self
            .registered
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&labels)
            .cloned();
        if let Some(handles) = known {
            return handles;
        }
        let status = labels.status.to_string();
        let handles = metrics.with(|| Handles {
            requests: metrics::counter!(
                "imgcas_http_requests_total",
                "route" => labels.route,
                "method" => labels.method,
                "status" => status.clone()
            ),
            // By status and cache outcome too: a hit, a processed image and a refusal are
            // different latencies.
            duration: metrics::histogram!(
                "imgcas_http_request_duration_seconds",
                "route" => labels.route,
                "status" => status.clone(),
                "cache" => labels.cache.unwrap_or("none")
            ),
            outcome: labels.cache.map(
                |outcome| metrics::counter!("imgcas_cache_outcomes_total", "outcome" => outcome),
            ),
            tally: self.tally.clone(),
        });
        self.registered
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(labels, handles.clone());
        handles
    }

    /// Counts an error answer by its code.
    fn error(&self, metrics: &Metrics, code: &'static str) {
        self.tally.errors.fetch_add(1, Ordering::Relaxed);
        let known = self
            .errors
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(code)
            .cloned();
        let counter = match known {
            Some(counter) => counter,
            None => {
                let counter =
                    metrics.with(|| metrics::counter!("imgcas_http_errors_total", "code" => code));
                self.errors
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(code, counter.clone());
                counter
            }
        };
        counter.increment(1);
    }

    pub(super) fn tally(&self) -> &Tally {
        &self.tally
    }
}

/// Counts and times every routed request, by route pattern (never the raw path, which would
/// make a series per URL), and logs one access line (written off the request path: see
/// `init_logging` in `main.rs`).
pub(super) async fn observe(
    State(service): State<Service>,
    request: Request,
    next: Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |p| {
            super::routes::label(p.as_str()).unwrap_or("other")
        });
    let method = method_label(request.method());
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    let cache = response.headers().get("x-imgcas-cache").and_then(|v| {
        OUTCOMES
            .iter()
            .copied()
            .find(|o| v.as_bytes() == o.as_bytes())
    });
    account(&service, route, method, status, cache, elapsed);
    if let Some(failed) = response.extensions().get::<super::error::Failed>() {
        service.series().error(service.metrics(), failed.code);
    }
    response
}

/// Counts and times one answered request and logs its access line: the routed requests'
/// accounting ([`observe`]) and the remembered hits' (`front.rs`), which never reach the
/// router, alike.
pub(super) fn account(
    service: &Service,
    route: &'static str,
    method: &'static str,
    status: u16,
    cache: Option<&'static str>,
    elapsed: std::time::Duration,
) {
    let labels = Labels {
        route,
        method,
        status,
        cache,
    };
    let handles = service.series().handles(service.metrics(), labels);
    record(&handles, labels, elapsed);
}

/// The accounting of one kind of answer, its handles looked up once by its owner rather than
/// per request: `front.rs`'s hits from memory.
#[derive(Clone)]
pub(super) struct Fixed {
    handles: Handles,
    labels: Labels,
}

impl Fixed {
    /// A `GET` of `route` answered 200 from memory.
    pub(super) fn hit(service: &Service, route: &'static str) -> Fixed {
        let labels = Labels {
            route,
            method: "GET",
            status: 200,
            cache: Some("hit"),
        };
        Fixed {
            handles: service.series().handles(service.metrics(), labels),
            labels,
        }
    }

    /// Counts, times and logs one such answer, as [`account`] does.
    pub(super) fn account(&self, elapsed: std::time::Duration) {
        record(&self.handles, self.labels, elapsed);
    }
}

fn record(handles: &Handles, labels: Labels, elapsed: std::time::Duration) {
    let Labels {
        route,
        method,
        status,
        cache,
    } = labels;
    handles.requests.increment(1);
    handles.duration.record(elapsed.as_secs_f64());
    if let Some(outcome) = &handles.outcome {
        outcome.increment(1);
        handles.tally.outcomes.fetch_add(1, Ordering::Relaxed);
        if cache == Some("hit") {
            handles.tally.hits.fetch_add(1, Ordering::Relaxed);
        }
    }
    crate::log::access(method, route, status, cache, elapsed);
}

/// The `method` label: the methods the API answers, and one value for any other, so invented
/// methods cannot grow the series without bound.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        _ => "other",
    }
}
