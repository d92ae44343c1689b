//! The cost model that learns (issue 54): a plan's cost is pixels times fixed multipliers per
//! encoder and filter, measured once on one machine; what a run of a class really takes per
//! unit of that cost (an AVIF encode, a `q=auto` search, an animation, on this machine, under
//! this load) is learned from the runs themselves. Admission scales a run's cost by its
//! class's rate against the average of all runs, so its queue counts what runs will take and
//! its wait estimates follow. Classes are few and bounded ([`MAX_CLASSES`]; past it a run
//! counts at the average), each factor bounded ([`FACTOR_BOUNDS`]), and a class counts at the
//! average until it has [`MIN_SAMPLES`] runs.
//!
//! Hostile inputs must not steer it (audit #4: two crafted JPEG XL decodes pushed a class's
//! factor to 9.26 and another to its cap, and honest tenants' runs were counted 9-16x dearer).
//! So a class's rate is the **median** of its last [`WINDOW`] samples, not an average one
//! slow run can drag; a sample more than [`OUTLIER`] times off the class's median counts at
//! that bound; the rate a class is charged at moves at most [`STEP_PER_MINUTE`]-fold a minute;
//! and only runs that succeeded are learned from (the caller's part: a run that failed or was
//! stopped says nothing about what its class costs). A class is a source format with an
//! output format and an operation, so a decoder no honest tenant uses has a class of its own.
//!
//! Both estimates of every run, learned and fixed, are kept against what it took, so the
//! model's gain is read off a live service (`/metrics`, `bench/cost_model.py`).

use std::collections::VecDeque;
use std::time::Instant;

/// A class's place in [`Learned`].
pub type Class = usize;

/// Classes learned at most.
pub const MAX_CLASSES: usize = 128;
/// Samples a class's median is taken over.
pub const WINDOW: usize = 15;
/// Runs a class needs before its own rate is used.
pub const MIN_SAMPLES: u32 = 3;
/// A class's rate against the average, at least and at most.
pub const FACTOR_BOUNDS: (f64, f64) = (1.0 / 8.0, 8.0);
/// A sample further than this factor from its class's median counts at that factor.
pub const OUTLIER: f64 = 4.0;
/// How far a class's charged rate may move in a minute, as a factor.
pub const STEP_PER_MINUTE: f64 = 2.0;

#[derive(Debug, Default)]
pub struct Learned {
    names: Vec<String>,
    classes: Vec<Rate>,
    errors: Errors,
}

/// One class's learning: its recent samples (seconds per unit of the plan's cost), the rate
/// charged now and when it was last moved, and the runs seen.
#[derive(Debug, Default, Clone)]
struct Rate {
    window: VecDeque<f64>,
    charged: f64,
    moved_at: Option<Instant>,
    samples: u32,
}

impl Rate {
    fn median(&self) -> Option<f64> {
        let mut sorted: Vec<f64> = self.window.iter().copied().collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        let mid = sorted.len() / 2;
        Some(match sorted.len() % 2 {
            1 => sorted[mid],
            _ => (sorted[mid - 1] + sorted[mid]) / 2.0,
        })
    }

    fn observe(&mut self, sample: f64, now: Instant) {
        // Off the class's median by more than OUTLIER: counted at that bound, so one run
        // moves the median one place at most, and it takes most of a window to move it far.
        let sample = match self.median() {
            Some(m) if self.samples >= MIN_SAMPLES && m > 0.0 => {
                sample.clamp(m / OUTLIER, m * OUTLIER)
            }
            _ => sample,
        };
        if self.window.len() >= WINDOW {
            self.window.pop_front();
        }
        self.window.push_back(sample);
        self.samples = self.samples.saturating_add(1);
        let Some(median) = self.median() else { return };
        // The charged rate follows the median at most STEP_PER_MINUTE-fold a minute (a
        // burst of hostile runs moves it by little before honest runs outvote it).
        self.charged = match self.moved_at {
            Some(then) if self.charged > 0.0 && self.samples > MIN_SAMPLES => {
                let minutes = now.saturating_duration_since(then).as_secs_f64() / 60.0;
                let step = STEP_PER_MINUTE.powf(minutes.min(60.0));
                median.clamp(self.charged / step, self.charged * step)
            }
            _ => median,
        };
        self.moved_at = Some(now);
    }
}

/// Sums over every run recorded: seconds measured, and each estimate's absolute error.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Errors {
    pub runs: u64,
    pub measured_secs: f64,
    pub learned_error_secs: f64,
    pub fixed_error_secs: f64,
}

