//! The operator page's markup: the document, its two refreshed parts (`live`: savings and
//! now; `moderation`), the login form, and the plots, drawn here as SVG. Every plot carries
//! what it was drawn from: the metric it follows (`data-metric`, with `data-labels` when it
//! is one series of it), the counter's value at each point (`data-total`) and the value
//! drawn (`data-v`), so what it shows can be held against `/metrics`.

use std::fmt::Write;
use std::time::Duration;

use super::history::Sample;
use crate::hash::ContentHash;
use crate::maps::BlockEntry;
use crate::metrics::Readings;
use crate::pipeline::OriginTally;
use crate::wire::SavingsAnswer;

/// The takedowns (hash, when) and the blocklist's entries.
pub type Moderation = (Vec<(ContentHash, u64)>, Vec<BlockEntry>);

/// What the page shows, read at one moment.
pub struct View {
    pub savings: SavingsAnswer,
    pub readings: Readings,
    pub origins: Vec<(String, OriginTally)>,
    pub hour: Vec<Sample>,
    pub day: Vec<Sample>,
    pub hour_span: Duration,
    pub day_span: Duration,
    pub refresh_secs: u64,
    /// The takedowns and blocklist entries, or why they are not shown.
    pub moderation: Result<Moderation, String>,
    pub now_ms: u64,
}

/// Text made safe for HTML content and attribute values.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{n} B"),
        _ => format!("{value:.1} {}", UNITS[unit]),
    }
}

fn ratio(value: Option<f64>, digits: usize) -> String {
    value.map_or_else(|| "–".to_string(), |v| format!("{v:.digits$}"))
}

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_string(), |v| format!("{:.1} %", v * 100.0))
}

fn ago(now_ms: u64, at_ms: u64) -> String {
    let secs = now_ms.saturating_sub(at_ms) / 1000;
    match secs {
        0..=119 => format!("{secs} s ago"),
        120..=7199 => format!("{} min ago", secs / 60),
        _ => format!("{} h ago", secs / 3600),
    }
}

fn span_text(d: Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0..=5399 => format!("{} min", secs.div_ceil(60)),
        _ => format!("{} h", secs.div_ceil(3600)),
    }
}

/// The whole document.
pub fn document(view: &View) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>imgcas · {node}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/admin/admin.css"><link rel="icon" href="data:,">
<script src="/admin/admin.js" defer></script>
<noscript><meta http-equiv="refresh" content="{refresh}"></noscript>
</head><body data-refresh="{refresh}">
<header><h1>imgcas</h1><p class="node">node <b>{node}</b> · this page shows this node's own figures; the store totals are every node's, from the maps</p>
<form method="post" action="/admin/logout"><button>Log out</button></form></header>
<main><div id="live">{live}</div><div id="moderation">{moderation}</div></main>
</body></html>
"#,
        node = esc(&view.savings.node_id),
        refresh = view.refresh_secs.max(5),
        live = live(view),
        moderation = moderation(view),
    );
    out
}

/// The login form, with why the last attempt failed.
pub fn login(message: Option<&str>) -> String {
    let message = message.map_or(String::new(), |m| {
        format!(r#"<p class="error" role="alert">{}</p>"#, esc(m))
    });
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>imgcas · log in</title>
<link rel="stylesheet" href="/admin/admin.css"><link rel="icon" href="data:,"></head>
<body class="login"><main><h1>imgcas</h1>
<p>This page needs a token with the <code>metrics</code> scope (the admin token has every scope).</p>
{message}
<form method="post" action="/admin/login"><label>Token <input type="password" name="token" autocomplete="current-password" required></label>
<button>Log in</button></form></main></body></html>
"#
    )
}

/// The refreshed part: savings and now.
pub fn live(view: &View) -> String {
    let mut out = String::new();
    savings(&mut out, view);
    now(&mut out, view);
    out
}

fn figure(out: &mut String, id: &str, label: &str, value: &str) {
    let _ = write!(
        out,
        r#"<div class="figure" id="{id}"><dt>{label}</dt><dd>{}</dd></div>"#,
        esc(value)
    );
}

