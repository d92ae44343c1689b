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
//!
//! Waiting runs take the slots that free up dearest first among those that arrived close
//! together: a run's place in the queue is its arrival moved earlier by its expected run time,
//! at most [`LEAD`]. A page (or a `srcset` burst) is done when its slowest image is, and a
//! long run started last makes all of them late: of the four widths of a new 12 MP photo,
//! the whole-scale decode of the largest is most of the burst, and started after the others
//! (first come, first served) it made the burst take 1.66× that width alone. A run is passed
//! only by runs that arrived less than `LEAD` after it; the sojourn bound below holds for all.
//!
//! Work computed once per original (facts, fingerprints: [`Admission::side_work`]) takes the
//! same slots and is never refused. When nobody waits for it, it queues [`BEHIND`] its
//! arrival: it waits for the requests that came with it (a new original's `srcset` burst
//! first) instead of taking a core from them. Its cost is not in the estimates yet: its small
//! decode is most often shared with another (the fingerprint's with the facts'), and charging
//! each for it refused a new original's first request on an idle server.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

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
/// How far ahead of its arrival a dear run may be placed in the queue (its expected run time,
/// up to this).
const LEAD: Duration = Duration::from_millis(250);
/// How far behind its arrival background work queues.
const BEHIND: Duration = Duration::from_secs(1);

pub struct Admission {
    cpu: Arc<Slots>,
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
    /// Its place among the waiters (see [`Slots::place`]).
    place: i128,
    waiting: bool,
}

/// Who waits for side work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Urgency {
    /// A request's answer: queued at its arrival.
    Request,
    /// Nobody: queued [`BEHIND`] its arrival.
    Background,
}

/// A run holding a CPU slot.
pub struct Running {
    pub permit: Slot,
    /// How long the ticket waited for the slot.
    pub waited: Duration,
}

