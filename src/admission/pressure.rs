//! The second sign of pressure, besides waits above target: processing has become slower
//! than it usually is. The 95th percentile of recent runs' seconds per pixel of cost is
//! compared with that of many runs: when the long-term p95 falls below [`RATIO`] of the
//! short-term one (recent runs take more than twice as long per pixel), the machine is
//! short of CPU for reasons admission's queue does not see (another process, a noisy
//! neighbour, memory bandwidth), and the lower tiers are shed until it recovers.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Runs in the short-term window.
const SHORT: usize = 32;
/// Runs in the long-term window.
const LONG: usize = 1024;
/// Long-term runs needed before the ratio is trusted: enough that a full short window of
/// slow runs is under 5 % of them, so it does not move the long-term p95 by itself.
const LONG_MIN: usize = 700;
/// Below this ratio of long-term to short-term p95, the server is under pressure.
pub const RATIO: f64 = 0.5;
/// How long one reading of the ratio stands without new runs.
const STANDS_FOR: Duration = Duration::from_secs(2);

#[derive(Debug, Default)]
pub struct Latency {
    short: VecDeque<f64>,
    long: VecDeque<f64>,
    /// When the last reading found the ratio below [`RATIO`].
    slow_at: Option<Instant>,
}

impl Latency {
    /// Records one run's seconds per pixel of cost, and reads the ratio again.
    pub fn record(&mut self, secs_per_pixel: f64, now: Instant) {
        if !secs_per_pixel.is_finite() {
            return;
        }
        for (window, size) in [(&mut self.short, SHORT), (&mut self.long, LONG)] {
            if window.len() == size {
                window.pop_front();
            }
            window.push_back(secs_per_pixel);
        }
        if self.short.len() < SHORT || self.long.len() < LONG_MIN {
            return;
        }
        let (short, long) = (p95(&self.short), p95(&self.long));
        if short > 0.0 && long / short < RATIO {
            self.slow_at = Some(now);
        } else {
            self.slow_at = None;
        }
    }

    /// Whether processing is slower than usual (a reading in the last [`STANDS_FOR`]).
    pub fn slow(&self, now: Instant) -> bool {
        self.slow_at
            .is_some_and(|at| now.saturating_duration_since(at) < STANDS_FOR)
    }
}

fn p95(window: &VecDeque<f64>) -> f64 {
    let mut sorted: Vec<f64> = window.iter().copied().collect();
    sorted.sort_by(f64::total_cmp);
    let at = ((sorted.len() as f64 * 0.95).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records `runs` runs of `secs_per_pixel` each.
    fn feed(l: &mut Latency, runs: usize, secs_per_pixel: f64, now: Instant) {
        (0..runs).for_each(|_| l.record(secs_per_pixel, now));
    }

    #[test]
    fn runs_twice_as_slow_as_usual_are_pressure_and_it_lapses() {
        let (mut l, now) = (Latency::default(), Instant::now());
        feed(&mut l, LONG_MIN, 40e-9, now);
        assert!(!l.slow(now));
        feed(&mut l, SHORT, 200e-9, now);
        assert!(l.slow(now));
        assert!(!l.slow(now + STANDS_FOR));
        // Back to usual speed: the short window recovers first.
        feed(&mut l, SHORT, 40e-9, now);
        assert!(!l.slow(now));
    }

    #[test]
    fn too_few_runs_say_nothing() {
        let (mut l, now) = (Latency::default(), Instant::now());
        feed(&mut l, SHORT, 1e-9, now);
        feed(&mut l, SHORT, 1e-6, now);
        assert!(!l.slow(now));
    }
}
