//! Admission control for processing, the one CPU-bound thing the service does.
//!
//! Work is admitted by cost (pixels a run touches, from `imgcas_processors::cost`), not by
//! count: a 24 MP decode weighs thirty times a 0.8 MP one. A run that would wait for the CPU
//! longer than the target sojourn time is refused at once with `overloaded`, rather than
//! queued to time out later (the queue stays short, so admitted work stays fast). The wait is
//! estimated from the cost ahead in the queue and the measured seconds per pixel (wall time on
//! a CPU slot, since that is how long a slot stays taken); a CoDel-style
//! check catches what the estimate misses: once the measured waits have stayed above target for
//! a whole interval, arrivals that would have to queue are refused until a wait drops below it,
//! and no admitted run waits longer than twice the target.
//!
//! Hits never come here: only runs that must process take a ticket.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// CoDel's interval: how long waits must stay above target before arrivals are shed.
const INTERVAL: Duration = Duration::from_millis(100);
/// A run costs at least this many pixels: decoding headers, encoding and bookkeeping take
/// time even for a tiny image.
const MIN_COST: u64 = 64 * 1024;
/// Waiters beyond this are refused whatever the estimate says (each holds its request).
const MAX_QUEUE: usize = 1024;
/// Seconds per pixel assumed before any run was measured (libjpeg-turbo decode with
/// shrink-on-load, resize and encode on one core of this class of machine).
const PRIOR_SECS_PER_PIXEL: f64 = 40e-9;

pub struct Admission {
    cpu: std::sync::Arc<Semaphore>,
    slots: usize,
    target: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Cost admitted and not finished (waiting or running).
    outstanding: u64,
    /// Admitted runs still waiting for a CPU slot.
    waiting: usize,
    /// Smoothed seconds of CPU per pixel of cost.
    secs_per_pixel: f64,
    /// When waits were first seen above target (cleared by a wait below it).
    above_since: Option<Instant>,
    /// Waits stayed above target for an interval: shed arrivals that would queue.
    shedding: bool,
}

/// A refusal, with when to come back.
#[derive(Debug, Clone, PartialEq)]
pub struct Overloaded {
    pub reason: &'static str,
    pub retry_after: Duration,
}

/// An admitted run. Dropping it (finished, failed or cancelled) returns its cost.
pub struct Ticket<'a> {
    admission: &'a Admission,
    cost: u64,
    admitted_at: Instant,
    waiting: bool,
}

/// A run holding a CPU slot.
pub struct Running {
    pub permit: OwnedSemaphorePermit,
    /// How long the ticket waited for the slot.
    pub waited: Duration,
}