impl Admission {
    pub fn new(slots: usize, target: Duration) -> Admission {
        let slots = slots.max(1);
        Admission {
            cpu: Arc::new(Slots::new(slots)),
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
        let idle_slot = self.cpu.free() > state.waiting;
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
        let lead = Duration::from_secs_f64((cost as f64 * state.secs_per_pixel).min(3600.0));
        let admitted_at = Instant::now();
        Ok(Ticket {
            admission: self,
            cost,
            admitted_at,
            place: self.cpu.place(admitted_at, lead.min(LEAD)),
            waiting: true,
        })
    }

    /// A CPU slot for work that is not a processing run (see [`Urgency`]), never refused;
    /// held until the returned value is dropped.
    pub async fn side_work(&self, urgency: Urgency) -> Slot {
        let behind = match urgency {
            Urgency::Request => Duration::ZERO,
            Urgency::Background => BEHIND,
        };
        let place = self.cpu.place(Instant::now(), Duration::ZERO)
            + i128::try_from(behind.as_nanos()).unwrap_or(0);
        self.cpu.acquire(place).await
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
            tokio::time::timeout_at(deadline.into(), admission.cpu.acquire(self.place)).await;
        let now = Instant::now();
        let waited = now - self.admitted_at;
        let mut state = admission.state();
        state.waiting -= 1;
        self.waiting = false;
        match acquired {
            Ok(permit) => {
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
            // Timed out: the queue stands.
            Err(_) => {
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

/// The CPU slots and the runs waiting for one, in the order of their places.
struct Slots {
    /// When the slots were made: places are counted from here.
    epoch: Instant,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    free: usize,
    /// By (place, arrival number): the first entry gets the next free slot.
    waiters: BTreeMap<(i128, u64), oneshot::Sender<Slot>>,
    arrivals: u64,
}

/// One CPU slot, held until dropped.
pub struct Slot {
    /// `None` once handed back to the free count.
    slots: Option<Arc<Slots>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(slots) = self.slots.take() {
            Slots::release(slots);
        }
    }
}

/// Removes a waiter that stopped waiting (timed out, or its request went away) from the queue.
struct Waiting<'a> {
    slots: &'a Slots,
    key: (i128, u64),
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        // Gone already when it was handed a slot; a slot sent to a receiver dropped since
        // is released by its own drop.
        self.slots.lock().waiters.remove(&self.key);
    }
}

impl Slots {
    fn new(slots: usize) -> Slots {
        Slots {
            epoch: Instant::now(),
            queue: Mutex::new(Queue {
                free: slots,
                ..Queue::default()
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn free(&self) -> usize {
        self.lock().free
    }

    /// The place in the queue of a run that arrived at `at` and is expected to take `lead`:
    /// nanoseconds from the epoch, its arrival less its lead (smaller goes first).
    fn place(&self, at: Instant, lead: Duration) -> i128 {
        let arrived = at.saturating_duration_since(self.epoch).as_nanos();
        i128::try_from(arrived).unwrap_or(i128::MAX) - i128::try_from(lead.as_nanos()).unwrap_or(0)
    }

    /// A slot: at once when one is free and nobody waits, else when the waiters placed
    /// before this one have had theirs.
    async fn acquire(self: &Arc<Slots>, place: i128) -> Slot {
        let receiver = {
            let mut queue = self.lock();
            if queue.free > 0 && queue.waiters.is_empty() {
                queue.free -= 1;
                return Slot {
                    slots: Some(self.clone()),
                };
            }
            let (sender, receiver) = oneshot::channel();
            queue.arrivals += 1;
            let key = (place, queue.arrivals);
            queue.waiters.insert(key, sender);
            (receiver, key)
        };
        let (receiver, key) = receiver;
        let _waiting = Waiting { slots: self, key };
        match receiver.await {
            Ok(slot) => slot,
            // The sender is only dropped by `release` after a send, or with the queue:
            // neither leaves this waiter without an answer while `self` lives.
            Err(_) => std::future::pending().await,
        }
    }

    /// A slot given back: to the first waiter still waiting, else to the free count.
    fn release(slots: Arc<Slots>) {
        let mut slot = Slot {
            slots: Some(slots.clone()),
        };
        loop {
            let mut queue = slots.lock();
            let Some((_, sender)) = queue.waiters.pop_first() else {
                queue.free += 1;
                // Counted free: dropping it now releases nothing.
                slot.slots = None;
                return;
            };
            drop(queue);
            match sender.send(slot) {
                Ok(()) => return,
                // That waiter stopped waiting: the next one.
                Err(returned) => slot = returned,
            }
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

    /// Which of `tickets` gets the slot `busy` frees (the tickets admitted in order), and
    /// that run.
    async fn next_of(a: &Admission, busy: Running, tickets: &mut [Ticket<'_>]) -> (usize, Running) {
        let mut starts: Vec<_> = tickets.iter_mut().map(|t| Box::pin(t.start())).collect();
        // Every ticket takes its place in the queue before the slot frees.
        for start in &mut starts {
            assert!(poll_once(start.as_mut()).await.is_none());
        }
        assert!(a.cpu.lock().waiters.len() >= starts.len());
        drop(busy);
        loop {
            for (i, start) in starts.iter_mut().enumerate() {
                if let Some(result) = poll_once(start.as_mut()).await {
                    return (i, result.expect("started"));
                }
            }
            tokio::task::yield_now().await;
        }
    }

    async fn poll_once<F: std::future::Future + Unpin>(f: F) -> Option<F::Output> {
        let mut f = f;
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
                std::task::Poll::Ready(v) => Some(v),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }

    #[tokio::test]
    async fn of_runs_arriving_together_the_dearest_starts_first() {
        let a = Admission::new(1, Duration::from_secs(10));
        let mut busy = a.admit(MIN_COST).unwrap();
        let running = busy.start().await.unwrap();
        // 1 MP, then 4 MP (0.16 s at the prior estimate), then 2 MP: the 4 MP run first.
        let mut tickets = vec![
            a.admit(1_000_000).unwrap(),
            a.admit(4_000_000).unwrap(),
            a.admit(2_000_000).unwrap(),
        ];
        assert_eq!(next_of(&a, running, &mut tickets).await.0, 1);
    }

    #[tokio::test]
    async fn a_run_is_not_passed_by_one_that_arrived_more_than_the_lead_after_it() {
        let a = Admission::new(1, Duration::from_secs(10));
        let mut busy = a.admit(MIN_COST).unwrap();
        let running = busy.start().await.unwrap();
        let cheap = a.admit(MIN_COST).unwrap();
        tokio::time::sleep(LEAD + Duration::from_millis(20)).await;
        // Expected to take seconds, but it arrived after the lead: it waits its turn.
        let dear = a.admit(100_000_000).unwrap();
        assert_eq!(next_of(&a, running, &mut [cheap, dear]).await.0, 0);
    }

    #[tokio::test]
    async fn a_slot_freed_for_a_waiter_that_left_goes_to_the_next() {
        let a = Admission::new(1, Duration::from_secs(10));
        let mut busy = a.admit(MIN_COST).unwrap();
        let running = busy.start().await.unwrap();
        let mut gone = a.admit(4_000_000).unwrap();
        let mut stays = a.admit(MIN_COST).unwrap();
        {
            let start = Box::pin(gone.start());
            // Queued first (the dearer), then abandoned, as a request that went away.
            assert!(poll_once(start).await.is_none());
        }
        let start = Box::pin(stays.start());
        drop(running);
        let run = tokio::time::timeout(Duration::from_secs(5), start)
            .await
            .expect("the slot reached the waiter that stayed")
            .unwrap();
        drop(run);
        drop(busy);
        assert_eq!(a.cpu.free(), 1, "the slot is free again");
    }

    #[tokio::test]
    async fn background_work_waits_for_the_runs_that_came_with_it() {
        let a = Admission::new(1, Duration::from_secs(10));
        let mut busy = a.admit(MIN_COST).unwrap();
        let running = busy.start().await.unwrap();
        let mut background = Box::pin(a.side_work(Urgency::Background));
        assert!(poll_once(background.as_mut()).await.is_none());
        // A run arriving after it, even a cheap one, goes first.
        let mut tickets = [a.admit(MIN_COST).unwrap()];
        let (first, run) = next_of(&a, running, &mut tickets).await;
        assert_eq!(first, 0);
        assert!(poll_once(background.as_mut()).await.is_none());
        drop(run);
        drop(tickets);
        drop(busy);
        let held = tokio::time::timeout(Duration::from_secs(5), background)
            .await
            .expect("then it gets the slot");
        drop(held);
        assert_eq!(a.load(), (0, 0));
        assert_eq!(a.cpu.free(), 1);
    }
}
