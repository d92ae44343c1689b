//! Tenant budgets (issue 54, `[tenants.<name>]`): a token bucket per tenant in cost units,
//! kept in the maps' quotas, so its spending is exact across the nodes that share them (one
//! conditional update per charge on PostgreSQL; no per-node share to reconcile, so no
//! error beyond a charge's own estimate). A run is charged its planned cost (the unit of
//! `limits.max_cost`) plus the bytes downloaded to locate it, one unit a byte, as it is
//! admitted; a tenant whose bucket is empty is refused `over_budget` until it refills, and
//! may take its bucket below zero by one run's cost (a run's cost is an estimate, and a
//! budget smaller than one run must still admit it). Hits never reach here.

use crate::admission::{Asker, Tenant};
use crate::config::{budget_of, tenants::DEFAULT_TENANT};
use crate::error::Error;
use crate::maps::{Bucket, Take};

use super::Pipeline;

impl Pipeline {
    /// Charges `cost` units to `tenant`'s budget, if it has one; refused while the budget
    /// is spent. A maps outage charges nothing (logged): budgets pause rather than refuse
    /// every tenant's work.
    pub(super) async fn charge_budget(&self, tenant: &Tenant, cost: u64) -> Result<(), Error> {
        self.take_budget(tenant, cost, 1.0).await
    }

    /// Refuses `asker`'s work while its tenant's budget is spent, charging nothing: a batch
    /// asks before each item's download.
    pub async fn check_budget(&self, asker: &Asker) -> Result<(), Error> {
        self.take_budget(&asker.tenant, 0, 1.0).await
    }

    /// Charges a download of `bytes` that is done (a batch's: a request's download is
    /// charged with its run) to `asker`'s tenant, whatever its budget holds: the next item
    /// waits for what this one spent.
    pub async fn charge_download(&self, asker: &Asker, bytes: u64) {
        // Never refused (no level is below the lowest float): the error cannot happen.
        let _ = self.take_budget(&asker.tenant, bytes, f64::MIN).await;
    }

    /// Takes `cost` from `tenant`'s bucket when it holds at least `need`.
    async fn take_budget(&self, tenant: &Tenant, cost: u64, need: f64) -> Result<(), Error> {
        let s = &self.shared;
        let name = tenant.to_string();
        let Some(budget) = budget_of(&s.config.tenants, &name) else {
            return Ok(());
        };
        // Unlisted tenants under `default` are named so in metrics (bounded cardinality),
        // each with its own bucket.
        let label = match s.config.tenants.contains_key(&name) {
            true => name.clone(),
            false => DEFAULT_TENANT.to_string(),
        };
        let bucket = Bucket {
            rate: budget.rate,
            burst: budget.burst,
        };
        let key = format!("tenant:{name}");
        match s.maps.take_tokens(&key, bucket, need, cost as f64).await {
            Ok(Take::Granted { .. }) if cost == 0 => Ok(()),
            Ok(Take::Granted { .. }) => {
                s.metrics.with(|| {
                    metrics::counter!("imgcas_tenant_spent_units_total", "tenant" => label)
                        .increment(cost);
                });
                Ok(())
            }
            Ok(Take::Refused { wait }) => {
                s.metrics.with(|| {
                    metrics::counter!("imgcas_tenant_over_budget_total", "tenant" => label)
                        .increment(1);
                });
                let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
                Err(Error::OverBudget {
                    message: format!(
                        "tenant `{name}` has spent its budget ({} units a second, {} at once); retry in {secs} s",
                        budget.rate, budget.burst
                    ),
                    retry_after_secs: secs,
                })
            }
            Err(e) => {
                tracing::warn!(tenant = %name, error = %e, "tenant budget unavailable; not charged");
                Ok(())
            }
        }
    }
}