impl Admission {
    pub fn new(slots: usize, target: Duration) -> Admission {
        let slots = slots.max(1);
        Admission {
            cpu: std::sync::Arc::new(Semaphore::new(slots)),
            slots,
            target,
            state: Mutex::new(State {
                outstanding: 0,
                waiting: 0,
                secs_per_pixel: PRIOR_SECS_PER_PIXEL,
                above_since: None,
                shedding: false,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a run of `cost` pixels, or refuses it when it would wait past the target.
    pub fn admit(&self, cost: u64) -> Result<Ticket<'_>, Overloaded> {
        let cost = cost.max(MIN_COST);
        let mut state = self.state();
        let idle_slot = self.cpu.available_permits() > state.waiting;
        if idle_slot {
            // Nothing queues: the standing queue, if there was one, has drained.
            state.above_since = None;
            state.shedding = false;
        } else {
            // The work ahead of this run, shared by every slot.
            let wait = Duration::from_secs_f64(
                (state.outstanding as f64 * state.secs_per_pixel / self.slots as f64).min(3600.0),
            );
            let retry_after = wait.max(Duration::from_secs(1));
            if state.waiting >= MAX_QUEUE {
                return Err(Overloaded {
                    reason: "queue_full",
                    retry_after,
                });
            }
            if state.shedding {
                return Err(Overloaded {
                    reason: "standing_queue",
                    retry_after,
                });
            }
            if wait > self.target {
                return Err(Overloaded {
                    reason: "estimated_wait",
                    retry_after,
                });
            }
        }
        state.outstanding += cost;
        state.waiting += 1;
        Ok(Ticket {
            admission: self,
            cost,
            admitted_at: Instant::now(),
            waiting: true,
        })
    }

    /// Cost admitted and not finished, and runs waiting for a slot (metrics).
    pub fn load(&self) -> (u64, usize) {
        let state = self.state();
        (state.outstanding, state.waiting)
    }

    /// The current estimate of seconds per pixel: wall time on a CPU slot, not thread CPU
    /// time (what admission must predict is how long the slot stays taken).
    pub fn secs_per_pixel(&self) -> f64 {
        self.state().secs_per_pixel
    }
}

impl Ticket<'_> {
    /// Waits for a CPU slot, at most twice the target; a run that waited past the target
    /// turns shedding on once that has lasted an interval.
    pub async fn start(&mut self) -> Result<Running, Overloaded> {
        let admission = self.admission;
        let deadline = self.admitted_at + 2 * admission.target;
        let acquired =
            tokio::time::timeout_at(deadline.into(), admission.cpu.clone().acquire_owned()).await;
        let now = Instant::now();
        let waited = now - self.admitted_at;
        let mut state = admission.state();
        state.waiting -= 1;
        self.waiting = false;
        match acquired {
            Ok(Ok(permit)) => {
                if waited > admission.target {
                    let since = *state.above_since.get_or_insert(now);
                    if now - since >= INTERVAL {
                        state.shedding = true;
                    }
                } else {
                    state.above_since = None;
                    state.shedding = false;
                }
                Ok(Running { permit, waited })
            }
            // Timed out (or, never, a closed semaphore): the queue stands.
            _ => {
                state.shedding = true;
                state.above_since.get_or_insert(now);
                Err(Overloaded {
                    reason: "waited_too_long",
                    retry_after: admission.target.max(Duration::from_secs(1)),
                })
            }
        }
    }

    /// Feeds a finished run's wall time on its CPU slot into the cost estimate.
    pub fn record(&self, ran: Duration) {
        let sample = ran.as_secs_f64() / self.cost as f64;
        let mut state = self.admission.state();
        state.secs_per_pixel = 0.8 * state.secs_per_pixel + 0.2 * sample;
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut state = self.admission.state();
        state.outstanding = state.outstanding.saturating_sub(self.cost);
        if self.waiting {
            state.waiting -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_idle_pool_admits_anything() {
        let a = Admission::new(2, Duration::from_millis(100));
        let mut t = a
            .admit(1 << 40)
            .expect("an idle slot admits even a huge run");
        let run = t.start().await.unwrap();
        assert!(run.waited < Duration::from_millis(50));
        drop(run);
        drop(t);
        assert_eq!(a.load(), (0, 0));
    }

    #[tokio::test]
    async fn work_that_would_wait_past_the_target_is_refused_early() {
        let a = Admission::new(1, Duration::from_millis(100));
        // Occupy the one slot with a run of 10 MP: at the prior 40 ns/px that is 0.4 s.
        let mut busy = a.admit(10_000_000).unwrap();
        let _running = busy.start().await.unwrap();
        let refused = a.admit(1_000_000).err().expect("refused");
        assert_eq!(refused.reason, "estimated_wait");
        assert!(refused.retry_after >= Duration::from_secs(1));
        assert_eq!(a.load().1, 0, "a refusal leaves nothing queued");
    }

    #[tokio::test]
    async fn cheap_work_queues_and_a_wait_past_twice_the_target_is_shed() {
        let a = Admission::new(1, Duration::from_millis(50));
        let mut busy = a.admit(MIN_COST).unwrap();
        let running = busy.start().await.unwrap();
        // Small enough to be admitted behind it...
        let mut queued = a.admit(MIN_COST).unwrap();
        assert_eq!(a.load().1, 1);
        // ...but the slot is never freed in time.
        let refused = queued.start().await.err().expect("timed out");
        assert_eq!(refused.reason, "waited_too_long");
        // The queue stood: arrivals that would queue are shed until it drains.
        let shed = a.admit(MIN_COST).err().expect("shed");
        assert_eq!(shed.reason, "standing_queue");
        drop(running);
        drop(busy);
        drop(queued);
        let mut fresh = a.admit(MIN_COST).expect("an idle slot ends shedding");
        fresh.start().await.unwrap();
    }

    #[tokio::test]
    async fn the_cost_estimate_follows_measured_runs() {
        let a = Admission::new(1, Duration::from_millis(100));
        let t = a.admit(1_000_000).unwrap();
        for _ in 0..30 {
            t.record(Duration::from_millis(1)); // 1 ns per pixel
        }
        assert!((a.secs_per_pixel() - 1e-9).abs() < 1e-9 * 0.1);
    }
}