fn savings(out: &mut String, view: &View) {
    let n = view.savings.node.clone().unwrap_or_default();
    out.push_str(r#"<section id="savings"><h2>Savings</h2>"#);
    match &view.savings.store {
        Some(st) => {
            let _ = write!(
                out,
                r#"<h3>The store <small>(every node's, read {})</small></h3><dl class="figures">"#,
                ago(view.now_ms, st.read_at_ms)
            );
            figure(
                out,
                "store-originals",
                "Originals stored",
                &format!(
                    "{} · {}",
                    st.totals.originals,
                    bytes(st.totals.original_bytes)
                ),
            );
            figure(
                out,
                "store-urls",
                "URLs pointing at them",
                &format!("{} · {}", st.totals.urls, bytes(st.totals.pointed_bytes)),
            );
            figure(
                out,
                "store-exact",
                "Saved by exact dedup",
                &bytes(st.totals.exact_saved_bytes),
            );
            figure(
                out,
                "store-near",
                "Saved by near-duplicates",
                &format!(
                    "{} · {} URLs",
                    bytes(st.totals.near_saved_bytes),
                    st.totals.near_urls
                ),
            );
            out.push_str("</dl>");
        }
        None => out.push_str("<p>The store's totals have not been read yet.</p>"),
    }
    walks(out, view);
    out.push_str(r#"<h3>This node <small>(since it started)</small></h3><dl class="figures">"#);
    figure(
        out,
        "node-requests",
        "Image requests",
        &n.requests.to_string(),
    );
    figure(
        out,
        "node-runs",
        "Processing runs",
        &n.processing_runs.to_string(),
    );
    figure(
        out,
        "node-per-run",
        "Requests per run",
        &ratio(n.requests_per_run, 1),
    );
    figure(out, "node-hit-ratio", "Hit ratio", &percent(n.hit_ratio));
    figure(
        out,
        "node-exact",
        "Bytes not stored again (exact)",
        &bytes(n.exact_saved_bytes),
    );
    figure(
        out,
        "node-near",
        "Bytes not stored (near-duplicate)",
        &bytes(n.near_saved_bytes),
    );
    out.push_str("</dl>");
    plots(out, view, &SAVINGS_PLOTS);
    out.push_str("</section>");
}

/// Where each walk over the store stands (the backfills), whichever node runs it.
fn walks(out: &mut String, view: &View) {
    if view.savings.walks.is_empty() {
        return;
    }
    out.push_str(
        r#"<h3>Walks <small>(every node's, from the maps)</small></h3><dl class="figures">"#,
    );
    for w in &view.savings.walks {
        let state = match w.position.finished_ms {
            Some(at) => format!("finished {}", ago(view.now_ms, at)),
            None => format!("went on {}", ago(view.now_ms, w.position.updated_ms)),
        };
        figure(
            out,
            &format!("walk-{}", w.walk),
            &w.walk,
            &format!(
                "{} rows · {state} · on {}",
                w.position.rows, w.position.node
            ),
        );
    }
    out.push_str("</dl>");
}

fn now(out: &mut String, view: &View) {
    let r = &view.readings;
    out.push_str(r#"<section id="now"><h2>Now</h2>"#);
    out.push_str(r#"<h3>Admission by tier</h3><table id="tiers"><thead><tr><th>tier</th><th>slots held</th><th>waiting</th></tr></thead><tbody>"#);
    for (tier, held, waiting) in &r.tiers {
        let _ = write!(
            out,
            "<tr><td>{tier}</td><td>{held}</td><td>{waiting}</td></tr>"
        );
    }
    let _ = write!(
        out,
        "</tbody></table><p>Queue: {} runs waiting for a CPU slot, {} pixels of cost admitted.</p>",
        r.queue_depth, r.outstanding_pixels
    );
    out.push_str(r#"<h3>Admission by tenant</h3><table id="tenants"><thead><tr><th>tier</th><th>tenant</th><th>runs</th><th>cost (MP)</th><th>shed</th></tr></thead><tbody>"#);
    if r.tenants.is_empty() {
        out.push_str(r#"<tr><td colspan="5">no processing yet</td></tr>"#);
    }
    for t in &r.tenants {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{}</td></tr>",
            t.tier,
            esc(&t.tenant),
            t.totals.runs,
            t.totals.cost as f64 / 1e6,
            t.totals.refused
        );
    }
    out.push_str("</tbody></table>");
    plots(out, view, &NOW_PLOTS);
    origins(out, view);
    budget(out, view);
    out.push_str("</section>");
}

fn origins(out: &mut String, view: &View) {
    let mean_ms = |t: &OriginTally| t.seconds * 1000.0 / t.requests.max(1) as f64;
    let mut slowest: Vec<&(String, OriginTally)> = view.origins.iter().collect();
    slowest.sort_by(|a, b| mean_ms(&b.1).total_cmp(&mean_ms(&a.1)).then(a.0.cmp(&b.0)));
    let mut failing: Vec<&(String, OriginTally)> = view
        .origins
        .iter()
        .filter(|(_, t)| t.failures > 0)
        .collect();
    failing.sort_by(|a, b| b.1.failures.cmp(&a.1.failures).then(a.0.cmp(&b.0)));
    let table = |out: &mut String, id: &str, title: &str, rows: &[&(String, OriginTally)]| {
        let _ = write!(
            out,
            r#"<h3>{title}</h3><table id="{id}"><thead><tr><th>origin</th><th>requests</th><th>failures</th><th>mean ms</th></tr></thead><tbody>"#
        );
        if rows.is_empty() {
            out.push_str(r#"<tr><td colspan="4">none</td></tr>"#);
        }
        for (origin, t) in rows.iter().take(5).copied() {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td></tr>",
                esc(origin),
                t.requests,
                t.failures,
                mean_ms(t)
            );
        }
        out.push_str("</tbody></table>");
    };
    table(out, "slowest-origins", "Slowest origins", &slowest);
    table(out, "failing-origins", "Most failing origins", &failing);
}

fn budget(out: &mut String, view: &View) {
    let r = &view.readings;
    out.push_str(r#"<h3>Storage budget</h3><dl class="figures">"#);
    let bar = |used: u64, limit: u64| {
        let share = if limit == 0 {
            0.0
        } else {
            (used as f64 / limit as f64).min(1.0)
        };
        format!(
            r##"<svg class="bar" viewBox="0 0 200 10" width="200" height="10" role="img" aria-label="{:.0} %"><rect width="200" height="10" fill="#e6e6e6"/><rect width="{:.1}" height="10" fill="{}"/></svg>"##,
            share * 100.0,
            share * 200.0,
            if share > 0.9 { "#c0392b" } else { "#2e86c1" }
        )
    };
    let _ = write!(
        out,
        r#"<div class="figure" id="budget-variants"><dt>Variants</dt><dd>{} of {} {}</dd></div>"#,
        bytes(r.variant_bytes),
        bytes(r.variants_max_bytes),
        bar(r.variant_bytes, r.variants_max_bytes)
    );
    match &r.store {
        Some(reading) => {
            let _ = write!(
                out,
                r#"<div class="figure" id="budget-urls"><dt>URL map</dt><dd>{} of {} {}</dd></div>"#,
                bytes(reading.url_bytes),
                bytes(r.urls_max_bytes),
                bar(reading.url_bytes, r.urls_max_bytes)
            );
        }
        None => figure(out, "budget-urls", "URL map", "not read yet"),
    }
    out.push_str("</dl>");
}

/// The moderation part: recent takedowns and blocklist entries, and the forms that call
/// the existing routes (through `admin.js`).
pub fn moderation(view: &View) -> String {
    let mut out = String::from(r#"<section id="moderation-section"><h2>Moderation</h2>"#);
    out.push_str(r#"<noscript><p>The forms below need JavaScript; the routes they call are in docs/api.md.</p></noscript>"#);
    let (takedowns, entries) = match &view.moderation {
        Ok(lists) => lists,
        Err(why) => {
            let _ = write!(out, r#"<p class="error">{}</p></section>"#, esc(why));
            return out;
        }
    };
    out.push_str(concat!(
        r#"<form class="api" id="block-form" data-method="POST" data-path="/v1/blocklist" data-json="sha256 note">"#,
        r#"<h3>List on the blocklist</h3><label>SHA-256 <input name="sha256" required pattern="[0-9a-fA-F]{64}" size="66"></label> "#,
        r#"<label>Note <input name="note" maxlength="200"></label> <button>List</button> <output></output></form>"#,
        r#"<form class="api" id="takedown-form" data-method="DELETE" data-path="/v1/originals/{sha256}">"#,
        r#"<h3>Take content down</h3><label>SHA-256 <input name="sha256" required pattern="[0-9a-fA-F]{64}" size="66"></label> "#,
        r#"<button>Take down</button> <output></output></form>"#,
    ));
    let mut recent: Vec<&(ContentHash, u64)> = takedowns.iter().collect();
    recent.sort_by_key(|t| std::cmp::Reverse(t.1));
    let _ = write!(
        out,
        r#"<h3>Recent takedowns <small>({} in all)</small></h3><table id="takedowns"><tbody>"#,
        takedowns.len()
    );
    if recent.is_empty() {
        out.push_str(r#"<tr><td>none</td></tr>"#);
    }
    for (hash, at) in recent.iter().take(20) {
        let hex = hash.to_hex();
        let _ = write!(
            out,
            r#"<tr><td><code>{hex}</code></td><td>{}</td><td><form class="api" data-method="DELETE" data-path="/v1/takedowns/{hex}"><button>Lift</button> <output></output></form></td></tr>"#,
            ago(view.now_ms, *at)
        );
    }
    let mut listed: Vec<&BlockEntry> = entries.iter().collect();
    listed.sort_by_key(|e| std::cmp::Reverse(e.listed_ms));
    let _ = write!(
        out,
        r#"</tbody></table><h3>Blocklist <small>({} entries)</small></h3><table id="blocklist"><tbody>"#,
        entries.len()
    );
    if listed.is_empty() {
        out.push_str(r#"<tr><td>none</td></tr>"#);
    }
    for entry in listed.iter().take(20) {
        let what = entry
            .sha256
            .as_deref()
            .or(entry.fingerprint.as_deref())
            .unwrap_or("");
        let _ = write!(
            out,
            r#"<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td><form class="api" data-method="DELETE" data-path="/v1/blocklist/{}"><button>Lift</button> <output></output></form></td></tr>"#,
            esc(what),
            esc(entry.note.as_deref().unwrap_or("")),
            ago(view.now_ms, entry.listed_ms),
            esc(&entry.id)
        );
    }
    out.push_str("</tbody></table></section>");
    out
}

/// How a plot's value at a sample follows from the samples before it.
enum Derive {
    /// The counter's increase over the interval.
    Delta,
    /// `numerator`'s increase over the counter's.
    Ratio(fn(&Sample) -> u64),
    /// `micros`' increase over the counter's, in milliseconds.
    MeanMs(fn(&Sample) -> u64),
}

struct Plot {
    id: &'static str,
    title: &'static str,
    metric: &'static str,
    labels: &'static str,
    /// The counter the plot follows (what `data-total` holds).
    total: fn(&Sample) -> u64,
    derive: Derive,
}

impl Plot {
    /// The points: (time, the counter, the value drawn), one per interval with a value.
    fn points(&self, samples: &[Sample]) -> Vec<(u64, u64, f64)> {
        samples
            .windows(2)
            .filter_map(|w| {
                let (a, b) = (&w[0], &w[1]);
                let total = (self.total)(b);
                let delta = total.saturating_sub((self.total)(a));
                let value = match self.derive {
                    Derive::Delta => Some(delta as f64),
                    Derive::Ratio(whole) => {
                        let whole = whole(b).saturating_sub(whole(a));
                        (whole > 0).then(|| delta as f64 / whole as f64)
                    }
                    Derive::MeanMs(micros) => {
                        let micros = micros(b).saturating_sub(micros(a));
                        Some(match delta {
                            0 => 0.0,
                            n => micros as f64 / n as f64 / 1000.0,
                        })
                    }
                };
                value.map(|v| (b.at_ms, total, v))
            })
            .collect()
    }
}

/// The savings section's plots.
const SAVINGS_PLOTS: [Plot; 4] = [
    Plot {
        id: "requests",
        title: "Image requests",
        metric: "imgcas_cache_outcomes_total",
        labels: "",
        total: |s| s.requests,
        derive: Derive::Delta,
    },
    Plot {
        id: "runs",
        title: "Processing runs",
        metric: "imgcas_processing_runs_total",
        labels: "",
        total: |s| s.runs,
        derive: Derive::Delta,
    },
    // The hits' share of the requests; the plot follows the hits' counter.
    Plot {
        id: "hit-ratio",
        title: "Hit ratio",
        metric: "imgcas_cache_outcomes_total",
        labels: r#"outcome="hit""#,
        total: |s| s.hits,
        derive: Derive::Ratio(|s| s.requests),
    },
    Plot {
        id: "dedup-saved",
        title: "Bytes not stored again",
        metric: "imgcas_dedup_bytes_saved_total",
        labels: "",
        total: |s| s.dedup_saved,
        derive: Derive::Delta,
    },
];

/// The now section's plots.
const NOW_PLOTS: [Plot; 3] = [
    Plot {
        id: "queue-wait",
        title: "Queue wait (mean ms)",
        metric: "imgcas_queue_waits_total",
        labels: "",
        total: |s| s.queue_waits,
        derive: Derive::MeanMs(|s| s.queue_wait_micros),
    },
    Plot {
        id: "shed",
        title: "Shed by admission",
        metric: "imgcas_tenant_admission_rejections_total",
        labels: "",
        total: |s| s.shed,
        derive: Derive::Delta,
    },
    Plot {
        id: "errors",
        title: "Error answers",
        metric: "imgcas_http_errors_total",
        labels: "",
        total: |s| s.errors,
        derive: Derive::Delta,
    },
];

fn plots(out: &mut String, view: &View, plots: &[Plot]) {
    out.push_str(r#"<div class="plots">"#);
    for plot in plots {
        let _ = write!(
            out,
            r#"<figure class="plot-pair"><figcaption>{}</figcaption>"#,
            plot.title
        );
        svg(out, plot, "hour", &view.hour, view.hour_span);
        svg(out, plot, "day", &view.day, view.day_span);
        out.push_str("</figure>");
    }
    out.push_str("</div>");
}

const WIDTH: f64 = 300.0;
const HEIGHT: f64 = 90.0;
const PAD: f64 = 4.0;

/// One plot of one window as SVG: a line through the points, each point a circle holding
/// its figures.
fn svg(out: &mut String, plot: &Plot, window: &str, samples: &[Sample], span: Duration) {
    let points = plot.points(samples);
    let last = samples.last().map_or(0, |s| (plot.total)(s));
    let base = samples.first().map_or(0, |s| (plot.total)(s));
    let end = samples.last().map_or(0, |s| s.at_ms);
    // The window, or as much of it as the node has seen (a node started minutes ago plots
    // its minutes across the width, and says so).
    let first = samples.first().map_or(0, |s| s.at_ms);
    let start = end
        .saturating_sub(u64::try_from(span.as_millis()).unwrap_or(u64::MAX))
        .max(first);
    let span = Duration::from_millis(end - start);
    let top = points.iter().map(|p| p.2).fold(0.0f64, f64::max);
    let top = match plot.derive {
        Derive::Ratio(_) => 1.0,
        _ if top <= 0.0 => 1.0,
        _ => top,
    };
    let x = |at: u64| {
        PAD + (at.saturating_sub(start)) as f64 / (end.saturating_sub(start)).max(1) as f64
            * (WIDTH - 2.0 * PAD)
    };
    let y = |v: f64| HEIGHT - PAD - v / top * (HEIGHT - 2.0 * PAD);
    let _ = write!(
        out,
        r##"<svg class="plot" id="plot-{id}-{window}" data-window="{window}" data-metric="{metric}" data-labels="{labels}" data-base="{base}" data-last="{last}" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{title}, last {span}"><title>{title}, last {span}: up to {top}</title><rect class="frame" x="0.5" y="0.5" width="{w}" height="{h}" fill="none" stroke="#ccc"/>"##,
        id = plot.id,
        metric = plot.metric,
        labels = esc(plot.labels),
        title = plot.title,
        span = span_text(span),
        top = trim(top),
        w = WIDTH - 1.0,
        h = HEIGHT - 1.0,
    );
    if points.len() > 1 {
        let line: Vec<String> = points
            .iter()
            .map(|&(at, _, v)| format!("{:.1},{:.1}", x(at), y(v)))
            .collect();
        let _ = write!(
            out,
            r##"<polyline fill="none" stroke="#2e86c1" stroke-width="1.5" points="{}"/>"##,
            line.join(" ")
        );
    }
    for &(at, total, v) in &points {
        let _ = write!(
            out,
            r##"<circle cx="{:.1}" cy="{:.1}" r="2" fill="#2e86c1" data-at="{at}" data-total="{total}" data-v="{}"/>"##,
            x(at),
            y(v),
            trim(v)
        );
    }
    let _ = write!(
        out,
        r##"<text x="{PAD}" y="12" font-size="10" fill="#555">{} · last {}</text></svg>"##,
        trim(top),
        span_text(span)
    );
}

/// A value as short text: whole numbers without a fraction.
fn trim(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_ms: u64, requests: u64, hits: u64) -> Sample {
        Sample {
            at_ms,
            requests,
            hits,
            ..Sample::default()
        }
    }

    #[test]
    fn plots_hold_the_counters_they_draw() {
        let samples = [
            sample(0, 0, 0),
            sample(1000, 10, 5),
            sample(2000, 10, 5),
            sample(3000, 14, 8),
        ];
        let requests = &SAVINGS_PLOTS[0];
        assert_eq!(
            requests.points(&samples),
            [(1000, 10, 10.0), (2000, 10, 0.0), (3000, 14, 4.0)]
        );
        let hits = &SAVINGS_PLOTS[2];
        // No requests in the second interval: no ratio drawn for it.
        assert_eq!(hits.points(&samples), [(1000, 5, 0.5), (3000, 8, 0.75)]);
        let mut out = String::new();
        svg(
            &mut out,
            requests,
            "hour",
            &samples,
            Duration::from_secs(3600),
        );
        assert!(out.contains(r#"data-last="14""#) && out.contains(r#"data-base="0""#));
        assert_eq!(out.matches("<circle").count(), 3);
        assert!(
            !out.contains("style="),
            "no inline style: the CSP forbids it"
        );
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            esc(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
