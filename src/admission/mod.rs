//! Admission control for processing, the one CPU-bound thing the service does.
//!
//! Work is admitted by cost (pixels a run touches, from `imgcas_processors::cost`), not by
//! count: a 24 MP decode weighs thirty times a 0.8 MP one. A run that would wait for the CPU
//! longer than its tier's target sojourn time is refused at once with `overloaded`, rather
//! than queued to time out later (the queue stays short, so admitted work stays fast). The
//! wait is estimated from the cost ahead of it and the measured seconds per pixel (wall time
//! on a CPU slot, since that is how long a slot stays taken); a CoDel-style check catches
//! what the estimate misses: once the measured waits have stayed above target for a whole
//! interval, arrivals that would have to queue are refused until a wait drops below it, and
//! no admitted run waits longer than twice the target.
//!
//! Hits never come here: only runs that must process take a ticket.
//!
//! **Tiers** (docs/api.md, "Admission tiers and tenants"): who waits for the work decides how it is
//! treated. [`Tier::Interactive`] is a request for an image; [`Tier::Bulk`] is a batch's
//! (ingest and its warm specs, warm requests that say `X-Imgcas-Tier: bulk`);
//! [`Tier::Background`] is what nobody waits for (an original's facts and fingerprint,
//! computed once). Slots are granted in tier order (`slots.rs`: with a share kept for bulk,
//! and a slot kept for interactive work). Under pressure — interactive waits above target
//! for an interval, or processing more than twice as slow per pixel as usual
//! (`pressure.rs`) — bulk arrivals are refused with `Retry-After` before any interactive
//! one is, and background work pauses. Bulk's target is [`BULK_TARGET_FACTOR`] times the
//! interactive one: a batch can wait where a page cannot.
//!
//! **Tenants** share a tier fairly: a tenant is the source URL's host, or the name of the
//! token a request presents. The queue takes tenants' runs by deficit round-robin on cost,
//! the estimate of a run's wait counts other tenants' queued work only up to its own
//! tenant's (what that order makes it wait for), and a standing queue refuses only the
//! tenants holding at least their share of it: one tenant's burst waits behind its own work.
//!
//! Waiting runs of one tenant take the slots dearest first among those that arrived close
//! together: a run's place is its arrival moved earlier by its expected run time, at most
//! [`LEAD`]. A page (or a `srcset` burst) is done when its slowest image is, and a long run
//! started last makes all of them late: of the four widths of a new 12 MP photo, the
//! whole-scale decode of the largest is most of the burst, and started after the others
//! (first come, first served) it made the burst take 1.66× that width alone.
//!
//! The lower tiers' CPU work runs on threads of lower priority (`niced.rs`,
//! [`Admission::run_as`]): the kernel, too, puts image requests first.
//!
//! Work computed once per original (facts, fingerprints: [`Admission::side_work`]) takes the
//! same slots and is never refused. Its cost is not in the estimates: its small decode is
//! most often shared with another (the fingerprint's with the facts'), and charging each
//! for it refused a new original's first request on an idle server.

mod book;
pub mod learned;
mod memory;
mod niced;
mod pressure;
mod reserve;
mod slots;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use book::{TenantReading, Totals};
pub use memory::{bound_arenas, give_memory_back};
pub use niced::ThreadClock;
use reserve::{mib_of, UNBOUNDED_MIB};
pub use slots::Slot;
use slots::{Slots, Want};

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
/// Bulk (and background) work's target sojourn, as a multiple of the interactive target.
pub const BULK_TARGET_FACTOR: u32 = 4;
/// How long background work pauses once pressure is seen.
const PAUSE: Duration = Duration::from_secs(1);
/// How long an image request's refusal for its estimated wait counts as pressure (unless an
/// interactive run would start at once before then).
const REFUSALS_STAND_FOR: Duration = Duration::from_secs(2);
/// The tenant of work no token or source host names (requests by hash, facts, probes).
pub const NOBODY: &str = "-";

/// How many tiers there are.
pub const TIERS: usize = 3;

/// Every reason admission gives for refusing work (the `reason` label of
/// `imgcas_admission_rejections_total`).
pub const REFUSAL_REASONS: &[&str] = &[
    "estimated_wait",
    "standing_queue",
    "waited_too_long",
    "queue_full",
    "shed_for_interactive",
];

