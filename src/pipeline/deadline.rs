//! Runs bounded in time. Audit #3 found a run that outlived its request: the request limit
//! answered 503 while the run kept its CPU slot and memory until it ended by itself, and a
//! server asked to stop waited for it. Here every run gets a budget from what admission
//! charged it (its cost at the measured seconds per pixel, with room to spare, never past
//! the request limit); past it the run is told to stop ([`Stop`], read by the processors
//! between stages, frames and steps through `Decodes::check`) and its request answered at
//! once: 422 `too_costly` when the run cost far more than it was charged, 503 `overloaded`
//! when the request limit was the bound, or when the run itself used less than half its
//! budget in CPU time (read from its thread's clock): a busy machine starved it, and its
//! input is not to blame. Nothing is cached for a deadline.
//!
//! A step already under way when the flag is raised (one codec call: an AVIF encode, a JPEG
//! decode, a drawing) cannot be interrupted: it runs on to its end on its own thread, its
//! result dropped, and its CPU slot (moved into the run) is held until then, so admission
//! never grants more slots than there are cores. The pipeline's own flag stops every run at
//! shutdown the same way.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use imgcas_processors::{ProcessError, ProcessFailure};

use crate::admission::ThreadClock;
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
    /// The CPU clock of the thread the run runs on, from its start ([`Stop::running_here`]).
    clock: Arc<OnceLock<ThreadClock>>,
}

impl Stop {
    /// A run's flag under the pipeline's `shutdown` flag.
    pub(crate) fn under(shutdown: &Arc<AtomicBool>) -> Stop {
        Stop {
            run: Arc::new(AtomicBool::new(false)),
            shutdown: shutdown.clone(),
            clock: Arc::default(),
        }
    }

    /// Called by the run as it starts, on its own thread: its CPU time is counted from here.
    pub(crate) fn running_here(&self) {
        if let Some(clock) = ThreadClock::of_this_thread() {
            let _ = self.clock.set(clock);
        }
    }

    /// Whether the run used less than `share` of `wall` in CPU time: starved, not dear.
    /// Unknown (no clock, or the thread gone) counts as not starved.
    fn starved(&self, wall: Duration, share: f64) -> bool {
        let used = self.clock.get().and_then(ThreadClock::used);
        used.is_some_and(|used| used.as_secs_f64() < wall.as_secs_f64() * share)
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

    /// The answer of a run stopped at this bound (`starved`: it used less than half of it
    /// in CPU time).
    fn error(self, starved: bool) -> Error {
        match self {
            Bound::Budget(d) if starved => Error::Overloaded {
                message: format!(
                    "the machine was too busy to finish the run within the {d:?} its cost allows"
                ),
                retry_after_secs: 1,
            },
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
            let starved = stop.starved(bound.duration(), 0.5);
            tracing::warn!(
                ?bound,
                starved,
                "a processing run passed its deadline: stopped"
            );
            Err(bound.error(starved))
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
        let budget = Bound::Budget(Duration::from_secs(10));
        assert_eq!(budget.error(false).code(), "too_costly");
        assert_eq!(budget.error(true).code(), "overloaded");
        let limit = Bound::RequestLimit(Duration::from_secs(60));
        assert_eq!(limit.error(false).code(), "overloaded");
        assert_eq!(limit.error(true).code(), "overloaded");
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

    /// A run that burnt its budget on its thread is blamed; one that waited for the CPU is
    /// not. (A sleeping thread stands for a starved one: it uses no CPU time.)
    #[test]
    fn a_run_is_starved_when_its_thread_used_less_than_half_the_time() {
        let shutdown = Arc::new(AtomicBool::new(false));
        let (busy, idle) = (Stop::under(&shutdown), Stop::under(&shutdown));
        let wall = Duration::from_millis(300);
        let (a, b) = (busy.clone(), idle.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
        let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
        let ready_sleeper = ready_tx.clone();
        let end_rx = Arc::new(std::sync::Mutex::new(end_rx));
        let end_sleeper = end_rx.clone();
        let spinner = std::thread::spawn(move || {
            a.running_here();
            // Two thirds of `wall` in its own CPU time, however long that takes here.
            let clock = a.clock.get().copied().expect("a clock");
            while clock.used().unwrap() < wall * 2 / 3 {}
            ready_tx.send(()).unwrap();
            let _ = end_rx.lock().unwrap().recv();
        });
        let sleeper = std::thread::spawn(move || {
            b.running_here();
            std::thread::sleep(wall);
            ready_sleeper.send(()).unwrap();
            let _ = end_sleeper.lock().unwrap().recv();
        });
        ready_rx.recv().unwrap();
        ready_rx.recv().unwrap();
        assert!(!busy.starved(wall, 0.5), "the spinning run used its time");
        assert!(idle.starved(wall, 0.5), "the sleeping run did not");
        drop(end_tx);
        spinner.join().unwrap();
        sleeper.join().unwrap();
        // No clock: not starved (blamed as before).
        assert!(!Stop::under(&shutdown).starved(wall, 0.5));
    }
}
