//! `/metrics`: Prometheus text from a recorder of this service's own (not the process-global
//! one, so several services can live in one process, as they do in the tests).
//!
//! Labelled series (requests by route and status, cache outcomes, admission refusals, the
//! latency histograms) are recorded as they happen, by whoever holds a clone of [`Metrics`];
//! the work counters and gauges are handed in as [`Readings`] when the page is rendered, so
//! this module needs nothing of the layers that record into it.

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, Unit};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use std::sync::Arc;

use crate::admission::TenantReading;
use crate::stats::StatsSnapshot;

/// Latency buckets, seconds: from a hot hit (sub-millisecond) to a slow origin.
const SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The recorder and its render handle; clones share them.
#[derive(Clone)]
pub struct Metrics {
    recorder: Arc<PrometheusRecorder>,
    handle: PrometheusHandle,
}

/// What the page reports besides the recorded series: work counters and gauges, read now.
#[derive(Debug, Default, Clone)]
pub struct Readings {
    pub stats: StatsSnapshot,
    /// Requests waiting on a download or processing run another request started.
    pub coalesced_waiters: usize,
    /// Downloads (URL resolutions) and processing runs under way, each shared by its callers.
    pub download_flights: usize,
    pub process_flights: usize,
    /// Admitted runs waiting for a CPU slot.
    pub queue_depth: usize,
    /// Cost admitted and not finished.
    pub outstanding_pixels: u64,
    /// Bytes the running runs hold by their estimates, the bound (`limits.max_memory`), and
    /// runs that waited for memory.
    pub memory_held: u64,
    pub memory_limit: u64,
    pub memory_waits: u64,
    pub hot_cache_bytes: u64,
    /// Bytes the stored variants count for (the budget's measure).
    pub variant_bytes: u64,
    /// This node's name (`cluster.node_id`), as a label of `imgcas_node_info`.
    pub node_id: String,
    /// Third-party decoders' panics caught in this process, by source format (each answered
    /// as `undecodable`).
    pub decoder_panics: Vec<(&'static str, u64)>,
    /// Round trips to shared maps (PostgreSQL) by map operation.
    pub map_round_trips: Vec<(&'static str, u64)>,
    /// Per admission tier: its name, CPU slots it holds, and work waiting for one.
    pub tiers: Vec<(&'static str, usize, usize)>,
    /// Per tier, the tenants with the most processing cost by name and the rest as `other`.
    pub tenants: Vec<TenantReading>,
    /// The learned cost model: each class's factor, and the run-time estimates' errors.
    pub cost_model: Option<crate::admission::learned::Reading>,
    /// The maps' totals and the URL map's bytes, as last read (none before the first
    /// reading).
    pub store: Option<crate::maps::StoreReading>,
    /// Hashes on the takedown list, and the blocklist's listed hashes and fingerprints.
    pub takedowns: usize,
    pub blocklist: (usize, usize),
    /// The stores' budgets (`limits.urls_max_bytes`, `limits.variants_max_bytes`).
    pub urls_max_bytes: u64,
    pub variants_max_bytes: u64,
    /// Whether the maps and the blob store answered the last readiness sample (none before
    /// the first).
    pub ready: Option<bool>,
}

impl Default for Metrics {
    fn default() -> Self {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS)
            // Only an empty bucket list is refused, and ours is not empty.
            .unwrap_or_else(|_| PrometheusBuilder::new())
            .build_recorder();
        let handle = recorder.handle();
        let m = Metrics {
            recorder: Arc::new(recorder),
            handle,
        };
        m.with(describe);
        m
    }
}

fn describe() {
    describe_counter!(
        "imgcas_http_errors_total",
        "Error answers by their code (docs/api.md's error codes)"
    );
    describe_counter!(
        "imgcas_claim_takeovers_total",
        "Claims this node held that another node took over after their lease lapsed"
    );
    // Registered at start, so that a rate or an alert over them reads 0 rather than nothing
    // until the first one happens (a bounded set of labels).
    counter!("imgcas_claim_takeovers_total").increment(0);
    for tier in crate::admission::Tier::ALL {
        for reason in crate::admission::REFUSAL_REASONS {
            counter!("imgcas_admission_rejections_total", "reason" => *reason, "tier" => tier.name())
                .increment(0);
        }
    }
    describe_gauge!(
        "imgcas_ready",
        "1 while the maps and the blob store answer (as /readyz), else 0; sampled by the node"
    );
    describe_counter!(
        "imgcas_near_dedup_bytes_saved_total",
        "Bytes of downloads not stored because canonical mode served them from a near-duplicate original"
    );
    describe_counter!(
        "imgcas_queue_waits_total",
        "Processing runs that took a CPU slot (the count under imgcas_queue_wait_seconds)"
    );
    describe_counter!(
        "imgcas_origin_fetch_microseconds_total",
        "Time from sending a request to an origin to its answer, summed, by origin (first 50, then other)"
    );
    describe_counter!(
        "imgcas_origin_failures_total",
        "Origin requests that ended in an error (refused, timed out, an error status), by origin"
    );
    describe_gauge!(
        "imgcas_store_originals",
        "Originals stored, as the maps count them (shared by every node; read at most once a minute)"
    );
    describe_gauge!(
        "imgcas_store_original_bytes",
        "Bytes of the originals stored"
    );
    describe_gauge!("imgcas_store_urls", "URL map entries");
    describe_gauge!(
        "imgcas_store_pointed_bytes",
        "Bytes the URL map points at: each entry counts the bytes of the original it is served from"
    );
    describe_gauge!(
        "imgcas_store_exact_saved_bytes",
        "Bytes not stored because URLs share exact bytes (an original's bytes per URL beyond its first)"
    );
    describe_gauge!(
        "imgcas_store_near_urls",
        "URL entries served from a near-duplicate original (canonical mode)"
    );
    describe_gauge!(
        "imgcas_store_near_saved_bytes",
        "Bytes not stored for URLs served from a near-duplicate, at the serving original's size"
    );
    describe_gauge!(
        "imgcas_store_reading_timestamp_seconds",
        "When the imgcas_store_* figures were read from the maps"
    );
    describe_gauge!(
        "imgcas_url_bytes",
        "What the URL map's entries count for against limits.urls_max_bytes"
    );
    describe_gauge!("imgcas_url_max_bytes", "limits.urls_max_bytes");
    describe_gauge!(
        "imgcas_takedowns",
        "Hashes on the takedown list (as this node holds it)"
    );
    describe_gauge!(
        "imgcas_blocklist_entries",
        "Blocklist entries as this node holds them, by kind (sha256: exact bytes; fingerprint: a picture within a radius)"
    );
    describe_gauge!("imgcas_variant_max_bytes", "limits.variants_max_bytes");
    describe_gauge!(
        "imgcas_walk_rows",
        "Rows a long walk over the store (facts_backfill, fingerprint_backfill) has handled in its run on this node"
    );
    describe_gauge!(
        "imgcas_walk_running",
        "1 while this node runs the walk (it holds the walk's lease), else 0"
    );
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
        "Wall time of processing runs, from taking a CPU slot to the result (a run waiting for a core counts)"
    );
    describe_counter!(
        "imgcas_quality_searches_total",
        "Variants whose q=auto quality was searched"
    );
    describe_counter!(
        "imgcas_quality_search_encodes_total",
        "Encodes those searches made (each decoded and scored)"
    );
    describe_histogram!(
        "imgcas_queue_wait_seconds",
        Unit::Seconds,
        "Time admitted processing runs waited for a CPU slot"
    );
    describe_counter!(
        "imgcas_admission_rejections_total",
        "Processing runs refused with 503 overloaded, by reason and tier"
    );
    describe_gauge!(
        "imgcas_admission_slots_held",
        "CPU slots held, by admission tier"
    );
    describe_gauge!(
        "imgcas_admission_waiting",
        "Work waiting for a CPU slot (runs and side work), by admission tier"
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
        "imgcas_variant_object_reads_total",
        "Variant objects read from the blob store"
    );
    describe_counter!(
        "imgcas_original_reads_total",
        "Originals' bytes read from the blob store"
    );
    describe_counter!(
        "imgcas_hot_key_pins_total",
        "Variants kept in memory for a while as hot keys"
    );
    describe_counter!(
        "imgcas_origin_requests_total",
        "Requests sent to origins, by the origin that answered (a redirect's last hop; the first 50 named, the rest other)"
    );
    describe_counter!(
        "imgcas_origin_slot_waits_total",
        "Polls of a download slot the cluster held all of, by origin"
    );
    describe_counter!(
        "imgcas_origin_slot_timeouts_total",
        "Downloads that gave up waiting for a slot at their request's deadline, by origin"
    );
    describe_counter!(
        "imgcas_origin_rate_waits_total",
        "Waits for an origin's request rate, by origin"
    );
    describe_counter!(
        "imgcas_origin_pauses_total",
        "Pauses of an origin for every node, by origin and reason (retry_after, refused)"
    );
    describe_counter!(
        "imgcas_origin_paused_total",
        "Downloads not sent because their origin was paused, by origin"
    );
    describe_histogram!(
        "imgcas_origin_slot_wait_seconds",
        "Time a download waited for its slots and its origin's rate"
    );
    describe_counter!(
        "imgcas_tenant_spent_units_total",
        "Cost units tenants spent of their budgets, by tenant"
    );
    describe_gauge!(
        "imgcas_cost_class_factor",
        "Learned seconds per cost unit of a class of runs (output format and operation), against the average"
    );
    describe_counter!(
        "imgcas_cost_class_runs_total",
        "Runs each cost class learned from"
    );
    describe_counter!(
        "imgcas_run_estimate_error_milliseconds_total",
        "Absolute error of processing runs' time estimates, by model (learned per class; fixed: the plan's cost alone)"
    );
    describe_counter!(
        "imgcas_run_measured_milliseconds_total",
        "Processing runs' measured time, the estimates' errors' denominator"
    );
    describe_counter!(
        "imgcas_run_estimates_total",
        "Processing runs whose estimate was compared"
    );
    describe_counter!(
        "imgcas_tenant_over_budget_total",
        "Work refused over_budget, by tenant"
    );
    describe_counter!(
        "imgcas_origin_failure_hits_total",
        "Requests answered from the negative cache of origin failures"
    );
    describe_counter!(
        "imgcas_background_dropped_total",
        "Facts and fingerprints not queued after a request (limits.background_queue full)"
    );
    describe_counter!(
        "imgcas_runs_stopped_total",
        "Processing runs stopped past their deadline (their request answered 422 or 503)"
    );
    describe_counter!(
        "imgcas_stale_for_maps_total",
        "Stale URL entries served because the maps could not be asked to revalidate them"
    );
    describe_gauge!(
        "imgcas_flights",
        "Downloads (kind=download) and processing runs (kind=process) under way"
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
    describe_gauge!(
        "imgcas_processing_memory_bytes",
        "Bytes the running processing runs hold, by their estimates"
    );
    describe_gauge!(
        "imgcas_processing_memory_limit_bytes",
        "Bytes processing runs may hold at once (limits.max_memory)"
    );
    describe_counter!(
        "imgcas_processing_memory_waits_total",
        "Runs that waited for memory to start"
    );
    describe_gauge!("imgcas_hot_cache_bytes", "Bytes held by the hot cache");
    describe_gauge!(
        "imgcas_variant_bytes",
        "Bytes the stored variants hold, as limited by limits.variants_max_bytes"
    );
    describe_counter!(
        "imgcas_variants_evicted_total",
        "Variants evicted to keep within limits.variants_max_bytes"
    );
    describe_counter!(
        "imgcas_urls_forgotten_total",
        "URL entries dropped after fetch.forget_after without a request"
    );
    describe_counter!(
        "imgcas_urls_evicted_total",
        "URL entries dropped, least recently used first, to keep within limits.urls_max_bytes"
    );
    describe_counter!(
        "imgcas_claim_waits_total",
        "Polls for a download or processing run another node claimed"
    );
    describe_counter!(
        "imgcas_near_duplicates_found_total",
        "Originals found, when first fingerprinted, within the report radius of another"
    );
    describe_counter!(
        "imgcas_near_merges_refused_total",
        "Canonical merges a fingerprint proposed and the pixel check refused (not the same picture everywhere)"
    );
    describe_counter!(
        "imgcas_fingerprints_computed_total",
        "Perceptual fingerprints computed (one per original, at its first storing or backfill)"
    );
    describe_counter!(
        "imgcas_decoder_panics_total",
        "Panics of third-party decoders on input bytes, by source format, each answered undecodable"
    );
    describe_counter!(
        "imgcas_maps_statements_total",
        "Statements sent to shared maps (PostgreSQL), each one round trip, by map operation"
    );
    describe_counter!(
        "imgcas_facts_computed_total",
        "Originals' facts computed (placeholders and frames: one per original, at its first storing or backfill)"
    );
    describe_counter!(
        "imgcas_source_decodes_total",
        "Decodes of source pixels, by what was decoded (an original or its mezzanine), for processing runs, facts and fingerprints; whatever shares a decode counts it once"
    );
    describe_counter!(
        "imgcas_mezzanines_built_total",
        "Mezzanines built (one per large original, unless evicted or lost)"
    );
    describe_gauge!(
        "imgcas_node_info",
        "Always 1; its node_id label names this node (cluster.node_id)"
    );
}

impl Metrics {
    /// Runs `f` with this service's recorder behind the `metrics` macros.
    pub fn with<T>(&self, f: impl FnOnce() -> T) -> T {
        metrics::with_local_recorder(self.recorder.as_ref(), f)
    }

    /// Drains queued histogram samples into their buckets (done once a second by the app,
    /// and by every render).
    pub fn upkeep(&self) {
        self.handle.run_upkeep();
    }

    /// The page: the readings, then everything recorded.
    pub fn render(&self, readings: &Readings) -> String {
        let s = &readings.stats;
        self.with(|| {
            let counters = [
                ("imgcas_processing_runs_total", s.processing_runs),
                ("imgcas_origin_downloads_total", s.downloads),
                ("imgcas_origin_downloaded_bytes_total", s.downloaded_bytes),
                ("imgcas_origin_not_modified_total", s.not_modified),
                ("imgcas_originals_stored_total", s.originals_stored),
                ("imgcas_dedup_bytes_saved_total", s.dedup_bytes_saved),
                ("imgcas_hot_cache_hits_total", s.hot_hits),
                ("imgcas_variant_map_reads_total", s.variant_map_reads),
                ("imgcas_variant_object_reads_total", s.variant_object_reads),
                ("imgcas_original_reads_total", s.original_reads),
                ("imgcas_hot_key_pins_total", s.hot_key_pins),
                ("imgcas_origin_failure_hits_total", s.origin_failure_hits),
                ("imgcas_stale_for_maps_total", s.stale_for_maps),
                ("imgcas_runs_stopped_total", s.runs_stopped),
                ("imgcas_background_dropped_total", s.background_dropped),
                ("imgcas_variants_evicted_total", s.variants_evicted),
                ("imgcas_urls_forgotten_total", s.urls_forgotten),
                ("imgcas_urls_evicted_total", s.urls_evicted),
                ("imgcas_claim_waits_total", s.claim_waits),
                (
                    "imgcas_near_duplicates_found_total",
                    s.near_duplicates_found,
                ),
                ("imgcas_near_merges_refused_total", s.near_merges_refused),
                (
                    "imgcas_fingerprints_computed_total",
                    s.fingerprints_computed,
                ),
                ("imgcas_facts_computed_total", s.facts_computed),
                ("imgcas_mezzanines_built_total", s.mezzanines_built),
            ];
            for (name, value) in counters {
                counter!(name).absolute(value);
            }
            counter!("imgcas_source_decodes_total", "from" => "original")
                .absolute(s.decodes_original);
            counter!("imgcas_source_decodes_total", "from" => "mezzanine")
                .absolute(s.decodes_mezzanine);
            counter!("imgcas_small_decodes_spared_total").absolute(s.small_decodes_spared);
            counter!("imgcas_animation_frames_decoded_total").absolute(s.frames_decoded);
            counter!("imgcas_near_dedup_bytes_saved_total").absolute(s.near_bytes_saved);
            counter!("imgcas_queue_waits_total").absolute(s.queue_waits);
            gauge!("imgcas_url_max_bytes").set(readings.urls_max_bytes as f64);
            gauge!("imgcas_takedowns").set(readings.takedowns as f64);
            gauge!("imgcas_blocklist_entries", "kind" => "sha256").set(readings.blocklist.0 as f64);
            gauge!("imgcas_blocklist_entries", "kind" => "fingerprint")
                .set(readings.blocklist.1 as f64);
            gauge!("imgcas_variant_max_bytes").set(readings.variants_max_bytes as f64);
            if let Some(ready) = readings.ready {
                gauge!("imgcas_ready").set(f64::from(u8::from(ready)));
            }
            if let Some(reading) = &readings.store {
                let t = &reading.totals;
                let store = [
                    ("imgcas_store_originals", t.originals),
                    ("imgcas_store_original_bytes", t.original_bytes),
                    ("imgcas_store_urls", t.urls),
                    ("imgcas_store_pointed_bytes", t.pointed_bytes),
                    ("imgcas_store_exact_saved_bytes", t.exact_saved_bytes),
                    ("imgcas_store_near_urls", t.near_urls),
                    ("imgcas_store_near_saved_bytes", t.near_saved_bytes),
                    ("imgcas_url_bytes", reading.url_bytes),
                ];
                for (name, value) in store {
                    gauge!(name).set(value as f64);
                }
                gauge!("imgcas_store_reading_timestamp_seconds")
                    .set(reading.read_at_ms as f64 / 1000.0);
            }
            gauge!("imgcas_coalesced_waiters").set(readings.coalesced_waiters as f64);
            gauge!("imgcas_flights", "kind" => "download").set(readings.download_flights as f64);
            gauge!("imgcas_flights", "kind" => "process").set(readings.process_flights as f64);
            gauge!("imgcas_processing_queue_depth").set(readings.queue_depth as f64);
            gauge!("imgcas_processing_outstanding_pixels").set(readings.outstanding_pixels as f64);
            gauge!("imgcas_processing_memory_bytes").set(readings.memory_held as f64);
            gauge!("imgcas_processing_memory_limit_bytes").set(readings.memory_limit as f64);
            counter!("imgcas_processing_memory_waits_total").absolute(readings.memory_waits);
            gauge!("imgcas_hot_cache_bytes").set(readings.hot_cache_bytes as f64);
            gauge!("imgcas_variant_bytes").set(readings.variant_bytes as f64);
            gauge!("imgcas_node_info", "node_id" => readings.node_id.clone()).set(1.0);
            for (format, panics) in &readings.decoder_panics {
                counter!("imgcas_decoder_panics_total", "format" => *format).absolute(*panics);
            }
            for (op, trips) in &readings.map_round_trips {
                counter!("imgcas_maps_statements_total", "op" => *op).absolute(*trips);
            }
            if let Some(model) = &readings.cost_model {
                for (class, factor, runs) in &model.classes {
                    gauge!("imgcas_cost_class_factor", "class" => class.clone()).set(*factor);
                    counter!("imgcas_cost_class_runs_total", "class" => class.clone())
                        .absolute(u64::from(*runs));
                }
                let e = &model.errors;
                let ms = |secs: f64| (secs * 1000.0).round() as u64;
                counter!("imgcas_run_estimate_error_milliseconds_total", "model" => "learned")
                    .absolute(ms(e.learned_error_secs));
                counter!("imgcas_run_estimate_error_milliseconds_total", "model" => "fixed")
                    .absolute(ms(e.fixed_error_secs));
                counter!("imgcas_run_measured_milliseconds_total").absolute(ms(e.measured_secs));
                counter!("imgcas_run_estimates_total").absolute(e.runs);
            }
            for (tier, held, waiting) in &readings.tiers {
                gauge!("imgcas_admission_slots_held", "tier" => *tier).set(*held as f64);
                gauge!("imgcas_admission_waiting", "tier" => *tier).set(*waiting as f64);
            }
        });
        let mut page = self.handle.render();
        page.push_str(&tenant_lines(&readings.tenants));
        page
    }
}

/// The per-tenant series, written here rather than recorded: which tenants are named
/// changes as their costs do, and a recorded series would keep every name it ever saw.
fn tenant_lines(tenants: &[TenantReading]) -> String {
    use std::fmt::Write;
    type Series = (&'static str, &'static str, fn(&TenantReading) -> u64);
    let series: [Series; 3] = [
        (
            "imgcas_tenant_processing_pixels_total",
            "Processing cost admitted, in pixels, by tier and tenant (the 10 dearest; the rest as `other`)",
            |r| r.totals.cost,
        ),
        (
            "imgcas_tenant_processing_runs_total",
            "Processing runs admitted, by tier and tenant",
            |r| r.totals.runs,
        ),
        (
            "imgcas_tenant_admission_rejections_total",
            "Processing refused by admission control, by tier and tenant",
            |r| r.totals.refused,
        ),
    ];
    let mut out = String::new();
    if tenants.is_empty() {
        return out;
    }
    for (name, help, value) in series {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for r in tenants {
            let _ = writeln!(
                out,
                "{name}{{tier=\"{}\",tenant=\"{}\"}} {}",
                r.tier,
                escape_label(&r.tenant),
                value(r)
            );
        }
    }
    out
}

/// A label value as the text format needs it.
fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tenant_tests {
    use super::*;
    use crate::admission::Totals;

    #[test]
    fn tenant_lines_are_prometheus_text() {
        let lines = tenant_lines(&[TenantReading {
            tier: "bulk",
            tenant: "a\"b".into(),
            totals: Totals {
                cost: 5,
                runs: 1,
                refused: 0,
            },
        }]);
        assert!(
            lines.contains(
                "imgcas_tenant_processing_pixels_total{tier=\"bulk\",tenant=\"a\\\"b\"} 5"
            ),
            "{lines}"
        );
        assert!(lines.contains("# TYPE imgcas_tenant_processing_runs_total counter"));
    }
}