/// Who waits for a run: the order slots are granted in, and what is shed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// A request for an image, by URL or by hash.
    Interactive = 0,
    /// A batch: `/v1/ingest` and its warm specs, warm requests marked bulk.
    Bulk = 1,
    /// Nobody: facts, fingerprints.
    Background = 2,
}

impl Tier {
    pub const ALL: [Tier; TIERS] = [Tier::Interactive, Tier::Bulk, Tier::Background];

    pub fn name(self) -> &'static str {
        match self {
            Tier::Interactive => "interactive",
            Tier::Bulk => "bulk",
            Tier::Background => "background",
        }
    }

    /// The tier a request's `X-Imgcas-Tier` names (a request may only lower its own).
    pub fn parse(name: &str) -> Option<Tier> {
        Tier::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name.trim()))
    }
}

/// A tenant's name: a source host, or a token's name.
pub type Tenant = Arc<str>;

/// Who a run is for: its tier, its tenant (whose share of the queue it takes), and who pays
/// for it (whose budget it spends, `pipeline/budgets.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Asker {
    pub tier: Tier,
    pub tenant: Tenant,
    pub payer: Payer,
}

/// Whose budget a run spends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Payer {
    /// The tenant itself: a token's name, or a batch the service was given to run.
    Tenant,
    /// An anonymous client, at this address if it is known: it spends its own budget, never
    /// the host's or another client's.
    Anonymous(Option<std::net::IpAddr>),
}

impl Asker {
    pub fn new(tier: Tier, tenant: &str) -> Asker {
        Asker {
            tier,
            tenant: Tenant::from(tenant),
            payer: Payer::Tenant,
        }
    }

    /// Work of `tier` no token or source host names: the tenant [`NOBODY`], paid by no
    /// budget (the service's own work, or a client whose address is not known).
    pub fn anonymous(tier: Tier) -> Asker {
        Asker {
            payer: Payer::Anonymous(None),
            ..Asker::new(tier, NOBODY)
        }
    }
}

pub struct Admission {
    cpu: Arc<Slots>,
    /// Memory runs hold at once, in MiB permits, against `limits.max_memory` (audit #4: by
    /// pixels alone, two 49 MP runs of 1.5 and 1.8 GB were admitted on two slots).
    memory: Arc<tokio::sync::Semaphore>,
    memory_mib: u32,
    /// Runs that found the memory taken and waited for it.
    memory_waits: std::sync::atomic::AtomicU64,
    /// Where the lower tiers' CPU work runs (`niced.rs`).
    niced: niced::Niced,
    slots: usize,
    target: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct CoDel {
    /// When waits were first seen above target (cleared by a wait below it).
    above_since: Option<Instant>,
    /// Waits stayed above target for an interval: shed arrivals that would queue.
    shedding: bool,
}

impl CoDel {
    fn clear(&mut self) {
        self.above_since = None;
        self.shedding = false;
    }
}

#[derive(Debug)]
struct State {
    /// Cost of the admitted runs holding a slot.
    running: u64,
    /// Cost of the admitted runs waiting for a slot, by tier and tenant.
    queued: [HashMap<Tenant, u64>; TIERS],
    /// Admitted runs still waiting for a CPU slot.
    waiting: usize,
    /// Smoothed seconds of CPU per pixel of cost, over every run: the reference a class's
    /// own rate is measured against (`learned.rs`).
    secs_per_pixel: f64,
    /// Seconds per pixel of cost learned per class of run (format and operation).
    learned: learned::Learned,
    /// Smoothed seconds per pixel of the plan's cost, unscaled: the model before classes
    /// were learned, kept as the baseline the learned estimates are compared with.
    fixed_secs_per_pixel: f64,
    /// Per tier (background shares bulk's).
    codel: [CoDel; 2],
    /// When an image request was last refused for the wait it would have had (its run's
    /// cost known, the queue ahead of it too long): interactive demand is over capacity, so
    /// batches are shed until an interactive run would start at once again.
    interactive_refused_at: Option<Instant>,
    latency: pressure::Latency,
    book: book::Book,
}

impl State {
    fn queued_in(&self, tier: Tier) -> u64 {
        self.queued[tier as usize].values().sum()
    }

