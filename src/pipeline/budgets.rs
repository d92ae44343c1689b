//! Tenant budgets (issue 54, `[tenants.<name>]`): a token bucket per payer in cost units,
//! kept in the maps' quotas, so its spending is exact across the nodes that share them (one
//! conditional update per charge on PostgreSQL; no per-node share to reconcile). Hits never
//! reach here.
//!
//! **Who pays** (audit #4, `config/tenants.rs`): a request presenting a token spends its
//! token's budget; an anonymous request spends its host's only where the host's entry says
//! `anonymous = true`, and otherwise a bucket of its own client address (an IPv6 client by
//! its /64, which one subscriber holds) under the `default` entry's budget. So no client can
//! spend what another's work needs: before, all anonymous requests by hash shared one bucket
//! and two misses gave everyone 429.
//!
//! **How long anyone waits**: a run is admitted while its payer's bucket is above zero and
//! stays above `-rate × limits.max_budget_wait` after taking it, so a refusal's `Retry-After` is at most
//! that wait (it was bounded only by `max_cost / rate` before: 877 s for everyone after one
//! dear run); a run costing more than the bucket refills in that time is refused outright
//! (`too_costly`) rather than admitted to push every later wait out.
//!
//! **What is charged**: a run's planned cost and the bytes downloaded to locate it (one unit
//! a byte) as it is admitted, then settled to what it spent once it ends (`settle`): a run
//! refused before it started, failed early (an SVG refused as undecodable in 12 ms had been
//! charged 128 M units) or stopped pays only for its time, at the average rate of all runs.

use std::net::IpAddr;

use crate::admission::{Asker, Payer, NOBODY};
use crate::config::budget_of;
use crate::config::tenants::{TenantBudget, DEFAULT_TENANT};
use crate::error::Error;
use crate::maps::{Bucket, Take};

use super::Pipeline;

/// What a run was charged, to settle once it has run.
#[derive(Debug)]
pub(super) struct Charge {
    payer: Payee,
    /// Units taken at admission.
    charged: u64,
}

/// A bucket that pays: its key in the quotas, its budget, and its name in metrics.
#[derive(Debug, Clone)]
struct Payee {
    key: String,
    budget: TenantBudget,
    label: String,
    /// What errors name: the tenant, or "the anonymous client".
    name: String,
}

impl Payee {
    fn bucket(&self) -> Bucket {
        Bucket {
            rate: self.budget.rate,
            burst: self.budget.burst,
        }
    }
}

/// The key an anonymous client's bucket is kept by: its address, or its /64 for IPv6 (a
/// subscriber's one allocation; keying by the whole address would give one client 2^64
/// buckets).
fn client_key(ip: IpAddr) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => format!("client:{v4}"),
        IpAddr::V6(v6) => match ipnet::Ipv6Net::new(v6, 64) {
            Ok(net) => format!("client:{}", net.trunc()),
            Err(_) => format!("client:{v6}"),
        },
    }
}

impl Pipeline {
    /// Whose bucket pays for `asker`'s work, if any does (see the module's doc).
    fn payee(&self, asker: &Asker) -> Option<Payee> {
        let tenants = &self.shared.config.tenants;
        let name = asker.tenant.to_string();
        let tenant = |budget: &TenantBudget| Payee {
            key: format!("tenant:{name}"),
            budget: *budget,
            // Unlisted tenants under `default` are named so in metrics (bounded
            // cardinality), each with its own bucket.
            label: match tenants.contains_key(&name) {
                true => name.clone(),
                false => DEFAULT_TENANT.to_string(),
            },
            name: format!("tenant `{name}`"),
        };
        match asker.payer {
            Payer::Tenant => budget_of(tenants, &name).map(tenant),
            Payer::Anonymous(client) => {
                if let Some(host) = tenants.get(&name).filter(|b| b.anonymous) {
                    return Some(tenant(host));
                }
                let (ip, budget) = (client?, tenants.get(DEFAULT_TENANT)?);
                Some(Payee {
                    key: client_key(ip),
                    budget: *budget,
                    label: NOBODY.to_string(),
                    name: "this client".to_string(),
                })
            }
        }
    }

