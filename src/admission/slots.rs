//! The CPU slots and the work waiting for one: who gets the next free slot.
//!
//! Waiters are kept by tier, then by tenant, then by place (see [`Slots::place`]). A freed
//! slot goes to the highest tier with an eligible waiter, with two exceptions that keep
//! the lower tiers alive without letting them slow the top one:
//!
//! - **Bulk's share.** While bulk work waits, at least one grant in [`BULK_SHARE`] goes to
//!   it, however much interactive work waits: an ingest progresses under steady load.
//! - **The interactive reserve.** While interactive work arrived in the last
//!   [`INTERACTIVE_RECENT`], bulk and background work together hold at most all slots but
//!   one (of two or more): an interactive run never waits for a batch's run to finish. On
//!   a server with no interactive traffic, batches use every slot.
//!
//! Background work also waits while admission says the server is under pressure
//! ([`Slots::pause_background`]); its waiters look again every [`RECHECK`].
//!
//! Inside a tier, tenants take turns by deficit round-robin on cost: each turn credits a
//! tenant [`QUANTUM`] pixels, and it is granted slots while its credit covers its next run.
//! One tenant's burst of a thousand new originals therefore waits behind its own work, and
//! another tenant's single request is served within a turn.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::{Tenant, Tier, TIERS};

/// One grant in this many goes to bulk work while it waits.
pub const BULK_SHARE: u32 = 4;
/// How recently interactive work must have arrived for the interactive reserve to hold.
pub const INTERACTIVE_RECENT: Duration = Duration::from_secs(1);
/// A tenant's credit per turn, in pixels of cost (about a 4 MP photo's run).
pub const QUANTUM: u64 = 4_000_000;
/// How often paused background waiters look again.
const RECHECK: Duration = Duration::from_millis(200);

pub struct Slots {
    /// When the slots were made: places are counted from here.
    epoch: Instant,
    total: usize,
    queue: Mutex<Queue>,
}

struct Queue {
    free: usize,
    /// Slots held, by tier.
    held: [usize; TIERS],
    tiers: [TierQueue; TIERS],
    arrivals: u64,
    /// Grants to other tiers since bulk's last, while bulk waited.
    since_bulk: u32,
    last_interactive: Option<Instant>,
    /// Background work is not started before this.
    paused_until: Option<Instant>,
}

/// One tier's waiters, by tenant, with the tenants' turn order.
#[derive(Default)]
struct TierQueue {
    tenants: HashMap<Tenant, TenantQueue>,
    /// Tenants with waiters, the one whose turn it is first.
    turns: VecDeque<Tenant>,
    waiting: usize,
}

#[derive(Default)]
struct TenantQueue {
    /// By (place, arrival number).
    waiters: BTreeMap<(i128, u64), Waiter>,
    /// Deficit round-robin credit, pixels.
    credit: u64,
}

struct Waiter {
    cost: u64,
    sender: oneshot::Sender<Slot>,
}

/// Where a waiter stands, to take it out again.
#[derive(Clone)]
struct Key {
    tier: Tier,
    tenant: Tenant,
    at: (i128, u64),
}

/// One CPU slot, held until dropped.
pub struct Slot {
    /// `None` once handed back to the free count.
    slots: Option<Arc<Slots>>,
    tier: Tier,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(slots) = self.slots.take() {
            Slots::release(slots, self.tier);
        }
    }
}

/// Removes a waiter that stopped waiting (timed out, or its request went away).
struct Waiting<'a> {
    slots: &'a Slots,
    key: Key,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        // Gone already when it was handed a slot; a slot sent to a receiver dropped since
        // is released by its own drop.
        self.slots.lock().remove(&self.key);
    }
}

/// A request for a slot.
pub struct Want<'a> {
    pub tier: Tier,
    pub tenant: &'a Tenant,
    pub place: i128,
    pub cost: u64,
}

