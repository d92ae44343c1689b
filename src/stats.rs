//! Counters of the work the service did: the evidence that repeated work disappears.
//! (Exported as Prometheus metrics by a later issue; tests read them directly.)

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Stats {
    /// Full downloads from origins (200 answers with a body).
    pub downloads: AtomicU64,
    /// Conditional requests the origin answered `304`.
    pub not_modified: AtomicU64,
    /// Times the processors ran (a result or an error each).
    pub processing_runs: AtomicU64,
    /// Originals stored because their hash was new.
    pub originals_stored: AtomicU64,
}

impl Stats {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