    /// The cost a run of `cost` for `asker` waits for: what runs now, the tiers above, and
    /// in its own tier its tenant's queue and each other tenant's up to as much (the share
    /// round-robin gives them meanwhile).
    fn ahead(&self, asker: &Asker, cost: u64) -> u64 {
        let mine = &self.queued[asker.tier as usize];
        let own = mine.get(&asker.tenant).copied().unwrap_or(0);
        let above: u64 = Tier::ALL
            .iter()
            .filter(|t| **t < asker.tier)
            .map(|t| self.queued_in(*t))
            .sum();
        let others: u64 = mine
            .iter()
            .filter(|(t, _)| **t != asker.tenant)
            .map(|(_, q)| (*q).min(own + cost))
            .sum();
        self.running + above + own + others
    }

    /// Whether `asker`'s tenant holds at least an equal share of its tier's queue (counting
    /// itself among the tenants): a tenant with less than others is not what makes it stand.
    fn holds_its_share(&self, asker: &Asker) -> bool {
        let mine = &self.queued[asker.tier as usize];
        let own = mine.get(&asker.tenant).copied();
        let tenants = mine.len() as u64 + u64::from(own.is_none());
        let total: u64 = mine.values().sum();
        own.unwrap_or(0).saturating_mul(tenants) >= total
    }

    fn add_queued(&mut self, asker: &Asker, cost: u64) {
        *self.queued[asker.tier as usize]
            .entry(asker.tenant.clone())
            .or_default() += cost;
    }

    fn take_queued(&mut self, asker: &Asker, cost: u64) {
        let queue = &mut self.queued[asker.tier as usize];
        if let Some(q) = queue.get_mut(&asker.tenant) {
            *q = q.saturating_sub(cost);
            if *q == 0 {
                queue.remove(&asker.tenant);
            }
        }
    }
}

/// A refusal, with when to come back.
#[derive(Debug, Clone, PartialEq)]
pub struct Overloaded {
    pub reason: &'static str,
    pub retry_after: Duration,
    pub tier: Tier,
}

/// An admitted run. Dropping it (finished, failed or cancelled) returns its cost.
pub struct Ticket<'a> {
    admission: &'a Admission,
    /// The cost as admission counts it: scaled by its class's learned rate.
    cost: u64,
    /// The cost the plan charged.
    raw_cost: u64,
    class: Option<learned::Class>,
    /// What the run was expected to take at admission by the plan's cost alone (the fixed
    /// coefficients), and by its class's learned rate (`learned.rs`).
    fixed_estimate: f64,
    learned_estimate: f64,
    asker: Asker,
    admitted_at: Instant,
    /// Its place among its tenant's waiters.
    place: i128,
    waiting: bool,
    /// The memory it holds while it runs, in MiB ([`Admission::with_memory`]).
    memory_mib: u32,
}

/// A run holding a CPU slot and its memory.
pub struct Running {
    pub permit: Slot,
    /// Its share of `limits.max_memory`, held until dropped with the slot.
    pub memory: Option<tokio::sync::OwnedSemaphorePermit>,
    /// How long the ticket waited for the slot.
    pub waited: Duration,
}

