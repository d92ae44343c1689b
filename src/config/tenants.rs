//! Tenant budgets (`[tenants.<name>]`, `IMGCAS_TENANTS`): what a tenant may spend over time,
//! in admission's cost units (those of `limits.max_cost`), as a token bucket refilled at
//! `rate` units a second up to `burst`. Processing runs and downloads spend from it; hits
//! never do. A tenant not listed is unlimited unless a `default` entry is given, which then
//! holds for every tenant not listed, each with a bucket of its own.
//!
//! A budget is a tenant's to spend, and nobody else's (audit #4: anonymous requests by URL
//! spent their host's budget, and every anonymous request by hash one shared bucket, so one
//! client could lock everyone out): a token's name is spent by requests presenting it; a
//! host's entry by anonymous requests for its URLs only when it says `anonymous = true`;
//! other anonymous requests spend the `default` entry's budget per client address
//! (`pipeline/budgets.rs`).

use std::collections::BTreeMap;

use serde::Deserialize;

/// The entry that stands for every tenant not listed.
pub const DEFAULT_TENANT: &str = "default";

/// One tenant's budget.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantBudget {
    /// Cost units a second the budget refills by.
    pub rate: f64,
    /// Cost units it holds at most (what a tenant idle for a while may spend at once).
    pub burst: f64,
    /// Whether anonymous requests for this host's URLs spend it (a host's entry; off: only
    /// a token of this name does, and anonymous clients spend their own).
    #[serde(default)]
    pub anonymous: bool,
}

/// `[tenants]`: budgets by tenant name.
pub type Tenants = BTreeMap<String, TenantBudget>;

/// The budget that holds for `tenant`: its own, else the `default` entry's, else none.
pub fn budget_of<'a>(tenants: &'a Tenants, tenant: &str) -> Option<&'a TenantBudget> {
    tenants.get(tenant).or_else(|| tenants.get(DEFAULT_TENANT))
}

/// `IMGCAS_TENANTS='shop=rate=1000000&burst=50000000;default=rate=…&burst=…'`: the named
/// settings' form (`name=<options>;…`, as `IMGCAS_PRESETS`), each entry's options
/// `rate=<units a second>&burst=<units>`.
pub fn parse_env(v: &str) -> Result<Tenants, String> {
    let mut tenants = Tenants::new();
    for entry in v.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((name, options)) = entry.split_once('=') else {
            return Err(format!(
                "`{entry}` is not `name=rate=<units>&burst=<units>`"
            ));
        };
        let name = name.trim();
        let (mut rate, mut burst, mut anonymous) = (None, None, false);
        for pair in options.split('&').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((key, value)) = pair.split_once('=') else {
                return Err(format!("tenant `{name}`: `{pair}` is not `key=value`"));
            };
            let number = || {
                value
                    .trim()
                    .parse::<f64>()
                    .map_err(|_| format!("tenant `{name}`: `{key}` is not a number: `{value}`"))
            };
            match key.trim() {
                "rate" => rate = Some(number()?),
                "burst" => burst = Some(number()?),
                "anonymous" => {
                    anonymous = match value.trim().to_ascii_lowercase().as_str() {
                        "1" | "true" | "yes" | "on" => true,
                        "0" | "false" | "no" | "off" => false,
                        _ => {
                            return Err(format!(
                                "tenant `{name}`: `anonymous` is not a boolean: `{value}`"
                            ))
                        }
                    }
                }
                other => {
                    return Err(format!(
                        "tenant `{name}`: unknown setting `{other}` (rate, burst, anonymous)"
                    ))
                }
            }
        }
        let (Some(rate), Some(burst)) = (rate, burst) else {
            return Err(format!("tenant `{name}` needs both rate and burst"));
        };
        if tenants
            .insert(
                name.to_string(),
                TenantBudget {
                    rate,
                    burst,
                    anonymous,
                },
            )
            .is_some()
        {
            return Err(format!("tenant `{name}` is given twice"));
        }
    }
    Ok(tenants)
}

/// Why a budget cannot stand, if it cannot: a rate above zero (a bucket that never refills
/// would refuse its tenant forever) and a burst above zero, both finite.
pub fn check(name: &str, budget: &TenantBudget) -> Result<(), String> {
    let ok = |x: f64| x.is_finite() && x > 0.0;
    if !ok(budget.rate) || !ok(budget.burst) {
        return Err(format!(
            "tenant `{name}`: rate and burst must be finite numbers above 0"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_reads_named_budgets() {
        let t = parse_env("shop=rate=1000000&burst=50000000; default=rate=10&burst=20").unwrap();
        assert_eq!(
            t["shop"],
            TenantBudget {
                rate: 1e6,
                burst: 5e7,
                anonymous: false,
            }
        );
        let open = parse_env("shop=rate=1&burst=2&anonymous=true").unwrap();
        assert!(open["shop"].anonymous);
        assert!(parse_env("shop=rate=1&burst=2&anonymous=maybe").is_err());
        assert_eq!(budget_of(&t, "other").map(|b| b.rate), Some(10.0));
        assert_eq!(budget_of(&t, "shop").map(|b| b.burst), Some(5e7));
        assert!(budget_of(&parse_env("shop=rate=1&burst=1").unwrap(), "x").is_none());
        for bad in [
            "shop",
            "shop=rate=1",
            "shop=rate=x&burst=1",
            "shop=rate=1&burst=1&speed=2",
            "a=rate=1&burst=1;a=rate=2&burst=2",
        ] {
            assert!(parse_env(bad).is_err(), "{bad}");
        }
        assert!(check(
            "a",
            &TenantBudget {
                rate: 0.0,
                burst: 1.0,
                anonymous: false,
            }
        )
        .is_err());
        assert!(check(
            "a",
            &TenantBudget {
                rate: 1.0,
                burst: f64::NAN,
                anonymous: false,
            }
        )
        .is_err());
    }
}
