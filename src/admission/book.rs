//! What each tenant asked of processing, for `/metrics`: cost admitted, runs and refusals
//! per tier and tenant. The page shows the [`SHOWN`] tenants with the most cost by name and
//! the rest summed as `other`, so its label set stays bounded however many hosts send
//! images; the book itself keeps at most [`KEPT`] tenants, folding the smallest into
//! `other` when it is full.

use std::collections::HashMap;

use super::{Tenant, Tier, TIERS};

/// Tenants named on the page, per tier.
pub const SHOWN: usize = 10;
/// Tenants the book keeps by name, per tier.
const KEPT: usize = 4096;
/// The name of everyone else.
pub const OTHER: &str = "other";

/// One tenant's totals in one tier.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    /// Pixels of cost admitted.
    pub cost: u64,
    pub runs: u64,
    pub refused: u64,
}

impl Totals {
    fn add(&mut self, other: &Totals) {
        self.cost += other.cost;
        self.runs += other.runs;
        self.refused += other.refused;
    }
}

/// One line of the page: a tier, a tenant (or `other`) and its totals.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantReading {
    pub tier: &'static str,
    pub tenant: String,
    pub totals: Totals,
}

#[derive(Debug, Default)]
pub struct Book {
    tiers: [HashMap<Tenant, Totals>; TIERS],
    other: [Totals; TIERS],
}

impl Book {
    pub fn admitted(&mut self, tier: Tier, tenant: &Tenant, cost: u64) {
        let t = self.entry(tier, tenant);
        t.cost += cost;
        t.runs += 1;
    }

    pub fn refused(&mut self, tier: Tier, tenant: &Tenant) {
        self.entry(tier, tenant).refused += 1;
    }

    fn entry(&mut self, tier: Tier, tenant: &Tenant) -> &mut Totals {
        let i = tier as usize;
        if !self.tiers[i].contains_key(tenant) && self.tiers[i].len() >= KEPT {
            // Full: the half with the least cost is folded into `other`.
            let mut by_cost: Vec<(Tenant, Totals)> = self.tiers[i].drain().collect();
            by_cost.sort_by_key(|t| std::cmp::Reverse(t.1.cost));
            for (_, totals) in by_cost.split_off(KEPT / 2) {
                self.other[i].add(&totals);
            }
            self.tiers[i] = by_cost.into_iter().collect();
        }
        self.tiers[i].entry(tenant.clone()).or_default()
    }

    /// The page's lines: per tier, the [`SHOWN`] dearest tenants and `other`.
    pub fn readings(&self) -> Vec<TenantReading> {
        let mut out = Vec::new();
        for tier in Tier::ALL {
            let i = tier as usize;
            let mut by_cost: Vec<(&Tenant, &Totals)> = self.tiers[i].iter().collect();
            by_cost.sort_by(|a, b| b.1.cost.cmp(&a.1.cost).then(a.0.cmp(b.0)));
            let mut other = self.other[i];
            for (n, (tenant, totals)) in by_cost.into_iter().enumerate() {
                if n < SHOWN && &**tenant != OTHER {
                    out.push(TenantReading {
                        tier: tier.name(),
                        tenant: tenant.to_string(),
                        totals: *totals,
                    });
                } else {
                    other.add(totals);
                }
            }
            if other != Totals::default() {
                out.push(TenantReading {
                    tier: tier.name(),
                    tenant: OTHER.into(),
                    totals: other,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_the_dearest_tenants_and_sums_the_rest() {
        let mut book = Book::default();
        for n in 0..50u64 {
            let tenant = Tenant::from(format!("host{n}.example"));
            book.admitted(Tier::Interactive, &tenant, 1000 + n);
        }
        book.refused(Tier::Bulk, &Tenant::from("merchant"));
        let lines = book.readings();
        let interactive: Vec<_> = lines.iter().filter(|l| l.tier == "interactive").collect();
        assert_eq!(interactive.len(), SHOWN + 1);
        assert_eq!(interactive[0].tenant, "host49.example");
        let other = interactive.last().unwrap();
        assert_eq!(other.tenant, OTHER);
        assert_eq!(other.totals.runs, 40);
        let bulk: Vec<_> = lines.iter().filter(|l| l.tier == "bulk").collect();
        assert_eq!(bulk[0].totals.refused, 1);
    }

    #[test]
    fn a_full_book_folds_the_smallest_into_other() {
        let mut book = Book::default();
        for n in 0..(KEPT as u64 + 1) {
            book.admitted(Tier::Interactive, &Tenant::from(format!("h{n}")), n);
        }
        assert!(book.tiers[0].len() <= KEPT);
        let runs: u64 = book.readings().iter().map(|l| l.totals.runs).sum();
        assert_eq!(runs, KEPT as u64 + 1, "nothing is lost in the fold");
    }
}