/// The model as it stands: each class with its factor and runs, and the errors so far.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub classes: Vec<(String, f64, u32)>,
    pub errors: Errors,
}

impl Learned {
    /// `name`'s class (a new one while there is room); `None` for the unnamed class and
    /// once the classes are full.
    pub fn class_of(&mut self, name: &str) -> Option<Class> {
        if name.is_empty() {
            return None;
        }
        if let Some(i) = self.names.iter().position(|n| n == name) {
            return Some(i);
        }
        if self.names.len() >= MAX_CLASSES {
            return None;
        }
        self.names.push(name.to_string());
        self.classes.push(Rate::default());
        Some(self.names.len() - 1)
    }

    /// The class's rate against `reference` (seconds per unit of all runs), bounded; 1 for
    /// a class not learned yet.
    pub fn factor(&self, class: Option<Class>, reference: f64) -> f64 {
        match class.and_then(|c| self.classes.get(c)) {
            Some(rate) if rate.samples >= MIN_SAMPLES && reference > 0.0 && rate.charged > 0.0 => {
                (rate.charged / reference).clamp(FACTOR_BOUNDS.0, FACTOR_BOUNDS.1)
            }
            _ => 1.0,
        }
    }

    /// `raw` scaled by its class's factor.
    pub fn scaled(&self, class: Option<Class>, raw: u64, reference: f64) -> u64 {
        (raw as f64 * self.factor(class, reference)).round() as u64
    }

    /// A run of `class` that succeeded took `secs` for `raw` units of the plan's cost; it had
    /// been estimated at `learned` seconds, and `fixed` by the plan's cost alone.
    pub fn observe(&mut self, class: Option<Class>, secs: f64, raw: u64, learned: f64, fixed: f64) {
        self.observe_at(class, secs, raw, learned, fixed, Instant::now());
    }

    /// [`Learned::observe`] at `now` (the step bound's clock).
    pub fn observe_at(
        &mut self,
        class: Option<Class>,
        secs: f64,
        raw: u64,
        learned: f64,
        fixed: f64,
        now: Instant,
    ) {
        if !secs.is_finite() || secs < 0.0 {
            return;
        }
        let e = &mut self.errors;
        e.runs += 1;
        e.measured_secs += secs;
        e.learned_error_secs += (learned - secs).abs();
        e.fixed_error_secs += (fixed - secs).abs();
        let Some(rate) = class.and_then(|c| self.classes.get_mut(c)) else {
            return;
        };
        rate.observe(secs / raw.max(1) as f64, now);
    }

    pub fn reading(&self, reference: f64) -> Reading {
        Reading {
            classes: self
                .names
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    (
                        name.clone(),
                        self.factor(Some(i), reference),
                        self.classes[i].samples,
                    )
                })
                .collect(),
            errors: self.errors,
        }
    }
}

