//! The cost model that learns (issue 54): a plan's cost is pixels times fixed multipliers per
//! encoder and filter, measured once on one machine; what a run of a class really takes per
//! unit of that cost (an AVIF encode, a `q=auto` search, an animation, on this machine, under
//! this load) is learned from the runs themselves, as an exponentially weighted average per
//! class. Admission scales a run's cost by its class's rate against the average of all runs,
//! so its queue counts what runs will take and its wait estimates follow. Classes are few
//! and bounded ([`MAX_CLASSES`]; past it a run counts at the average), each factor bounded
//! ([`FACTOR_BOUNDS`]), and a class counts at the average until it has [`MIN_SAMPLES`] runs.
//!
//! Both estimates of every run, learned and fixed, are kept against what it took, so the
//! model's gain is read off a live service (`/metrics`, `bench/cost_model.py`).

/// A class's place in [`Learned`].
pub type Class = usize;

/// Classes learned at most.
pub const MAX_CLASSES: usize = 64;
/// Weight of a new run in its class's average.
const ALPHA: f64 = 0.2;
/// Runs a class needs before its own rate is used.
pub const MIN_SAMPLES: u32 = 3;
/// A class's rate against the average, at least and at most.
pub const FACTOR_BOUNDS: (f64, f64) = (1.0 / 16.0, 16.0);

#[derive(Debug, Default)]
pub struct Learned {
    names: Vec<String>,
    /// Per class: seconds per unit of the plan's cost, and runs seen.
    rates: Vec<(f64, u32)>,
    errors: Errors,
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
        self.rates.push((0.0, 0));
        Some(self.names.len() - 1)
    }

    /// The class's rate against `reference` (seconds per unit of all runs), bounded; 1 for
    /// a class not learned yet.
    pub fn factor(&self, class: Option<Class>, reference: f64) -> f64 {
        match class.and_then(|c| self.rates.get(c)) {
            Some((rate, samples)) if *samples >= MIN_SAMPLES && reference > 0.0 => {
                (rate / reference).clamp(FACTOR_BOUNDS.0, FACTOR_BOUNDS.1)
            }
            _ => 1.0,
        }
    }

    /// `raw` scaled by its class's factor.
    pub fn scaled(&self, class: Option<Class>, raw: u64, reference: f64) -> u64 {
        (raw as f64 * self.factor(class, reference)).round() as u64
    }

    /// A run of `class` took `secs` for `raw` units of the plan's cost; it had been
    /// estimated at `learned` seconds, and `fixed` by the plan's cost alone.
    pub fn observe(&mut self, class: Option<Class>, secs: f64, raw: u64, learned: f64, fixed: f64) {
        if !secs.is_finite() || secs < 0.0 {
            return;
        }
        let e = &mut self.errors;
        e.runs += 1;
        e.measured_secs += secs;
        e.learned_error_secs += (learned - secs).abs();
        e.fixed_error_secs += (fixed - secs).abs();
        let Some((rate, samples)) = class.and_then(|c| self.rates.get_mut(c)) else {
            return;
        };
        let sample = secs / raw.max(1) as f64;
        *rate = match *samples {
            0 => sample,
            _ => (1.0 - ALPHA) * *rate + ALPHA * sample,
        };
        *samples = samples.saturating_add(1);
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
                        self.rates[i].1,
                    )
                })
                .collect(),
            errors: self.errors,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