impl Admission {
    pub fn new(slots: usize, target: Duration) -> Admission {
        let slots = slots.max(1);
        Admission {
            cpu: Arc::new(Slots::new(slots)),
            memory: Arc::new(tokio::sync::Semaphore::new(UNBOUNDED_MIB as usize)),
            memory_mib: UNBOUNDED_MIB,
            memory_waits: Default::default(),
            niced: niced::Niced::new(slots),
            slots,
            target,
            state: Mutex::new(State {
                running: 0,
                queued: Default::default(),
                waiting: 0,
                secs_per_pixel: PRIOR_SECS_PER_PIXEL,
                learned: Default::default(),
                fixed_secs_per_pixel: PRIOR_SECS_PER_PIXEL,
                codel: Default::default(),
                interactive_refused_at: None,
                latency: Default::default(),
                book: Default::default(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The target sojourn of a tier.
    fn target_of(&self, tier: Tier) -> Duration {
        match tier {
            Tier::Interactive => self.target,
            Tier::Bulk | Tier::Background => self.target * BULK_TARGET_FACTOR,
        }
    }

    /// Whether the server is under pressure now (see the module's doc); pauses background
    /// work when it is.
    fn under_pressure(&self, state: &mut State, now: Instant) -> bool {
        if self.cpu.would_start(Tier::Interactive, now) {
            // An interactive run would start at once: whatever queue stood has drained.
            state.codel[0].clear();
            state.interactive_refused_at = None;
        }
        // Image requests refused for their estimated wait (a drawing charged what it costs
        // is refused at once, where its cost once hid in a queue until it stood).
        let refused = state
            .interactive_refused_at
            .is_some_and(|at| now.saturating_duration_since(at) < REFUSALS_STAND_FOR);
        let pressure = state.codel[0].shedding || refused || state.latency.slow(now);
        if pressure {
            self.cpu.pause_background(now + PAUSE);
        }
        pressure
    }

    /// Refuses a batch of `asker`'s before it starts any work while bulk work is shed
    /// (counted as its refusal).
    pub fn admit_batch(&self, asker: &Asker) -> Result<(), Overloaded> {
        let now = Instant::now();
        let mut state = self.state();
        if !self.under_pressure(&mut state, now) {
            return Ok(());
        }
        state.book.refused(Tier::Bulk, &asker.tenant);
        Err(Overloaded {
            reason: "shed_for_interactive",
            retry_after: self.drain_time(&state),
            tier: Tier::Bulk,
        })
    }

    /// How long the work queued and running takes to drain, at least a second.
    fn drain_time(&self, state: &State) -> Duration {
        let queued: u64 = Tier::ALL.iter().map(|t| state.queued_in(*t)).sum();
        let secs = (state.running + queued) as f64 * state.secs_per_pixel / self.slots as f64;
        Duration::from_secs_f64(secs.min(3600.0)).max(Duration::from_secs(1))
    }

    /// Admits a run of `cost` pixels for `asker`, or refuses it (see the module's doc).
    pub fn admit(&self, cost: u64, asker: &Asker) -> Result<Ticket<'_>, Overloaded> {
        self.admit_class(cost, "", asker)
    }

    /// [`Admission::admit`] of a run of `class` (its output format and operation, as
    /// `learned.rs` keys them): its cost is scaled by what runs of its class were measured
    /// to take against the average, so the queue's wait estimates are in learned seconds.
    pub fn admit_class(
        &self,
        cost: u64,
        class: &str,
        asker: &Asker,
    ) -> Result<Ticket<'_>, Overloaded> {
        self.admit_run(cost, 0, class, asker)
    }

    /// [`Admission::admit_class`] of a run that holds `memory` bytes at its peak: it starts
    /// once that much of `limits.max_memory` is free, as well as a CPU slot (the caller
    /// refuses a run that could never fit, [`Admission::memory_fits`]).
    pub fn admit_run(
        &self,
        cost: u64,
        memory: u64,
        class: &str,
        asker: &Asker,
    ) -> Result<Ticket<'_>, Overloaded> {
        let raw_cost = cost.max(MIN_COST);
        let now = Instant::now();
        let tier = asker.tier;
        if tier == Tier::Interactive {
            self.cpu.interactive_arrived(now);
        }
        let mut state = self.state();
        let class = state.learned.class_of(class);
        let cost = state
            .learned
            .scaled(class, raw_cost, state.secs_per_pixel)
            .max(MIN_COST);
        let codel = (tier as usize).min(1);
        let refuse = |state: &mut State, reason: &'static str, retry_after: Duration| {
            state.book.refused(tier, &asker.tenant);
            Err(Overloaded {
                reason,
                retry_after,
                tier,
            })
        };
        let pressure = self.under_pressure(&mut state, now);
        if tier != Tier::Interactive && pressure {
            let retry_after = self.drain_time(&state);
            return refuse(&mut state, "shed_for_interactive", retry_after);
        }
        if self.cpu.would_start(tier, now) {
            // Nothing queues ahead of it: the standing queue, if there was one, has drained.
            state.codel[codel].clear();
        } else {
            let ahead = state.ahead(asker, cost);
            let wait = Duration::from_secs_f64(
                (ahead as f64 * state.secs_per_pixel / self.slots as f64).min(3600.0),
            );
            let retry_after = wait.max(Duration::from_secs(1));
            if state.waiting >= MAX_QUEUE {
                return refuse(&mut state, "queue_full", retry_after);
            }
            if state.codel[codel].shedding && state.holds_its_share(asker) {
                return refuse(&mut state, "standing_queue", retry_after);
            }
            if wait > self.target_of(tier) {
                if tier == Tier::Interactive {
                    state.interactive_refused_at = Some(now);
                }
                return refuse(&mut state, "estimated_wait", retry_after);
            }
        }
        state.add_queued(asker, cost);
        state.waiting += 1;
        state.book.admitted(tier, &asker.tenant, cost);
        let lead = Duration::from_secs_f64((cost as f64 * state.secs_per_pixel).min(3600.0));
        Ok(Ticket {
            admission: self,
            cost,
            raw_cost,
            class,
            fixed_estimate: raw_cost as f64 * state.fixed_secs_per_pixel,
            learned_estimate: cost as f64 * state.secs_per_pixel,
            asker: asker.clone(),
            admitted_at: now,
            place: self.cpu.place(now, lead.min(LEAD)),
            waiting: true,
            memory_mib: match memory {
                0 => 0,
                bytes => mib_of(bytes).min(self.memory_mib),
            },
        })
    }

    /// A CPU slot for work that is not a processing run, never refused, in `tier`: a
    /// request waits for it (interactive) or nobody does (background). Held until the
    /// returned value is dropped.
    pub async fn side_work(&self, tier: Tier) -> Slot {
        let tenant = Tenant::from(NOBODY);
        let place = self.cpu.place(Instant::now(), Duration::ZERO);
        self.cpu
            .acquire(Want {
                tier,
                tenant: &tenant,
                place,
                cost: MIN_COST,
            })
            .await
    }

    /// Runs the CPU work of a lower tier (`tier` not interactive) on a niced thread, and an
    /// interactive one on tokio's blocking pool; `Err` with the message of a panic.
    pub async fn run_as<T: Send + 'static>(
        &self,
        tier: Tier,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        match tier {
            Tier::Interactive => tokio::task::spawn_blocking(f)
                .await
                .map_err(|e| e.to_string()),
            Tier::Bulk | Tier::Background => self.niced.run(f).await,
        }
    }