/// An average that one sample cannot drag far: each sample counts with weight `weight`,
/// after being brought within [`OUTLIER`] times of the average so far (the reference every
/// class is measured against, and what a run's measured cost is settled by).
pub fn steady_average(average: f64, sample: f64, weight: f64) -> f64 {
    if !sample.is_finite() || sample < 0.0 {
        return average;
    }
    let sample = match average > 0.0 {
        true => sample.clamp(average / OUTLIER, average * OUTLIER),
        false => sample,
    };
    (1.0 - weight) * average + weight * sample
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MINUTE: Duration = Duration::from_secs(60);

    /// A class learned from `honest` runs at `rate` seconds a unit, one a second from `t0`.
    fn honest(learned: &mut Learned, class: Option<Class>, rate: f64, runs: u32, t0: Instant) {
        for i in 0..runs {
            let at = t0 + Duration::from_secs(u64::from(i));
            learned.observe_at(class, rate * 1e6, 1_000_000, 0.0, 0.0, at);
        }
    }

    #[test]
    fn two_hostile_runs_do_not_move_a_class_that_honest_runs_hold() {
        // Audit #4: two crafted JPEG XL decodes to PNG (13 s for 49 M units, 6.6x the
        // honest rate) took `png:still` to 9.26.
        let mut learned = Learned::default();
        let png = learned.class_of("png>png:still");
        let (reference, rate, t0) = (40e-9, 40e-9, Instant::now());
        honest(&mut learned, png, rate, 12, t0);
        let before = learned.factor(png, reference);
        let later = t0 + MINUTE;
        for _ in 0..2 {
            learned.observe_at(png, 13.1, 49_000_000, 0.0, 0.0, later);
        }
        let after = learned.factor(png, reference);
        assert!(
            (after / before - 1.0).abs() < 0.01,
            "factor {before} moved to {after}"
        );
    }

    #[test]
    fn a_burst_of_slow_runs_moves_a_class_at_most_the_step_a_minute() {
        let mut learned = Learned::default();
        let c = learned.class_of("webp>webp:still");
        let (reference, t0) = (40e-9, Instant::now());
        honest(&mut learned, c, 40e-9, 5, t0);
        assert!((learned.factor(c, reference) - 1.0).abs() < 1e-9);
        // Thirty runs 6x slower within one second: the median moves, the charge cannot yet.
        let burst = t0 + Duration::from_secs(10);
        for _ in 0..30 {
            learned.observe_at(c, 0.24, 1_000_000, 0.0, 0.0, burst);
        }
        // (The first of them comes six seconds after the last honest run: 2^(6/60) at most.)
        assert!(
            learned.factor(c, reference) < 1.08,
            "moved within the second"
        );
        // A minute on, one more such run: at most STEP_PER_MINUTE-fold.
        learned.observe_at(c, 0.24, 1_000_000, 0.0, 0.0, burst + MINUTE);
        let f = learned.factor(c, reference);
        assert!(
            f <= STEP_PER_MINUTE * 1.08 && f > 1.5,
            "factor {f} after a minute"
        );
    }

    #[test]
    fn an_hour_of_hostile_runs_among_honest_ones_leaves_the_factor_near_honest() {
        // One run a second for an hour, a third of them hostile (8x slower, or 8x faster to
        // drag it down), in the same class as honest ones.
        let mut learned = Learned::default();
        let c = learned.class_of("png>png:still");
        let (reference, t0) = (40e-9, Instant::now());
        for i in 0..3600u64 {
            let at = t0 + Duration::from_secs(i);
            let rate = match i % 6 {
                1 => 320e-9,
                4 => 5e-9,
                _ => 40e-9,
            };
            learned.observe_at(c, rate * 1e6, 1_000_000, 0.0, 0.0, at);
        }
        let f = learned.factor(c, reference);
        assert!((0.8..1.25).contains(&f), "factor {f} after an hour");
    }

    #[test]
    fn a_class_is_never_charged_past_the_cap_of_8() {
        let mut learned = Learned::default();
        let c = learned.class_of("jxl>png:still");
        honest(&mut learned, c, 1.0, 100, Instant::now() - 2 * 60 * MINUTE);
        assert_eq!(learned.factor(c, 1e-9), 8.0);
        assert_eq!(FACTOR_BOUNDS.1, 8.0);
    }

    #[test]
    fn the_steady_average_is_not_dragged_by_one_sample() {
        let avg = steady_average(40e-9, 1.0, 0.2);
        assert!(avg <= 40e-9 * (0.8 + 0.2 * OUTLIER) * 1.0001);
        assert_eq!(steady_average(40e-9, f64::NAN, 0.2), 40e-9);
        assert!((steady_average(0.0, 3.0, 0.2) - 0.6).abs() < 1e-12);
    }

    #[test]
    fn a_class_that_runs_slower_than_average_is_charged_more() {
        let mut learned = Learned::default();
        let (avif, jpeg) = (learned.class_of("avif"), learned.class_of("jpeg"));
        let reference = 1e-8;
        assert_eq!(
            learned.scaled(avif, 1000, reference),
            1000,
            "unlearned: as planned"
        );
        for _ in 0..10 {
            // AVIF takes 4x the average per unit, JPEG half of it.
            learned.observe(avif, 4e-5, 1000, 1e-5, 1e-5);
            learned.observe(jpeg, 5e-6, 1000, 1e-5, 1e-5);
        }
        assert_eq!(learned.scaled(avif, 1000, reference), 4000);
        assert_eq!(learned.scaled(jpeg, 1000, reference), 500);
        assert_eq!(learned.class_of(""), None);
        let reading = learned.reading(reference);
        assert_eq!(reading.errors.runs, 20);
        assert_eq!(reading.classes.len(), 2);
    }

    #[test]
    fn classes_and_factors_are_bounded() {
        let mut learned = Learned::default();
        for i in 0..MAX_CLASSES {
            assert!(learned.class_of(&format!("c{i}")).is_some());
        }
        assert_eq!(learned.class_of("one too many"), None);
        let c = learned.class_of("c0");
        for _ in 0..5 {
            learned.observe(c, 1000.0, 1, 0.0, 0.0);
        }
        assert_eq!(learned.factor(c, 1e-9), FACTOR_BOUNDS.1);
        learned.observe(c, f64::NAN, 1, 0.0, 0.0);
        assert_eq!(
            learned.reading(1.0).errors.runs,
            5,
            "a NaN run is not counted"
        );
    }
}