    /// Charges `cost` units to `asker`'s payer, if it has a budget; refused while the budget
    /// could not refill what the run takes within `limits.max_budget_wait`. A maps outage
    /// charges nothing (logged): budgets pause rather than refuse every tenant's work.
    pub(super) async fn charge_budget(
        &self,
        asker: &Asker,
        cost: u64,
    ) -> Result<Option<Charge>, Error> {
        let Some(payer) = self.payee(asker) else {
            return Ok(None);
        };
        let wait = self.shared.config.limits.max_budget_wait.as_secs_f64();
        let refills = payer.budget.rate * wait;
        if cost as f64 > refills {
            self.over_budget_metric(&payer);
            return Err(Error::BeyondBudget(format!(
                "this run's cost ({cost} units) is more than the budget of {} refills in {wait} s ({} units a second): it is never admitted for it",
                payer.name, payer.budget.rate
            )));
        }
        // Admitted while the bucket is above zero (as before) and stays at most `refills`
        // below zero after this run: the longest any run of this payer's then waits for the
        // bucket to be back above zero is `limits.max_budget_wait`.
        let need = (cost as f64 - refills).max(1.0);
        self.take(&payer, need, cost as f64).await.map(|granted| {
            granted.then_some(Charge {
                payer,
                charged: cost,
            })
        })
    }

    /// Settles a run's charge to what it spent (`spent` units, at most what was charged):
    /// the difference goes back to the bucket.
    pub(super) async fn settle_budget(&self, charge: Option<Charge>, spent: u64) {
        let Some(charge) = charge else { return };
        let refund = charge.charged.saturating_sub(spent);
        if refund == 0 {
            return;
        }
        // Never refused (no level is below the lowest float).
        let _ = self.take(&charge.payer, f64::MIN, -(refund as f64)).await;
        self.shared.metrics.with(|| {
            metrics::counter!("imgcas_tenant_refunded_units_total", "tenant" => charge.payer.label.clone())
                .increment(refund);
        });
    }

    /// Refuses `asker`'s work while its payer's budget is spent, charging nothing: a batch
    /// asks before each item's download.
    pub async fn check_budget(&self, asker: &Asker) -> Result<(), Error> {
        match self.payee(asker) {
            Some(payer) => self.take(&payer, 1.0, 0.0).await.map(|_| ()),
            None => Ok(()),
        }
    }

    /// Charges a download of `bytes` that is done (a batch's: a request's download is
    /// charged with its run) to `asker`'s payer, whatever its budget holds: the next item
    /// waits for what this one spent.
    pub async fn charge_download(&self, asker: &Asker, bytes: u64) {
        if let Some(payer) = self.payee(asker) {
            // Never refused (no level is below the lowest float).
            let _ = self.take(&payer, f64::MIN, bytes as f64).await;
        }
    }

    fn over_budget_metric(&self, payer: &Payee) {
        self.shared.metrics.with(|| {
            metrics::counter!("imgcas_tenant_over_budget_total", "tenant" => payer.label.clone())
                .increment(1);
        });
    }

    /// Takes `cost` from `payer`'s bucket when it holds at least `need`: `Ok(true)` taken,
    /// `Ok(false)` when the maps did not answer (nothing taken, nothing refused).
    async fn take(&self, payer: &Payee, need: f64, cost: f64) -> Result<bool, Error> {
        let s = &self.shared;
        match s
            .maps
            .take_tokens(&payer.key, payer.bucket(), need, cost)
            .await
        {
            Ok(Take::Granted { .. }) => {
                if cost > 0.0 {
                    s.metrics.with(|| {
                        metrics::counter!("imgcas_tenant_spent_units_total", "tenant" => payer.label.clone())
                            .increment(cost as u64);
                    });
                }
                Ok(true)
            }
            Ok(Take::Refused { wait }) => {
                self.over_budget_metric(payer);
                // Bounded by construction; the cap holds even for a bucket left deeper by
                // an older rule or another node's settings.
                let cap = s.config.limits.max_budget_wait.as_secs_f64().max(1.0);
                let secs = wait.as_secs_f64().ceil().clamp(1.0, cap) as u64;
                Err(Error::OverBudget {
                    message: format!(
                        "{} has spent its budget ({} units a second, {} at once); retry in {secs} s",
                        payer.name, payer.budget.rate, payer.budget.burst
                    ),
                    retry_after_secs: secs,
                })
            }
            Err(e) => {
                tracing::warn!(payer = %payer.key, error = %e, "budget unavailable; not charged");
                Ok(false)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_keyed_by_address_and_ipv6_by_its_64() {
        let v4: IpAddr = "203.0.113.9".parse().unwrap();
        assert_eq!(client_key(v4), "client:203.0.113.9");
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::7".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_eq!(client_key(a), "client:2001:db8:1:2::/64");
        let mapped: IpAddr = "::ffff:203.0.113.9".parse().unwrap();
        assert_eq!(client_key(mapped), client_key(v4));
    }
}
