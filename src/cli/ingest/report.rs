//! The end of an `imgcas ingest` run: the whole report (`--json`) and the summary table.

use imgcas::wire::{ItemResult, Outcome, Summary};

/// The whole run's results.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub target: String,
    pub summary: Summary,
    pub bytes_sent: u64,
    pub seconds: f64,
    pub results: Vec<ItemResult>,
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// The summary table printed at the end (failures listed under it, at most 20).
pub fn describe(report: &Report) -> String {
    let s = &report.summary;
    let total = s.new + s.duplicate + s.changed + s.failed;
    let rate = total as f64 / report.seconds.max(1e-3);
    let mut out = format!(
        "ingest into {}\n\
         \x20 new          {:>8}\n\
         \x20 duplicate    {:>8}\n\
         \x20 changed      {:>8}\n\
         \x20 failed       {:>8}\n\
         \x20 total        {:>8}   in {:.1} s ({rate:.1}/s)\n\
         \x20 sent         {:>8}   (files uploaded)\n\
         \x20 dedup saved  {:>8}   (bytes received but already stored)\n",
        report.target,
        s.new,
        s.duplicate,
        s.changed,
        s.failed,
        total,
        report.seconds,
        human_bytes(report.bytes_sent),
        human_bytes(s.bytes_saved),
    );
    if s.near_duplicates > 0 {
        out.push_str(&format!(
            "  near-dup     {:>8}   (the same picture as another original, in other bytes)\n",
            s.near_duplicates
        ));
        let named = report.results.iter().filter_map(|r| {
            let s = r.stored_item()?;
            Some((&r.source, s.original.hash, s.near_duplicate_of?))
        });
        for (source, hash, of) in named.take(20) {
            out.push_str(&format!("  ~ {source} ({hash}) ≈ {of}\n"));
        }
    }
    if s.warmed + s.warm_failed > 0 {
        out.push_str(&format!(
            "  warmed       {:>8}   variants built ({} failed)\n",
            s.warmed, s.warm_failed
        ));
    }
    let failures: Vec<_> = report
        .results
        .iter()
        .filter_map(|r| match &r.outcome {
            Outcome::Failed(e) => Some((&r.source, e)),
            Outcome::Stored(_) => None,
        })
        .collect();
    for (source, e) in failures.iter().take(20) {
        out.push_str(&format!("  ! {source}: {} ({})\n", e.message, e.code));
    }
    if failures.len() > 20 {
        out.push_str(&format!("  ! … and {} more\n", failures.len() - 20));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_table_names_every_count() {
        let report = Report {
            target: "here".into(),
            summary: Summary {
                new: 1,
                duplicate: 2,
                changed: 3,
                failed: 0,
                downloaded: 6,
                bytes_saved: 2048,
                warmed: 0,
                warm_failed: 0,
                near_duplicates: 1,
            },
            bytes_sent: 10,
            seconds: 1.0,
            results: vec![],
        };
        let text = describe(&report);
        for needle in [
            "new",
            "duplicate",
            "changed",
            "failed",
            "2.0 KiB",
            "total",
            "near-dup",
        ] {
            assert!(text.contains(needle), "{needle} in {text}");
        }
    }
}