    /// Cost admitted and not finished, and runs waiting for a slot (metrics).
    pub fn load(&self) -> (u64, usize) {
        let state = self.state();
        let queued: u64 = Tier::ALL.iter().map(|t| state.queued_in(*t)).sum();
        (state.running + queued, state.waiting)
    }

    /// Slots held and waiters (runs and side work), by tier (metrics).
    pub fn by_tier(&self) -> [(usize, usize); TIERS] {
        self.cpu.by_tier()
    }

    /// Each tier's tenants' totals, the dearest by name and the rest as `other` (metrics).
    pub fn tenants(&self) -> Vec<TenantReading> {
        self.state().book.readings()
    }

    /// The current estimate of seconds per pixel: wall time on a CPU slot, not thread CPU
    /// time (what admission must predict is how long the slot stays taken).
    pub fn secs_per_pixel(&self) -> f64 {
        self.state().secs_per_pixel
    }

    /// The cost model as learned so far: each class's rate against the average, and the
    /// run-time estimates' errors, learned and fixed (`learned.rs`).
    pub fn cost_model(&self) -> learned::Reading {
        let state = self.state();
        state.learned.reading(state.secs_per_pixel)
    }
}

impl Ticket<'_> {
    /// Waits for a CPU slot, at most twice its tier's target; a run that waited past the
    /// target turns shedding on once that has lasted an interval.
    pub async fn start(&mut self) -> Result<Running, Overloaded> {
        let admission = self.admission;
        let tier = self.asker.tier;
        let target = admission.target_of(tier);
        let deadline = self.admitted_at + 2 * target;
        let want = Want {
            tier,
            tenant: &self.asker.tenant,
            place: self.place,
            cost: self.cost,
        };
        // Memory first, then the CPU slot, both within the wait the tier allows: a run that
        // starts holds what it will need.
        let slot_and_memory = async {
            let memory = match self.memory_mib {
                0 => None,
                mib => {
                    if admission.memory.available_permits() < mib as usize {
                        admission
                            .memory_waits
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    admission.memory.clone().acquire_many_owned(mib).await.ok()
                }
            };
            (admission.cpu.acquire(want).await, memory)
        };
        let acquired = tokio::time::timeout_at(deadline.into(), slot_and_memory).await;
        let now = Instant::now();
        let waited = now - self.admitted_at;
        let mut state = admission.state();
        state.waiting -= 1;
        state.take_queued(&self.asker, self.cost);
        self.waiting = false;
        let codel = &mut state.codel[(tier as usize).min(1)];
        match acquired {
            Ok((permit, memory)) => {
                if waited > target {
                    let since = *codel.above_since.get_or_insert(now);
                    if now - since >= INTERVAL {
                        codel.shedding = true;
                    }
                } else {
                    codel.clear();
                }
                state.running += self.cost;
                Ok(Running {
                    permit,
                    memory,
                    waited,
                })
            }
            // Timed out: the queue stands.
            Err(_) => {
                codel.shedding = true;
                codel.above_since.get_or_insert(now);
                // Not running: nothing to give back when dropped.
                self.cost = 0;
                Err(Overloaded {
                    reason: "waited_too_long",
                    retry_after: target.max(Duration::from_secs(1)),
                    tier,
                })
            }
        }
    }

    /// Feeds a finished run's wall time on its CPU slot into the cost estimate and the
    /// latency windows.
    pub fn record(&self, ran: Duration) {
        self.record_with_storage(ran, Duration::ZERO, true);
    }

    /// Records a run that took `ran` on the CPU after `storage` spent reading its input
    /// (the bucket, the maps): the pressure signal counts both, so a slow bucket or
    /// database sheds bulk work as slow CPUs do. Only a run that `succeeded` teaches the cost
    /// model (audit #4: a failed or stopped run says nothing of what its class costs, and
    /// hostile inputs are made to fail), and no one run drags the averages far
    /// (`learned::steady_average`).
    pub fn record_with_storage(&self, ran: Duration, storage: Duration, succeeded: bool) {
        let secs = ran.as_secs_f64();
        let mut state = self.admission.state();
        if succeeded {
            let sample = secs / self.cost.max(1) as f64;
            let (learned, fixed) = (self.learned_estimate, self.fixed_estimate);
            state
                .learned
                .observe(self.class, secs, self.raw_cost, learned, fixed);
            state.secs_per_pixel = learned::steady_average(state.secs_per_pixel, sample, 0.2);
            let unscaled = secs / self.raw_cost.max(1) as f64;
            state.fixed_secs_per_pixel =
                learned::steady_average(state.fixed_secs_per_pixel, unscaled, 0.2);
        }
        let loaded = (secs + storage.as_secs_f64()) / self.cost.max(1) as f64;
        state.latency.record(loaded, Instant::now());
    }

    /// What a run that held its slot for `ran` spent, in the plan's cost units: its time at
    /// the average rate of every run (a tenant is charged what its runs took, not what was
    /// feared, `pipeline/budgets.rs`). At most the plan's cost: a run slower than planned is
    /// its input's fault only as far as the plan says, and the rest is the service's.
    pub fn spent(&self, ran: Duration) -> u64 {
        let rate = self.admission.state().fixed_secs_per_pixel;
        if rate <= 0.0 {
            return self.raw_cost;
        }
        let units = ran.as_secs_f64() / rate;
        match units.is_finite() {
            true => (units as u64).min(self.raw_cost),
            false => self.raw_cost,
        }
    }

    /// The cost as admission counts it (the plan's, scaled by its class's learned rate).
    pub fn scaled_cost(&self) -> u64 {
        self.cost
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut state = self.admission.state();
        if self.waiting {
            state.waiting -= 1;
            state.take_queued(&self.asker, self.cost);
        } else {
            state.running = state.running.saturating_sub(self.cost);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn web() -> Asker {
        Asker::new(Tier::Interactive, "shop.example")
    }

    #[tokio::test]
    async fn a_run_waits_for_memory_another_holds_even_with_a_slot_free() {
        // Two slots, 3 GB: the audit's two 49 MP runs (a 1.5 GB AVIF output, a 1.82 GB
        // lossless JPEG XL one) no longer run together.
        let a = Admission::new(2, Duration::from_secs(10)).with_memory(3_000_000_000);
        let (avif, jxl) = (1_500_000_000, 1_820_000_000);
        let mut first = a.admit_run(MIN_COST, avif, "avif", &web()).unwrap();
        let running = first.start().await.unwrap();
        assert!(a.memory_held().0 >= avif);
        let mut second = a.admit_run(MIN_COST, jxl, "jxl", &web()).unwrap();
        {
            let start = second.start();
            tokio::pin!(start);
            let early = tokio::time::timeout(Duration::from_millis(200), &mut start).await;
            assert!(early.is_err(), "started beside the first");
        }
        drop(running);
        drop(first);
        let started = tokio::time::timeout(Duration::from_secs(2), second.start())
            .await
            .expect("starts once the first ends");
        let started = started.unwrap();
        assert!(a.memory_held().0 >= jxl);
        assert!(a.memory_held().1 >= 1, "the wait was counted");
        drop(started);
        drop(second);
        assert_eq!(a.memory_held().0, 0);
        assert!(
            !a.memory_fits(3_500_000_000),
            "more than all of it never fits"
        );
        assert!(a.memory_fits(jxl));
    }

    #[tokio::test]
    async fn an_idle_pool_admits_anything() {
        let a = Admission::new(2, Duration::from_millis(100));
        let mut t = a
            .admit(1 << 40, &web())
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
        let mut busy = a.admit(10_000_000, &web()).unwrap();
        let _running = busy.start().await.unwrap();
        let refused = a.admit(1_000_000, &web()).err().expect("refused");
        assert_eq!(refused.reason, "estimated_wait");
        assert!(refused.retry_after >= Duration::from_secs(1));
        assert_eq!(a.load().1, 0, "a refusal leaves nothing queued");
    }

    #[tokio::test]
    async fn cheap_work_queues_and_a_wait_past_twice_the_target_is_shed() {
        let a = Admission::new(1, Duration::from_millis(50));
        let mut busy = a.admit(MIN_COST, &web()).unwrap();
        let running = busy.start().await.unwrap();
        // Small enough to be admitted behind it...
        let mut queued = a.admit(MIN_COST, &web()).unwrap();
        assert_eq!(a.load().1, 1);
        // ...but the slot is never freed in time.
        let refused = queued.start().await.err().expect("timed out");
        assert_eq!(refused.reason, "waited_too_long");
        // The queue stood: arrivals that would queue are shed until it drains.
        let shed = a.admit(MIN_COST, &web()).err().expect("shed");
        assert_eq!(shed.reason, "standing_queue");
        drop(running);
        drop(busy);
        drop(queued);
        let mut fresh = a
            .admit(MIN_COST, &web())
            .expect("an idle slot ends shedding");
        fresh.start().await.unwrap();
    }

    #[tokio::test]
    async fn the_cost_estimate_follows_measured_runs() {
        let a = Admission::new(1, Duration::from_millis(100));
        let t = a.admit(1_000_000, &web()).unwrap();
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
        assert!(a.cpu.waiters() >= starts.len());
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
        let mut busy = a.admit(MIN_COST, &web()).unwrap();
        let running = busy.start().await.unwrap();
        // 1 MP, then 4 MP (0.16 s at the prior estimate), then 2 MP: the 4 MP run first.
        let mut tickets = vec![
            a.admit(1_000_000, &web()).unwrap(),
            a.admit(4_000_000, &web()).unwrap(),
            a.admit(2_000_000, &web()).unwrap(),
        ];
        assert_eq!(next_of(&a, running, &mut tickets).await.0, 1);
    }

    #[tokio::test]
    async fn a_run_is_not_passed_by_one_that_arrived_more_than_the_lead_after_it() {
        let a = Admission::new(1, Duration::from_secs(10));
        let mut busy = a.admit(MIN_COST, &web()).unwrap();
        let running = busy.start().await.unwrap();
        let cheap = a.admit(MIN_COST, &web()).unwrap();
        tokio::time::sleep(LEAD + Duration::from_millis(20)).await;
        // Expected to take seconds, but it arrived after the lead: it waits its turn.
        let dear = a.admit(100_000_000, &web()).unwrap();
        assert_eq!(next_of(&a, running, &mut [cheap, dear]).await.0, 0);
    }

    #[tokio::test]
    async fn a_slot_freed_for_a_waiter_that_left_goes_to_the_next() {
        let a = Admission::new(1, Duration::from_secs(10));
        let mut busy = a.admit(MIN_COST, &web()).unwrap();
        let running = busy.start().await.unwrap();
        let mut gone = a.admit(4_000_000, &web()).unwrap();
        let mut stays = a.admit(MIN_COST, &web()).unwrap();
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
        let mut busy = a.admit(MIN_COST, &web()).unwrap();
        let running = busy.start().await.unwrap();
        let mut background = Box::pin(a.side_work(Tier::Background));
        assert!(poll_once(background.as_mut()).await.is_none());
        // A run arriving after it, even a cheap one, goes first.
        let mut tickets = [a.admit(MIN_COST, &web()).unwrap()];
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

    #[tokio::test]
    async fn an_image_request_refused_for_its_wait_sheds_batches_until_the_slot_frees() {
        let a = Admission::new(1, Duration::from_millis(50));
        let bulk = Asker::new(Tier::Bulk, "merchant");
        // A run charged seconds holds the only slot.
        let mut heavy = a.admit(200_000_000, &web()).unwrap();
        let running = heavy.start().await.unwrap();
        assert_eq!(
            a.admit(MIN_COST, &web()).err().unwrap().reason,
            "estimated_wait"
        );
        assert_eq!(
            a.admit_batch(&bulk).err().unwrap().reason,
            "shed_for_interactive"
        );
        // Once an image request would start at once, batches are admitted again.
        drop((running, heavy));
        assert!(a.admit_batch(&bulk).is_ok());
    }

    #[tokio::test]
    async fn under_pressure_bulk_is_shed_before_interactive_and_background_pauses() {
        let a = Admission::new(2, Duration::from_millis(50));
        let bulk = Asker::new(Tier::Bulk, "merchant");
        assert!(a.admit_batch(&bulk).is_ok());
        // Both slots busy; an interactive run waits past its target, for an interval.
        let mut one = a.admit(MIN_COST, &web()).unwrap();
        let mut two = a.admit(MIN_COST, &web()).unwrap();
        let (r1, r2) = (one.start().await.unwrap(), two.start().await.unwrap());
        let mut late = a.admit(MIN_COST, &web()).unwrap();
        assert_eq!(late.start().await.err().unwrap().reason, "waited_too_long");
        // Bulk is refused, with a time to come back...
        let refused = a.admit(MIN_COST, &bulk).err().expect("bulk shed");
        assert_eq!(refused.reason, "shed_for_interactive");
        assert_eq!(refused.tier, Tier::Bulk);
        assert!(refused.retry_after >= Duration::from_secs(1));
        assert!(a.admit_batch(&bulk).is_err());
        // ...and background work does not start even when a slot frees.
        drop((r1, one));
        let mut background = Box::pin(a.side_work(Tier::Background));
        assert!(poll_once(background.as_mut()).await.is_none());
        // An interactive run still gets the free slot at once.
        let mut now = a.admit(MIN_COST, &web()).expect("interactive admitted");
        let running = now.start().await.unwrap();
        assert!(running.waited < Duration::from_millis(20));
        drop((running, now, r2, two, late));
        // Once nothing stands, bulk is admitted again and background work goes on.
        assert!(a.admit_batch(&bulk).is_ok());
        assert!(a.admit(MIN_COST, &bulk).is_ok());
        let held = tokio::time::timeout(Duration::from_secs(3), background)
            .await
            .expect("the pause ends");
        drop(held);
    }

    #[tokio::test]
    async fn a_tenants_burst_does_not_refuse_another_tenant() {
        let a = Admission::new(1, Duration::from_millis(200));
        let big = Asker::new(Tier::Interactive, "big.example");
        let small = Asker::new(Tier::Interactive, "small.example");
        let mut busy = a.admit(MIN_COST, &big).unwrap();
        let _running = busy.start().await.unwrap();
        // The big tenant queues until its own estimate passes the target (40 ns/px: 5 MP
        // is 0.2 s).
        let mut queued = Vec::new();
        while let Ok(t) = a.admit(1_000_000, &big) {
            queued.push(t);
        }
        assert!(queued.len() >= 3, "{}", queued.len());
        // The small tenant waits for at most its own cost of the big one's queue.
        let mine = a
            .admit(1_000_000, &small)
            .expect("another tenant is admitted");
        let tenants = a.tenants();
        let big_refused = tenants
            .iter()
            .find(|l| l.tenant == "big.example")
            .unwrap()
            .totals
            .refused;
        assert_eq!(big_refused, 1);
        drop(mine);
    }
}