impl Slots {
    pub fn new(total: usize) -> Slots {
        Slots {
            epoch: Instant::now(),
            total,
            queue: Mutex::new(Queue {
                free: total,
                held: [0; TIERS],
                tiers: Default::default(),
                arrivals: 0,
                since_bulk: 0,
                last_interactive: None,
                paused_until: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The place in the queue of work that arrived at `at` and is expected to take `lead`:
    /// nanoseconds from the epoch, its arrival less its lead (smaller goes first).
    pub fn place(&self, at: Instant, lead: Duration) -> i128 {
        let arrived = at.saturating_duration_since(self.epoch).as_nanos();
        i128::try_from(arrived).unwrap_or(i128::MAX) - i128::try_from(lead.as_nanos()).unwrap_or(0)
    }

    /// Notes interactive work arriving (the interactive reserve holds for a while after).
    pub fn interactive_arrived(&self, now: Instant) {
        self.lock().last_interactive = Some(now);
    }

    /// Whether work of `tier` arriving now would start at once.
    pub fn would_start(&self, tier: Tier, now: Instant) -> bool {
        let queue = self.lock();
        queue.free > 0 && queue.waiting_at_or_above(tier) == 0 && queue.eligible(tier, self, now)
    }

    /// Keeps background work from starting until `until`.
    pub fn pause_background(&self, until: Instant) {
        let mut queue = self.lock();
        queue.paused_until = Some(queue.paused_until.map_or(until, |u| u.max(until)));
    }

    /// Slots held and waiters, by tier (metrics).
    pub fn by_tier(&self) -> [(usize, usize); TIERS] {
        let queue = self.lock();
        std::array::from_fn(|i| (queue.held[i], queue.tiers[i].waiting))
    }

    #[cfg(test)]
    pub fn free(&self) -> usize {
        self.lock().free
    }

    #[cfg(test)]
    pub fn waiters(&self) -> usize {
        self.lock().tiers.iter().map(|t| t.waiting).sum()
    }

    /// A slot: at once when one is free for this work and nothing ahead of it waits, else
    /// when the queue's order reaches it.
    pub async fn acquire(self: &Arc<Slots>, want: Want<'_>) -> Slot {
        let now = Instant::now();
        let (receiver, key) = {
            let mut queue = self.lock();
            if want.tier == Tier::Interactive {
                queue.last_interactive = Some(now);
            }
            if queue.free > 0
                && queue.waiting_at_or_above(want.tier) == 0
                && queue.eligible(want.tier, self, now)
            {
                return queue.grant(self, want.tier);
            }
            let (sender, receiver) = oneshot::channel();
            queue.arrivals += 1;
            let key = Key {
                tier: want.tier,
                tenant: want.tenant.clone(),
                at: (want.place, queue.arrivals),
            };
            queue.insert(&key, want.cost, sender);
            (receiver, key)
        };
        let tier = key.tier;
        let _waiting = Waiting { slots: self, key };
        let mut receiver = receiver;
        if tier == Tier::Interactive {
            // Interactive work may always take a free slot: one never sits while it waits.
            return match receiver.await {
                Ok(slot) => slot,
                Err(_) => std::future::pending().await,
            };
        }
        loop {
            // Slots freed while a tier could not take them are handed out when it can: a
            // pause ends, or the interactive reserve lapses.
            match tokio::time::timeout(RECHECK, &mut receiver).await {
                Ok(Ok(slot)) => return slot,
                // The sender is only dropped by a grant after a send, or with the queue:
                // neither leaves this waiter without an answer while `self` lives.
                Ok(Err(_)) => std::future::pending::<()>().await,
                Err(_) => Slots::hand_out(self),
            }
        }
    }

    /// A slot given back: to the next waiter whose turn it is, else to the free count.
    fn release(slots: Arc<Slots>, tier: Tier) {
        {
            let mut queue = slots.lock();
            queue.held[tier as usize] -= 1;
            queue.free += 1;
        }
        Slots::hand_out(&slots);
    }

    /// Hands free slots to the waiters whose turn it is.
    fn hand_out(slots: &Arc<Slots>) {
        loop {
            let mut queue = slots.lock();
            if queue.free == 0 {
                return;
            }
            let Some((tier, waiter)) = queue.next(slots, Instant::now()) else {
                return;
            };
            let slot = queue.grant(slots, tier);
            drop(queue);
            if let Err(mut returned) = waiter.sender.send(slot) {
                // That waiter stopped waiting: its slot is free again (no release to run).
                let mut queue = slots.lock();
                queue.held[tier as usize] -= 1;
                queue.free += 1;
                returned.slots = None;
            }
        }
    }
}

impl Queue {
    fn waiting_at_or_above(&self, tier: Tier) -> usize {
        self.tiers[..=tier as usize].iter().map(|t| t.waiting).sum()
    }

    /// Whether work of `tier` may take a free slot now.
    fn eligible(&self, tier: Tier, slots: &Slots, now: Instant) -> bool {
        match tier {
            Tier::Interactive => true,
            Tier::Bulk | Tier::Background => {
                if tier == Tier::Background && self.paused_until.is_some_and(|u| now < u) {
                    return false;
                }
                let reserve = slots.total >= 2
                    && self
                        .last_interactive
                        .is_some_and(|at| now.saturating_duration_since(at) < INTERACTIVE_RECENT);
                let lower = self.held[Tier::Bulk as usize] + self.held[Tier::Background as usize];
                !reserve || lower < slots.total - 1
            }
        }
    }

    fn grant(&mut self, slots: &Arc<Slots>, tier: Tier) -> Slot {
        self.free -= 1;
        self.held[tier as usize] += 1;
        Slot {
            slots: Some(slots.clone()),
            tier,
        }
    }

    fn insert(&mut self, key: &Key, cost: u64, sender: oneshot::Sender<Slot>) {
        let tier = &mut self.tiers[key.tier as usize];
        let tenant = tier.tenants.entry(key.tenant.clone()).or_default();
        if tenant.waiters.is_empty() {
            tier.turns.push_back(key.tenant.clone());
        }
        tenant.waiters.insert(key.at, Waiter { cost, sender });
        tier.waiting += 1;
    }

    fn remove(&mut self, key: &Key) {
        let tier = &mut self.tiers[key.tier as usize];
        let Some(tenant) = tier.tenants.get_mut(&key.tenant) else {
            return;
        };
        if tenant.waiters.remove(&key.at).is_some() {
            tier.waiting -= 1;
        }
        if tenant.waiters.is_empty() {
            tier.tenants.remove(&key.tenant);
            tier.turns.retain(|t| t != &key.tenant);
        }
    }

    /// The waiter the next free slot goes to, taken out of the queue.
    fn next(&mut self, slots: &Slots, now: Instant) -> Option<(Tier, Waiter)> {
        let bulk_waits = self.tiers[Tier::Bulk as usize].waiting > 0;
        let bulk_due = bulk_waits
            && self.since_bulk + 1 >= BULK_SHARE
            && self.eligible(Tier::Bulk, slots, now);
        let order: &[Tier] = if bulk_due {
            &[Tier::Bulk, Tier::Interactive, Tier::Background]
        } else {
            &[Tier::Interactive, Tier::Bulk, Tier::Background]
        };
        let tier = *order
            .iter()
            .find(|&&t| self.tiers[t as usize].waiting > 0 && self.eligible(t, slots, now))?;
        let waiter = self.tiers[tier as usize].take_turn()?;
        if tier == Tier::Bulk {
            self.since_bulk = 0;
        } else if bulk_waits {
            self.since_bulk += 1;
        }
        Some((tier, waiter))
    }
}

impl TierQueue {
    /// Deficit round-robin: the first tenant in turn whose credit covers its next waiter
    /// gets the slot; a tenant whose credit does not is credited a quantum and goes to the
    /// back. When a whole round would credit everyone, the rounds are credited at once.
    fn take_turn(&mut self) -> Option<Waiter> {
        loop {
            let mut fewest_rounds = u64::MAX;
            for _ in 0..self.turns.len() {
                let name = self.turns.front()?.clone();
                let tenant = self.tenants.get_mut(&name)?;
                let (&at, next) = tenant.waiters.first_key_value()?;
                if tenant.credit >= next.cost {
                    tenant.credit -= next.cost;
                    let waiter = tenant.waiters.remove(&at)?;
                    self.waiting -= 1;
                    if tenant.waiters.is_empty() {
                        // Credit is not saved up while idle.
                        self.tenants.remove(&name);
                        self.turns.pop_front();
                    }
                    return Some(waiter);
                }
                fewest_rounds = fewest_rounds.min((next.cost - tenant.credit).div_ceil(QUANTUM));
                tenant.credit += QUANTUM;
                self.turns.rotate_left(1);
            }
            // Nobody could go in a whole round: credit the rounds it takes until someone can
            // (one of them was just credited).
            let rounds = fewest_rounds.saturating_sub(1);
            if rounds > 0 {
                for tenant in self.tenants.values_mut() {
                    tenant.credit = tenant.credit.saturating_add(rounds * QUANTUM);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> Tenant {
        Tenant::from(name)
    }

    /// Queues a waiter and returns its receiver.
    fn queue(slots: &Slots, tier: Tier, who: &str, cost: u64) -> oneshot::Receiver<Slot> {
        let (sender, receiver) = oneshot::channel();
        let mut q = slots.lock();
        q.arrivals += 1;
        let key = Key {
            tier,
            tenant: tenant(who),
            at: (q.arrivals as i128, q.arrivals),
        };
        q.insert(&key, cost, sender);
        receiver
    }

    fn take(slots: &Slots) -> Option<(Tier, u64)> {
        let mut q = slots.lock();
        q.next(slots, Instant::now()).map(|(t, w)| (t, w.cost))
    }

    #[test]
    fn tenants_take_turns_by_cost() {
        let slots = Slots::new(1);
        // A burst of ten runs from one tenant, then one from another.
        let mut receivers = Vec::new();
        for _ in 0..10 {
            receivers.push(queue(&slots, Tier::Interactive, "big", QUANTUM));
        }
        receivers.push(queue(&slots, Tier::Interactive, "small", QUANTUM / 2));
        let order: Vec<u64> = (0..11).map(|_| take(&slots).unwrap().1).collect();
        let small_at = order.iter().position(|&c| c == QUANTUM / 2).unwrap();
        assert!(small_at <= 2, "the other tenant waited for {small_at} runs");
    }

    #[test]
    fn a_dear_run_gets_its_turn_in_rounds_credited_at_once() {
        let slots = Slots::new(1);
        let _a = queue(&slots, Tier::Interactive, "a", 100 * QUANTUM);
        let _b = queue(&slots, Tier::Interactive, "b", 1);
        assert_eq!(take(&slots).unwrap().1, 1);
        assert_eq!(take(&slots).unwrap().1, 100 * QUANTUM);
        assert!(take(&slots).is_none());
    }

    #[test]
    fn bulk_gets_its_share_under_interactive_load() {
        let slots = Slots::new(4);
        let mut receivers = Vec::new();
        for _ in 0..20 {
            receivers.push(queue(&slots, Tier::Interactive, "site", 1));
        }
        for _ in 0..5 {
            receivers.push(queue(&slots, Tier::Bulk, "ingest", 1));
        }
        let tiers: Vec<Tier> = (0..8).map(|_| take(&slots).unwrap().0).collect();
        assert_eq!(
            tiers.iter().filter(|&&t| t == Tier::Bulk).count(),
            2,
            "{tiers:?}"
        );
    }

    #[test]
    fn lower_tiers_leave_a_slot_while_interactive_work_arrives() {
        let slots = Arc::new(Slots::new(2));
        let now = Instant::now();
        assert!(slots.would_start(Tier::Bulk, now));
        let first = slots.lock().grant(&slots, Tier::Bulk);
        // No interactive work lately: a batch may take both slots.
        assert!(slots.would_start(Tier::Bulk, now));
        slots.interactive_arrived(now);
        assert!(!slots.would_start(Tier::Bulk, now));
        assert!(!slots.would_start(Tier::Background, now));
        assert!(slots.would_start(Tier::Interactive, now));
        drop(first);
        assert_eq!(slots.free(), 2);
    }

    #[test]
    fn paused_background_work_does_not_start() {
        let slots = Slots::new(2);
        let now = Instant::now();
        slots.pause_background(now + Duration::from_secs(5));
        assert!(!slots.would_start(Tier::Background, now));
        assert!(slots.would_start(Tier::Bulk, now));
        assert!(slots.would_start(Tier::Background, now + Duration::from_secs(6)));
    }
}
