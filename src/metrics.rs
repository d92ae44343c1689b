//! `/metrics`: Prometheus text from a recorder of this service's own (not the process-global
//! one, so several services can live in one process, as they do in the tests).
//!
//! Labelled series (requests by route and status, cache outcomes, admission refusals, the
//! latency histograms) are recorded as they happen; the work counters in [`Stats`] and the
//! gauges are read when the page is rendered.

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, Unit};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use crate::app::Shared;
use crate::stats::Stats;

/// Latency buckets, seconds: from a hot hit (sub-millisecond) to a slow origin.
const SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

pub struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
}

impl Default for Metrics {
    fn default() -> Self {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS)
            // Only an empty bucket list is refused, and ours is not empty.
            .unwrap_or_else(|_| PrometheusBuilder::new())
            .build_recorder();
        let handle = recorder.handle();
        let m = Metrics { recorder, handle };
        m.with(describe);
        m
    }
}

fn describe() {
    describe_counter!(
        "imgcas_http_requests_total",
        "HTTP requests by route, method and status"
    );
    describe_histogram!(
        "imgcas_http_request_duration_seconds",
        Unit::Seconds,
        "Time to the response head, by route, status and cache outcome"
    );
    describe_counter!(
        "imgcas_cache_outcomes_total",
        "Image responses by X-Imgcas-Cache outcome"
    );
    describe_histogram!(
        "imgcas_processing_seconds",
        Unit::Seconds,
        "CPU time of processing runs"
    );
    describe_histogram!(
        "imgcas_queue_wait_seconds",
        Unit::Seconds,
        "Time admitted processing runs waited for a CPU slot"
    );
    describe_counter!(
        "imgcas_admission_rejections_total",
        "Processing runs refused with 503 overloaded, by reason"
    );
    describe_counter!("imgcas_processing_runs_total", "Processing runs");
    describe_counter!(
        "imgcas_origin_downloads_total",
        "Full downloads from origins"
    );
    describe_counter!(
        "imgcas_origin_downloaded_bytes_total",
        "Bytes downloaded from origins"
    );
    describe_counter!(
        "imgcas_origin_not_modified_total",
        "Conditional requests answered 304"
    );
    describe_counter!(
        "imgcas_originals_stored_total",
        "Originals stored (new hashes)"
    );
    describe_counter!(
        "imgcas_dedup_bytes_saved_total",
        "Bytes of downloads and uploads not stored again: their hash was already stored"
    );
    describe_counter!("imgcas_hot_cache_hits_total", "Variants served from memory");
    describe_counter!(
        "imgcas_variant_map_reads_total",
        "Variants read from the variants map"
    );
    describe_counter!(
        "imgcas_origin_failure_hits_total",
        "Requests answered from the negative cache of origin failures"
    );
    describe_gauge!(
        "imgcas_coalesced_waiters",
        "Requests waiting on a download or processing run another request started"
    );
    describe_gauge!(
        "imgcas_processing_queue_depth",
        "Admitted runs waiting for a CPU slot"
    );
    describe_gauge!(
        "imgcas_processing_outstanding_pixels",
        "Cost admitted and not finished"
    );
    describe_gauge!("imgcas_hot_cache_bytes", "Bytes held by the hot cache");
}

impl Metrics {
    /// Runs `f` with this service's recorder behind the `metrics` macros.
    pub fn with<T>(&self, f: impl FnOnce() -> T) -> T {
        metrics::with_local_recorder(&self.recorder, f)
    }

    /// Drains queued histogram samples into their buckets (done once a second by the app,
    /// and by every render).
    pub fn upkeep(&self) {
        self.handle.run_upkeep();
    }

    /// The page: counters from [`Stats`], gauges read now, then everything recorded.
    pub fn render(&self, shared: &Shared) -> String {
        let s = &shared.stats;
        let (outstanding, waiting) = shared.admission.load();
        let waiters = shared.url_flights.waiters() + shared.variant_flights.waiters();
        let hot_bytes = shared.hot.weighted_size();
        self.with(|| {
            let counters = [
                ("imgcas_processing_runs_total", &s.processing_runs),
                ("imgcas_origin_downloads_total", &s.downloads),
                ("imgcas_origin_downloaded_bytes_total", &s.downloaded_bytes),
                ("imgcas_origin_not_modified_total", &s.not_modified),
                ("imgcas_originals_stored_total", &s.originals_stored),
                ("imgcas_dedup_bytes_saved_total", &s.dedup_bytes_saved),
                ("imgcas_hot_cache_hits_total", &s.hot_hits),
                ("imgcas_variant_map_reads_total", &s.variant_map_reads),
                ("imgcas_origin_failure_hits_total", &s.origin_failure_hits),
            ];
            for (name, value) in counters {
                counter!(name).absolute(Stats::get(value));
            }
            gauge!("imgcas_coalesced_waiters").set(waiters as f64);
            gauge!("imgcas_processing_queue_depth").set(waiting as f64);
            gauge!("imgcas_processing_outstanding_pixels").set(outstanding as f64);
            gauge!("imgcas_hot_cache_bytes").set(hot_bytes as f64);
        });
        self.handle.render()
    }
}
