//! Runs bounded in time. Audit #3 found a run that outlived its request: the request limit
//! answered 503 while the run kept its CPU slot and memory until it ended by itself, and a
//! server asked to stop waited for it. Here every run gets a budget from what admission
//! charged it (its cost at the measured seconds per pixel, with room to spare, never past
//! the request limit); past it the run is told to stop ([`Stop`], read by the processors
//! between stages, frames and steps through `Decodes::check`) and its request answered at
//! once: 422 `too_costly` when the run cost far more than it was charged, 503 `overloaded`
//! when the request limit was the bound. Nothing is cached for a deadline.
//!
//! A step already under way when the flag is raised (one codec call: an AVIF encode, a JPEG
//! decode, a drawing) cannot be interrupted: it runs on to its end on its own thread, its
//! result dropped, and its CPU slot (moved into the run) is held until then, so admission
//! never grants more slots than there are cores. The pipeline's own flag stops every run at
//! shutdown the same way.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use imgcas_processors::{ProcessError, ProcessFailure};

use crate::error::Error;
use crate::stats::Stats;

/// How many times its estimate a run may take before it is stopped: estimates are rough
/// (one seconds-per-pixel figure for every format), and a busy machine runs slower.
const SPARE: f64 = 10.0;
/// The least a run is given, whatever its estimate: a small run on a loaded machine waits
/// for the CPU too.
const AT_LEAST: Duration = Duration::from_secs(10);

/// Whether a run should stop: its own deadline passed, or the service is shutting down.
#[derive(Clone)]
pub(crate) struct Stop {
    run: Arc<AtomicBool>,
    shutdown: Arc<AtomicBool>,
}

impl Stop {
    /// A run's flag under the pipeline's `shutdown` flag.
    pub(crate) fn under(shutdown: &Arc<AtomicBool>) -> Stop {
        Stop {
            run: Arc::new(AtomicBool::new(false)),
            shutdown: shutdown.clone(),
        }
    }

    /// What the processors are answered when they ask whether to go on.
    pub(crate) fn check(&self) -> Result<(), ProcessError> {
        if self.shutdown.load(Ordering::Relaxed) {
            return Err(ProcessError::Stopped("the service is shutting down".into()));
        }
        if self.run.load(Ordering::Relaxed) {
            return Err(ProcessError::Stopped("past its deadline".into()));
        }
        Ok(())
    }

    fn raise(&self) {
        self.run.store(true, Ordering::Relaxed);
    }
}

/// What bounds a run: its budget, or the request limit below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bound {
    /// Its charged cost, with room to spare: a run past it cost more than it was charged.
    Budget(Duration),
    /// `server.request_timeout`, shorter than its budget.
    RequestLimit(Duration),
}

impl Bound {
    /// The bound of a run charged `cost` pixel-equivalents at `secs_per_pixel`.
    pub(crate) fn of(cost: u64, secs_per_pixel: f64, request_limit: Duration) -> Bound {
        let estimate = cost as f64 * secs_per_pixel.max(0.0) * SPARE;
        let budget = Duration::try_from_secs_f64(estimate)
            .unwrap_or(Duration::MAX)
            .max(AT_LEAST);
        match budget < request_limit {
            true => Bound::Budget(budget),
            false => Bound::RequestLimit(request_limit),
        }
    }

    fn duration(self) -> Duration {
        match self {
            Bound::Budget(d) | Bound::RequestLimit(d) => d,
        }
    }

    /// The answer of a run stopped at this bound.
    fn error(self) -> Error {
        match self {
            Bound::Budget(d) => Error::Process {
                kind: ProcessFailure::TooCostly,
                message: format!(
                    "the run took longer than the {d:?} its cost allows (ask for a smaller output \
                     or another format)"
                ),
            },
            Bound::RequestLimit(d) => Error::Overloaded {
                message: format!("the run took longer than the request limit of {d:?}"),
                retry_after_secs: 1,
            },
        }
    }
}

/// Awaits `run` (a run on its thread, holding `stop`) for at most `bound`. Past it, `stop`
/// is raised and the bound's error answered at once; the run ends at its next check.
pub(crate) async fn bounded<T>(
    stop: &Stop,
    bound: Bound,
    stats: &Stats,
    run: impl Future<Output = Result<T, String>>,
) -> Result<T, Error> {
    match tokio::time::timeout(bound.duration(), run).await {
        Ok(done) => done.map_err(|m| Error::Internal(format!("processing task failed: {m}"))),
        Err(_) => {
            stop.raise();
            Stats::bump(&stats.runs_stopped);
            tracing::warn!(?bound, "a processing run passed its deadline: stopped");
            Err(bound.error())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_gets_its_estimate_ten_times_at_least_ten_seconds_never_past_the_limit() {
        let limit = Duration::from_secs(60);
        // 10^7 pixel-equivalents at 40 ns: 0.4 s estimated, 10 s given.
        assert_eq!(
            Bound::of(10_000_000, 40e-9, limit),
            Bound::Budget(Duration::from_secs(10))
        );
        // 10^8: 4 s estimated, 40 s given.
        let Bound::Budget(d) = Bound::of(100_000_000, 40e-9, limit) else {
            panic!("a budget");
        };
        assert!((d.as_secs_f64() - 40.0).abs() < 0.01, "{d:?}");
        // 10^9: 40 s estimated, the request limit.
        assert_eq!(
            Bound::of(1_000_000_000, 40e-9, limit),
            Bound::RequestLimit(limit)
        );
        assert_eq!(
            Bound::of(u64::MAX, f64::MAX, limit),
            Bound::RequestLimit(limit)
        );
        assert_eq!(
            Bound::of(1, 40e-9, Duration::from_secs(2)),
            Bound::RequestLimit(Duration::from_secs(2))
        );
    }

    #[test]
    fn the_answer_follows_the_bound() {
        let budget = Bound::Budget(Duration::from_secs(10)).error();
        assert_eq!(budget.code(), "too_costly");
        let limit = Bound::RequestLimit(Duration::from_secs(60)).error();
        assert_eq!(limit.code(), "overloaded");
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_bound_the_flag_is_raised_and_the_answer_given() {
        let shutdown = Arc::new(AtomicBool::new(false));
        let stop = Stop::under(&shutdown);
        assert!(stop.check().is_ok());
        let forever = std::future::pending::<Result<(), String>>();
        let stats = Stats::default();
        let bound = Bound::RequestLimit(Duration::from_secs(1));
        let answer = bounded(&stop, bound, &stats, forever).await;
        assert_eq!(answer.unwrap_err().code(), "overloaded");
        assert_eq!(stats.snapshot().runs_stopped, 1);
        assert!(matches!(stop.check(), Err(ProcessError::Stopped(_))));
        let other = Stop::under(&shutdown);
        assert!(other.check().is_ok(), "one run's deadline is its own");
        shutdown.store(true, Ordering::Relaxed);
        assert!(matches!(other.check(), Err(ProcessError::Stopped(_))));
    }
}
