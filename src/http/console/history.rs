//! The operator page's memory of this node's counters: a sample every
//! `server.admin_sample_every`, the last hour's at that step (360 samples) and the last day's
//! at thirty times it (288), in memory and bounded, lost at a restart. Plots are drawn from
//! the differences between samples; the page adds a sample taken as it renders, so each
//! plot ends at the counters' values of that moment (what `/metrics` says then).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

/// Samples kept for the short window (an hour at the default 10 s step).
pub const HOUR_SAMPLES: usize = 360;
/// Every this many samples, one goes to the long window too.
pub const DAY_EVERY: u64 = 30;
/// Samples kept for the long window (a day at the default step).
pub const DAY_SAMPLES: usize = 288;

/// This node's cumulative counters at one moment.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub at_ms: u64,
    /// Image answers with a cache outcome (`imgcas_cache_outcomes_total`), and the hits.
    pub requests: u64,
    pub hits: u64,
    /// `imgcas_processing_runs_total`.
    pub runs: u64,
    /// `imgcas_dedup_bytes_saved_total`.
    pub dedup_saved: u64,
    /// Processing refused by admission (`imgcas_tenant_admission_rejections_total`).
    pub shed: u64,
    /// `imgcas_queue_waits_total`, and the microseconds those runs waited.
    pub queue_waits: u64,
    pub queue_wait_micros: u64,
    /// Error answers (`imgcas_http_errors_total`).
    pub errors: u64,
}

#[derive(Default)]
struct Rings {
    hour: VecDeque<Sample>,
    day: VecDeque<Sample>,
    taken: u64,
}

/// The two windows of samples.
pub struct History {
    step: Duration,
    rings: Mutex<Rings>,
}

/// Which window a plot shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    Hour,
    Day,
}

impl History {
    pub fn new(step: Duration) -> History {
        History {
            step,
            rings: Mutex::new(Rings::default()),
        }
    }

    pub fn step(&self) -> Duration {
        self.step
    }

    /// The window's span (what "the last hour" is at this step).
    pub fn span(&self, window: Window) -> Duration {
        match window {
            Window::Hour => self.step * HOUR_SAMPLES as u32,
            Window::Day => self.step * (DAY_SAMPLES as u32 * DAY_EVERY as u32),
        }
    }

    pub fn push(&self, sample: Sample) {
        let mut rings = self.rings.lock().unwrap_or_else(|p| p.into_inner());
        if rings.taken.is_multiple_of(DAY_EVERY) {
            rings.day.push_back(sample);
            if rings.day.len() > DAY_SAMPLES {
                rings.day.pop_front();
            }
        }
        rings.taken += 1;
        rings.hour.push_back(sample);
        if rings.hour.len() > HOUR_SAMPLES {
            rings.hour.pop_front();
        }
    }

    /// The window's samples, oldest first, with `now` last.
    pub fn series(&self, window: Window, now: Sample) -> Vec<Sample> {
        let rings = self.rings.lock().unwrap_or_else(|p| p.into_inner());
        let ring = match window {
            Window::Hour => &rings.hour,
            Window::Day => &rings.day,
        };
        ring.iter().copied().chain(std::iter::once(now)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Sample {
        Sample {
            at_ms: ms,
            requests: ms,
            ..Sample::default()
        }
    }

    #[test]
    fn windows_stay_bounded_and_in_order() {
        let history = History::new(Duration::from_secs(10));
        for ms in 0..2_000u64 {
            history.push(at(ms));
        }
        let hour = history.series(Window::Hour, at(5_000));
        assert_eq!(hour.len(), HOUR_SAMPLES + 1);
        assert_eq!(hour[0].at_ms, 2_000 - HOUR_SAMPLES as u64);
        assert_eq!(hour.last().unwrap().at_ms, 5_000);
        let day = history.series(Window::Day, at(5_000));
        // Every 30th sample: 0, 30, …, 1980 — 67 of them, under the bound.
        assert_eq!(day.len(), 67 + 1);
        assert!(day.windows(2).all(|w| w[0].at_ms < w[1].at_ms));
        for ms in 2_000..20_000u64 {
            history.push(at(ms));
        }
        assert_eq!(
            history.series(Window::Day, at(30_000)).len(),
            DAY_SAMPLES + 1
        );
        assert_eq!(history.span(Window::Hour), Duration::from_secs(3600));
        assert_eq!(history.span(Window::Day), Duration::from_secs(86_400));
    }
}
